"""The prompts state the graded parts and points that the checks grade.

Each exercise's prompt cell (nbgrader ``grade_id`` ``prompt_<name>``) carries a block

    **Graded parts (3 points)**
    - values on random inputs: 1 point
    - any axis: 1 point
    - no overflow at 1e4: 1 point

whose parts, points and order must equal the exercise's ``Exercise.parts``, and whose
total must equal the test cell's ``points`` (which nbgrader's partial grades rely on:
``check`` returns the parts' points).
"""
import html
import json
import re
from pathlib import Path

import pytest

from autograder.checks import load_all

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(ROOT.glob("book/[0-9][0-9]_*/[0-9][0-9]_*.ipynb"))

HEADER = re.compile(r"^\*\*Graded parts \((\d+(?:\.\d+)?) points?\)\*\*\s*$")
ITEM = re.compile(r"^- (.+): (\d+(?:\.\d+)?) points?\s*$")


def _plain(name: str) -> str:
    """A part name as the reader sees it: code spans and HTML escapes undone, so the
    prompt may write `` `<sos>` `` (which MyST would otherwise swallow as raw HTML)
    where the check's part name says ``<sos>``."""
    return html.unescape(name.replace("`", "")).strip()


def graded_parts(markdown: str) -> tuple[float, list[tuple[str, float]]] | None:
    """``(total, [(part, points), ...])`` from a prompt's text, or ``None`` without a block."""
    lines = markdown.splitlines()
    for i, line in enumerate(lines):
        header = HEADER.match(line.strip())
        if header:
            items = []
            for item_line in lines[i + 1:]:
                item = ITEM.match(item_line.strip())
                if not item:
                    break
                items.append((_plain(item.group(1)), float(item.group(2))))
            return float(header.group(1)), items
    return None


def test_graded_parts_parser():
    text = "Intro.\n\n**Graded parts (3 points)**\n- values: 2 points\n- any axis: 1 point\n\nMore."
    assert graded_parts(text) == (3.0, [("values", 2.0), ("any axis", 1.0)])
    assert graded_parts("no block here") is None
    assert graded_parts("**Graded parts (1 point)**\n- `[<sos>, y…]` &amp; more: 1 point") == (
        1.0, [("[<sos>, y…] & more", 1.0)])


def _cells(notebook):
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    for index, cell in enumerate(nb["cells"]):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        yield index, cell, meta


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_prompts_state_the_parts_the_checks_grade(notebook):
    registry = load_all()
    prompts, points = {}, {}
    for index, cell, meta in _cells(notebook):
        grade_id = str(meta.get("grade_id", ""))
        if grade_id.startswith("prompt_"):
            prompts[grade_id[len("prompt_"):]] = (index, "".join(cell["source"]))
        if meta.get("grade") and grade_id.startswith("test_"):
            points[grade_id[len("test_"):]] = float(meta.get("points", 0))
    assert points, f"{notebook.name}: no graded test cells"
    problems = []
    for name, cell_points in points.items():
        parts = [(n, float(p)) for n, p in type(registry[name]).parts.items()]
        if sum(p for _, p in parts) != cell_points:
            problems.append(f"{name}: the test cell is worth {cell_points:g} points, the parts "
                            f"{sum(p for _, p in parts):g}")
        if name not in prompts:
            problems.append(f"{name}: no prompt cell with grade_id 'prompt_{name}'")
            continue
        index, text = prompts[name]
        block = graded_parts(text)
        if block is None:
            problems.append(f"{name} (cell {index}): no '**Graded parts (P points)**' block")
            continue
        total, items = block
        if total != cell_points or items != parts:
            problems.append(f"{name} (cell {index}): the prompt says {total:g} points {items}, "
                            f"the checks grade {cell_points:g} points {parts}")
    assert not problems, f"{notebook.relative_to(ROOT)}:\n" + "\n".join(problems)
