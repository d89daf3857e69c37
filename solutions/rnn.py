"""Recurrent networks and why the Transformer drops them (chapter 1).

A vanilla RNN computes ``h_t = tanh(x_t W_xh + h_{t-1} W_hh + b_h)`` one step
after another: T sequential steps, and gradients that pass through T Jacobians.
"Attention Is All You Need", section 1 and 4 ("Why Self-Attention").
"""
import numpy as np

__all__ = ["rnn_forward", "hidden_state_jacobian_norms", "additive_attention"]


def rnn_forward(x, h0, W_xh, W_hh, b_h):
    """Run a vanilla (Elman) RNN over a sequence.

    Args:
        x: the input sequence, one row per time step.
        h0: the initial hidden state ``h_{-1}``.
        W_xh: input-to-hidden weights.
        W_hh: hidden-to-hidden weights.
        b_h: hidden bias.

    Shape:
        x: ``(T, d_in)``
        h0: ``(d_h,)``
        W_xh: ``(d_in, d_h)``
        W_hh: ``(d_h, d_h)``
        b_h: ``(d_h,)``
        output: ``(T, d_h)``

    Returns:
        ``H`` with ``H[t] = tanh(x[t] @ W_xh + H[t-1] @ W_hh + b_h)``
        and ``H[-1]`` read as ``h0``.

    Paper: section 1 (recurrent models
    "preclude parallelization within training examples").
    """
    x = np.asarray(x, dtype=np.float64)
    h0 = np.asarray(h0, dtype=np.float64)
    W_xh, W_hh, b_h = (
        np.asarray(a, dtype=np.float64) for a in (W_xh, W_hh, b_h)
    )
    if x.ndim != 2:
        raise ValueError(f"x must have shape (T, d_in), got {x.shape}")
    d_h = h0.shape[0] if h0.ndim == 1 else -1
    if (
        h0.ndim != 1
        or W_xh.shape != (x.shape[1], d_h)
        or W_hh.shape != (d_h, d_h)
        or b_h.shape != (d_h,)
    ):
        raise ValueError(
            "expected h0 (d_h,), W_xh (d_in, d_h), W_hh (d_h, d_h), "
            f"b_h (d_h,) with d_in = {x.shape[1]}; "
            f"got h0 {h0.shape}, W_xh {W_xh.shape}, W_hh "
            f"{W_hh.shape}, b_h {b_h.shape}"
        )
    H = np.zeros((x.shape[0], d_h))
    h = h0
    # one step after another: nothing to parallelise
    for t in range(x.shape[0]):
        h = np.tanh(x[t] @ W_xh + h @ W_hh + b_h)  # (d_h,)
        H[t] = h
    return H


def hidden_state_jacobian_norms(H, W_hh):
    """How strongly the last hidden state depends on each earlier one.

    One step's Jacobian is ``J_k = ∂h_k/∂h_{k-1}`` with
    ``J_k[i, j] = (1 - H[k, i]**2) * W_hh[j, i]``, and
    ``∂h_{T-1}/∂h_t = J_{T-1} J_{T-2} ... J_{t+1}``: a product of
    ``T-1-t`` matrices whose norm typically shrinks (vanishing
    gradients) or grows (exploding gradients) exponentially in the
    distance.

    Args:
        H: hidden states from :func:`rnn_forward`.
        W_hh: the hidden-to-hidden weights used to compute them.

    Shape:
        H: ``(T, d_h)``
        W_hh: ``(d_h, d_h)``
        output: ``(T,)``

    Returns:
        ``norms`` with ``norms[t]`` = spectral norm (largest singular
        value) of ``∂h_{T-1}/∂h_t``; ``norms[T-1] == 1``.

    Paper: section 4 (path length between long-range dependencies).
    """
    H = np.asarray(H, dtype=np.float64)
    W_hh = np.asarray(W_hh, dtype=np.float64)
    if H.ndim != 2 or W_hh.shape != (H.shape[1], H.shape[1]):
        raise ValueError(
            f"expected H (T, d_h) and W_hh (d_h, d_h), got {H.shape} "
            f"and {W_hh.shape}"
        )
    T, d_h = H.shape
    norms = np.zeros(T)
    product = np.eye(d_h)  # ∂h_{T-1}/∂h_{T-1}
    norms[T - 1] = 1.0
    for t in range(T - 2, -1, -1):
        # J_{t+1}[i, j] = (1 - H[t+1, i]**2) * W_hh[j, i]
        J = (1 - H[t + 1] ** 2)[:, None] * W_hh.T
        product = product @ J  # ∂h_{T-1}/∂h_t
        norms[t] = np.linalg.norm(product, ord=2)
    return norms


def additive_attention(s, H, W_s, W_h, v):
    """Additive (Bahdanau) attention: the bridge from RNNs to Transformers.

    Ungraded helper for chapter 1. The decoder state ``s`` scores every encoder
    state ``H[j]`` with a one-hidden-layer network,
    ``e_j = v · tanh(s @ W_s + H[j] @ W_h)``, and reads the softmax-weighted sum
    of the encoder states as its context.

    Args:
        s: decoder state.
        H: encoder states.
        W_s, W_h: projections into the attention space.
        v: scoring vector.

    Shape:
        s: ``(d_s,)``; H: ``(T, d_h)``; W_s: ``(d_s, d_a)``; W_h: ``(d_h, d_a)``;
        v: ``(d_a,)``; context: ``(d_h,)``; weights: ``(T,)``.

    Returns:
        ``(context, weights)``.

    Paper: Bahdanau et al. (2015), cited in section 1; compare dot-product
    attention, section 3.2.1.
    """
    s, H = np.asarray(s, dtype=np.float64), np.asarray(H, dtype=np.float64)
    energies = np.tanh(s @ W_s + H @ W_h) @ v  # (T,)
    weights = np.exp(energies - energies.max())
    weights /= weights.sum()
    return weights @ H, weights
