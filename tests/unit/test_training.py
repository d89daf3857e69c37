"""Tests of solutions.training (chapter 9 objects) and the application's training (solutions.app.trainer:
the loop; config, schedule, checkpoint, evaluation)."""
import dataclasses
import math
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from solutions.app import device as device_module
from solutions.app import progress as progress_module
from solutions.app.batching import collate_batch, training_data
from solutions.app.checkpoint import CheckpointError, Checkpointer, load_checkpoint, model_from_checkpoint, \
    stored_config
from solutions.app.config import PRESETS, TrainConfig
from solutions.app.evaluation import Evaluator, batch_loss
from solutions.app.history import RunHistory
from solutions.app.progress import TrainingProgress
from solutions.app.synthetic import make_synthetic_splits
from solutions.app.tokenizer import build_tokenizer
from solutions.app.trainer import Trainer
from solutions.configuration import ConfigError, TransformerConfig
from solutions.masking import decoder_mask, padding_mask
from solutions.training import label_smoothed_cross_entropy, make_decoder_io, noam_lr


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_make_decoder_io():
    decoder_input, labels = make_decoder_io([[5, 6], [7], [8, 9, 10]])
    assert decoder_input.tolist() == [[1, 5, 6, 0], [1, 7, 0, 0], [1, 8, 9, 10]]
    assert labels.tolist() == [[5, 6, 2, 0], [7, 2, 0, 0], [8, 9, 10, 2]]
    assert decoder_input.dtype == labels.dtype == torch.long
    decoder_input, labels = make_decoder_io([[4]], sos_id=7, eos_id=8, pad_id=9)
    assert decoder_input.tolist() == [[7, 4]] and labels.tolist() == [[4, 8]]
    decoder_input, labels = make_decoder_io([[], [5]])
    assert decoder_input.tolist() == [[1, 0], [1, 5]] and labels.tolist() == [[2, 0], [5, 2]]
    with pytest.raises(ValueError):
        make_decoder_io([])


def test_make_decoder_io_random_targets_shift_by_one():
    rng = random.Random(0)
    targets = [[rng.randrange(4, 50) for _ in range(rng.randrange(0, 9))] for _ in range(7)]
    decoder_input, labels = make_decoder_io(targets)
    longest = max(len(t) for t in targets)
    assert decoder_input.shape == labels.shape == (7, longest + 1)
    for row, target in enumerate(targets):
        n = len(target)
        assert decoder_input[row, 1:n + 1].tolist() == labels[row, :n].tolist() == target
        assert (labels[row, n + 1:] == 0).all() and (decoder_input[row, n + 1:] == 0).all()


def test_noam_lr():
    d_model, warmup = 512, 4000
    assert noam_lr(warmup, d_model, warmup) == pytest.approx(d_model ** -0.5 * warmup ** -0.5)
    assert noam_lr(1, d_model, warmup) == pytest.approx(d_model ** -0.5 * warmup ** -1.5)
    assert noam_lr(100, d_model, warmup, factor=2.0) == pytest.approx(2 * 100 * d_model ** -0.5 * warmup ** -1.5)
    rates = [noam_lr(s, d_model, warmup) for s in range(1, 20000, 50)]
    peak = int(np.argmax(rates))
    assert abs((1 + 50 * peak) - warmup) <= 50
    assert noam_lr(16000, d_model, warmup) == pytest.approx(d_model ** -0.5 / math.sqrt(16000))
    with pytest.raises(ValueError):
        noam_lr(0, d_model, warmup)


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_label_smoothed_cross_entropy_matches_torch(smoothing):
    logits = torch.randn(3, 5, 11, requires_grad=True)
    labels = torch.randint(1, 11, (3, 5))
    labels[0, 3:] = 0
    labels[2, 1:] = 0
    ours = label_smoothed_cross_entropy(logits, labels, smoothing)
    ref = F.cross_entropy(logits.reshape(-1, 11), labels.reshape(-1), label_smoothing=smoothing, ignore_index=0)
    assert ours.shape == () and torch.allclose(ours, ref, atol=1e-6)
    ours.backward()
    grad = logits.grad.clone()
    logits.grad = None
    ref.backward()
    assert torch.allclose(grad, logits.grad, atol=1e-6)
    assert torch.count_nonzero(grad[2, 1:]) == 0  # pad positions get no gradient


def test_label_smoothed_cross_entropy_bad_args():
    with pytest.raises(ValueError):
        label_smoothed_cross_entropy(torch.randn(2, 3, 4), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError):
        label_smoothed_cross_entropy(torch.randn(2, 3, 4), torch.ones(2, 3, dtype=torch.long), smoothing=1.0)


# -- the trainer -----------------------------------------------------------------------------

SMALL = TrainConfig(
    model=TransformerConfig(d_model=32, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=64, dropout=0.1,
                            max_len=32),
    batch_size=16, epochs=3, warmup_steps=10, lr_factor=1.0, eval_sentences=8,
    device="cpu", quiet=True, log_every=1, seed=11,
)


@pytest.fixture(scope="module")
def splits():
    return make_synthetic_splits(60, 10, 10, seed=5)


def test_presets_match_the_paper_base_model():
    base = PRESETS["base"]
    model = base.model
    assert (model.d_model, model.num_heads, model.num_encoder_layers, model.num_decoder_layers, model.d_ff) == (
        512, 8, 6, 6, 2048)
    assert (model.dropout, base.warmup_steps, base.label_smoothing) == (0.1, 4000, 0.1)
    assert PRESETS["tiny"].model.d_model < model.d_model


def test_trainer_lowers_the_loss_and_records_history(splits):
    train, valid, _ = splits
    trainer = Trainer(SMALL.replace(dropout=0.0, lr_factor=3.0), train, valid)
    history = trainer.train(epochs=3)
    losses = history["train"]["loss"]
    assert trainer.step == len(losses) == 12 and trainer.epoch == 3
    assert np.mean(losses[-3:]) < np.mean(losses[:3])
    valid_history = history["valid"]
    assert valid_history["epoch"] == [1, 2, 3]
    assert all(0.0 <= v <= 1.0 for v in valid_history["accuracy"] + valid_history["exact_match"])
    assert all(0.0 <= b <= 100.0 for b in valid_history["bleu"])
    # The schedule is the paper's: lr at step s is noam_lr(s + 1) after s steps.
    assert trainer.scheduler.get_last_lr()[0] == pytest.approx(noam_lr(13, 32, 10, 3.0))
    assert trainer.optimizer.defaults["betas"] == (0.9, 0.98) and trainer.optimizer.defaults["eps"] == 1e-9


def test_a_fused_model_trains_on_packed_rows_with_the_padded_step_s_losses_and_weights(splits, monkeypatch):
    """The trainer's steps leave the padding out (solutions.packing) on the fused path and only
    there; with dropout off they give the padded steps' losses and weights (float32 rounding)."""
    import solutions.app.trainer as trainer_module

    train, valid, _ = splits
    calls = []
    packed_logits = trainer_module.packed_logits
    monkeypatch.setattr(trainer_module, "packed_logits", lambda *a: calls.append(1) or packed_logits(*a))
    config = SMALL.replace(dropout=0.0)
    packed, padded = Trainer(config, train, valid), Trainer(config.replace(attention="readable"), train, valid)
    assert packed.packed_rows and not padded.packed_rows
    losses = {name: trainer.train(max_steps=3)["train"]["loss"] for name, trainer in (("packed", packed),
                                                                                      ("padded", padded))}
    assert len(calls) == 3  # the packed trainer's steps, and no other
    assert losses["packed"] == pytest.approx(losses["padded"], rel=1e-5)
    for (name, p), q in zip(packed.model.named_parameters(), padded.model.parameters()):
        if name.endswith("w_k.bias"):  # its gradient is 0 up to rounding (the softmax ignores a shift of
            continue  # a query's scores), and Adam scales that rounding noise up to a full step
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")
    packed.model.set_fused(False)  # the readable path, e.g. to plot the weights: steps padded again
    assert not packed.packed_rows
    packed.train_step(collate_batch([packed.train_data[i] for i in range(4)]))
    assert len(calls) == 3


def test_checkpoint_resumes_exactly(splits, tmp_path):
    train, valid, _ = splits
    straight = Trainer(SMALL, train, valid)
    straight.train(max_steps=10)  # 4 batches per epoch: ends mid-epoch 3

    first = Trainer(SMALL, train, valid)
    first.train(max_steps=6)  # stops inside epoch 2
    path = first.save_checkpoint(tmp_path / "ckpt.pt")
    del first
    # A fresh process state: different RNG states everywhere.
    random.seed(123)
    np.random.seed(123)
    torch.manual_seed(123)
    resumed = Trainer.from_checkpoint(path, train, valid)
    assert (resumed.step, resumed.epoch, resumed.batch_in_epoch) == (6, 1, 2)
    resumed.train(max_steps=10)

    for (name, a), (_, b) in zip(straight.model.named_parameters(), resumed.model.named_parameters()):
        assert torch.equal(a, b), name
    assert straight.history["train"]["loss"] == resumed.history["train"]["loss"]
    assert straight.optimizer.state_dict()["state"][0]["exp_avg"].equal(
        resumed.optimizer.state_dict()["state"][0]["exp_avg"])


def test_checkpoint_has_config_and_vocabularies(splits, tmp_path):
    train, valid, _ = splits
    trainer = Trainer(SMALL, train, valid, out_dir=tmp_path)
    trainer.train(max_steps=2)
    state = load_checkpoint(tmp_path / "checkpoint.pt")
    assert state["config"]["model"]["d_model"] == 32 and state["src_tokenizer"]["kind"] == "word"
    model, src_tok, tgt_tok, config = model_from_checkpoint(tmp_path / "checkpoint.pt")
    assert config == SMALL and not model.training
    for a, b in zip(model.parameters(), trainer.model.parameters()):
        assert torch.equal(a, b)
    assert src_tok.vocab == trainer.src_tokenizer.vocab


def test_the_model_s_sizes_are_one_transformer_config(splits):
    """TrainConfig holds a TransformerConfig; replace() takes the model's fields by name and checks them."""
    assert isinstance(SMALL.model, TransformerConfig) and not hasattr(SMALL, "d_model")
    wider = SMALL.replace(d_model=64, num_heads=4, epochs=5)
    assert (wider.model.d_model, wider.model.num_heads, wider.epochs) == (64, 4, 5)
    assert wider.model.d_ff == SMALL.model.d_ff and SMALL.model.d_model == 32
    with pytest.raises(ConfigError, match="d_model 32 is not divisible by num_heads 3"):
        SMALL.replace(num_heads=3)
    with pytest.raises(TypeError, match="TransformerConfig"):
        TrainConfig(model={"d_model": 32})


def _flat(config):
    """The stored config as checkpoints wrote it before the model's sizes were nested."""
    stored = dataclasses.asdict(config)
    return {**stored.pop("model"), **stored}


def test_a_checkpoint_of_the_old_flat_config_still_loads(splits, tmp_path):
    train, valid, _ = splits
    assert TrainConfig.from_dict(_flat(SMALL)) == SMALL == TrainConfig.from_dict(dataclasses.asdict(SMALL))
    mixed = {**dataclasses.asdict(SMALL), "d_model": 32}
    with pytest.raises(ConfigError, match="both nested and flat") as raised:
        TrainConfig.from_dict(mixed)
    assert raised.value.fields == ("d_model",)
    with pytest.raises(CheckpointError, match="the checkpoint's config: .*both nested and flat"):
        stored_config({"config": mixed})  # how every reader of a checkpoint sees it
    trainer = Trainer(SMALL, train, valid)
    trainer.train(max_steps=2)
    state = trainer.state_dict()
    assert state["config"]["model"]["d_model"] == 32  # written nested
    state["config"] = _flat(SMALL)
    old = tmp_path / "old.pt"
    torch.save(state, old)
    model, _, _, config = model_from_checkpoint(old)
    assert config == SMALL
    for a, b in zip(model.parameters(), trainer.model.parameters()):
        assert torch.equal(a, b)
    resumed = Trainer.from_checkpoint(old, train, valid, epochs=4)
    assert resumed.config == SMALL.replace(epochs=4) and resumed.step == 2
    with pytest.raises(CheckpointError, match="d_model is 32 in the checkpoint, 64 requested"):
        Trainer.from_checkpoint(old, train, valid, d_model=64, num_heads=2)


def test_resume_with_a_different_model_config_fails(splits, tmp_path):
    train, valid, _ = splits
    trainer = Trainer(SMALL, train, valid)
    path = trainer.save_checkpoint(tmp_path / "c.pt")
    with pytest.raises(CheckpointError, match="d_model"):
        Trainer.from_checkpoint(path, train, valid, d_model=64)
    other = Trainer(SMALL.replace(num_heads=4), train, valid)
    with pytest.raises(CheckpointError, match="num_heads"):
        other.load_state_dict(load_checkpoint(path))
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError):
        load_checkpoint(tmp_path / "junk.pt")
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "missing.pt")


def test_cpu_bf16_runs_where_the_cpu_has_it_and_warns_where_it_would_be_emulated(splits, monkeypatch):
    train, valid, _ = splits
    monkeypatch.setattr(device_module, "cpu_has_bf16", lambda: False)
    with pytest.warns(UserWarning, match="bf16=True needs CUDA or a CPU with native bfloat16"):
        ignored = Trainer(SMALL.replace(bf16=True), train, valid)
    assert ignored.use_bf16 is False
    monkeypatch.setattr(device_module, "cpu_has_bf16", lambda: True)
    mixed, full = Trainer(SMALL.replace(bf16=True), train, valid), Trainer(SMALL, train, valid)
    assert mixed.use_bf16 is True and full.use_bf16 is False
    # The same seed gives the same weights; the forward pass under bfloat16 autocast (8 bits of
    # mantissa) gives the validation loss to about 1 %, and the weights stay float32.
    loss_bf16 = mixed.evaluate(valid[:32], max_sentences=0)["loss"]
    loss_fp32 = full.evaluate(valid[:32], max_sentences=0)["loss"]
    assert loss_bf16 != loss_fp32 and abs(loss_bf16 - loss_fp32) < 0.02 * loss_fp32
    mixed.train(max_steps=2)
    assert all(p.dtype == torch.float32 and torch.isfinite(p).all() for p in mixed.model.parameters())


def test_compile_warns_and_is_ignored_on_cpu(splits):
    train, valid, _ = splits
    with pytest.warns(UserWarning, match="compile=True applies on CUDA only"):
        trainer = Trainer(SMALL.replace(compile=True), train, valid)
    assert trainer.train_model is trainer.model


def test_bad_configs(splits):
    train, valid, _ = splits
    with pytest.raises(ValueError, match="unknown config"):
        SMALL.replace(d_modle=3)
    with pytest.raises(TypeError):
        Trainer({"d_model": 32}, train, valid)
    with pytest.raises(ValueError, match="empty"):
        Trainer(SMALL, [], valid)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            Trainer(SMALL.replace(device="cuda"), train, valid)


@pytest.mark.parametrize("change, field", [
    (dict(batch_size=0), "batch_size"), (dict(epochs=1.5), "epochs"), (dict(max_steps=0), "max_steps"),
    (dict(label_smoothing=1.0), "label_smoothing"), (dict(lr_peak=0), "lr_peak"), (dict(time_budget=-60), "time_budget"),
    (dict(schedule="cosine"), "schedule"), (dict(tokenizer="char"), "tokenizer"), (dict(bf16="yes"), "bf16"),
    (dict(beam_size=0), "beam_size"), (dict(threads=True), "threads"), (dict(device=""), "device"),
])
def test_a_train_config_checks_its_own_fields(change, field):
    """TrainConfig refuses a value its run cannot use, naming the field (the CLI turns it into a flag)."""
    with pytest.raises(ConfigError, match=field) as raised:
        SMALL.replace(**change)
    assert raised.value.fields == (field,)


def test_a_train_config_accepts_the_edges_that_mean_something():
    config = SMALL.replace(max_steps=None, clip_norm=None, time_budget=None, eval_sentences=0, warmup_steps=0,
                           average_last=0, progress_seconds=0, length_penalty=0.0, label_smoothing=0.0, threads=1)
    assert config.clip_norm is None and config.eval_sentences == 0
    for preset in PRESETS.values():
        assert TrainConfig.from_dict(dataclasses.asdict(preset)) == preset


def test_corpus_bleu_is_sacrebleu_and_warns_once(caplog):
    import sacrebleu

    from solutions.app.evaluation import CorpusBLEU

    references = [f"the dog number {i} sees the cat." for i in range(120)]
    hypotheses = [f"the dog number {i} sees a cat ." for i in range(120)]  # ends in " .": looks tokenised
    scorer = CorpusBLEU()
    with caplog.at_level("WARNING", logger="sacrebleu"):
        first = scorer(hypotheses, references)
        second = scorer(hypotheses, references)
        perfect = scorer(references, references)
    warned = [r for r in caplog.records if "tokenized period" in r.getMessage()]
    assert len(warned) == 1  # sacreBLEU's warning at the first evaluation only
    assert first == second == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references]).score)
    assert first < 100 and perfect == pytest.approx(100.0)
    assert scorer.signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    with pytest.raises(ValueError, match="one reference per hypothesis"):
        scorer(hypotheses, references[:-1])


def test_shared_vocab_trains_one_tokenizer_and_ties_the_embeddings(splits):
    from solutions.model import Transformer, count_parameters

    train, valid, _ = splits
    shared = Trainer(SMALL.replace(share_embeddings=True), train, valid)
    separate = Trainer(SMALL, train, valid)
    assert shared.src_tokenizer is shared.tgt_tokenizer
    vocab = len(shared.src_tokenizer)
    assert vocab == len(set(separate.src_tokenizer.vocab) | set(separate.tgt_tokenizer.vocab))
    model = shared.model
    assert model.src_embed.embedding.weight is model.tgt_embed.embedding.weight is model.generator.weight
    sizes = dict(d_model=32, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=64)
    untied = count_parameters(Transformer(vocab, vocab, **sizes))
    assert count_parameters(model) == untied - 2 * vocab * 32  # one (V, d_model) matrix instead of three
    shared.train(max_steps=2)
    assert model.src_embed.embedding.weight is model.generator.weight  # still one tensor after Adam steps


def test_progress_lines_off_a_terminal(splits, caplog):
    import re

    train, valid, _ = splits
    trainer = Trainer(SMALL.replace(quiet=False, progress_seconds=None, progress_steps=3, epochs=2), train, valid)
    with caplog.at_level("INFO", logger="solutions.app.trainer"):
        trainer.train()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step ")]
    pattern = (r"step (\d+)/8 epoch [12]/2 loss \d+\.\d{3} lr \d\.\d\de-\d\d \d+ tok/s "
               r"elapsed \d+(m\d\ds)?s? ETA (\d+(m\d\ds)?s?|\d+h\d\dm)")
    assert [int(re.fullmatch(pattern, line).group(1)) for line in lines] == [3, 6]  # 4 batches an epoch
    signatures = [r for r in caplog.records if "signature nrefs:1|" in r.getMessage()]
    assert len(signatures) == 1 and trainer.history["valid"]["epoch"] == [1, 2]  # two evaluations, one line
    caplog.clear()
    quiet = Trainer(SMALL.replace(progress_seconds=0), train, valid)  # quiet: no lines at all
    with caplog.at_level("INFO", logger="solutions.app.trainer"):
        quiet.train(max_steps=2)
    assert not caplog.records


def test_export_is_smaller_translates_the_same_and_cannot_be_resumed(splits, tmp_path):
    from solutions.translation import translate
    from solutions.app.checkpoint import export_checkpoint

    train, valid, _ = splits
    trainer = Trainer(SMALL, train, valid, out_dir=tmp_path)
    trainer.train(max_steps=3)
    full, small = tmp_path / "checkpoint.pt", tmp_path / "small.pt"
    assert export_checkpoint(full, small) == str(small)
    assert small.stat().st_size < 0.5 * full.stat().st_size  # no Adam moments, no history
    exported = load_checkpoint(small)
    assert "optimizer" not in exported and exported["config"] == load_checkpoint(full)["config"]
    sources = [s for s, _ in valid[:4]]
    outputs = []
    for path in (full, small):
        model, src_tok, tgt_tok, _ = model_from_checkpoint(path)
        outputs.append(translate(model, sources, src_tok, tgt_tok, max_len=6))
    assert outputs[0] == outputs[1]
    with pytest.raises(CheckpointError, match="inference-only export"):
        Trainer.from_checkpoint(small, train, valid)


def test_the_evaluator_averages_its_last_snapshots_only():
    config = PRESETS["tiny"].replace(average_last=2)
    evaluator = Evaluator(config, None, None, torch.device("cpu"))
    model = torch.nn.Linear(2, 1)
    assert evaluator.averaged(model) is None  # fewer than two snapshots
    for value in (1.0, 2.0, 4.0):
        with torch.no_grad():
            model.weight.fill_(value)
        evaluator.snapshot(model)
    assert len(evaluator.snapshots) == 2  # the last average_last kept
    averaged = evaluator.averaged(model)
    assert torch.equal(averaged["weight"], torch.full((1, 2), 3.0))  # (2 + 4) / 2, not the first
    assert evaluator.time_beam(model, []) is None  # nothing to time


def test_the_evaluator_times_the_beam_and_says_how_long_its_translations_ran(monkeypatch):
    """Seconds per sentence as decoded, and the references' length over the translations' (<eos> counted)."""
    import solutions.app.evaluation as evaluation

    class Words:  # a tokenizer of whitespace-separated words
        def encode(self, text):
            return text.split()

    decoded = []

    def fake_translate(model, sentences, src_tokenizer, tgt_tokenizer, beam_size, length_penalty, device, **options):
        decoded.append((list(sentences), beam_size, length_penalty, options))
        return ["a b c d e f g"] * len(sentences)  # 7 words + <eos> each: an untrained model's long outputs

    monkeypatch.setattr(evaluation, "translate", fake_translate)
    times = iter([10.0, 13.0])
    config = PRESETS["tiny"].replace(beam_size=4, length_penalty=1.5)
    evaluator = Evaluator(config, Words(), Words(), torch.device("cpu"), translate_options={"beam": "batched"},
                          clock=lambda: next(times))
    pairs = [("x", "one"), ("y", "one two three")]  # references: 2 + 4 tokens with <eos>
    seconds, ratio = evaluator.time_beam(torch.nn.Linear(1, 1), pairs)
    assert seconds == pytest.approx(1.5) and ratio == pytest.approx(6 / 16)
    assert decoded == [(["x", "y"], 4, 1.5, {"beam": "batched"})]  # decoded as the final decoding decodes


def test_the_checkpointer_keeps_the_best_bleu_and_writes_on_the_main_process_only(tmp_path):
    made = []
    main, other = Checkpointer(str(tmp_path)), Checkpointer(str(tmp_path / "other"), is_main=False)
    assert main.improves(10.0) and not main.improves(10.0) and not main.improves(math.nan) and main.improves(11.0)
    assert main.best_bleu == 11.0 and main.best_weights() is None  # no best.pt yet
    other.save(lambda: made.append(1) or {}, tmp_path / "other" / "checkpoint.pt")
    assert made == [] and not (tmp_path / "other").exists()  # not even made elsewhere than rank 0
    assert Checkpointer(None).path("best.pt") is None and Checkpointer(None).best_weights() is None


def test_the_run_history_keeps_points_every_log_every_steps_and_one_row_per_epoch():
    record = RunHistory(log_every=3)
    for step, loss in enumerate([4.0, 3.0, 2.0, 1.0], start=1):
        record.add_step(step, loss, lr=1e-3 * step, seconds=0.5 * step)
    assert record.curves["train"] == {"step": [1, 3], "loss": [4.0, 2.0], "lr": [1e-3, 3e-3], "time": [0.5, 1.5]}
    assert record.last_evaluated_step() is None
    metrics = {"loss": 2.34567, "accuracy": 0.5, "exact_match": 0.25, "bleu": 12.345}
    record.add_evaluation(4, 1, 2.0, metrics)
    assert record.curves["valid"] == {"step": [4], "epoch": [1], "loss": [2.34567], "accuracy": [0.5],
                                      "exact_match": [0.25], "bleu": [12.345], "time": [2.0]}
    assert record.last_evaluated_step() == 4
    row = record.end_epoch(1, 4, wall_seconds=90, metrics=metrics)
    assert row == {"epoch": 1, "step": 4, "minutes": 1.5, "train_loss": 2.5, "valid_loss": 2.3457,
                   "valid_bleu": 12.35} and record.epochs == [row]  # mean of the epoch's four steps
    assert record.end_epoch(2, 4, 120, metrics)["train_loss"] is None  # no step since: no mean
    record.load({"train": {}, "valid": {"step": [7]}}, None)  # a checkpoint without epoch rows
    assert record.last_evaluated_step() == 7 and record.epochs == []


def test_training_data_drops_pairs_longer_than_the_model_and_shards_the_batches():
    pairs = [("a b c", "x y"), ("a " * 40, "x"), ("b", "y " * 40), ("c", "z")]
    tokenizer = build_tokenizer([text for pair in pairs for text in pair])
    config = SMALL.replace(max_tokens=100, batch_size=2, bucket_size=2)  # max_len 32: 31 tokens a side
    train, valid, sampler = training_data(config, pairs, pairs[:1], tokenizer, tokenizer, num_replicas=2, rank=1)
    assert train.pairs == [pairs[0], pairs[3]] and valid.pairs == pairs[:1]
    assert sampler.rank == 1 and sampler.num_replicas == 2
    with pytest.raises(ValueError, match="no training pair fits max_tokens = 31"):
        training_data(config, pairs[1:3], (), tokenizer, tokenizer)


def test_batch_loss_counts_the_target_tokens_without_padding():
    torch.manual_seed(0)
    model = SMALL.model.build(12, 12)
    batch = collate_batch([([4, 5, 6], [7, 8]), ([4], [9, 10, 11])])  # labels: 3 and 4 tokens with <eos>
    loss_sum, tokens, correct = batch_loss(model.eval(), batch, smoothing=0.0)
    src_mask, tgt_mask = padding_mask(batch.src), decoder_mask(batch.tgt_in)
    logits = model(batch.src, batch.tgt_in, src_mask, tgt_mask)
    keep = batch.labels != 0
    expected = F.cross_entropy(logits[keep], batch.labels[keep], reduction="sum")
    assert tokens.item() == 7 and 0 <= correct.item() <= 7
    torch.testing.assert_close(loss_sum, expected)


def test_progress_is_a_bar_on_a_terminal_a_line_elsewhere_and_nothing_when_quiet(monkeypatch):
    lines = []
    config = SMALL.replace(quiet=False, progress_seconds=None, progress_steps=2)
    monkeypatch.setattr(progress_module.sys.stderr, "isatty", lambda: True, raising=False)
    on_terminal = TrainingProgress(lines.append, config, True, step=0, tokens=0, planned=4, epochs=1)
    assert on_terminal.bar_shown and not on_terminal.line_shown
    monkeypatch.setattr(progress_module.sys.stderr, "isatty", lambda: False, raising=False)
    in_a_log = TrainingProgress(lines.append, config, True, step=0, tokens=0, planned=4, epochs=1)
    assert not in_a_log.bar_shown and in_a_log.line_shown
    in_a_log.start_epoch(0, batches=4, done=0)
    for step in range(1, 5):
        in_a_log.update(step, 0, loss=1.0, lr=1e-3, tokens=10 * step)
    in_a_log.end_epoch()
    assert [line.split()[1] for line in lines] == ["2/4", "4/4"]  # every progress_steps steps
    for quiet, main in ((True, True), (False, False)):  # quiet, or not the main process: nothing shown
        hidden = TrainingProgress(lines.append, config.replace(quiet=quiet), main, 0, 0, 4, 1)
        assert not hidden.bar_shown and not hidden.line_shown
