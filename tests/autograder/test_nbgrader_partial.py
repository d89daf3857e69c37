"""Plain nbgrader reads the parts a check earned as the test cell's partial grade.

``check`` returns nothing on full marks (nbgrader: full points), the points earned
on partial credit (nbgrader reads a numeric ``execute_result`` as the grade), and
raises at zero (nbgrader: an error output scores 0). Executed in a real kernel and
scored by nbgrader's own ``determine_grade``.
"""
import nbformat
import pytest
from nbgrader.utils import determine_grade
from notebook_runs import execute

from autograder.checks import get_exercise

SETUP = "import numpy as np\nfrom autograder import check"

# Right on every case except those with another axis: misses the "any axis" part.
LAST_AXIS_ONLY = '''
def softmax(x, axis=-1):
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)
'''
RIGHT = '''
def softmax(x, axis=-1):
    x = np.asarray(x)
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)
'''
WRONG = '''
def softmax(x, axis=-1):
    return x
'''
TEST = 'check("softmax", softmax)\ncheck("softmax", softmax, hidden=True)'


def _graded(solution: str, points: float, cwd):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    test = nbformat.v4.new_code_cell(TEST, metadata={"nbgrader": {
        "grade": True, "solution": False, "locked": True, "grade_id": "test_softmax", "points": points}})
    nb.cells = [nbformat.v4.new_code_cell(SETUP), nbformat.v4.new_code_cell(solution), test]
    execute(nb, label="nbgrader-partial/softmax", chapter=None, kernel_name="python3", cwd=cwd, timeout=120,
            allow_errors=True)
    return determine_grade(nb.cells[-1]), nb.cells[-1]


@pytest.mark.slow
def test_nbgrader_scores_full_partial_and_zero(tmp_path):
    parts = type(get_exercise("softmax")).parts
    total = float(sum(parts.values()))
    assert "any axis" in parts
    score, cell = _graded(RIGHT, total, tmp_path)
    assert score == (total, total)
    assert not any(o.output_type == "stream" and o.name == "stderr" for o in cell.outputs)
    score, _ = _graded(LAST_AXIS_ONLY, total, tmp_path)
    assert score == (total - parts["any axis"], total)
    score, _ = _graded(WRONG, total, tmp_path)
    assert score == (0, total)
