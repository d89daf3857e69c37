"""The checks API itself: cases, encoding, comparison messages, expected errors."""
import numpy as np
import pytest
import torch

import solutions
from autograder.checks import base, load_all
from autograder.checks.compare import redacted
from autograder.checks.dependencies import names_used
from autograder.checks.exercise import run_in_process
from autograder.checks.base import Case, CheckFailure, Exercise, Tensor

# One intra-op thread (conftest's fixture; importing check_helpers does not activate its own):
# tiny tensors, and a second thread only spins against the other xdist worker.
pytestmark = pytest.mark.usefixtures("one_torch_thread")


class _Softmax(Exercise):
    name = "softmax"
    chapter = "test"

    def cases(self, rng, hidden):
        cases = [Case(args=(rng.normal(size=(3, 4)),), label="3x4 scores")]
        if hidden:
            cases.append(Case(args=(np.array([[1e4, 0.0]]),), label="huge scores"))
            cases.append(Case(args=(np.float64(2.5),), expect_error=(ValueError,), label="a scalar"))
        return cases

    def diagnose(self, case, got, want):
        sums = np.asarray(got.value).sum(-1)
        if not np.allclose(sums, 1):
            return f"rows sum to {np.round(sums, 2).tolist()}, not 1"
        return None


class _MHA(Exercise):
    name = "MultiHeadAttention"
    chapter = "test"
    kind = "class"

    def cases(self, rng, hidden):
        torch.manual_seed(int(rng.integers(1 << 30)))
        ref = solutions.MultiHeadAttention(8, 2)
        state = {k: v.numpy() for k, v in ref.state_dict().items()}
        x = rng.normal(size=(2, 3, 8)).astype(np.float32)
        return [
            Case(
                init={"d_model": 8, "num_heads": 2},
                state=state,
                args=(Tensor(x), Tensor(x), Tensor(x)),
                attrs=("attn_weights",),
                probes=("state_dict_keys",),
                label="self-attention",
            )
        ]


def _verdict(exercise, obj, hidden=True, seed=1):
    """``(passed, text)`` of the report on ``obj``."""
    report = _report(exercise, obj, hidden, seed)
    return report.passed, report.render(exercise.name)


def _report(exercise, obj, hidden=True, seed=1):
    cases = exercise.cases(np.random.default_rng(seed), hidden)
    return base.run_cases(exercise, obj, cases)


def test_reference_passes():
    assert _verdict(_Softmax(), solutions.softmax)[0]
    assert _verdict(_MHA(), solutions.MultiHeadAttention)[0]


def test_wrong_axis_is_rejected_with_a_hint():
    def wrong(x, axis=-1):
        e = np.exp(x - x.max())
        return e / e.sum(0)

    ok, message = _verdict(_Softmax(), wrong)
    assert not ok
    assert "wrong values" in message and "3x4 scores" in message and "Hint: rows sum to" in message


def test_shape_dtype_and_type_mismatches_are_named():
    ok, message = _verdict(_Softmax(), lambda x, axis=-1: np.ones(x.shape + (1,)))
    assert not ok and "shape" in message
    ok, message = _verdict(_Softmax(), lambda x, axis=-1: solutions.softmax(x).astype(np.float32))
    assert not ok and "dtype float32, less precise than the expected float64" in message
    ok, message = _verdict(_Softmax(), lambda x, axis=-1: torch.from_numpy(solutions.softmax(x)))
    assert not ok and "torch.Tensor, expected a numpy array" in message


def test_nan_is_reported_as_nan():
    def overflowing(x, axis=-1):
        e = np.exp(np.asarray(x, dtype=np.float64))
        return e / e.sum(axis, keepdims=True)

    with np.errstate(all="ignore"):
        ok, message = _verdict(_Softmax(), overflowing)
    assert not ok and "NaN" in message and "huge scores" in message


def test_expected_errors():
    def no_validation(x, axis=-1):
        x = np.atleast_1d(x)
        return solutions.softmax(x)

    ok, message = _verdict(_Softmax(), no_validation)
    assert not ok and "should raise ValueError" in message and "returned normally" in message


def test_not_implemented_stub_gets_a_friendly_message():
    def stub(x, axis=-1):
        raise NotImplementedError()

    ok, message = _verdict(_Softmax(), stub)
    assert not ok and "not implemented yet" in message


def test_objects_that_lie_about_equality_cannot_cross():
    class Liar:
        def __eq__(self, other):
            return True

    ok, message = _verdict(_Softmax(), lambda x, axis=-1: Liar())
    assert not ok and "object of type" in message


def test_ndarray_subclass_is_reduced_to_plain_data():
    class Always(np.ndarray):
        def __eq__(self, other):
            return np.ones(self.shape, bool)

    ok, message = _verdict(_Softmax(), lambda x, axis=-1: np.zeros_like(x).view(Always))
    assert not ok and "wrong values" in message


def test_class_exercise_state_dict_mismatch():
    class Missing(torch.nn.Module):
        def __init__(self, d_model, num_heads, dropout=0.0):
            super().__init__()
            self.w_q = torch.nn.Linear(d_model, d_model)

    ok, message = _verdict(_MHA(), Missing)
    assert not ok and "load_state_dict raised" in message and "w_k.weight" in message


def test_in_place_modification_is_caught():
    class _Inplace(_Softmax):
        def cases(self, rng, hidden):
            return [Case(args=(rng.normal(size=(2, 3)),), return_args=(0,), label="2x3")]

    def in_place(x, axis=-1):
        x -= x.max(axis, keepdims=True)
        np.exp(x, out=x)
        x /= x.sum(axis, keepdims=True)
        return x.copy()

    ok, message = _verdict(_Inplace(), in_place)
    assert not ok and "modified in place" in message


def test_visible_check_prints_to_stdout_only(capsys, monkeypatch):
    monkeypatch.setitem(base.REGISTRY, "softmax", _Softmax())
    monkeypatch.setattr("autograder.checks.load_all", lambda: base.REGISTRY)
    base.check("softmax", solutions.softmax)
    out, err = capsys.readouterr()
    assert out.startswith("✓ softmax:") and err == ""
    with pytest.raises(CheckFailure, match="✗ softmax"):
        base.check("softmax", lambda x, axis=-1: x)


def test_hidden_cases_use_fresh_randomness():
    a = _Softmax().cases(base.make_rng(hidden=True), True)[0].args[0]
    b = _Softmax().cases(base.make_rng(hidden=True), True)[0].args[0]
    assert not np.array_equal(a, b)
    c = _Softmax().cases(base.make_rng(hidden=False), False)[0].args[0]
    d = _Softmax().cases(base.make_rng(hidden=False), False)[0].args[0]
    assert np.array_equal(c, d)


def test_unknown_exercise_is_a_clear_error():
    with pytest.raises(ValueError, match="no exercise called"):
        base.get_exercise("definitely_not_an_exercise")


# --------------------------------------------------------------------------- parts, dtypes, advice


class _Parted(Exercise):
    """softmax with three named parts and an error the contract does not name."""

    name = "softmax"
    chapter = "test"
    parts = {"values": 2, "any axis": 1, "no overflow": 1}

    def cases(self, rng, hidden):
        return [
            Case(args=(rng.normal(size=(3, 4)),), label="3x4", part="values"),
            Case(args=(rng.normal(size=(3, 4)).astype(np.float32),), label="float32", part="values",
                 rtol=1e-4),
            Case(args=(rng.normal(size=(3, 4)),), kwargs={"axis": 0}, label="axis 0", part="any axis"),
            Case(args=(np.array([[1e4, 0.0]]),), label="1e4", part="no overflow"),
            Case(args=(np.float64(2.0),), expect_error=(ValueError,), label="a scalar", part=base.ADVICE),
        ]


def _stable_last_axis(x, axis=-1):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_parts_earn_points_independently():
    report = _report(_Parted(), _stable_last_axis)
    assert [(p.name, p.earned) for p in report.parts] == [("values", True), ("any axis", False),
                                                         ("no overflow", True)]
    assert report.score == 3 and report.max_score == 4 and not report.passed
    assert "any axis" in report.reason() and "wrong values" in report.reason()
    text = report.render("softmax")
    assert "✗ softmax: 3/4 points" in text and "✓ values (2/2)" in text and "✗ any axis (0/1)" in text


def test_every_case_runs_after_a_failure():
    def naive(x, axis=-1):
        e = np.exp(np.asarray(x, dtype=np.float64))
        return e / e.sum(axis, keepdims=True)

    with np.errstate(all="ignore"):
        report = _report(_Parted(), naive)
    assert [p.earned for p in report.parts] == [True, True, False]
    assert report.parts[2].failed == 1 and "NaN" in report.parts[2].message


def test_points_scale_to_the_notebook():
    cases = _Parted().cases(np.random.default_rng(0), True)
    results = [run_in_process(_stable_last_axis, c, "function") for c in cases]
    report = base.evaluate(_Parted(), results, cases, points=8)
    assert report.max_score == 8 and report.score == 6


def test_unnamed_errors_are_advice_worth_nothing():
    def no_validation(x, axis=-1):
        x = np.atleast_1d(np.asarray(x, dtype=np.float64))
        e = np.exp(x - x.max(axis, keepdims=True))
        return e / e.sum(axis, keepdims=True)

    report = _report(_Parted(), no_validation)
    assert report.passed and report.score == 4
    assert report.advice and "the reference raises ValueError (a scalar); yours returned normally" in report.advice[0]
    assert "advice (no points)" in report.render("softmax")


def test_wider_float_is_correct_with_a_note_narrower_is_wrong():
    def wider(x, axis=-1):
        x = np.asarray(x, dtype=np.float64)
        e = np.exp(x - x.max(axis, keepdims=True))
        return e / e.sum(axis, keepdims=True)

    report = _report(_Parted(), wider)
    assert report.passed and any("float64 where the reference returns float32" in n for n in report.notes)

    def narrower(x, axis=-1):
        return wider(x, axis).astype(np.float16)

    report = _report(_Parted(), narrower)
    assert report.score == 0 and "less precise than the expected" in report.parts[0].message


def test_without_float_inputs_any_float_precision_is_right():
    """one_hot-like: integer ids in, floats out. float32 carries all the inputs had."""

    class _OneHot(Exercise):
        name = "one_hot"
        chapter = "test"
        parts = {"values": 1, "kind": 1}

        def cases(self, rng, hidden):
            ids = [2, 0, 1]
            return [Case(args=(ids, 4), part="values", compare="values"),
                    Case(args=(ids, 4), part="kind")]

    reference = lambda ids, v: np.eye(v)[ids]  # noqa: E731 - float64
    _OneHot.reference = lambda self: reference
    report = _report(_OneHot(), lambda ids, v: np.eye(v, dtype=np.float32)[ids])
    assert report.passed and "correct here" in report.notes[0]
    report = _report(_OneHot(), lambda ids, v: np.eye(v, dtype=np.int64)[ids])
    assert [p.earned for p in report.parts] == [True, False]  # the dtype costs its own part only
    assert "expected a float dtype" in report.parts[1].message


def test_dtype_rule_in_one_place():
    assert base.dtype_verdict("float64", "float32")[0]
    assert not base.dtype_verdict("float16", "float32")[0]
    assert not base.dtype_verdict("bfloat16", "float16")[0]
    assert not base.dtype_verdict("int64", "float32")[0]
    assert not base.dtype_verdict("uint8", "bool")[0]
    assert not base.dtype_verdict("int32", "int64")[0]
    assert base.dtype_verdict("bool", "bool") == (True, None)
    assert base.dtype_verdict("float32", "float64", input_bits=None)[0]  # no float input
    assert base.dtype_verdict("float32", "float64", input_bits=24)[0]  # float32 input
    assert not base.dtype_verdict("float32", "float64", input_bits=53)[0]  # float64 input


def test_structure_cases_ignore_values():
    class _Shape(_Parted):
        parts = {"shape": 1, "values": 1}

        def cases(self, rng, hidden):
            x = rng.normal(size=(2, 3))
            return [Case(args=(x,), part="shape", compare="structure"), Case(args=(x,), part="values")]

    report = _report(_Shape(), lambda x, axis=-1: np.zeros_like(x))
    assert [p.earned for p in report.parts] == [True, False]
    report = _report(_Shape(), lambda x, axis=-1: np.zeros(x.shape + (1,)))
    assert [p.earned for p in report.parts] == [False, False]


def test_check_returns_points_and_raises_only_at_zero(capsys, monkeypatch):
    monkeypatch.setitem(base.REGISTRY, "softmax", _Parted())
    monkeypatch.setattr("autograder.checks.load_all", lambda: base.REGISTRY)
    points = base.check("softmax", _stable_last_axis)
    out, err = capsys.readouterr()
    assert points == 3 and repr(points) == "3.0" and "3 / 4 points" in points._repr_html_()
    assert base.check("softmax", solutions.softmax) is None  # full marks: nbgrader's full points
    assert out.startswith("✗ softmax: 3/4 points") and err == ""
    with pytest.raises(CheckFailure, match="0/4 points"):
        base.check("softmax", lambda x, axis=-1: x)


# --------------------------------------------------------------------------- one mistake charged once

_NOTEBOOK = '''
def softmax(x, axis=-1):
    return np.exp(x) / np.exp(x).sum()          # wrong: the sum over the whole array

def scaled_dot_product_attention(q, k, v):
    weights = softmax(q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1]))
    return weights @ v, weights
'''


def test_visible_check_charges_a_failing_earlier_answer_once(monkeypatch, capsys):
    from autograder.checks import get_exercise

    monkeypatch.setattr(type(get_exercise("scaled_dot_product_attention")), "uses", ("softmax",))
    ns = {"np": np, "math": __import__("math")}
    exec(_NOTEBOOK, ns)  # one namespace, as in a notebook
    report = base.check_report("scaled_dot_product_attention", ns["scaled_dot_product_attention"])
    assert report.passed and report.notes[0].startswith(
        "your `scaled_dot_product_attention` calls your `softmax`, which fails its check")
    assert ns["softmax"] is not solutions.softmax  # the notebook's own answer is put back
    base.check("scaled_dot_product_attention", ns["scaled_dot_product_attention"])
    assert "fix `softmax` first" in capsys.readouterr().out


def test_names_used_sees_methods_and_nested_code():
    class Layer:
        def forward(self, x):
            return [split_heads(t) for t in x]  # noqa: F821 - a name, never called

    assert "split_heads" in names_used(Layer)
    assert "softmax" in names_used(lambda x: softmax(x))  # noqa: F821


# --------------------------------------------------------------------------- hidden cases: one redaction rule


class _Leaky(Exercise):
    """An exercise whose reference echoes a drawn input in every form a message
    could quote: a string, dict keys, integers, a float and an array; its hidden
    case's label spells the input out, as "random corpus [...]" labels do."""

    name = "leaky"
    chapter = "test"

    def cases(self, rng, hidden):
        word = "".join(rng.choice(list("qwxz"), size=6))
        cases = [Case(args=("abc",), label="the fixed word 'abc'")]
        if hidden:
            cases.append(Case(args=(word,), label=f"random word {word!r}"))
        return cases

    def reference(self):
        return lambda w: {"text": w, "keys": {w: 1}, "ids": np.array([ord(c) for c in w]),
                          "mean": float(np.mean([ord(c) for c in w])), "x": np.array([ord(c) / 7 for c in w])}

    def diagnose(self, case, got, want):
        return f"you returned {base.shown(got.value.get('text'))}"


def _leaky_answer(w):
    marker = "LEAK<" + w + ">"
    return {"text": marker, "keys": {marker: 1}, "ids": np.array([ord(c) + 1 for c in w]),
            "mean": 1.0, "x": np.array([ord(c) / 7 + 1 for c in w])}


@pytest.mark.parametrize("wrong_field", ["text", "keys", "ids", "mean", "x"])
def test_hidden_case_messages_quote_no_value(wrong_field):
    """Under ``evaluate(..., hidden=True)`` every message names the mistake (what
    differs, counts, the largest error) without a value from the inputs: not the
    returned string or keys, not an element, not the expected value, not a label
    made of drawn values. The visible check quotes them."""
    ex = _Leaky()
    cases = ex.cases(np.random.default_rng(4), True)
    word = cases[1].args[0]

    def answer(w):
        right = ex.reference()(w)
        right[wrong_field] = _leaky_answer(w)[wrong_field]
        return right

    results = [run_in_process(answer, c, "function") for c in cases]
    hidden = base.evaluate(ex, results[1:], cases[1:], hidden=True)
    message = hidden.parts[0].message
    assert not hidden.passed and word not in message and "LEAK" not in message, message
    assert "hidden case 1 of 1, its inputs not shown" in message and "random word" not in message
    assert "Hint: you returned a string" in message
    assert {"text": "not the expected str", "keys": "1 unexpected", "ids": "6 of 6 entries differ (the first at index (0,))",
            "mean": "is not the expected number", "x": "6 of 6 entries differ, the largest error 1"}[wrong_field] in message
    # the same results judged as the visible check's: detailed, the label too
    visible = base.evaluate(ex, results[1:], cases[1:]).parts[0].message
    assert f"random word {word!r}" in visible
    assert ("LEAK<" if wrong_field in ("text", "keys") else "expected") in visible
    # a fixed label stays readable in a hidden set
    fixed = base.evaluate(ex, results[:1], cases[:1], hidden=True).parts[0].message
    assert "the fixed word 'abc'" in fixed and "LEAK" not in fixed and "abc>" not in fixed
    assert not base.redacting()  # the rule holds only while a hidden set is judged
    with redacted(True):
        assert [base.shown(v) for v in ("LEAK", 3, np.ones((2, 1)), {"k": 1})] == [
            "a string", "a number", "an array of shape (2, 1)", "a dict"]
    assert not base.redacting()


def test_public_labels_are_the_fixed_ones():
    labels = base.public_labels(_Leaky())
    assert "the fixed word 'abc'" in labels and not any(label.startswith("random word") for label in labels)
    assert base.shown([1, 2]) == "[1, 2]" and base.shown(0.5, ".2f") == "0.50"


def _strings_in(value, found):
    """Every string of four characters or more inside a case's arguments."""
    if isinstance(value, str):
        if len(value.strip()) >= 4:
            found.add(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _strings_in(v, found)
    elif isinstance(value, dict):
        for k, v in value.items():
            _strings_in(k, found)
            _strings_in(v, found)
    return found


@pytest.mark.parametrize("name", sorted(n for n, ex in load_all().items()
                                        if ex.kind == "function"))
def test_every_function_exercise_redacts_its_hidden_messages(name):
    """Every chapter's function exercise, fed an answer that hands its first argument
    back (the input tensor itself, the input string or list): judged as a hidden
    set, no message holds a drawn label, an input string, or the visible check's
    "got ..., expected ..." / "is ..., expected ..." quotes."""
    ex = base.get_exercise(name)
    cases = ex.cases(np.random.default_rng(11), True)
    public = base.public_labels(ex)

    def echo(*args, **kwargs):
        return args[0] if args else None

    results = [run_in_process(echo, c, ex.kind) for c in cases]
    report = base.evaluate(ex, results, cases, hidden=True)
    text = report.render(name)
    known = set()  # the visible check's strings and the fixed labels and parts: the student has them
    for case in ex.cases(base.make_rng(False), False):
        _strings_in(list(case.args) + list(case.kwargs.values()), known)
    fixed_text = " ".join([*public, *ex.part_points()])
    drawn = [case for case in cases if case.label not in public]
    assert drawn, "no drawn case: the test would check nothing"
    for case in drawn:
        assert case.label not in text, text
        for s in _strings_in(list(case.args) + list(case.kwargs.values()), set()) - known:
            assert s not in text or s in fixed_text, (s, text)
    assert "(got " not in text and "differs at index" not in text and "unexpected [" not in text, text


def test_reference_results_hold_when_gradings_share_a_process():
    """Two gradings in threads of one process (a thread pool, a server) must not
    interleave the global random draws of dropout cases: the reference then
    disagrees with itself and a correct answer loses the dropout part. Each
    trusted run holds one lock, so every thread sees the single-threaded result."""
    from concurrent.futures import ThreadPoolExecutor

    load_all()
    exercises = [base.REGISTRY[n] for n in ("PositionwiseFeedForward", "ResidualSublayer", "EncoderLayer")]
    jobs = [(ex, case) for ex in exercises for case in ex.cases(base.make_rng(True, seed=5), True) if case.train]
    assert len(jobs) >= 4
    baseline = [base.as_array(ex.expected(case).value) for ex, case in jobs]
    assert all(b is not None and b.size for b in baseline)

    def replay(_):
        return [base.as_array(ex.expected(case).value) for ex, case in jobs]

    with ThreadPoolExecutor(max_workers=4) as pool:
        for run in pool.map(replay, range(16)):
            for got, want in zip(run, baseline):
                np.testing.assert_array_equal(got, want)
