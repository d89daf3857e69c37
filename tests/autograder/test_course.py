"""``python -m autograder autograde`` in an nbgrader course, checked through nbgrader's own tools.

A course is built in a temporary folder the way an instructor lays one out
(``nbgrader_config.py``, ``source/<chapter>/<chapter>.ipynb`` from this repository's
chapter 1, ``submitted/<student>/<chapter>/`` with ``timestamp.txt`` as
``nbgrader collect`` writes it) for three students: the reference notebook (full
marks), the released notebook (zero) and one whose ``rnn_forward`` restarts every
step from ``h0`` (a known partial mistake: 2 of its 4 points). It is graded once,
in the real sandbox; each test works on its own copy. nbgrader's ``NbGraderAPI``
(the formgrader's), its feedback generator and ``nbgrader export`` then read the
result. The submissions are not executed for display here (``execute=False``: that
run is tested in ``test_nbgrader_formgrader.py`` on a lighter chapter 1).
"""
from __future__ import annotations

import copy
import csv
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import fixtures
from autograder.cli import main
from autograder.course import autograde, load_course
from autograder.grading import RunSettings
from autograder.book import chapter_ids
from autograder.release import student_version
from autograder.scores import ExerciseScore, Status
from autograder.summary import summarise

pytestmark = pytest.mark.slow  # an nbgrader course autograded (its fixture: 33 s and more)

REPO = Path(__file__).resolve().parents[2]
CH = "01_rnn_limitations"
RESTARTS_FROM_H0 = '''import numpy as np


def rnn_forward(x, h0, W_xh, W_hh, b_h):
    return np.tanh(x @ W_xh + h0 @ W_hh + b_h)  # every step restarts from h0
'''
STAMPS = {"ann": "2026-11-20 10:00:00.000000 UTC", "bob": "2026-11-20 11:00:00.000000 UTC",
          "cat": "2026-11-20 12:00:00.000000 UTC"}
WANT = {"ann": 8.0, "bob": 0.0, "cat": 6.0}  # of 8: rnn_forward 4 + hidden_state_jacobian_norms 4

# A subtract-per-hour policy as nbgrader's docs write one: a LateSubmissionPlugin subclass.
PER_HOUR_CONFIG = '''
import math

from nbgrader.plugins import LateSubmissionPlugin


class OnePointPerHour(LateSubmissionPlugin):
    """One point off per started hour late."""

    def late_submission_penalty(self, student_id, score, total_seconds_late):
        return float(math.ceil(total_seconds_late / 3600))


c.AssignLatePenalties.plugin_class = OnePointPerHour
'''


def make_course(root: Path) -> Path:
    """An nbgrader course with chapter 1 and three submissions (see the module docstring)."""
    (root / "source" / CH).mkdir(parents=True)
    shutil.copy(REPO / "book" / CH / f"{CH}.ipynb", root / "source" / CH / f"{CH}.ipynb")
    (root / "source" / CH / "data.txt").write_text("a file the notebook reads\n", encoding="utf-8")
    (root / "nbgrader_config.py").write_text('c = get_config()\nc.CourseDirectory.course_id = "demo"\n',
                                            encoding="utf-8")
    src = nbformat.read(str(REPO / "book" / CH / f"{CH}.ipynb"), as_version=4)
    notebooks = {"ann": fixtures.reference_submission(src),
                 "bob": student_version(copy.deepcopy(src), CH),
                 "cat": fixtures.submission_with(src, rnn_forward=RESTARTS_FROM_H0)}
    for student, nb in notebooks.items():
        folder = root / "submitted" / student / CH
        fixtures.write_notebook(nb, folder / f"{CH}.ipynb")
        (folder / "timestamp.txt").write_text(STAMPS[student] + "\n", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def graded(tmp_path_factory, needs_sandbox):
    """The course, autograded once in the sandbox; ``(root, CourseReport)``.

    The grading code's fingerprint (part of every journal key) is pinned for the
    module, so that an edit of the working tree while the tests run cannot pass
    for a reason to regrade."""
    from autograder import batch

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(batch, "grader_fingerprint", lambda: "pinned for test_course")
        root = make_course(tmp_path_factory.mktemp("course") / "course")
        yield root, autograde(CH, course=root, settings=RunSettings(seed=11), progress=False, execute=False)


@pytest.fixture
def course(graded, tmp_path) -> Path:
    """A private copy of the graded course (gradebook, journal, autograded/ and all)."""
    return Path(shutil.copytree(graded[0], tmp_path / "course"))


def _api(root: Path):
    from nbgrader.apps.api import NbGraderAPI

    c = load_course(root)
    return NbGraderAPI(coursedir=c.coursedir, config=c.config)


def _read(path: Path) -> dict[str, dict]:
    with open(path, encoding="utf-8", newline="") as fh:
        return {r["student_id"]: r for r in csv.DictReader(fh)}


def _export(root: Path) -> dict[str, dict]:
    """``nbgrader export`` run as an instructor runs it, in the course folder."""
    subprocess.run([sys.executable, "-m", "nbgrader", "export", "--to", "export.csv"], cwd=root, check=True,
                   capture_output=True, timeout=120)
    return _read(root / "export.csv")


def _report(root: Path, *args: str) -> tuple[list[dict], str]:
    """``python -m autograder report`` of the course's chapter: its CSV rows and its page."""
    assert main(["report", *args]) == 0
    folder = root / "grades" / CH / "report"
    with open(folder / f"{CH}.csv", encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return rows, (folder / f"{CH}.html").read_text(encoding="utf-8")


def _section(rows: list[dict], section: str) -> list[dict]:
    return [r for r in rows if r["section"] == section]


def _test_cells(path: Path) -> dict:
    nb = nbformat.read(str(path), as_version=4)
    return {c.metadata.nbgrader["grade_id"]: c for c in nb.cells
            if c.get("metadata", {}).get("nbgrader", {}).get("grade")}


# --------------------------------------------------------------------------- nbgrader's layout and gradebook


def test_every_submission_is_autograded_for_the_formgrader(graded):
    from nbgrader.utils import determine_grade

    root, report = graded
    assert report.batch.graded == 3
    assert {s: t for (s, _), (t, _) in report.batch.totals().items()} == WANT
    assert (root / "gradebook.db").is_file()  # the course's own gradebook (its default db_url)
    api = _api(root)
    assert api.get_autograded_students(CH) == set(WANT)
    subs = {s["student"]: s for s in api.get_submissions(CH)}
    assert {s: (x["autograded"], x["score"], x["max_score"]) for s, x in subs.items()} == \
        {s: (True, w, 8.0) for s, w in WANT.items()}
    notebooks = api.get_notebooks(CH)
    assert [(n["name"], n["num_submissions"], n["max_score"]) for n in notebooks] == [(CH, 3, 8.0)]
    listed = {s["student"]: s for s in api.get_notebook_submissions(CH, CH)}
    assert {s: x["score"] for s, x in listed.items()} == WANT
    assert listed["ann"]["failed_tests"] is False and listed["cat"]["failed_tests"] is True

    with api.gradebook as gb:
        for student in WANT:
            folder = root / "autograded" / student / CH
            assert (folder / "timestamp.txt").read_text(encoding="utf-8").strip() == STAMPS[student]
            assert (folder / "data.txt").is_file()  # the source folder's files, as nbgrader copies them
            for grade_id, cell in _test_cells(folder / f"{CH}.ipynb").items():
                # nbgrader's own reading of the test cell's outputs gives the gradebook's score
                auto = gb.find_grade(grade_id, CH, CH, student).auto_score
                assert determine_grade(cell)[0] == auto, (student, grade_id)
    cat = _test_cells(root / "autograded" / "cat" / CH / f"{CH}.ipynb")["test_rnn_forward"]
    kinds = [o.output_type for o in cat.outputs]
    assert kinds == ["stream", "execute_result"] and cat.outputs[1].data["text/plain"] == "2"
    assert "✗ recurrence over T steps (0/2)" in cat.outputs[0].text and "restarted from h0" in cat.outputs[0].text
    bob = _test_cells(root / "autograded" / "bob" / CH / f"{CH}.ipynb")["test_rnn_forward"]
    assert [o.output_type for o in bob.outputs] == ["error"]  # the formgrader shows a failed test
    ann = _test_cells(root / "autograded" / "ann" / CH / f"{CH}.ipynb")["test_rnn_forward"]
    assert [o.output_type for o in ann.outputs] == ["stream"] and ann.outputs[0].text.startswith("✓ rnn_forward")


def test_generate_feedback_and_export_agree_with_grades_csv(course):
    api = _api(course)
    result = api.generate_feedback(CH)
    assert result["success"], result.get("log")
    page = (course / "feedback" / "cat" / CH / f"{CH}.html").read_text(encoding="utf-8")
    assert "restarted from h0" in page  # the verdict and hint reach nbgrader's own feedback
    grades = _read(course / "grades" / CH / "grades.csv")
    exported = _export(course)
    assert set(exported) == set(grades) == set(WANT)
    for student, row in grades.items():
        ex = exported[student]
        assert float(row["score"]) == float(ex["score"]) == WANT[student]
        assert float(row["raw_score"]) == float(ex["raw_score"])
        assert float(row["max_score"]) == float(ex["max_score"]) == 8.0
        assert float(row["penalty"]) == float(ex["late_submission_penalty"]) == 0.0


def test_an_unreadable_submission_is_autograded_as_the_released_notebook(course):
    """The formgrader still shows the verdicts; the reference answers do not leak into
    autograded/ (nbgrader's generate_feedback would show them to the student)."""
    from nbgrader.utils import determine_grade

    from autograder.journal import Graded
    from autograder.submissions import Submission
    from autograder.course import autograded_notebook

    broken = course / "submitted" / "dan" / CH / f"{CH}.ipynb"
    broken.parent.mkdir(parents=True)
    broken.write_text("{ not json", encoding="utf-8")
    rows = [ExerciseScore("dan", CH, n, 0.0, 4.0, Status.INVALID, "the notebook cannot be read", grade_id="test_" + n)
            for n in ("rnn_forward", "hidden_state_jacobian_norms")]
    source = course / "source" / CH / f"{CH}.ipynb"
    nb = autograded_notebook(Graded(Submission("dan", CH, broken), rows), source, load_course(course).db_url)
    def answers(notebook):
        return {c.metadata.nbgrader["grade_id"]: c.source for c in notebook.cells
                if c.get("metadata", {}).get("nbgrader", {}).get("solution")}

    released = student_version(nbformat.read(str(source), as_version=4), CH)
    assert answers(nb) == answers(released) != {}  # the stubs, never the reference answers
    tests = [c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade")]
    assert len(tests) == 2
    for cell in tests:
        assert determine_grade(cell)[0] == 0
        assert cell.outputs[0].ename == "InvalidNotebook" and "cannot be read" in "\n".join(cell.outputs[0].traceback)


# --------------------------------------------------------------------------- the class report


def test_the_class_report_reads_the_course_grades_folder(graded, course):
    """``autograde`` ends by naming the report command of its output folder; on it,
    the report names cat's known mistake with its share of the class."""
    root, report = graded
    out = course / "grades" / CH
    done = report.batch
    summary = summarise(done.class_results(), done.out, graded=done.graded, reused=done.reused)
    assert f"python -m autograder report {root / 'grades' / CH}" in summary
    rows, page = _report(course, str(out))
    mistakes = [(r["exercise"], r["students"], r["of"], r["share"], r["item"]) for r in _section(rows, "diagnosis")]
    restart = [m for m in mistakes if "every step restarted from h0" in m[4]]
    assert [m[:4] for m in restart] == [("rnn_forward", "1", "3", "0.3333")]
    assert mistakes[0] == restart[0]  # the one real mistake comes before bob's untouched stubs
    assert sorted(m[0] for m in mistakes[1:]) == ["hidden_state_jacobian_norms", "rnn_forward"]
    assert all(m[4] == "not implemented yet" and m[1:3] == ("1", "3") for m in mistakes[1:])
    assert {r["item"]: r["students"] for r in _section(rows, "score")} == {"0": "1", "6": "1", "8": "1"}
    assert "<b>33%</b> · <code>rnn_forward</code>: every step restarted from h0" in page
    assert "was it deleted" not in page and "wrong chapter" not in page


# --------------------------------------------------------------------------- hand grades win


def test_a_hand_grade_survives_a_forced_regrade_and_shows_everywhere(course):
    api = _api(course)
    with api.gradebook as gb:  # what the formgrader writes when a grader edits cat's notebook
        grade = gb.find_grade("test_rnn_forward", CH, CH, "cat")
        grade.manual_score = 3.5
        grade.extra_credit = 0.5
        gb.find_comment("rnn_forward", CH, CH, "cat").manual_comment = "Carry h forward & it is all right."
        gb.db.commit()

    assert main(["autograde", CH, "--course", str(course), "--student", "cat", "--force", "--no-progress",
                 "--no-execute"]) == 0

    with api.gradebook as gb:
        grade = gb.find_grade("test_rnn_forward", CH, CH, "cat")
        assert (grade.auto_score, grade.manual_score, grade.extra_credit) == (2.0, 3.5, 0.5)
        assert grade.needs_manual_grade  # nbgrader's rule: a hand grade is flagged for review
        comment = gb.find_comment("rnn_forward", CH, CH, "cat")
        assert comment.manual_comment == "Carry h forward & it is all right."
        assert comment.auto_comment.startswith("partial")
    out = course / "grades" / CH
    grades = _read(out / "grades.csv")
    assert set(grades) == set(WANT)  # --student cat: the others keep their grades
    assert (grades["cat"]["score"], grades["cat"]["raw_score"]) == ("8", "8")  # 3.5 + 0.5 + 4
    assert grades["ann"]["score"] == "8" and grades["bob"]["score"] == "0"
    with open(out / "scores.csv", encoding="utf-8", newline="") as fh:
        row = next(r for r in csv.DictReader(fh) if r["student_id"] == "cat" and r["exercise"] == "rnn_forward")
    assert (row["score"], row["auto_score"], row["manual_score"], row["extra_credit"]) == ("4", "2", "3.5", "0.5")
    assert row["comment"] == "Carry h forward & it is all right."
    page = (out / "feedback" / "cat" / f"{CH}.html").read_text(encoding="utf-8")
    assert "Graded by hand: 3.5 / 4 points (the checks gave 2)" in page
    assert "Extra credit: 0.5" in page and "Carry h forward &amp; it is all right." in page
    assert "<b>8 / 8</b>" in page
    assert float(_export(course)["cat"]["score"]) == 8.0
    rows, page = _report(course, "--course", str(course), CH)
    # ann and cat: the hand grade counts in the totals
    assert {r["item"]: r["students"] for r in _section(rows, "score")} == {"0": "1", "8": "2"}
    assert "rnn_forward: 4/4 by hand (the checks gave 2)" in page
    restart = [r for r in _section(rows, "diagnosis") if "restarted from h0" in r["item"]]
    assert [r["share"] for r in restart] == ["0.3333"]  # the checks' verdict is still what went wrong


# --------------------------------------------------------------------------- due dates and late penalties


def test_a_late_submission_gets_the_configured_penalty(course):
    with open(course / "nbgrader_config.py", "a", encoding="utf-8") as fh:
        fh.write(PER_HOUR_CONFIG)
    report = autograde(CH, course=course, duedate="2026-11-20 10:30:00 UTC", progress=False, execute=False)
    assert report.batch.graded == 0  # unchanged work: the journal's grades, the new policy
    grades = _read(course / "grades" / CH / "grades.csv")
    # ann on time; bob 30 min late but has nothing to lose; cat 90 min late: 2 started hours
    assert {s: (r["late_seconds"], r["penalty"], r["raw_score"], r["score"]) for s, r in grades.items()} == {
        "ann": ("0", "0", "8", "8"), "bob": ("1800", "0", "0", "0"), "cat": ("5400", "2", "6", "4")}
    with _api(course).gradebook as gb:
        assert str(gb.find_assignment(CH).duedate) == "2026-11-20 10:30:00"
        assert gb.find_submission_notebook(CH, CH, "cat").late_submission_penalty == 2.0
    exported = _export(course)
    assert {s: float(r["score"]) for s, r in exported.items()} == {"ann": 8.0, "bob": 0.0, "cat": 4.0}
    page = (course / "grades" / CH / "feedback" / "cat" / f"{CH}.html").read_text(encoding="utf-8")
    assert "<b>4 / 8</b>" in page and "1 h 30 min after the due date: late penalty 2 point(s)" in page
    # the class report's distribution is of these final scores, and says so
    rows, page = _report(course, "--course", str(course), CH)
    assert {r["item"]: r["students"] for r in _section(rows, "score")} == {"0": "1", "4": "1", "8": "1"}
    assert "late penalties included" in page and "1 h 30 min late: 2 point(s) off" in page
    assert [r["share"] for r in _section(rows, "diagnosis") if "restarted from h0" in r["item"]] == ["0.3333"]

    # the due date stays in the gradebook: a later run without --duedate keeps the penalty
    autograde(CH, course=course, progress=False, execute=False)
    assert _read(course / "grades" / CH / "grades.csv")["cat"]["penalty"] == "2"


def test_autograde_refuses_what_is_not_a_course_or_a_date(tmp_path, capsys):
    with pytest.raises(ValueError, match="no source notebook"):
        autograde(CH, course=tmp_path, progress=False)
    assert main(["autograde", CH, "--course", str(tmp_path), "--duedate", "next Friday-ish",
                 "--unsafe-no-sandbox"]) == 2
    assert "due date 'next Friday-ish'" in capsys.readouterr().err
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\nc.CourseDirectory.root = (\n",
                                                 encoding="utf-8")
    with pytest.raises(ValueError, match="nbgrader_config.py failed to load"):
        load_course(tmp_path)


# --------------------------------------------------------------------------- only real chapters are assignments


def test_the_formgrader_lists_only_chapters_of_this_book():
    """This repository's nbgrader_config.py (source_directory = "book"), read as nbgrader
    reads it: book/_ext, _static and _vendor exist but are not assignments."""
    assert (REPO / "book" / "_static").is_dir() and (REPO / "book" / "_ext").is_dir()
    c = load_course(REPO)
    assert c.source_root == REPO / "book"
    assert sorted(_api(REPO).get_source_assignments()) == chapter_ids(REPO / "book") != []
