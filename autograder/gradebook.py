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
them; what a grader entered in the formgrader (``Grade.manual_score``,
``Grade.extra_credit``, ``Comment.manual_comment``) is never written here: it is
kept (the cell flagged for review, as nbgrader does) and read back by
:func:`write_gradebook`, so the CSVs and the feedback show it.

Late submissions follow nbgrader: the assignment's ``duedate`` (optionally set
here, as ``nbgrader db assignment add --duedate`` does), the submission's
timestamp from ``timestamp.txt``, and nbgrader's own ``AssignLatePenalties``
preprocessor with the configured plugin (``c.AssignLatePenalties.plugin_class``,
``c.LateSubmissionPlugin.penalty_method``) setting each notebook's
``late_submission_penalty``.

A submission's ``timestamp.txt`` is written on the student's machine: text that
is not a date (dateutil raises ``ValueError``, ``OverflowError``,
``decimal.InvalidOperation``, … on it) is treated as nbgrader treats a missing or
empty one — no timestamp, so not late — and the student's rows say so. Every
submission is recorded on its own: one whose rows cannot be written (rolled
back) keeps the checks' scores in the CSVs, with the reason in its rows
(:attr:`Recorded.problems`); the others are recorded as usual.
"""
from __future__ import annotations

import contextlib
import datetime
import logging
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import nbformat
from nbformat.v4 import new_notebook

from .extensions import grant, parse_duedate
from .release import student_version
from .untrusted import one_line

if TYPE_CHECKING:  # pragma: no cover
    from .journal import Graded

__all__ = ["write_gradebook", "db_url", "Recorded", "submission_time", "DEFAULT_COURSE"]

# nbgrader's own default course id (``Gradebook(db_url)``).
DEFAULT_COURSE = "default_course"


def db_url(path: Path) -> str:
    """The SQLAlchemy URL of a gradebook file."""
    return f"sqlite:///{Path(path).resolve()}"


@contextlib.contextmanager
def alembic_on_path():
    """nbgrader learns its schema version from ``alembic heads``, a subprocess that
    takes seconds and must be on PATH. Answer the same question with alembic's Python
    API (the same migration scripts nbgrader ships) for the duration."""
    import nbgrader.api as api  # deferred: nbgrader is slow to import
    from alembic.config import Config  # deferred with nbgrader
    from alembic.script import ScriptDirectory  # deferred with nbgrader
    from nbgrader.dbutil import ALEMBIC_DIR  # deferred with nbgrader

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


@dataclass
class Recorded:
    """What the gradebook holds for one submission once the checks' scores are in.

    Attributes:
        grades: per test cell ``grade_id``: ``auto_score``, ``manual_score`` and
            ``extra_credit`` as stored (``None`` when unset) and ``score``, nbgrader's
            ``Grade.score`` (the manual score if a grader gave one, else the auto
            score, plus any extra credit).
        comments: per exercise (solution cell), the grader's ``manual_comment``.
        raw_score: the sum of ``score`` (nbgrader's ``SubmittedNotebook.score``).
        late_seconds: ``SubmittedAssignment.total_seconds_late`` (0 when on time or
            when the assignment has no due date).
        penalty: the notebook's ``late_submission_penalty`` (0 when none).
        problems: what went wrong recording this submission (a timestamp that is
            not a date, rows that could not be written), one line each.
    """

    grades: dict[str, dict[str, Any]] = field(default_factory=dict)
    comments: dict[str, str] = field(default_factory=dict)
    raw_score: float = 0.0
    late_seconds: float = 0.0
    penalty: float = 0.0
    problems: list[str] = field(default_factory=list)
    extension_seconds: float = 0.0  # nbgrader's per-student extension (autograder.extensions)
    late_days_used: int = 0
    late_days_left: int | None = None

    @property
    def score(self) -> float:
        """The final score, as ``nbgrader export`` computes it: ``max(0, raw - penalty)``."""
        return max(0.0, self.raw_score - self.penalty)


def _record_assignment(url: str, chapter: str, source: Path, course_id: str,
                       duedate: datetime.datetime | None) -> None:
    """Create or update the assignment (and its due date) and its cells from the source notebook."""
    from nbgrader.api import Gradebook, MissingEntry  # deferred: nbgrader is slow to import


    with Gradebook(url, course_id) as gb:
        gb.update_or_create_assignment(chapter, **({"duedate": duedate} if duedate is not None else {}))
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


def write_gradebook(path: Path | None, sources: dict[str, Path], results: list["Graded"], *,
                    url: str | None = None, course_id: str = DEFAULT_COURSE,
                    duedate: str | datetime.datetime | None = None,
                    config: Any = None, extensions: list | None = None,
                    late_days: int | None = None) -> dict[tuple[str, str], Recorded]:
    """Record ``results`` in a gradebook and read back what it holds for each of them.

    Args:
        path: the ``gradebook.db`` file (created when missing); ignored when ``url`` is given.
        sources: chapter id -> source notebook, for every chapter in ``results``.
        results: the batch's graded submissions (not-submitted ones are skipped,
            as nbgrader has no submission for them).
        url: the gradebook's SQLAlchemy URL (an nbgrader course's ``db_url``).
        course_id: the course id under which a new assignment is created.
        duedate: sets the due date of every chapter in ``sources`` (text for
            :func:`parse_duedate`, or a ``datetime``); ``None`` keeps the gradebook's.
        config: a traitlets ``Config`` for nbgrader's ``AssignLatePenalties``
            (its ``plugin_class``) and ``LateSubmissionPlugin`` (``penalty_method``);
            ``None``: nbgrader's defaults (no penalty).
        extensions, late_days: per-student extensions and the late-day budget
            (:mod:`autograder.extensions`), set before the penalties; both ``None``:
            the gradebook's extensions are left as they are.

    Returns:
        ``(student, chapter) -> Recorded`` for every submitted result.
    """
    url = url or db_url(path)
    due = parse_duedate(duedate) if duedate is not None else None
    with alembic_on_path():
        for chapter, source in sources.items():
            _record_assignment(url, chapter, source, course_id, due)
        problems, unrecorded = _record_results(url, course_id, results)
        granted = _grant_extensions(url, course_id, extensions, late_days, problems) \
            if extensions is not None or late_days is not None else {}
        _assign_late_penalties(url, results, config, problems, unrecorded)
        recorded = _read_back(url, course_id, results, problems)
    for key, given in granted.items():
        if key in recorded:
            recorded[key].extension_seconds = given.extension_seconds
            recorded[key].late_days_used = given.late_days_used
            recorded[key].late_days_left = given.late_days_left
    for key, found in problems.items():
        if found:
            recorded.setdefault(key, Recorded()).problems[:0] = found
    return recorded


# The longest timestamp text parsed (nbgrader writes 26 to 32 characters).
MAX_TIMESTAMP_CHARS = 64


def submission_time(text: str | None) -> tuple[datetime.datetime | None, str]:
    """A submission's time from its ``timestamp.txt`` text (nbgrader's ``parse_utc``).

    Args:
        text: the file's text (student-written), or ``None`` when there is none.

    Returns:
        ``(time, "")``, or ``(None, note)`` when the text is not a date: nbgrader's
        convention for a missing or empty timestamp (no time, so not late),
        with a note that says so. ``(None, "")`` without a text. Never raises.
    """
    from nbgrader.utils import parse_utc  # deferred: nbgrader is slow to import

    if not text or not text.strip():
        return None, ""

    shown = one_line(repr(text[:40]), 60)
    note = f"timestamp.txt ({shown}) is not a date: treated as on time, as nbgrader treats a missing one"
    if len(text) > MAX_TIMESTAMP_CHARS:
        return None, note
    try:
        parsed = parse_utc(text)
    except Exception:  # noqa: BLE001 - dateutil on student text: ValueError, OverflowError, InvalidOperation, …
        return None, note
    if not isinstance(parsed, datetime.datetime):
        return None, note
    return parsed, ""


def _problem(step: str, exc: BaseException) -> str:

    return one_line(f"{step} ({type(exc).__name__}: {exc})", 240)


def _record_submission(gb, graded: "Graded", problems: list[str]) -> None:
    """Record one submission's student, timestamp and auto scores (not committed)."""
    from nbgrader.api import MissingEntry  # deferred: nbgrader is slow to import

    sub = graded.submission
    when, note = submission_time(sub.timestamp)
    if note:
        problems.append(note)
    gb.update_or_create_student(sub.student)
    gb.update_or_create_submission(sub.chapter, sub.student, **({"timestamp": when} if when is not None else {}))
    for score in graded.scores:
        try:
            grade = gb.find_grade(score.grade_id, sub.chapter, sub.chapter, sub.student)
        except MissingEntry:  # not a grade cell of the source notebook
            continue
        # Only the auto fields: a grader's manual_score / extra_credit stay as they are.
        grade.auto_score = float(score.score)
        grade.needs_manual_grade = grade.manual_score is not None
        verdict = score.status.value + (f": {score.reason}" if score.reason else "")
        try:
            comment = gb.find_comment(score.exercise, sub.chapter, sub.chapter, sub.student)
        except MissingEntry:  # no solution cell of that name
            continue
        comment.auto_comment = verdict  # the manual_comment is the grader's, never touched


def _record_results(url: str, course_id: str, results: list["Graded"]
                    ) -> tuple[dict[tuple[str, str], list[str]], set[tuple[str, str]]]:
    """Record every submitted result, each in its own transaction; returns the
    problems met per ``(student, chapter)`` and the submissions rolled back."""
    from nbgrader.api import Gradebook  # deferred: nbgrader is slow to import

    problems: dict[tuple[str, str], list[str]] = {}
    unrecorded: set[tuple[str, str]] = set()
    with Gradebook(url, course_id) as gb, warnings.catch_warnings():
        # nbgrader's add_submission trips SQLAlchemy's autoflush warnings; harmless.
        warnings.filterwarnings("ignore", message=".*not in session.*")
        for graded in results:
            sub = graded.submission
            if sub.path is None:
                continue
            found = problems.setdefault((sub.student, sub.chapter), [])
            try:
                _record_submission(gb, graded, found)
                gb.db.commit()
            except Exception as exc:  # noqa: BLE001 - this submission's rows only
                gb.db.rollback()
                unrecorded.add((sub.student, sub.chapter))
                found.append(_problem("the gradebook could not record this submission", exc))
    return problems, unrecorded


def _grant_extensions(url: str, course_id: str, extensions, late_days, problems) -> dict:
    """Set every submission's extension (:func:`autograder.extensions.grant`); a note on an
    extension that could not apply goes to that student's rows."""
    # nbgrader.api (SQLAlchemy: heavy) when a gradebook is opened
    from nbgrader.api import Gradebook


    with Gradebook(url, course_id) as gb:
        granted, notes = grant(gb, extensions, late_days)
    for ext in extensions or []:
        for note in notes:
            if note.startswith(f"extension of {ext.student} on {ext.chapter} ") and "not applied" in note:
                problems.setdefault((ext.student, ext.chapter), []).append(note)
    return granted


def _assign_late_penalties(url: str, results: list["Graded"], config: Any,
                           problems: dict[tuple[str, str], list[str]], unrecorded: set[tuple[str, str]]) -> None:
    """Run nbgrader's own ``AssignLatePenalties`` on every submitted notebook, as
    ``nbgrader autograde`` does after saving the grades: it resets the penalty, and
    for a late submission asks the configured plugin for one, clipped to ``[0, score]``."""
    from nbgrader.preprocessors import AssignLatePenalties  # deferred: nbgrader is slow to import
    from traitlets.log import get_logger  # deferred with nbgrader

    step = AssignLatePenalties(config=config) if config is not None else AssignLatePenalties()
    log = get_logger()  # its per-submission warnings ("... is 5400.0 seconds late") go to grades.csv instead
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        for graded in results:
            sub = graded.submission
            if sub.path is None:
                continue
            if (sub.student, sub.chapter) in unrecorded:
                continue  # rolled back: nothing to penalise
            resources = {"nbgrader": {"notebook": sub.chapter, "assignment": sub.chapter,
                                      "student": sub.student, "db_url": url}}
            try:
                step.preprocess(new_notebook(), resources)
            except Exception as exc:  # noqa: BLE001 - this submission's penalty only
                problems.setdefault((sub.student, sub.chapter), []).append(
                    _problem("nbgrader's late penalty could not be assigned", exc))
    finally:
        log.setLevel(level)


def _read_back(url: str, course_id: str, results: list["Graded"],
               problems: dict[tuple[str, str], list[str]]) -> dict[tuple[str, str], Recorded]:
    from nbgrader.api import Gradebook  # deferred: nbgrader is slow to import

    recorded: dict[tuple[str, str], Recorded] = {}
    with Gradebook(url, course_id) as gb:
        for graded in results:
            sub = graded.submission
            if sub.path is None:
                continue
            try:
                rec = _read_one(gb, sub)
            except Exception as exc:  # noqa: BLE001 - this submission's row only
                gb.db.rollback()
                problems.setdefault((sub.student, sub.chapter), []).append(
                    _problem("the gradebook could not be read back for this submission", exc))
                continue
            if rec is not None:
                recorded[(sub.student, sub.chapter)] = rec
    return recorded


def _read_one(gb, sub) -> Recorded | None:
    """What the gradebook holds for one submission (``None``: not recorded)."""
    from nbgrader.api import MissingEntry  # deferred: nbgrader is slow to import

    try:
        notebook = gb.find_submission_notebook(sub.chapter, sub.chapter, sub.student)
        assignment = gb.find_submission(sub.chapter, sub.student)
    except MissingEntry:
        return None
    rec = Recorded(
        raw_score=float(notebook.score or 0.0),
        late_seconds=float(assignment.total_seconds_late or 0.0),
        penalty=float(notebook.late_submission_penalty or 0.0),
    )
    for grade in notebook.grades:
        rec.grades[grade.name] = {
            "auto_score": grade.auto_score,
            "manual_score": grade.manual_score,
            "extra_credit": grade.extra_credit,
            "score": float(grade.score or 0.0),
        }
    for comment in notebook.comments:
        if comment.manual_comment:
            rec.comments[comment.name] = comment.manual_comment
    return rec
