"""A blank exercise stops the cells that need it with one line (autograder.student.unfinished).

Each test runs its cells in an IPython shell of a fresh Python process, as a kernel
runs them (an IPython shell takes over the process's ``__main__`` module, which would
break later tests of a pytest worker that start processes by ``spawn``). A cell the
guard stopped counts as a success: what "Run all" reads from the kernel's reply. The
released notebooks' whole blank runs are in test_release_runs.py.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.book import chapter_ids, source_notebook
from autograder.student.unfinished import bound_names, exercise_labels

pytest.importorskip("IPython")

REPO = Path(__file__).resolve().parents[2]
LABELS = {"softmax": "Exercise 4.1", "MultiHeadAttention": "Exercise 5.3"}
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
SHELL = '''
import contextlib, io, json, sys
from IPython.core.interactiveshell import InteractiveShell
from autograder.student.unfinished import UnfinishedGuard

cells, labels, names = json.loads(sys.stdin.read())
shell = InteractiveShell.instance(history_length=0)
UnfinishedGuard(shell, labels).install()
runs = []
for cell in cells:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = shell.run_cell(cell)
    error = result.error_in_exec
    runs.append({"success": result.success, "error": type(error).__name__ if error else None,
                 "out": out.getvalue()})
sys.__stdout__.write(json.dumps({"runs": runs, "defined": [n for n in names if n in shell.user_ns]}))
'''


def run(cells: list[str], names: tuple[str, ...] = ()) -> tuple[list[dict], list[str]]:
    """Run ``cells`` in order in a guarded IPython shell of a new process.

    Returns:
        One ``{"success", "error", "out"}`` per cell (``error``: the exception's class
        name left in the cell's result), and which of ``names`` the shell defines at the end.
    """
    proc = subprocess.run([sys.executable, "-c", SHELL], input=json.dumps([cells, LABELS, list(names)]),
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    return data["runs"], data["defined"]


def test_a_cell_calling_a_blank_exercise_stops_with_one_line_and_counts_as_run():
    runs, defined = run([BLANK_SOFTMAX, "import numpy as np\nbefore = 1\nweights = softmax(np.ones(3))\nafter = 2\n"],
                        names=("before", "after"))
    assert runs[1]["success"] and runs[1]["error"] is None
    assert runs[1]["out"].strip() == ("⏸ Exercise 4.1 (`softmax`) is not written yet, so this cell stops here: "
                                      "write it, run its cell, then run this cell again.")
    assert defined == ["before"]  # stopped where the exercise was needed


def test_later_cells_needing_what_the_stopped_cell_did_not_define_say_so_in_one_line():
    runs, _ = run([BLANK_SOFTMAX, "weights = softmax([1.0])\n", "total = weights.sum()\n", "print(total)\n"])
    assert runs[2]["success"] and runs[2]["out"].count("\n") == 1
    assert "`weights` comes from a cell that stopped at Exercise 4.1 (`softmax`)" in runs[2]["out"]
    # a chain: this cell needs what the last one stopped before
    assert runs[3]["success"] and "`total` comes from a cell that stopped at Exercise 4.1" in runs[3]["out"]


def test_a_blank_class_is_named_from_its_methods():
    runs, _ = run([BLANK_CLASS, "mha = MultiHeadAttention(8, 2)\n"])
    assert runs[1]["success"] and "Exercise 5.3 (`MultiHeadAttention`) is not written yet" in runs[1]["out"]


@pytest.mark.parametrize("source, error", [
    ("undefined_name\n", "NameError"),  # a typo is a typo
    ("raise NotImplementedError('not a blank exercise')\n", "NotImplementedError"),
    ("def helper():\n    raise NotImplementedError()\nhelper()\n", "NotImplementedError"),  # not an exercise's name
    ("import collections\ncollections.no_such_thing\n", "AttributeError"),
])
def test_every_other_error_fails_the_cell_with_its_traceback(source, error):
    runs, _ = run([BLANK_SOFTMAX, source])
    assert not runs[1]["success"] and runs[1]["error"] == error
    assert "⏸" not in runs[1]["out"] and "Traceback" in runs[1]["out"]


def test_a_written_exercise_runs_as_usual():
    runs, _ = run([BLANK_SOFTMAX, "weights = softmax([1.0])\n", "def softmax(x, axis=-1):\n    return x\n",
                   "weights = softmax([1.0])\nprint(weights)\n"])
    assert runs[3]["success"] and runs[3]["out"] == "[1.0]\n"


def test_a_solutions_name_whose_exercise_cell_has_not_run_says_so_in_one_line():
    raising = ("class NotReleased(AttributeError):\n    pass\n"  # as the student package's solutions raises it
               "raise NotReleased('solutions.softmax is an exercise of chapter 04_self_attention: ...', name='softmax')\n")
    runs, _ = run([raising, raising.replace("name='softmax'", "name='later_exercise'")])
    assert runs[0]["success"] and "Exercise 4.1 (`softmax`) has not been run yet" in runs[0]["out"]
    assert not runs[1]["success"] and runs[1]["error"] == "NotReleased"  # not an exercise of these chapters


def test_the_labels_are_the_notebooks_exercise_headings():
    for chapter in chapter_ids():
        text = source_notebook(chapter).read_text(encoding="utf-8")
        headings = {name: f"Exercise {number}" for number, name in re.findall(r"### Exercise (\d+\.\d+) · `(\w+)`", text)}
        assert exercise_labels([chapter]) == headings, chapter


def test_bound_names_reads_the_top_level_bindings_of_a_cell():
    source = ("import numpy as np\nfrom math import sqrt as root\nimport os.path\nx, (y, z) = 1, (2, 3)\n"
              "for i in range(3):\n    acc = i\nwith open('f') as fh:\n    pass\nif True:\n    flag: bool = True\n"
              "def f():\n    inner = 1\nclass C:\n    attr = 2\nsquares = [k * k for k in range(3)]\n")
    assert bound_names(source) == {"np", "root", "os", "x", "y", "z", "i", "acc", "fh", "flag", "f", "C", "squares"}
    assert bound_names("def broken(:\n") == set()


WRONG_SOFTMAX = '''
import numpy as np

def softmax(x, axis=-1):
    e = np.exp(x)  # overflows at 1e4, and over axis 0 only
    return e / e.sum(axis=0, keepdims=True)
'''
RIGHT_SOFTMAX = '''
def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)
'''
CHECK_SOFTMAX = 'from autograder import check\ncheck("softmax", softmax)\n'
DEMO = "weights = softmax(np.array([[1.0, 2.0], [3.0, 5.0]]))\nassert np.allclose(weights.sum(-1), 1)\n"


def test_a_demonstration_of_an_answer_that_fails_its_check_stops_with_one_line_until_it_passes():
    """The demonstration runs on the student's answer: while its check does not pass, the
    cell prints one line naming the exercise and its score (no AssertionError about the
    answer's numbers, no minutes of training on a wrong layer); a later cell needing
    what it would have defined says so; once the check passes, the cell runs."""
    runs, defined = run([WRONG_SOFTMAX, CHECK_SOFTMAX, DEMO, "print(weights.shape)\n",
                         RIGHT_SOFTMAX, CHECK_SOFTMAX, DEMO, "print(weights.shape)\n"], names=("weights",))
    assert "softmax" in runs[1]["out"]  # the check cell itself ran and reported
    assert runs[2]["success"] and runs[2]["out"].count("\n") == 1, runs[2]
    assert runs[2]["out"].startswith("⏸ This cell runs on your Exercise 4.1 (`softmax`), whose check does not pass "
                                     "yet ("), runs[2]
    assert runs[3]["success"] and "`weights` comes from a cell that stopped at Exercise 4.1" in runs[3]["out"]
    assert runs[5]["success"] and runs[6]["success"] and runs[6]["out"] == ""
    assert runs[7]["out"] == "(2, 2)\n" and defined == ["weights"]


def test_a_blank_exercise_checked_stops_its_demonstrations_and_the_check_cell_still_fails():
    runs, _ = run([BLANK_SOFTMAX, CHECK_SOFTMAX, "import numpy as np\n" + DEMO])
    assert not runs[1]["success"] and runs[1]["error"] == "CheckFailure"  # nbgrader grades it 0
    assert runs[2]["success"] and "Exercise 4.1 (`softmax`) is not written yet" in runs[2]["out"]


def test_a_cell_failing_after_a_stopped_one_names_the_exercise_in_one_line():
    """A half-done chapter never fails later than its guard: the model a stopped cell
    would have trained exists (untrained), and the cell that measures it fails; it says
    which exercise stopped the work it needs."""
    runs, _ = run([BLANK_SOFTMAX, "model = {'trained': False}\n",
                   "import numpy as np\nmodel['trained'] = softmax(np.ones(3)) is not None\n",
                   "assert model['trained'], 'the model did not learn'\n"])
    assert runs[2]["success"] and "is not written yet" in runs[2]["out"]
    assert runs[3]["success"] and runs[3]["out"].count("\n") == 1
    assert "failed (AssertionError) after Exercise 4.1 (`softmax`) stopped an earlier cell" in runs[3]["out"]
