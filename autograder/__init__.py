"""Checks, trusted grading and nbgrader wiring for the book's exercises.

Students use one function, :func:`check`, in the test cells of the chapter
notebooks: ``check("softmax", softmax)``.
"""
from __future__ import annotations

__all__ = ["check", "require_chapter"]


def check(name, obj, hidden=False, seed=None):
    """Run the checks of exercise ``name`` on ``obj``; see :func:`autograder.checks.base.check`."""
    # on first call: this __init__ stays empty, so the sandbox's `import autograder.wire` loads no checks
    from .checks.base import check as _check

    __tracebackhide__ = True  # noqa: F841 - keeps pytest/IPython tracebacks short
    return _check(name, obj, hidden=hidden, seed=seed)


def require_chapter(chapter):
    """The setup cells' guard against another chapter's student package: in this
    repository (the full install) every chapter is here, so it returns; see
    :func:`autograder.student.require_chapter` for the student edition."""
    # on first call: this __init__ stays empty (see check above)
    from .student import require_chapter as _require

    return _require(chapter)
