"""Tests of the chapter 4 checks: plausible wrong answers lose the part they are
about, with a hint that names the mistake; valid answers in other styles earn
full marks (visible and hidden checks; the sandboxed grader: test_checks_sandboxed.py);
a wrong ``softmax`` is charged once (the reference and fresh hidden
inputs: test_checks_registry.py)."""
import functools
import math

import numpy as np
import pytest

import check_helpers
from check_helpers import cases_drawn_once  # noqa: F401 (a fixture: each seeded draw made once per process)
from check_helpers import notebook_namespace
from check_helpers import accepted, partly, stub_says_not_implemented
import solutions
from autograder import check
from autograder.checks import get_exercise
from autograder.checks.base import check_report, make_rng

# One intra-op thread (conftest's fixture; importing check_helpers does not activate its own):
# tiny tensors, and a second thread only spins against the other xdist worker.
pytestmark = pytest.mark.usefixtures("one_torch_thread", "cases_drawn_once")

NAMES = ["softmax", "scaled_dot_product_attention", "self_attention"]

rejected = functools.partial(check_helpers.rejected, seed=1)


# --------------------------------------------------------------------------- stubs


@pytest.mark.parametrize("name", NAMES)
def test_stub_says_not_implemented(name):
    stub_says_not_implemented(name)


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
    """The reference's values, written into a float input: modifies the caller's array."""
    x = np.asarray(x)
    out = solutions.softmax(x, axis=axis)
    if np.issubdtype(x.dtype, np.floating):
        x[...] = out
        return x
    return out


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


def test_softmax_returning_float64_for_float32_is_correct_with_a_note():
    def softmax_float64(x, axis=-1):
        x = np.asarray(x, dtype=np.float64)
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)

    report = accepted("softmax", softmax_float64)
    assert any("float64 where the reference returns float32: correct" in n for n in report.notes), report.notes


def test_softmax_losing_precision_is_rejected():
    def softmax_float16(x, axis=-1):
        return solutions.softmax(x, axis=axis).astype(np.float16)

    rejected("softmax", softmax_float16, "float16", "less precise")


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

    accepted("softmax", softmax_logsumexp)


def test_numpys_axis_error_counts_as_value_error():
    def softmax_unvalidated(x, axis=-1):
        x = np.asarray(x)
        if not np.issubdtype(x.dtype, np.floating):
            x = x.astype(np.float64)
        if x.ndim == 0:
            raise np.exceptions.AxisError(axis, 0)  # numpy's own error, a ValueError subclass
        e = np.exp(x - np.max(x, axis=axis, keepdims=True))
        return e / np.sum(e, axis=axis, keepdims=True)

    report = accepted("softmax", softmax_unvalidated)
    assert not report.advice


def test_a_scalar_that_returns_normally_is_full_marks_with_advice(capsys):
    """The contract names no error for a 0-d input: the prompt's own recipe returns
    1.0 there, which earns every point; the feedback advises, worth nothing."""
    def softmax_scalar_ok(x, axis=-1):
        x = np.asarray(x)
        if x.ndim == 0:
            return np.ones_like(x, dtype=float)
        return solutions.softmax(x, axis=axis)

    report = accepted("softmax", softmax_scalar_ok)
    assert any("reference raises" in a and "ValueError" in a and "returned normally" in a for a in report.advice)
    check("softmax", softmax_scalar_ok)
    out = capsys.readouterr().out
    assert "✓ softmax: 3/3 points" in out and "advice (no points)" in out


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


def test_attention_with_np_sqrt_promoting_float32_is_correct_with_a_note():
    report = accepted("scaled_dot_product_attention", _attn(lambda q, k, v: q @ _kt(k) / np.sqrt(q.shape[-1])))
    assert any("float64 where the reference returns float32" in n for n in report.notes), report.notes


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

    accepted("scaled_dot_product_attention", einsum_attention)


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

    accepted("self_attention", fused)


# --------------------------------------------------------------------------- more valid styles, as notebook cells

# Each answer is the text of a solution cell: the in-process tests exec them into
# one namespace (as a notebook kernel does), the sandboxed grader runs them as cells
# (test_checks_sandboxed.py).

SOFTMAX_LOOP = '''
def softmax(x, axis=-1):
    """One row at a time: move the axis last, loop over every other index."""
    x = np.moveaxis(np.asarray(x, dtype=np.float64), axis, -1)  # (..., n)
    out = np.empty_like(x)
    for idx in np.ndindex(*x.shape[:-1]):
        row = x[idx]
        e = np.exp(row - row.max())
        out[idx] = e / e.sum()
    return np.moveaxis(out, -1, axis)
'''

SOFTMAX_LOGSUMEXP = '''
def softmax(x, axis=-1):
    """exp(x - logsumexp(x)), no input validation."""
    x = np.asarray(x)
    m = np.max(x, axis=axis, keepdims=True)
    log_z = m + np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))
    return np.exp(x - log_z)
'''

SDPA_LOOP = '''
def scaled_dot_product_attention(q, k, v):
    """One (batch, head) problem at a time, with the notebook's own softmax."""
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    d_k = q.shape[-1]
    dtype = np.result_type(q, k, v, np.float32)
    output = np.empty(q.shape[:-1] + (v.shape[-1],), dtype=dtype)  # (..., n_q, d_v)
    weights = np.empty(q.shape[:-1] + (k.shape[-2],), dtype=dtype)  # (..., n_q, n_k)
    for idx in np.ndindex(*q.shape[:-2]):
        scores = q[idx] @ k[idx].T / math.sqrt(d_k)  # (n_q, n_k)
        weights[idx] = softmax(scores, axis=-1)
        output[idx] = weights[idx] @ v[idx]
    return output, weights
'''

SDPA_EINSUM = '''
def scaled_dot_product_attention(q, k, v):
    """einsum, the notebook's own softmax, no shape checks (numpy raises its own errors)."""
    scores = np.einsum("...qd,...kd->...qk", q, k) / np.sqrt(np.shape(q)[-1])  # float64 scale
    weights = softmax(scores)
    return np.einsum("...qk,...kv->...qv", weights, v), weights
'''

SELF_ATTENTION_OWN_SDPA = '''
def self_attention(x, W_q, W_k, W_v):
    """Project, then call the notebook's own scaled_dot_product_attention."""
    return scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v)
'''

SELF_ATTENTION_EINSUM = '''
def self_attention(x, W_q, W_k, W_v):
    """Everything in float64 with einsum, attention written inline."""
    x, W_q, W_k, W_v = (np.asarray(a, dtype=np.float64) for a in (x, W_q, W_k, W_v))
    q = np.einsum("...nd,dk->...nk", x, W_q)
    k = np.einsum("...nd,dk->...nk", x, W_k)
    v = np.einsum("...nd,dv->...nv", x, W_v)
    scores = np.einsum("...qk,...nk->...qn", q, k) / math.sqrt(W_q.shape[1])
    scores -= scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    return weights @ v, weights
'''

NAIVE_SOFTMAX = '''
def softmax(x, axis=-1):
    """Right on ordinary scores, but exp(1e4) overflows: no maximum subtracted."""
    e = np.exp(np.asarray(x, dtype=np.float64))
    return e / e.sum(axis=axis, keepdims=True)
'''

UNFINISHED_SOFTMAX = '''
def softmax(x, axis=-1):
    # YOUR CODE HERE
    raise NotImplementedError()
'''

SDPA_REFERENCE_STYLE = '''
def scaled_dot_product_attention(q, k, v):
    d_k = q.shape[-1]
    weights = softmax(q @ np.swapaxes(k, -1, -2) / math.sqrt(d_k))  # (..., n_q, n_k)
    return weights @ v, weights
'''


def notebook(*sources):
    """The functions of ``sources`` defined in one namespace, like a notebook kernel."""
    return notebook_namespace({"np": np, "math": math}, *sources)


@pytest.mark.parametrize("source", [SOFTMAX_LOOP, SOFTMAX_LOGSUMEXP], ids=["loop", "logsumexp"])
def test_more_valid_softmax_styles_earn_full_marks(source):
    accepted("softmax", notebook(source)["softmax"])


def test_the_loop_softmax_gets_the_wider_dtype_note():
    report = accepted("softmax", notebook(SOFTMAX_LOOP)["softmax"])
    assert any("float64 where the reference returns float32" in n for n in report.notes)


@pytest.mark.parametrize("source", [SDPA_LOOP, SDPA_EINSUM], ids=["loop", "einsum"])
def test_more_valid_attention_styles_earn_full_marks(source):
    accepted("scaled_dot_product_attention", notebook(SOFTMAX_LOGSUMEXP, source)["scaled_dot_product_attention"])


@pytest.mark.parametrize("source", [SELF_ATTENTION_OWN_SDPA, SELF_ATTENTION_EINSUM], ids=["own-sdpa", "einsum"])
def test_more_valid_self_attention_styles_earn_full_marks(source):
    ns = notebook(SOFTMAX_LOOP, SDPA_EINSUM, source)
    accepted("self_attention", ns["self_attention"])


# --------------------------------------------------------------------------- half-right answers: partial credit


def test_softmax_ignoring_axis_loses_only_any_axis():
    def softmax_last_axis_only(x, axis=-1):
        x = np.asarray(x, dtype=np.float64)
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    partly("softmax", softmax_last_axis_only, ["values on random inputs", "no overflow at 1e4"],
           ["any axis"], "you normalised over axis 1, not axis=0", hidden=False)


def test_naive_softmax_loses_only_no_overflow():
    report = partly("softmax", notebook(NAIVE_SOFTMAX)["softmax"], ["values on random inputs", "any axis"],
                    ["no overflow at 1e4"], "exp overflowed")
    assert report.score == 2


def test_softmax_with_the_global_max_loses_only_no_overflow():
    partly("softmax", softmax_global_max, ["values on random inputs", "any axis"],
           ["no overflow at 1e4"], "global maximum", hidden=False)


def test_two_d_only_attention_loses_only_batch_axes():
    def two_d_only(q, k, v):
        w = _sm(q @ k.T / math.sqrt(q.shape[-1]))
        return w @ v, w

    report = partly("scaled_dot_product_attention", two_d_only,
                    ["one sequence: output and weights", "large scores"], ["batch axes"],
                    "swapaxes")
    assert report.score == 3


def test_attention_with_an_inline_naive_softmax_loses_only_large_scores():
    def naive(q, k, v):
        e = np.exp(q @ _kt(k) / math.sqrt(q.shape[-1]))
        w = e / e.sum(axis=-1, keepdims=True)
        return w @ v, w

    partly("scaled_dot_product_attention", naive, ["one sequence: output and weights", "batch axes"],
           ["large scores"], "maximum")


def test_two_d_only_self_attention_loses_only_batch_axes():
    def two_d_only(x, W_q, W_k, W_v):
        q, k, v = x @ W_q, x @ W_k, x @ W_v
        w = _sm(q @ k.T / math.sqrt(q.shape[-1]))
        return w @ v, w

    partly("self_attention", two_d_only, ["projections and attention"], ["batch axes"], "k.T")


# --------------------------------------------------------------------------- one mistake charged once


@pytest.mark.parametrize("softmax_source", [NAIVE_SOFTMAX, UNFINISHED_SOFTMAX], ids=["naive", "unfinished"])
def test_a_failing_softmax_is_charged_once(softmax_source):
    """softmax wrong (overflows at 1e4) or unfinished; the attention functions are
    right and call it: they earn full marks, and the note says what to fix first."""
    ns = notebook(softmax_source, SDPA_REFERENCE_STYLE, SELF_ATTENTION_OWN_SDPA)
    assert not check_report("softmax", ns["softmax"], hidden=True).passed
    sdpa = check_report("scaled_dot_product_attention", ns["scaled_dot_product_attention"], hidden=True)
    assert sdpa.passed, sdpa.render("scaled_dot_product_attention")
    assert sdpa.notes[0].startswith("your `scaled_dot_product_attention` calls your `softmax`, which fails its "
                                    "check; it was graded with the reference `softmax` in its place")
    assert "fix `softmax` first" in sdpa.notes[0]
    # self_attention never meets scores large enough to break the naive softmax;
    # an unfinished one reaches it through scaled_dot_product_attention.
    own = check_report("self_attention", ns["self_attention"], hidden=True)
    assert own.passed, own.render("self_attention")
    if softmax_source is UNFINISHED_SOFTMAX:
        assert own.notes[0].startswith("your `self_attention` calls your `scaled_dot_product_attention`")
        assert "not implemented" not in own.render("self_attention")
    assert ns["softmax"] is not solutions.softmax  # the namespace got its own answer back


def test_a_wrong_attention_under_a_right_softmax_is_still_charged():
    """The substitution never rescues a later answer whose own code is wrong."""
    wrong = SDPA_REFERENCE_STYLE.replace("/ math.sqrt(d_k)", "")
    ns = notebook(NAIVE_SOFTMAX, wrong)
    report = check_report("scaled_dot_product_attention", ns["scaled_dot_product_attention"], hidden=True)
    assert not report.passed and "√d_k" in report.render("scaled_dot_product_attention")
