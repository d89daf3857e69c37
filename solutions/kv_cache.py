"""Key/value caching for autoregressive decoding (chapter 10).

Without a cache, step ``t`` of greedy decoding runs the whole decoder on the
``t`` tokens produced so far, recomputing the keys and values of every earlier
position in every layer: ``O(t)`` work per layer per step, ``O(n²)`` in all. In
the decoder every position depends only on itself and the positions before it
(the causal mask), so those keys and values never change once computed. The
cache keeps, for every decoder layer,

- the projected self-attention keys and values of the prefix, ``(B, h, t, d_k)``,
  grown by one position per step, and
- the projected cross-attention keys and values of ``memory``, ``(B, h, T_src, d_k)``,
  computed once,

so a step only pushes the one new token through the stack.

The cache lives outside the model classes: :class:`IncrementalDecoder` runs each
decoder layer's own ``forward`` on the one new position, through a view of the layer
whose ``self_attn`` and ``cross_attn`` read their keys and values from the cache
(the layers' ``w_q, w_k, w_v, w_o`` and ``num_heads``). The norms, the residual
paths and the pre-/post-norm choice are the layer's, written once, in
:class:`~solutions.decoder.DecoderLayer`. It is for inference (``model.eval()``):
dropout is not applied.

Paper: section 3.2.3 (the decoder is auto-regressive) and 3.2.2 (the projections).
"""
import math

import torch

from .masking import masked_softmax
from .multihead import merge_heads, split_heads

__all__ = ["IncrementalDecoder"]


class IncrementalDecoder:
    """Run a Transformer's decoder one token at a time with a key/value cache.

    Args:
        model: a :class:`~solutions.model.Transformer` (or any model with the
            same attributes: ``tgt_embed``, ``positional.pe``, ``decoder_layers``,
            ``norm_first``, ``decoder_norm`` when pre-norm, ``project``).
        memory: the encoder output ``model.encode(src, src_mask)``.
        src_mask: bool, True = may attend, broadcastable to ``(B, 1, 1, T_src)``,
            or ``None``.

    ``step(tokens)`` feeds the next token of every sequence and returns the
    logits for the token after it. After ``n`` calls the logits equal those of
    ``model.project(model.decode(ys, memory, src_mask, causal_mask(n)))[:, -1]``
    for the ``n`` tokens fed so far (up to float rounding).

    Shape:
        memory: ``(B, T_src, d_model)``
        tokens: ``(B,)`` or ``(B, 1)`` LongTensor
        step output: logits ``(B, tgt_vocab_size)``

    Paper: section 3.2.3.
    """

    def __init__(self, model, memory, src_mask=None):
        if memory.dim() != 3:
            raise ValueError(f"memory must have shape (B, T_src, d_model), got {tuple(memory.shape)}")
        self.model = model
        self.src_mask = src_mask
        self.position = 0
        self.self_keys = [None] * len(model.decoder_layers)
        self.self_values = [None] * len(model.decoder_layers)
        self.cross_keys, self.cross_values = [], []
        for layer in model.decoder_layers:
            attn = layer.cross_attn
            self.cross_keys.append(split_heads(attn.w_k(memory), attn.num_heads))  # (B, h, T_src, d_k)
            self.cross_values.append(split_heads(attn.w_v(memory), attn.num_heads))  # (B, h, T_src, d_k)

    @staticmethod
    def _attend(attn, x, keys, values, mask):
        """Attention of the new position ``x (B, 1, d_model)`` over cached keys/values."""
        q = split_heads(attn.w_q(x), attn.num_heads)  # (B, h, 1, d_k)
        scores = q @ keys.transpose(-2, -1) / math.sqrt(attn.d_k)  # (B, h, 1, T_k)
        weights = masked_softmax(scores, mask)  # (B, h, 1, T_k); a fully masked row attends to nothing
        return attn.w_o(merge_heads(weights @ values))  # (B, 1, d_model)

    def _self_attend(self, index, attn, x):
        """Self-attention of the new position: append its key and value, attend over the prefix."""
        k = split_heads(attn.w_k(x), attn.num_heads)  # (B, h, 1, d_k)
        v = split_heads(attn.w_v(x), attn.num_heads)  # (B, h, 1, d_k)
        if self.self_keys[index] is not None:
            k = torch.cat([self.self_keys[index], k], dim=2)  # (B, h, t + 1, d_k)
            v = torch.cat([self.self_values[index], v], dim=2)  # (B, h, t + 1, d_k)
        self.self_keys[index], self.self_values[index] = k, v
        # Every cached position is at or before the new one: no causal mask needed.
        return self._attend(attn, x, k, v, None)

    def _cross_attend(self, index, attn, x):
        """Cross-attention of the new position over the cached projections of ``memory``."""
        return self._attend(attn, x, self.cross_keys[index], self.cross_values[index], self.src_mask)

    def step(self, tokens):
        """Feed one token per sequence; return the logits ``(B, V)`` of the next one."""
        model = self.model
        if tokens.dim() == 1:
            tokens = tokens[:, None]  # (B, 1)
        pe = model.positional.pe.reshape(-1, model.positional.pe.size(-1))  # (max_len, d_model)
        if self.position >= pe.size(0):
            raise ValueError(f"cannot decode beyond max_len = {pe.size(0)} positions")
        x = model.tgt_embed(tokens) + pe[self.position]  # (B, 1, d_model)
        logits = self._through_layers(x)  # (B, V)
        self.position += 1
        return logits

    def _through_layers(self, x):
        """The embedded new position ``x (B, 1, d_model)`` through every decoder layer; its logits ``(B, V)``."""
        model = self.model
        for index, layer in enumerate(model.decoder_layers):
            cached = _CachedLayer(layer, self_attn=_Cached(self._self_attend, index, layer.self_attn),
                                  cross_attn=_Cached(self._cross_attend, index, layer.cross_attn))
            # the layer's own forward (norms, residuals, dropout): memory and masks come from the cache
            x = type(layer).forward(cached, x, None)  # (B, 1, d_model)
        if getattr(model, "norm_first", False):
            x = model.decoder_norm(x)
        return model.project(x)[:, -1]  # (B, V)

    def reorder(self, index):
        """Keep (and repeat) the cached sequences ``index`` (``(B',)`` LongTensor), for beam search."""
        self.self_keys = [None if k is None else k.index_select(0, index) for k in self.self_keys]
        self.self_values = [None if v is None else v.index_select(0, index) for v in self.self_values]
        self.cross_keys = [k.index_select(0, index) for k in self.cross_keys]
        self.cross_values = [v.index_select(0, index) for v in self.cross_values]
        if self.src_mask is not None and self.src_mask.size(0) > 1:
            self.src_mask = self.src_mask.index_select(0, index)


class _Cached:
    """An attention call that reads the cache: ``(query, key, value, mask)`` → ``attend(index, attn, query)``.

    ``key``, ``value`` and ``mask`` of the layer's call are not used: the cache holds the
    projected keys and values (and the source mask), and the new position may see every
    cached one.
    """

    def __init__(self, attend, index, attn):
        self.attend, self.index, self.attn = attend, index, attn

    def __call__(self, query, key=None, value=None, mask=None):
        return self.attend(self.index, self.attn, query)  # (B, 1, d_model)


class _CachedLayer:
    """A view of a decoder layer whose ``self_attn`` and ``cross_attn`` are replaced; every
    other attribute (norms, dropouts, ``feed_forward``, ``norm_first``) is the layer's own."""

    def __init__(self, layer, **replaced):
        self._layer, self._replaced = layer, replaced

    def __getattr__(self, name):
        replaced = self.__dict__["_replaced"]
        return replaced[name] if name in replaced else getattr(self.__dict__["_layer"], name)
