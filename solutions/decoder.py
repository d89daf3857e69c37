"""The decoder layer (chapter 8): masked self-attention, cross-attention over the
encoder output, and the feed-forward network, each wrapped in Add & Norm.

"Attention Is All You Need", section 3.1 and figure 1 (right). It lives in its own
module, apart from the chapter 7 building blocks in ``layers.py``, so that grading
chapter 8 can withhold this answer while chapter 7's stay importable.

The layers build chapter 5's :class:`~solutions.multihead.MultiHeadAttention`, as the
book's notebooks do. A model built by ``TransformerConfig(attention="fused").build(...)``
(the one switch of the fast path, :mod:`solutions.configuration`; the trainer and the
benchmarks build that way) holds a :class:`~solutions.fused.FusedMultiHeadAttention` in
their place, with the same parameters, on its ``scaled_dot_product_attention`` path: the
self-attention ``Q, K, V`` come from one matrix product and the cross-attention ``K, V``
from one.
"""
from torch import nn

from .multihead import MultiHeadAttention
from .layers import PositionwiseFeedForward

__all__ = ["DecoderLayer"]


class DecoderLayer(nn.Module):
    """One decoder layer: masked self-attention, cross-attention over
    the encoder output (``memory``), then the feed-forward network, each
    with Add & Norm.

    Matches
    ``torch.nn.TransformerDecoderLayer(d_model, num_heads, d_ff,
    dropout, batch_first=True,
    norm_first=norm_first)`` (ReLU) when the weights are copied (its
    ``multihead_attn`` is our ``cross_attn``).

    Args:
        d_model: model width.
        num_heads: attention heads.
        d_ff: inner width of the feed-forward network.
        dropout: the paper's ``P_drop`` (sub-layer outputs, attention
            weights, FFN).
        norm_first: False = post-norm (the paper), True = pre-norm.

    Attributes:
        self_attn, cross_attn (:class:`MultiHeadAttention`),
        feed_forward (:class:`PositionwiseFeedForward`), norm1, norm2,
        norm3 (``nn.LayerNorm``), dropout1, dropout2, dropout3
        (``nn.Dropout``; how the dropout is held is not graded),
        norm_first.
        ``state_dict`` keys, exactly:
        ``self_attn.w_{q,k,v,o}.{weight,bias}``,
        ``cross_attn.w_{q,k,v,o}.{weight,bias}``,
        ``feed_forward.linear1.weight``, ``feed_forward.linear1.bias``,
        ``feed_forward.linear2.weight``, ``feed_forward.linear2.bias``,
        ``norm1.weight``, ``norm1.bias``, ``norm2.weight``,
        ``norm2.bias``, ``norm3.weight``, ``norm3.bias`` (26 tensors).

    Shape:
        x: ``(B, T_tgt, d_model)``
        memory: ``(B, T_src, d_model)``, the encoder output
        src_mask: bool, True = may attend, broadcastable to
        ``(B, h, T_tgt, T_src)`` (usually ``padding_mask(src)``)
        tgt_mask: bool, True = may attend, broadcastable to
        ``(B, h, T_tgt, T_tgt)`` (usually ``decoder_mask(tgt)``)
        output: ``(B, T_tgt, d_model)``

    Paper: section 3.1 (decoder), 3.2.3 and figure 1 (right).
    """

    def __init__(
        self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False
    ):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_attn = MultiHeadAttention(
            d_model, num_heads, dropout
        )
        self.feed_forward = PositionwiseFeedForward(
            d_model, d_ff, dropout
        )
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout1(self.self_attn(h, h, h, tgt_mask))
            x = x + self.dropout2(
                self.cross_attn(self.norm2(x), memory, memory, src_mask)
            )
            x = x + self.dropout3(self.feed_forward(self.norm3(x)))
        else:
            x = self.norm1(
                x + self.dropout1(self.self_attn(x, x, x, tgt_mask))
            )
            x = self.norm2(
                x
                + self.dropout2(
                    self.cross_attn(x, memory, memory, src_mask)
                )
            )
            x = self.norm3(x + self.dropout3(self.feed_forward(x)))
        return x  # (B, T_tgt, d_model)
