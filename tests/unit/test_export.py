"""`transformer export --format ctranslate2`: a CTranslate2 model whose greedy translations are ours.

A tiny model trains for a few seconds (two shapes: pre-norm with a shared BPE vocabulary, as the
multi30k-cpu preset; post-norm with word-level vocabularies, as the paper and the tiny preset),
the CLI exports it, and CTranslate2's greedy translations of held-out sentences are compared with
ours sentence by sentence. ``ctranslate2`` is an optional extra: without it these tests skip,
except under ``CI=true`` (requirements.txt installs it there), where a missing package fails.
"""
import json
import os

import pytest
import torch

from solutions.app.checkpoint import load_checkpoint, model_from_checkpoint
from solutions.app.cli import main
from solutions.app.config import PRESETS
from solutions.app.synthetic import make_synthetic_splits
from solutions.app.trainer import Trainer
from solutions.translation import translate

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]  # trains two models

if os.environ.get("CI") == "true":
    import ctranslate2  # noqa: F401  (CI installs requirements.txt: a missing engine is a failure there)
else:
    pytest.importorskip("ctranslate2")

from solutions.app.export import CTRANSLATE2_TOKENIZER_FILE, CTranslate2Translator  # noqa: E402

SHAPES = {
    "pre-norm, shared BPE": dict(norm_first=True, share_embeddings=True, tokenizer="bpe", bpe_vocab_size=300),
    "post-norm, word level": dict(norm_first=False, share_embeddings=False, tokenizer="word"),
}


@pytest.fixture(scope="module")
def splits():
    return make_synthetic_splits(num_train=800, num_valid=10, num_test=40, seed=0)


@pytest.fixture(scope="module", params=list(SHAPES))
def checkpoint(request, splits, tmp_path_factory, one_torch_thread_for_module):
    """A checkpoint of a small model trained for 40 steps (seconds on one thread: the training's
    sums in one order on any machine, whatever the worker's count)."""
    train, valid, _ = splits
    config = PRESETS["tiny"].replace(d_model=32, num_heads=2, num_encoder_layers=1, num_decoder_layers=2, d_ff=64,
                                     max_len=96, eval_sentences=0, quiet=True, device="cpu", warmup_steps=20,
                                     seed=0, **SHAPES[request.param])
    trainer = Trainer(config, train, valid)
    trainer.train(max_steps=40)
    path = tmp_path_factory.mktemp("run") / "checkpoint.pt"
    trainer.save_checkpoint(str(path))
    return path


def test_ctranslate2_greedy_translations_are_ours(checkpoint, splits, tmp_path, capsys):
    out = tmp_path / "ct2"
    assert main(["export", str(checkpoint), "--format", "ctranslate2", "--output", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["format"] == "ctranslate2" and "model.bin" in printed["files"]
    assert CTRANSLATE2_TOKENIZER_FILE in printed["files"]
    sources = [source for source, _ in splits[2]]
    model, src_tokenizer, tgt_tokenizer, _ = model_from_checkpoint(str(checkpoint))
    ours = translate(model, sources, src_tokenizer, tgt_tokenizer)
    theirs = CTranslate2Translator(str(out), threads=1)(sources)  # the directory alone: weights and tokenizers
    assert theirs == ours
    assert len(set(ours)) >= 2  # not one constant output: the model reads its sources (post-norm, word level: 2)
    beam = CTranslate2Translator(str(out), threads=1)(sources[:8], beam_size=4)
    assert len(beam) == 8 and all(isinstance(t, str) for t in beam)


def test_a_changed_weight_changes_the_translations(checkpoint, splits, tmp_path):
    """The comparison can fail: an export of other weights does not translate as ours."""
    state = load_checkpoint(str(checkpoint))
    bias = state["model"]["generator.bias"].clone()
    bias[4:] += torch.randn(bias.numel() - 4, generator=torch.Generator().manual_seed(0)) * 5
    state["model"]["generator.bias"] = bias
    changed = tmp_path / "changed.pt"
    torch.save(state, changed)
    out = tmp_path / "ct2"
    assert main(["export", str(changed), "--format", "ctranslate2", "--output", str(out)]) == 0
    sources = [source for source, _ in splits[2]]
    model, src_tokenizer, tgt_tokenizer, _ = model_from_checkpoint(str(checkpoint))
    ours = translate(model, sources, src_tokenizer, tgt_tokenizer)
    assert CTranslate2Translator(str(out), threads=1)(sources) != ours


def test_export_refuses_an_existing_directory_and_a_checkpoint_only_flag(checkpoint, tmp_path, capsys):
    out = tmp_path / "ct2"
    out.mkdir()
    assert main(["export", str(checkpoint), "--format", "ctranslate2", "--output", str(out)]) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["export", str(checkpoint), "--format", "ctranslate2", "--output", str(out), "--force"]) == 0
    assert main(["export", str(checkpoint), "--output", str(tmp_path / "small.pt"), "--quantization", "int8"]) == 2
    assert "--format ctranslate2 only" in capsys.readouterr().err


def test_a_directory_without_our_tokenizers_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        CTranslate2Translator(str(tmp_path))


def test_without_ctranslate2_the_export_names_the_package(checkpoint, tmp_path, capsys, monkeypatch):
    import solutions.app.tool_commands as tool_commands

    monkeypatch.setattr(tool_commands, "ctranslate2_available", lambda: False)  # the name the export command asks
    assert main(["export", str(checkpoint), "--format", "ctranslate2", "--output", str(tmp_path / "x")]) == 2
    assert "pip install ctranslate2" in capsys.readouterr().err
