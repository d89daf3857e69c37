"""Every line of code a chapter page shows fits the book's column.

The page's code boxes do not wrap: a longer line is cut at the column's edge
(the reader scrolls sideways or never sees its end). Measured in headless Chromium
on a built chapter, the column is 684 px wide, about 77 characters of the code font;
a folded cell (a solution behind its toggle) is 666 px, about 75. The limits below
keep three characters of margin.

What is checked, for every chapter in the toc (the source notebooks, so the test is
fast and runs without a build):

- every line of a hand-written code cell: at most :data:`CODE_COLUMN` characters;
- the visible lines of a graded test cell (the hidden region is removed from the
  page, ``book/_ext/nbgrader_render.py``): at most :data:`CODE_COLUMN`;
- the one cell the book folds by its ``hide-input`` tag: at most :data:`FOLDED_COLUMN`;
- every line of a generated solution cell (folded behind its toggle on the page): at
  most :data:`FOLDED_COLUMN`. ``python -m autograder.sync`` writes these cells from
  ``solutions/`` (ARCHITECTURE.md §1), so a failure here is mended in the package: the
  docstrings, comments and code of the functions a chapter embeds are kept within
  :data:`FOLDED_COLUMN`, then the notebooks are regenerated.

The printed output (what a cell writes to stdout or stderr, and a plain-text result)
is checked on the build's execution of each chapter
(:func:`test_every_printed_line_fits_the_column`, which needs the built book): at
most :data:`CODE_COLUMN` characters a line too, the output box being as wide as the
code box.
"""
from __future__ import annotations

import json

import pytest

from book_helpers import ROOT, executed_notebook, load_extension, toc_chapters

CODE_COLUMN = 74
FOLDED_COLUMN = 72

RENDER = load_extension("nbgrader_render")
# An output holding one of these is drawn as a picture or HTML, not as its text.
RICH = ("image/png", "image/svg+xml", "text/html", "application/vnd.jupyter.widget-view+json")
REMOVED = ("remove-cell", "remove-output")

def _chapters():
    return [pytest.param(path, id=path.stem) for path in toc_chapters()]


def _shown_lines(cell):
    """The lines of a code cell the page shows (a graded cell's hidden region cut)."""
    source = "".join(cell["source"])
    if cell["metadata"].get("nbgrader", {}).get("grade"):
        source = "\n".join(text for hidden, text in RENDER.split_hidden_tests(source) if not hidden)
    return source.split("\n")


def too_wide(notebook, skip=()):
    """``(cell index, line number, width, line)`` of every shown line past its column.

    Args:
        notebook: a chapter notebook, as the ``dict`` ``json.load`` returns.
        skip: beginnings of the first lines of cells not to check.

    Returns:
        list of tuples; cell indices and line numbers count from 0 and 1.
    """
    wide = []
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "code" or cell["metadata"].get("nbgrader", {}).get("solution"):
            continue
        if _shown_lines(cell)[0].startswith(tuple(skip)):
            continue
        limit = FOLDED_COLUMN if "hide-input" in cell["metadata"].get("tags", []) else CODE_COLUMN
        for number, line in enumerate(_shown_lines(cell), start=1):
            if len(line) > limit:
                wide.append((index, number, len(line), line))
    return wide


def _report(path, wide):
    return f"{path.name}: {len(wide)} code line(s) past the column, cut on the page:\n" + "\n".join(
        f"  cell [{index}] line {number}: {width} characters: {line.strip()[:60]}…"
        for index, number, width, line in wide)


@pytest.mark.parametrize("path", _chapters())
def test_every_shown_code_line_fits_the_column(path):
    notebook = json.loads(path.read_text(encoding="utf-8"))
    wide = too_wide(notebook, skip=())
    assert not wide, _report(path, wide)


def test_a_long_line_is_found_and_a_hidden_one_is_not():
    def code(source, **metadata):
        return {"cell_type": "code", "metadata": metadata, "source": source.splitlines(keepends=True)}

    long_call = "x = f(" + ", ".join(["argument"] * 8) + ")"
    notebook = {"cells": [
        {"cell_type": "markdown", "metadata": {}, "source": ["# " + "word " * 40]},
        code("y = 1\n" + long_call),
        code("check('f', f)\n### BEGIN HIDDEN TESTS\ncheck('f', f, hidden=True) " + "# " * 40
             + "\n### END HIDDEN TESTS", nbgrader={"grade": True}),
        code("z = 2  # " + "c" * 64, tags=["hide-input"]),
        code("a = 3  # " + "c" * 64),
    ]}
    assert len(long_call) > CODE_COLUMN
    assert [(index, number) for index, number, _, _ in too_wide(notebook)] == [(1, 2), (3, 1)]
    assert [index for index, _, _, _ in too_wide(notebook, skip=("y = 1",))] == [3]


@pytest.mark.parametrize("path", _chapters())
def test_generated_solution_cells_fit_the_folded_column(path):
    notebook = json.loads(path.read_text(encoding="utf-8"))
    wide = [(index, len(line)) for index, cell in enumerate(notebook["cells"])
            if cell["metadata"].get("nbgrader", {}).get("solution")
            for line in "".join(cell["source"]).split("\n") if len(line) > FOLDED_COLUMN]
    assert not wide, f"{path.name}: solution-cell lines past the folded column: {wide}"


def printed_too_wide(cells):
    """``(cell index, width, line)`` of every printed line past the column.

    Args:
        cells: the code and markdown cells of an executed notebook (dicts with
            ``outputs``); cells the page removes (hidden checks, ``remove-cell`` or
            ``remove-output`` tags) are skipped.

    Returns:
        list of tuples: a stream's lines (split at ``\\n`` and ``\\r``) and the text of
        a result that has no picture or HTML beside it.
    """
    wide = []
    for index, cell in enumerate(cells):
        metadata = cell.get("metadata", {})
        if cell.get("cell_type") != "code" or RENDER.HIDDEN_CELL_KEY in metadata:
            continue
        if set(REMOVED) & set(metadata.get("tags", [])):
            continue
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                text = out.get("text", "")
            elif "data" in out and not set(RICH) & set(out["data"]):
                text = out["data"].get("text/plain", "")
            else:
                continue
            text = text if isinstance(text, str) else "".join(text)
            for line in text.replace("\r", "\n").split("\n"):
                if len(line) > CODE_COLUMN:
                    wide.append((index, len(line), line))
    return wide


def test_a_long_printed_line_is_found_and_a_picture_is_not():
    long_line = "loss " * 20
    cells = [
        {"cell_type": "code", "metadata": {}, "outputs": [
            {"output_type": "stream", "name": "stdout", "text": "short\n" + long_line + "\n"}]},
        {"cell_type": "code", "metadata": {}, "outputs": [
            {"output_type": "display_data", "data": {"image/png": "...", "text/plain": long_line}}]},
        {"cell_type": "code", "metadata": {"tags": ["remove-output"]}, "outputs": [
            {"output_type": "stream", "name": "stdout", "text": long_line}]},
        {"cell_type": "code", "metadata": {}, "outputs": [
            {"output_type": "execute_result", "data": {"text/plain": ["(1, ", long_line, ")"]}},
            {"output_type": "stream", "name": "stderr", "text": "10%|#\r" + long_line}]},
    ]
    assert [(index, width) for index, width, _ in printed_too_wide(cells)] == [
        (0, len(long_line)), (3, len(long_line) + 5), (3, len(long_line))]


@pytest.mark.book
@pytest.mark.slow
@pytest.mark.parametrize("path", _chapters())
def test_every_printed_line_fits_the_column(built_book, path):
    executed = executed_notebook(path, render_module=RENDER)
    assert executed is not None, (f"{path.relative_to(ROOT)}: the build's jupyter-cache holds no "
                                  "execution of the current source")
    wide = printed_too_wide(executed.cells)
    assert not wide, f"{path.name}: {len(wide)} printed line(s) past the column:\n" + "\n".join(
        f"  cell [{index}]: {width} characters: {line[:60]}…" for index, width, line in wide)
