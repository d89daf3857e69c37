"""Benchmarks of the reference package, always as ratios measured side by side in one run.

1. **Training step** (forward + backward + Adam step, dropout 0.1, label smoothing 0.1)
   of :class:`solutions.Transformer` on the fast path (packed q/k/v projections,
   ``F.scaled_dot_product_attention`` and dropout masks from 16-bit draws,
   :mod:`solutions.fused`), against the same model with separate q/k/v projections and against
   ``torch.nn.Transformer`` of the same sizes wrapped in the same embeddings,
   positional encoding and output projection, on the same batch and masks. The three
   take turns, repetition by repetition, so all see the same machine load; the ratios
   are medians of the per-repetition ratios (> 1 = ours is faster). Training tokens per
   second count the non-padding source and target tokens.
2. **Greedy decoding** of 64 new tokens without a key/value cache, with chapter 10's
   growing cache, with the fixed-shape cache of :mod:`solutions.app.inference` and, on
   CUDA, with that cache replayed as a CUDA graph (``<eos>`` is an id the model cannot
   produce, so every step runs).
3. **Translation** throughput in sentences per second: batched greedy decoding with
   the cache, and beam search (beam 4) one sentence at a time, the two ways
   :func:`~solutions.translation.translate` decodes.
4. **Translating as a user does**: :func:`~solutions.translation.translate` on a corpus of
   1,000 sentences (a file, or generated sentences with the word counts of Multi30k's
   test 2016 German side), greedy with and without the key/value cache and beam 4, in
   sentences per second, with a trained checkpoint or an untrained model of the
   ``multi30k-cpu`` shape.
5. On CUDA, the paper's **base** model in bf16 with Adam at a batch that fills an 80 GB
   card (:data:`BASE_BATCH`), eager and with ``torch.compile``: tokens per second and the
   model-FLOPs utilisation (MFU) against the GPU's dense bf16 peak.

``python -m solutions bench --threads 2`` (or ``make bench``) prints a table; ``--quick``
uses tiny sizes for a smoke test; ``--clock cpu`` times with the process's CPU time.
Timings depend on the machine and its load; compare the ratios.

Paper: section 3 (the model), 5.2 (hardware and schedule: "about 0.4 seconds" per
base step on 8 P100 GPUs), 6.1 (beam search).
"""
import dataclasses
import json
import math
import os
import random
import statistics
import tempfile
import time

import torch
import torch.nn.functional as F
from sacrebleu.metrics import BLEU
from torch import nn

from ..decoding import beam_search, greedy_decode
from ..embeddings import TokenEmbedding
from ..fused import use_fast_dropout
from ..masking import decoder_mask, padding_mask
from ..configuration import PAPER_CONFIGS, TransformerConfig
from ..model import count_parameters
from ..positional import PositionalEncoding
from ..translation import translate
from .checkpoint import load_checkpoint, model_from_checkpoint
from .config import PRESETS
from .corpus import read_parallel
from .device import resolve_device
from .export import CTranslate2Translator, ctranslate2_available, export_ctranslate2
from .inference import batch_beam_search, decoders_for, greedy_decoder_for, static_greedy_decode
from .tokenizer import build_tokenizer

__all__ = ["TorchTransformerBaseline", "random_batch", "bench_training_step", "bench_kv_cache", "bench_translation",
           "bench_ctranslate2", "bench_base_mfu",
           "bench_user_translation", "generated_sentences", "run_benchmarks"]

# Words per German sentence of Multi30k's test 2016 (1,000 sentences): {words: sentences}.
MULTI30K_TEST_LENGTHS = {4: 6, 5: 18, 6: 56, 7: 92, 8: 108, 9: 126, 10: 122, 11: 92, 12: 103, 13: 69, 14: 59,
                         15: 41, 16: 33, 17: 24, 18: 11, 19: 5, 20: 9, 21: 6, 22: 5, 23: 8, 24: 3, 25: 2, 26: 1,
                         30: 1}

# The base model's MFU batch on CUDA: sentence pairs, tokens per side.
BASE_BATCH = (256, 128)

# Dense bf16 peak FLOP/s by GPU name (vendor data sheets, without sparsity).
_PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "L4": 121e12,
              "A10G": 70e12, "A10": 125e12, "RTX 4090": 165e12, "RTX 3090": 71e12}


class TorchTransformerBaseline(nn.Module):
    """``torch.nn.Transformer`` with the same embeddings, positions and projection as ours.

    Takes our masks (True = may attend) and converts them to PyTorch's (True = masked
    out), so both models get the same inputs and do the same work.

    Paper: section 3 (the same architecture, PyTorch's implementation).
    """

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model, num_heads, num_encoder_layers,
                 num_decoder_layers, d_ff, dropout, max_len=512, norm_first=False):
        super().__init__()
        self.src_embed = TokenEmbedding(src_vocab_size, d_model)
        self.tgt_embed = TokenEmbedding(tgt_vocab_size, d_model)
        self.positional = PositionalEncoding(d_model, max_len, dropout)
        self.transformer = nn.Transformer(d_model, num_heads, num_encoder_layers, num_decoder_layers, d_ff,
                                          dropout, batch_first=True, norm_first=norm_first)
        self.generator = nn.Linear(d_model, tgt_vocab_size)

    def forward(self, src, tgt, src_pad, tgt_pad):
        """``src_pad (B, S)``, ``tgt_pad (B, T)``: True where the token is padding."""
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.size(1), device=tgt.device, dtype=torch.bool)
        hidden = self.transformer(
            self.positional(self.src_embed(src)), self.positional(self.tgt_embed(tgt)),
            tgt_mask=causal, src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=src_pad,
        )  # (B, T, d_model)
        return self.generator(hidden)  # (B, T, V)


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _sizes(d_model, num_heads, num_layers, d_ff, dropout, attention="fused"):
    """The benchmarks' model: ``num_layers`` encoder and decoder layers, positions up to 512."""
    return TransformerConfig(d_model=d_model, num_heads=num_heads, num_encoder_layers=num_layers,
                             num_decoder_layers=num_layers, d_ff=d_ff, dropout=dropout, max_len=512,
                             attention=attention)


def random_batch(batch, src_len, tgt_len, vocab, device, generator):
    """A batch of random ids whose sentences have their own lengths (``len // 2`` to ``len``), padded with 0.

    Shape:
        output: ``src (batch, src_len)``, ``tgt (batch, tgt_len)``, ``labels (batch, tgt_len)``.
    """
    src = torch.randint(4, vocab, (batch, src_len), generator=generator)
    tgt = torch.randint(4, vocab, (batch, tgt_len), generator=generator)
    labels = torch.randint(4, vocab, (batch, tgt_len), generator=generator)
    # Realistic padding: every sentence has its own length.
    src_lengths = torch.randint(src_len // 2, src_len + 1, (batch,), generator=generator)
    tgt_lengths = torch.randint(tgt_len // 2, tgt_len + 1, (batch,), generator=generator)
    src[torch.arange(src_len)[None, :] >= src_lengths[:, None]] = 0
    tgt[torch.arange(tgt_len)[None, :] >= tgt_lengths[:, None]] = 0
    labels[tgt == 0] = 0
    return src.to(device), tgt.to(device), labels.to(device)


def _clock(name, device):
    """``"wall"``: ``time.perf_counter``; ``"cpu"``: the process's CPU time (steadier on a
    shared machine; CPU only, and meaningful with few threads)."""
    if name not in ("wall", "cpu"):
        raise ValueError(f"clock must be 'wall' or 'cpu', got {name!r}")
    if name == "cpu" and device.type == "cuda":
        raise ValueError("clock='cpu' measures CPU work; use 'wall' on CUDA")
    return time.perf_counter if name == "wall" else time.process_time


def bench_training_step(d_model=256, num_heads=8, num_layers=3, d_ff=1024, batch=32, src_len=32, tgt_len=32,
                        vocab=2000, dropout=0.1, repeats=10, warmup=2, device="cpu", bf16=False, clock="wall"):
    """Training-step times of three models, interleaved: ours fused, ours with separate
    q/k/v projections, and ``torch.nn.Transformer``.

    All three have the same sizes, initial weights where they share a layout (ours),
    batch, masks, loss (label smoothing 0.1) and optimizer (Adam); every repetition
    runs one step of each, in rotating order, so all see the same machine load.

    Returns:
        A dict with the median step time (s) and training tokens per second of each
        (``ours``: fused, ``separate``, ``torch``), ``ratio`` = the median of the
        per-repetition ``torch / ours`` times (> 1 = ours is faster),
        ``packing_ratio`` = the median of ``separate / ours`` (> 1 = packing helps),
        and the sizes. Tokens = non-padding source + target tokens of the batch.
    """
    device = torch.device(device)
    now = _clock(clock, device)

    def ours(fused):
        torch.manual_seed(0)
        # The fast path (SDPA, packed projections, FastDropout), or the same with chapter 5's separate projections.
        attention = "fused" if fused else "readable"
        model = _sizes(d_model, num_heads, num_layers, d_ff, dropout, attention).build(vocab, vocab)
        return model if fused else use_fast_dropout(model.set_fused(True))

    torch.manual_seed(0)
    theirs = TorchTransformerBaseline(vocab, vocab, d_model, num_heads, num_layers, num_layers, d_ff, dropout)
    models = {"ours": ours(True), "separate": ours(False), "torch": theirs}
    models = {name: model.to(device).train() for name, model in models.items()}
    optimizers = {name: torch.optim.Adam(m.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
                  for name, m in models.items()}
    src, tgt, labels = random_batch(batch, src_len, tgt_len, vocab, device, torch.Generator().manual_seed(1))
    src_mask, tgt_mask = padding_mask(src), decoder_mask(tgt)  # True = may attend
    src_pad, tgt_pad = src == 0, tgt == 0  # True = padding (PyTorch's convention)

    def step(name):
        model, optimizer = models[name], optimizers[name]
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bf16):
            if name == "torch":
                logits = model(src, tgt, src_pad, tgt_pad)
            else:
                logits = model(src, tgt, src_mask, tgt_mask)
        loss = F.cross_entropy(logits.float().reshape(-1, vocab), labels.reshape(-1), ignore_index=0,
                               label_smoothing=0.1)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    names = list(models)
    times = {name: [] for name in names}
    for repeat in range(warmup + repeats):
        shift = repeat % len(names)
        for name in names[shift:] + names[:shift]:  # rotate who goes first
            _sync(device)
            start = now()
            step(name)
            _sync(device)
            if repeat >= warmup:
                times[name].append(now() - start)
    tokens = int((tgt != 0).sum()) + int((src != 0).sum())
    result = {}
    for name in names:
        result[f"{name}_s"] = statistics.median(times[name])
        result[f"{name}_tokens_per_s"] = tokens / result[f"{name}_s"]
    result["ratio"] = statistics.median([t / o for o, t in zip(times["ours"], times["torch"])])
    result["packing_ratio"] = statistics.median([s / o for o, s in zip(times["ours"], times["separate"])])
    result["sizes"] = dict(d_model=d_model, num_heads=num_heads, layers=num_layers, d_ff=d_ff, batch=batch,
                           src_len=src_len, tgt_len=tgt_len, vocab=vocab, dropout=dropout)
    return result


def bench_kv_cache(d_model=256, num_heads=8, num_layers=3, d_ff=1024, batch=32, src_len=24, new_tokens=64,
                   vocab=2000, repeats=3, device="cpu", clock="wall"):
    """Median ratios of greedy-decoding times, without a cache / with one (> 1 = the cache helps).

    The caches: the growing one of chapter 10 (``"cached_s"``, ``"ratio"``), the fixed-shape
    one of :mod:`solutions.app.inference` (``"static_s"``, ``"static_ratio"``) and, on CUDA,
    that one replayed as a CUDA graph (``"graph_s"``, ``"graph_ratio"``; None elsewhere). All
    take turns, repetition by repetition. ``"same_tokens"``: every way gave the same tokens.
    """
    device = torch.device(device)
    now = _clock(clock, device)
    torch.manual_seed(0)
    model = _sizes(d_model, num_heads, num_layers, d_ff, 0.0).build(vocab, vocab).to(device).eval()
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
            _sync(device)
            start = now()
            outputs[name] = ways[name]()
            _sync(device)
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
    now = _clock(clock, device)
    torch.manual_seed(0)
    model = _sizes(d_model, num_heads, num_layers, d_ff, 0.0).build(vocab, vocab).to(device).eval()
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
            _sync(device)
            start = now()
            count = runs[name]()
            _sync(device)
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
    now = _clock(clock, device)
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
        _sync(device)
        start = now()
        outputs[name] = translate(model, texts, src_tok, tgt_tok, beam_size=beam, max_len=max_len,
                                  batch_size=batch, device=device, use_cache=cache, **decoders)
        _sync(device)
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
    now = _clock(clock, device)
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


def bench_base_mfu(batch=64, seq_len=64, vocab=37000, repeats=10, device="cuda", compile=False, warmup=3):
    """Tokens per second and MFU of the paper's base model (bf16 autocast, Adam) on a CUDA GPU.

    Model FLOPs per step: ``6 * parameters * tokens`` for the matrix products, plus the
    attention scores and weighted sums (``12 * layers_attn * d_model * T²`` per sequence,
    forward and backward). With ``compile`` the model runs through ``torch.compile``
    (the fixed shapes compile once, in the warm-up steps, timed apart as
    ``"compile_s"``). Returns ``None`` off CUDA.

    Args:
        batch, seq_len: sentence pairs per step and their source and target length.
        vocab: the shared vocabulary (37,000 BPE tokens in the paper's EN-DE run).
        repeats: timed steps (the median is reported); warmup: untimed steps before.
        compile: ``torch.compile`` the model.
    """
    device = torch.device(device)
    if device.type != "cuda":
        return None
    torch.manual_seed(0)
    model = PAPER_CONFIGS["base"].replace(share_embeddings=True, max_len=512).build(vocab, vocab).to(device)
    runner = torch.compile(model) if compile else model
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)
    src, tgt, labels = random_batch(batch, seq_len, seq_len, vocab, device, torch.Generator().manual_seed(3))
    src_mask, tgt_mask = padding_mask(src), decoder_mask(tgt)
    torch.cuda.reset_peak_memory_stats(device)
    times = []
    warm_start = time.perf_counter()
    for repeat in range(repeats + warmup):
        if repeat == warmup:
            warmup_s = time.perf_counter() - warm_start
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            logits = runner(src, tgt, src_mask, tgt_mask)
        loss = F.cross_entropy(logits.float().reshape(-1, vocab), labels.reshape(-1), ignore_index=0)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        torch.cuda.synchronize(device)
        if repeat >= warmup:
            times.append(time.perf_counter() - start)
    step = statistics.median(times)
    tokens = batch * seq_len * 2  # source + target positions
    d_model = config.d_model
    # Encoder self-attention, decoder self- and cross-attention: 3 attention blocks per layer pair.
    attention_flops = 12 * 3 * config.num_encoder_layers * d_model * seq_len ** 2 * batch
    flops = 6 * count_parameters(model) * tokens + attention_flops
    name = torch.cuda.get_device_name(device)
    peak = next((value for key, value in _PEAK_BF16.items() if key in name), None)
    return {
        "device": name, "batch": batch, "seq_len": seq_len, "compile": compile, "step_s": step,
        "tokens_per_s": tokens / step, "tflops": flops / step / 1e12,
        "mfu": None if peak is None else flops / step / peak,
        "compile_s": warmup_s if compile else None,
        "peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2 ** 30,
    }


def run_benchmarks(quick=False, device="auto", json_path=None, clock="wall", threads=None, out=print,
                   checkpoint=None, corpus=None, sentences=None):
    """Run the benchmarks and print a table (``out`` receives each line); returns the results.

    Args:
        quick: tiny sizes and few repetitions (a smoke test, seconds).
        device: ``"auto"``, ``"cpu"``, ``"cuda"``.
        json_path: also write the results there.
        clock: ``"wall"`` or ``"cpu"`` (process CPU time, for a shared CPU machine).
        threads: ``torch.set_num_threads`` for the run (default: leave as is).
        out: called with each line of the table.
        checkpoint, corpus, sentences: of :func:`bench_user_translation` (default 1,000
            generated sentences, 16 with ``quick``).
    """
    device = resolve_device(device)
    previous_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _run(quick, device, json_path, clock, out, checkpoint, corpus, sentences)
    finally:
        torch.set_num_threads(previous_threads)


def _run(quick, device, json_path, clock, out, checkpoint=None, corpus=None, sentences=None):
    if quick:
        sizes = dict(d_model=32, num_heads=2, num_layers=1, d_ff=64, vocab=100)
        train = bench_training_step(batch=4, src_len=8, tgt_len=8, repeats=3, warmup=1, device=device,
                                    clock=clock, **sizes)
        cache = bench_kv_cache(batch=2, src_len=6, new_tokens=8, repeats=1, device=device, clock=clock, **sizes)
        translation = bench_translation(sentences=4, batch=2, src_len=6, new_tokens=4, beam_sentences=2,
                                        repeats=1, device=device, clock=clock, **sizes)
        user = bench_user_translation(checkpoint, corpus, sentences or 16, max_len=None if checkpoint else 6,
                                      device=device, clock=clock)
    else:
        train = bench_training_step(device=device, bf16=device.type == "cuda",
                                    repeats=30 if device.type == "cuda" else 10, clock=clock)
        cache = bench_kv_cache(device=device, clock=clock)
        translation = bench_translation(device=device, clock=clock)
        user = bench_user_translation(checkpoint, corpus, sentences or 1000, device=device, clock=clock)
    results = {"device": str(device), "threads": torch.get_num_threads(), "clock": clock,
               "training_step": train, "kv_cache": cache, "translation": translation, "user_translation": user}
    sizes = ", ".join(f"{key} {value}" for key, value in train["sizes"].items())
    out(f"device {device} ({torch.get_num_threads()} threads, {clock} clock){' [quick]' if quick else ''}")
    out(f"training step (forward, backward, Adam), {sizes}")
    out(f"  solutions.Transformer, fused q/k/v:    {train['ours_s'] * 1e3:8.1f} ms  {train['ours_tokens_per_s']:8.0f} tok/s")
    out(f"  solutions.Transformer, separate q/k/v: {train['separate_s'] * 1e3:8.1f} ms  "
        f"{train['separate_tokens_per_s']:8.0f} tok/s")
    out(f"  torch.nn.Transformer:                  {train['torch_s'] * 1e3:8.1f} ms  {train['torch_tokens_per_s']:8.0f} tok/s")
    out(f"  throughput ratio ours/torch (median of interleaved runs): {train['ratio']:.2f}x  (target >= 1.1x)")
    out(f"  fused/separate q/k/v (median of interleaved runs):        {train['packing_ratio']:.2f}x")
    out(f"greedy decoding, {cache['new_tokens']} new tokens, same tokens every way: {cache['same_tokens']}")
    out(f"  without cache {cache['plain_s'] * 1e3:8.1f} ms")
    out(f"  growing cache {cache['cached_s'] * 1e3:8.1f} ms: {cache['ratio']:.2f}x faster (target >= 3x)")
    out(f"  fixed cache   {cache['static_s'] * 1e3:8.1f} ms: {cache['static_ratio']:.2f}x faster")
    if cache["graph_s"] is not None:
        out(f"  fixed cache, CUDA graph {cache['graph_s'] * 1e3:8.1f} ms: {cache['graph_ratio']:.2f}x faster")
    t = translation["sizes"]
    out(f"translation, sources of {t['src_len'] // 2}-{t['src_len']} tokens, {t['new_tokens']} new tokens each")
    out(f"  greedy, batches of {t['batch']}, key/value cache: {translation['greedy_sentences_per_s']:8.1f} sentences/s")
    out(f"  beam {t['beam_size']}, one sentence at a time:    {translation['beam_sentences_per_s']:8.1f} sentences/s")
    what = f"{user['sentences']} sentences, {user['corpus']}, " + (user["checkpoint"] or "untrained multi30k-cpu model")
    out(f"translate ({what})")
    out(f"  greedy, batches of {user['batch']}, key/value cache: {user['greedy_cached_sentences_per_s']:8.1f} sentences/s")
    out(f"  greedy, batches of {user['batch']}, no cache:        {user['greedy_uncached_sentences_per_s']:8.1f} sentences/s"
        f"  (cache {user['cache_ratio']:.2f}x, same translations: {user['same_translations']})")
    out(f"  beam {user['beam_size']}, one sentence at a time:     {user['beam_sentences_per_s']:8.1f} sentences/s")
    out(f"  beam {user['beam_size']}, batches of {user['batch']}:            {user['beam_batched_sentences_per_s']:8.1f} "
        f"sentences/s  (batched {user['beam_batch_ratio']:.2f}x, same translations: {100 * user['beam_same']:.1f} %)")
    if device.type == "cpu":
        engine = bench_ctranslate2(checkpoint, corpus, sentences or (16 if quick else 1000), clock=clock,
                                   max_len=None if checkpoint or not quick else 6)
        results["ctranslate2"] = engine
        if engine is None:
            out("ours vs CTranslate2: skipped (pip install ctranslate2)")
        else:
            out(f"ours vs CTranslate2 on the same weights ({engine['sentences']} sentences, sentences/s; "
                f"greedy translations equal: {100 * engine['greedy_same']:.1f} %)")
            for row in engine["rows"]:
                scores = "" if row["ours_bleu"] is None else \
                    f"  BLEU ours {row['ours_bleu']:.2f}, CTranslate2 {row['ctranslate2_bleu']:.2f}"
                out(f"  {row['decoding']:<7} {row['threads']} thread{'s' if row['threads'] > 1 else ' '}  ours "
                    f"{row['ours_sentences_per_s']:8.1f}  CTranslate2 {row['ctranslate2_sentences_per_s']:8.1f}  "
                    f"ours/CTranslate2 {row['ratio']:.2f}x  equal {100 * row['same']:5.1f} %{scores}")
    if device.type == "cuda" and not quick:
        # The base model at a batch that fills an 80 GB card (about 40 GiB at its peak), eager and compiled.
        rows = [bench_base_mfu(batch=BASE_BATCH[0], seq_len=BASE_BATCH[1], device=device, compile=compiled)
                for compiled in (False, True)]
        results["base_mfu"] = rows[-1]
        results["base_mfu_eager"] = rows[0]
        out(f"base model, bf16 autocast + Adam, on {rows[0]['device']}: batch {BASE_BATCH[0]} x {BASE_BATCH[1]} "
            f"tokens per side")
        for mfu in rows:
            utilisation = "n/a (unknown peak)" if mfu["mfu"] is None else f"{100 * mfu['mfu']:.1f}%"
            how = f"torch.compile (compiled in {mfu['compile_s']:.0f} s)" if mfu["compile"] else "eager"
            out(f"  {how:<36} {mfu['step_s'] * 1e3:7.1f} ms/step {mfu['tokens_per_s']:9.0f} tok/s "
                f"{mfu['tflops']:6.1f} TFLOP/s  MFU {utilisation}  peak {mfu['peak_memory_gib']:.1f} GiB")
    if json_path:
        with open(json_path, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=1, default=lambda value: None if isinstance(value, float) and math.isnan(value) else str(value))
    return results
