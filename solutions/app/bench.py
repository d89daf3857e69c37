"""Benchmarks of the reference package, always as ratios measured side by side in one run.

1. **Training step** (forward + backward + Adam step, dropout 0.1, label smoothing 0.1)
   of :class:`solutions.Transformer` as the trainer runs it: the fast path (packed q/k/v
   projections, ``F.scaled_dot_product_attention`` and dropout masks from 16-bit draws,
   :mod:`solutions.fused`) on the rows of real tokens only (:mod:`solutions.packing`);
   against the same model on the padded batch, the padded model with separate q/k/v
   projections, and ``torch.nn.Transformer`` of the same sizes wrapped in the same
   embeddings, positional encoding and output projection, on the same batch and masks
   (computing every padded position, as its users call it). The four take turns,
   repetition by repetition, so all see the same machine load; the ratios are medians of
   the per-repetition ratios (> 1 = ours is faster). Training tokens per second count the
   non-padding source and target tokens.
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
import json
import math

import torch

from .bench_decoding import (MULTI30K_TEST_LENGTHS, bench_ctranslate2, bench_kv_cache, bench_translation,
                             bench_user_translation, generated_sentences)
from .bench_setup import TorchTransformerBaseline, random_batch
from .bench_training import BASE_BATCH, bench_base_mfu, bench_training_step
from .device import resolve_device

# Each benchmark lives with what it measures (bench_training, bench_decoding; what they share
# in bench_setup); this module runs them all and prints the table, and names them too.
__all__ = ["TorchTransformerBaseline", "random_batch", "bench_training_step", "bench_kv_cache", "bench_translation",
           "bench_ctranslate2", "bench_base_mfu", "bench_user_translation", "generated_sentences",
           "MULTI30K_TEST_LENGTHS", "run_benchmarks"]


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
    out(f"  solutions.Transformer, packed rows:    {train['ours_s'] * 1e3:8.1f} ms  "
        f"{train['ours_tokens_per_s']:8.0f} tok/s  (fused q/k/v; the trainer's step)")
    out(f"  the same on the padded batch:          {train['padded_s'] * 1e3:8.1f} ms  "
        f"{train['padded_tokens_per_s']:8.0f} tok/s  ({100 * train['padding']:.0f} % of the positions are padding)")
    out(f"  padded, separate q/k/v:                {train['separate_s'] * 1e3:8.1f} ms  "
        f"{train['separate_tokens_per_s']:8.0f} tok/s")
    out(f"  torch.nn.Transformer (padded):         {train['torch_s'] * 1e3:8.1f} ms  "
        f"{train['torch_tokens_per_s']:8.0f} tok/s")
    out(f"  throughput ratio ours/torch (median of interleaved runs): {train['ratio']:.2f}x  (goal >= 1.5x)")
    out(f"  packed rows/padded (median of interleaved runs):          {train['unpadding_ratio']:.2f}x")
    out(f"  fused/separate q/k/v, padded (median of interleaved runs): {train['packing_ratio']:.2f}x")
    out(f"greedy decoding, {cache['new_tokens']} new tokens, same tokens every way: {cache['same_tokens']}")
    out(f"  without cache {cache['plain_s'] * 1e3:8.1f} ms")
    out(f"  growing cache {cache['cached_s'] * 1e3:8.1f} ms: {cache['ratio']:.2f}x faster (goal >= 5x)")
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
