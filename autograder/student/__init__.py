"""The student edition: what a class gets for a chapter, without the answers.

``python -m autograder release --out DIR CHAPTER`` writes the student notebooks and,
beside them, an installable package (:mod:`autograder.student.package` builds it)
whose ``autograder`` runs every visible check of the released chapters offline and
whose ``solutions`` holds no reference of an exercise of a released or later chapter:

* :mod:`~autograder.student.expected` — the visible cases and their expected
  results, computed at release with ``solutions`` and shipped as data
  (JSON + ``.npz``), read back by :class:`~autograder.student.expected.ExpectedStore`;
* :mod:`~autograder.student.notebook` — which chapter a notebook is (its release
  stamp, else its graded cells), and the visible checks of a notebook file;
* :mod:`~autograder.student.cli` — the package's ``python -m autograder check``;
* :mod:`~autograder.student.standins` — what a released chapter's setup cell
  imports from a *later* chapter, computed another way than the reference.

* :mod:`~autograder.student.unfinished` — in Jupyter, a cell that needs a blank
  exercise stops with one line naming it, and "Run all" goes on.

* :mod:`~autograder.student.hints` — hints whose helper computes an answer: the
  helper's results on the visible cases ship instead of its code.

``package``, ``hints`` and ``wheel`` run in the repository only; ``expected``,
``notebook``, ``cli`` and ``unfinished`` are copied into the package. See ARCHITECTURE.md §7.
"""
from __future__ import annotations

from importlib import metadata

import autograder

__all__ = ["STAMP_KEY", "DIST_NAME", "WrongPackage", "wheel_name", "require_chapter"]

#: Notebook metadata key stamped at release: ``{"chapter": ..., "edition": "student"}``.
STAMP_KEY = "transformer_book"
#: The student package's distribution name (``pip uninstall transformer-book-student``).
DIST_NAME = "transformer-book-student"


class WrongPackage(ImportError):
    """The installed student package is not the one of the notebook's chapter.

    In Jupyter the message is the whole report (one line, no traceback): IPython shows
    what ``_render_traceback_`` returns.
    """

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


def wheel_name(chapter: str, version: str) -> str:
    """The file name of chapter ``chapter``'s student package (``autograder.student.wheel``
    writes it): ``transformer_book_student-0.1.0+ch06-py3-none-any.whl`` for ``06_masking``.

    Args:
        chapter: a chapter id, ``"06_masking"``.
        version: the book's version, without a local part (``"0.1.0"``).
    """
    return f"{DIST_NAME.replace('-', '_')}-{version}+ch{chapter.split('_', 1)[0]}-py3-none-any.whl"


def require_chapter(chapter: str) -> None:
    """Stop a notebook's setup cell when the student package installed is not chapter ``chapter``'s.

    A release makes one package per chapter (ARCHITECTURE.md §7): the package of chapter
    6 holds chapter 5's references and your chapter 6 answers, the package of chapter 8
    holds chapter 6's references. The repository's full install (studying on your own,
    and the grader) is no student edition and passes silently. In the right chapter's
    package, inside Jupyter, it installs :mod:`~autograder.student.unfinished`'s guard:
    a cell that needs a blank exercise stops with one line naming it.

    Args:
        chapter: the notebook's chapter id, ``"06_masking"``.

    Raises:
        WrongPackage: the student package installed is another chapter's; the one-line
            message names the wheel file to install.
    """
    released = getattr(autograder, "RELEASED", None)
    if released is None:
        return
    if chapter in released:
        # the guard (and the checks it reads) only in its chapter's package: this __init__ stays light
        from .unfinished import install

        install(released)  # a blank exercise's demonstrations stop with one line (in Jupyter)
        return
    try:
        book_version = metadata.version(DIST_NAME).split("+", 1)[0]
    except Exception:  # noqa: BLE001 - a package copied by hand has no metadata: name the file anyway
        book_version = "<version>"
    raise WrongPackage(
        f"this notebook is chapter {chapter}, but the student package installed is for {', '.join(released)}: "
        f"run `pip install {wheel_name(chapter, book_version)}` (one package per "
        "chapter: use one environment per chapter, or reinstall), restart the kernel, then run this cell again"
    )
