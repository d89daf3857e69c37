"""A released chapter run in a student's environment: one venv with a Jupyter kernel, the
chapter's wheel installed as a student installs it, and the blank release executed and
read cell by cell.

Shared by ``tests/autograder/test_release_runs.py`` (every chapter but 10) and
``tests/book/test_chapter_10_release.py`` (chapter 10, which decodes the run that the book
build's chapter 9 trained).
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import nbformat
from notebook_runs import execute
from student_env import filled, install, kernel_spec, make_env, nbgrader_meta

from autograder.checks import exercises_of
from autograder.release import Release

__all__ = ["CELL_TIMEOUT_S", "Classroom", "classroom", "errors", "stream_text", "check_answered", "run_blank"]

CELL_TIMEOUT_S = 900  # as the book build: chapter 9 trains a small model


@dataclass
class Classroom:
    """The release of every chapter and one student venv with a Jupyter kernel spec ``student``.

    Attributes:
        out: the release folder; ``done``: the release (its ``packages``, one per chapter).
        python, work, env: the venv's interpreter, a work folder outside the repository and
            the environment to run it in.
        installed: the chapter whose wheel the venv holds (None: none yet).
    """

    out: Path
    done: Release
    python: Path
    work: Path
    env: dict
    installed: str | None = None

    def use(self, chapter: str) -> None:
        """Have ``chapter``'s wheel in the venv: installed over the last one, as a student moving
        to that chapter does, unless it is the one there already."""
        if self.installed != chapter:
            install(self.python, self.done.packages[chapter].wheel)
            self.installed = chapter

    def hand_out(self, chapter: str, folder_name: str | None = None) -> Path:
        """A fresh copy of the released ``chapter`` (its notebook and figures, as handed out) in
        the work folder, under ``folder_name`` (the chapter's id by default)."""
        folder = self.work / (folder_name or chapter)
        if folder.exists():
            shutil.rmtree(folder)
        shutil.copytree(self.out / chapter, folder)
        return folder


@contextlib.contextmanager
def classroom(released_chapters, tmp_path_factory):
    """A :class:`Classroom` for the release ``released_chapters`` (``(out, Release)``), its
    kernel spec on ``JUPYTER_PATH`` while the block runs (restored after)."""
    out, done = released_chapters
    python, _, work, env = make_env(tmp_path_factory.mktemp("student"))
    jupyter = kernel_spec(tmp_path_factory.mktemp("jupyter"), python, env)
    saved = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = str(jupyter)
    try:
        yield Classroom(out, done, python, work, env)
    finally:
        if saved is None:
            os.environ.pop("JUPYTER_PATH", None)
        else:
            os.environ["JUPYTER_PATH"] = saved


def errors(cell) -> list[dict]:
    """The error outputs of an executed code cell."""
    return [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def stream_text(cell) -> str:
    """What an executed code cell printed (stdout and stderr)."""
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


def check_answered(room: Classroom, chapter: str, folder: Path) -> None:
    """The released notebook in ``folder`` with the reference answers pasted into its exercise
    cells, renamed ``finished.ipynb``, checked by ``python -m autograder check`` in the student
    venv (``chapter``'s wheel installed): the chapter read from the notebook (not its name),
    every exercise with all its points. Not executed in a kernel: its code is, cell for cell,
    the code the book build executed."""
    room.use(chapter)
    nbformat.write(filled(folder / f"{chapter}.ipynb"), str(folder / "finished.ipynb"))
    checked = subprocess.run([str(room.python), "-m", "autograder", "check", "finished.ipynb"], cwd=folder,
                             env=room.env, capture_output=True, text=True, timeout=600)
    exercises = exercises_of(chapter)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"finished.ipynb: chapter {chapter}, visible checks" in checked.stdout, checked.stdout
    for exercise in exercises:
        assert re.search(rf"^{exercise.name}\s+(\S+)/\1\s+passed", checked.stdout, re.M), (exercise.name, checked.stdout)
    count = len(exercises)
    assert f"{count} of {count} exercises pass the visible checks" in checked.stdout, checked.stdout


def run_blank(room: Classroom, chapter: str, folder: Path) -> tuple[nbformat.NotebookNode, int]:
    """Execute ``chapter``'s released notebook as handed out (every exercise blank, in
    ``folder``, from :meth:`Classroom.hand_out`) in the student kernel, with the chapter's
    wheel installed, and read it cell by cell: every cell
    runs without an error except the check cells, which say "not implemented yet"; a
    demonstration that needs a blank exercise prints one line naming it, never before that
    exercise. The executed notebook is kept (``blank.ipynb`` in the chapter's folder, and
    under :data:`notebook_runs.KEPT`).

    Returns:
        ``(executed notebook, demonstrations waiting on a blank exercise)``.
    """
    room.use(chapter)
    released = folder / f"{chapter}.ipynb"
    blank = execute(nbformat.read(str(released), as_version=4), label=f"release-blank/{chapter}", chapter=chapter,
                    kernel_name="student", cwd=folder, timeout=CELL_TIMEOUT_S, allow_errors=True)
    nbformat.write(blank, str(folder / "blank.ipynb"))
    solution_at = {nbgrader_meta(c)["grade_id"]: i for i, c in enumerate(blank.cells)
                   if nbgrader_meta(c).get("solution") and c.cell_type == "code"}
    stopped = 0
    for i, cell in enumerate(blank.cells):
        if cell.cell_type != "code":
            continue
        failed, text = errors(cell), stream_text(cell)
        if nbgrader_meta(cell).get("grade"):  # a blank exercise's check fails, saying why
            said = text + "".join(e["evalue"] for e in failed)
            assert "not implemented yet" in said, f"{chapter} cell {i}, the check of a blank exercise: {said}"
            continue
        assert not failed, f"{chapter} cell {i} fails with the exercises blank: {failed[0]['ename']}: {failed[0]['evalue']}"
        for name in re.findall(r"⏸ .*?\(`(\w+)`\)", text):  # a demonstration waiting on an exercise
            assert solution_at[name] < i, f"{chapter} cell {i} needs exercise {name}, which comes after it"
            stopped += 1
        assert text.count("⏸") <= 1, f"{chapter} cell {i} says more than one line: {text}"
    return blank, stopped
