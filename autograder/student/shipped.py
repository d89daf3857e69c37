"""Which modules of ``autograder`` the student package ships: the import graph decides.

What the student side imports (:data:`STUDENT_ROOTS` and the chapter's check modules),
directly or not, ships unchanged (:func:`shipped_modules`); a module nothing there
imports is withheld. Nothing is listed by hand.
"""
from __future__ import annotations

import sys
from pathlib import Path

from ..checks import exercises_of
from ..fingerprint import import_closure

__all__ = ["AUTOGRADER_DIR", "REPO", "STUDENT_ROOTS", "RELEASE_ONLY", "check_modules", "shipped_modules"]


AUTOGRADER_DIR = Path(__file__).resolve().parent.parent


REPO = AUTOGRADER_DIR.parent


#: Where the student edition's ``autograder`` starts, besides the chapter's check modules:
#: what its generated ``__init__`` and ``__main__`` import (``check`` and its expected
#: results, ``require_chapter``, the ``check`` command). Every module these and the check
#: modules import ships unchanged (:func:`shipped_modules`).
STUDENT_ROOTS = ("checks/base.py", "student/__init__.py", "student/expected.py", "student/cli.py")


#: Modules the student side imports only inside functions that run when a release is
#: built, never in a student's kernel: ``student/expected.py`` reads the chapter's locked
#: cells from the repository's book (``locked_cells``) to record them as data.
RELEASE_ONLY = ("book.py",)


def _is_check_module(path: Path, autograder_dir: Path) -> bool:
    """Whether ``path`` is a chapter's check module (``autograder/checks/chNN_*.py``)."""
    return path.parent == autograder_dir / "checks" and path.name.startswith("ch")


def check_modules(chapters: list[str]) -> list[Path]:
    """The check modules of ``chapters`` and the check modules they import."""
    paths = {Path(sys.modules[type(ex).__module__].__file__) for c in chapters for ex in exercises_of(c)}
    return sorted(p for p in import_closure(paths, REPO) if _is_check_module(p, AUTOGRADER_DIR))


def shipped_modules(check_paths: list[Path], autograder_dir: Path = AUTOGRADER_DIR) -> list[str]:
    """The files of ``autograder`` that the student package ships unchanged: every module
    that :data:`STUDENT_ROOTS` and the chapter's check modules import, directly or not
    (:func:`autograder.fingerprint.import_closure`), less the check modules themselves
    (they ship without their answer helpers), the package's ``__init__`` (generated) and
    :data:`RELEASE_ONLY`. A module the student side starts to import ships; one it stops
    importing is withheld: nothing to list.

    Args:
        check_paths: the chapter's check modules (:func:`check_modules`).
        autograder_dir: the ``autograder`` package to read.

    Returns:
        Paths relative to ``autograder_dir``, sorted.
    """
    roots = [autograder_dir / rel for rel in STUDENT_ROOTS] + list(check_paths)
    generated = autograder_dir / "__init__.py"
    stop = {generated, *(autograder_dir / rel for rel in RELEASE_ONLY)}
    found = import_closure(roots, autograder_dir.parent, stop=stop)
    return sorted(p.relative_to(autograder_dir).as_posix() for p in found
                  if p.is_relative_to(autograder_dir) and not _is_check_module(p, autograder_dir))
