"""A regrade's cells never hold a reference the graded cell can read (issue 36, attack 4).

An answer that lost points and calls a failing earlier exercise is graded again with the
reference in that one's place. Before, the reference's source went into the regrade's
job as a context cell, run in the student's own process: the graded cell read it
(``/job/job.json``, ``inspect``, ``globals()``, ``dis``, ``co_consts``) and sent it out in
its exception text. Now:

* a failing *function* exercise is a stand-in there (``runner.Reference``) whose calls
  run the reference in a sandbox of its own (``sandbox.ReferenceCalls``): the attacker
  below searches every place it could be and finds nothing, so it keeps the full marks it
  would lose on finding it, and the honest student beside it is graded as before;
* a failing *class* exercise (the student's module builds and trains it) is still
  present in the regrade, which is therefore verdict-only (``grading._verdict_only``):
  the attacker below does find it, and of that run only each part's points come back,
  no word of it.

Every field of the grade (reason, parts, hints, notes: what ``scores.csv``, the feedback
page and ``results.json`` are made of) and every file left in the scratch folder is
searched for the reference's code lines.
"""
from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path

import nbformat
import pytest

import fixtures
import solutions
from autograder import sandbox
from autograder.grading import grade_submission
from autograder.wire import write_frame

BOOK = Path(__file__).resolve().parents[2] / "book"


def _code_lines(obj) -> set[str]:
    """The reference's own lines: every statement of its body after the docstring (the
    def/class line and the docstrings are in the student's notebook too), 25 characters
    or more (a shorter one, ``if x.ndim == 0:``, is in numpy's own code as well)."""
    tree = ast.parse(inspect.getsource(obj))
    lines: set[str] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) or not body:
            continue
        for stmt in body:
            if isinstance(stmt, ast.Expr) and isinstance(getattr(stmt, "value", None), ast.Constant):
                continue  # a docstring
            if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
                continue  # its own statements are walked in turn
            lines.update(line.strip() for line in ast.unparse(stmt).splitlines() if len(line.strip()) >= 25)
    return lines


def _lines(source: str) -> set[str]:
    return {line.strip() for line in source.splitlines()}


# Everything a cell can reach in its process, as text: the job file, every function
# and class named after the earlier exercise (in globals or anywhere in the heap) read
# with inspect, dis and its code constants, and the lines linecache holds.
HUNT = '''
import dis as _dis, gc as _gc, inspect as _inspect, json as _json, linecache as _linecache, os as _os, sys as _sys

def _hunt(name):
    found = []
    def read(probe):
        try:
            found.append(str(probe()))
        except BaseException as exc:
            found.append(type(exc).__name__)
    read(lambda: open(_os.path.join(_sys.argv[1], "job.json"), encoding="utf-8").read())
    read(lambda: _json.dumps(sorted(globals())))
    objects = [globals().get(name)]
    for o in _gc.get_objects():
        try:
            if getattr(o, "__name__", None) == name and callable(o):
                objects.append(o)
        except BaseException:
            pass
    for obj in objects:
        for target in (obj, getattr(obj, "forward", None), getattr(obj, "__call__", None)):
            read(lambda: _inspect.getsource(target))
            read(lambda: _dis.Bytecode(target).dis())
            read(lambda: repr(target.__code__.co_consts) + repr(target.__code__.co_names))
            read(lambda: repr(vars(target)))
    read(lambda: "".join(line for lines in _linecache.cache.values() for line in lines[2]))
    text = "\\n".join(found)
    print(text)
    print(text, file=_sys.stderr)
    for folder in (_os.getcwd(), "/tmp", _os.environ.get("HOME", "/tmp")):
        try:
            with open(_os.path.join(folder, "leak.txt"), "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError:
            pass
    return text
'''


def _trimmed_source(chapter: str, keep: list[str], tmp_path: Path) -> Path:
    """The chapter's source notebook with only its setup cell and the solution and test
    cells of ``keep`` (the regrade needs nothing else; grading the rest costs time)."""
    nb = nbformat.read(str(BOOK / chapter / f"{chapter}.ipynb"), as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    kept = []
    for cell in nb.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
        if cell is code[0] or grade_id in keep or grade_id[len("test_"):] in keep:
            kept.append(cell)
    nb.cells = kept
    return fixtures.write_notebook(nb, tmp_path / f"{chapter}.ipynb")


def _graded(source: Path, tmp_path: Path, name: str, hidden: bool = True, **cells) -> dict:
    nb = fixtures.submission_with(nbformat.read(str(source), as_version=4), **cells)
    sub = fixtures.write_notebook(nb, tmp_path / name / "submission.ipynb")
    scratch = tmp_path / name / "scratch"
    scratch.mkdir()
    scores = grade_submission(source, sub, seed=7, hidden=hidden, scratch_dir=scratch)
    assert list(scratch.iterdir()) == []  # nothing a run wrote outlives it
    return {s.exercise: s for s in scores}


def _text(score) -> str:
    """Every word of a grade: what scores.csv, results.json and the feedback page show."""
    return json.dumps([score.reason, score.to_dict()["parts"], score.notes], ensure_ascii=False)


WRONG_SOFTMAX = """
def softmax(x, axis=-1):
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)
"""


def _sdpa_attacker(markers: set[str]) -> str:
    """A right scaled_dot_product_attention (it calls softmax) that first hunts for the
    reference softmax and, on finding a line of it, raises it on every call: finding it
    costs every part, so full marks prove it found nothing."""
    reference = inspect.getsource(solutions.scaled_dot_product_attention)
    return HUNT + f"""
_FOUND = _hunt("softmax")
_MARKERS = [m[::-1] for m in {sorted(m[::-1] for m in markers)!r}]  # reversed: not found in this cell itself
_LEAK = [m for m in _MARKERS if m in _FOUND]

{reference}
_honest = scaled_dot_product_attention

def scaled_dot_product_attention(*args, **kwargs):
    if _LEAK:
        raise ValueError("\\n".join(_LEAK))
    return _honest(*args, **kwargs)
"""


@pytest.mark.slow
def test_a_function_reference_runs_outside_the_graded_process(tmp_path, needs_sandbox):
    markers = (_code_lines(solutions.softmax) - _code_lines(solutions.scaled_dot_product_attention)
               - _lines(WRONG_SOFTMAX))
    assert markers  # the hunt has something to find
    source = _trimmed_source("04_self_attention", ["softmax", "scaled_dot_product_attention"], tmp_path)
    honest = _graded(source, tmp_path, "honest", softmax=WRONG_SOFTMAX)
    attacker = _graded(source, tmp_path, "attacker", softmax=WRONG_SOFTMAX,
                       scaled_dot_product_attention=_sdpa_attacker(markers))
    for scores in (honest, attacker):
        sdpa = scores["scaled_dot_product_attention"]
        assert (sdpa.status, sdpa.score) == ("passed", sdpa.max_score), sdpa  # graded with the reference softmax
        assert "graded with the reference `softmax` in its place" in sdpa.notes[0]
        assert scores["softmax"].score < scores["softmax"].max_score
        assert not [m for m in markers if m in _text(sdpa) or m in _text(scores["softmax"])]
    assert _text(honest["scaled_dot_product_attention"]) == _text(attacker["scaled_dot_product_attention"])


WRONG_FFN = """
class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.linear2(self.dropout(self.linear1(x)))  # no ReLU
"""


def _encoder_attacker(markers: set[str]) -> str:
    """A right EncoderLayer that hunts for the reference PositionwiseFeedForward and, on
    finding a line of it, raises it in every case with a src_mask (one part of three), so
    that its regrade still scores more than its first grade and would be kept."""
    return HUNT + f"""
_FOUND = _hunt("PositionwiseFeedForward")
_MARKERS = [m[::-1] for m in {sorted(m[::-1] for m in markers)!r}]  # reversed: not found in this cell itself
_LEAK = [m for m in _MARKERS if m in _FOUND]

{inspect.getsource(solutions.EncoderLayer)}
_Honest = EncoderLayer

class EncoderLayer(_Honest):
    def forward(self, x, src_mask=None):
        if src_mask is not None and _LEAK:
            raise ValueError("the reference: " + " | ".join(_LEAK))
        return super().forward(x, src_mask)
"""


@pytest.mark.slow
def test_a_class_reference_regrade_returns_only_its_verdict(tmp_path, needs_sandbox):
    # Graded with the visible cases (hidden=False), where a case's exception text is shown
    # whole: the widest channel there is (a hidden set withholds it anyway).
    hidden = False
    # The reference's lines that neither the attacker's copied EncoderLayer nor the
    # student's own PositionwiseFeedForward hold: its ReLU line.
    markers = (_code_lines(solutions.PositionwiseFeedForward) - _code_lines(solutions.EncoderLayer)
               - _lines(WRONG_FFN))
    assert markers
    source = _trimmed_source("07_add_and_norm", ["PositionwiseFeedForward", "EncoderLayer"], tmp_path)
    honest = _graded(source, tmp_path, "honest", hidden=hidden, PositionwiseFeedForward=WRONG_FFN)
    attacker = _graded(source, tmp_path, "attacker", hidden=hidden, PositionwiseFeedForward=WRONG_FFN,
                       EncoderLayer=_encoder_attacker(markers))
    layer = honest["EncoderLayer"]
    assert (layer.status, layer.score) == ("passed", layer.max_score), layer  # one mistake charged once
    assert "graded with the reference `PositionwiseFeedForward` in its place" in layer.notes[0]
    layer = attacker["EncoderLayer"]
    # It found the reference (the src_mask part is lost: a verdict, one bit a part) and
    # kept the points of the other parts, but not one word of what it raised came back.
    assert layer.score == layer.max_score - 1 and layer.status == "partial", layer
    assert [p.score for p in layer.parts if "src_mask" in p.name] == [0]
    assert "graded with the reference `PositionwiseFeedForward` in its place" in layer.notes[0]
    for scores in (honest, attacker):
        for score in scores.values():
            assert not [m for m in markers if m in _text(score)], score
            assert "the reference: " not in _text(score)


def _relay(tmp_path, names=("softmax",)) -> sandbox.ReferenceCalls:
    lib = sandbox.reference_library(tmp_path / "lib")
    return sandbox.ReferenceCalls(set(names), lib, tmp_path / "references", sandbox.Limits(wall_seconds=60.0),
                                  sandbox=False)


def _call(calls, name: str, request, arrays=None):
    import io
    import os

    from autograder.wire import load_body, read_frame

    out, back = calls.child_fds
    stream = io.BytesIO()
    write_frame(stream, name, request, arrays or {}, kind="call")
    os.write(out, stream.getvalue())
    with os.fdopen(os.dup(back), "rb") as answers:
        frame, _ = read_frame(answers, 2**26)
    return load_body(frame[2], frame[3], 2**26)[0]


def test_the_relay_admits_only_plain_calls_of_the_regrades_references(tmp_path):
    """Plain data of a named reference gets its result; a call of another name, an object
    factory (which would build a module where the reference runs) and a call past the
    budget get the grader's refusal, and the relay keeps answering."""
    import numpy as np

    from autograder.wire import encode

    calls = _relay(tmp_path)
    calls.MAX_CALLS = 3  # every frame counts, refused or not: the fourth is one too many
    with calls:
        arrays: dict = {}
        x = np.array([[1.0, 2.0, 3.0]])
        answer = _call(calls, "softmax", {"args": encode([x], arrays), "kwargs": {"__dict__": []}}, arrays)
        assert answer["value"].keys() == {"__ndarray__"}
        refused = _call(calls, "scaled_dot_product_attention", {"args": [], "kwargs": {"__dict__": []}})
        assert "not one of this regrade's references" in refused["raised"]["message"]
        factory = {"__obj__": "torch.nn.Linear", "init": {"__dict__": [["in_features", 10**9]]}, "state": {}}
        refused = _call(calls, "softmax", {"args": [factory], "kwargs": {"__dict__": []}})
        assert refused["raised"]["message"].startswith("the reference softmax was not called")
        refused = _call(calls, "softmax", {"args": encode([x], arrays), "kwargs": {"__dict__": []}}, arrays)
        assert f"more than {calls.MAX_CALLS} calls" in refused["raised"]["message"]
