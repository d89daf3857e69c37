"""The checks API itself: cases, encoding, comparison messages, expected errors."""
import numpy as np
import pytest
import torch

import solutions
from autograder.checks import base
from autograder.checks.base import Case, CheckFailure, Exercise, Tensor


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
    cases = exercise.cases(np.random.default_rng(seed), hidden)
    results = [base._run_in_process(obj, c, exercise.kind) for c in cases]
    return base.evaluate(exercise, results, cases)


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
    assert not ok and "dtype float32, expected float64" in message
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
