"""The book as the autograder reads it: where the chapters are, and which lines are answers.

A chapter is a folder ``book/<id>/`` holding the nbgrader *source* notebook
``<id>.ipynb`` (ARCHITECTURE.md §2); its id is also nbgrader's assignment id. The
lines a student must never see are those of its solution regions, hidden test
regions and mark schemes (:func:`secret_lines`); :func:`answer_lines` keeps those that
would give an answer away (:func:`distinctive`). The release (:mod:`autograder.release`),
the batch grader, the student package builder and the commands read the book only
through this module.
"""
from __future__ import annotations

import builtins
import keyword
import re
from pathlib import Path

import nbformat

__all__ = ["REPO", "BOOK", "MARKERS", "STUB_LINES", "chapter_ids", "source_notebook", "secret_lines",
           "distinctive", "answer_lines"]

REPO = Path(__file__).resolve().parent.parent
BOOK = REPO / "book"

# nbgrader's delimiters; none of them may appear in a released notebook.
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS",
           "BEGIN MARK SCHEME", "END MARK SCHEME")
# What nbgrader's ClearSolutions puts in place of a solution (code and markdown).
STUB_LINES = {"# YOUR CODE HERE", "raise NotImplementedError()", "YOUR ANSWER HERE"}


def chapter_ids(book: Path = BOOK) -> list[str]:
    """Chapter ids (= nbgrader assignment ids) that have a source notebook, in order."""
    return sorted(p.parent.name for p in book.glob("*/*.ipynb") if p.stem == p.parent.name)


def source_notebook(chapter: str, book: Path = BOOK) -> Path:
    """``book/<chapter>/<chapter>.ipynb``; raises ``ValueError`` when it does not exist."""
    path = book / chapter / f"{chapter}.ipynb"
    if not path.is_file():
        raise ValueError(f"no source notebook for chapter {chapter!r}: expected {path}")
    return path


def _cell_lines(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines()]


def secret_lines(nb: nbformat.NotebookNode) -> set[str]:
    """Lines a student must never see: those of the solution regions, the hidden test
    regions and the mark schemes that appear nowhere else in the source notebook
    (a solution line repeated in a docstring or a demo cell is not secret)."""
    secret: set[str] = set()
    public: set[str] = set()
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        lines = cell.source.splitlines()
        has_markers = any("BEGIN SOLUTION" in line or "BEGIN HIDDEN TESTS" in line
                          or "BEGIN MARK SCHEME" in line for line in lines)
        if meta.get("solution") and not has_markers:
            secret.update(_cell_lines(cell.source))  # nbgrader replaces the whole cell
            continue
        inside = False
        for line in lines:
            if any(f"BEGIN {what}" in line for what in ("SOLUTION", "HIDDEN TESTS", "MARK SCHEME")):
                inside = True
            (secret if inside else public).add(line.strip())
            if any(f"END {what}" in line for what in ("SOLUTION", "HIDDEN TESTS", "MARK SCHEME")):
                inside = False
    return {line for line in secret - public - STUB_LINES if line}


_PY_WORDS = None


def distinctive(line: str) -> bool:
    """Whether a stripped code line says something of its own: two names that are not
    Python keywords or builtins (``k = beams.size(0)``), or one in a long line.
    ``else:``, ``)``, ``raise ValueError(``, ``super().__init__()``,
    ``batch, length, d_model = x.shape`` or ``vocab_size = logits.size(-1)`` appear in
    any such file and prove nothing."""
    global _PY_WORDS
    if _PY_WORDS is None:
        _PY_WORDS = set(keyword.kwlist) | set(dir(builtins)) | {"self", "cls"}
    if re.fullmatch(r"[\w, ()]+ = (np\.asarray\(\w+\)|\w+\.shape|\w+\.size\(\)|\w+\.size\(-?\d\)|\w+\.shape\[-?\d\])",
                    line):
        return False  # reading the input's shape (or one of its sizes), or making it an array: every answer starts so
    names = [w for w in re.findall(r"[A-Za-z_][A-Za-z_0-9]*", line)
             if w not in _PY_WORDS and not (w.startswith("__") and w.endswith("__"))]
    return len(names) >= 2 or (len(names) == 1 and len(line) >= 24)


def answer_lines(chapters: list[str], book: Path = BOOK) -> dict[str, set[str]]:
    """Chapter -> the lines that would give away its answers, for ``chapters`` and every
    later chapter under ``book``: the distinctive (:func:`distinctive`) secret lines
    (:func:`secret_lines`) of its source notebook that are not also a line of an
    earlier chapter's answer (``self.norm1 = nn.LayerNorm(d_model)`` is chapter 7's as
    much as chapter 8's, and a class studying chapter 8 has chapter 7's references)."""
    first = min(chapters)
    secret = {c: secret_lines(nbformat.read(str(source_notebook(c, book)), as_version=4)) for c in chapter_ids(book)}
    earlier = set().union(*(lines for c, lines in secret.items() if c < first))
    return {c: {line for line in lines - earlier if distinctive(line)} for c, lines in secret.items() if c >= first}
