"""Tests of the chapter 4 checks: plausible wrong answers are rejected with a hint
that names the mistake, different valid answers pass, hidden inputs are fresh."""
import functools
import math

import numpy as np
import pytest

import check_helpers
from check_helpers import assert_reference_passes
import solutions
from autograder import check
from autograder.checks import CheckFailure, get_exercise
from autograder.checks.base import make_rng

NAMES = ["softmax", "scaled_dot_product_attention", "self_attention"]

rejected = functools.partial(check_helpers.rejected, seed=1)


# --------------------------------------------------------------------------- reference, stubs, freshness


@pytest.mark.parametrize("name", NAMES)
def test_reference_passes_visible_and_hidden(name, capsys):
    assert_reference_passes(name, capsys)


@pytest.mark.parametrize("name", NAMES)
def test_stub_says_not_implemented(name):
    def stub(*args, **kwargs):
        raise NotImplementedError()

    with pytest.raises(CheckFailure, match="not implemented yet"):
        check(name, stub)


@pytest.mark.parametrize("name", NAMES)
def test_hidden_cases_are_fresh_each_run(name):
    ex = get_exercise(name)
    first = ex.cases(make_rng(hidden=True), hidden=True)
    second = ex.cases(make_rng(hidden=True), hidden=True)
    assert len(first) > len(ex.cases(make_rng(hidden=False), hidden=False))

    def arrays(cases):
        return [np.asarray(a) for c in cases if c.label.startswith("random") for a in c.args]

    a, b = arrays(first), arrays(second)
    assert a and b
    assert any(x.shape != y.shape or not np.array_equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("name", NAMES)
def test_visible_cases_are_reproducible(name):
    ex = get_exercise(name)
    first = ex.cases(make_rng(hidden=False), hidden=False)
    second = ex.cases(make_rng(hidden=False), hidden=False)
    for c1, c2 in zip(first, second):
        for x, y in zip(c1.args, c2.args):
            np.testing.assert_array_equal(x, y)


# --------------------------------------------------------------------------- softmax


def softmax_no_max(x, axis=-1):
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def softmax_global_max(x, axis=-1):
    x = np.asarray(x)
    if x.ndim == 0:
        raise ValueError("scalar")
    x = x.astype(np.float64) if not np.issubdtype(x.dtype, np.floating) else x
    e = np.exp(x - np.max(x))
    return e / e.sum(axis=axis, keepdims=True)


def softmax_axis0_always(x, axis=-1):
    x = np.asarray(x, dtype=float)
    e = np.exp(x - x.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)


def softmax_whole_sum(x, axis=-1):
    x = np.asarray(x, dtype=float)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum()


def softmax_in_place(x, axis=-1):
    x = np.asarray(x)
    if x.ndim == 0:
        raise ValueError("scalar")
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    x -= x.max(axis=axis, keepdims=True)  # modifies the caller's array
    np.exp(x, out=x)
    x /= x.sum(axis=axis, keepdims=True)
    return x


def test_softmax_without_max_subtraction_is_rejected():
    rejected("softmax", softmax_no_max, "overflow", "maximum")


def test_softmax_with_global_max_is_rejected():
    rejected("softmax", softmax_global_max, "global maximum", "row")


def test_softmax_over_wrong_axis_is_rejected():
    rejected("softmax", softmax_axis0_always, "axis")


def test_softmax_dividing_by_the_whole_sum_is_rejected():
    rejected("softmax", softmax_whole_sum, "sum")


def test_softmax_modifying_its_input_is_rejected():
    rejected("softmax", softmax_in_place, "modified in place", "new arrays")


def test_softmax_losing_float32_is_rejected():
    def softmax_float64(x, axis=-1):
        x = np.asarray(x, dtype=np.float64)
        if x.ndim == 0:
            raise ValueError("scalar")
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)

    rejected("softmax", softmax_float64, "float32")


def test_a_different_valid_softmax_passes():
    def softmax_logsumexp(x, axis=-1):
        x = np.asarray(x)
        if x.ndim == 0:
            raise ValueError("softmax needs an axis")
        if not np.issubdtype(x.dtype, np.floating):
            x = x.astype(np.float64)
        m = np.max(x, axis=axis, keepdims=True)
        lse = m + np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))
        return np.exp(x - lse)

    check("softmax", softmax_logsumexp)
    check("softmax", softmax_logsumexp, hidden=True)


def test_numpys_axis_error_counts_as_value_error():
    def softmax_unvalidated(x, axis=-1):
        x = np.asarray(x)
        if not np.issubdtype(x.dtype, np.floating):
            x = x.astype(np.float64)
        if x.ndim == 0:
            raise np.exceptions.AxisError(axis, 0)  # numpy's own error, a ValueError subclass
        e = np.exp(x - np.max(x, axis=axis, keepdims=True))
        return e / np.sum(e, axis=axis, keepdims=True)

    check("softmax", softmax_unvalidated, hidden=True)


def test_a_scalar_that_returns_normally_is_rejected():
    def softmax_scalar_ok(x, axis=-1):
        x = np.asarray(x)
        if x.ndim == 0:
            return np.ones_like(x, dtype=float)
        return solutions.softmax(x, axis=axis)

    rejected("softmax", softmax_scalar_ok, "should raise ValueError")
    with pytest.raises(CheckFailure, match="should raise ValueError"):
        check("softmax", softmax_scalar_ok)  # the visible check says so before grading does


# --------------------------------------------------------------------------- scaled_dot_product_attention


def _sm(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _attn(score_fn, axis=-1, swap=False, output_only=False):
    def f(q, k, v):
        q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
        w = _sm(score_fn(q, k, v), axis=axis)
        out = w @ v
        if output_only:
            return out
        return (w, out) if swap else (out, w)

    return f


def _kt(k):
    return np.swapaxes(k, -1, -2)


def test_attention_without_scaling_is_rejected():
    rejected("scaled_dot_product_attention", _attn(lambda q, k, v: q @ _kt(k)), "√d_k")


def test_attention_dividing_by_d_k_is_rejected():
    rejected("scaled_dot_product_attention", _attn(lambda q, k, v: q @ _kt(k) / q.shape[-1]), "divided", "d_k")


def test_attention_scaled_by_d_v_is_rejected():
    rejected("scaled_dot_product_attention",
             _attn(lambda q, k, v: q @ _kt(k) / math.sqrt(v.shape[-1])), "d_v")


def test_attention_with_k_times_q_is_rejected():
    rejected("scaled_dot_product_attention",
             _attn(lambda q, k, v: k @ _kt(q) / math.sqrt(q.shape[-1])), "k @ qᵀ")


def test_attention_softmax_over_queries_is_rejected():
    rejected("scaled_dot_product_attention",
             _attn(lambda q, k, v: q @ _kt(k) / math.sqrt(q.shape[-1]), axis=-2), "axis")


def test_attention_returning_swapped_results_is_rejected():
    rejected("scaled_dot_product_attention",
             _attn(lambda q, k, v: q @ _kt(k) / math.sqrt(q.shape[-1]), swap=True), "swapped")


def test_attention_returning_only_the_output_is_rejected():
    rejected("scaled_dot_product_attention",
             _attn(lambda q, k, v: q @ _kt(k) / math.sqrt(q.shape[-1]), output_only=True), "output, weights")


def test_attention_without_batch_axes_is_rejected():
    def two_d_only(q, k, v):
        w = _sm(q @ k.T / math.sqrt(q.shape[-1]))
        return w @ v, w

    rejected("scaled_dot_product_attention", two_d_only, "batch", "swapaxes")


def test_attention_with_np_sqrt_promoting_float32_is_rejected():
    rejected("scaled_dot_product_attention",
             _attn(lambda q, k, v: q @ _kt(k) / np.sqrt(q.shape[-1])), "float32", "math.sqrt")


def test_attention_with_a_naive_softmax_is_rejected():
    def naive(q, k, v):
        s = q @ _kt(k) / math.sqrt(q.shape[-1])
        e = np.exp(s)
        w = e / e.sum(axis=-1, keepdims=True)
        return w @ v, w

    rejected("scaled_dot_product_attention", naive, "maximum")


def test_a_different_valid_attention_passes():
    def einsum_attention(q, k, v):
        q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
        if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
            raise ValueError("shapes do not fit")
        scores = np.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.shape[-1])
        w = solutions.softmax(scores)
        return np.einsum("...qk,...kd->...qd", w, v), w

    check("scaled_dot_product_attention", einsum_attention)
    check("scaled_dot_product_attention", einsum_attention, hidden=True)


# --------------------------------------------------------------------------- self_attention


def _self(project, attend=solutions.scaled_dot_product_attention, output_only=False):
    def f(x, W_q, W_k, W_v):
        q, k, v = project(x, W_q, W_k, W_v)
        out = attend(q, k, v)
        return out[0] if output_only else out

    return f


def test_self_attention_with_transposed_weights_is_rejected():
    rejected("self_attention", _self(lambda x, a, b, c: (x @ a.T, x @ b.T, x @ c.T)), "x @ W.T")


def test_self_attention_without_projection_is_rejected():
    rejected("self_attention", _self(lambda x, a, b, c: (x, x, x)), "project")


def test_self_attention_mixing_queries_and_keys_is_rejected():
    rejected("self_attention", _self(lambda x, a, b, c: (x @ b, x @ a, x @ c)), "W_q", "W_k")


def test_self_attention_returning_only_the_output_is_rejected():
    rejected("self_attention", _self(lambda x, a, b, c: (x @ a, x @ b, x @ c), output_only=True),
             "output, weights")


def test_self_attention_scaled_by_d_v_is_rejected():
    def scaled_by_d_v(q, k, v):
        w = _sm(q @ _kt(k) / math.sqrt(v.shape[-1]))
        return w @ v, w

    rejected("self_attention", _self(lambda x, a, b, c: (x @ a, x @ b, x @ c), attend=scaled_by_d_v), "d_v")


def test_a_different_valid_self_attention_passes():
    def fused(x, W_q, W_k, W_v):
        x = np.asarray(x)
        d_k = W_q.shape[1]
        if W_q.shape[0] != x.shape[-1]:
            raise ValueError("W_q must be (d_model, d_k)")
        qkv = x @ np.concatenate([W_q, W_k, W_v], axis=1)  # (..., n, 2 d_k + d_v)
        q, k, v = qkv[..., :d_k], qkv[..., d_k:2 * d_k], qkv[..., 2 * d_k:]
        return solutions.scaled_dot_product_attention(q, k, v)

    check("self_attention", fused)
    check("self_attention", fused, hidden=True)
