"""A regrade's cells never hold a reference the graded cell can read (issue 36, attack 4).

An answer that lost points and calls a failing earlier exercise is graded again with the
reference in that one's place. Before, the reference's source went into the regrade's
job as a context cell, run in the student's own process: the graded cell read it
(``/job/job.json``, ``inspect``, ``globals()``, ``dis``, ``co_consts``) and sent it out in
its exception text. Now a failing *function* exercise is a stand-in there
(``runner.Reference``) and a failing *class* exercise a module stand-in
(``runner.module_stand_in``: the reference's parameters as tensors, its ``forward`` run
outside), whose calls run the reference in a sandbox of its own
(``reference_calls.ReferenceCalls``, ``oracle.py``). The attackers below search every place it
could be — the job file, globals, every function, class, frame, closure and module in
the heap (``inspect``, ``dis``, code constants), ``linecache`` — find nothing, and so
keep the full marks they would lose on finding it; the honest student beside each is
graded as before, with the same page.

Every field of the grade (reason, parts, hints, notes: what ``scores.csv``, the feedback
page and ``results.json`` are made of) and every file left in the scratch folder is
searched for the reference's code lines. The relay's own bounds (which calls it admits,
what answers it lets into the student's process, who closes the pipes) are tested
without a sandbox below; that the references' start is not charged to the student's
budget, in ``test_grading.py`` (on the chapter-4 regrades it grades anyway).
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
from autograder import library, reference_calls, sandbox
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
# with inspect, dis and its code constants; every function in the heap whose code is
# not the installed libraries' (the runner, the stub, the cells: where a reference's
# code would be), its closure, and every frame's names; every module whose name holds
# "solutions"; and the lines linecache holds.
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
    libraries = tuple({_sys.prefix, _sys.base_prefix, _sys.exec_prefix})
    for o in _gc.get_objects():
        try:
            if getattr(o, "__name__", None) == name and callable(o):
                objects.append(o)
            code = getattr(o, "__code__", None)
            if code is not None and not code.co_filename.startswith(libraries):
                objects.append(o)
                for cell in o.__closure__ or ():
                    read(lambda: repr(cell.cell_contents))
        except BaseException:
            pass
    for obj in objects:
        for target in (obj, getattr(obj, "forward", None), getattr(obj, "__call__", None)):
            read(lambda: _inspect.getsource(target))
            read(lambda: _dis.Bytecode(target).dis())
            read(lambda: repr(target.__code__.co_consts) + repr(target.__code__.co_names))
            read(lambda: repr(vars(target)))
    for frame in _sys._current_frames().values():
        while frame is not None:
            read(lambda: repr(sorted(frame.f_locals)) + frame.f_code.co_filename)
            read(lambda: _inspect.getsource(frame.f_code))
            frame = frame.f_back
    for module_name, module in list(_sys.modules.items()):
        if "solutions" in module_name:
            read(lambda: _inspect.getsource(module))
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
    scores = grade_submission(source, sub, seed=7, hidden=hidden, scratch_dir=scratch).scores
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
    finding a line of it, raises it in every case with a src_mask (one part of three):
    full marks prove it found nothing."""
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
def test_a_class_reference_runs_outside_the_graded_process(tmp_path, needs_sandbox):
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
    for scores in (honest, attacker):
        layer = scores["EncoderLayer"]
        # One mistake charged once, through the module stand-in: its parameters loaded from
        # the case's state, its forward and gradients computed outside the process.
        assert (layer.status, layer.score) == ("passed", layer.max_score), layer
        assert "graded with the reference `PositionwiseFeedForward` in its place" in layer.notes[0]
        assert scores["PositionwiseFeedForward"].score < scores["PositionwiseFeedForward"].max_score
        for score in scores.values():
            assert not [m for m in markers if m in _text(score)], score
            assert "the reference: " not in _text(score)
    assert _text(honest["EncoderLayer"]) == _text(attacker["EncoderLayer"])


# greedy_decode with neither padding after <eos> nor the stop: a sentence runs on to max_len.
WRONG_GREEDY = """
def greedy_decode(model, src, src_mask, max_len, sos_id=1, eos_id=2, pad_id=0):
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        ys = torch.full((src.size(0), 1), sos_id, dtype=torch.long)
        for _ in range(max_len):
            hidden = model.decode(ys, memory, src_mask, causal_mask(ys.size(1)))
            ys = torch.cat([ys, model.project(hidden[:, -1:])[:, 0].argmax(dim=-1)[:, None]], dim=1)
    return ys
"""


def _beam_attacker(markers: set[str] | None) -> str:
    """The reference beam_search, but for beam_size=1 the student's greedy_decode (as the
    contract allows); with ``markers``, it first hunts for the reference greedy_decode and,
    on finding a line of it, raises it on every call."""
    hunt = HUNT + f"""
_FOUND = _hunt("greedy_decode")
_MARKERS = [m[::-1] for m in {sorted(m[::-1] for m in markers or ())!r}]  # reversed: not found in this cell itself
_LEAK = [m for m in _MARKERS if m in _FOUND]
""" if markers else "_LEAK = []\n"
    return hunt + f"""
{inspect.getsource(solutions.beam_search)}
_beam = beam_search

def beam_search(model, src, src_mask, beam_size, max_len, sos_id=1, eos_id=2, length_penalty=0.6):
    if _LEAK:
        raise ValueError("\\n".join(_LEAK))
    if beam_size == 1:
        return [int(t) for t in greedy_decode(model, src, src_mask, max_len, sos_id=sos_id, eos_id=eos_id)[0]]
    return _beam(model, src, src_mask, beam_size, max_len, sos_id, eos_id, length_penalty)
"""


@pytest.mark.slow
def test_greedy_decodes_reference_runs_outside_the_graded_process(tmp_path, needs_sandbox):
    """``greedy_decode`` takes a model, and its reference runs outside like every other,
    calling the model's methods back: no source of it is in the student's process, so the
    attacker's hunt finds nothing and its page is the honest student's, word for word."""
    markers = (_code_lines(solutions.greedy_decode) - _code_lines(solutions.beam_search) - _lines(WRONG_GREEDY))
    assert markers
    source = _trimmed_source("10_inference", ["greedy_decode", "beam_search"], tmp_path)
    # The visible cases (hidden=False): the beam_size=1 part is among them, and a case's
    # exception text is shown whole there, the widest channel.
    honest = _graded(source, tmp_path, "honest", hidden=False, greedy_decode=WRONG_GREEDY,
                     beam_search=_beam_attacker(None))
    attacker = _graded(source, tmp_path, "attacker", hidden=False, greedy_decode=WRONG_GREEDY,
                       beam_search=_beam_attacker(markers))
    for scores in (honest, attacker):
        beam = scores["beam_search"]
        assert (beam.status, beam.score) == ("passed", beam.max_score), beam  # with the reference greedy_decode
        assert "graded with the reference `greedy_decode` in its place" in beam.notes[0]
        assert scores["greedy_decode"].score < scores["greedy_decode"].max_score
        assert not [m for m in markers if m in _text(beam) or m in _text(scores["greedy_decode"])]
    assert _text(honest["beam_search"]) == _text(attacker["beam_search"])


def _relay(tmp_path, names=("softmax",)) -> reference_calls.ReferenceCalls:
    lib = library.reference_library(tmp_path / "lib")
    return reference_calls.ReferenceCalls(set(names), lib, tmp_path / "references", sandbox.Limits(wall_seconds=60.0),
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


# --------------------------------------------------------------------------- the stand-ins, without a sandbox


@pytest.fixture
def channel(tmp_path):
    """A relay to a references' process (a plain subprocess: the protocol, not the wall,
    is tested here) and the student's side of it, in this process."""
    import os

    from autograder import runner

    calls = _relay(tmp_path, ("split_heads", "PositionwiseFeedForward", "ResidualSublayer", "greedy_decode"))
    with calls:
        assert calls.wait_ready()
        out, back = calls.hand_over()
        side = runner._Channel(os.fdopen(out, "wb"), os.fdopen(back, "rb"))
        try:
            yield side
        finally:
            side.out.close()
            side.answers.close()
    assert calls.refused is None, calls.refused


def test_a_module_stand_in_is_the_reference_forward_gradients_and_dropout_included(channel):
    """The stand-in of a class builds from the same generator state as the reference (same
    initial weights, the generator left where the reference leaves it), runs forward in
    training mode with the same dropout draws, and gives the same gradients to its input
    and to its parameters; a callable argument runs in this process, gradients through it
    reach the callable's own parameters, and it may call a stand-in itself."""
    import torch

    from autograder import runner

    FFN = runner.module_stand_in("PositionwiseFeedForward", channel)
    torch.manual_seed(0)
    stand_in, after_stand_in = FFN(8, 16, 0.5), torch.randn(3)
    torch.manual_seed(0)
    reference, after_reference = solutions.PositionwiseFeedForward(8, 16, 0.5), torch.randn(3)
    assert type(stand_in).__name__ == "PositionwiseFeedForward"
    assert list(stand_in.state_dict()) == list(reference.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(stand_in.state_dict().values(), reference.state_dict().values()))
    assert torch.equal(after_stand_in, after_reference)
    assert not [line for line in _code_lines(solutions.PositionwiseFeedForward) if line in repr(vars(stand_in))]

    x = torch.randn(2, 4, 8, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    torch.manual_seed(1)
    got = stand_in(x)  # training mode: dropout 0.5
    torch.manual_seed(1)
    want = reference(x_ref)
    assert torch.equal(got, want)
    (got * 2).sum().backward()
    (want * 2).sum().backward()
    assert torch.allclose(x.grad, x_ref.grad)
    for (name, p), q in zip(stand_in.named_parameters(), reference.parameters()):
        assert torch.allclose(p.grad, q.grad), name

    stand_in.eval()
    reference.eval()
    Residual = runner.module_stand_in("ResidualSublayer", channel)
    for norm_first in (False, True):
        torch.manual_seed(2)
        residual, linear = Residual(8, 0.0, norm_first), torch.nn.Linear(8, 8)
        torch.manual_seed(2)
        residual_ref, linear_ref = solutions.ResidualSublayer(8, 0.0, norm_first), torch.nn.Linear(8, 8)
        x = torch.randn(2, 3, 8, requires_grad=True)
        x_ref = x.detach().clone().requires_grad_(True)
        got = residual(x, lambda h: stand_in(linear(h)))  # the callable calls a stand-in: nested
        want = residual_ref(x_ref, lambda h: reference(linear_ref(h)))
        assert torch.allclose(got, want, atol=1e-6)
        (got * 3).sum().backward()
        (want * 3).sum().backward()
        assert torch.allclose(x.grad, x_ref.grad, atol=1e-5)
        assert torch.allclose(linear.weight.grad, linear_ref.weight.grad, atol=1e-5)  # through the callback


def test_a_function_stand_in_carries_keyword_gradients_and_refuses_a_second_derivative(channel):
    import torch

    from autograder import runner

    split_heads = runner.Reference("split_heads", channel)
    weight = torch.arange(2.0)[None, :, None, None]
    x = torch.randn(2, 3, 4, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    (split_heads(x=x, num_heads=2) * weight).sum().backward()  # the tensor by keyword
    (solutions.split_heads(x_ref, 2) * weight).sum().backward()
    assert torch.allclose(x.grad, x_ref.grad) and x.grad.abs().sum() > 0
    # A second derivative: the contract never asks for one, and the stand-in says so.
    z = torch.randn(1, 1, 4, requires_grad=True)
    with pytest.raises(RuntimeError, match="cannot be differentiated again"):
        torch.autograd.grad((split_heads(z, 2) ** 2).sum(), z, create_graph=True)
    (first,) = torch.autograd.grad((split_heads(z, 2) ** 2).sum(), z)  # a first derivative still is
    assert torch.allclose(first, 2 * z)


def test_a_module_stand_ins_submodules_run_the_references_and_take_changed_attributes(channel):
    """A cell may call a submodule of a stand-in (``self.ffn.linear1(x)``, the residual's
    ``norm``, the attribute the contract names): it runs that submodule of the reference,
    gradients included; an attribute changed after construction (``dropout.p``) goes with
    each call; a submodule swapped for the cell's own is refused in words that say so."""
    import torch

    from autograder import runner

    FFN = runner.module_stand_in("PositionwiseFeedForward", channel)
    Residual = runner.module_stand_in("ResidualSublayer", channel)
    torch.manual_seed(3)
    ffn, residual = FFN(8, 16, 0.5), Residual(8, 0.5)
    torch.manual_seed(3)
    ffn_ref, residual_ref = solutions.PositionwiseFeedForward(8, 16, 0.5), solutions.ResidualSublayer(8, 0.5)
    x = torch.randn(2, 3, 8, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    got, want = ffn.linear1(x), ffn_ref.linear1(x_ref)
    assert got.shape == (2, 3, 16) and torch.allclose(got, want)
    (got * 2).sum().backward()
    (want * 2).sum().backward()
    assert torch.allclose(x.grad, x_ref.grad) and torch.allclose(ffn.linear1.weight.grad, ffn_ref.linear1.weight.grad)
    assert torch.allclose(residual.norm(x), residual_ref.norm(x_ref))
    with torch.no_grad():
        residual.norm.weight.mul_(2.0)  # trained in place: the state goes with the call
        residual_ref.norm.weight.mul_(2.0)
    assert torch.allclose(residual.norm(x), residual_ref.norm(x_ref))

    # Training mode with dropout 0.5, then p set to 0 after construction: no draw at all.
    ffn.dropout.p = 0.0
    ffn_ref.dropout.p = 0.0
    assert ffn.training and torch.allclose(ffn(x), ffn_ref(x_ref))
    assert torch.allclose(ffn(x), ffn.linear2(torch.relu(ffn.linear1(x))), atol=1e-6)
    residual.norm_first = True
    residual_ref.norm_first = True
    residual.dropout.p = residual_ref.dropout.p = 0.0
    assert torch.allclose(residual(x, torch.tanh), residual_ref(x_ref, torch.tanh), atol=1e-6)

    ffn.dropout.p = torch.tensor(0.5)  # not a plain value: not sent, and said so
    with pytest.raises(RuntimeError, match="only numbers, strings and flags are sent"):
        ffn(x)
    ffn.dropout.p = 0.0
    ffn.linear1 = torch.nn.Linear(8, 16)
    with pytest.raises(RuntimeError, match="were replaced or added to"):
        ffn(x)


def test_greedy_decode_runs_outside_and_calls_the_models_methods_here(channel):
    """``greedy_decode`` takes a model: the model stays in the student's process and the
    reference, outside it, calls its ``encode``, ``decode`` and ``project`` back; the
    tokens are the reference's own on that model. Only those three methods cross:
    reaching an attribute of the model (the key/value cache's path) is refused by name."""
    import torch

    from autograder import runner

    torch.manual_seed(0)
    model = solutions.Transformer(14, 11, d_model=8, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                                  d_ff=16, dropout=0.0, max_len=64).eval()
    called = []
    for method in ("encode", "decode", "project"):
        original = getattr(model, method)
        setattr(model, method, lambda *a, _f=original, _m=method, **k: called.append(_m) or _f(*a, **k))
    src = torch.tensor([[5, 6, 7, 8], [9, 10, 0, 0]])
    src_mask = solutions.padding_mask(src)
    greedy = runner.Reference("greedy_decode", channel)
    got = greedy(model, src, src_mask, 6, sos_id=1, eos_id=2, pad_id=0)
    want = solutions.greedy_decode(model, src, src_mask, 6, sos_id=1, eos_id=2, pad_id=0)
    assert got.dtype == torch.long and torch.equal(got, want)
    assert called[0] == "encode" and {"decode", "project"} <= set(called)
    with pytest.raises(AttributeError, match="reached 'decoder_layers' .* only its methods encode, decode, project"):
        greedy(model, src, src_mask, 6, use_cache=True)  # the key/value cache reads model.decoder_layers


def test_gradients_reach_a_callables_keyword_tensors():
    """A reference calling back a callable with a tensor by keyword gets gradients for it
    too: the caller's side (``runner._Callbacks``) keeps the graph of positional and keyword
    inputs, the references' side (``oracle._Callback``) hands both to the autograd function."""
    import torch

    from autograder import oracle, runner

    side = runner._Callbacks()
    side.functions.append(lambda h, *, scale: torch.tanh(h) * scale)

    class Loop:  # the pipes, short-circuited: the same frames, in one process
        def callback(self, name, request, arrays):
            data, out = side.serve(request, arrays)
            assert "raised" not in data, data
            return data, out

    callback = oracle._Callback(Loop(), "ResidualSublayer", 0, grad=True)
    h, scale = torch.randn(2, 3, requires_grad=True), torch.randn(3, requires_grad=True)
    h_ref, scale_ref = h.detach().clone().requires_grad_(True), scale.detach().clone().requires_grad_(True)
    (callback(h, scale=scale) * 3).sum().backward()
    (torch.tanh(h_ref) * scale_ref * 3).sum().backward()
    assert torch.allclose(h.grad, h_ref.grad) and torch.allclose(scale.grad, scale_ref.grad)
    assert scale.grad.abs().sum() > 0
    with pytest.raises(AttributeError, match="reached 'decoder'"):
        callback.decoder  # noqa: B018 - an attribute of an object passed: refused by name
    assert callback.decode.method == "decode"


class _ScriptedWorker(reference_calls.ReferenceCalls):
    """A relay whose references' side is a script (a thread here): it says ready, then
    answers each call with the next of :attr:`answers`, as raw frames."""

    answers: list = []

    def _run_worker(self, fds):
        import io
        import os

        from autograder.wire import read_frame

        out, calls = os.fdopen(fds[0], "wb"), os.fdopen(fds[1], "rb")
        with out, calls:
            write_frame(out, "", kind="ready")
            for kind, data, arrays in self.answers:
                frame, _ = read_frame(calls, 2**26)
                if frame is None:
                    return
                buf = io.BytesIO()
                write_frame(buf, frame[1], data, arrays, kind=kind)
                out.write(buf.getvalue())
                out.flush()
            read_frame(calls, 2**26)


def _asked(tmp_path, request: dict, arrays: dict, *answers) -> dict:
    """What the student's side gets for ``request`` when the references send ``answers``."""
    calls = _ScriptedWorker({"split_heads"}, tmp_path / "lib", tmp_path / "references", sandbox.Limits(), sandbox=False)
    calls.answers = list(answers)
    with calls:
        assert calls.wait_ready()
        return _call(calls, "split_heads", request, arrays)


def test_an_answer_enters_the_students_process_only_as_its_call_allows(tmp_path):
    """The relay holds each answer against its call: the keys that call can have, plain
    data, a value of the container, shape and dtype the contract gives the call's
    arguments, gradients of the shape and dtype of the tensors asked about, a generator
    state of the size sent, a refusal of a known exception class. Anything else is replaced by
    the grader's refusal, and the references' side is not asked again."""
    import numpy as np

    from autograder.wire import encode

    import torch

    arrays: dict = {}
    x = torch.zeros(2, 3, 4)
    rng = np.zeros(5056, np.uint8)
    call = {"args": encode([x, 2], arrays), "kwargs": {"__dict__": []}, "rng": encode(rng, arrays)}
    grads_call = dict(call, wrt=[["arg", 0]], grads=encode([np.ones((2, 2, 3, 2), np.float32)], arrays))

    def value(array) -> tuple:
        return ("answer", {"value": {"__tensor__": "v", "dtype": str(array.dtype)}, "rng": {"__ndarray__": "r"}},
                {"v": array, "r": rng})

    good_value = value(np.ones((2, 2, 3, 2), np.float32))
    assert set(_asked(tmp_path / "good", call, arrays, good_value)) == {"value", "rng"}
    good_grads = ("answer", {"grads": [{"__ndarray__": "g"}]}, {"g": np.ones((2, 3, 4), np.float32)})
    assert set(_asked(tmp_path / "grads", grads_call, arrays, good_grads)) == {"grads"}
    raised = ("answer", {"raised": {"type": "ValueError", "message": "d_model must divide"}}, {})
    assert _asked(tmp_path / "raised", call, arrays, raised)["raised"]["type"] == "ValueError"
    bad = {
        "gradients of another shape": (grads_call, ("answer", {"grads": [{"__ndarray__": "g"}]},
                                                    {"g": np.ones((9, 9), np.float32)})),
        "gradients of another dtype": (grads_call, ("answer", {"grads": [{"__ndarray__": "g"}]},
                                                    {"g": np.ones((2, 3, 4), np.float64)})),
        "a value for a gradient call": (grads_call, good_value),
        "an object factory": (call, ("answer", {"value": {"__obj__": "torch.nn.Linear", "init": {}, "state": {}},
                                                "rng": {"__ndarray__": "r"}}, {"r": rng})),
        # The value, predicted from the call (split_heads: (B, T, d) -> (B, h, T, d/h), same dtype):
        "a value of another shape": (call, value(np.ones((2, 3, 4), np.float32))),
        "a value of another dtype": (call, value(np.ones((2, 2, 3, 2), np.float64))),
        "an array for a tensor": (call, ("answer", {"value": {"__ndarray__": "v"}, "rng": {"__ndarray__": "r"}},
                                         {"v": np.ones((2, 2, 3, 2), np.float32), "r": rng})),
        "a value where the call gets none": (dict(call, args=encode([x, 3], arrays)), good_value),  # 4 % 3
        "a generator state of another size": (call, ("answer", {"value": 1, "rng": {"__ndarray__": "r"}},
                                                     {"r": np.zeros(7, np.uint8)})),
        "no generator state": (call, ("answer", {"value": 1}, {})),
        "a key of no answer": (call, ("answer", {"value": 1, "rng": {"__ndarray__": "r"}, "source": "def"},
                                      {"r": rng})),
        "an exception class that is not one": (call, ("answer", {"raised": {"type": "SystemExit", "message": ""}}, {})),
        "a callback of nothing the call passed": (call, ("callback", {"id": 0, "args": [], "kwargs": {"__dict__": []},
                                                                       "grad": False}, {})),
        "an answer for another name": (call, ("result", {"value": 1}, {})),
    }
    for what, (request, answer) in bad.items():
        got = _asked(tmp_path / what.replace(" ", "-"), request, arrays, answer, good_value)
        assert got.keys() == {"raised"}, what
        assert got["raised"]["message"].startswith("the reference split_heads was not called: the reference's "
                                                   "sandbox stopped"), (what, got)


def _open_fds() -> set[int]:
    import os

    return set(os.listdir("/proc/self/fd"))


def test_run_job_closes_the_references_ends_when_the_run_never_starts(tmp_path, monkeypatch):
    """The ends handed to a run belong to ``run_job`` from its first line: a run that never
    starts (no bubblewrap; options that cannot go together) leaves no descriptor open, nor
    does a relay whose ends were never handed over."""
    import os

    job = tmp_path / "job"
    job.mkdir()
    (job / "job.json").write_text('{"setup": [], "cells": []}')
    before = _open_fds()
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)
    with pytest.raises(RuntimeError, match="bubblewrap"):
        sandbox.run_job(job, tmp_path, sandbox.Limits(), isolation="bubblewrap", reference_fds=os.pipe())
    with pytest.raises(ValueError, match="beside the result pipe"):
        sandbox.run_job(job, tmp_path, sandbox.Limits(), sandbox=False, result_pipe=False, cases=[],
                        reference_fds=os.pipe())
    calls = _ScriptedWorker(set(), tmp_path / "lib", tmp_path / "references", sandbox.Limits(), sandbox=False)
    with calls:
        assert calls.wait_ready()  # never handed over: the relay closes them
    assert _open_fds() == before


@pytest.mark.slow
def test_the_hunt_finds_a_reference_that_is_in_the_process(tmp_path):
    """The control of the attackers above: in a process that holds the reference as a
    regrade held it before (its source a context cell of ``job.json``, run in the
    process), the same hunt finds its lines, so finding nothing in a regrade means there
    was nothing to find."""
    import subprocess
    import sys

    markers = _code_lines(solutions.PositionwiseFeedForward) - _code_lines(solutions.EncoderLayer)
    cell = {"exercise": "PositionwiseFeedForward", "context": True,
            "source": inspect.getsource(solutions.PositionwiseFeedForward)}
    (tmp_path / "job.json").write_text(json.dumps({"setup": [], "cells": [cell]}), encoding="utf-8")
    program = (HUNT + "\nimport json\nimport torch.nn.functional as F\nfrom torch import nn\n"
               "with open(_os.path.join(_sys.argv[1], 'job.json'), encoding='utf-8') as fh:\n"
               "    exec(compile(json.load(fh)['cells'][0]['source'], '<context cell>', 'exec'))\n"
               "_hunt('PositionwiseFeedForward')\n")
    done = subprocess.run([sys.executable, "-c", program, str(tmp_path)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert [m for m in markers if m in done.stdout], done.stdout[-2000:]
