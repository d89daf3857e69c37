"""Builders of small chapter notebooks and submissions for the grading tests.

Stable API (the CLI tests use it too):

* :func:`source_notebook` — an nbgrader source notebook for a chapter whose checks
  exist (default ``04_self_attention``): setup cell, one generated solution cell
  (``autograder.sync.solution_cell_source``) and one test cell per exercise;
* :func:`reference_submission` / :func:`blank_submission` — the source itself, and
  the released form (solution regions replaced by ``raise NotImplementedError()``);
* :func:`submission_with` — a copy with some solution cells' source replaced;
* :func:`write_notebook` — write any of these to a path;
* :func:`make_course` — a generated book and a class of submissions (batch grading);
* :func:`judged_cell` — one test cell's score as ``grade_submission`` returns it (fake graders
  return a ``NotebookScores`` of them).
"""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

import solutions
from autograder.bench import make_book, make_class
from autograder.scores import ExerciseScore, Status
from autograder.sync import solution_cell_source

__all__ = [
    "CHAPTER_EXERCISES",
    "DEFAULT_POINTS",
    "SETUP_SOURCE",
    "source_notebook",
    "reference_submission",
    "blank_submission",
    "submission_with",
    "solution_cell",
    "write_notebook",
    "make_course",
    "judged_cell",
]

CHAPTER_EXERCISES = {
    "04_self_attention": ["softmax", "scaled_dot_product_attention", "self_attention"],
    "05_multi_head_attention": ["split_heads", "merge_heads", "MultiHeadAttention"],
    "06_masking": ["padding_mask", "causal_mask", "decoder_mask", "masked_softmax"],
}
DEFAULT_POINTS = {"softmax": 1, "scaled_dot_product_attention": 2, "self_attention": 3}

SETUP_SOURCE = """import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import solutions
from autograder import check"""

# What each chapter's setup cell imports by name beyond SETUP_SOURCE: building
# blocks from other chapters that this chapter's answers call (ARCHITECTURE.md §2).
SETUP_EXTRA = {"05_multi_head_attention": "from solutions import masked_softmax"}

TEST_TEMPLATE = """check("{name}", {name})
### BEGIN HIDDEN TESTS
check("{name}", {name}, hidden=True)
### END HIDDEN TESTS"""


def _meta(grade_id: str, *, grade: bool, solution: bool, locked: bool, points: float | None = None) -> dict:
    meta = {"grade": grade, "solution": solution, "locked": locked, "grade_id": grade_id, "schema_version": 3}
    if points is not None:
        meta["points"] = points
    return {"nbgrader": meta}


def source_notebook(chapter: str = "04_self_attention", exercises: list[str] | None = None,
                    points: dict | None = None, setup: str | None = None) -> nbformat.NotebookNode:
    """An nbgrader source notebook: setup, then prompt / solution / test per exercise.

    Args:
        chapter: the chapter id (its notebook name).
        exercises: contract names (default: :data:`CHAPTER_EXERCISES` of the chapter).
        points: points per exercise (default :data:`DEFAULT_POINTS`, else 1).
        setup: the setup cell's source (default: :data:`SETUP_SOURCE` plus the
            chapter's :data:`SETUP_EXTRA`).

    Returns:
        The notebook (nbformat v4).
    """
    exercises = exercises or CHAPTER_EXERCISES[chapter]
    points = {**DEFAULT_POINTS, **(points or {})}
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells.append(new_markdown_cell(f"# {chapter}"))
    if setup is None:
        setup = "\n".join(filter(None, [SETUP_SOURCE, SETUP_EXTRA.get(chapter)]))
    nb.cells.append(new_code_cell(setup,
                                  metadata=_meta("setup", grade=False, solution=False, locked=True)))
    for name in exercises:
        p = points.get(name, 1)
        nb.cells.append(new_markdown_cell(f"Implement `{name}` ({p} points).",
                                          metadata=_meta("prompt_" + name, grade=False, solution=False, locked=True)))
        nb.cells.append(new_code_cell(solution_cell_source(getattr(solutions, name)),
                                      metadata=_meta(name, grade=False, solution=True, locked=False)))
        nb.cells.append(new_code_cell(TEST_TEMPLATE.format(name=name),
                                      metadata=_meta("test_" + name, grade=True, solution=False, locked=True,
                                                     points=p)))
    return nb


def reference_submission(source: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The source notebook itself, as a submission (full marks)."""
    return copy.deepcopy(source)


_REGION = re.compile(r"^(?P<indent>[ \t]*)### BEGIN SOLUTION\n.*?^[ \t]*### END SOLUTION\n?", re.S | re.M)


def _blank(source: str) -> str:
    return _REGION.sub(lambda m: f"{m.group('indent')}# YOUR CODE HERE\n{m.group('indent')}raise NotImplementedError()\n",
                       source + "\n").rstrip("\n")


def blank_submission(source: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The released student notebook: solution regions become ``raise NotImplementedError()``
    and the hidden-test regions are removed (as nbgrader's generate_assignment does)."""
    nb = copy.deepcopy(source)
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution"):
            cell.source = _blank(cell.source)
        elif meta.get("grade"):
            cell.source = re.sub(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS\n?", "", cell.source, flags=re.S).rstrip()
    return nb


def solution_cell(nb: nbformat.NotebookNode, name: str):
    """The solution cell of exercise ``name`` in ``nb``."""
    for cell in nb.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == name:
            return cell
    raise KeyError(name)


def submission_with(source: nbformat.NotebookNode, **sources: str) -> nbformat.NotebookNode:
    """A reference submission whose solution cells ``name=source`` are replaced."""
    nb = reference_submission(source)
    for name, text in sources.items():
        solution_cell(nb, name).source = text
    return nb


def write_notebook(nb, path: Path) -> Path:
    """Write a notebook (a NotebookNode, or raw text/bytes for broken files) to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(nb, bytes):
        path.write_bytes(nb)
    elif isinstance(nb, str):
        path.write_text(nb, encoding="utf-8")
    elif isinstance(nb, nbformat.NotebookNode):
        nbformat.write(nb, str(path))
    else:
        path.write_text(json.dumps(nb), encoding="utf-8")
    return path


def make_course(root: Path, chapters: list[str], students: int) -> tuple[Path, Path]:
    """A generated book of ``chapters`` under ``root`` and a class of ``students``
    in ``root / "submitted"`` (:func:`autograder.bench.make_class`: reference, blank,
    wrong, … in turn). Returns ``(root, book)``, as the batch-grading fixtures give it."""
    book = make_book(root, chapters)
    sources = {c: book / c / f"{c}.ipynb" for c in chapters}
    make_class(root / "submitted", sources, students=students)
    return root, book


def judged_cell(student: str, chapter: str, grade_id: str, score: float, max_score: float, status: Status,
                reason: str, **more) -> ExerciseScore:
    """One judged test cell (``test_<exercise>``) as :func:`autograder.grading.grade_submission`
    returns it (among the ``scores`` of its :class:`~autograder.scores.NotebookScores`), for
    the fake graders of the batch tests (``more``: ``parts``, ``notes``)."""
    return ExerciseScore(student, chapter, grade_id[len("test_"):], float(score), float(max_score), status, reason,
                         grade_id=grade_id, **more)
