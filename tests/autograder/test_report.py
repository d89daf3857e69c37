"""The console summary after a batch and the class report (``autograder/report.py``).

* The summary: one real sandboxed batch of chapter 4 with a valid, an invalid, a
  wrong-chapter and a tampering submission, graded through ``python -m autograder
  grade`` (its ``main``); the counts and the names of the others are checked on
  results built by hand (a ``ClassResults``, what ``results.json`` holds).
* The class report: a synthetic class of 10 students — 4 normalise the softmax
  over the wrong axis, 3 forget to subtract the maximum, 3 are right — graded by
  ``grade_class`` with the real checks run in this process (``checked_grade``:
  the same ``check_report`` and messages as the sandbox, without its start-up
  cost), so ``scores.csv`` and the journal are exactly what ``grade`` writes.
"""
from __future__ import annotations

import csv
import html
import html.parser
import shutil
from dataclasses import replace
from pathlib import Path

import nbformat
import pytest

import fixtures
from autograder import report, summary
from autograder.batch import GRADE_COLUMNS, SCORE_COLUMNS, grade_class
from autograder.grading import RunSettings, grade_submission
from autograder.fingerprint import grader_fingerprint
from autograder.journal import Graded
from autograder.results import ClassResults, SubmissionGrade
from autograder.scores import ExerciseScore, NotebookScores, PartScore, ScoreError, Status, single_line
from autograder.submissions import Submission
from autograder.text import csv_text, wrong_chapter_notice
from autograder.bench import make_book, make_source_notebook
from autograder.checks.base import check_report
from autograder.cli import main

CH4, CH5 = "04_self_attention", "05_multi_head_attention"

WRONG_AXIS = """def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=0, keepdims=True))
    return e / np.sum(e, axis=0, keepdims=True)"""

NO_MAX = """def softmax(x, axis=-1):
    e = np.exp(x)
    return e / np.sum(e, axis=axis, keepdims=True)"""

SCRIPT_NAME = "<script>alert('x')"  # a folder name cannot hold the "/" of a closing tag


def _one_line(text: str, limit: int = 400) -> str:
    """A reason as ``grade_submission`` hands it over: one line, cut at 400 characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def checked_grade(source_nb, submission_nb, *, chapter=None, settings=None, hidden=True, seed=None, student=""):
    """Grade a (trusted, test-made) submission in this process with the real checks:
    the setup cell and every solution cell in one namespace, then ``check_report``
    per test cell; one ``ExerciseScore`` per test cell, as ``grade_submission`` returns them."""
    source = nbformat.read(str(source_nb), as_version=4)
    submission = nbformat.read(str(submission_nb), as_version=4)
    namespace: dict = {}
    exec(next(c.source for c in source.cells if c.cell_type == "code"), namespace)  # the setup cell
    for cell in submission.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            exec(cell.source, namespace)
    rows = []
    for cell in source.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if not meta.get("grade"):
            continue
        name = meta["grade_id"][len("test_"):]
        r = check_report(name, namespace[name], hidden=hidden, seed=seed)
        rows.append(ExerciseScore(
            student=student, chapter=chapter, exercise=name, grade_id=meta["grade_id"], score=float(r.score),
            max_score=float(meta["points"]),
            status=Status.PASSED if r.passed else (Status.PARTIAL if r.score > 0 else Status.FAILED),
            reason="" if r.passed else _one_line(r.reason()),
            parts=[PartScore(p.name, float(p.score), float(p.points), "" if p.earned else single_line(p.message),
                             "" if p.earned else single_line(p.hint)) for p in r.parts],
            notes=[single_line(n) for n in [*r.notes, *("advice (no points): " + a for a in r.advice)]],
        ))
    return NotebookScores(rows)


# --------------------------------------------------------------------------- the console summary


@pytest.mark.slow  # grades a class in the sandbox
def test_grade_prints_a_summary_naming_each_problem(tmp_path, needs_sandbox, capsys):
    book = make_book(tmp_path, [CH4, CH5])
    source4 = nbformat.read(str(book / CH4 / f"{CH4}.ipynb"), as_version=4)
    source5 = nbformat.read(str(book / CH5 / f"{CH5}.ipynb"), as_version=4)
    sub = tmp_path / "submitted"
    fixtures.write_notebook(source4, sub / "ann" / CH4 / f"{CH4}.ipynb")
    fixtures.write_notebook("{ not json", sub / "bob" / CH4 / f"{CH4}.ipynb")
    fixtures.write_notebook(source5, sub / "cat" / CH4 / f"{CH5}.ipynb")  # chapter 5, in the chapter 4 folder
    # dan's kernel exits in the last exercise, which no other calls: nothing is run again or
    # regraded after it (in softmax, the two exercises that call it would be, twice the sandbox starts)
    fixtures.write_notebook(fixtures.submission_with(source4, self_attention="import os\nos._exit(3)"),
                            sub / "dan" / CH4 / f"{CH4}.ipynb")
    out = tmp_path / "out"
    args = ["grade", str(sub), "--out", str(out), "--book", str(book), "--chapters", CH4, "--seed", "3",
            "--no-progress"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "graded 4 submission(s), reused 0 unchanged from the journal; 4 student(s)." in text
    assert ("complete: 1 · incomplete: 0 · invalid: 1 · wrong chapter: 1 · flagged: 1 · timed out: 0 · "
            "errors: 0 · not submitted: 0") in text
    assert "bob/04_self_attention: unreadable submission: the file is not valid JSON" in text
    assert f"cat/{CH4}: this is a {CH5} notebook, submitted as {CH4}" in text
    # cat is told so first on the feedback page, in the same words (text.wrong_chapter_notice)
    page = (out / "feedback" / "cat" / f"{CH4}.html").read_text(encoding="utf-8")
    assert f'<p class="invalid"><b>{html.escape(wrong_chapter_notice(CH5, CH4))}</b></p>' in page
    assert "wrong chapter" not in (out / "feedback" / "ann" / f"{CH4}.html").read_text(encoding="utf-8")
    assert "was it deleted" not in text
    assert "dan/04_self_attention self_attention: the kernel exited" in text
    for where in (out / "scores.csv", out / "grades.csv", out / "feedback", f"python -m autograder report {out}"):
        assert str(where) in text
    fingerprint = grader_fingerprint()
    assert main(args) == 0  # nothing changed: everything comes from the journal
    if grader_fingerprint() == fingerprint:  # nobody edited the grading code meanwhile
        assert "graded 0 submission(s), reused 4 unchanged from the journal" in capsys.readouterr().out

    # The class report names cat's notebook as the console does, once for the whole notebook
    # (not as a deleted solution cell per exercise), from what grading recorded: the
    # submissions folder is not read again, so moving it away changes nothing.
    recorded = {(s.student, s.chapter): s.wrong_chapter for s in ClassResults.read(out).submissions}
    assert recorded == {("ann", CH4): None, ("bob", CH4): None, ("cat", CH4): CH5, ("dan", CH4): None}
    sub.rename(tmp_path / "moved")
    assert main(["report", str(out)]) == 0
    rows = _csv(out / "report" / f"{CH4}.csv")
    whole = [(r["exercise"], r["item"], r["students"], r["of"]) for r in rows
             if r["section"] == "diagnosis" and r["exercise"] == ""]
    assert whole == [("", f"submitted the wrong chapter's notebook ({CH5})", "1", "4")]
    assert not any("was it deleted" in r["item"] for r in rows)
    page = (out / "report" / f"{CH4}.html").read_text(encoding="utf-8")
    assert f"submitted the wrong chapter&#x27;s notebook ({CH5})" in page and "was it deleted" not in page
    assert "<td>cat</td>" in page and "<td>wrong chapter</td>" in page


def _graded(student: str, chapter: str, statuses: list[str], reason: str = "why", path: bool = True) -> Graded:
    rows = [ExerciseScore(student, chapter, f"ex{i}", 1.0 if s == "passed" else 0.0, 1.0, Status(s),
                          "" if s == "passed" else reason, grade_id=f"test_ex{i}")
            for i, s in enumerate(statuses)]
    return Graded(Submission(student, chapter, Path(f"/nowhere/{student}.ipynb") if path else None), rows)


def _class_results(results: list[Graded]) -> ClassResults:
    """What ``results.json`` holds for ``results`` with nothing from a gradebook (no hand
    grades, no penalty)."""
    lines = []
    for g in results:
        total = sum(s.score for s in g.scores)
        lines.append(SubmissionGrade(g.submission.student, g.submission.chapter, g.status, score=total,
                                     max_score=sum(s.max_score for s in g.scores), raw_score=total,
                                     wrong_chapter=g.wrong_chapter))
    return ClassResults([s for g in results for s in g.scores], lines)


def test_summary_counts_and_names_timeouts_invalid_and_absent(tmp_path):
    results = [
        _graded("ok", CH4, ["passed", "passed"]),
        _graded("half", CH4, ["passed", "failed"]),
        _graded("slow", CH4, ["passed", "timeout"], reason="did not finish within 5 s (an endless loop?)"),
        _graded("crash", CH4, ["error", "passed"], reason="the kernel crashed (SIGSEGV) while running this cell"),
        _graded("gone", CH4, ["missing", "missing"], reason="no submission", path=False),
        _graded("esc\x1b[2Jape", CH4, ["invalid", "invalid"], reason="unreadable submission: the file is empty"),
    ] + [_graded(f"broken{i:02d}", CH4, ["invalid"], reason="unreadable submission") for i in range(12)]
    text = summary.summarise(_class_results(results), tmp_path, graded=10, reused=7)
    assert text.startswith("graded 10 submission(s), reused 7 unchanged from the journal; 18 student(s).")
    assert ("complete: 1 · incomplete: 3 · invalid: 13 · wrong chapter: 0 · flagged: 0 · timed out: 1 · "
            "errors: 1 · not submitted: 1") in text
    assert "crash/04_self_attention ex0: the kernel crashed (SIGSEGV)" in text
    assert "slow/04_self_attention ex1: did not finish within 5 s" in text
    assert "esc\\x1b[2Jape/04_self_attention: unreadable submission: the file is empty" in text
    assert "\x1b" not in text  # a name cannot drive the terminal
    assert "… and 3 more (see scores.csv)" in text  # 13 invalid, 10 named
    assert "gone/" not in text


def test_the_summary_is_a_view_of_the_results_the_batch_wrote(tmp_path):
    """The batch records the chapter grading found (it does not look for it), and what
    ``grade`` prints after it is read from ``results.json``, as the class report is:
    an edit of the file shows in the summary."""
    root, book = fixtures.make_course(tmp_path / "class", [CH4], students=2)
    students = sorted(p.name for p in (root / "submitted").iterdir())

    def grade_fn(source_nb, submission_nb, *, student="", chapter=None, **_):
        points = [float(c.metadata.nbgrader["points"]) for c in nbformat.read(str(source_nb), as_version=4).cells
                  if c.get("metadata", {}).get("nbgrader", {}).get("grade")]
        if student != students[0]:
            return NotebookScores([fixtures.judged_cell(student, chapter, f"test_ex{i}", p, p, Status.PASSED, "")
                                   for i, p in enumerate(points)])
        return NotebookScores([fixtures.judged_cell(student, chapter, f"test_ex{i}", 0.0, p, Status.MISSING, "none")
                               for i, p in enumerate(points)], wrong_chapter=CH5)

    out = tmp_path / "out"
    done = grade_class(root / "submitted", out, chapters=[CH4], book=book, settings=RunSettings(seed=1),
                       progress=False, grade_fn=grade_fn)
    stored = ClassResults.read(out)
    assert done.class_results() == stored
    assert [(s.student, s.wrong_chapter) for s in stored.submissions] == [(students[0], CH5), (students[1], None)]
    text = summary.summarise(done.class_results(), out, graded=done.graded, reused=done.reused)
    assert f"{students[0]}/{CH4}: this is a {CH5} notebook, submitted as {CH4}" in text
    assert "complete: 1 · incomplete: 0 · invalid: 0 · wrong chapter: 1" in text
    edited = (out / "results.json").read_text(encoding="utf-8").replace(f'"{CH5}"', '"03_positional_encoding"')
    (out / "results.json").write_text(edited, encoding="utf-8")
    text = summary.summarise(done.class_results(), out, graded=done.graded, reused=done.reused)
    assert f"{students[0]}/{CH4}: this is a 03_positional_encoding notebook" in text


def test_grading_finds_the_chapter_a_notebook_really_holds(tmp_path):
    """``grade_submission`` names the other chapter on its typed result (every caller gets
    it), from the cells it read; only when none of the graded chapter's exercises was found."""
    book = make_book(tmp_path, [CH4, CH5])
    source4 = book / CH4 / f"{CH4}.ipynb"
    five = fixtures.write_notebook(make_source_notebook(CH5), tmp_path / "renamed.ipynb")
    found = grade_submission(source4, five, chapter=CH4)  # nothing of chapter 4 to run: no sandbox
    assert isinstance(found, NotebookScores) and found.wrong_chapter == CH5
    assert {s.status for s in found.scores} == {Status.MISSING}
    plain = fixtures.write_notebook(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")]),
                                    tmp_path / "plain.ipynb")
    for path in (None, plain, fixtures.write_notebook("not json", tmp_path / "bad.ipynb")):
        assert grade_submission(source4, path, chapter=CH4).wrong_chapter is None
    # a typed result cannot name another chapter while this chapter's exercises were found
    row = found.scores[0]
    with pytest.raises(ScoreError, match="wrong_chapter '05_multi_head_attention' names another chapter"):
        NotebookScores([replace(row, status=Status.FAILED)], wrong_chapter=CH5)


# --------------------------------------------------------------------------- diagnoses


def test_messages_about_one_mistake_on_different_inputs_share_a_key():
    a = ("the output has the right shape but wrong values: largest error 0.641 at index (0, 0) (got 0.731, "
         "expected 0.09) (2x3 scores) Hint: you normalised over axis 0, not axis=-1: pass `axis` to both "
         "np.max and np.sum (with keepdims=True).")
    b = ("the output has the right shape but wrong values: largest error 0.791 at index (1, 2, 2) (got 0.88, "
         "expected 0.09) (2x3x4 scores with axis=1 (a middle axis)) Hint: you normalised over axis 2, not "
         "axis=1: pass `axis` to both np.max and np.sum (with keepdims=True).")
    overflow = "the output contains NaN (first at index (0, 0)) Hint: exp overflowed: np.exp(1e4) is inf"

    def hint(message):  # what the check kept apart as its hint (CheckFailure.hint)
        return message.split("Hint: ", 1)[1]

    assert report.diagnosis_key(a, hint(a)) == report.diagnosis_key(b, hint(b))
    assert "normalised over axis #" in report.diagnosis_key(a, hint(a))
    assert report.diagnosis_key(overflow, hint(overflow)) != report.diagnosis_key(a, hint(a))
    # "Hint:" in the text alone is not the check's hint (an exception message may say it): the head counts
    assert report.diagnosis_key(a) == "the output has the right shape but wrong values"
    # without a hint, what differs (the head), not the case's numbers
    assert (report.diagnosis_key("the output has shape (2, 3), expected (3, 2) (a 2x3 case)")
            == report.diagnosis_key("the output has shape (4,), expected (1, 4)"))
    assert report.diagnosis_key("it raised TypeError: bad thing 1 (label)") == "it raised typeerror"


# --------------------------------------------------------------------------- the class report


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    """10 students of chapter 4: 4 wrong axis, 3 without the maximum, 3 right
    (one of them named like a script tag), graded into ``out``."""
    root = tmp_path_factory.mktemp("class")
    book = make_book(root, [CH4])
    source = nbformat.read(str(book / CH4 / f"{CH4}.ipynb"), as_version=4)
    kinds = {**{f"axis{i}": WRONG_AXIS for i in range(4)}, **{f"nomax{i}": NO_MAX for i in range(3)},
             "right0": None, "right1": None, SCRIPT_NAME: None}
    for student, softmax in kinds.items():
        nb = fixtures.submission_with(source, softmax=softmax) if softmax else source
        fixtures.write_notebook(nb, root / "submitted" / student / CH4 / f"{CH4}.ipynb")
    out = root / "out"
    grade_class(root / "submitted", out, book=book, settings=RunSettings(seed=11), progress=False,
                grade_fn=checked_grade)
    return out


def _csv(path: Path) -> list[dict]:
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def test_report_names_the_class_mistakes_with_their_shares(graded_class, tmp_path, capsys):
    dest = tmp_path / "report"
    assert main(["report", str(graded_class), "--to", str(dest)]) == 0
    assert f"wrote {dest / (CH4 + '.html')}" in capsys.readouterr().out
    rows = _csv(dest / f"{CH4}.csv")
    diagnoses = [(r["exercise"], int(r["students"]), r["share"], r["item"]) for r in rows
                 if r["section"] == "diagnosis"]
    assert len(diagnoses) == 2, diagnoses  # one mistake each; later exercises were not charged again
    (ex1, n1, share1, text1), (ex2, n2, share2, text2) = diagnoses
    assert (ex1, n1, share1, ex2, n2, share2) == ("softmax", 4, "0.4000", "softmax", 3, "0.3000")
    assert "you normalised over axis 0" in text1 and "exp overflowed" in text2
    parts = {(r["exercise"], r["item"]): (int(r["students"]), int(r["of"])) for r in rows if r["section"] == "part"}
    assert parts[("softmax", "values on random inputs")] == (6, 10)  # the axis students miss it
    assert parts[("softmax", "any axis")] == (6, 10)
    assert parts[("softmax", "no overflow at 1e4")] == (3, 10)  # only the right ones
    assert all(n == 10 for (ex, _), (n, _) in parts.items() if ex != "softmax")
    scores = {r["item"]: int(r["students"]) for r in rows if r["section"] == "score"}
    assert sum(scores.values()) == 10 and scores[rows[0]["points"]] == 3  # 3 full marks

    page = (dest / f"{CH4}.html").read_text(encoding="utf-8")
    assert "<b>40%</b>" in page and "<b>30%</b>" in page
    assert "you normalised over axis 0" in page and "exp overflowed" in page
    assert page.count("<svg") == 2  # the histogram and the parts chart, inline


def test_the_page_works_offline_and_escapes_student_names(graded_class, tmp_path):
    dest = tmp_path / "report"
    report.class_report(graded_class, dest)
    page = (dest / f"{CH4}.html").read_text(encoding="utf-8")

    class Refs(html.parser.HTMLParser):
        def __init__(self):
            super().__init__()
            self.tags, self.refs = set(), []

        def handle_starttag(self, tag, attrs):
            self.tags.add(tag)
            self.refs += [(tag, k, v) for k, v in attrs if k in ("src", "href", "xlink:href", "action", "data")]

    refs = Refs()
    refs.feed(page)
    assert not refs.tags & {"script", "link", "img", "iframe", "object", "embed", "base"}, refs.tags
    assert all(v.startswith("#") for _, _, v in refs.refs), refs.refs  # only links inside the page
    assert "@import" not in page and "url(http" not in page and "@font-face" not in page
    assert "<script" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)" in page  # the name is shown, as text
    index = (dest / "index.html").read_text(encoding="utf-8")
    assert f'href="{CH4}.html"' in index


def test_the_csvs_and_the_report_are_views_of_the_typed_results(graded_class, tmp_path):
    """``scores.csv`` and ``grades.csv`` are ``results.json`` written as rows, and the report
    reads ``results.json`` alone: without the journal and the CSVs it finds the same
    diagnoses, recognised, from every part's whole message."""
    results = ClassResults.read(graded_class)
    assert (graded_class / "scores.csv").read_text(encoding="utf-8") == csv_text(SCORE_COLUMNS, results.score_rows())
    assert (graded_class / "grades.csv").read_text(encoding="utf-8") == csv_text(GRADE_COLUMNS, results.grade_rows())
    out = tmp_path / "out"
    shutil.copytree(graded_class, out, ignore=shutil.ignore_patterns(".journal", "*.csv", "report"))
    report.class_report(out)
    rows = _csv(out / "report" / f"{CH4}.csv")
    diagnoses = [(int(r["students"]), r["share"], r["item"]) for r in rows if r["section"] == "diagnosis"]
    assert [(n, share) for n, share, _ in diagnoses] == [(4, "0.4000"), (3, "0.3000")], diagnoses
    assert "you normalised over axis 0" in diagnoses[0][2] and "exp overflowed" in diagnoses[1][2]
    page = (out / "report" / f"{CH4}.html").read_text(encoding="utf-8")
    assert "no known mistake matched" not in page


def test_no_message_is_cut_short_in_the_results():
    """A reason joins every missed part's message, each whole (up to the 400 characters a
    part's message keeps): three long messages are all in the reason."""
    from autograder.checks.base import PartResult, Report
    from autograder.cells import GradedCell  # the cell's one settling rule

    messages = [f"part {i}: " + "why " * 95 for i in range(3)]  # about 390 characters each
    graded = GradedCell("softmax", "test_softmax", 3.0, {})
    graded.settle_report(Report("softmax", [PartResult(f"p{i}", 1.0, False, 1, 1, m) for i, m in enumerate(messages)]))
    assert all(m.strip() in graded.result.reason for m in messages), graded.result.reason


def test_a_hand_grade_counts_in_the_scores_and_the_checks_diagnosis_stays(graded_class, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(graded_class, out, ignore=shutil.ignore_patterns("report"))
    results = ClassResults.read(out)
    for e in results.exercises:
        if (e.student, e.exercise) == ("axis0", "softmax"):
            e.auto_score, e.score = e.score, e.max_score  # given full marks by hand; the checks gave 0
    results.write(out)
    report.class_report(out)
    table = _csv(out / "report" / f"{CH4}.csv")
    scores = {r["item"]: int(r["students"]) for r in table if r["section"] == "score"}
    assert scores == {"7": 3, "9": 3, "10": 4}
    axis = [r for r in table if r["section"] == "diagnosis" and "normalised over axis 0" in r["item"]]
    assert [(r["students"], r["share"]) for r in axis] == [("4", "0.4000")]  # the checks' diagnosis stays
    assert len([r for r in table if r["section"] == "diagnosis"]) == 2


def test_a_folder_that_is_not_a_grade_output_gets_one_line(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "has no results.json" in err and "python -m autograder grade" in err
    (tmp_path / "results.json").write_text("name,grade\nann,3\n", encoding="utf-8")
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "results.json is not JSON" in err
    (tmp_path / "results.json").write_text('{"version": 0}', encoding="utf-8")
    assert main(["report", str(tmp_path)]) == 2
    assert "is of version 0" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_the_page_tells_a_grading_problem_a_stub_and_a_penalty_apart():
    """Rows as ``load_rows`` reads them: a crash is not called a mistake, an untouched
    stub comes after the real mistakes, a late penalty and a hand grade show in the
    final totals (halves get their own bar) and in the students' table."""
    def row(student, exercise, score, status, message="", auto=None):
        checks = score if auto is None else auto  # what the parts earned; a hand grade is the score's
        parts = [PartScore("values", checks, 2.0, "" if checks >= 2 else message)] if status != "error" else []
        return ExerciseScore(student, CH4, exercise, score, 2.0, status, message, parts, auto_score=auto)

    stub = "not implemented yet: replace `raise NotImplementedError()` with your code"
    rows = [row("ann", "softmax", 2.0, "passed"), row("ann", "self_attention", 2.0, "passed"),
            row("bob", "softmax", 0.0, "failed", stub), row("bob", "self_attention", 0.0, "failed", stub),
            row("cat", "softmax", 0.0, "error", "the grader failed: ImportError: no module"),
            row("cat", "self_attention", 1.5, "failed", "the output has shape (2,), expected (3,)", auto=0.0)]
    grades = {("ann", CH4): SubmissionGrade("ann", CH4, "complete", late_seconds=5400.0, penalty=0.5),
              ("bob", CH4): SubmissionGrade("bob", CH4, "incomplete"), ("cat", CH4): SubmissionGrade("cat", CH4, "incomplete")}
    s = report.chapter_summary(CH4, rows, grades)
    assert s.totals == {"ann": (3.5, 4.0), "bob": (0.0, 4.0), "cat": (1.5, 4.0)}
    assert [d.not_attempted for d in s.diagnoses][-2:] == [True, True]  # the stubs come last
    assert [(d.exercise, d.not_judged) for d in s.diagnoses if d.not_judged] == [("softmax", "error")]
    assert s.missed["bob"] == ["softmax: not implemented yet", "self_attention: not implemented yet"]
    assert s.adjusted["ann"] == ["1 h 30 min late: 0.5 point(s) off"]
    assert s.adjusted["cat"] == ["self_attention: 1.5/2 by hand (the checks gave 0)"]
    page = report.render_html(s, "scores.csv")
    assert 'the grader failed <span class="muted">(no check judged the answer: error)</span>' in page
    assert "what differs; no known mistake matched" in page  # the shape message of cat's self_attention
    assert page.count("(the released stub, left as it was)") == 2
    assert "hand grades and late penalties included (1 graded by hand, 1 late)" in page
    headlines = page.split("<table>")[0]
    assert "not implemented yet" not in headlines  # the headlines name mistakes, not empty answers
    counts = [int(c) for c in __import__("re").findall(r"<b>(\d+)%</b>", headlines)]
    assert counts and all(c == 33 for c in counts)
