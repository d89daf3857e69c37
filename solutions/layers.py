"""Add & Norm, the position-wise feed-forward network and the encoder layer
(chapter 7). The decoder layer (chapter 8) builds on these in ``decoder.py``.

"Attention Is All You Need", section 3.1: each sub-layer is wrapped as
``LayerNorm(x + Sublayer(x))`` (post-norm, the paper). ``norm_first=True`` gives the
pre-norm variant ``x + Sublayer(LayerNorm(x))`` used by most modern models; the
flag has the meaning of PyTorch's ``nn.TransformerEncoderLayer(norm_first=...)``.
"""
import numpy as np
import torch.nn.functional as F
from torch import nn

from .multihead import MultiHeadAttention

__all__ = [
    "layer_norm",
    "PositionwiseFeedForward",
    "ResidualSublayer",
    "EncoderLayer",
]


def layer_norm(x, gamma, beta, eps=1e-5):
    """Layer normalisation over the last axis (Ba et al., 2016).

    Each row is normalised to mean 0 and variance 1 with the *biased*
    variance (divide by ``d``, as ``torch.nn.LayerNorm`` does), then
    scaled by ``gamma`` and shifted by ``beta``.

    Args:
        x: input array.
        gamma: scale, one per feature.
        beta: shift, one per feature.
        eps: added to the variance for numerical safety (PyTorch's
            default 1e-5).

    Shape:
        x: ``(..., d)``; gamma, beta: ``(d,)``; output: same as ``x``.

    Returns:
        ``(x - mean) / sqrt(var + eps) * gamma + beta``.

    Paper: section 3.1 ("LayerNorm(x + Sublayer(x))").
    """
    x = np.asarray(x)
    if (
        x.ndim < 1
        or np.shape(gamma) != x.shape[-1:]
        or np.shape(beta) != x.shape[-1:]
    ):
        raise ValueError(
            "gamma and beta must have shape (d,) matching x's last "
            "axis; "
            f"got x {x.shape}, gamma {np.shape(gamma)}, beta "
            f"{np.shape(beta)}"
        )
    mean = x.mean(axis=-1, keepdims=True)  # (..., 1)
    # var: (..., 1), biased: divides by d
    var = x.var(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


class PositionwiseFeedForward(nn.Module):
    """The position-wise feed-forward network
    ``FFN(x) = max(0, x W1 + b1) W2 + b2``.

    The same two-layer network is applied to every position separately.

    Args:
        d_model: input and output width (512 in the base model).
        d_ff: inner width (2048 in the base model).
        dropout: dropout after the ReLU (default 0.0), as in PyTorch's
            layers.

    Attributes:
        linear1: ``nn.Linear(d_model, d_ff)``.
        linear2: ``nn.Linear(d_ff, d_model)``.
        dropout: ``nn.Dropout`` (functional dropout is fine too: not
            graded).

    Shape:
        x: ``(B, T, d_model)``; output: ``(B, T, d_model)``.

    Paper: section 3.3, equation (2).
    """

    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        # (B, T, d_model)
        return self.linear2(self.dropout(F.relu(self.linear1(x))))


class ResidualSublayer(nn.Module):
    """Residual connection and layer normalisation around any sub-layer
    ("Add & Norm").

    Args:
        d_model: feature width of the LayerNorm.
        dropout: dropout on the sub-layer's output before the addition.
        norm_first: False (the paper) = post-norm
            ``norm(x + dropout(sublayer(x)))``; True = pre-norm
            ``x + dropout(sublayer(norm(x)))``.

    Attributes:
        norm: ``nn.LayerNorm(d_model)`` (eps 1e-5).
        dropout: ``nn.Dropout`` (functional dropout is fine too: not
            graded).
        norm_first: the flag above.

    Shape:
        x: ``(B, T, d_model)``; ``sublayer`` maps ``(B, T, d_model)`` to
        the same shape; output: ``(B, T, d_model)``.

    Paper: section 3.1 and 5.4
    ("We apply dropout to the output of each sub-layer, before it is
    added to the sub-layer input and normalized").
    """

    def __init__(self, d_model, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x, sublayer):
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


class EncoderLayer(nn.Module):
    """One encoder layer: self-attention, then the feed-forward network,
    each with Add & Norm.

    Matches
    ``torch.nn.TransformerEncoderLayer(d_model, num_heads, d_ff,
    dropout, batch_first=True,
    norm_first=norm_first)`` (ReLU) when the weights are copied.

    Args:
        d_model: model width.
        num_heads: attention heads.
        d_ff: inner width of the feed-forward network.
        dropout: dropout on each sub-layer's output, on the attention
            weights and inside the feed-forward network (the paper's
            ``P_drop``).
        norm_first: False = post-norm (the paper), True = pre-norm.

    Attributes:
        self_attn (:class:`MultiHeadAttention`), feed_forward
        (:class:`PositionwiseFeedForward`), norm1, norm2
        (``nn.LayerNorm``), dropout1, dropout2 (``nn.Dropout``; how the
        dropout is held is not graded), norm_first.
        ``state_dict`` keys, exactly:
        ``self_attn.w_q.weight``, ``self_attn.w_q.bias``,
        ``self_attn.w_k.weight``, ``self_attn.w_k.bias``,
        ``self_attn.w_v.weight``, ``self_attn.w_v.bias``,
        ``self_attn.w_o.weight``, ``self_attn.w_o.bias``,
        ``feed_forward.linear1.weight``, ``feed_forward.linear1.bias``,
        ``feed_forward.linear2.weight``, ``feed_forward.linear2.bias``,
        ``norm1.weight``, ``norm1.bias``,
        ``norm2.weight``, ``norm2.bias``.

    Shape:
        x: ``(B, T_src, d_model)``
        src_mask: bool, True = may attend, broadcastable to
        ``(B, h, T_src, T_src)``
        (usually ``padding_mask(src)``, ``(B, 1, 1, T_src)``)
        output: ``(B, T_src, d_model)``

    Paper: section 3.1 (encoder) and figure 1 (left).
    """

    def __init__(
        self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False
    ):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(
            d_model, d_ff, dropout
        )
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x, src_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout1(self.self_attn(h, h, h, src_mask))
            x = x + self.dropout2(self.feed_forward(self.norm2(x)))
        else:
            x = self.norm1(
                x + self.dropout1(self.self_attn(x, x, x, src_mask))
            )
            x = self.norm2(x + self.dropout2(self.feed_forward(x)))
        return x  # (B, T_src, d_model)
