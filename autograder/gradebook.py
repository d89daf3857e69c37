"""Write the batch's results into nbgrader's gradebook (``gradebook.db``, SQLite).

The database is nbgrader's own (:class:`nbgrader.api.Gradebook`), filled the way
``nbgrader generate_assignment`` and ``nbgrader autograde`` fill it, so the
formgrader, ``nbgrader export`` and any nbgrader tooling read it unchanged:

* per chapter: the assignment, its notebook and the grade, solution and source
  cells, recorded by nbgrader's ``SaveCells`` preprocessor from the source notebook
  (through :func:`autograder.release.student_version`);
* per student × chapter submitted: the student, the submission, the ``auto_score``
  of every grade cell, and as the solution cell's ``auto_comment`` the check's
  verdict (``"failed: the rows of … sum to 2"``), shown by the formgrader.

Everything is an update-or-create, so regrading updates rows and never duplicates
them; a manual score a grader entered in the formgrader is kept (and the cell is
flagged for review, as nbgrader does).
"""
from __future__ import annotations

import contextlib
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import nbformat

if TYPE_CHECKING:  # pragma: no cover
    from .batch import Graded

__all__ = ["write_gradebook", "db_url"]


def db_url(path: Path) -> str:
    """The SQLAlchemy URL of a gradebook file."""
    return f"sqlite:///{Path(path).resolve()}"


@contextlib.contextmanager
def alembic_on_path():
    """nbgrader learns its schema version from ``alembic heads``, a subprocess that
    takes seconds and must be on PATH. Answer the same question with alembic's Python
    API (the same migration scripts nbgrader ships) for the duration."""
    import nbgrader.api as api
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from nbgrader.dbutil import ALEMBIC_DIR

    global _HEAD
    if _HEAD is None:
        config = Config()
        config.set_main_option("script_location", ALEMBIC_DIR)
        _HEAD = ScriptDirectory.from_config(config).get_current_head()
    original = api.get_alembic_version
    api.get_alembic_version = lambda: _HEAD
    try:
        yield
    finally:
        api.get_alembic_version = original


_HEAD: str | None = None


def _record_assignment(url: str, chapter: str, source: Path) -> None:
    """Create or update the assignment and its cells from the source notebook."""
    from nbgrader.api import Gradebook, MissingEntry

    from .release import student_version

    with Gradebook(url) as gb:
        gb.update_or_create_assignment(chapter)
        try:
            notebook = gb.find_notebook(chapter, chapter)
            known = {c.name: c.max_score for c in notebook.grade_cells}
        except MissingEntry:
            known = None
    nb = nbformat.read(str(source), as_version=4)
    wanted = {
        c.metadata.nbgrader["grade_id"]: float(c.metadata.nbgrader.get("points", 0))
        for c in nb.cells
        if c.get("metadata", {}).get("nbgrader", {}).get("grade")
    }
    if known == wanted:
        return  # unchanged: nothing to record (and nbgrader refuses to touch cells with submissions)
    student_version(nb, chapter, db_url=url)  # nbgrader's SaveCells records the cells


def write_gradebook(path: Path, sources: dict[str, Path], results: list["Graded"]) -> None:
    """Record ``results`` in the gradebook at ``path`` (created when missing).

    Args:
        path: the ``gradebook.db`` file.
        sources: chapter id -> source notebook, for every chapter in ``results``.
        results: the batch's graded submissions (not-submitted ones are skipped,
            as nbgrader has no submission for them).
    """
    url = db_url(path)
    with alembic_on_path():
        for chapter, source in sources.items():
            _record_assignment(url, chapter, source)
        _record_results(url, results)


def _timestamp(text: str | None) -> dict:
    """``{"timestamp": datetime}`` from nbgrader's ``timestamp.txt`` text, or ``{}``."""
    from nbgrader.utils import parse_utc

    if not text:
        return {}
    try:
        return {"timestamp": parse_utc(text)}
    except (ValueError, TypeError, OverflowError):
        return {}


def _record_results(url: str, results: list["Graded"]) -> None:
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(url) as gb, warnings.catch_warnings():
        # nbgrader's add_submission trips SQLAlchemy's autoflush warnings; harmless.
        warnings.filterwarnings("ignore", message=".*not in session.*")
        for graded in results:
            sub = graded.submission
            if sub.path is None:
                continue
            gb.update_or_create_student(sub.student)
            gb.update_or_create_submission(sub.chapter, sub.student, **_timestamp(sub.timestamp))
            for row in graded.scores:
                try:
                    grade = gb.find_grade(row["grade_id"], sub.chapter, sub.chapter, sub.student)
                except MissingEntry:  # not a grade cell of the source notebook
                    continue
                grade.auto_score = float(row["score"])
                grade.needs_manual_grade = grade.manual_score is not None
                verdict = row["status"] + (f": {row['reason']}" if row["reason"] else "")
                try:
                    comment = gb.find_comment(row["exercise"], sub.chapter, sub.chapter, sub.student)
                except MissingEntry:  # no solution cell of that name
                    continue
                comment.auto_comment = verdict
            gb.db.commit()
