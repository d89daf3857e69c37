"""Scaled dot-product attention in numpy (chapter 4).

The equation of "Attention Is All You Need", section 3.2.1,

    Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V,

written with row vectors (``x @ W``) so every line maps onto the paper's matrices.
"""
import math

import numpy as np

__all__ = ["softmax", "scaled_dot_product_attention", "self_attention"]


def softmax(x, axis=-1):
    """Numerically stable softmax along one axis.

    Subtracting the maximum before exponentiating changes nothing
    mathematically (the factor ``exp(-max)`` cancels) but keeps every
    exponent ≤ 0, so ``exp`` never overflows, even for scores of 1e4.

    Args:
        x: array-like of scores; integer input gives float64 (float32 is
            accepted too), float input keeps its dtype (a wider float
            dtype is accepted too).
        axis: the axis that sums to one (default: the last one).

    Shape:
        x: any shape; the output has the same shape.

    Returns:
        np.ndarray of probabilities, non-negative, summing to 1 along
        ``axis``.

    Paper: section 3.2.1 (the softmax over the keys).
    """
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    if x.ndim == 0:
        raise ValueError(
            "softmax expects an array with at least one axis, got a "
            "scalar"
        )
    # largest entry becomes 0
    shifted = x - np.max(x, axis=axis, keepdims=True)
    exp = np.exp(shifted)
    return exp / np.sum(exp, axis=axis, keepdims=True)


def scaled_dot_product_attention(q, k, v):
    """Scaled dot-product attention: ``softmax(q @ kᵀ / √d_k) @ v``.

    Any leading axes (batch, heads, ...) are treated as independent
    problems.

    Args:
        q: queries.
        k: keys (same ``d_k`` as the queries).
        v: values (one per key).

    Shape:
        q: ``(..., n_q, d_k)``
        k: ``(..., n_k, d_k)``
        v: ``(..., n_k, d_v)``
        output: ``(..., n_q, d_v)``
        weights: ``(..., n_q, n_k)``, each row sums to 1.

    Returns:
        ``(output, weights)``.

    Paper: section 3.2.1, equation (1).
    """
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2:
        raise ValueError(
            "q, k and v must have at least 2 dimensions (..., n, d), "
            f"got shapes {q.shape}, {k.shape}, {v.shape}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must share d_k (last axis), got {q.shape[-1]} "
            f"and {k.shape[-1]}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            "k and v must have the same number of positions n_k, got "
            f"{k.shape[-2]} and {v.shape[-2]}"
        )
    d_k = q.shape[-1]
    # scores: (..., n_q, n_k)
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(d_k)
    weights = softmax(scores, axis=-1)  # (..., n_q, n_k)
    output = weights @ v  # (..., n_q, d_v)
    return output, weights


def self_attention(x, W_q, W_k, W_v):
    """Single-head self-attention: project the same sequence three ways,
    then attend.

    Args:
        x: the input sequence, one row per token.
        W_q: query projection.
        W_k: key projection.
        W_v: value projection.

    Shape:
        x: ``(..., n, d_model)``
        W_q, W_k: ``(d_model, d_k)``
        W_v: ``(d_model, d_v)``
        output: ``(..., n, d_v)``
        weights: ``(..., n, n)``

    Returns:
        ``(output, weights)`` of :func:`scaled_dot_product_attention`.

    Paper: section 3.2.1 (Q, K and V all come from the same sequence in
    self-attention).
    """
    x = np.asarray(x)
    for name, W in (("W_q", W_q), ("W_k", W_k), ("W_v", W_v)):
        if np.ndim(W) != 2 or np.shape(W)[0] != x.shape[-1]:
            raise ValueError(
                f"{name} must have shape (d_model, d) with d_model = "
                f"{x.shape[-1]}, got {np.shape(W)}"
            )
    q = x @ W_q  # (..., n, d_k)
    k = x @ W_k  # (..., n, d_k)
    v = x @ W_v  # (..., n, d_v)
    return scaled_dot_product_attention(q, k, v)
