"""Stand-ins: later chapters' building blocks that a released chapter's setup cell imports.

A chapter may use a building block that a later chapter asks students to write
(chapter 5's setup cell imports chapter 6's ``masked_softmax``; chapter 3's imports
chapter 4's ``self_attention``), or shipped code may call one (chapter 9's translations,
through ``solutions.translation.translate``, decode with chapter 10's ``greedy_decode``).
The student package of that chapter must not hold
the reference answer, so it holds one of these instead: the same values, computed
another way (with torch's fused attention, complex exponentials, ...), only as much
of the contract as the chapter's cells need (no input checks, no gradient care).
``autograder release`` copies into the package only the stand-ins its chapters
import (:mod:`autograder.student.package`), each one into the module path the
notebook imports it from.

Nothing here is graded, and nothing here is the reference: the exercises' answers
are in ``solutions``; ``tests/autograder/test_student_release.py`` checks that these
agree with them.

No stand-in earns a part of the later chapter's hidden checks
(``tests/autograder/test_wheel_answers.py``). One whose chapter calls it only with fixed
arguments ships as **recorded outputs**, not code (:data:`RECORDED`): the package holds
what it returned for those arguments and refuses any other call. One called with
arguments the chapter cannot fix serves only the chapter's use: ``self_attention``
returns chapter 3's output without chapter 4's weights, ``masked_softmax`` takes the
``(B, h, T_q, T_k)`` scores of chapter 5's ``MultiHeadAttention`` only, and chapter 9's
``greedy_decode`` decodes the student's own trained model, but only as ``translate`` calls
it (the book's ids, the source length + 50 steps), none of the calls chapter 10's check makes.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["sinusoidal_positional_encoding", "self_attention", "padding_mask", "causal_mask", "masked_softmax",
           "greedy_decode"]

#: Stand-ins shipped as recorded outputs: name -> the positional arguments of every call
#: the chapters that use it make (chapter 2 draws one table, 64 positions × 512; chapter 5
#: masks the padded sentence of its cross-attention demo, and its causal demos are 5 and
#: 10 tokens long).
RECORDED = {
    "sinusoidal_positional_encoding": [(64, 512)],
    "padding_mask": [(torch.tensor([[5, 6, 7, 8, 9, 10, 11], [5, 6, 7, 8, 9, 0, 0]]),)],
    "causal_mask": [(5,), (10,)],
}


def sinusoidal_positional_encoding(max_len, d_model):
    """Stand-in for chapter 3's table: column pair ``(2i, 2i+1)`` of row ``pos`` is the
    point ``e^{j·pos·ω_i}`` on the unit circle, ``ω_i = 10000^{-2i/d_model}``, as (imag, real).

    Shape:
        output: ``(max_len, d_model)`` float64.
    """
    if d_model % 2:
        raise ValueError(f"the sinusoidal table pairs columns: d_model must be even, got {d_model}")
    omega = 10000.0 ** (-np.arange(d_model // 2) * 2.0 / d_model)  # (d_model/2,)
    circle = np.exp(1j * np.arange(max_len)[:, None] * omega[None, :])  # (max_len, d_model/2)
    return np.stack((circle.imag, circle.real), axis=-1).reshape(max_len, d_model)  # (max_len, d_model)


def self_attention(x, W_q, W_k, W_v):
    """Stand-in for chapter 4's numpy self-attention, for chapter 3's cells, which read
    its output only: torch's fused attention over the three projections. The weights are
    chapter 4's to compute, so this returns ``None`` in their place (and earns nothing on
    chapter 4's check, which grades the output and the weights together).

    Shape:
        x: ``(..., n, d_model)``; output ``(..., n, d_v)`` float64.

    Returns:
        ``(output, None)``.
    """
    inputs = torch.from_numpy(np.asarray(x, dtype=np.float64))
    queries, keys, values = (inputs @ torch.from_numpy(np.asarray(W, dtype=np.float64)) for W in (W_q, W_k, W_v))
    return F.scaled_dot_product_attention(queries, keys, values).numpy(), None


def padding_mask(ids, pad_id=0):
    """Stand-in for chapter 6's padding mask: ``(B, T)`` ids to ``(B, 1, 1, T)`` bool,
    True (may attend) where the token is not ``pad_id``. Shipped as recorded outputs
    (:data:`RECORDED`)."""
    batch, length = ids.shape
    return torch.ne(ids, pad_id).reshape(batch, 1, 1, length)


def causal_mask(size):
    """Stand-in for chapter 6's look-ahead mask: ``(1, 1, size, size)`` bool, True on
    and below the diagonal (True = may attend). Shipped as recorded outputs (:data:`RECORDED`)."""
    rows = torch.arange(size)
    return (rows[None, :] <= rows[:, None]).reshape(1, 1, size, size)


def masked_softmax(scores, mask):
    """Stand-in for chapter 6's masked softmax, for the one call chapter 5 makes: inside
    ``MultiHeadAttention``, on the heads' scores ``(B, h, T_q, T_k)`` (values only:
    masked keys get weight 0, a query whose keys are all masked gets zeros). Any other
    shape is refused: the general function, its input checks and its gradients are
    chapter 6's exercise.

    Shape:
        scores: ``(B, h, T_q, T_k)``; mask: bool broadcastable to it, True = may attend,
        or None; output: like ``scores``.
    """
    if scores.dim() != 4:
        raise ValueError(f"this is chapter 5's stand-in for masked_softmax: it takes MultiHeadAttention's "
                         f"scores (B, h, T_q, T_k), not {tuple(scores.shape)} (chapter 6 writes the general one)")
    if mask is None:
        return F.softmax(scores, dim=-1)
    blocked = torch.full_like(scores, float("-inf"))
    weights = F.softmax(torch.where(mask, scores, blocked), dim=-1)
    return torch.nan_to_num(weights, nan=0.0)


def translation_steps(model, src) -> int:
    """The ``max_len`` that :func:`solutions.translation.translate` passes to greedy
    decoding: the source length + 50 (the paper's rule), capped by the model's positional
    table (``model.positional.pe``)."""
    return min(src.shape[1] + 50, model.positional.pe.size(0) - 1)


def greedy_decode(model, src, src_mask, max_len, sos_id=1, eos_id=2, pad_id=0, use_cache=False):
    """Stand-in for chapter 10's greedy decoding, for chapter 9's translations only: the
    calls ``translate`` makes (the book's ids ``<sos>=1``, ``<eos>=2``, ``<pad>=0`` and
    ``max_len`` = the source length + 50 within the positional table,
    :func:`translation_steps`). The whole model (``model(src, prefix, src_mask,
    look_ahead)``) runs on the prefix at every step, the source re-encoded each time
    (``use_cache`` is accepted and ignored: the tokens are the same either way).

    Any other call is refused: decoding with other ids or another length is chapter 10's
    exercise, whose check decides exactly those rules (its cases decode at most 10 tokens
    with tables of 64 positions), so this earns none of its parts.

    Shape:
        src: ``(B, T_src)``; output ``(B, T)`` long, ``T <= max_len + 1``: ``<sos>``, then
        the arg-max tokens, ``pad_id`` after a sentence's ``<eos>``.

    Raises:
        ValueError: a call ``translate`` does not make.
    """
    del use_cache
    if (sos_id, eos_id, pad_id) != (1, 2, 0) or max_len != translation_steps(model, src):
        raise ValueError("this is chapter 9's stand-in for greedy_decode: it decodes translate()'s calls only "
                         "(the book's special ids, max_len = the source length + 50); chapter 10 writes greedy_decode")
    prefix = torch.full((src.shape[0], 1), sos_id, dtype=torch.long, device=src.device)
    ended = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    with torch.no_grad():
        while prefix.shape[1] <= max_len and not bool(ended.all()):
            look_ahead = causal_mask(prefix.shape[1]).to(src.device)
            best = model(src, prefix, src_mask, look_ahead)[:, -1].argmax(dim=-1)  # (B,)
            best = torch.where(ended, torch.full_like(best, pad_id), best)
            prefix = torch.cat((prefix, best.unsqueeze(1)), dim=1)
            ended = ended | best.eq(eos_id)
    return prefix
