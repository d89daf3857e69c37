"""One exercise's score, typed, from the judgment to every view.

A graded test cell becomes an :class:`ExerciseScore` (with its :class:`PartScore` list and
a :class:`Status`) where it is judged, in :func:`autograder.grading.grade_submission`,
which hands the batch, ``check`` and the Gradescope adapter a :class:`NotebookScores`: these
scores and the chapter the notebook really holds when it is another one. Each checks itself
when it is made, in code as when read from a file (a :class:`ScoreError` names the field
that is wrong: a number that is not finite, points out of bounds, parts that do not sum to
the score, a status that disagrees with it). The journal stores them as such, ``results.json`` holds them (with what a grader changed by hand),
and every view reads their fields: the gradebook, ``scores.csv``, the feedback pages,
Gradescope's and PrairieLearn's ``results.json``, the class report. A submission as a
whole (a row of ``grades.csv``) has a :class:`SubmissionStatus`.

One codec: :meth:`ExerciseScore.to_dict` and :meth:`ExerciseScore.from_dict` write and read
it for the journal and for ``results.json`` alike; a record of the wrong shape raises
:class:`ScoreError` naming the field.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from .text import score_text

__all__ = ["Status", "SubmissionStatus", "PartScore", "ExerciseScore", "NotebookScores", "ScoreError", "parts_line",
           "single_line"]


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

    def __post_init__(self):
        _check_part(self)

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
        _check_exercise(self)

    @property
    def checks_score(self) -> float:
        """What the checks gave (``auto_score``, else ``score``)."""
        return self.score if self.auto_score is None else self.auto_score

    @property
    def parts_add_up(self) -> bool:
        """Whether the parts make the whole score: their points sum to ``max_score`` and their
        scores to ``score``. A platform then shows one test per part; a score with no parts
        (missing, unreadable, timed out, flagged) or changed by hand is shown whole."""
        return (bool(self.parts) and abs(sum(p.points for p in self.parts) - self.max_score) < 1e-9
                and abs(sum(p.score for p in self.parts) - self.score) < 1e-9)

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
        return score


@dataclass
class NotebookScores:
    """What grading found in one submitted notebook: what
    :func:`autograder.grading.grade_submission` returns to every caller (the batch, ``check``,
    a shard, Gradescope).

    Attributes:
        scores: one :class:`ExerciseScore` per graded test cell of the chapter, in notebook order.
        wrong_chapter: the chapter the notebook really holds, when none of this chapter's
            exercises was found in it (every score ``missing``) and its cells are that
            other chapter's; else ``None``. Found while grading, from the cells it read.

    Raises:
        ScoreError: ``scores`` holds something else than scores, or ``wrong_chapter`` is
            named while some exercise of this chapter was found.
    """

    scores: list[ExerciseScore]
    wrong_chapter: str | None = None

    def __post_init__(self):
        if not isinstance(self.scores, list) or not all(isinstance(s, ExerciseScore) for s in self.scores):
            raise ScoreError("a notebook's scores must be a list of ExerciseScore")
        if self.wrong_chapter is not None:
            if not isinstance(self.wrong_chapter, str) or not self.wrong_chapter:
                raise ScoreError(f"wrong_chapter must be a chapter id or None, got {self.wrong_chapter!r}")
            if not self.scores or any(s.status != Status.MISSING for s in self.scores):
                raise ScoreError(f"wrong_chapter {self.wrong_chapter!r} names another chapter, but this chapter's "
                                 "exercises were found in the notebook (a status other than 'missing')")


def _status(word: Any) -> Status:
    try:
        return Status(word)
    except ValueError:
        raise ScoreError(f"status {word!r} is none of {', '.join(s.value for s in Status)}") from None


# Points are floats summed from scaled parts: equal within this much of the largest.
_TOLERANCE = 1e-6
# The statuses whose score is the exercise's whole points (passed), some of them
# (partial); every other status scores nothing.
_SCORING = {Status.PASSED, Status.PARTIAL}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _close(a: float, b: float, scale: float) -> bool:
    return abs(a - b) <= _TOLERANCE * max(1.0, abs(scale))


def _check_part(part: PartScore) -> None:
    """Raise :class:`ScoreError` naming the field when ``part`` is not a part's score."""
    if not isinstance(part.name, str) or not part.name:
        raise ScoreError(f"a part's name must be non-empty text, got {part.name!r}")
    for name in ("message", "hint"):
        if not isinstance(getattr(part, name), str):
            raise ScoreError(f"part {part.name!r}: {name} must be text, got {type(getattr(part, name)).__name__}")
    for name in ("score", "points"):
        if not _number(getattr(part, name)):
            raise ScoreError(f"part {part.name!r}: {name} must be a finite number, got {getattr(part, name)!r}")
    if part.points < 0:
        raise ScoreError(f"part {part.name!r}: points must not be negative, got {part.points!r}")
    if not -_TOLERANCE <= part.score <= part.points + _TOLERANCE * max(1.0, part.points):
        raise ScoreError(f"part {part.name!r}: score {part.score!r} is outside 0..{part.points!r} (its points)")


def _check_exercise(score: ExerciseScore) -> None:
    """Raise :class:`ScoreError` naming the field when ``score`` is not one exercise's score.

    Its fields are of their types; ``max_score`` is not negative; what the checks gave
    (:attr:`ExerciseScore.checks_score`) lies within ``0..max_score`` and agrees with the
    status (``passed``: all of it, ``partial``: some, any other status: none); the parts,
    when there are any, are worth ``max_score`` together and earned the checks' score.
    ``score`` itself, after a grader's hand grade and extra credit, is only a number.
    """
    where = f"score of {score.exercise!r}" if isinstance(score.exercise, str) and score.exercise else "a score"
    for name in ("student", "chapter", "exercise", "reason", "grade_id", "comment"):
        if not isinstance(getattr(score, name), str):
            raise ScoreError(f"{where}: {name} must be text, got {type(getattr(score, name)).__name__}")
    for name in ("score", "max_score"):
        if not _number(getattr(score, name)):
            raise ScoreError(f"{where}: {name} must be a finite number, got {getattr(score, name)!r}")
    for name in ("auto_score", "manual_score", "extra_credit"):
        value = getattr(score, name)
        if value is not None and not _number(value):
            raise ScoreError(f"{where}: {name} must be a finite number or null, got {value!r}")
    if not isinstance(score.notes, list) or not all(isinstance(n, str) for n in score.notes):
        raise ScoreError(f"{where}: notes must be a list of text")
    if not isinstance(score.parts, list) or not all(isinstance(p, PartScore) for p in score.parts):
        raise ScoreError(f"{where}: parts must be a list of PartScore")
    top = score.max_score
    if top < 0:
        raise ScoreError(f"{where}: max_score must not be negative, got {top!r}")
    checks = score.checks_score
    field_name = "score" if score.auto_score is None else "auto_score"
    if not -_TOLERANCE <= checks <= top + _TOLERANCE * max(1.0, top):
        raise ScoreError(f"{where}: {field_name} {checks!r} is outside 0..{top!r} (max_score)")
    # partial: some points, less than all (a sum of scaled parts a hair under max_score included)
    full, none = _close(checks, top, top), _close(checks, 0.0, top)
    if (score.status == Status.PASSED and not full) or (score.status == Status.PARTIAL and (none or checks >= top)) \
            or (score.status not in _SCORING and not none):
        want = {Status.PASSED: f"{top!r} (max_score)", Status.PARTIAL: f"between 0 and {top!r}"}.get(score.status, "0")
        raise ScoreError(f"{where}: status {score.status.value!r} needs {field_name} {want}, got {checks!r}")
    if score.parts:
        points = sum(p.points for p in score.parts)
        if not _close(points, top, top):
            raise ScoreError(f"{where}: its parts are worth {points!r} together, not max_score {top!r}")
        earned = sum(p.score for p in score.parts)
        if not _close(earned, checks, top):
            raise ScoreError(f"{where}: its parts earned {earned!r} together, not {field_name} {checks!r}")


def parts_line(parts: list[PartScore]) -> str:
    """``values 2/2 · any axis 0/1``: the ``parts`` column of ``scores.csv``."""
    return " · ".join(f"{p.name} {score_text(p.score)}/{score_text(p.points)}" for p in parts)
