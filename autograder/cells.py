"""A notebook's graded cells: what the trusted source says and what the submission holds.

The trusted source notebook gives the setup cell and, per graded test cell, a
:class:`GradedCell` (its exercise, ``grade_id`` and points: :func:`read_source`); the
submission gives each one its solution cell's source, matched by nbgrader ``grade_id``,
or settles it when there is none, several, or one whose metadata was changed
(:func:`match_submission`). A cell carries what grading finds for it until it is settled
into an :class:`~autograder.scores.ExerciseScore`. The exercise ids a submission's cells
carry name the chapter it really holds (:func:`chapter_by_exercises`, :func:`wrong_chapter`).
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .checks import load_all
from .checks.exercise import Exercise
from .checks.scoring import Report
from .reference_results import ReferenceResults
from .scores import ExerciseScore, PartScore, Status
from .untrusted import NotebookError, one_line, read_notebook

__all__ = ["GradedCell", "read_source", "match_submission", "chapter_by_exercises", "wrong_chapter"]


# --------------------------------------------------------------------------- which chapter a notebook holds


def chapter_by_exercises(names: set[str]) -> str | None:
    """The chapter whose registered exercises match most of ``names`` (the exercise ids a
    notebook's cells carry, ``softmax`` for both ``softmax`` and ``test_softmax``); ties go
    to the first chapter id. ``None`` when none matches."""
    votes = Counter(ex.chapter for name, ex in load_all().items() if name in names)
    if not votes:
        return None
    best = max(votes.values())
    return sorted(c for c, n in votes.items() if n == best)[0]


def _exercise_ids(nb: dict) -> set[str]:
    """The exercise ids of a notebook's nbgrader cells (``test_`` taken off a test cell's)."""
    names = set()
    for cell in nb["cells"]:
        grade_id = _nbgrader(cell).get("grade_id")
        if isinstance(grade_id, str):
            names.add(grade_id[len("test_"):] if grade_id.startswith("test_") else grade_id)
    return names


def wrong_chapter(found: set[str] | None, chapter: str, scores: list[ExerciseScore]) -> str | None:
    """The chapter a submission really holds, when it is another one: none of ``chapter``'s
    exercises was found in it (every score ``missing``) and the exercise ids of its cells
    (``found``, read while grading; ``None``: nothing was read) are another chapter's."""
    if not found or not scores or any(s.status != Status.MISSING for s in scores):
        return None
    real = chapter_by_exercises(found)
    return real if real and real != chapter else None


# --------------------------------------------------------------------------- notebooks


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    if isinstance(src, list) and all(isinstance(s, str) for s in src):
        return "".join(src)
    if isinstance(src, str):
        return src
    raise NotebookError("a cell's source is neither text nor a list of lines")


def _nbgrader(cell: dict) -> dict:
    meta = cell.get("metadata")
    meta = meta.get("nbgrader") if isinstance(meta, dict) else None
    return meta if isinstance(meta, dict) else {}


@dataclass
class GradedCell:
    """One graded test cell of the source notebook and what grading found for it."""

    name: str
    grade_id: str
    points: float
    solution_meta: dict
    exercise: Exercise | None = None
    source: str | None = None
    cases: list = field(default_factory=list)
    hidden: bool = False  # the cases carry hidden inputs (fresh, randomised)
    wants: ReferenceResults | None = None  # the reference's result of each case
    # every case raised the released stub's NotImplementedError (:func:`~autograder.stubs.raised_by_stub`)
    blank_stub: bool = False
    # the judgment: student and chapter are filled in when grade_submission hands it over
    result: ExerciseScore | None = None

    def settle(self, status: Status, reason: str = "", passed: bool = False) -> None:
        self.result = ExerciseScore(student="", chapter="", exercise=self.name, grade_id=self.grade_id,
                                    score=float(self.points) if passed else 0.0, max_score=float(self.points),
                                    status=status, reason=one_line(reason))

    def settle_report(self, report: Report) -> None:
        """Settle from a judged report: partial credit by parts."""
        score = float(report.score)
        self.result = ExerciseScore(
            student="", chapter="", exercise=self.name, grade_id=self.grade_id, score=score,
            max_score=float(self.points), status=_status_of(score, report.passed),
            # every missed part's message whole (each is cut at 400 characters, as in ``parts``)
            reason="" if report.passed else one_line(report.reason(), 420 * max(1, len(report.parts))),
            parts=[PartScore(p.name, float(p.score), float(p.points),
                             one_line(p.message) if p.message and not p.earned else "",
                             # the check's own hint, apart from text the answer wrote (report.diagnosis_key)
                             one_line(p.hint) if p.hint and not p.earned else "")
                   for p in report.parts],
            notes=[one_line(n) for n in report.notes] + [one_line("advice (no points): " + a) for a in report.advice],
        )


def _status_of(score: float, passed: bool) -> Status:
    """``passed``, else ``partial`` when some points were earned, else ``failed``."""
    return Status.PASSED if passed else (Status.PARTIAL if score > 0 else Status.FAILED)


def read_source(source_nb: Path) -> tuple[list[str], list[GradedCell]]:
    """The setup cell and the graded test cells of the trusted source notebook."""
    nb = read_notebook(source_nb)
    code = [c for c in nb["cells"] if c.get("cell_type") == "code"]
    setup: list[str] = []
    if code and not _nbgrader(code[0]).get("solution") and not _nbgrader(code[0]).get("grade"):
        setup = [_source(code[0])]
    solutions = {
        _nbgrader(c).get("grade_id"): _nbgrader(c) for c in nb["cells"] if _nbgrader(c).get("solution")
    }
    graded = []
    for cell in nb["cells"]:
        meta = _nbgrader(cell)
        grade_id = meta.get("grade_id", "")
        if not meta.get("grade") or meta.get("solution") or not str(grade_id).startswith("test_"):
            continue
        name = grade_id[len("test_"):]
        if name not in solutions:
            raise ValueError(f"{source_nb}: test cell {grade_id!r} has no solution cell {name!r}")
        graded.append(GradedCell(name, grade_id, float(meta.get("points", 0) or 0), solutions[name]))
    return setup, graded


def match_submission(graded: list[GradedCell], submission_nb: Path | None) -> set[str] | None:
    """Take each exercise's solution source from the submission, or settle it.

    Returns:
        The exercise ids the submission's cells carry (:func:`_exercise_ids`), or ``None``
        when there is no submission or it cannot be read.
    """
    if submission_nb is None:
        for g in graded:
            g.settle(Status.MISSING, "no submission")
        return None
    try:
        nb = read_notebook(submission_nb)
        by_id: dict[str, list[dict]] = {}
        for cell in nb["cells"]:
            grade_id = _nbgrader(cell).get("grade_id")
            if isinstance(grade_id, str):
                by_id.setdefault(grade_id, []).append(cell)
        found = _exercise_ids(nb)
    except NotebookError as exc:
        for g in graded:
            g.settle(Status.INVALID, f"unreadable submission: {exc}")
        return None
    for g in graded:
        cells = by_id.get(g.name, [])
        if not cells:
            g.settle(Status.MISSING, f"no solution cell with grade_id {g.name!r} (was it deleted?)")
            continue
        if len(cells) > 1:
            g.settle(Status.INVALID, f"{len(cells)} cells have grade_id {g.name!r}: a solution cell was duplicated")
            continue
        cell = cells[0]
        if cell.get("cell_type") != "code":
            g.settle(Status.INVALID, f"the solution cell {g.name!r} was changed into a {cell.get('cell_type')!r} cell")
            continue
        changed = _metadata_change(g.solution_meta, _nbgrader(cell))
        if changed:
            g.settle(Status.INVALID, f"the nbgrader metadata of solution cell {g.name!r} was changed ({changed})")
            continue
        try:
            g.source = _source(cell)
        except NotebookError as exc:
            g.settle(Status.INVALID, f"solution cell {g.name!r}: {exc}")
    return found


def _metadata_change(source: dict, submitted: dict) -> str:
    """What differs in the grading-relevant nbgrader metadata, or ``""``."""
    for key in ("solution", "grade"):
        if bool(source.get(key)) != bool(submitted.get(key)):
            return f"{key}: {json.dumps(submitted.get(key))} instead of {json.dumps(source.get(key, False))}"
    if ("points" in source or "points" in submitted) and source.get("points") != submitted.get("points"):
        return f"points: {json.dumps(submitted.get('points'))} instead of {json.dumps(source.get('points'))}"
    return ""
