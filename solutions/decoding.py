"""Decoding a trained Transformer (chapter 10): greedy search, beam search, translating text.

- :func:`greedy_decode`: append the arg-max token until every sentence has ended,
  optionally with the key/value cache of :mod:`solutions.kv_cache`;
- :func:`beam_search`: keep the ``beam_size`` best prefixes, GNMT length penalty.

Strings in, strings out (tokenize, decode, detokenize) is :func:`solutions.translation.translate`,
kept apart from the two exercises so that a chapter's student package can run it on the
student's own decoders.

Paper: section 6.1 ("beam search with a beam size of 4 and length penalty α = 0.6 ...
maximum output length ... input length + 50, but terminate early when possible").
"""

import torch
import torch.nn.functional as F

from .kv_cache import IncrementalDecoder
from .masking import causal_mask

__all__ = ["greedy_decode", "beam_search"]


def greedy_decode(
    model,
    src,
    src_mask,
    max_len,
    sos_id=1,
    eos_id=2,
    pad_id=0,
    use_cache=False,
):
    """Greedy decoding: start from ``<sos>`` and append the most likely
    token at every step.

    Args:
        model: a Transformer with ``encode(src, src_mask)``,
            ``decode(tgt, memory, src_mask, tgt_mask)`` and
            ``project(hidden)`` (call ``model.eval()`` first; gradients
            are not tracked).
        src: source ids.
        src_mask: bool, True = may attend, e.g. ``padding_mask(src)``.
        max_len: the most new tokens per sentence (``<sos>`` not
            counted: at most ``max_len + 1`` columns come back).
        sos_id, eos_id, pad_id: the special ids.
        use_cache: True = feed one token per step through
            :class:`~solutions.kv_cache.IncrementalDecoder` (same
            tokens, less work).

    Shape:
        src: ``(B, T_src)``; src_mask: broadcastable to
            ``(B, 1, 1, T_src)``;
        output: ``(B, T)`` with ``T <= max_len + 1``.

    Returns:
        ``LongTensor``: column 0 is ``<sos>``, then one arg-max token
        per step; the positions after a sentence's ``<eos>`` hold
        ``pad_id``. Stops when every sentence has produced ``<eos>`` or
        after ``max_len`` new tokens.

    Paper: section 3.2.3 (auto-regressive decoding); the paper itself
    uses beam search (6.1).
    """
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    with torch.no_grad():
        memory = model.encode(src, src_mask)  # (B, T_src, d_model)
        batch = src.size(0)
        # ys: (B, 1)
        ys = torch.full(
            (batch, 1), sos_id, dtype=torch.long, device=src.device
        )
        # finished: (B,)
        finished = torch.zeros(
            batch, dtype=torch.bool, device=src.device
        )
        cache = (
            IncrementalDecoder(model, memory, src_mask)
            if use_cache
            else None
        )
        for _ in range(max_len):
            if use_cache:
                logits = cache.step(ys[:, -1])  # (B, V)
            else:
                # tgt_mask: (1, 1, t, t)
                tgt_mask = causal_mask(ys.size(1)).to(src.device)
                # hidden: (B, t, d_model)
                hidden = model.decode(ys, memory, src_mask, tgt_mask)
                logits = model.project(hidden[:, -1:])[:, 0]  # (B, V)
            # next_token: (B,)
            next_token = logits.argmax(dim=-1).masked_fill(
                finished, pad_id
            )
            # ys: (B, t + 1)
            ys = torch.cat([ys, next_token[:, None]], dim=1)
            finished = finished | (next_token == eos_id)
            if bool(finished.all()):
                break
    return ys


def beam_search(
    model,
    src,
    src_mask,
    beam_size,
    max_len,
    sos_id=1,
    eos_id=2,
    length_penalty=0.6,
):
    """Beam search for one source sentence, the beams decoded as one
    batch.

    At every step each live prefix is extended by every token; the
    ``2 * beam_size`` best extensions by summed log probability are
    examined in order: one that ends in ``<eos>`` and ranks among the
    first ``beam_size`` becomes a finished hypothesis, scored
    ``log_prob / ((5 + len) / 6) ** length_penalty`` (``len`` counts the
    generated tokens, ``<eos>`` included); the others refill the beam up
    to ``beam_size`` prefixes. The search stops when ``beam_size``
    hypotheses have finished or after ``max_len`` new tokens (live
    prefixes then count as hypotheses without ``<eos>``). With
    ``beam_size = 1`` this is greedy decoding.

    Args:
        model: a Transformer with ``encode``, ``decode`` and ``project``
            (in eval mode).
        src: the source ids of one sentence.
        src_mask: bool, True = may attend, e.g. ``padding_mask(src)``.
        beam_size: the number of prefixes kept (4 in the paper).
        max_len: the most new tokens.
        sos_id, eos_id: the special ids.
        length_penalty: ``alpha`` of the GNMT penalty (0.6 in the paper;
            0 = none).

    Shape:
        src: ``(1, T_src)``; src_mask: broadcastable to
            ``(1, 1, 1, T_src)``.

    Returns:
        ``list[int]``: the best hypothesis, starting with ``<sos>`` and
        ending with ``<eos>`` (unless it ran out of ``max_len``).

    Paper: section 6.1; the penalty is Wu et al. (2016),
    "Google's Neural Machine Translation System", equation (14).
    """
    if src.dim() != 2 or src.size(0) != 1:
        raise ValueError(
            "beam_search decodes one sentence: src must have shape "
            f"(1, T_src), got {tuple(src.shape)}"
        )
    if beam_size < 1 or max_len < 1:
        raise ValueError(
            f"beam_size and max_len must be >= 1, got {beam_size} and "
            f"{max_len}"
        )
    with torch.no_grad():
        memory = model.encode(src, src_mask)  # (1, T_src, d_model)
        # beams: (k, t)
        beams = torch.full(
            (1, 1), sos_id, dtype=torch.long, device=src.device
        )
        # scores: (k,) summed log probabilities
        scores = torch.zeros(1, device=src.device)
        finished = []  # (normalised score, token list)
        for step in range(1, max_len + 1):
            k = beams.size(0)
            # tgt_mask: (1, 1, t, t)
            tgt_mask = causal_mask(beams.size(1)).to(src.device)
            mask = (
                None
                if src_mask is None
                else src_mask.expand(k, *src_mask.shape[1:])
            )
            # hidden: (k, t, d_model)
            hidden = model.decode(
                beams, memory.expand(k, -1, -1), mask, tgt_mask
            )
            # log_probs: (k, V)
            log_probs = F.log_softmax(
                model.project(hidden[:, -1:])[:, 0].float(), dim=-1
            )
            vocab_size = log_probs.size(-1)
            # candidates: (k * V,)
            candidates = (scores[:, None] + log_probs).reshape(-1)
            top_scores, top_index = candidates.topk(
                min(2 * beam_size, candidates.numel())
            )
            keep_rows, keep_tokens, keep_scores = [], [], []
            for rank, (score, index) in enumerate(
                zip(top_scores.tolist(), top_index.tolist())
            ):
                row, token = divmod(index, vocab_size)
                if token == eos_id:
                    if rank < beam_size:
                        penalty = ((5 + step) / 6) ** length_penalty
                        finished.append(
                            (
                                score / penalty,
                                beams[row].tolist() + [eos_id],
                            )
                        )
                elif len(keep_rows) < beam_size:
                    keep_rows.append(row)
                    keep_tokens.append(token)
                    keep_scores.append(score)
            if len(finished) >= beam_size or not keep_rows:
                break
            rows = torch.tensor(keep_rows, device=src.device)
            tokens = torch.tensor(keep_tokens, device=src.device)
            # beams: (k', t + 1)
            beams = torch.cat([beams[rows], tokens[:, None]], dim=1)
            # scores: (k',)
            scores = torch.tensor(keep_scores, device=src.device)
        else:
            # max_len reached: the live prefixes compete as they are.
            penalty = ((5 + max_len) / 6) ** length_penalty
            for row in range(beams.size(0)):
                finished.append(
                    (scores[row].item() / penalty, beams[row].tolist())
                )
    return max(finished, key=lambda item: item[0])[1]
