"""Extensions, late days and the regrade record, through the batch and the CLI."""
from __future__ import annotations

import csv
import datetime
import json

import pytest

from autograder import batch
from autograder.cli import main
from autograder.extensions import Extension, ExtensionsError, open_extensions, read_extensions
from autograder.grading import RunSettings
from autograder.scores import NotebookScores, PartScore, Status
from autograder.regrades import diff, read_log, render_html
from autograder.results import ClassResults

from fixtures import judged_cell, make_course, write_notebook

CHAPTERS = ["04_self_attention", "05_multi_head_attention"]
DUE = {"04_self_attention": "2026-11-20 17:00:00 UTC", "05_multi_head_attention": "2026-11-27 17:00:00 UTC"}


def full_marks(source_nb, submission_nb, *, chapter=None, settings=None, hidden=True, seed=None, student=""):
    """Every exercise full marks when submitted, unless its cell says '# a bug'."""
    source = json.loads(open(source_nb, encoding="utf-8").read())
    text = open(submission_nb, encoding="utf-8").read() if submission_nb else ""
    rows = []
    for c in source["cells"]:
        meta = c.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade"):
            name, points = meta["grade_id"][5:], float(meta["points"])
            if submission_nb is None:
                rows.append(judged_cell(student, chapter, meta["grade_id"], 0.0, points, Status.MISSING, "not submitted"))
            elif f"# a bug in {name}" in text:
                rows.append(judged_cell(student, chapter, meta["grade_id"], 0.0, points, Status.FAILED, "wrong values",
                                        parts=[PartScore("values", 0.0, points, "wrong")]))
            else:
                rows.append(judged_cell(student, chapter, meta["grade_id"], points, points, Status.PASSED, "",
                                        parts=[PartScore("values", points, points)]))
    return NotebookScores(rows)


@pytest.fixture
def term(tmp_path):
    root, book = make_course(tmp_path / "course", CHAPTERS, students=3)
    sub = tmp_path / "submitted"
    for student in ("ann", "bob", "cy"):
        for chapter in CHAPTERS:
            source = book / chapter / f"{chapter}.ipynb"
            write_notebook(open(source, encoding="utf-8").read(), sub / student / chapter / f"{chapter}.ipynb")
    stamps = {  # ann: 1 h late on ch4 (extension covers it), 30 h late on ch5 (2 late days)
        ("ann", "04_self_attention"): "2026-11-20 18:00:00 UTC",
        ("ann", "05_multi_head_attention"): "2026-11-28 23:00:00 UTC",
        # bob: 3 days late on ch4: more than his 2 late days: late as usual, none spent
        ("bob", "04_self_attention"): "2026-11-23 18:00:00 UTC",
        ("bob", "05_multi_head_attention"): "2026-11-27 12:00:00 UTC",
        ("cy", "04_self_attention"): "2026-11-20 10:00:00 UTC",
        ("cy", "05_multi_head_attention"): "2026-11-27 18:00:00 UTC",  # 1 h late: 1 late day
    }
    for (student, chapter), stamp in stamps.items():
        (sub / student / chapter / "timestamp.txt").write_text(stamp + "\n", encoding="utf-8")
    ext = tmp_path / "extensions.csv"
    ext.write_text("student,chapter,due\nann,04_self_attention,2026-11-21 17:00:00 UTC\n", encoding="utf-8")
    return sub, book, ext


def _grade(sub, out, book, chapter, extensions, late_days, **kwargs):
    """Grade one chapter with its due date (None: every chapter, each keeping its due date)."""
    from traitlets.config import Config

    config = Config()
    config.LateSubmissionPlugin.penalty_method = "zero"
    return batch.grade_class(sub, out, book=book, settings=RunSettings(seed=3), progress=False, grade_fn=full_marks,
                             chapters=[chapter] if chapter else None,
                             gradebook=batch.GradebookTarget(duedate=DUE[chapter] if chapter else None, config=config,
                                                             extensions=tuple(extensions), late_days=late_days),
                             **kwargs)


def test_extensions_and_late_days_reach_grades(term, tmp_path):
    sub, book, ext_file = term
    extensions = read_extensions(ext_file)
    out = tmp_path / "out"
    for chapter in CHAPTERS:  # one chapter per run, as a term goes: one gradebook, each chapter's due date
        _grade(sub, out, book, chapter, extensions, 2)
    _grade(sub, out, book, None, extensions, 2)  # the term's results: every chapter (from the journal)
    results = ClassResults.read(out)
    g = {(s.student, s.chapter): s for s in results.submissions}
    ann4, ann5 = g["ann", "04_self_attention"], g["ann", "05_multi_head_attention"]
    assert ann4.extension_seconds == 86400 and ann4.late_days_used == 0 and ann4.penalty == 0
    assert ann5.late_days_used == 2 and ann5.penalty == 0 and ann5.score == ann5.max_score
    bob4 = g["bob", "04_self_attention"]
    assert bob4.late_days_used == 0 and bob4.late_seconds == 3 * 86400 + 3600 and bob4.score == 0
    cy5 = g["cy", "05_multi_head_attention"]
    assert cy5.late_days_used == 1 and cy5.late_seconds == 0
    rows = {(r["student_id"], r["assignment"]): r for r in csv.DictReader((out / "grades.csv").open())}
    assert rows["ann", "04_self_attention"]["late_seconds"] == "0"  # grades.csv is after the extension
    assert rows["bob", "04_self_attention"]["penalty"] == rows["bob", "04_self_attention"]["raw_score"]
    # a second run spends nothing twice
    _grade(sub, out, book, None, extensions, 2, force=True)
    again = {(s.student, s.chapter): s for s in ClassResults.read(out).submissions}
    assert again["ann", "05_multi_head_attention"].late_days_used == 2
    # without a budget, ann's chapter 5 is late and gets nbgrader's zero
    _grade(sub, out, book, None, extensions, 0)
    none_left = {(s.student, s.chapter): s for s in ClassResults.read(out).submissions}
    assert none_left["ann", "05_multi_head_attention"].score == 0


def test_extensions_file_is_checked_by_line(tmp_path):
    path = tmp_path / "ext.csv"
    path.write_text("student,chapter,due\nann,04_self_attention,tomorrow\n", encoding="utf-8")
    with pytest.raises(ExtensionsError, match="line 2"):
        read_extensions(path)
    path.write_text("student,chapter,due\nann,04,2026-11-21 17:00 UTC\nann,04,2026-11-22 17:00 UTC\n", encoding="utf-8")
    with pytest.raises(ExtensionsError, match="line 3: ann already has an extension on 04"):
        read_extensions(path)
    path.write_text("who,chapter\n", encoding="utf-8")
    with pytest.raises(ExtensionsError, match="student,chapter,due"):
        read_extensions(path)


def test_release_refuses_while_an_earlier_extension_is_open(tmp_path, capsys):
    order = ["04_self_attention", "05_multi_head_attention", "06_masking"]
    now = datetime.datetime(2026, 11, 21, 12, 0)
    exts = [Extension("ann", "04_self_attention", datetime.datetime(2026, 11, 22, 17, 0), 2),
            Extension("bob", "04_self_attention", datetime.datetime(2026, 11, 20, 17, 0), 3),
            Extension("cy", "05_multi_head_attention", datetime.datetime(2026, 11, 30), 4)]
    found = open_extensions(exts, ["05_multi_head_attention"], order, now)
    assert [e.student for e in found["05_multi_head_attention"]] == ["ann"]  # bob's has ended
    assert open_extensions(exts, ["04_self_attention"], order, now) == {}
    assert [e.student for e in open_extensions(exts, ["06_masking"], order, now)["06_masking"]] == ["ann", "cy"]

    ext = tmp_path / "ext.csv"
    ext.write_text("student,chapter,due\nann,04_self_attention,2999-01-01 00:00:00 UTC\n", encoding="utf-8")
    code = main(["release", "--out", str(tmp_path / "rel"), "05_multi_head_attention", "--extensions", str(ext)])
    err = capsys.readouterr().err
    assert code == 1 and "release refused" in err and "ann (04_self_attention until 2999-01-01" in err
    assert not (tmp_path / "rel").exists()


def test_regrade_log_and_diff(term, tmp_path, capsys):
    sub, book, _ = term
    out = tmp_path / "out"
    chapter = "04_self_attention"
    _grade(sub, out, book, chapter, [], None)
    before = ClassResults.read(out)
    # bob resubmits with a bug; a grader's hand grade comes later
    nb = json.loads((sub / "bob" / chapter / f"{chapter}.ipynb").read_text())
    for cell in nb["cells"]:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "softmax":
            cell["source"] = "".join(cell["source"]) + "\n# a bug in softmax"
    (sub / "bob" / chapter / f"{chapter}.ipynb").write_text(json.dumps(nb))
    _grade(sub, out, book, chapter, [], None)
    after = ClassResults.read(out)
    changes = diff(before, after)
    assert [(c.student, c.exercise) for c in changes] == [("bob", "softmax")]
    change = changes[0]
    assert change.old == change.max_score and change.new == 0
    assert "new submission" in change.reasons and any(r.startswith("checks: values") for r in change.reasons)
    assert "bob · 04_self_attention · softmax:" in change.line()

    # through the CLI: --diff between two outputs, and the page from the log
    old_file = tmp_path / "old.json"
    old_file.write_text(before.to_json(), encoding="utf-8")
    assert main(["regrades", "--diff", str(old_file), str(out)]) == 0
    printed = capsys.readouterr().out
    assert "bob · 04_self_attention · softmax" in printed and "1 changed score(s)" in printed
    from autograder.regrades import append_log

    append_log(out, changes, reason="regrade request #3 <b>", command="grade")
    assert main(["regrades", str(out)]) == 0
    page = (out / "report" / "regrades.html").read_text()
    assert "regrade request #3 &lt;b&gt;" in page and "softmax" in page and "new submission" in page
    assert read_log(out)[-1]["changes"][0].student == "bob"
    assert "no grade run recorded" in render_html([])
    # a chapter graded on its own run is not a change of the others, nor its first grading a regrade
    only4 = ClassResults([e for e in after.exercises if e.chapter == chapter],
                         [s for s in after.submissions if s.chapter == chapter])
    other = ClassResults([type(e)(**{**e.__dict__, "chapter": "05_multi_head_attention"}) for e in only4.exercises],
                         [type(s)(**{**s.__dict__, "chapter": "05_multi_head_attention"}) for s in only4.submissions])
    assert diff(only4, other) == [] and diff(other, only4) == []


def test_autograde_in_an_nbgrader_course_applies_them_too(term, tmp_path):
    from autograder.course import autograde

    sub, book, ext_file = term
    root = tmp_path / "course"
    chapter = "04_self_attention"
    (root / "source" / chapter).mkdir(parents=True)
    (root / "source" / chapter / f"{chapter}.ipynb").write_bytes((book / chapter / f"{chapter}.ipynb").read_bytes())
    (root / "nbgrader_config.py").write_text('c = get_config()\nc.CourseDirectory.course_id = "demo"\n'
                                            'c.LateSubmissionPlugin.penalty_method = "zero"\n', encoding="utf-8")
    import shutil

    for student in ("ann", "bob", "cy"):
        shutil.copytree(sub / student / chapter, root / "submitted" / student / chapter)
    autograde(chapter, course=root, duedate=DUE[chapter], progress=False, grade_fn=full_marks,
              extensions=read_extensions(ext_file), late_days=2, execute=False)
    rows = {r["student_id"]: r for r in csv.DictReader((root / "grades" / chapter / "grades.csv").open())}
    assert rows["ann"]["late_seconds"] == "0" and rows["ann"]["score"] == rows["ann"]["max_score"]  # extension
    assert rows["bob"]["late_seconds"] == str(3 * 86400 + 3600) and rows["bob"]["score"] == "0"  # beyond 2 days
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", "demo") as gb:  # nbgrader's own record of it
        assert gb.find_submission(chapter, "ann").extension.total_seconds() == 86400
