"""The notebooks' solution regions are generated from `solutions` and must not drift."""
import ast
import subprocess
import sys

import nbformat
import pytest

import solutions
from autograder import sync


def test_function_keeps_signature_and_docstring_visible():
    src = sync.solution_cell_source(solutions.softmax)
    before, region = src.split(sync.BEGIN)
    assert before.startswith("def softmax(x, axis=-1):")
    assert '"""' in before  # the docstring stays visible to students
    assert region.rstrip().endswith(sync.END)
    assert "np.exp" in region and "np.exp" not in before
    ast.parse(src)  # the generated cell is valid Python


def test_class_gets_one_region_per_method():
    src = sync.solution_cell_source(solutions.MultiHeadAttention)
    assert src.count(sync.BEGIN) == src.count(sync.END) >= 2
    assert "def __init__(self, d_model, num_heads, dropout=0.0):" in src
    assert "def forward(self, query, key, value, mask=None):" in src
    # every region sits inside its method, indented like the method's body
    for line in src.splitlines():
        if sync.BEGIN in line or sync.END in line:
            assert line.startswith(" " * 8)
    ast.parse(src)


def test_region_replaced_by_stub_is_still_valid_python():
    """What nbgrader's ClearSolutions leaves behind must parse (students run it)."""
    src = sync.solution_cell_source(solutions.MultiHeadAttention)
    out, skipping = [], False
    for line in src.splitlines():
        if sync.BEGIN in line:
            indent = line[: len(line) - len(line.lstrip())]
            out += [indent + "# YOUR CODE HERE", indent + "raise NotImplementedError()"]
            skipping = True
        elif sync.END in line:
            skipping = False
        elif not skipping:
            out.append(line)
    ast.parse("\n".join(out))


def _notebook_with_solution_cell(tmp_path, grade_id, source):
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {
        "grade": False,
        "solution": True,
        "locked": False,
        "grade_id": grade_id,
        "schema_version": 3,
    }
    nb.cells = [nbformat.v4.new_code_cell("import numpy as np"), cell]
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, str(path))
    return path


def test_check_mode_reports_drift_and_write_mode_repairs_it(tmp_path):
    path = _notebook_with_solution_cell(tmp_path, "softmax", "def softmax(x, axis=-1):\n    return x\n")
    assert sync.main(["--check", str(path)]) == 1
    assert sync.main([str(path)]) == 0
    assert sync.main(["--check", str(path)]) == 0
    cell = nbformat.read(str(path), as_version=4).cells[1]
    assert cell.source == sync.solution_cell_source(solutions.softmax)


def test_free_form_solution_cells_are_left_alone(tmp_path):
    path = _notebook_with_solution_cell(tmp_path, "my_own_answer", "x = 1\n")
    assert sync.sync_notebook(path, write=True) == []


def test_committed_chapter_notebooks_are_in_sync():
    """CI's drift check: every chapter notebook equals what `solutions` generates."""
    assert len(sync.chapter_notebooks()) == 11, "the drift check must see all eleven chapters"
    result = subprocess.run(
        [sys.executable, "-m", "autograder.sync", "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
