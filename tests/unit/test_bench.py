"""Smoke test of the benchmarks (no assertion on time: only that they run and report)."""
import json

import pytest
import torch

from solutions.app.bench import run_benchmarks
from solutions.app.cli import main


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_quick_bench_reports_ratios(tmp_path):
    lines = []
    results = run_benchmarks(quick=True, device="cpu", json_path=tmp_path / "bench.json", out=lines.append)
    train = results["training_step"]
    assert train["ratio"] > 0 and train["packing_ratio"] > 0 and train["unpadding_ratio"] > 0
    assert results["kv_cache"]["ratio"] > 0
    for name in ("ours", "padded", "separate", "torch"):  # four contestants, each timed
        assert train[f"{name}_s"] > 0 and train[f"{name}_tokens_per_s"] > 0
    assert results["kv_cache"]["same_tokens"] is True and results["kv_cache"]["new_tokens"] == 8
    translation = results["translation"]
    assert translation["greedy_sentences_per_s"] > 0 and translation["beam_sentences_per_s"] > 0
    text = "\n".join(lines)
    for words in ("throughput ratio ours/torch", "packed rows/padded", "fused/separate q/k/v", "tok/s", "sentences/s",
                  "beam 4"):
        assert words in text
    stored = json.loads((tmp_path / "bench.json").read_text())
    assert stored["training_step"]["ratio"] == pytest.approx(train["ratio"])
    assert stored["translation"]["beam_sentences_per_s"] == pytest.approx(translation["beam_sentences_per_s"])
    user = results["user_translation"]
    assert user["sentences"] == 16 and user["same_translations"] is True and user["beam_sentences_per_s"] > 0
    assert "translate (16 sentences, generated (Multi30k test 2016 word counts)" in text


def test_training_bench_times_packed_rows_the_padded_fused_and_the_separate_path(monkeypatch):
    """The 'ours' and 'padded' models are on the fast path (TransformerConfig(attention="fused"):
    every attention module fused), 'ours' stepping on packed rows as the trainer does; the
    'separate' one runs chapter 5's class on its SDPA path (set_fused); all without attention
    weights (need_weights False), and all with the fast path's dropout, so that padded/ours is
    the unpadding's gain alone and separate/padded the packed projections' alone."""
    import solutions.app.bench_training as bench_training
    from solutions import MultiHeadAttention, TransformerConfig
    from solutions.fused import FastDropout, FusedMultiHeadAttention

    built, packed = [], []
    build = TransformerConfig.build
    packed_logits = bench_training.packed_logits

    def recorded(config, *args):
        built.append(build(config, *args))
        return built[-1]

    monkeypatch.setattr(TransformerConfig, "build", recorded)
    monkeypatch.setattr(bench_training, "packed_logits", lambda model, *a: packed.append(model) or
                        packed_logits(model, *a))
    result = bench_training.bench_training_step(d_model=16, num_heads=2, num_layers=1, d_ff=32, batch=2, src_len=4,
                                                tgt_len=4, vocab=20, repeats=2, warmup=1)
    attention = [[m for m in model.modules() if isinstance(m, MultiHeadAttention)] for model in built]
    assert [{type(m) for m in modules} for modules in attention] == [{FusedMultiHeadAttention}] * 2 + \
        [{MultiHeadAttention}]
    assert all(not m.need_weights for modules in attention for m in modules)
    dropouts = [{type(m) for m in model.modules() if isinstance(m, torch.nn.Dropout)} for model in built]
    assert dropouts == [{FastDropout}] * 3
    assert len(packed) == 3 and all(model is built[0] for model in packed)  # 'ours', every step
    assert result["unpadding_ratio"] > 0 and 0 < result["padding"] < 1
    assert result["padded_s"] > 0 and result["padded_tokens_per_s"] > 0


def test_generated_sentences_have_multi30k_test_lengths():
    from collections import Counter

    from solutions.app.bench import MULTI30K_TEST_LENGTHS, generated_sentences

    sentences = generated_sentences(1000, seed=1)
    assert Counter(len(s.split()) - 1 for s in sentences) == Counter(MULTI30K_TEST_LENGTHS)  # - 1: the final "."
    assert sentences == generated_sentences(1000, seed=1) != generated_sentences(1000, seed=2)
    assert all(len(s.split()) - 1 in MULTI30K_TEST_LENGTHS for s in generated_sentences(50))


def test_user_translation_bench_reads_a_corpus_and_compares_the_cache(tmp_path):
    from solutions.app.bench import bench_user_translation

    corpus = tmp_path / "test.tsv"
    corpus.write_text("".join(f"ein hund läuft {i} mal .\ta dog runs {i} times .\n" for i in range(7)),
                      encoding="utf-8")
    result = bench_user_translation(corpus=str(corpus), sentences=5, max_len=4, beam_size=2)
    assert result["sentences"] == 5 and result["corpus"] == str(corpus) and result["checkpoint"] is None
    assert result["same_translations"] is True
    for name in ("greedy_cached", "greedy_uncached", "beam", "beam_batched"):
        assert result[f"{name}_sentences_per_s"] > 0
    assert result["cache_ratio"] == pytest.approx(result["greedy_cached_sentences_per_s"]
                                                  / result["greedy_uncached_sentences_per_s"])
    assert result["beam_batch_ratio"] == pytest.approx(result["beam_batched_sentences_per_s"]
                                                       / result["beam_sentences_per_s"])
    assert result["beam_same"] == 1.0  # the batched beam search gives chapter 10's translations


def test_bench_refuses_a_missing_translation_corpus(tmp_path, capsys):
    assert main(["bench", "--quick", "--translation-corpus", str(tmp_path / "none.tsv")]) == 2
    assert "--translation-corpus: no such file" in capsys.readouterr().err


def test_ctranslate2_bench_runs_the_cli_decoders_and_scores_against_the_references(tmp_path, monkeypatch):
    """Ours runs the command line's decoders (the batched beam search, not one sentence at a
    time); a TSV corpus's references score both engines, a plain-text corpus scores none."""
    pytest.importorskip("ctranslate2")
    import solutions.app.bench_decoding as bench
    from solutions.app.inference import decoders_for

    beams = []

    def recorded(device):
        decoders = decoders_for(device)
        beam = decoders["beam"]
        decoders["beam"] = lambda model, src, *args, **kwargs: beams.append(src.size(0)) or beam(model, src, *args,
                                                                                                 **kwargs)
        return decoders

    monkeypatch.setattr(bench, "decoders_for", recorded)
    corpus = tmp_path / "test.tsv"
    corpus.write_text("".join(f"ein hund läuft {i} mal .\ta dog runs {i} times .\n" for i in range(7)),
                      encoding="utf-8")
    result = bench.bench_ctranslate2(corpus=str(corpus), sentences=5, beam_size=2, max_len=4, threads=(1,))
    assert [row["decoding"] for row in result["rows"]] == ["greedy", "beam 2"] and result["sentences"] == 5
    assert beams == [5]  # one batch of all five sentences
    for row in result["rows"]:
        assert row["ours_sentences_per_s"] > 0 and row["ctranslate2_sentences_per_s"] > 0
        assert 0 <= row["ours_bleu"] <= 100 and 0 <= row["ctranslate2_bleu"] <= 100 and 0 <= row["same"] <= 1
    plain = tmp_path / "test.de"
    plain.write_text("ein hund läuft .\nzwei hunde laufen .\n", encoding="utf-8")
    rows = bench.bench_ctranslate2(corpus=str(plain), sentences=2, beam_size=2, max_len=4, threads=(1,))["rows"]
    assert all(row["ours_bleu"] is None and row["ctranslate2_bleu"] is None for row in rows)


def test_the_profile_steps_ours_on_packed_rows_as_the_trainer_does(monkeypatch):
    """``bench --profile``: ours is profiled on the path the trainer steps (packed rows), torch.nn
    padded; each report lists operators with their share of the step."""
    import solutions.app.profiling as profiling

    packed = []
    packed_logits = profiling.packed_logits
    monkeypatch.setattr(profiling, "packed_logits", lambda model, *a: packed.append(model) or
                        packed_logits(model, *a))
    sizes = dict(d_model=16, num_heads=2, num_layers=1, d_ff=32, batch=2, src_len=4, tgt_len=4, vocab=20,
                 norm_first=False)
    result = profiling.profile_training_step(sizes, steps=1, warmup=1, top=5)
    assert len(packed) == 2 and len({id(model) for model in packed}) == 1  # warm-up and profiled step, ours
    for name in ("ours", "torch"):
        ops = result[name]["ops"]
        assert 0 < len(ops) <= 5 and all(0 < op["share"] <= 1 for op in ops) and result[name]["total_ms"] > 0
    lines = profiling.format_profile(result)
    assert any("packed rows" in line for line in lines) and any("torch.nn.Transformer" in line for line in lines)
