"""Every chapter in the toc ran top to bottom in the book build, hidden checks included.

This replaces a second execution under nbval. The strict build executes each
chapter once (myst-nb through jupyter-cache) with its hidden checks set apart in
removed cells (``book/_ext/nbgrader_render.py``, ``hidden="run"``); the cache keeps
only executions that raised no error. Here the current source of each chapter is
rendered the same way and looked up in the cache (``book_helpers.executed_notebook``),
so the assertions are about exactly this version of the notebook:

- the cache holds an execution of it (it ran top to bottom without an error);
- every code cell ran, and no output is an error;
- every ``check(...)`` line of every graded cell, visible and hidden, printed its
  ``✓ name: …`` verdict, and no graded cell printed a ``✗`` (``check`` prints a
  partial score without raising, so a reference answer that misses a part would
  not stop the build).

The same execution stands for the release's answered run: the released chapter with
the reference answers pasted in holds exactly the code this build executed
(:func:`test_the_answered_release_is_the_code_the_build_ran`), so
``tests/autograder/test_release_runs.py`` executes only the blank release, and checks
the answered one in the student venv with ``python -m autograder check``.

``make nbval`` still runs each chapter under nbval, for one-off use.
"""
from __future__ import annotations

import json
import re

import pytest

from book_helpers import ROOT, executed_notebook, load_extension, toc_chapters
from student_env import filled

from autograder.release import COLAB_KEY, release

pytestmark = [pytest.mark.book, pytest.mark.slow]

RENDER = load_extension("nbgrader_render")
CHECK_CALL = re.compile(r"^check\(", re.MULTILINE)
PASS_VERDICT = re.compile(r"^\u2713 \S+", re.MULTILINE)  # "✓ softmax: 3/3 points" at column 0
FAIL_MARK = "\u2717"


def _params():
    chapters = toc_chapters()
    assert len(chapters) == 11, f"_toc.yml lists {len(chapters)} chapters, the book has 11: is the search broken?"
    return [pytest.param(p, id=p.stem) for p in chapters]


def _printed(cell):
    """Everything a code cell wrote to stdout/stderr or displayed as text."""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif "data" in out:
            parts.append(out["data"].get("text/plain", ""))
    return "\n".join(p if isinstance(p, str) else "".join(p) for p in parts)


def _graded_groups(executed):
    """``grade_id -> (check calls, printed text)`` over each graded cell and its hidden cells."""
    groups = {}
    for cell in executed.cells:
        if cell.cell_type != "code":
            continue
        meta = cell.get("metadata", {})
        grade_id = meta.get(RENDER.HIDDEN_CELL_KEY, {}).get("hidden_tests_of")
        if grade_id is None and meta.get("nbgrader", {}).get("grade"):
            grade_id = meta["nbgrader"].get("grade_id")
        if grade_id is None:
            continue
        calls, printed = groups.get(grade_id, (0, ""))
        groups[grade_id] = (calls + len(CHECK_CALL.findall(cell.source)), printed + "\n" + _printed(cell))
    return groups


@pytest.mark.parametrize("notebook", _params())
def test_chapter_ran_in_the_build_with_its_hidden_checks(built_book, notebook):
    rel = notebook.relative_to(ROOT)
    executed = executed_notebook(notebook, render_module=RENDER)
    assert executed is not None, (
        f"{rel}: the build's jupyter-cache holds no execution of the current source: it failed "
        "in the strict build (see that test's log) or changed after the build")
    problems = []
    for index, cell in enumerate(executed.cells):
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        if cell.get("execution_count") is None:
            problems.append(f"cell {index}: did not run")
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                problems.append(f"cell {index}: {out.get('ename')}: {out.get('evalue')}")
    ran_hidden = {c.metadata[RENDER.HIDDEN_CELL_KEY]["hidden_tests_of"] for c in executed.cells
                  if RENDER.HIDDEN_CELL_KEY in c.get("metadata", {}) and c.get("execution_count") is not None}
    for index, cell in enumerate(json.loads(notebook.read_text(encoding="utf-8"))["cells"]):
        if RENDER.BEGIN_HIDDEN in RENDER._source_text(cell):
            grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or f"cell {index}"
            if grade_id not in ran_hidden:
                problems.append(f"cell {index} ({grade_id!r}): its hidden checks did not run in the build")
    for grade_id, (calls, printed) in _graded_groups(executed).items():
        passed = len(PASS_VERDICT.findall(printed))
        if FAIL_MARK in printed:
            failed = [line for line in printed.splitlines() if FAIL_MARK in line]
            problems.append(f"graded cell {grade_id!r}: the reference misses a part: {failed}")
        if passed < calls:
            problems.append(f"graded cell {grade_id!r}: {calls} check(...) calls (visible and hidden) "
                            f"but {passed} \u2713 verdict lines")
    assert not problems, f"{rel} in the build's execution:\n" + "\n".join(problems)



@pytest.mark.parametrize("notebook", _params())
def test_the_answered_release_is_the_code_the_build_ran(built_book, notebook, tmp_path):
    """The released chapter, answered as a student who finished it answers it, is, code cell
    for code cell, the notebook this build executed (its hidden-check cells aside): the
    build's run, asserted on above, is the answered release's run, which is therefore
    not executed a second time (``tests/autograder/test_release_runs.py``)."""
    chapter = notebook.stem
    executed = executed_notebook(notebook, render_module=RENDER)
    assert executed is not None, f"{chapter}: the build's jupyter-cache holds no execution of the current source"
    release(tmp_path, [chapter], package=False)
    answered = filled(tmp_path / chapter / f"{chapter}.ipynb")
    ran = [c.source for c in executed.cells
           if c.cell_type == "code" and RENDER.HIDDEN_CELL_KEY not in c.get("metadata", {})]
    handed = [c.source for c in answered.cells  # the release's Colab install cell: no code of the book's
              if c.cell_type == "code" and not c.get("metadata", {}).get("transformer_book", {}).get(COLAB_KEY)]
    assert len(handed) == len(ran), (f"{chapter}: the answered release has {len(handed)} code cells, the build "
                                     f"executed {len(ran)} (hidden checks aside)")
    for index, (ours, theirs) in enumerate(zip(handed, ran)):
        assert ours == theirs, (f"{chapter}, code cell {index}: the answered release differs from the code the "
                                f"build executed, so the build's run does not stand for it:\n--- release\n{ours}\n"
                                f"--- build\n{theirs}")
