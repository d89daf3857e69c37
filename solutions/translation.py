"""Translating text with a trained Transformer (chapter 10): strings in, strings out.

:func:`translate` tokenizes, decodes with :func:`~solutions.decoding.greedy_decode` (batched,
with the key/value cache) or :func:`~solutions.decoding.beam_search` (sentence by sentence),
and detokenizes. It is the corpus-level tool of the CLI and of the trainer's evaluation,
not an exercise: it sits apart from the decoders so that a student package can ship it
and run it on the student's own decoders (chapter 10) or on a stand-in (chapter 9).

Paper: section 6.1 (maximum output length input length + 50).
"""

import inspect

import torch

from .decoding import beam_search, greedy_decode
from .masking import padding_mask

__all__ = ["translate", "length_sorted_batches", "DECODE_BATCH_SIZE"]

# Sentences decoded together by default: by translate(), the length-penalty tuning and the end of a run.
DECODE_BATCH_SIZE = 64


def length_sorted_batches(encoded, batch_size, device=None):
    """Sentences in batches of similar length: sorted by length, ``batch_size`` at a time.

    Decoding a batch costs as much as its longest sentence, so sorting first wastes
    little on padding. The caller puts each result back at its sentence's index, which
    restores the original order.

    Args:
        encoded: one list of token ids per sentence (none empty).
        batch_size: sentences per batch.
        device: where the batch goes (``None``: the CPU).

    Yields:
        ``(indices, src)``: the batch's sentences as indices into ``encoded``, shortest
        first, and their ids right-padded with ``<pad>`` = 0, shape ``(B, T_src)``.
    """
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        src = torch.zeros(len(chunk), max(len(encoded[i]) for i in chunk), dtype=torch.long)  # (B, T_src), <pad> = 0
        for row, i in enumerate(chunk):
            src[row, :len(encoded[i])] = torch.tensor(encoded[i])
        yield chunk, src if device is None else src.to(device)


def translate(model, sentences, src_tokenizer, tgt_tokenizer, beam_size=1, max_len=None,
              batch_size=DECODE_BATCH_SIZE, device=None, length_penalty=0.6, use_cache=True, greedy=None, beam=None):
    """Translate strings with a trained model: tokenize, decode, detokenize.

    Args:
        model: a trained :class:`~solutions.model.Transformer` (set to eval mode here).
        sentences: a list of source strings.
        src_tokenizer, tgt_tokenizer: objects with ``encode(str) -> list[int]`` /
            ``decode(list[int]) -> str`` (see :mod:`solutions.app.tokenizer`).
        beam_size: 1 = batched greedy decoding with the key/value cache;
            more = :func:`beam_search` sentence by sentence (or ``beam``, batched).
        max_len: most new tokens; default: source length + 50 (the paper's rule),
            capped by the model's positional table.
        batch_size: sentences decoded together by greedy decoding (and by ``beam``).
        device: where to run (default: the model's device).
        length_penalty: ``alpha`` of :func:`beam_search`'s length penalty (beam only).
        use_cache: greedy decoding with the key/value cache (False: recompute every
            prefix, as a benchmark's baseline; the translations are the same). A
            ``greedy_decode`` with only the contract's arguments (a student's, in a
            student package) is called without it.
        greedy: a function with ``greedy_decode``'s arguments to decode with instead
            (``None``: ``greedy_decode``), e.g. the CUDA path
            :func:`solutions.app.inference.static_greedy_decode`; ``use_cache`` does
            not apply to it.
        beam: a function with ``beam_search``'s arguments that decodes a batch of
            sentences (``src (N, T_src)``, ``max_len`` one per sentence) and returns one
            token list per sentence, e.g. :func:`solutions.app.inference.batch_beam_search`;
            ``None``: ``beam_search``, one sentence at a time.

    Returns:
        A list of target strings, in the order of ``sentences`` (they are decoded
        sorted by source length, so that a batch holds sentences of similar length).

    Paper: section 6.1.
    """
    if isinstance(sentences, str):
        raise TypeError("sentences must be a list of strings, not one string")
    model.eval()
    device = device or next(model.parameters()).device
    limit = model.positional.pe.size(0) - 1
    outputs = [None] * len(sentences)
    cache = {"use_cache": use_cache} if greedy is None and "use_cache" in inspect.signature(greedy_decode).parameters \
        else {}
    greedy = greedy_decode if greedy is None else greedy
    encoded = [src_tokenizer.encode(s) or [3] for s in sentences]
    chunk_size = batch_size if beam_size == 1 or beam is not None else 1
    for chunk, src in length_sorted_batches(encoded, chunk_size, device):  # src: (B, T_src)
        longest = src.size(1)
        src_mask = padding_mask(src)  # (B, 1, 1, T_src)
        steps = min(max_len if max_len is not None else longest + 50, limit)
        if beam_size == 1:
            ys = greedy(model, src, src_mask, steps, **cache)
            for row, i in enumerate(chunk):
                outputs[i] = tgt_tokenizer.decode(ys[row, 1:].tolist())
        elif beam is not None:  # each sentence its own limit, as when it is decoded alone
            limits = [min(max_len if max_len is not None else len(encoded[i]) + 50, limit) for i in chunk]
            for i, ids in zip(chunk, beam(model, src, src_mask, beam_size, limits, length_penalty=length_penalty)):
                outputs[i] = tgt_tokenizer.decode(ids[1:])
        else:
            ids = beam_search(model, src, src_mask, beam_size, steps, length_penalty=length_penalty)
            outputs[chunk[0]] = tgt_tokenizer.decode(ids[1:])
    return outputs
