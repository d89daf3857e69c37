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

* :mod:`~autograder.student.hints` — hints whose helper computes an answer: the
  helper's results on the visible cases ship instead of its code.

``package``, ``hints`` and ``wheel`` run in the repository only; ``expected``,
``notebook`` and ``cli`` are copied into the package. See ARCHITECTURE.md §7.
"""
from __future__ import annotations

__all__ = ["STAMP_KEY", "DIST_NAME"]

#: Notebook metadata key stamped at release: ``{"chapter": ..., "edition": "student"}``.
STAMP_KEY = "transformer_book"
#: The student package's distribution name (``pip uninstall transformer-book-student``).
DIST_NAME = "transformer-book-student"
