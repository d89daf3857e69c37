"""A blank exercise stops the cells that need it with one line (autograder.student.unfinished).

In an IPython shell of this process: the cells run as a kernel runs them, and a cell the
guard stopped counts as a success (what "Run all" reads from the kernel's reply). The
released notebooks' whole blank runs are in test_release_runs.py.
"""
from __future__ import annotations

import pytest

from autograder.student.unfinished import UnfinishedGuard, bound_names

IPython = pytest.importorskip("IPython")

BLANK_SOFTMAX = '''
def softmax(x, axis=-1):
    """Softmax along ``axis``."""
    # YOUR CODE HERE
    raise NotImplementedError()
'''
BLANK_CLASS = '''
class MultiHeadAttention:
    def __init__(self, d_model, num_heads):
        # YOUR CODE HERE
        raise NotImplementedError()
'''


@pytest.fixture
def shell():
    from IPython.core.interactiveshell import InteractiveShell

    sh = InteractiveShell.instance()
    guard = UnfinishedGuard(sh, {"softmax": "Exercise 4.1", "MultiHeadAttention": "Exercise 5.3"})
    guard.install()
    yield sh
    guard.uninstall()
    sh.reset()
    InteractiveShell.clear_instance()


def run(sh, capsys, source):
    result = sh.run_cell(source)
    return result, capsys.readouterr().out


def test_a_cell_calling_a_blank_exercise_stops_with_one_line_and_counts_as_run(shell, capsys):
    run(shell, capsys, BLANK_SOFTMAX)
    result, out = run(shell, capsys, "import numpy as np\nbefore = 1\nweights = softmax(np.ones(3))\nafter = 2\n")
    assert result.success
    assert out.strip() == ("⏸ Exercise 4.1 (`softmax`) is not written yet, so this cell stops here: write it, "
                           "run its cell, then run this cell again.")
    assert shell.user_ns["before"] == 1 and "after" not in shell.user_ns  # stopped where the exercise was needed


def test_later_cells_needing_what_the_stopped_cell_did_not_define_say_so_in_one_line(shell, capsys):
    run(shell, capsys, BLANK_SOFTMAX)
    run(shell, capsys, "weights = softmax([1.0])\n")
    result, out = run(shell, capsys, "total = weights.sum()\n")
    assert result.success and out.count("\n") == 1
    assert "`weights` comes from a cell that stopped at Exercise 4.1 (`softmax`)" in out
    result, out = run(shell, capsys, "print(total)\n")  # a chain: this cell needs what the last one stopped before
    assert result.success and "`total` comes from a cell that stopped at Exercise 4.1" in out


def test_a_blank_class_is_named_from_its_methods(shell, capsys):
    run(shell, capsys, BLANK_CLASS)
    result, out = run(shell, capsys, "mha = MultiHeadAttention(8, 2)\n")
    assert result.success and "Exercise 5.3 (`MultiHeadAttention`) is not written yet" in out


@pytest.mark.parametrize("source, error", [
    ("undefined_name\n", NameError),  # a typo is a typo
    ("raise NotImplementedError('not a blank exercise')\n", NotImplementedError),
    ("def helper():\n    raise NotImplementedError()\nhelper()\n", NotImplementedError),  # not an exercise's name
    ("import collections\ncollections.no_such_thing\n", AttributeError),
])
def test_every_other_error_fails_the_cell_with_its_traceback(shell, capsys, source, error):
    run(shell, capsys, BLANK_SOFTMAX)
    result, out = run(shell, capsys, source)
    assert not result.success and isinstance(result.error_in_exec, error)
    assert "⏸" not in out and "Traceback" in out


def test_a_written_exercise_runs_as_usual(shell, capsys):
    run(shell, capsys, BLANK_SOFTMAX)
    run(shell, capsys, "weights = softmax([1.0])\n")
    run(shell, capsys, "def softmax(x, axis=-1):\n    return x\n")
    result, out = run(shell, capsys, "weights = softmax([1.0])\nprint(weights)\n")
    assert result.success and out == "[1.0]\n"


def test_bound_names_reads_the_top_level_bindings_of_a_cell():
    source = ("import numpy as np\nfrom math import sqrt as root\nimport os.path\nx, (y, z) = 1, (2, 3)\n"
              "for i in range(3):\n    acc = i\nwith open('f') as fh:\n    pass\nif True:\n    flag: bool = True\n"
              "def f():\n    inner = 1\nclass C:\n    attr = 2\nsquares = [k * k for k in range(3)]\n")
    assert bound_names(source) == {"np", "root", "os", "x", "y", "z", "i", "acc", "fh", "flag", "f", "C", "squares"}
    assert bound_names("def broken(:\n") == set()
