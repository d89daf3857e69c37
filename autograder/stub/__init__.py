"""The ``autograder`` package as the grading sandbox sees it: ``check`` does nothing.

The trusted grader copies this file into the sandbox as ``autograder/__init__.py``,
so a setup cell's ``from autograder import check`` works while the real checks,
their cases and the reference answers stay outside. Inside the sandbox the test
cells are never run; judging happens in the trusted process
(ARCHITECTURE.md §4).
"""
from __future__ import annotations

__all__ = ["check", "require_chapter"]


def check(name, obj, hidden=False, seed=None):
    """Do nothing: in the grading sandbox the checks run outside, on returned data.

    Args:
        name: the contract name of the exercise (ignored).
        obj: the student's object (ignored).
        hidden, seed: accepted for signature compatibility (ignored).

    Returns:
        None.
    """
    return None


def require_chapter(chapter):
    """Do nothing: the grading sandbox holds the full reference library of earlier chapters.

    Args:
        chapter: the notebook's chapter id (ignored; the student edition's checks it).

    Returns:
        None.
    """
    return None
