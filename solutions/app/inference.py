"""Decoding where users wait: a CPU greedy decoder that drops ended sentences, a batched beam
search with a cache, and for a GPU a key/value cache of fixed shapes replayed as a CUDA graph.

:class:`~solutions.kv_cache.IncrementalDecoder` (chapter 10) grows its cache with
``torch.cat`` and reads the position as a Python number, so every step runs new shapes.
On a CPU that is what costs least, and two things cost more than they must: a batch
decodes every sentence until the longest has ended, and attention is spelled out in five
kernels. Here, for the CPU,

- :class:`FusedIncrementalDecoder` is that cache with attention as one
  ``F.scaled_dot_product_attention`` call;
- :func:`shrinking_greedy_decode` is :func:`~solutions.decoding.greedy_decode` on it that
  drops a sentence from the batch (and its rows from the cache) at its ``<eos>``, as
  CTranslate2 does: the same tokens, 1.1-1.2x faster on Multi30k (README, "Translation on
  the CPU, against CTranslate2").

On a GPU a step of a small model is a few hundred tiny kernels whose cost is launching
them, not computing: the measured batch translation with the growing cache was slower
than recomputing every prefix (0.80x on an H100, README). Here

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

And everywhere, :func:`batch_beam_search` is :func:`~solutions.decoding.beam_search` for
many sentences at once: the beams of every sentence are one batch fed one token a step
through :class:`FusedIncrementalDecoder` (its rows reordered as the beams are), and one
transfer per step brings every sentence's best candidates to the host (chapter 10's
``beam_search`` decodes one sentence, its beams a batch of at most ``beam_size`` rows,
recomputing every prefix). :func:`batch_beam_hypotheses` is its search, which does not
depend on the length penalty, and :func:`best_hypothesis` the choice the penalty makes: one
search serves a whole grid of penalties (:mod:`solutions.app.tuning`).

:func:`decoders_for` picks them for :func:`~solutions.translation.translate` (``greedy=``,
``beam=``): the batched beam search everywhere, the shrinking greedy decoder on the CPU and
the static one on CUDA; the command line (``translate``, ``evaluate``, ``train``'s
evaluations) and ``bench`` use it.

Paper: section 3.2.3 (auto-regressive decoding).
"""
import torch
import torch.nn.functional as F

from ..kv_cache import IncrementalDecoder
from ..masking import zero_fully_masked_rows
from ..multihead import merge_heads, split_heads

__all__ = ["StaticIncrementalDecoder", "CUDAGraphStep", "static_greedy_decode", "FusedIncrementalDecoder",
           "shrinking_greedy_decode", "greedy_decoder_for", "batch_beam_hypotheses", "best_hypothesis",
           "batch_beam_search", "decoders_for"]


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


class FusedIncrementalDecoder(IncrementalDecoder):
    """:class:`~solutions.kv_cache.IncrementalDecoder` whose attention is one
    ``F.scaled_dot_product_attention`` call, as the model's own fast path.

    Chapter 10's cache spells attention out (scores, :func:`~solutions.masking.masked_softmax`,
    weighted sum): five kernels and two copies a layer a step, a fifth of a CPU decoding step
    at Multi30k's sizes. This computes the same weighted sum in one kernel; a query whose
    keys are all masked gets zeros, as from ``masked_softmax``. The logits equal
    ``IncrementalDecoder``'s up to float rounding.
    """

    @staticmethod
    def _attend(attn, x, keys, values, mask):
        """Attention of the new position ``x (B, 1, d_model)`` over cached keys/values ``(B, h, T_k, d_k)``."""
        q = split_heads(attn.w_q(x), attn.num_heads)  # (B, h, 1, d_k)
        context = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)  # (B, h, 1, d_k)
        context = zero_fully_masked_rows(context, mask)  # a query with no key: zeros, as masked_softmax gives
        return attn.w_o(merge_heads(context))  # (B, 1, d_model)


def shrinking_greedy_decode(model, src, src_mask, max_len, sos_id=1, eos_id=2, pad_id=0):
    """:func:`~solutions.decoding.greedy_decode` with the key/value cache, decoding only the
    sentences that have not ended: the same tokens, less work on a CPU.

    ``greedy_decode`` runs every sentence of the batch until the last one ends, so a batch
    costs its longest translation times its size. Here a sentence leaves the batch at its
    ``<eos>``: its rows are dropped from the cache (:meth:`IncrementalDecoder.reorder`) and
    later steps run on the sentences still decoding, as CTranslate2 does. Attention is
    :class:`FusedIncrementalDecoder`'s one kernel, and no autograd state is kept
    (``torch.inference_mode``).

    Args:
        model, src, src_mask, max_len, sos_id, eos_id, pad_id: as for ``greedy_decode``.

    Shape:
        src: ``(B, T_src)``; src_mask: broadcastable to ``(B, 1, 1, T_src)``;
        output: ``(B, T)`` with ``T <= max_len + 1``.

    Returns:
        ``LongTensor``: ``<sos>``, then one arg-max token per step, ``pad_id`` after a
        sentence's ``<eos>``; it ends at the step where every sentence has ended (or
        after ``max_len`` new tokens), as ``greedy_decode``'s does.
    """
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    with torch.inference_mode():
        memory = model.encode(src, src_mask)  # (B, T_src, d_model)
        batch = src.size(0)
        decoder = FusedIncrementalDecoder(model, memory, src_mask)
        ys = torch.full((batch, max_len + 1), pad_id, dtype=torch.long, device=src.device)  # (B, max_len + 1)
        ys[:, 0] = sos_id
        live = torch.arange(batch, device=src.device)  # (R,) the row of ys each decoder row writes
        tokens = ys[:, 0]  # (R,)
        done = max_len
        for t in range(1, max_len + 1):
            tokens = decoder.step(tokens).argmax(dim=-1)  # (R,)
            ys[live, t] = tokens
            ended = tokens == eos_id  # (R,)
            if bool(ended.any()):
                going = (~ended).nonzero().squeeze(1)  # (R',)
                if going.numel() == 0:
                    done = t
                    break
                decoder.reorder(going)
                live, tokens = live.index_select(0, going), tokens.index_select(0, going)
    return ys[:, :done + 1]


def greedy_decoder_for(device):
    """The greedy decoder :func:`~solutions.translation.translate` should use on ``device``:
    :func:`static_greedy_decode` (with CUDA graphs) on CUDA, :func:`shrinking_greedy_decode`
    (the growing cache, ended sentences dropped, which costs least on a CPU) elsewhere."""
    return static_greedy_decode if torch.device(device).type == "cuda" else shrinking_greedy_decode


def batch_beam_hypotheses(model, src, src_mask, beam_size, max_len, sos_id=1, eos_id=2):
    """Every finished hypothesis of :func:`batch_beam_search`, for each sentence of a batch, before α chooses one.

    The search does not depend on the length penalty: the live prefixes are ranked by their
    summed log probabilities, a hypothesis finishes when ``<eos>`` is among the first
    ``beam_size`` extensions (or at the sentence's ``max_len``), and a sentence stops once
    ``beam_size`` have finished. ``α`` only chooses among the finished ones
    (:func:`best_hypothesis`), so one search serves every ``α`` of a grid
    (:mod:`solutions.app.tuning`).

    Every sentence keeps its own beams, finished hypotheses and stopping rule, exactly as
    ``beam_search`` does for it alone: at every step its live prefixes (at most
    ``beam_size``) are extended by every token, the ``2 * beam_size`` best extensions
    are examined in order, one ending in ``<eos>`` among the first ``beam_size`` finishes,
    the others refill the beam; it stops when ``beam_size`` hypotheses have finished, or after its ``max_len`` new
    tokens. The live prefixes of all sentences run through the decoder as one batch, one
    token a step through a key/value cache (:class:`FusedIncrementalDecoder`, its rows
    reordered as the beams are), and one transfer per step brings every sentence's
    candidates to the host.

    Args:
        model: a Transformer with ``encode``, ``decode`` and ``project`` (in eval mode).
        src: the source ids, padded with 0.
        src_mask: bool, True = may attend, e.g. ``padding_mask(src)``.
        beam_size: prefixes kept per sentence.
        max_len: the most new tokens: one int, or one per sentence.
        sos_id, eos_id: as for ``beam_search``.

    Shape:
        src: ``(N, T_src)``; src_mask: broadcastable to ``(N, 1, 1, T_src)``.

    Returns:
        ``list[list[tuple[float, list[int]]]]``: per sentence, its finished hypotheses in the
        order they finished, each ``(summed log probability, tokens)`` (``<sos>`` first,
        ``<eos>`` last unless it ran out of ``max_len``).
    """
    if src.dim() != 2:
        raise ValueError(f"src must have shape (N, T_src), got {tuple(src.shape)}")
    count = src.size(0)
    limits = [max_len] * count if isinstance(max_len, int) else list(max_len)
    if len(limits) != count:
        raise ValueError(f"expected one max_len per sentence ({count}), got {len(limits)}")
    if beam_size < 1 or min(limits, default=1) < 1:
        raise ValueError(f"beam_size and max_len must be >= 1, got {beam_size} and {min(limits)}")
    device = src.device
    with torch.inference_mode():
        memory = model.encode(src, src_mask)  # (N, T_src, d_model)
        decoder = FusedIncrementalDecoder(model, memory, src_mask)  # one cache row per live prefix
        prefixes = torch.full((count, 1), sos_id, dtype=torch.long, device=device)  # (R, t): live rows
        owners = list(range(count))  # the sentence of each live row; a sentence's rows are contiguous
        scores = torch.zeros(count, device=device)  # (R,) summed log probabilities
        finished = [[] for _ in range(count)]  # per sentence: (normalised score, token list)
        for step in range(1, max(limits) + 1):
            log_probs = F.log_softmax(decoder.step(prefixes[:, -1]).float(), dim=-1)  # (R, V)
            vocab_size = log_probs.size(-1)
            candidates = scores[:, None] + log_probs  # (R, V)
            # Each sentence's rows side by side: (S, k_max * V), -inf where a sentence has fewer rows.
            sentences = list(dict.fromkeys(owners))  # live sentences, in row order
            starts, rows_of = {}, {}
            for row, owner in enumerate(owners):
                starts.setdefault(owner, row)
                rows_of[owner] = rows_of.get(owner, 0) + 1
            k_max = max(rows_of.values())
            slot = torch.tensor([sentences.index(o) * k_max + row - starts[o] for row, o in enumerate(owners)],
                                device=device)  # (R,)
            table = candidates.new_full((len(sentences) * k_max, vocab_size), float("-inf"))
            table.index_copy_(0, slot, candidates)
            table = table.reshape(len(sentences), k_max * vocab_size)  # (S, k_max * V)
            top_scores, top_index = table.topk(min(2 * beam_size, table.size(1)), dim=-1)  # (S, 2k)
            top_scores, top_index = top_scores.tolist(), top_index.tolist()
            keep_rows, keep_tokens, keep_scores, keep_owners = [], [], [], []
            for position, owner in enumerate(sentences):
                k = rows_of[owner]
                rows, tokens, kept = [], [], []
                # beam_search's candidates are the topk of its k * V: the first min(2 * beam_size, k * V) here.
                for rank, (score, flat) in enumerate(zip(top_scores[position][:min(2 * beam_size, k * vocab_size)],
                                                         top_index[position])):
                    row, token = divmod(flat, vocab_size)
                    if token == eos_id:
                        if rank < beam_size:
                            finished[owner].append((score, prefixes[starts[owner] + row].tolist() + [eos_id]))
                    elif len(rows) < beam_size:
                        rows.append(starts[owner] + row)
                        tokens.append(token)
                        kept.append(score)
                if len(finished[owner]) >= beam_size or not rows:
                    continue  # this sentence is done
                keep_rows += rows
                keep_tokens += tokens
                keep_scores += kept
                keep_owners += [owner] * len(rows)
            if not keep_rows:
                break
            rows = torch.tensor(keep_rows, device=device)
            decoder.reorder(rows)  # the cache follows its prefixes
            prefixes = torch.cat([prefixes.index_select(0, rows), torch.tensor(keep_tokens, device=device)[:, None]],
                                 dim=1)  # (R', t + 1)
            scores = torch.tensor(keep_scores, device=device)  # (R',)
            owners = keep_owners
            # A sentence at its max_len: its live prefixes compete as they are (beam_search's for-else).
            ending = {o for o in owners if limits[o] == step}
            if ending:
                live = prefixes.tolist()
                for row, owner in enumerate(owners):
                    if owner in ending:
                        finished[owner].append((keep_scores[row], live[row]))
                stay = [row for row, owner in enumerate(owners) if owner not in ending]
                if not stay:
                    break
                index = torch.tensor(stay, device=device)
                prefixes, scores = prefixes.index_select(0, index), scores.index_select(0, index)
                decoder.reorder(index)
                owners = [owners[row] for row in stay]
    return finished


def best_hypothesis(hypotheses, length_penalty):
    """The tokens of the hypothesis with the best length-normalised score, as ``beam_search`` chooses.

    The score of ``(log_prob, tokens)`` is ``log_prob / ((5 + n) / 6) ** length_penalty``,
    ``n`` its new tokens (``<eos>`` included, ``<sos>`` not): Wu et al. (2016)'s penalty,
    which ``beam_search`` applies. Of equal scores the first finished wins.

    Args:
        hypotheses: one sentence's :func:`batch_beam_hypotheses` (not empty).
        length_penalty: ``α`` (0 = raw log probabilities, which favour short hypotheses).
    """
    return max(hypotheses, key=lambda item: item[0] / ((5 + len(item[1]) - 1) / 6) ** length_penalty)[1]


def batch_beam_search(model, src, src_mask, beam_size, max_len, sos_id=1, eos_id=2, length_penalty=0.6):
    """:func:`~solutions.decoding.beam_search` for a batch of sentences: the same rules, one batch.

    :func:`batch_beam_hypotheses` searches, :func:`best_hypothesis` chooses with
    ``length_penalty``. A sentence gets ``beam_search``'s translation (its source padded to
    the batch's longest, and the cache's sums, can move the last bits of float sums, as in
    batched greedy decoding).

    Args:
        model, src, src_mask, beam_size, max_len, sos_id, eos_id: as for :func:`batch_beam_hypotheses`.
        length_penalty: ``α`` of the score ``log_prob / ((5 + len) / 6) ** α``.

    Shape:
        src: ``(N, T_src)``; src_mask: broadcastable to ``(N, 1, 1, T_src)``.

    Returns:
        ``list[list[int]]``: per sentence, its best hypothesis (``<sos>`` first, ``<eos>``
        last unless it ran out of ``max_len``).
    """
    return [best_hypothesis(hypotheses, length_penalty)
            for hypotheses in batch_beam_hypotheses(model, src, src_mask, beam_size, max_len, sos_id, eos_id)]


def decoders_for(device):
    """The decoders :func:`~solutions.translation.translate` should use on ``device``, as its keyword
    arguments: ``{"greedy": static_greedy_decode or shrinking_greedy_decode, "beam": batch_beam_search}``."""
    return {"greedy": greedy_decoder_for(device), "beam": batch_beam_search}
