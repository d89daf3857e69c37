"""The reference's result of each case, made on the trusted side and kept per draw.

What the judge compares a submission's results with: an exercise's cases of one draw
and the reference's result of each (:class:`ReferenceResults`), made once per process
for a draw a seed fixes (:func:`reference_results`), so a class graded with one seed
runs each reference once.
"""
from __future__ import annotations

import copy
import os
import threading
from collections import OrderedDict

from .checks.cases import Result
from .checks.draws import draw_cases, make_rng
from .checks.exercise import Exercise

__all__ = ["ReferenceResults", "reference_results"]


class ReferenceResults:
    """One exercise's cases of one draw and the reference's result of each, each computed
    at most once (on first use) and handed out as a copy: what the judge compares a
    submission's results with (``evaluate(..., wants=...)``), in its first run and in its
    regrades.

    Made here, on the trusted side, from the exercise's case maker and its reference
    alone: nothing of a submission enters it, so one made for a seed serves every
    submission graded with that seed (:func:`reference_results`).

    Args:
        exercise: the registered exercise.
        cases: its cases, as :func:`~autograder.checks.base.draw_cases` drew them.
    """

    def __init__(self, exercise: Exercise, cases: list):
        self.exercise, self._cases = exercise, cases
        self._wants: list[Result | None] = [None] * len(cases)
        self._lock = threading.Lock()
        self.computed = 0  # how many reference results were computed (a test reads it)

    def cases(self) -> list:
        """A copy of the cases (a check may keep what it is given)."""
        return copy.deepcopy(self._cases)

    def __len__(self) -> int:
        return len(self._cases)

    def __getitem__(self, i: int) -> Result:
        with self._lock:
            if self._wants[i] is None:
                self._wants[i] = self.exercise.expected(self._cases[i])
                self.computed += 1
            return copy.deepcopy(self._wants[i])


class _ReferenceCache:
    """:class:`ReferenceResults` by (exercise, reference, hidden set or not, seed), the
    :data:`SIZE` most recently used, for draws that a seed fixes (a seeded hidden set,
    the visible set): a class graded with one seed, or the suite's gradings, draw each
    exercise's cases and run its reference on them once. A fresh draw (``hidden`` without
    a seed) is never kept. The exercise and reference objects are part of the key, so a
    re-registered exercise or another reference never finds another's entry."""

    SIZE = 32

    def __init__(self):
        self._forget()
        os.register_at_fork(after_in_child=self._forget)  # a lock a thread held at the fork

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict = OrderedDict()

    def get(self, exercise: Exercise, hidden: bool, seed: int | None) -> ReferenceResults:
        try:
            reference = exercise.reference()
        except Exception:  # noqa: BLE001 - no reference to key by: judged as before, where it fails per cell
            reference = None
        if (hidden and seed is None) or reference is None:
            return ReferenceResults(exercise, draw_cases(exercise, make_rng(hidden, seed), hidden))
        key = (exercise.name, hidden, seed)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] is exercise and entry[1] is reference:
                self._entries.move_to_end(key)
                return entry[2]
        made = ReferenceResults(exercise, draw_cases(exercise, make_rng(hidden, seed), hidden))
        with self._lock:
            self._entries[key] = (exercise, reference, made)
            self._entries.move_to_end(key)
            while len(self._entries) > self.SIZE:
                self._entries.popitem(last=False)
        return made


_REFERENCES = _ReferenceCache()


def reference_results(exercise: Exercise, hidden: bool, seed: int | None) -> ReferenceResults:
    """The cases of ``exercise`` for ``hidden`` and ``seed`` (:func:`~autograder.checks.base.make_rng`)
    and the reference's result of each, computed once per process for a draw the seed
    fixes (:class:`_ReferenceCache`), afresh for a fresh one."""
    return _REFERENCES.get(exercise, hidden, seed)
