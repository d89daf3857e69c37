"""The class report's term figures: lateness and resubmissions per chapter, the trends of
each student and each graded part across chapters; self-contained SVG, no request out."""
from __future__ import annotations

import re

from autograder.regrades import Change, append_log
from autograder.report import class_report
from autograder.results import ClassResults, ExerciseScore, PartScore, SubmissionGrade
from autograder.term_plots import late_buckets, part_trends, resubmissions

CH4, CH5 = "04_self_attention", "05_multi_head_attention"


def _exercise(student, chapter, exercise, earned: dict[str, bool]) -> ExerciseScore:
    parts = [PartScore(name, 1.0 if ok else 0.0, 1.0, "" if ok else "wrong values") for name, ok in earned.items()]
    score = sum(p.score for p in parts)
    return ExerciseScore(student, chapter, exercise, score, float(len(parts)),
                         "passed" if score == len(parts) else "partial", "", parts, auto_score=score)


def _results() -> ClassResults:
    r = ClassResults()
    # ch4: values earned by 3 of 4, shapes by all; ch5: values by 1 of 4, shapes by all
    for i, student in enumerate(["ann", "bob", "cy", "dee"]):
        r.exercises.append(_exercise(student, CH4, "softmax", {"shapes": True, "values on random inputs": i < 3}))
        r.exercises.append(_exercise(student, CH5, "split_heads", {"shapes": True, "values on random inputs": i < 1,
                                                                   "named errors": True}))
    late = {("ann", CH4): (0, 86400.0, 0), ("bob", CH4): (3600.0, 0, 0), ("cy", CH4): (0, 0, 2),
            ("dee", CH4): (5 * 86400.0, 0, 0)}
    for e in r.exercises:
        if e.exercise in ("softmax", "split_heads"):
            lat, ext, days = late.get((e.student, e.chapter), (0, 0, 0))
            r.submissions.append(SubmissionGrade(e.student, e.chapter, "complete", e.score, e.max_score, e.score,
                                                 lat, 0.0, "sha", ext, days))
    return r


def test_late_buckets_resubmissions_and_part_trends(tmp_path):
    from autograder.report import chapter_summary

    results = _results()
    grades = {(s.student, s.chapter): s for s in results.submissions}
    ch4 = chapter_summary(CH4, [e for e in results.exercises if e.chapter == CH4], grades)
    ch5 = chapter_summary(CH5, [e for e in results.exercises if e.chapter == CH5], grades)
    # on time, extension or late days, <1 day, 1-3 days, >3 days
    assert late_buckets(ch4, grades) == [0, 2, 1, 0, 1]
    assert late_buckets(ch5, grades) == [4, 0, 0, 0, 0]
    trends = part_trends([ch4, ch5])
    assert trends == {"shapes": [1.0, 1.0], "values on random inputs": [0.75, 0.25]}  # 'named errors' only once
    log = [{"changes": [Change("bob", CH4, "softmax", 1, 0, 1, reasons=["new submission"]),
                        Change("bob", CH4, "other", 1, 0, 1, reasons=["new submission"])]},
           {"changes": [Change("bob", CH4, "softmax", 0, 1, 1, reasons=["new submission", "checks: …"]),
                        Change("cy", CH4, "softmax", 0, 1, 1, reasons=["hand grade 1"])]}]
    assert resubmissions(log, CH4) == {"bob": 2}  # one per run, whatever the exercises


def test_report_pages_have_the_term_figures_and_stay_self_contained(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    _results().write(out)
    append_log(out, [Change("bob", CH4, "softmax", 1.0, 0.0, 1.0, "passed", "partial", ["new submission"])],
               reason="regrade", command="grade")
    written = class_report(out)
    names = [p.name for p in written]
    assert names[-2:] == ["index.html", "term.html"]
    chapter = (out / "report" / f"{CH4}.html").read_text(encoding="utf-8")
    assert "<h2>Late and resubmitted</h2>" in chapter
    assert "0 on time, 2 on time by an extension or late days (ann: extension 1 d; cy: 2 late day(s)), 2 late" \
        in chapter
    assert re.search(r'aria-label="Lateness and resubmissions of 04_self_attention: on time 0, extension or late '
                     r'days 2, &lt; 1 day late 1, 1-3 days late 0, &gt; 3 days late 1"', chapter)
    quiet = (out / "report" / f"{CH5}.html").read_text(encoding="utf-8")  # all on time, nobody resubmitted
    assert "All 4 handed in on time" in quiet and "Lateness and resubmissions" not in quiet
    term = (out / "report" / "term.html").read_text(encoding="utf-8")
    assert term.count("<svg") == 2
    assert "values on random inputs" in term.split("Each graded part")[1].split("<h2>Students")[0] or \
        'aria-label="Share of students who earned each recurring graded part, chapter by chapter: shapes, values ' \
        'on random inputs"' in term
    assert "2 late day(s)" in term
    for page in (chapter, term, (out / "report" / "index.html").read_text(encoding="utf-8")):
        assert "<script" not in page and not re.search(r"(src|href)=\"(https?:)?//", page)
    assert 'href="term.html"' in (out / "report" / "index.html").read_text(encoding="utf-8")


def test_the_term_page_names_the_roster_and_who_is_missing(tmp_path):
    from autograder.cli import main

    out = tmp_path / "out"
    out.mkdir()
    _results().write(out)
    roster = tmp_path / "roster.csv"
    roster.write_text("id,name,section\nann,Ann Arbor,A\nbob,Bob <b>Ross</b>,B\nzoe,Zoe Zed,A\n", encoding="utf-8")
    assert main(["report", str(out), "--roster", str(roster)]) == 0
    term = (out / "report" / "term.html").read_text(encoding="utf-8")
    assert "<td>Ann Arbor</td><td>A</td>" in term and "Bob &lt;b&gt;Ross&lt;/b&gt;" in term
    assert "In the roster, nothing handed in: zoe." in term
    assert "Graded but not in the roster (no LMS can take their grades): cy, dee." in term
    assert term.count("not in the roster</td>") == 2
    roster.write_text("name\nAnn\n", encoding="utf-8")
    assert main(["report", str(out), "--roster", str(roster)]) == 2
