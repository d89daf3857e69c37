"""Greedy decoding for a GPU: a key/value cache of fixed shapes, and its step as a CUDA graph.

:class:`~solutions.kv_cache.IncrementalDecoder` (chapter 10) grows its cache with
``torch.cat`` and reads the position as a Python number, so every step runs new shapes.
On a CPU that is what costs least. On a GPU a step of a small model is a few hundred tiny
kernels whose cost is launching them, not computing: the measured batch translation with
that cache was slower than recomputing every prefix (0.80x on an H100, README). Here

- :class:`StaticIncrementalDecoder` allocates each layer's self-attention keys and values
  once, ``(B, h, L, d_k)`` for ``L`` steps, writes step ``t`` into slot ``t``
  (``index_copy_`` at a position held in a device tensor) and attends over all ``L``
  slots with a mask of the filled ones. Every step runs the same kernels on the same
  shapes and reads nothing back to the host; the padded slots get weight exactly 0.
- :class:`CUDAGraphStep` records one such step as a CUDA graph and replays it: one
  launch per step instead of hundreds.
- :func:`static_greedy_decode` is :func:`~solutions.decoding.greedy_decode` on them (the
  same tokens), and checks whether every sentence has ended only every few steps (each
  check waits for the GPU).

:func:`greedy_decoder_for` picks it on CUDA for :func:`~solutions.translation.translate`
(``greedy=``), as ``translate`` and ``evaluate`` on the command line and ``bench`` do.

Paper: section 3.2.3 (auto-regressive decoding).
"""
import torch

from ..kv_cache import IncrementalDecoder
from ..multihead import split_heads

__all__ = ["StaticIncrementalDecoder", "CUDAGraphStep", "static_greedy_decode", "greedy_decoder_for"]


class StaticIncrementalDecoder(IncrementalDecoder):
    """:class:`~solutions.kv_cache.IncrementalDecoder` with a preallocated cache of fixed shapes.

    Args:
        model: a :class:`~solutions.model.Transformer` in eval mode.
        memory: the encoder output ``model.encode(src, src_mask)``.
        src_mask: bool, True = may attend, broadcastable to ``(B, 1, 1, T_src)``, or ``None``.
        steps: the most tokens :meth:`step` will be fed (the cache's length ``L``); at most
            the model's ``max_len``.

    Shape:
        memory: ``(B, T_src, d_model)``; cache per layer: ``(B, h, L, d_k)`` keys and values;
        tokens: ``(B,)`` or ``(B, 1)``; step output: logits ``(B, tgt_vocab_size)``.

    The logits equal :class:`IncrementalDecoder`'s up to float rounding (the softmax runs
    over ``L`` slots, the unfilled ones at weight 0). The position lives in
    :attr:`position_tensor` (on the device) as well as :attr:`position`, so that a step
    needs no host value: :class:`CUDAGraphStep` can record it.

    Raises:
        ValueError: ``steps`` < 1 or beyond the model's ``max_len``; a step beyond ``steps``.
    """

    def __init__(self, model, memory, src_mask=None, steps=None):
        super().__init__(model, memory, src_mask)
        table = model.positional.pe.reshape(-1, model.positional.pe.size(-1)).size(0)
        steps = table if steps is None else steps
        if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= table:
            raise ValueError(f"steps must be an int in [1, max_len = {table}], got {steps!r}")
        self.capacity = steps
        batch = memory.size(0)
        self.self_keys, self.self_values = [], []
        for layer in model.decoder_layers:
            attn = layer.self_attn
            shape = (batch, attn.num_heads, steps, attn.d_k)
            self.self_keys.append(memory.new_zeros(shape))  # (B, h, L, d_k)
            self.self_values.append(memory.new_zeros(shape))  # (B, h, L, d_k)
        self.position_tensor = torch.zeros(1, dtype=torch.long, device=memory.device)  # (1,)
        self._slots = torch.arange(steps, device=memory.device)  # (L,)
        self._filled = None  # (1, 1, 1, L) bool: the slots written so far, set by step()

    def _self_attend(self, index, attn, x):
        """Self-attention of the new position: write its key and value into slot ``position``, attend over the filled slots."""
        keys, values = self.self_keys[index], self.self_values[index]
        k = split_heads(attn.w_k(x), attn.num_heads)  # (B, h, 1, d_k)
        v = split_heads(attn.w_v(x), attn.num_heads)  # (B, h, 1, d_k)
        keys.index_copy_(2, self.position_tensor, k.to(keys.dtype))
        values.index_copy_(2, self.position_tensor, v.to(values.dtype))
        return self._attend(attn, x, keys, values, self._filled)

    def step(self, tokens):
        """Feed one token per sequence; return the logits ``(B, V)`` of the next one."""
        if self.position >= self.capacity:
            raise ValueError(f"this cache holds {self.capacity} steps: cannot decode step {self.position + 1}")
        model = self.model
        if tokens.dim() == 1:
            tokens = tokens[:, None]  # (B, 1)
        pe = model.positional.pe.reshape(-1, model.positional.pe.size(-1))  # (max_len, d_model)
        self._filled = (self._slots <= self.position_tensor).reshape(1, 1, 1, -1)  # (1, 1, 1, L)
        x = model.tgt_embed(tokens) + pe.index_select(0, self.position_tensor)  # (B, 1, d_model)
        logits = self._through_layers(x)  # (B, V)
        self.position_tensor += 1
        self.position += 1
        return logits

    def rewind(self):
        """Back to position 0 (the slots are overwritten before they are read again)."""
        self.position_tensor.zero_()
        self.position = 0

    def reorder(self, index):
        """Beam search's reordering does not fit a fixed-shape cache: use :class:`IncrementalDecoder`."""
        raise NotImplementedError("StaticIncrementalDecoder serves greedy decoding; beam search reorders the "
                                  "cache: use solutions.kv_cache.IncrementalDecoder")


class CUDAGraphStep:
    """One :meth:`StaticIncrementalDecoder.step` recorded as a CUDA graph, replayed at every step.

    Recording runs one warm-up step on a side stream (as CUDA graphs require), records a
    step reading its tokens from a fixed input buffer, and rewinds the decoder.

    Args:
        decoder: a fresh :class:`StaticIncrementalDecoder` on a CUDA device.

    Shape:
        tokens: ``(B,)`` or ``(B, 1)``; output: logits ``(B, V)``, a buffer the next
        :meth:`step` overwrites (use or copy it before).

    Raises:
        ValueError: the decoder is not on a CUDA device, or has already been stepped.
    """

    def __init__(self, decoder):
        device = decoder.position_tensor.device
        if device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device, the decoder is on {device}")
        if decoder.position != 0:
            raise ValueError(f"record the graph on a fresh decoder (this one is at step {decoder.position})")
        self.decoder = decoder
        self.tokens = torch.zeros(decoder.cross_keys[0].size(0), dtype=torch.long, device=device)  # (B,)
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            decoder.step(self.tokens)  # warm-up: the allocator and the kernels' workspaces
        torch.cuda.current_stream(device).wait_stream(side)
        decoder.rewind()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.logits = decoder.step(self.tokens)  # recorded, not run: the position tensor is unchanged
        decoder.rewind()

    def step(self, tokens):
        """Feed one token per sequence (copied into the graph's input); the logits ``(B, V)``."""
        if self.decoder.position >= self.decoder.capacity:
            raise ValueError(f"this cache holds {self.decoder.capacity} steps: cannot decode step "
                             f"{self.decoder.position + 1}")
        self.tokens.copy_(tokens.reshape(-1))
        self.graph.replay()
        self.decoder.position += 1
        return self.logits


def static_greedy_decode(model, src, src_mask, max_len, sos_id=1, eos_id=2, pad_id=0, cuda_graph=None,
                         check_every=8):
    """:func:`~solutions.decoding.greedy_decode` with :class:`StaticIncrementalDecoder`: the same tokens.

    Args:
        model, src, src_mask, max_len, sos_id, eos_id, pad_id: as for ``greedy_decode``.
        cuda_graph: replay each step as a CUDA graph (:class:`CUDAGraphStep`); default:
            on a CUDA device.
        check_every: look whether every sentence has ended every this many steps (a
            look waits for the device); the columns decoded after the step where they
            all ended are dropped, so the result is ``greedy_decode``'s.

    Shape:
        src: ``(B, T_src)``; src_mask: broadcastable to ``(B, 1, 1, T_src)``;
        output: ``(B, T)`` with ``T <= max_len + 1``.

    Returns:
        ``LongTensor``: ``<sos>``, then one arg-max token per step, ``pad_id`` after a
        sentence's ``<eos>``; it ends at the step where every sentence has ended.
    """
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    if check_every < 1:
        raise ValueError(f"check_every must be >= 1, got {check_every}")
    with torch.no_grad():
        memory = model.encode(src, src_mask)  # (B, T_src, d_model)
        batch = src.size(0)
        decoder = StaticIncrementalDecoder(model, memory, src_mask, steps=max_len)
        graphed = src.device.type == "cuda" if cuda_graph is None else cuda_graph
        step = CUDAGraphStep(decoder).step if graphed else decoder.step
        ys = torch.full((batch, max_len + 1), pad_id, dtype=torch.long, device=src.device)  # (B, max_len + 1)
        ys[:, 0] = sos_id
        finished = torch.zeros(batch, dtype=torch.bool, device=src.device)  # (B,)
        done = max_len
        for t in range(1, max_len + 1):
            next_token = step(ys[:, t - 1]).argmax(dim=-1).masked_fill(finished, pad_id)  # (B,)
            ys[:, t] = next_token
            finished |= next_token == eos_id
            if t % check_every == 0 and bool(finished.all()):
                done = t
                break
        ys = ys[:, :done + 1]
        # greedy_decode stops at the first step after which every sentence has ended.
        ended = (ys[:, 1:] == eos_id).cummax(dim=1).values.all(dim=0)  # (done,)
        if bool(ended.any()):
            ys = ys[:, :int(ended.int().argmax()) + 2]
    return ys


def greedy_decoder_for(device):
    """The greedy decoder :func:`~solutions.translation.translate` should use on ``device``:
    :func:`static_greedy_decode` (with CUDA graphs) on CUDA, ``None`` (its own, the growing
    cache, which costs least on a CPU) elsewhere."""
    return static_greedy_decode if torch.device(device).type == "cuda" else None
