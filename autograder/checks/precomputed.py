"""Precomputed visible checks: what the student package ships instead of reference code.

The student edition installs a :class:`Precomputed` store (:func:`use_precomputed`);
the visible checks then read their cases and the reference's results from it
(:meth:`~autograder.checks.exercise.Exercise.expected`,
:func:`~autograder.checks.draws.visible_cases`).
"""
from __future__ import annotations

from .cases import Case, Result

__all__ = ["Precomputed", "use_precomputed", "precomputed"]


class Precomputed:
    """What the student package ships instead of reference code: for each exercise
    of the released chapters, its visible cases and their expected results as data.

    Subclasses implement :meth:`has`, :meth:`cases` and :meth:`expected`
    (:class:`autograder.student.expected.ExpectedStore` reads them from files).
    """

    def has(self, name: str) -> bool:
        """Whether exercise ``name``'s visible cases are stored."""
        raise NotImplementedError

    def cases(self, name: str) -> list[Case]:
        """The stored visible cases of exercise ``name``, in order."""
        raise NotImplementedError

    def expected(self, name: str, case: Case) -> Result:
        """The stored reference result of ``case``; ``ValueError`` for a case that
        was not stored (the visible set is fixed when the chapter is released)."""
        raise NotImplementedError


_PRECOMPUTED: list[Precomputed] = []


def use_precomputed(store: Precomputed | None) -> None:
    """Make the visible checks read cases and expected results from ``store``
    (``None``: compute them with ``solutions`` again, the default)."""
    _PRECOMPUTED[:] = [store] if store is not None else []


def precomputed() -> Precomputed | None:
    """The store installed by :func:`use_precomputed`, or ``None``."""
    return _PRECOMPUTED[0] if _PRECOMPUTED else None
