"""A graded class's results, typed: what ``grade`` and ``autograde`` found, in one file.

The batch (:func:`autograder.batch.write_reports`) builds :class:`ClassResults` once, from
the journal's entries and what the gradebook holds (hand grades, late penalties), and
writes it to ``OUT/results.json``. Everything else is a view of it: ``scores.csv``
(:meth:`ClassResults.score_rows`), ``grades.csv`` (:meth:`ClassResults.grade_rows`) and
the class report (:func:`autograder.report.load_rows` reads this file, never the CSVs).
Messages are kept whole: every part's message and the check's own hint, apart.

Layout of ``results.json``: ``{"version": 2, "exercises": [...], "submissions": [...]}``,
one object per :class:`~autograder.scores.ExerciseScore` (its one codec,
:meth:`~autograder.scores.ExerciseScore.to_dict`, the journal's too) and per
:class:`SubmissionGrade`, with their fields. ``ExerciseScore``, ``PartScore`` and
``parts_line`` are :mod:`autograder.scores`' own, named here too for the views that read
a run's results.

A run that writes results (``grade``, ``merge``) marks its folder first
(:func:`begin_run`, ``OUT/.run-unfinished.json``) and clears the mark once every
file is written (:func:`end_run`): when a run stops half-way, the ``results.json``
left there is an earlier run's, and :meth:`ClassResults.read` says so instead of
presenting it as current.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from .files import write_atomic
from .scores import ExerciseScore, PartScore, ScoreError, SubmissionStatus, parts_line
from .text import score_text

__all__ = ["RESULTS_FILE", "RESULTS_VERSION", "RUN_MARKER", "ResultsError", "begin_run", "end_run", "unfinished_run",
           "PartScore", "ExerciseScore", "SubmissionStatus", "SubmissionGrade", "ClassResults", "parts_line"]

RESULTS_FILE = "results.json"
RESULTS_VERSION = 2  # 2: a submission records the chapter it really holds (wrong_chapter)
# Points are floats summed from scaled parts: equal within this much.
_TOLERANCE = 1e-6
# Present while a run writes into its output folder (a dot name: no student's folder).
RUN_MARKER = ".run-unfinished.json"


class ResultsError(ValueError):
    """A ``results.json`` that is missing, unreadable, of another version or left by a
    run that did not finish (the message names it)."""


def begin_run(out: Path, command: str) -> None:
    """Mark ``out`` as being written by ``command`` (``grade``, ``merge``) until :func:`end_run`."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    write_atomic(Path(out) / RUN_MARKER, json.dumps({"command": command, "started": stamp}) + "\n")


def end_run(out: Path) -> None:
    """Clear the mark of :func:`begin_run`: every result file of the run is written."""
    (Path(out) / RUN_MARKER).unlink(missing_ok=True)


def unfinished_run(out: Path) -> str | None:
    """How the run that did not finish in ``out`` started (``"grade, started …"``), or ``None``."""
    path = Path(out) / RUN_MARKER
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return f"{data['command']}, started {data['started']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "a run"


@dataclass
class SubmissionGrade:
    """One student × chapter: a row of ``grades.csv``."""

    student: str
    chapter: str
    status: SubmissionStatus
    score: float = 0.0  # after hand grades and the late penalty
    max_score: float = 0.0
    raw_score: float = 0.0  # before the penalty
    late_seconds: float = 0.0  # past the due date (0: on time or no due date)
    penalty: float = 0.0  # nbgrader's late penalty, in points
    submission_sha256: str | None = None  # of the notebook that was graded (None: nothing was)
    extension_seconds: float = 0.0  # the student's extension of the due date (autograder.extensions)
    late_days_used: int = 0  # late days this chapter spent of the student's budget
    # The chapter the notebook really holds when none of this one's exercises was found in it
    # and its cells are another chapter's (found while grading: NotebookScores.wrong_chapter).
    wrong_chapter: str | None = None

    def __post_init__(self):
        # The status is a SubmissionStatus whatever was passed (a word is read as one), and
        # the rest is checked here, where a grade is made, as where one is read from a file.
        self.status = _submission_status(self.status)
        _check_submission(self)

    def to_dict(self) -> dict:
        """The record of :meth:`from_dict` (plain JSON types; the status as its word)."""
        return dict(asdict(self), status=str(self.status))

    @classmethod
    def from_dict(cls, data) -> "SubmissionGrade":
        """Read :meth:`to_dict`'s record.

        Raises:
            ScoreError: not a record of these fields, or a status that is none.
        """
        if not isinstance(data, dict):
            raise ScoreError(f"a submission's grade is a JSON object, found {type(data).__name__}")
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ScoreError(f"a submission's grade has no field {sorted(unknown)[0]!r}")
        try:
            return cls(**data)
        except TypeError as exc:
            raise ScoreError(f"a submission's grade cannot be read ({exc})") from None


def _submission_status(word) -> SubmissionStatus:
    try:
        return SubmissionStatus(word)
    except ValueError:
        raise ScoreError(f"submission status {word!r} is none of "
                         f"{', '.join(s.value for s in SubmissionStatus)}") from None


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_submission(grade: SubmissionGrade) -> None:
    """Raise :class:`~autograder.scores.ScoreError` naming the field when ``grade`` is not a
    submission's grade: its texts are text, its numbers finite and not negative, ``score``
    is ``raw_score`` less the penalty (never below 0), a submission not submitted names no
    notebook, and a notebook of another chapter is ``incomplete`` (none of this chapter's
    exercises was in it)."""
    where = f"the grade of {grade.student}/{grade.chapter}" if isinstance(grade.student, str) and \
        isinstance(grade.chapter, str) else "a submission's grade"
    for name in ("student", "chapter"):
        if not isinstance(getattr(grade, name), str) or not getattr(grade, name):
            raise ScoreError(f"{where}: {name} must be non-empty text, got {getattr(grade, name)!r}")
    for name in ("score", "max_score", "raw_score", "late_seconds", "penalty", "extension_seconds"):
        value = getattr(grade, name)
        if not _number(value):
            raise ScoreError(f"{where}: {name} must be a finite number, got {value!r}")
        if name != "raw_score" and value < 0:
            raise ScoreError(f"{where}: {name} must not be negative, got {value!r}")
    if isinstance(grade.late_days_used, bool) or not isinstance(grade.late_days_used, int) \
            or grade.late_days_used < 0:
        raise ScoreError(f"{where}: late_days_used must be a whole number, not negative, got {grade.late_days_used!r}")
    if abs(grade.score - max(0.0, grade.raw_score - grade.penalty)) > _TOLERANCE * max(1.0, abs(grade.raw_score)):
        raise ScoreError(f"{where}: score {grade.score!r} is not raw_score {grade.raw_score!r} less the penalty "
                         f"{grade.penalty!r}")
    digest = grade.submission_sha256
    if digest is not None and not (isinstance(digest, str) and digest):
        # a SHA-256, or what made one impossible ("unreadable: …", autograder.submissions.file_sha256)
        raise ScoreError(f"{where}: submission_sha256 must be text or null, got {digest!r}")
    if grade.status == SubmissionStatus.NOT_SUBMITTED and digest is not None:
        raise ScoreError(f"{where}: status 'not submitted' names no notebook, but submission_sha256 is {digest!r}")
    wrong = grade.wrong_chapter
    if wrong is not None:
        if not isinstance(wrong, str) or not wrong or wrong == grade.chapter:
            raise ScoreError(f"{where}: wrong_chapter must be another chapter's id or null, got {wrong!r}")
        if grade.status != SubmissionStatus.INCOMPLETE:
            raise ScoreError(f"{where}: a notebook of another chapter (wrong_chapter {wrong!r}) is 'incomplete', "
                             f"not {grade.status.value!r}")


def _optional(x) -> str:
    return "" if x is None else score_text(x)


@dataclass
class ClassResults:
    """Every exercise score and every submission's grade of one run."""

    exercises: list[ExerciseScore] = field(default_factory=list)
    submissions: list[SubmissionGrade] = field(default_factory=list)

    def score_rows(self) -> list[list]:
        """The rows of ``scores.csv`` (:data:`autograder.batch.SCORE_COLUMNS`)."""
        return [[e.student, e.chapter, e.exercise, e.grade_id, score_text(e.score), score_text(e.max_score),
                 e.status, e.reason, parts_line(e.parts),
                 " | ".join(e.notes), score_text(e.score if e.auto_score is None else e.auto_score),
                 _optional(e.manual_score), _optional(e.extra_credit), " ".join(e.comment.split())]
                for e in self.exercises]

    def grade_rows(self) -> list[list]:
        """The rows of ``grades.csv`` (:data:`autograder.batch.GRADE_COLUMNS`)."""
        return [[s.student, s.chapter, score_text(s.score), score_text(s.max_score), s.status,
                 score_text(s.raw_score), score_text(s.late_seconds), score_text(s.penalty)]
                for s in self.submissions]

    def to_json(self) -> str:
        data = {"version": RESULTS_VERSION, "exercises": [e.to_dict() for e in self.exercises],
                "submissions": [s.to_dict() for s in self.submissions]}
        return json.dumps(data, ensure_ascii=False, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str = RESULTS_FILE) -> "ClassResults":
        """Parse :meth:`to_json`'s text.

        Raises:
            ResultsError: not JSON, another version, or a record without the fields above.
        """
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise ResultsError(f"{where} is not JSON ({exc})") from None
        if not isinstance(data, dict) or data.get("version") != RESULTS_VERSION:
            found = data.get("version") if isinstance(data, dict) else type(data).__name__
            raise ResultsError(f"{where} is of version {found!r}, this grader reads version {RESULTS_VERSION}: "
                               "grade again (unchanged work comes from the journal)")
        try:
            exercises = [ExerciseScore.from_dict(e) for e in data["exercises"]]
            submissions = [SubmissionGrade.from_dict(s) for s in data["submissions"]]
        except (KeyError, TypeError, ScoreError) as exc:
            raise ResultsError(f"{where}: a record cannot be read ({type(exc).__name__}: {exc})") from None
        return cls(exercises, submissions)

    def write(self, out: Path) -> Path:
        """Write ``out/results.json`` (atomically); returns its path."""
        path = Path(out) / RESULTS_FILE
        write_atomic(path, self.to_json())
        return path

    @classmethod
    def read(cls, out: Path) -> "ClassResults":
        """Read ``out/results.json``.

        Raises:
            ResultsError: the file is missing or cannot be read, or the last run into
                ``out`` did not finish (the message names it).
        """
        path = Path(out) / RESULTS_FILE
        unfinished = unfinished_run(out)
        if unfinished is not None:
            raise ResultsError(f"the last run into {out} ({unfinished}) did not finish: its results are incomplete "
                               f"and {RESULTS_FILE} there, if any, is of an earlier run; run it again (it resumes "
                               "from its journal)")
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ResultsError(f"{out} has no {RESULTS_FILE}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ResultsError(f"{path} cannot be read ({exc})") from None
        return cls.from_json(text, str(path))
