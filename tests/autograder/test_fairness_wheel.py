"""A student's unfinished or wrong notebook scores the same, part by part, in the
student package's ``check`` and in the grade (issue 38).

Three notebooks a class hands in, as students write them into the released notebook:

* chapter 9 half done: 9.1 blank, ``noam_lr`` with the warm-up exponent -0.5, 9.3
  written, 9.4 blank;
* chapter 7 with one wrong answer: ``layer_norm`` with the unbiased variance, the rest
  right;
* chapter 4 from an earlier release (its setup cell imports a module that has moved
  since, a locked cell's points edited) with one wrong answer: ``self_attention`` with
  ``k.T``, right for 2-D inputs only.

Each is checked from the released wheel in a student's environment (``python -m autograder
check``, and the JSON rows its table is printed from, kept from that run), and graded by ``grade_submission`` in the
sandbox. Every exercise gets the same points and the same parts earned in both.

The wheels are those of the release of every chapter (``released_chapters``, made once per
run in ``tests/released.py``: the module is in its xdist group ``"releases"``), installed
one after the other in one venv outside the repository, as a student moving to the next
chapter installs its wheel over the last (:mod:`student_env`). On the same wheel, the mutants of ``WHEEL_ROWS`` whose rule
another part's cases must tolerate are checked with the package's ``check_report``: the
package has no reference to compute what the broken rule gives, so those results are
recorded at release (:mod:`autograder.student.hints`), and it loses exactly the part
the mistake breaks, as the grader does.
"""
from __future__ import annotations

import inspect
import json
import re
import subprocess
from pathlib import Path

import nbformat
import pytest

import solutions
import test_part_isolation
from autograder.checks import get_exercise
from autograder.grading import grade_submission
from student_env import filled, install, make_env, nbgrader_meta
from test_part_isolation import BROKEN, LAYER_NORM_UNBIASED, NOAM_WARMUP_HALF, part

# The wheels of the release of every chapter (tests/released.py), built once per run on that group's worker.
pytestmark = pytest.mark.xdist_group("releases")

BOOK = Path(__file__).resolve().parents[2] / "book"

SELF_ATTENTION_2D_ONLY = '''
def self_attention(x, W_q, W_k, W_v):
    q, k, v = x @ W_q, x @ W_k, x @ W_v
    weights = softmax(q @ k.T / np.sqrt(q.shape[-1]), axis=-1)  # k.T: right for a 2-D x only
    return weights @ v, weights
'''

# chapter -> {exercise: its cell's source, or None for the released stub left as it is}
NOTEBOOKS = {
    "09_training": {"make_decoder_io": None, "noam_lr": NOAM_WARMUP_HALF, "label_smoothing_floor": None},
    "07_add_and_norm": {"layer_norm": LAYER_NORM_UNBIASED},
    "04_self_attention": {"self_attention": SELF_ATTENTION_2D_ONLY},
}
# what the grade must give (written down before grading): exercise -> parts lost (indices)
FAIR = {
    "09_training": {"make_decoder_io": "all", "noam_lr": {0}, "label_smoothed_cross_entropy": set(),
                    "label_smoothing_floor": "all"},
    "07_add_and_norm": {"layer_norm": {0}, "PositionwiseFeedForward": set(), "ResidualSublayer": set(),
                        "EncoderLayer": set()},
    "04_self_attention": {"softmax": set(), "scaled_dot_product_attention": set(), "self_attention": {1}},
}
# Notebooks handed out by an earlier release: the setup cell imports a module since moved
# and a locked test cell's points were edited. ``check`` runs the wheel's own copy of the
# released locked cells, as grading restores them, so it scores the notebook as the grade.
EARLIER_RELEASE = {"04_self_attention"}


def as_from_an_earlier_release(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """``nb`` with last release's setup cell (``import solutions.data``, a module that has
    moved to ``solutions.app.data``) and 99 points on its first test cell."""
    code = [c for c in nb.cells if c.cell_type == "code"]
    code[0].source = "import solutions.data  # last release's module, moved since\n" + code[0].source
    test_cell = next(c for c in code if nbgrader_meta(c).get("grade") and not nbgrader_meta(c).get("solution"))
    test_cell.metadata["nbgrader"]["points"] = 99
    return nb


def student_notebook(released: Path, cells: dict) -> nbformat.NotebookNode:
    """The released notebook filled as the reference writes it, except ``cells``: a source
    replaces that exercise's cell, ``None`` leaves the released stub."""
    done = filled(released)
    stubs = nbformat.read(str(released), as_version=4)
    for cell, stub in zip(done.cells, stubs.cells):
        name = nbgrader_meta(cell).get("grade_id")
        if nbgrader_meta(cell).get("solution") and name in cells:
            cell.source = stub.source if cells[name] is None else cells[name].strip("\n")
    return done


def earned_by_part(name: str, parts_line: str) -> dict[str, bool]:
    """``{part: earned}`` from the check's ``parts_line`` (``name s/p · name s/p``), read
    by the registered part names (a name may hold the " · " that joins them)."""
    earned = {}
    for part, points in get_exercise(name).parts.items():
        full, none = f"{part} {_num(points)}/{_num(points)}", f"{part} 0/{_num(points)}"
        assert (full in parts_line) != (none in parts_line), (part, parts_line)
        earned[part] = full in parts_line
    return earned


def _num(x: float) -> str:
    return str(int(x)) if float(x) == int(x) else f"{x:g}"


def lost_indices(name: str, earned: dict[str, bool]) -> set[int]:
    return {i for i, part in enumerate(get_exercise(name).parts) if not earned[part]}


WHEEL_ROWS = {
    "07_add_and_norm": [("layer_norm", "layer_norm_unbiased"), ("layer_norm", "layer_norm_eps_on_std"),
                        ("layer_norm", "layer_norm_gamma_beta_swapped"),
                        ("layer_norm", "layer_norm_without_beta"), ("PositionwiseFeedForward", "FeedForwardWithoutReLU")],
    "09_training": [("noam_lr", "noam_warmup_exponent_half"), ("noam_lr", "noam_warmup_branch_only"),
                    ("make_decoder_io", "make_decoder_io_width_l")],
    "03_positional_encoding": [("relative_position_matrix", "relative_position_minus_k")],
    # the kept weights' part reads the attribute alone: its accepted weights come from the
    # results recorded for the whole reference result; the layers under other names load
    # by shape from the stored cases
    "05_multi_head_attention": [("MultiHeadAttention", "MHA_WITHOUT_SCALE"), ("MultiHeadAttention", "MHA_LINEARS"),
                                ("merge_heads", "merge_heads_unmerged")],
    "02_tokens_and_embeddings": [("TokenEmbedding", "TOKEN_EMBEDDING_NAMED_TABLE"),
                                 ("bpe_tokenize", "BPE_TOKENIZE_REVERSED")],
    "04_self_attention": [("scaled_dot_product_attention", "sdpa_without_scale"),
                          ("self_attention", "self_attention_without_scale")],
}

WHEEL_SCRIPT = """
import json, math, sys
import numpy as np
import torch
from torch import nn
from autograder.checks.base import check_report
import solutions  # the wheel's: this chapter's answers are withheld, earlier ones shipped
{sources}
rows = json.loads(sys.argv[1])
print(json.dumps({{fn: sorted(p.name for p in check_report(name, globals()[fn]).parts if not p.earned)
                   for name, fn in rows}}))
"""


def _source(name: str, answer, fn: str) -> str:
    """``answer``'s code for the wheel's script, defining ``fn``: its notebook cell (the
    exercise renamed ``fn``) when it carries one, else its source written against the
    reference (``solutions.X`` read as the script's ``_reference_X``)."""
    cell = getattr(answer, "cell", None)
    if cell is not None:
        return re.sub(rf"^(def|class) {name}\b", rf"\1 {fn}", cell, count=1, flags=re.M)
    return inspect.getsource(answer).replace("solutions.", "_reference_")


def assert_tolerated_rows_lose_one_part(chapter, python, work, env):
    """``WHEEL_ROWS[chapter]`` checked by the wheel's ``check_report``: each loses exactly
    the part of ``BROKEN``."""
    rows = WHEEL_ROWS[chapter]
    sources = "\n".join(_source(name, getattr(test_part_isolation, fn), fn) for name, fn in rows)
    # The mistakes are written against the reference: give the script the repository's
    # reference as plain functions of its own (the wheel does not hold this chapter's).
    refs = {"layer_norm": solutions.layer_norm, "relative_position_matrix": solutions.relative_position_matrix,
            "softmax": solutions.softmax}
    prelude = "\n".join(inspect.getsource(f).replace(f"def {n}(", f"def _reference_{n}(") for n, f in refs.items())
    if chapter == "05_multi_head_attention":  # what the mutant's cell calls: the notebook's earlier answers
        prelude += "\nfrom solutions import masked_softmax\n" + "\n".join(
            inspect.getsource(f) for f in (solutions.split_heads, solutions.merge_heads))
    script = prelude + "\n" + WHEEL_SCRIPT.format(sources=sources)
    proc = subprocess.run([str(python), "-c", script, json.dumps(rows)], cwd=work, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lost = json.loads(proc.stdout.strip().splitlines()[-1])
    index = {fn: i for n, i, a, _ in BROKEN for fn in [getattr(a, "label", getattr(a, "__name__", ""))] if fn}
    for name, fn in rows:
        assert lost[fn] == [part(name, index[fn])], (fn, lost[fn])


# ``python -m autograder check NOTEBOOK`` as a student runs it (the wheel's ``__main__``), which
# also writes down the rows its table is printed from (``visible_checks``' result), so the
# scores compared below are those of the very run whose table is read.
CHECK_KEEPING_ROWS = """
import json, runpy, sys
import autograder.student.cli as cli

rows_file, sys.argv = sys.argv[1], ["autograder", *sys.argv[2:]]
visible_checks = cli.visible_checks

def keep(*args, **kwargs):
    rows = visible_checks(*args, **kwargs)
    with open(rows_file, "w", encoding="utf-8") as f:
        json.dump(rows, f)
    return rows

cli.visible_checks = keep
runpy.run_module("autograder", run_name="__main__", alter_sys=True)
"""


def assert_check_and_grade_agree(chapter, released, python, work, env):
    """``NOTEBOOKS[chapter]`` checked from the wheel and graded: the same parts and points
    per exercise, at the fair score of ``FAIR``."""
    path = work / f"{chapter} (1).ipynb"
    nb = student_notebook(released, NOTEBOOKS[chapter])
    nbformat.write(as_from_an_earlier_release(nb) if chapter in EARLIER_RELEASE else nb, str(path))
    rows_file = work / f"{chapter}.json"
    proc = subprocess.run([str(python), "-c", CHECK_KEEPING_ROWS, str(rows_file), "check", path.name], cwd=work,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # not every visible check passes
    # the rows of that same run (``check`` prints them as a table)
    local = {row["exercise"]: row for row in json.loads(rows_file.read_text(encoding="utf-8"))}
    graded = {s.exercise: s for s in grade_submission(BOOK / chapter / f"{chapter}.ipynb", path, seed=3).scores}
    assert set(local) == set(graded) == set(FAIR[chapter]), (sorted(local), sorted(graded))
    for name, fair in FAIR[chapter].items():
        score = graded[name]
        grade_earned = {p.name: p.score >= p.points for p in score.parts}
        everything = set(range(len(get_exercise(name).parts)))
        if fair == "all":  # a blank: no part, "not implemented yet" in both
            assert (score.status, score.score) == ("failed", 0.0), score
            assert local[name]["score"] == 0.0 and "not implemented yet" in local[name]["message"], local[name]
            continue
        assert lost_indices(name, grade_earned) == fair, (name, score)
        assert lost_indices(name, earned_by_part(name, local[name]["parts_line"])) == fair, (name, local[name])
        assert local[name]["score"] == score.score, (name, local[name], score)
        assert len(fair) < len(everything)
        if fair:  # what ``check`` prints: the same parts, earned and lost
            assert f"{name}: {local[name]['parts_line']}" in proc.stdout, proc.stdout
    assert "/99" not in proc.stdout and "ModuleNotFoundError" not in proc.stdout, proc.stdout


@pytest.fixture(scope="module")
def student_venv(tmp_path_factory):
    """One venv for the module, outside the repository (:func:`student_env.make_env`): ``(python,
    work, env)``; each test installs its chapter's wheel over the last one."""
    python, _, work, env = make_env(tmp_path_factory.mktemp("student"))
    return python, work, env


@pytest.mark.slow
@pytest.mark.parametrize("chapter", sorted(set(NOTEBOOKS) | set(WHEEL_ROWS)))
def test_the_wheels_check_scores_as_the_grade(chapter, released_chapters, student_venv, request):
    """The chapter's released wheel installed in the student venv, for both checks above (the
    grade needs the sandbox)."""
    if chapter in NOTEBOOKS:
        request.getfixturevalue("needs_sandbox")

    out, done = released_chapters
    python, work, env = student_venv
    install(python, done.packages[chapter].wheel)
    work = work / chapter  # each chapter's notebook and rows in a folder of their own
    work.mkdir()
    if chapter in WHEEL_ROWS:
        assert_tolerated_rows_lose_one_part(chapter, python, work, env)
    if chapter in NOTEBOOKS:
        assert_check_and_grade_agree(chapter, out / chapter / f"{chapter}.ipynb", python, work, env)
