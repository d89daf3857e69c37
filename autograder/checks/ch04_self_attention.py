"""Checks of chapter 4, self-attention (numpy): ``softmax``,
``scaled_dot_product_attention`` and ``self_attention``.

The contract is ``shared/EXERCISES.md`` section 4; the references are in
``solutions/attention.py`` ("Attention Is All You Need", section 3.2.1). The
parts and their points are fixed by the chapter's prompts ("Graded parts").

Every ``diagnose`` works by recomputing the plausible wrong answers from the
case's own inputs (softmax over the wrong axis, no scaling, scaling by ``d_k``
or by ``√d_v``, ``k @ qᵀ``, ``x @ Wᵀ``, ...) and naming the one the student's
result matches, so a hint is a measurement, not a guess.

The contract names no error for these three exercises, so what an answer does
on bad input (a 0-d softmax input, shapes that do not fit) is advice worth no
points (:data:`~autograder.checks.base.ADVICE`). Dtypes follow the one rule of
:func:`~autograder.checks.base.dtype_verdict`: a wider float result is correct.
"""
from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from .base import ADVICE, Case, Exercise, dtype_verdict, redacting, register
from .base import as_array as _array, close

CHAPTER = "04_self_attention"

_close = functools.partial(close, rtol=1e-4, atol=1e-6, equal_nan=True)

# exp overflows float64 above ~709.78; below ~ -745 it underflows to exactly 0.
_EXP_LIMIT = 700.0


# --------------------------------------------------------------------------- helpers


def _softmax(x, axis=-1):
    """A trusted stable softmax used to build the wrong-answer candidates."""
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _pair(value):
    """``(output, weights)`` arrays from a decoded result, or ``(None, None)``."""
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return _array(value[0]), _array(value[1])
    return None, None


def _dtype_hint(got_value, want_value) -> str | None:
    """Name a dtype the one rule rejects: a narrower float (precision lost) or no
    float at all. A wider float (float32 in, float64 out) is correct and is never
    the difference named here."""
    got_arrays = [_array(v) for v in (got_value if isinstance(got_value, (tuple, list)) else [got_value])]
    want_arrays = [_array(v) for v in (want_value if isinstance(want_value, (tuple, list)) else [want_value])]
    for g, w in zip(got_arrays, want_arrays):
        if g is None or w is None:
            continue
        ok, _ = dtype_verdict(str(g.dtype), str(w.dtype))
        if ok:
            continue
        if np.issubdtype(g.dtype, np.integer) or g.dtype == bool:
            return (f"the result has dtype {g.dtype}: probabilities are floats. Integer scores must be "
                    "converted first, e.g. x.astype(np.float64).")
        return (f"the result has dtype {g.dtype}, less precise than the {w.dtype} of the input: "
                "something cast it down (.astype(np.float16), np.float32(...)); keep the input's float dtype.")
    return None


def _modified_in_place(case, got) -> bool:
    """True when an argument came back from the call with other values than it went in."""
    for index, after in got.args_after.items():
        before = case.args[int(index)]
        after = _array(after)
        if after is None or not _close(after, before, rtol=0, atol=0):
            return True
    return False


# --------------------------------------------------------------------------- softmax


@register
class Softmax(Exercise):
    """``softmax(x, axis=-1)``: stable, any shape, any axis."""

    name = "softmax"
    chapter = CHAPTER
    kind = "function"
    what = "values on random inputs, any axis, no overflow at 1e4 (each row shifted by its own maximum)"
    parts = {"values on random inputs": 1, "any axis": 1, "no overflow at 1e4": 1}

    VALUES, AXIS, STABLE = parts

    def cases(self, rng, hidden):
        cases = [
            Case(args=(np.array([[1.0, 2.0, 3.0], [0.0, 0.0, np.log(2.0)]]),), part=self.VALUES,
                 label="2x3 scores, softmax over the last axis (the scores must not change)", return_args=(0,)),
            Case(args=(np.array([[1.0, 5.0], [2.0, 0.0], [3.0, 1.0]]),), kwargs={"axis": 0}, part=self.AXIS,
                 label="3x2 scores with axis=0 (columns sum to 1)"),
            Case(args=(np.arange(24.0).reshape(2, 3, 4) % 5,), kwargs={"axis": 1}, part=self.AXIS,
                 label="2x3x4 scores with axis=1 (a middle axis)"),
            Case(args=(np.array([[1e4, 1e4 - 1.0, 0.0]]),), part=self.STABLE,
                 label="scores of 1e4 (a naive exp overflows)"),
            Case(args=(np.array([[1e4, 1e4 - 1.0, 0.0], [1.0, 2.0, 3.0]]),), part=self.STABLE,
                 label="one row near 1e4, one near 0 (each row needs its own maximum)"),
            Case(args=(np.float64(3.0),), part=ADVICE, expect_error=(ValueError,),
                 label="a 0-d scalar (no axis to normalise over)"),
        ]
        if not hidden:
            return cases
        cases.append(Case(args=(rng.normal(size=(6,)) * 3,), part=self.VALUES, label="a 1-D vector of scores"))
        for _ in range(2):
            ndim = int(rng.integers(2, 5))
            shape = tuple(int(s) for s in rng.integers(1, 6, size=ndim))
            x = rng.normal(size=shape) * rng.choice([0.1, 1.0, 10.0])
            cases.append(Case(args=(x,), part=self.VALUES, label=f"random {shape} scores, the default axis",
                              return_args=(0,)))
        for _ in range(3):
            ndim = int(rng.integers(2, 5))
            shape = tuple(int(s) for s in rng.integers(2, 6, size=ndim))
            axis = int(rng.choice([a for a in range(-ndim, ndim) if a % ndim != ndim - 1]))  # not the last
            x = rng.normal(size=shape) * rng.choice([0.1, 1.0, 10.0])
            cases.append(Case(args=(x,), kwargs={"axis": axis}, part=self.AXIS,
                              label=f"random {shape} scores, axis={axis}", return_args=(0,)))
        cases.append(Case(args=(rng.normal(size=(3, 4)).astype(np.float32),), part=self.VALUES,
                          label="float32 scores", rtol=1e-4, atol=1e-6))
        cases.append(Case(args=(rng.integers(-5, 6, size=(2, 3)),), part=self.VALUES,
                          label="integer scores (a float result)"))
        # Rows whose maximum is ~2000 below the global maximum: subtracting the
        # global max makes every exp in them underflow to 0, and 0/0 is NaN.
        far = rng.normal(size=(3, 4))
        far[1] -= 2000.0 + rng.uniform(0, 10)
        cases.append(Case(args=(far,), part=self.STABLE, label="3x4 scores, one row ~2000 below the others"))
        big = rng.uniform(-1.0, 1.0, size=(4, 5)) * 1e4
        cases.append(Case(args=(big,), part=self.STABLE, label="4x5 scores of magnitude up to 1e4"))
        return cases

    def raised_hint(self, case, got):
        raised = got.raised
        if raised is None or case.expect_error:
            return None
        if raised["type"] in ("AxisError", "IndexError") or "axis" in raised["message"]:
            return "use the `axis` argument in every reduction: np.max(x, axis=axis, keepdims=True)."
        return None

    def diagnose(self, case, got, want):
        if _modified_in_place(case, got):
            return "you changed the caller's array (x -= ..., np.exp(x, out=x)): compute on new arrays instead."
        dtype = _dtype_hint(got.value, want.value)
        if dtype:
            return dtype
        g = _array(got.value)
        if g is None:
            return "return a single numpy array with the input's shape."
        x = np.asarray(case.args[0], dtype=np.float64)
        axis = case.kwargs.get("axis", -1)
        if g.shape != x.shape:
            return f"the result must have the input's shape {x.shape}: use keepdims=True in the max and the sum."
        if not np.all(np.isfinite(g)):
            row_max = np.max(x, axis=axis, keepdims=True)
            bad = ~np.all(np.isfinite(g), axis=axis, keepdims=True)  # the rows that broke
            if np.any(bad & (row_max > _EXP_LIMIT)):
                return (
                    "exp overflowed: np.exp(1e4) is inf and inf/inf is NaN. Subtract the maximum along "
                    "the axis first (x - np.max(x, axis=axis, keepdims=True)); it cancels in the ratio."
                )
            if np.any(bad & (row_max - np.max(x) < -_EXP_LIMIT)):
                return (
                    "some rows became 0/0 = NaN: every exp in a row far below the global maximum underflows "
                    "to 0 when you subtract the global maximum np.max(x) (or nothing). Subtract each row's "
                    "own maximum: np.max(x, axis=axis, keepdims=True)."
                )
            return "the result has NaN or inf: subtract the maximum along the axis before np.exp."
        if x.ndim >= 2:
            for other in range(x.ndim):
                if other % x.ndim != axis % x.ndim and _close(g, _softmax(x, axis=other)):
                    return (
                        f"you normalised over axis {other}, not axis={axis}: pass `axis` to both "
                        "np.max and np.sum (with keepdims=True)."
                    )
            e = np.exp(x - x.max(axis=axis, keepdims=True))
            if _close(g, e / e.sum()):
                return "you divided by the sum of the whole array: sum along the axis (axis=axis, keepdims=True)."
        sums = np.sum(g, axis=axis)
        if not np.allclose(sums, 1.0, atol=1e-5):
            total = "do not sum" if redacting() else f"sum to {float(np.ravel(sums)[0]):.4g}, not"
            return (
                f"the values along axis {axis} {total} 1: divide "
                "the exponentials by their sum along that axis."
            )
        return None


# --------------------------------------------------------------------------- attention


def _attention_variants(q, k, v):
    """Plausible wrong (output, weights) pairs, by name, computed from the case's inputs."""
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    d_k, d_v = q.shape[-1], v.shape[-1]
    raw = q @ np.swapaxes(k, -1, -2)  # (..., n_q, n_k)
    variants = {}

    def add(name, weights):
        try:
            variants[name] = (weights @ v, weights)
        except ValueError:  # shapes that do not fit for this variant
            variants[name] = (None, weights)

    add("no scaling: use softmax(q @ kᵀ / √d_k), you left out the division by √d_k",
        _softmax(raw))
    add("you divided the scores by d_k; the paper divides by √d_k (math.sqrt(d_k))",
        _softmax(raw / d_k))
    if d_v != d_k:
        add("you scaled by √d_v (the values' width); the scale is √d_k, the width of q and k",
            _softmax(raw / math.sqrt(d_v)))
    add("softmax over the wrong axis: normalise over the keys (the last axis, axis=-1), "
        "so each query's row sums to 1", _softmax(raw / math.sqrt(d_k), axis=-2))
    add("you multiplied by √d_k instead of dividing", _softmax(raw * math.sqrt(d_k)))
    if q.shape[-2] == k.shape[-2]:
        add("you computed k @ qᵀ (the transposed score matrix); the scores are q @ kᵀ, "
            "queries on the rows", _softmax(np.swapaxes(raw, -1, -2) / math.sqrt(d_k)))
    return variants


def _attend(q, k, v):
    """Attention by the formula, float64: ``(softmax(q kᵀ / √d_k) v, weights)``, or
    ``(None, None)`` when the shapes do not fit."""
    try:
        weights = _softmax(q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1]))
        return weights @ v, weights
    except ValueError:
        return None, None


def _formula_tolerated(want, variants) -> list:
    """``want`` with its ``(output, weights)`` replaced by each of ``variants`` (``(output,
    weights)`` pairs, float64) in the reference's dtype: the results a part whose rule is
    not the attention formula accepts, so that a wrong formula (no 1/√d_k, the softmax over
    the queries, ...) costs only the part that states it."""
    w_out, w_weights = _pair(want.value)
    if w_out is None or w_weights is None:
        return []
    return [dataclasses.replace(want, value=type(want.value)((out.astype(w_out.dtype),
                                                             weights.astype(w_weights.dtype))))
            for out, weights in variants
            if out is not None and weights is not None and out.shape == w_out.shape
            and weights.shape == w_weights.shape]


def _diagnose_attention(q, k, v, got_value, want_value, extra=()):
    """Shared diagnosis of an ``(output, weights)`` result against the variants."""
    if not isinstance(got_value, (tuple, list)) and _array(got_value) is not None:
        if _array(got_value).shape == _array(want_value[0]).shape:
            return (
                "you returned only the output: return both results as a tuple, "
                "`return output, weights` (the weights are what the book draws)."
            )
    dtype = _dtype_hint(got_value, want_value)
    if dtype:
        return dtype
    if not isinstance(got_value, (tuple, list)):
        return (
            "return both results as a tuple: `return output, weights` "
            "(the weights are what the book draws)."
        )
    if len(got_value) != 2:
        return "return exactly two things: `return output, weights`."
    out, weights = _pair(got_value)
    want_out, want_weights = _pair(want_value)
    if out is None or weights is None:
        return "return two numpy arrays: `return output, weights`."
    if out.shape == want_weights.shape and weights.shape == want_out.shape and out.shape != weights.shape:
        return "output and weights are swapped: return (output, weights) in that order."
    if _close(out, want_weights) and _close(weights, want_out):
        return "output and weights are swapped: return (output, weights) in that order."
    if not np.all(np.isfinite(out)) or not np.all(np.isfinite(weights)):
        return (
            "NaN or inf in the result: the scores are large here, so the softmax must subtract "
            "each row's maximum before np.exp."
        )
    for name, (v_out, v_weights) in list(extra) + list(_attention_variants(q, k, v).items()):
        if _close(weights, v_weights) or (v_out is not None and _close(out, v_out)):
            return name
    if _close(weights, want_weights) and not _close(out, want_out):
        return "the weights are right but the output is not: output = weights @ v."
    sums = np.sum(weights, axis=-1)
    if not np.allclose(sums, 1.0, atol=1e-4):
        if redacting():
            return "each row of the weights should sum to 1 over the keys; one does not."
        return f"each row of the weights should sum to 1 over the keys; one sums to {float(np.ravel(sums)[0]):.4g}."
    return None


def _batch_hint(shapes) -> str | None:
    if any(len(s) > 2 for s in shapes):
        return (
            "this case has leading batch axes (shapes " + ", ".join(str(tuple(s)) for s in shapes)
            + "): transpose only the last two axes of k with np.swapaxes(k, -1, -2); "
            "k.T reverses every axis."
        )
    return None


@register
class ScaledDotProductAttention(Exercise):
    """``scaled_dot_product_attention(q, k, v) -> (output, weights)`` in numpy."""

    name = "scaled_dot_product_attention"
    chapter = CHAPTER
    kind = "function"
    what = "(output, weights) for one sequence (n_q ≠ n_k, d_k ≠ d_v), batch axes, large scores"
    parts = {"one sequence: output and weights": 2, "batch axes": 1, "large scores": 1}
    uses = ("softmax",)

    ONE, BATCH, LARGE = parts

    def cases(self, rng, hidden):
        def qkv(batch, n_q, n_k, d_k, d_v, scale=1.0, dtype=np.float64):
            q = (rng.normal(size=batch + (n_q, d_k)) * scale).astype(dtype)
            k = (rng.normal(size=batch + (n_k, d_k)) * scale).astype(dtype)
            v = rng.normal(size=batch + (n_k, d_v)).astype(dtype)
            return q, k, v

        cases = [
            Case(args=qkv((), 3, 3, 4, 2, scale=1.5), part=self.ONE, label="3 queries, 3 keys, d_k=4, d_v=2",
                 return_args=(0, 1, 2)),
            Case(args=qkv((), 2, 5, 9, 3), part=self.ONE, label="2 queries attending over 5 keys (n_q ≠ n_k), d_k=9"),
            Case(args=qkv((2,), 4, 4, 8, 3), part=self.BATCH, label="a batch of 2 sequences: shapes (2, 4, 8)"),
            Case(args=qkv((), 4, 6, 64, 5, scale=40.0), part=self.LARGE,
                 label="large scores (q·k/√d_k in the thousands): the softmax must be stable"),
        ]
        if not hidden:
            return cases
        for _ in range(2):
            n_q, n_k = (int(s) for s in rng.integers(1, 7, size=2))
            d_k, d_v = (int(s) for s in rng.integers(1, 17, size=2))
            cases.append(Case(args=qkv((), n_q, n_k, d_k, d_v), part=self.ONE,
                              label=f"random shapes: n_q={n_q}, n_k={n_k}, d_k={d_k}, d_v={d_v}"))
        cases.append(Case(args=qkv((), 4, 4, 8, 8, dtype=np.float32), part=self.ONE,
                          label="float32 inputs", rtol=1e-4, atol=1e-5))
        for _ in range(2):
            batch = tuple(int(s) for s in rng.integers(1, 4, size=int(rng.integers(1, 3))))
            n_q, n_k = (int(s) for s in rng.integers(1, 7, size=2))
            d_k, d_v = (int(s) for s in rng.integers(1, 17, size=2))
            cases.append(Case(args=qkv(batch, n_q, n_k, d_k, d_v), part=self.BATCH,
                              label=f"random shapes: batch {batch}, n_q={n_q}, n_k={n_k}, d_k={d_k}, d_v={d_v}"))
        cases.append(Case(args=qkv((2, 3), 5, 5, 16, 4), part=self.BATCH,
                          label="batch and heads axes: shapes (2, 3, 5, 16)"))
        cases.append(Case(args=qkv((), 5, 3, 32, 4, scale=rng.uniform(30.0, 50.0)), part=self.LARGE,
                          label="large scores (q·k/√d_k in the thousands), n_q=5, n_k=3"))
        q, k, v = qkv((), 3, 4, 5, 2)
        cases.append(Case(args=(q, k[:, :4], v), part=ADVICE, label="q has d_k=5 but k has 4 columns",
                          expect_error=(ValueError,)))
        cases.append(Case(args=(q, k, v[:3]), part=ADVICE, label="4 keys but 3 values", expect_error=(ValueError,)))
        return cases

    def tolerated(self, case, want):
        """The cases of "batch axes" and "large scores" accept the attention formula
        broken (no 1/√d_k, d_k for √d_k, the softmax over the queries, k @ qᵀ ...):
        "one sequence: output and weights" states the formula, these parts the batch
        axes and the stable softmax."""
        if self.part_of(case) not in (self.BATCH, self.LARGE) or case.expect_error:
            return []
        return _formula_tolerated(want, _attention_variants(*case.args).values())

    def raised_hint(self, case, got):
        raised = got.raised
        if raised is None or case.expect_error:
            return None
        return _batch_hint([np.shape(a) for a in case.args])

    def diagnose(self, case, got, want):
        if _modified_in_place(case, got):
            return "you changed an input array in place: compute on new arrays instead."
        q, k, v = case.args
        return _diagnose_attention(q, k, v, got.value, want.value)


@register
class SelfAttention(Exercise):
    """``self_attention(x, W_q, W_k, W_v) -> (output, weights)`` in numpy."""

    name = "self_attention"
    chapter = CHAPTER
    kind = "function"
    what = "projections x @ W then attention, (output, weights), d_k ≠ d_v, batch axes"
    parts = {"projections and attention": 2, "batch axes": 1}
    uses = ("scaled_dot_product_attention", "softmax")

    ONE, BATCH = parts

    def cases(self, rng, hidden):
        def make(batch, n, d_model, d_k, d_v, dtype=np.float64):
            x = rng.normal(size=batch + (n, d_model)).astype(dtype)
            W_q = (rng.normal(size=(d_model, d_k)) / math.sqrt(d_model)).astype(dtype)
            W_k = (rng.normal(size=(d_model, d_k)) / math.sqrt(d_model)).astype(dtype)
            W_v = (rng.normal(size=(d_model, d_v)) / math.sqrt(d_model)).astype(dtype)
            return x, W_q, W_k, W_v

        cases = [
            Case(args=make((), 3, 4, 4, 4), part=self.ONE,
                 label="3 tokens, d_model=d_k=d_v=4 (square projections)", return_args=(0,)),
            Case(args=make((), 5, 6, 3, 2), part=self.ONE, label="5 tokens, d_model=6, d_k=3, d_v=2"),
            Case(args=make((2,), 4, 6, 6, 3), part=self.BATCH, label="a batch of 2 sequences: x of shape (2, 4, 6)"),
        ]
        if not hidden:
            return cases
        cases.append(Case(args=make((), 4, 8, 8, 8), part=self.ONE, label="4 tokens, all projections 8x8"))
        for _ in range(2):
            n = int(rng.integers(1, 7))
            d_model, d_k, d_v = (int(s) for s in rng.integers(1, 13, size=3))
            cases.append(Case(args=make((), n, d_model, d_k, d_v), part=self.ONE,
                              label=f"random shapes: n={n}, d_model={d_model}, d_k={d_k}, d_v={d_v}"))
        cases.append(Case(args=make((), 5, 8, 4, 4, dtype=np.float32), part=self.ONE,
                          label="float32 inputs", rtol=1e-4, atol=1e-5))
        for _ in range(2):
            batch = tuple(int(s) for s in rng.integers(1, 4, size=int(rng.integers(1, 3))))
            n = int(rng.integers(1, 7))
            d_model, d_k, d_v = (int(s) for s in rng.integers(1, 13, size=3))
            cases.append(Case(args=make(batch, n, d_model, d_k, d_v), part=self.BATCH,
                              label=f"random shapes: batch {batch}, n={n}, d_model={d_model}, d_k={d_k}, d_v={d_v}"))
        x, W_q, W_k, W_v = make((), 3, 4, 2, 2)
        cases.append(Case(args=(x, W_q[:3], W_k, W_v), part=ADVICE, label="W_q has 3 rows but d_model=4",
                          expect_error=(ValueError,)))
        return cases

    def tolerated(self, case, want):
        """The cases of "batch axes" accept the projections or the attention formula
        broken (no 1/√d_k, the softmax over the queries, q and k mixed up ...):
        "projections and attention" states them, "batch axes" the leading axes."""
        if self.part_of(case) != self.BATCH or case.expect_error:
            return []
        x, W_q, W_k, W_v = (np.asarray(a, dtype=np.float64) for a in case.args)
        q, k, v = x @ W_q, x @ W_k, x @ W_v
        variants = list(_attention_variants(q, k, v).values()) + [_attend(k, q, v), _attend(x, x, x)]
        if all(W.shape[0] == W.shape[1] for W in (W_q, W_k, W_v)):
            variants.append(_attend(x @ W_q.T, x @ W_k.T, x @ W_v.T))
        return _formula_tolerated(want, variants)

    def raised_hint(self, case, got):
        raised = got.raised
        if raised is None or case.expect_error:
            return None
        x, W_q, W_k, W_v = (np.asarray(a) for a in case.args)
        if x.ndim > 2:  # code that works on one sequence breaks on the batch axes first
            return _batch_hint([x.shape])
        if any(W.shape[0] != W.shape[1] for W in (W_q, W_k, W_v)) and "matmul" in raised["message"]:
            return (
                "the projections are (d_model, d) matrices applied to row vectors: q = x @ W_q, "
                "not x @ W_q.T or W_q @ x."
            )
        return _batch_hint([x.shape])

    def diagnose(self, case, got, want):
        if _modified_in_place(case, got):
            return "you changed an input array in place: compute on new arrays instead."
        x, W_q, W_k, W_v = (np.asarray(a, dtype=np.float64) for a in case.args)
        q, k, v = x @ W_q, x @ W_k, x @ W_v
        extra = []

        def attend(q_, k_, v_):
            d = q_.shape[-1]
            w = _softmax(q_ @ np.swapaxes(k_, -1, -2) / math.sqrt(d))
            return w @ v_, w

        if all(W.shape[0] == W.shape[1] for W in (W_q, W_k, W_v)):
            extra.append(("you projected with the transposed weights (x @ W.T): the book's "
                          "convention is row vectors, q = x @ W_q", attend(x @ W_q.T, x @ W_k.T, x @ W_v.T)))
            extra.append(("you attended over x itself: project first, q = x @ W_q, k = x @ W_k, "
                          "v = x @ W_v", attend(x, x, x)))
        if W_q.shape == W_k.shape:
            extra.append(("queries and keys are mixed up: q = x @ W_q and k = x @ W_k",
                          attend(k, q, v)))
        return _diagnose_attention(q, k, v, got.value, want.value, extra=extra)
