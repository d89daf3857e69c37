"""One exercise's score, typed, from the judgment to every view.

A graded test cell becomes an :class:`ExerciseScore` (with its :class:`PartScore` list and
a :class:`Status`) where it is judged, in :func:`autograder.grading.grade_submission`,
which hands the batch, ``check`` and the Gradescope adapter these scores. The journal
stores them as such, ``results.json`` holds them (with what a grader changed by hand),
and every view reads their fields: the gradebook, ``scores.csv``, the feedback pages,
Gradescope's and PrairieLearn's ``results.json``, the class report. A submission as a
whole (a row of ``grades.csv``) has a :class:`SubmissionStatus`.

One codec: :meth:`ExerciseScore.to_dict` and :meth:`ExerciseScore.from_dict` write and read
it for the journal and for ``results.json`` alike; a record of the wrong shape raises
:class:`ScoreError` naming the field.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from .text import score_text

__all__ = ["Status", "SubmissionStatus", "PartScore", "ExerciseScore", "ScoreError", "parts_line", "single_line"]


class Status(str, Enum):
    """What grading found for one exercise.

    A ``str``: it compares equal to, formats and serialises as its word (``"passed"``).
    """

    PASSED = "passed"
    PARTIAL = "partial"  # some parts earned
    FAILED = "failed"
    ERROR = "error"  # the answer crashed or the grader failed on it
    MISSING = "missing"  # no cell with the exercise's id
    TIMEOUT = "timeout"
    CHEAT = "cheat"  # a tampering attempt was caught
    INVALID = "invalid"  # nothing could be read

    # a word wherever text goes (as enum.StrEnum, which Python 3.10 lacks), and one key with its word
    __str__ = str.__str__
    __format__ = str.__format__
    __hash__ = str.__hash__


class SubmissionStatus(str, Enum):
    """What grading found for one student × chapter (the ``status`` of ``grades.csv``).

    A ``str``, as :class:`Status`: it compares equal to, formats and serialises as its word.
    """

    COMPLETE = "complete"  # every check passed
    INCOMPLETE = "incomplete"
    INVALID = "invalid"  # nothing could be read
    CHEAT = "cheat"  # a tampering attempt was caught
    NOT_SUBMITTED = "not submitted"

    __str__ = str.__str__
    __format__ = str.__format__
    __hash__ = str.__hash__


class ScoreError(ValueError):
    """A stored score of the wrong shape (the message names the field)."""


def single_line(text: Any) -> str:
    """``text`` as one line with single spaces (how every stored message is kept)."""
    return " ".join(str(text or "").split())


@dataclass
class PartScore:
    """One graded part of one exercise (``message`` and ``hint`` empty when earned)."""

    name: str
    score: float
    points: float
    message: str = ""
    hint: str = ""  # the check's own hint, never text the answer wrote (report.diagnosis_key)

    @property
    def earned(self) -> bool:
        return self.points > 0 and self.score >= self.points - 1e-9


@dataclass
class ExerciseScore:
    """One student × exercise: a row of ``scores.csv``.

    ``score`` is the final one (nbgrader's ``Grade.score``: a grader's manual score, when
    there is one, plus extra credit); ``auto_score`` is what the checks gave (``None``:
    not yet merged with the gradebook, the same as ``score``).
    """

    student: str
    chapter: str
    exercise: str
    score: float
    max_score: float
    status: Status
    reason: str
    parts: list[PartScore] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    auto_score: float | None = None
    grade_id: str = ""
    manual_score: float | None = None
    extra_credit: float | None = None
    comment: str = ""  # the grader's comment on the exercise

    def __post_init__(self):
        # The status is a Status whatever was passed: a word ("partial") is read as one
        # (a ScoreError names a word that is none), so every view can rely on .value.
        self.status = _status(self.status)

    @property
    def checks_score(self) -> float:
        """What the checks gave (``auto_score``, else ``score``)."""
        return self.score if self.auto_score is None else self.auto_score

    def to_dict(self) -> dict:
        """The record of :meth:`from_dict` (plain JSON types; the status as its word)."""
        data = asdict(self)
        data["status"] = self.status.value
        return data

    @classmethod
    def from_dict(cls, data: Any) -> "ExerciseScore":
        """Read :meth:`to_dict`'s record.

        Raises:
            ScoreError: not a record of these fields, or a field of the wrong type.
        """
        if not isinstance(data, dict):
            raise ScoreError(f"a score is a JSON object, found {type(data).__name__}")
        try:
            parts = data["parts"]
            if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
                raise ScoreError("its parts are not a list of objects")
            score = cls(**dict(data, parts=[PartScore(**p) for p in parts], status=_status(data["status"])))
        except (KeyError, TypeError) as exc:
            raise ScoreError(f"a score cannot be read ({type(exc).__name__}: {exc})") from None
        _check_types(score)
        return score


def _status(word: Any) -> Status:
    try:
        return Status(word)
    except ValueError:
        raise ScoreError(f"status {word!r} is none of {', '.join(s.value for s in Status)}") from None


def _check_types(score: ExerciseScore) -> None:
    """Raise :class:`ScoreError` when a field read from a file is not of its type."""
    number = (int, float)
    texts = ("student", "chapter", "exercise", "reason", "grade_id", "comment")
    if not all(isinstance(getattr(score, name), str) for name in texts):
        raise ScoreError(f"a score's {', '.join(texts)} must be text")
    if not all(isinstance(getattr(score, name), number) for name in ("score", "max_score")):
        raise ScoreError("a score's score and max_score must be numbers")
    if not all(getattr(score, name) is None or isinstance(getattr(score, name), number)
               for name in ("auto_score", "manual_score", "extra_credit")):
        raise ScoreError("a score's auto_score, manual_score and extra_credit must be numbers or null")
    if not isinstance(score.notes, list) or not all(isinstance(n, str) for n in score.notes):
        raise ScoreError("a score's notes must be a list of text")
    for p in score.parts:
        if not (isinstance(p.name, str) and isinstance(p.message, str) and isinstance(p.hint, str)
                and isinstance(p.score, number) and isinstance(p.points, number)):
            raise ScoreError(f"part {p.name!r}: name, message and hint must be text, score and points numbers")


def parts_line(parts: list[PartScore]) -> str:
    """``values 2/2 · any axis 0/1``: the ``parts`` column of ``scores.csv``."""
    return " · ".join(f"{p.name} {score_text(p.score)}/{score_text(p.points)}" for p in parts)
