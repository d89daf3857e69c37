"""Scoring an exercise by parts: every case judged, each part earned when all its cases pass.

:func:`evaluate` judges every case of a run (no stop at the first failure) into a
:class:`Report` of :class:`PartResult`s; a hidden set is judged under
:func:`~autograder.checks.compare.redacting`. :class:`Points` is what ``check`` returns
on partial credit.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .cases import ADVICE, Case, CheckFailure, Result
from .compare import redacted, shown
from .draws import public_labels
from .exercise import NOT_IMPLEMENTED, Exercise, run_in_process

__all__ = ["PartResult", "Report", "Points", "evaluate", "run_cases"]


@dataclass
class PartResult:
    """The verdict on one graded part of an exercise.

    Attributes:
        name: the part's name, as the prompt prints it.
        points: what the part is worth (scaled to the test cell's points).
        earned: whether every case of the part passed.
        cases: how many cases the part has; ``failed`` how many of them failed.
        message: the first failing case's diagnosis (``None`` when earned).
        hint: the check's own hint in ``message`` (``None``: no mistake recognised).
    """

    name: str
    points: float
    earned: bool
    cases: int = 0
    failed: int = 0
    message: str | None = None
    hint: str | None = None

    @property
    def score(self) -> float:
        return self.points if self.earned else 0.0


@dataclass
class Report:
    """What a check found: the parts, their points, the notes and the advice.

    ``score`` is the sum of the earned parts' points; ``passed`` means every part
    was earned. ``notes`` are remarks about correct answers (a wider float dtype,
    an earlier exercise replaced by its reference); ``advice`` the diagnoses of
    cases worth no points (an error the contract does not grade).
    """

    exercise: str
    parts: list[PartResult]
    notes: list[str] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)
    #: Earlier exercises whose references the grade will put in place of the failing
    #: answers this one calls (the student package cannot): the missed parts are then
    #: not decided here, and :meth:`score_label` names them and the grade's range.
    regraded_when_graded: list[str] = field(default_factory=list)

    def undecided_parts(self) -> list[PartResult]:
        """The parts this check cannot decide: the missed ones, when the grade runs the
        answer again with references in place of the failing answers it calls
        (:attr:`regraded_when_graded`); otherwise none, and the score is the grade's."""
        if not self.regraded_when_graded:
            return []
        return [p for p in self.parts if not p.earned]

    def score_label(self) -> str:
        """``"2/4 points"``, the grade's points; or, where some parts cannot be decided
        here (:meth:`undecided_parts`), which parts, why, and the grade's range:
        ``"2/4 points; not decided here: 'values' (2): ..., graded 2/4 if they still
        fail, up to 4/4"``. Never a lower number alone."""
        text = f"{_num(self.score)}/{_num(self.max_score)} points"
        undecided = self.undecided_parts()
        if undecided:
            which = ", ".join(f"`{d}`" for d in self.regraded_when_graded)
            parts = ", ".join(f"{p.name!r} ({_num(p.points)})" for p in undecided)
            best = self.score + sum(p.points for p in undecided)
            text += (f"; not decided here: {parts}. Your answer calls your {which}, which fails its check; the "
                     f"grade runs it again with the reference {which} in place of yours, which this package does "
                     f"not hold, and keeps the better: {_num(self.score)}/{_num(self.max_score)} if these parts "
                     f"still fail, up to {_num(best)}/{_num(self.max_score)} if they pass then")
        return text

    @property
    def score(self) -> float:
        if self.passed:
            return self.max_score  # exactly, whatever the scaled parts sum to in floats
        return round(float(sum(p.score for p in self.parts)), 9)

    @property
    def max_score(self) -> float:
        return round(float(sum(p.points for p in self.parts)), 9)

    @property
    def passed(self) -> bool:
        return all(p.earned for p in self.parts)

    def parts_line(self) -> str:
        """One line: ``values 2/2 · any axis 0/1 · ...`` (for tables and CSV)."""
        return " · ".join(f"{p.name} {_num(p.score)}/{_num(p.points)}" for p in self.parts)

    def reason(self) -> str:
        """The diagnosis of every missed part (each distinct message once)."""
        missed = [p for p in self.parts if not p.earned]
        messages = list(dict.fromkeys(p.message or "failed" for p in missed))
        if len(messages) == 1 and len(missed) == len(self.parts):
            return messages[0]
        if len(messages) == 1 and len(missed) > 1:
            return f"{', '.join(repr(p.name) for p in missed)}: {messages[0]}"
        return " | ".join(f"{p.name!r}: {p.message or 'failed'}" for p in missed)

    def render(self, name: str) -> str:
        """The visible check's text: a verdict line, then one line per part."""
        head = "✓" if self.passed else "✗"
        lines = [f"{head} {name}: {self.score_label()}"]
        lines += [f"  note: {n}" for n in self.notes]
        missed = [p for p in self.parts if not p.earned]
        shared = len({p.message for p in missed}) == 1 and len(missed) > 1
        for i, p in enumerate(self.parts):
            mark = "✓" if p.earned else "✗"
            lines.append(f"  {mark} {p.name} ({_num(p.score)}/{_num(p.points)})")
            if not p.earned and not (shared and p is not missed[-1]):
                lines.extend("      " + line for line in str(p.message or "failed").splitlines())
        for a in self.advice:
            first, *rest = str(a).splitlines()
            lines.append(f"  advice (no points): {first}")
            lines.extend("      " + line.strip() for line in rest)
        return "\n".join(lines)


def _num(x: float) -> str:
    x = round(float(x), 4)
    return str(int(x)) if x == int(x) else f"{x:g}"


def evaluate(exercise: Exercise, results: list[Result], cases: list[Case],
             points: float | None = None, hidden: bool = False, wants=None) -> Report:
    """Judge every case (no stop at the first failure) and score the parts.

    Args:
        exercise: the exercise whose cases these are.
        results: one decoded result per case, in order.
        cases: the cases.
        points: the test cell's points; the parts' points are scaled to sum to it
            (default: the parts' own points).
        hidden: the cases are a hidden set (or ran beside one): judge under
            :func:`~autograder.checks.compare.redacting`, so that no message quotes a value from the inputs.
        wants: the reference's result of each case, by index (``wants[i]``), where the
            caller keeps them (the grader computes them once per exercise and seed);
            default: :meth:`Exercise.expected` of each case.

    Returns:
        The :class:`Report`. A part is earned when all its cases pass; a part with
        no case in ``cases`` is not earned (every part has visible cases).
    """
    shown_cases = cases
    if hidden:  # the messages quote a label only when it is fixed text
        public = public_labels(exercise)
        shown_cases = [case if case.label in public else
                       dataclasses.replace(case, label=f"hidden case {i + 1} of {len(cases)}, its inputs not shown")
                       for i, case in enumerate(cases)]
    with redacted(hidden):
        return _evaluate(exercise, results, cases, shown_cases, points, wants)


def _evaluate(exercise: Exercise, results: list[Result], cases: list[Case], shown_cases: list[Case],
              points: float | None, wants=None) -> Report:
    declared = exercise.part_points()
    total = sum(declared.values())
    scale = 1.0 if points is None or total == 0 else float(points) / total
    if len(results) != len(cases):
        message = f"expected results for {len(cases)} cases, got {len(results)}"
        return Report(exercise.name, [PartResult(n, p * scale, False, message=message) for n, p in declared.items()])
    counts = {n: [0, 0, None, None] for n in declared}  # part -> [cases, failed, first message, its hint]
    notes: list[str] = []
    advice: list[str] = []
    for i, (case, shown, got) in enumerate(zip(cases, shown_cases, results)):
        part = exercise.part_of(case)
        want = exercise.expected(case) if wants is None else wants[i]
        try:
            for note in exercise.judge(shown, got, want) or []:
                if note not in notes:
                    notes.append(note)
            ok, message, hint = True, None, None
        except CheckFailure as exc:
            ok, message, hint = False, str(exc), getattr(exc, "hint", "") or None
        if part == ADVICE:
            if not ok and message != NOT_IMPLEMENTED:
                text = _as_advice(message)
                if text not in advice:
                    advice.append(text)
            continue
        entry = counts[part]
        entry[0] += 1
        if not ok:
            entry[1] += 1
            if entry[2] is None:
                entry[2], entry[3] = message, hint
    parts = []
    for name, p in declared.items():
        n, failed, message, hint = counts[name]
        if n == 0:
            parts.append(PartResult(name, p * scale, False, 0, 0, "no case of this part was run"))
        else:
            parts.append(PartResult(name, p * scale, failed == 0, n, failed, message, hint))
    if all(p.message == NOT_IMPLEMENTED for p in parts if not p.earned) and not any(p.earned for p in parts):
        advice = []
    return Report(exercise.name, parts, notes, advice)


def _as_advice(message: str) -> str:
    """A failed expectation about bad input, reworded as advice: "should raise
    ValueError (x), but returned normally" -> "the reference raises ValueError (x);
    yours returned normally"."""
    if message.startswith("should raise "):
        head, sep, tail = message[len("should raise "):].partition(", but ")
        if sep:
            return f"the reference raises {head}; yours {tail}"
    return message


def run_cases(exercise: Exercise, obj: Any, cases: list[Case], points: float | None = None,
              hidden: bool = False) -> Report:
    """Run ``cases`` on ``obj`` in this process and judge them (the visible path;
    ``hidden``: a hidden set, judged under :func:`~autograder.checks.compare.redacting`)."""
    results = [run_in_process(obj, case, exercise.kind) for case in cases]
    return evaluate(exercise, results, cases, points, hidden)


class Points(float):
    """The points a check earned. ``repr`` is the bare number, which is what
    nbgrader reads from a test cell's ``execute_result`` as a partial grade;
    notebooks show the richer HTML form."""

    def __new__(cls, score: float, max_score: float):
        obj = super().__new__(cls, score)
        obj.max_score = float(max_score)
        return obj

    def __repr__(self) -> str:
        return repr(float(self))

    def _repr_html_(self) -> str:
        return f"<b>{_num(self)} / {_num(self.max_score)} points</b>"
