"""Benchmarks of decoding: greedy decoding without and with a key/value cache
(:func:`bench_kv_cache`), translation throughput batched and by beam search
(:func:`bench_translation`), translating a corpus as a user does (:func:`bench_user_translation`),
and ours against CTranslate2 on the same weights (:func:`bench_ctranslate2`).
:mod:`solutions.app.bench` runs them and prints the table.

Paper: section 6.1 (beam search).
"""
import dataclasses
import os
import random
import statistics
import tempfile

import torch
from sacrebleu.metrics import BLEU

from ..decoding import beam_search, greedy_decode
from ..masking import padding_mask
from ..translation import translate
from .bench_setup import bench_clock, bench_config, random_batch, sync_device
from .checkpoint import load_checkpoint, model_from_checkpoint
from .config import PRESETS
from .corpus import read_parallel
from .export import CTranslate2Translator, ctranslate2_available, export_ctranslate2
from .inference import batch_beam_search, decoders_for, greedy_decoder_for, static_greedy_decode
from .tokenizer import build_tokenizer

__all__ = ["bench_kv_cache", "bench_translation", "bench_user_translation", "bench_ctranslate2",
           "generated_sentences", "MULTI30K_TEST_LENGTHS"]

# Words per German sentence of Multi30k's test 2016 (1,000 sentences): {words: sentences}.
MULTI30K_TEST_LENGTHS = {4: 6, 5: 18, 6: 56, 7: 92, 8: 108, 9: 126, 10: 122, 11: 92, 12: 103, 13: 69, 14: 59,
                         15: 41, 16: 33, 17: 24, 18: 11, 19: 5, 20: 9, 21: 6, 22: 5, 23: 8, 24: 3, 25: 2, 26: 1,
                         30: 1}


def bench_kv_cache(d_model=256, num_heads=8, num_layers=3, d_ff=1024, batch=32, src_len=24, new_tokens=64,
                   vocab=2000, repeats=3, device="cpu", clock="wall"):
    """Median ratios of greedy-decoding times, without a cache / with one (> 1 = the cache helps).

    The caches: the growing one of chapter 10 (``"cached_s"``, ``"ratio"``), the fixed-shape
    one of :mod:`solutions.app.inference` (``"static_s"``, ``"static_ratio"``) and, on CUDA,
    that one replayed as a CUDA graph (``"graph_s"``, ``"graph_ratio"``; None elsewhere). All
    take turns, repetition by repetition. ``"same_tokens"``: every way gave the same tokens.
    """
    device = torch.device(device)
    now = bench_clock(clock, device)
    torch.manual_seed(0)
    model = bench_config(d_model, num_heads, num_layers, d_ff, 0.0).build(vocab, vocab).to(device).eval()
    src, _, _ = random_batch(batch, src_len, 2, vocab, device, torch.Generator().manual_seed(2))
    src_mask = padding_mask(src)
    never = -1  # an <eos> id no arg-max can produce: all new_tokens steps run
    ways = {
        "plain": lambda: greedy_decode(model, src, src_mask, new_tokens, eos_id=never),
        "cached": lambda: greedy_decode(model, src, src_mask, new_tokens, eos_id=never, use_cache=True),
        "static": lambda: static_greedy_decode(model, src, src_mask, new_tokens, eos_id=never, cuda_graph=False),
    }
    if device.type == "cuda":
        ways["graph"] = lambda: static_greedy_decode(model, src, src_mask, new_tokens, eos_id=never, cuda_graph=True)
    times = {name: [] for name in ways}
    outputs = {}
    for repeat in range(repeats + 1):
        order = list(ways) if repeat % 2 == 0 else list(reversed(ways))
        for name in order:
            sync_device(device)
            start = now()
            outputs[name] = ways[name]()
            sync_device(device)
            if repeat > 0:
                times[name].append(now() - start)

    def ratio(name):
        if name not in times:
            return None
        return statistics.median(plain / other for plain, other in zip(times["plain"], times[name]))

    return {
        "cached_s": statistics.median(times["cached"]), "plain_s": statistics.median(times["plain"]),
        "static_s": statistics.median(times["static"]),
        "graph_s": statistics.median(times["graph"]) if "graph" in times else None,
        "ratio": ratio("cached"), "static_ratio": ratio("static"), "graph_ratio": ratio("graph"),
        "new_tokens": outputs["cached"].size(1) - 1,
        "same_tokens": all(torch.equal(outputs["plain"], tokens) for tokens in outputs.values()),
    }


def bench_translation(d_model=256, num_heads=8, num_layers=3, d_ff=1024, sentences=64, batch=32, src_len=24,
                      new_tokens=24, beam_size=4, beam_sentences=8, vocab=2000, repeats=3, device="cpu",
                      clock="wall"):
    """Sentences per second of translation: batched greedy decoding and beam search.

    The two ways :func:`~solutions.translation.translate` decodes: greedy (beam 1) in
    batches of ``batch`` sentences with the key/value cache (on CUDA the fixed-shape one
    replayed as a CUDA graph, :func:`~solutions.app.inference.greedy_decoder_for`), and beam search with
    ``beam_size`` beams one sentence at a time, on the fused attention path. The
    model is untrained, so ``<eos>`` is an id it cannot produce and every sentence
    gets exactly ``new_tokens`` tokens: the same work in every run. Sources have
    ``src_len // 2`` to ``src_len`` tokens. The two alternate; medians of ``repeats``.

    Returns:
        A dict with ``greedy_sentences_per_s``, ``beam_sentences_per_s`` and the sizes.
    """
    device = torch.device(device)
    now = bench_clock(clock, device)
    torch.manual_seed(0)
    model = bench_config(d_model, num_heads, num_layers, d_ff, 0.0).build(vocab, vocab).to(device).eval()
    src, _, _ = random_batch(sentences, src_len, 2, vocab, device, torch.Generator().manual_seed(4))
    never = -1  # an <eos> id no arg-max can produce: every sentence decodes new_tokens tokens
    decoder = greedy_decoder_for(device)  # what translate() runs on this device

    def greedy():
        for start in range(0, sentences, batch):
            chunk = src[start:start + batch]  # (b, T_src)
            if decoder is None:
                greedy_decode(model, chunk, padding_mask(chunk), new_tokens, eos_id=never, use_cache=True)
            else:
                decoder(model, chunk, padding_mask(chunk), new_tokens, eos_id=never)
        return sentences

    def beam():
        for row in range(beam_sentences):
            one = src[row:row + 1]  # (1, T_src)
            beam_search(model, one, padding_mask(one), beam_size, new_tokens, eos_id=never)
        return beam_sentences

    runs = {"greedy": greedy, "beam": beam}
    rates = {name: [] for name in runs}
    for repeat in range(repeats + 1):
        for name in (("greedy", "beam") if repeat % 2 == 0 else ("beam", "greedy")):
            sync_device(device)
            start = now()
            count = runs[name]()
            sync_device(device)
            if repeat > 0:  # the first round warms up
                rates[name].append(count / (now() - start))
    return {
        "greedy_sentences_per_s": statistics.median(rates["greedy"]),
        "beam_sentences_per_s": statistics.median(rates["beam"]),
        "sizes": dict(d_model=d_model, num_heads=num_heads, layers=num_layers, d_ff=d_ff, vocab=vocab,
                      src_len=src_len, new_tokens=new_tokens, batch=batch, beam_size=beam_size),
    }


def generated_sentences(count=1000, seed=0):
    """``count`` made-up sentences with the word counts of Multi30k's test 2016 (no corpus needed).

    The lengths follow :data:`MULTI30K_TEST_LENGTHS` (all of them, in a seeded order,
    for ``count = 1000``; sampled from it otherwise); the words are random syllable strings.
    """
    rng = random.Random(seed)
    lengths = [words for words, sentences in MULTI30K_TEST_LENGTHS.items() for _ in range(sentences)]
    lengths = rng.sample(lengths, len(lengths)) if count == len(lengths) else rng.choices(lengths, k=count)
    syllables = ["ein", "der", "mann", "frau", "hund", "spiel", "auf", "ung", "ter", "lau", "fen", "be", "ge",
                 "straß", "e", "n", "kind", "er", "im", "wass", "rot", "en", "blau", "sitz", "t", "vor"]
    return [" ".join("".join(rng.choice(syllables) for _ in range(rng.randint(1, 3))) for _ in range(n)) + " ."
            for n in lengths]


def _read_sources(path):
    """The source side of a TSV corpus, or the lines of a plain-text file."""

    with open(path, encoding="utf-8") as handle:
        first = handle.readline()
    if "\t" in first:
        return [source for source, _ in read_parallel(path, on_bad_line="skip")[0]]
    with open(path, encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle if line.strip()]


def _read_references(path):
    """The target side of a TSV corpus (the references), or ``None`` for a plain-text file."""
    with open(path, encoding="utf-8") as handle:
        first = handle.readline()
    if "\t" not in first:
        return None
    return [target for _, target in read_parallel(path, on_bad_line="skip")[0]]


def bench_user_translation(checkpoint=None, corpus=None, sentences=1000, beam_size=4, batch=64, max_len=None,
                           device="cpu", clock="wall"):
    """Sentences per second of :func:`~solutions.translation.translate`, the way ``translate`` runs.

    Four passes over the same sentences: greedy in length-sorted batches of ``batch``
    with the key/value cache (the CLI's: on CUDA the fixed-shape cache as a CUDA graph),
    the same without the cache, beam search (beam ``beam_size``) one sentence at a time
    (chapter 10's ``beam_search``), and the same in batches of ``batch`` sentences
    (:func:`~solutions.app.inference.batch_beam_search`, the CLI's). Greedy with and
    without the cache give the same translations (checked); ``beam_same`` is the
    fraction of equal beam translations.

    Args:
        checkpoint: a checkpoint or export of ``train``; default: an untrained model of the
            ``multi30k-cpu`` shape with a BPE vocabulary learnt on the sentences.
        corpus: a TSV file (its source side) or a text file (one sentence a line); default:
            :func:`generated_sentences`.
        sentences: how many (the first ones of the corpus).
        max_len: most new tokens (default: ``translate``'s, source length + 50; for the
            untrained model, which rarely ends a sentence, 24: a caption's length).

    Returns:
        A dict with ``greedy_cached_sentences_per_s``, ``greedy_uncached_sentences_per_s``,
        ``cache_ratio``, ``beam_sentences_per_s``, ``same_translations`` and what was run.
    """

    device = torch.device(device)
    now = bench_clock(clock, device)
    texts = _read_sources(corpus) if corpus else generated_sentences(sentences)
    texts = texts[:sentences]
    if not texts:
        raise ValueError(f"{corpus}: no sentences to translate")
    if checkpoint:
        model, src_tok, tgt_tok, _ = model_from_checkpoint(checkpoint, device=device)
    else:
        torch.manual_seed(0)
        config = PRESETS["multi30k-cpu"]
        src_tok = tgt_tok = build_tokenizer(texts, "bpe", 2000)
        model = config.model.build(len(src_tok), len(tgt_tok)).to(device).eval()
        max_len = 24 if max_len is None else max_len
    timed = {}
    outputs = {}
    runs = (("greedy_cached", 1, True, {"greedy": greedy_decoder_for(device)}), ("greedy_uncached", 1, False, {}),
            ("beam", beam_size, True, {}), ("beam_batched", beam_size, True, {"beam": batch_beam_search}))
    for name, beam, cache, decoders in runs:
        sync_device(device)
        start = now()
        outputs[name] = translate(model, texts, src_tok, tgt_tok, beam_size=beam, max_len=max_len,
                                  batch_size=batch, device=device, use_cache=cache, **decoders)
        sync_device(device)
        timed[name] = len(texts) / max(now() - start, 1e-9)
    return {"sentences": len(texts), "corpus": corpus or "generated (Multi30k test 2016 word counts)",
            "checkpoint": checkpoint, "beam_size": beam_size, "batch": batch,
            "greedy_cached_sentences_per_s": timed["greedy_cached"],
            "greedy_uncached_sentences_per_s": timed["greedy_uncached"],
            "cache_ratio": timed["greedy_cached"] / timed["greedy_uncached"],
            "beam_sentences_per_s": timed["beam"], "beam_batched_sentences_per_s": timed["beam_batched"],
            "beam_batch_ratio": timed["beam_batched"] / timed["beam"],
            "same_translations": outputs["greedy_cached"] == outputs["greedy_uncached"],
            "beam_same": sum(a == b for a, b in zip(outputs["beam"], outputs["beam_batched"])) / len(texts)}


def bench_ctranslate2(checkpoint=None, corpus=None, sentences=1000, beam_size=4, batch=64, max_len=None,
                      threads=(1, 2), clock="wall"):
    """Sentences per second of ours and of CTranslate2 on the same weights, side by side (CPU).

    The model (a checkpoint, or the untrained ``multi30k-cpu`` model of
    :func:`bench_user_translation`) is exported with
    :func:`~solutions.app.export.export_ctranslate2` into a temporary directory; then, for
    each thread count, ours (:func:`~solutions.translation.translate` with the command
    line's decoders, :func:`~solutions.app.inference.decoders_for`: sentences decoded in
    batches of ``batch`` greedily and with beam ``beam_size``; ``torch.set_num_threads``)
    and CTranslate2 (``intra_threads``) translate the same sentences, taking turns (who goes
    first alternates). Where the corpus is a TSV file with references, each engine's
    translations are scored (sacreBLEU, 13a, cased).

    Returns:
        ``{"rows": [{"threads", "decoding", "ours_sentences_per_s", "ctranslate2_sentences_per_s",
        "ratio", "same", "ours_bleu", "ctranslate2_bleu"}, ...], "greedy_same": the smallest
        fraction of equal greedy translations, ...}`` (``ratio`` = ours / CTranslate2; the
        BLEU scores are ``None`` without references), or ``None`` when ``ctranslate2`` is
        not installed.
    """

    if not ctranslate2_available():
        return None
    device = torch.device("cpu")
    now = bench_clock(clock, device)
    texts = (_read_sources(corpus) if corpus else generated_sentences(sentences))[:sentences]
    references = _read_references(corpus) if corpus else None
    references = None if references is None else references[:len(texts)]
    if checkpoint:
        state = load_checkpoint(checkpoint)
    else:  # the untrained multi30k-cpu model, which rarely ends a sentence: 24 new tokens, a caption's length
        torch.manual_seed(0)
        config = PRESETS["multi30k-cpu"]
        tokenizer = build_tokenizer(texts, "bpe", 2000)
        state = {"config": dataclasses.asdict(config), "src_tokenizer": tokenizer.state(),
                 "tgt_tokenizer": tokenizer.state(),
                 "model": config.model.build(len(tokenizer), len(tokenizer)).state_dict()}
        max_len = 24 if max_len is None else max_len
    previous_threads = torch.get_num_threads()
    rows = []

    def bleu(hypotheses):
        return None if references is None else BLEU().corpus_score(hypotheses, [references]).score

    with tempfile.TemporaryDirectory() as folder:
        directory = export_ctranslate2(state, os.path.join(folder, "ct2"))
        model, src_tok, tgt_tok, _ = model_from_checkpoint(state)
        decoders = decoders_for(device)  # what translate, evaluate and train's evaluations run
        try:
            for count in threads:
                torch.set_num_threads(count)
                theirs = CTranslate2Translator(directory, threads=count)
                for turn, (decoding, beam) in enumerate((("greedy", 1), (f"beam {beam_size}", beam_size))):
                    engines = {
                        "ours": lambda: translate(model, texts, src_tok, tgt_tok, beam_size=beam, max_len=max_len,
                                                  batch_size=batch, **decoders),
                        "ctranslate2": lambda: theirs(texts, beam_size=beam, batch_size=batch, max_len=max_len),
                    }
                    seconds, outputs = {}, {}
                    for name in (list(engines) if (turn + count) % 2 == 0 else list(reversed(engines))):
                        start = now()
                        outputs[name] = engines[name]()
                        seconds[name] = max(now() - start, 1e-9)
                    rows.append({"threads": count, "decoding": decoding,
                                 "ours_sentences_per_s": len(texts) / seconds["ours"],
                                 "ctranslate2_sentences_per_s": len(texts) / seconds["ctranslate2"],
                                 "ratio": seconds["ctranslate2"] / seconds["ours"],
                                 "same": sum(a == b for a, b in zip(outputs["ours"], outputs["ctranslate2"]))
                                 / len(texts),
                                 "ours_bleu": bleu(outputs["ours"]), "ctranslate2_bleu": bleu(outputs["ctranslate2"])})
        finally:
            torch.set_num_threads(previous_threads)
    return {"sentences": len(texts), "checkpoint": checkpoint, "beam_size": beam_size, "batch": batch, "rows": rows,
            "greedy_same": min(row["same"] for row in rows if row["decoding"] == "greedy")}
