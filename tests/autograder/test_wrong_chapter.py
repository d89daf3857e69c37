"""A notebook of another chapter is named as such by every view a student reads.

Grading finds the chapter a notebook really holds (``NotebookScores.wrong_chapter``); the
console summary, the feedback page, ``python -m autograder check``, Gradescope's and
PrairieLearn's ``results.json`` say it in the same words (:func:`autograder.text.wrong_chapter_text`).
Each is driven through the path a user takes: the ``check`` command, Gradescope's
``run_autograder`` script and PrairieLearn's ``python -m autograder.prairielearn run`` here;
``grade``'s summary and feedback page in
``test_report.py::test_grade_prints_a_summary_naming_each_problem``; the student package's
``check`` in ``test_student_release.py::test_check_names_a_notebook_of_another_chapter``.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder.bench import make_book, make_submission
from autograder.cli import main
from autograder import prairielearn
from autograder.gradescope import ENGINE_ONLY, RUN_AUTOGRADER, validate_results
from autograder.student.expected import ExpectedStore, write_contents
from autograder.student.notebook import holds_exercises, misnamed
from autograder.text import wrong_chapter_notice, wrong_chapter_text

REPO = Path(__file__).resolve().parents[2]
CH4, CH5 = "04_self_attention", "05_multi_head_attention"
NOTICE = wrong_chapter_notice(CH5, CH4)


@pytest.fixture(scope="module")
def book(tmp_path_factory) -> Path:
    return make_book(tmp_path_factory.mktemp("wrong"), [CH4, CH5])


@pytest.fixture(scope="module")
def chapter5_as_4(book, tmp_path_factory) -> Path:
    """Chapter 5's notebook, answered, under chapter 4's file name."""
    source = nbformat.read(str(book / CH5 / f"{CH5}.ipynb"), as_version=4)
    path = tmp_path_factory.mktemp("sub") / f"{CH4}.ipynb"
    nbformat.write(make_submission(source, CH5, "reference"), str(path))
    return path


def test_the_words_are_one_sentence_and_say_what_to_hand_in():
    assert wrong_chapter_text(CH5, CH4) == f"this is a {CH5} notebook, submitted as {CH4}"
    assert NOTICE.startswith(f"wrong chapter: {wrong_chapter_text(CH5, CH4)} (0 points")
    assert f"{CH4}.ipynb" in NOTICE and "\n" not in NOTICE


def test_the_student_package_knows_every_chapter_by_name_and_reads_a_file_named_for_another(tmp_path):
    """What the student package's ``check`` decides with (run from the wheel in
    ``test_student_release.py``): its table of contents names chapters it does not check, a
    file name is another chapter's whatever a browser added, and a notebook holds a chapter's
    exercises only by their solution cells."""
    book = {CH4: ["softmax", "scaled_dot_product_attention"], CH5: ["split_heads", "MultiHeadAttention"]}
    write_contents(tmp_path, book)
    store = ExpectedStore(tmp_path)
    assert store.contents == book and store.chapters == {}
    assert misnamed(Path(f"{CH5} (1).ipynb"), CH4, book) == CH5
    assert misnamed(Path(f"{CH4}-copy.ipynb"), CH4, book) is None  # its own name
    assert misnamed(Path("homework.ipynb"), CH4, book) is None  # names no chapter
    assert misnamed(Path(f"{CH5}.ipynb"), None, book) is None  # nothing to compare with
    cells = [{"cell_type": "code", "metadata": {"nbgrader": {"grade_id": "split_heads", "solution": True}}},
             {"cell_type": "code", "metadata": {"nbgrader": {"grade_id": "test_softmax", "grade": True}}}]
    assert holds_exercises({"cells": cells}, book[CH5]) and not holds_exercises({"cells": cells}, book[CH4])


def _check(capsys, *args: str) -> subprocess.CompletedProcess:
    """``autograder check ARGS`` through ``cli.main`` in this process (the command line
    without a fresh interpreter's imports for each run): its exit status and output."""
    capsys.readouterr()
    status = main(["check", *args])
    out = capsys.readouterr()
    return subprocess.CompletedProcess(["autograder", "check", *args], status, out.out, out.err)


def test_check_as_chapter_4_says_the_notebook_is_chapter_5(book, chapter5_as_4, capsys):
    """Checked as chapter 4 (``--chapter``), the notebook earns nothing and the student is told why
    before the table; chapter 4's own notebook gets no such line."""
    wrong = _check(capsys, str(chapter5_as_4), "--chapter", CH4, "--book", str(book))
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    lines = wrong.stdout.splitlines()
    assert lines[:4] == [f"{CH4}.ipynb: chapter {CH4}, visible checks", "", NOTICE, ""]
    assert "0 of 3 exercises pass" in wrong.stdout


@pytest.mark.slow  # runs chapter 5's and chapter 4's visible checks in the sandbox
def test_check_of_a_misnamed_notebook_says_which_chapter_it_holds(book, chapter5_as_4, tmp_path, capsys):
    """Without ``--chapter``, the cells decide (chapter 5 is checked), and the file's name,
    which says chapter 4, is named: handed in as chapter 4 it would earn 0."""
    named = _check(capsys, str(chapter5_as_4), "--book", str(book))
    assert named.returncode == 0, named.stdout + named.stderr
    assert named.stdout.splitlines()[:4] == [f"{CH4}.ipynb: chapter {CH5}, visible checks", "", NOTICE, ""]
    mine = tmp_path / f"{CH4}.ipynb"
    nbformat.write(make_submission(nbformat.read(str(book / CH4 / f"{CH4}.ipynb"), as_version=4), CH4,
                                   "reference"), str(mine))
    right = _check(capsys, str(mine), "--book", str(book))
    assert right.returncode == 0 and "wrong chapter" not in right.stdout, right.stdout + right.stderr


def _gradescope_root(tmp_path: Path, book: Path, notebook: Path) -> Path:
    """Gradescope's /autograder as the zip's setup leaves it (the grader's package on
    PYTHONPATH through ``source/``), with ``notebook`` uploaded."""
    root = tmp_path / "autograder"
    source = root / "source"
    (source / "book" / CH4).mkdir(parents=True)
    (source / "book" / CH4 / f"{CH4}.ipynb").write_bytes((book / CH4 / f"{CH4}.ipynb").read_bytes())
    for package in ("autograder", "solutions"):
        (source / package).symlink_to(REPO / package)
    (source / ".python").write_text(sys.executable + "\n", encoding="utf-8")
    # engine-only: no wall is needed, since a notebook of another chapter runs no code of this one
    (source / "gradescope.json").write_text(json.dumps({"chapter": CH4, "seed": 5, "timeout": 60.0,
                                                        "isolation": ENGINE_ONLY}), encoding="utf-8")
    (root / "submission").mkdir()
    (root / "submission" / notebook.name).write_bytes(notebook.read_bytes())
    (root / "submission_metadata.json").write_text(json.dumps({"users": [{"id": 7, "name": "A"}]}), encoding="utf-8")
    (root / "run_autograder").write_text(RUN_AUTOGRADER, encoding="utf-8")
    return root


def test_gradescope_tells_the_student_first(book, chapter5_as_4, tmp_path):
    root = _gradescope_root(tmp_path, book, chapter5_as_4)
    done = subprocess.run(["bash", str(root / "run_autograder")], cwd=root, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "AUTOGRADER_ROOT": str(root)}, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))
    validate_results(data)
    assert data["score"] == 0 and data["output"].splitlines()[0] == NOTICE
    assert all(t["status"] == "failed" for t in data["tests"])


def test_prairielearn_grades_it_and_tells_the_student_first(book, chapter5_as_4, tmp_path):
    """On PrairieLearn a notebook of another chapter is an attempt graded 0 (``gradable`` true,
    as on Gradescope), and the result's ``message``, which PrairieLearn shows above the tests,
    opens with the notice; chapter 4's own notebook gets no such line."""
    root = tmp_path / "grade"
    (root / "tests" / "book" / CH4).mkdir(parents=True)
    (root / "tests" / "book" / CH4 / f"{CH4}.ipynb").write_bytes((book / CH4 / f"{CH4}.ipynb").read_bytes())
    # engine-only: no wall is needed, since a notebook of another chapter runs no code of this one
    (root / "tests" / prairielearn.CONFIG).write_text(json.dumps({"chapter": CH4, "seed": 5, "timeout": 60.0,
                                                                  "isolation": ENGINE_ONLY}), encoding="utf-8")
    (root / "student").mkdir()
    (root / "student" / f"{CH4}.ipynb").write_bytes(chapter5_as_4.read_bytes())
    assert prairielearn.main(["run", "--root", str(root)]) == 0
    data = json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))
    prairielearn.validate_results(data)
    assert data["gradable"] is True and data["score"] == 0
    assert data["message"].splitlines()[0] == NOTICE
    assert data["message"].splitlines()[1].startswith(f"{CH4}: 0/")
    assert data["tests"] and all(t["points"] == 0 for t in data["tests"])
    assert "wrong chapter" not in json.dumps(prairielearn.results_json(
        [], chapter=CH4, wrong_chapter=None)), "no notice without a wrong chapter"
