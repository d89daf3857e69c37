"""Attention masks and the masked softmax (chapter 6).

Every mask in this package is a boolean tensor where **True = may attend**,
broadcastable to ``(batch, heads, q_len, k_len)``: the convention of
``torch.nn.functional.scaled_dot_product_attention``. (``torch.nn.MultiheadAttention``
and ``torch.nn.Transformer`` use the opposite one: True = masked out.)

Besides the chapter's exercises, two helpers serve every attention path that hands
the softmax to ``F.scaled_dot_product_attention`` (the fused module,
:mod:`solutions.fused`, and the application's fast decoder): :func:`check_attention_mask`
(a boolean mask that broadcasts to the heads' scores, refused with an error naming the
mistake otherwise) and :func:`zero_fully_masked_rows` (§6.7's trap: a query whose keys
are all masked gets zeros, as from :func:`masked_softmax`, whatever the kernel
returned). Chapter 5's ``MultiHeadAttention`` spells both out itself: its text is the
exercise, which may use contract objects only.
"""
import torch

__all__ = [
    "padding_mask",
    "causal_mask",
    "decoder_mask",
    "masked_softmax",
    "check_attention_mask",
    "zero_fully_masked_rows",
]


def padding_mask(ids, pad_id=0):
    """Mask that hides padding keys: True where the token is not
    ``<pad>``.

    Args:
        ids: token ids, ``LongTensor``.
        pad_id: the id of ``<pad>`` (default 0).

    Shape:
        ids: ``(B, T)``
        output: ``(B, 1, 1, T)`` bool, True = may attend; broadcasts
        over heads and query positions.

    Returns:
        The boolean mask.

    Paper: padding is implied by batching sentences of different lengths
    (section 5.1).
    """
    if not isinstance(ids, torch.Tensor):
        raise TypeError(
            "ids must be a torch.Tensor of token ids, got "
            f"{type(ids).__name__}"
        )
    if ids.dim() != 2:
        raise ValueError(
            f"ids must have shape (B, T), got {tuple(ids.shape)}"
        )
    if (
        ids.is_floating_point()
        or ids.is_complex()
        or ids.dtype == torch.bool
    ):
        raise TypeError(
            f"ids must be an integer tensor, got {ids.dtype}"
        )
    return (ids != pad_id)[:, None, None, :]  # (B, 1, 1, T)


def causal_mask(size):
    """Look-ahead mask: position ``i`` may attend to positions ``0..i``
    only.

    Args:
        size: the sequence length ``T``.

    Shape:
        output: ``(1, 1, T, T)`` bool, True on and below the diagonal
            (True = may attend).

    Returns:
        The boolean mask (on the CPU; move it with ``.to(device)``).

    Paper: section 3.2.3
    ("prevent leftward information flow in the decoder").
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"size must be a positive int, got {size!r}")
    mask = torch.ones(size, size, dtype=torch.bool).tril()  # (T, T)
    return mask[None, None, :, :]  # (1, 1, T, T)


def decoder_mask(tgt_ids, pad_id=0):
    """Mask for decoder self-attention: causal AND not padding.

    Args:
        tgt_ids: target token ids, ``LongTensor``.
        pad_id: the id of ``<pad>`` (default 0).

    Shape:
        tgt_ids: ``(B, T)``
        output: ``(B, 1, T, T)`` bool, True = may attend.

    Returns:
        ``padding_mask(tgt_ids, pad_id) & causal_mask(T)``.

    Paper: section 3.2.3.
    """
    pad = padding_mask(tgt_ids, pad_id)  # (B, 1, 1, T)
    # causal: (1, 1, T, T)
    causal = causal_mask(tgt_ids.size(1)).to(tgt_ids.device)
    return pad & causal  # (B, 1, T, T)


def masked_softmax(scores, mask):
    """Softmax over the last axis in which masked positions get exactly
    0.

    A row whose keys are all masked returns all zeros, never NaN, and
    its gradient is zero, never NaN. Works for every float dtype,
    float16 included.

    Args:
        scores: attention scores (any float dtype).
        mask: boolean, True = may attend, broadcastable to ``scores``;
            ``None`` means no mask (plain softmax).

    Shape:
        scores: ``(..., T_q, T_k)``
        mask: broadcastable to ``scores.shape``
        output: same shape as ``scores``; each row sums to 1, or to 0 if
        every key of the row is masked.

    Returns:
        The attention weights.

    Paper: section 3.2.3
    ("masking out (setting to −∞) all values in the input of the softmax
    which correspond to illegal connections").
    """
    if (
        not isinstance(scores, torch.Tensor)
        or not scores.is_floating_point()
    ):
        raise TypeError("scores must be a floating-point torch.Tensor")
    if mask is None:
        return torch.softmax(scores, dim=-1)
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = (
            mask.dtype
            if isinstance(mask, torch.Tensor)
            else type(mask).__name__
        )
        raise TypeError(
            "mask must be a boolean tensor (True = may attend), got "
            f"{got}"
        )
    # align trailing axes
    pairs = zip(reversed(mask.shape), reversed(scores.shape))
    if mask.dim() > scores.dim() or any(
        m not in (1, s) for m, s in pairs
    ):
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to "
            f"scores of shape {tuple(scores.shape)}"
        )
    # The most negative finite number of the dtype, not -inf: a row
    # whose keys are all masked would compute exp(-inf - (-inf)) = NaN
    # (output and gradient). With a finite minimum that row becomes
    # uniform, and the last masked_fill sets it, like every masked
    # position, to exactly 0. A fixed -1e9 overflows float16.
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    return weights.masked_fill(~mask, 0.0)


def check_attention_mask(mask, shape):
    """Refuse a mask that attention over heads cannot use as it is.

    Accepted: ``None``, or a boolean tensor (True = may attend) that
    broadcasts to the heads' scores ``shape``. A 3-D mask must be
    ``(1, T_q, T_k)``: a ``(B, T_q, T_k)`` one would meet the heads axis,
    not the batch (with ``B == h`` silently so), so it is refused even
    where it broadcasts.

    Args:
        mask: the mask given to the attention module, or ``None``.
        shape: the scores' shape ``(B, h, T_q, T_k)``.

    Raises:
        TypeError: ``mask`` is not a boolean tensor.
        ValueError: a 3-D mask with a first axis other than 1, or a
            mask that does not broadcast to ``shape``.
    """
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        raise TypeError("mask must be a boolean tensor, True = may attend")
    shape = tuple(shape)
    if mask.dim() == 3 and mask.size(0) != 1:
        raise ValueError(
            f"a 3-D mask {tuple(mask.shape)} is ambiguous: its first axis "
            f"would be matched with the h = {shape[1]} heads, not the "
            "batch; give (B, 1, T_q, T_k) (mask[:, None]) or (B, h, T_q, T_k)"
        )
    trailing = zip(reversed(mask.shape), reversed(shape))
    if mask.dim() > len(shape) or any(m not in (1, n) for m, n in trailing):
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to "
            f"(B, h, T_q, T_k) = {shape}"
        )


def zero_fully_masked_rows(output, mask):
    """Zeros for every query whose keys are all masked.

    ``masked_softmax`` gives such a query weight 0 on every key, so its
    output is 0. What a fused kernel (``F.scaled_dot_product_attention``)
    returns there depends on the kernel, the dtype and torch's version
    (zeros, NaN, or the mean of the values); after this, every path
    gives ``masked_softmax``'s zeros.

    Args:
        output: attention's weighted sum of the values.
        mask: bool, True = may attend, broadcastable to the scores
            ``(..., T_q, T_k)``, or ``None`` (nothing to zero).

    Shape:
        output: ``(..., T_q, d_v)``
        output (returned): the same.

    Returns:
        ``output`` with the rows of fully masked queries set to 0 (a new
        tensor; ``output`` itself when ``mask`` is ``None``).

    Paper: section 3.2.3 (masked positions take no part in the softmax).
    """
    if mask is None:
        return output
    attends = mask.any(dim=-1, keepdim=True)  # (..., T_q, 1)
    return output.masked_fill(~attends, 0.0)
