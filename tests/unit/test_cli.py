"""The command line: train, resume, translate, and one-line errors with exit status 2."""
import io
import json
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from solutions.app.cli import main


pytestmark = pytest.mark.usefixtures("one_torch_thread")


CORPUS = str(Path(__file__).resolve().parents[1] / "data" / "tiny_parallel.tsv")


@pytest.fixture(scope="module")
def trained(tmp_path_factory, one_torch_thread_for_module):
    out = tmp_path_factory.mktemp("run")
    code = main(["train", "--preset", "tiny", "--data", CORPUS, "--epochs", "2", "--device", "cpu",
                 "--out", str(out), "--quiet"])
    assert code == 0
    return out


def test_train_writes_checkpoint_and_history(trained, capsys):
    assert (trained / "checkpoint.pt").is_file()
    history = json.loads((trained / "history.json").read_text())
    assert history["history"]["valid"]["epoch"] == [1, 2]
    assert set(history["test"]) == {"loss", "accuracy", "exact_match", "bleu"}


def test_translate_needs_only_the_checkpoint(trained, capsys):
    code = main(["translate", "--checkpoint", str(trained / "checkpoint.pt"), "the dog sees a cat",
                 "two cats", "--max-len", "5", "--device", "cpu"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0 and len(lines) == 2
    assert all(len(line.split()) <= 5 for line in lines)
    assert main(["translate", "--checkpoint", str(trained / "checkpoint.pt"), "a cat", "--beam", "2",
                 "--max-len", "4", "--device", "cpu"]) == 0


def test_resume_continues_and_rejects_another_config(trained, capsys):
    code = main(["train", "--resume", str(trained / "checkpoint.pt"), "--data", CORPUS, "--epochs", "3",
                 "--device", "cpu", "--out", str(trained), "--quiet"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["epochs"] == 3
    code = main(["train", "--resume", str(trained / "checkpoint.pt"), "--preset", "base", "--data", CORPUS,
                 "--device", "cpu", "--out", str(trained), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "does not match" in err and "d_model" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv, message", [
    (["train", "--data", "no/such/file.tsv"], "no such file"),
    (["train", "--epochs", "0"], "--epochs must be a positive integer"),
    (["train", "--preset", "huge"], "invalid choice"),
    (["train", "--resume", "missing.pt"], "no such checkpoint"),
    (["translate", "hello"], "--checkpoint"),
    (["translate", "--checkpoint", "missing.pt", "hello"], "no such file"),
    (["translate", "--checkpoint", CORPUS, "hello"], "not a readable checkpoint of this package"),
    (["translate", "--checkpoint", "missing.pt"], "no sentences"),
    (["translate", "--checkpoint", "missing.pt", "--input", "no/such.txt"], "--input: no such file"),
    (["train", "--data", CORPUS, "--train", CORPUS], "not both"),
    (["train", "--valid", CORPUS], "--valid needs --train"),
    (["train", "--train", CORPUS + ":no/such.txt"], "no such file: no/such.txt"),
    (["train", "--allow-other-data"], "--resume only"),
    (["train", "--on-bad-line", "fix"], "invalid choice"),
    # the model's sizes are checked once, by TransformerConfig; the error names the flags that set them
    (["train", "--d-model", "30", "--heads", "4"], "--d-model 30, --heads 4: d_model 30 is not divisible by num_heads 4"),
    (["train", "--heads", "3"], "--heads 3: d_model 128 is not divisible by num_heads 3"),
    (["train", "--d-model", "15", "--heads", "5"], "--d-model 15: d_model must be even"),
    (["train", "--layers", "0"], "--layers 0: num_encoder_layers must be a positive integer, got 0"),
    (["train", "--d-ff", "-2"], "--d-ff -2: d_ff must be a positive integer, got -2"),
    (["train", "--dropout", "1.5"], "--dropout 1.5: dropout must be in [0, 1), got 1.5"),
    (["train", "--bpe-vocab-size", "500"], "--bpe-vocab-size applies to --tokenizer bpe only"),
    (["train", "--threads", "0"], "--threads must be a positive integer"),
    (["translate", "--checkpoint", "missing.pt", "--threads", "0", "a"], "--threads must be a positive integer"),
    (["export", "missing.pt", "--output", "small.pt"], "CKPT: no such file: missing.pt"),
    (["export", CORPUS], "--output"),
    (["fly"], "invalid choice"),
    ([], "required"),
])
def test_errors_are_one_line_with_status_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("transformer") and message in err and len(err.splitlines()) == 1


def test_malformed_tsv_names_the_line(tmp_path, capsys):
    bad = tmp_path / "bad.tsv"
    bad.write_text("a b\tc d\ne f\tg\nbroken line\n", encoding="utf-8")
    assert main(["train", "--data", str(bad), "--quiet", "--out", str(tmp_path)]) == 2
    assert "bad.tsv:3" in capsys.readouterr().err


def test_help_exits_zero(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--help"])
    assert exit_info.value.code == 0 and "--resume" in capsys.readouterr().out


def _write_corpus(folder, pairs, name="corpus"):
    """``folder/name.src`` and ``folder/name.tgt``: a plain-text pair, one sentence per line."""
    src, tgt = folder / f"{name}.src", folder / f"{name}.tgt"
    src.write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    tgt.write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    return f"{src}:{tgt}"


TRAIN_FLAGS = ["--preset", "tiny", "--device", "cpu", "--quiet", "--batch-size", "8"]


@pytest.fixture(scope="module")
def splits():
    from solutions.app.synthetic import make_synthetic_splits

    return make_synthetic_splits(40, 6, 6, seed=3)


def test_bad_lines_error_names_file_line_and_problem(tmp_path, capsys):
    good = "".join(f"{s}\t{t}\n" for s, t in [("a b", "c d")] * 4).encode()
    for content, problem in [
        (good + b"the dog\tsees\tlo cane\n", ":5: expected 'source<TAB>target' (exactly one tab), found 2 tabs"),
        (good + b"the d\xe9g\tlo cane\n", ":5: not UTF-8: byte 0xe9"),
        (good + b"the dog\t \n", ":5: the target sentence is empty"),
    ]:
        corpus = tmp_path / "corpus.tsv"
        corpus.write_bytes(content)
        assert main(["train", "--data", str(corpus), "--out", str(tmp_path / "run")] + TRAIN_FLAGS) == 2
        err = capsys.readouterr().err.strip()
        assert f"--data: {corpus}{problem}" in err and "--on-bad-line skip" in err
        assert len(err.splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_train_with_skip_reports_the_bad_lines_and_trains(tmp_path, splits, capsys):
    train, valid, _ = splits
    lines = [f"{s}\t{t}\n".encode() for s, t in train]
    lines[3] = b"a dog\twith\ta tab\tun cane\n"
    lines[10] = b"a \xff dog\tun cane\n"
    lines[20] = b"\tun cane\n"
    lines.append(" ".join(["the dog"] * 200).encode() + b"\tlo cane\n")  # longer than max_len: dropped, not bad
    corpus = tmp_path / "train.tsv"
    corpus.write_bytes(b"".join(lines))
    out = tmp_path / "run"
    code = main(["train", "--train", str(corpus), "--valid", _write_corpus(tmp_path, valid, "valid"),
                 "--on-bad-line", "skip", "--epochs", "1", "--out", str(out)] + TRAIN_FLAGS)
    captured = capsys.readouterr()
    assert code == 0
    warning = captured.err.strip()
    assert warning.startswith("transformer: warning: --train: skipped 3 bad lines (kept 38 pairs)")
    assert f"{corpus}:4:" in warning and f"{corpus}:11: not UTF-8" in warning
    assert f"{corpus}:21: the source sentence is empty" in warning
    summary = json.loads(captured.out.splitlines()[-1])
    assert summary["steps"] > 0 and summary["epochs"] == 1
    data = json.loads((out / "history.json").read_text())["data"]
    assert set(data["files"]) == {"train", "valid"} and data["split_seed"] == 0  # test cut from --train
    assert len(data["files"]["valid"]) == 2 and data["files"]["train"][0]["path"] == str(corpus)


@pytest.fixture(scope="module")
def file_run(tmp_path_factory, splits, one_torch_thread_for_module):
    """A run on plain-text pairs (--train/--valid/--test), 1 epoch of a few steps."""
    folder = tmp_path_factory.mktemp("files")
    train, valid, test = splits
    specs = {name: _write_corpus(folder, pairs, name) for name, pairs in
             [("train", train), ("valid", valid), ("test", test)]}
    code = main(["train", "--train", specs["train"], "--valid", specs["valid"], "--test", specs["test"],
                 "--epochs", "1", "--out", str(folder / "run")] + TRAIN_FLAGS)
    assert code == 0
    return folder, specs


def test_train_valid_test_files_and_best_checkpoint(file_run, capsys):
    from solutions.app.checkpoint import load_checkpoint

    folder, specs = file_run
    state = load_checkpoint(folder / "run" / "checkpoint.pt")
    files = state["data"]["files"]
    assert set(files) == {"train", "valid", "test"} and "split_seed" not in state["data"]
    assert files["train"][0]["path"] == specs["train"].split(":")[0]
    assert all(len(entry["sha256"]) == 64 for entries in files.values() for entry in entries)
    assert state["src_tokenizer"] and state["tgt_tokenizer"]
    best = load_checkpoint(folder / "run" / "best.pt")
    assert best["best_bleu"] == best["history"]["valid"]["bleu"][-1] == state["best_bleu"]
    history = json.loads((folder / "run" / "history.json").read_text())
    assert set(history["test"]) == {"loss", "accuracy", "exact_match", "bleu"}


def test_resume_refuses_missing_or_other_data(file_run, tmp_path, splits, capsys):
    folder, specs = file_run
    checkpoint = str(folder / "run" / "checkpoint.pt")
    common = ["--epochs", "2", "--out", str(tmp_path / "resumed")] + TRAIN_FLAGS
    assert main(["train", "--resume", checkpoint] + common) == 2
    err = capsys.readouterr().err.strip()
    assert "was trained on --train " + specs["train"] in err and "--allow-other-data" in err
    assert len(err.splitlines()) == 1 and not (tmp_path / "resumed").exists()
    # Same paths, changed contents: the fingerprint notices.
    changed = _write_corpus(tmp_path, splits[0][:-1], "train")
    assert main(["train", "--resume", checkpoint, "--train", changed, "--valid", specs["valid"],
                 "--test", specs["test"]] + common) == 2
    err = capsys.readouterr().err
    assert "not on --train " + changed in err
    # Without --test: a different arrangement of the data, refused too.
    assert main(["train", "--resume", checkpoint, "--train", specs["train"], "--valid", specs["valid"]] + common) == 2
    capsys.readouterr()
    assert main(["train", "--resume", checkpoint, "--train", changed, "--valid", specs["valid"],
                 "--allow-other-data"] + common) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["epochs"] == 2
    # Other data: the best BLEU starts afresh (epoch 1's was measured on the old data).
    valid_bleu = json.loads((tmp_path / "resumed" / "history.json").read_text())["history"]["valid"]["bleu"]
    assert len(valid_bleu) == 2 and summary["best_valid_bleu"] == valid_bleu[1]
    assert main(["train", "--resume", checkpoint, "--train", specs["train"], "--valid", specs["valid"],
                 "--test", specs["test"]] + common) == 0


def test_max_steps_and_epochs_on_resume_are_the_new_totals(tmp_path, splits, capsys):
    from solutions.app.checkpoint import load_checkpoint

    corpus = _write_corpus(tmp_path, splits[0], "train")  # 40 pairs: about 4-5 batches of 8 an epoch
    out = tmp_path / "run"
    flags = ["--train", corpus, "--out", str(out)] + TRAIN_FLAGS
    assert main(["train", "--epochs", "1"] + flags) == 0
    per_epoch = json.loads(capsys.readouterr().out.splitlines()[-1])["steps"]
    assert per_epoch >= 3
    # The checkpoint stores epochs = 1; --max-steps alone must not stop at the end of epoch 1.
    target = per_epoch * 2 + 1
    assert main(["train", "--resume", str(out / "checkpoint.pt"), "--max-steps", str(target)] + flags) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["steps"] == target
    # The checkpoint now stores max_steps = target; --epochs alone is the new total, not capped by it.
    assert main(["train", "--resume", str(out / "checkpoint.pt"), "--epochs", "4"] + flags) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["epochs"] == 4 and summary["steps"] == 4 * per_epoch
    assert load_checkpoint(out / "checkpoint.pt")["config"]["epochs"] == 4


def test_resume_of_a_synthetic_run_needs_no_data(tmp_path, capsys):
    out = tmp_path / "run"
    # a small model (given again on resume, where the preset's would conflict): each run
    # validates on, and tests, the 500 + 500 synthetic pairs by translating them
    small = SIZE_FLAGS + TRAIN_FLAGS
    assert main(["train", "--max-steps", "2", "--num-train", "30", "--out", str(out)] + small) == 0
    capsys.readouterr()
    assert main(["train", "--resume", str(out / "checkpoint.pt"), "--max-steps", "3", "--out", str(out)]
                + small) == 0  # regenerates --num-train 30 from the checkpoint
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["steps"] == 3
    assert main(["train", "--resume", str(out / "checkpoint.pt"), "--num-train", "50", "--max-steps", "4",
                 "--out", str(out)] + small) == 2
    assert "--data synthetic --num-train 30 --seed 0" in capsys.readouterr().err


def _stdin(monkeypatch, data):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def test_translate_from_stdin_keeps_lines_truncates_and_warns(trained, monkeypatch, capsys):
    long_line = " ".join(["the dog sees a cat"] * 20)  # 100 words > max_len 64
    _stdin(monkeypatch, ("the dog sees a cat\n\n" + long_line + "\n   \ntwo cats\n").encode())
    code = main(["translate", "--checkpoint", str(trained / "checkpoint.pt"), "-", "--max-len", "6",
                 "--device", "cpu"])
    captured = capsys.readouterr()
    assert code == 0
    lines = captured.out.split("\n")
    assert len(lines) == 6 and lines[-1] == ""  # five lines, each ended by a newline
    assert lines[1] == "" and lines[3] == "" and all(lines[i] for i in (0, 2, 4))
    assert captured.err.strip() == ("transformer: warning: <stdin> line 3 longer than the model's max_len "
                                    "(64 tokens): truncated to the first 64 tokens")
    # The same sentence alone, short: translated the same way as inside the batch.
    assert main(["translate", "--checkpoint", str(trained / "checkpoint.pt"), "two cats", "--max-len", "6",
                 "--device", "cpu"]) == 0
    assert capsys.readouterr().out == lines[4] + "\n"


def test_translate_file_to_file_in_batches_and_beam(trained, tmp_path, capsys):
    source = tmp_path / "in.txt"
    sentences = ["the dog sees a cat", "", "two cats see the dog", "a bird", "the old man has a red car"]
    source.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    results = {}
    for flags in (["--batch-size", "2"], ["--batch-size", "64"], ["--beam", "2"]):
        output = tmp_path / "out.txt"
        assert main(["translate", "--checkpoint", str(trained / "checkpoint.pt"), "--input", str(source),
                     "--output", str(output), "--max-len", "6", "--device", "cpu"] + flags) == 0
        assert capsys.readouterr().out == ""
        results[flags[0] + flags[1]] = output.read_text(encoding="utf-8").split("\n")
    for lines in results.values():
        assert len(lines) == len(sentences) + 1 and lines[1] == "" and lines[0]
    assert results["--batch-size2"] == results["--batch-size64"]  # batching does not change greedy output


def test_translate_rejects_bad_input_and_non_checkpoints(trained, tmp_path, monkeypatch, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"a cat\nthe d\xf6g\n")
    assert main(["translate", "--checkpoint", str(trained / "checkpoint.pt"), "--input", str(bad)]) == 2
    assert capsys.readouterr().err.strip() == f"transformer: error: {bad}:2: not UTF-8: byte 0xf6 at byte 6 of the line"
    assert main(["translate", "--checkpoint", str(trained / "checkpoint.pt"), "--input", str(bad), "a cat"]) == 2
    assert "not both" in capsys.readouterr().err
    archive = tmp_path / "other.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        handle.writestr("hello.txt", "not a model")
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    for path in (archive, foreign, tmp_path / "in.txt"):
        if not path.exists():
            path.write_text("the dog\n", encoding="utf-8")
        assert main(["translate", "--checkpoint", str(path), "a cat"]) == 2
        err = capsys.readouterr().err.strip()
        assert err == (f"transformer: error: --checkpoint: {path} is not a readable checkpoint of this package "
                       "(expected a file written by 'transformer train')")


SIZE_FLAGS = ["--d-model", "16", "--heads", "2", "--layers", "1", "--d-ff", "24"]


def test_model_flags_reach_the_model_and_the_checkpoint(tmp_path, splits, capsys):
    from solutions.model import Transformer, count_parameters
    from solutions.app.checkpoint import load_checkpoint, model_from_checkpoint

    out = tmp_path / "run"
    flags = ["--train", _write_corpus(tmp_path, splits[0], "train"), "--out", str(out)] + TRAIN_FLAGS
    assert main(["train", "--max-steps", "2", "--dropout", "0.2", "--threads", "2"] + SIZE_FLAGS + flags) == 0
    assert torch.get_num_threads() == 2
    config = load_checkpoint(out / "checkpoint.pt")["config"]
    wanted = dict(d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=24, dropout=0.2, threads=2)
    assert {name: {**config, **config["model"]}[name] for name in wanted} == wanted
    model, src_tok, tgt_tok, _ = model_from_checkpoint(out / "checkpoint.pt")
    expected = Transformer(len(src_tok), len(tgt_tok), d_model=16, num_heads=2, num_encoder_layers=1,
                           num_decoder_layers=1, d_ff=24, max_len=64)
    assert count_parameters(model) == count_parameters(expected)
    tiny = Transformer(len(src_tok), len(tgt_tok), d_model=128, num_heads=4, num_encoder_layers=2,
                       num_decoder_layers=2, d_ff=256, max_len=64)
    assert count_parameters(model) < 0.2 * count_parameters(tiny)  # not the preset's model
    capsys.readouterr()
    resume = ["train", "--resume", str(out / "checkpoint.pt")]
    # Another model on resume: one line naming each conflicting flag; the run is untouched.
    conflicts = [
        (["--d-model", "32", "--layers", "2"],
         ["d_model is 16 in the checkpoint, 32 with --d-model 32", "num_encoder_layers is 1", "with --layers 2"]),
        (["--shared-vocab"], ["share_embeddings is False in the checkpoint, True with --shared-vocab"]),
        (["--tokenizer", "bpe"], ["tokenizer is 'word' in the checkpoint, 'bpe' with --tokenizer bpe"]),
        (["--bpe-vocab-size", "100"], ["applies to --tokenizer bpe only (the checkpoint's"]),
    ]
    for other, named in conflicts:
        assert main(resume + other + ["--max-steps", "3"] + flags) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and all(text in err for text in named), err
    assert load_checkpoint(out / "checkpoint.pt")["step"] == 2
    # The same model flags again are fine, and the dropout rate may change.
    assert main(resume + SIZE_FLAGS + ["--dropout", "0.3", "--max-steps", "3"] + flags) == 0
    state = load_checkpoint(out / "checkpoint.pt")
    assert state["step"] == 3 and state["config"]["model"]["dropout"] == 0.3 and state["config"]["model"]["d_model"] == 16


def test_shared_vocab_flag_trains_one_bpe_vocabulary_with_tied_embeddings(tmp_path, splits, capsys):
    from solutions.app.checkpoint import load_checkpoint, model_from_checkpoint

    out = tmp_path / "run"
    assert main(["train", "--train", _write_corpus(tmp_path, splits[0], "train"), "--max-steps", "2",
                 "--tokenizer", "bpe", "--bpe-vocab-size", "90", "--shared-vocab", "--out", str(out)]
                + SIZE_FLAGS + TRAIN_FLAGS) == 0
    state = load_checkpoint(out / "checkpoint.pt")
    assert state["src_tokenizer"] == state["tgt_tokenizer"] and state["src_tokenizer"]["kind"] == "bpe"
    assert state["config"]["model"]["share_embeddings"] and state["config"]["bpe_vocab_size"] == 90
    model, src_tok, tgt_tok, _ = model_from_checkpoint(out / "checkpoint.pt")
    assert len(src_tok) == len(tgt_tok) <= 90
    assert model.src_embed.embedding.weight is model.tgt_embed.embedding.weight is model.generator.weight


def test_progress_lines_and_one_bleu_signature_on_stderr_off_a_terminal(tmp_path, splits):
    import re
    import subprocess

    out = tmp_path / "run"
    command = [sys.executable, "-m", "solutions", "train", "--train", _write_corpus(tmp_path, splits[0], "train"),
               "--epochs", "2",
               "--progress-steps", "2", "--threads", "1", "--out", str(out)] + SIZE_FLAGS + TRAIN_FLAGS
    command.remove("--quiet")
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=300,
                            env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    assert "\r" not in result.stderr  # plain lines for a log file, not a redrawn bar
    lines = result.stderr.splitlines()
    progress = [line for line in lines if line.startswith("step ")]
    steps = json.loads(result.stdout.splitlines()[-1])["steps"]
    pattern = rf"step (\d+)/{steps} epoch [12]/2 loss \d+\.\d{{3}} lr \S+ \d+ tok/s elapsed \S+ ETA \S+"
    assert [int(re.fullmatch(pattern, line).group(1)) for line in progress] == list(range(2, steps + 1, 2))
    signature = [line for line in lines if "signature" in line]
    # Two validations and one test evaluation, but the signature is printed once.
    assert len(signature) == 1 and "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" in signature[0]
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary["bleu_signature"] in signature[0] and set(summary["test"]) >= {"bleu"}


# German-English pairs with what a space-joined output gets wrong: "man's", "T-shirt",
# quotes, commas, and the final period, "!" or "?".
PUNCTUATED_PAIRS = [
    ("Ein Mann spielt.", "A man plays."),
    ("Die Frau des Mannes lacht.", "The man's wife laughs."),
    ("Ein Junge im T-Shirt rennt.", "A boy in a T-shirt runs."),
    ("Zwei Hunde, ein Ball.", "Two dogs, one ball."),
    ("Der Hund des Mädchens schläft!", "The girl's dog sleeps!"),
    ('Ein Kind isst "Eis".', 'A child eats "ice cream".'),
    ("Die Frau rennt.", "The woman runs."),
    ("Ein Hund spielt im Park.", "A dog plays in the park."),
    ("Das T-Shirt ist rot.", "The T-shirt is red."),
    ("Wer lacht?", "Who laughs?"),
    ("Der Mann schläft.", "The man sleeps."),
    ("Ein Mädchen isst.", "A girl eats."),
]


@pytest.fixture(scope="module")
def punctuated_run(tmp_path_factory, one_torch_thread_for_module):
    """A BPE model with one shared vocabulary that has learnt PUNCTUATED_PAIRS by heart (out/checkpoint.pt).

    Built with Trainer, as 'train' would, but with a short warm-up (100 steps) that no preset has,
    so that 600 steps (200 epochs) reach 12/12 exact matches with both of ATen's CPU kernel sets (AVX2 and
    AVX-512: their float sums differ, and at 120 epochs the AVX-512 run stopped at 10/12)."""
    from solutions.app.config import PRESETS
    from solutions.app.trainer import Trainer

    out = tmp_path_factory.mktemp("punctuated")
    config = PRESETS["tiny"].replace(
        d_model=32, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=64, dropout=0.0, max_len=24,
        tokenizer="bpe", bpe_vocab_size=120, share_embeddings=True, warmup_steps=100, lr_factor=1.0,
        batch_size=4, epochs=200, eval_sentences=12, device="cpu", quiet=True, seed=1)
    trainer = Trainer(config, PUNCTUATED_PAIRS, PUNCTUATED_PAIRS, out_dir=out)
    trainer.train()
    sources = out / "sources.de"
    sources.write_text("".join(s + "\n" for s, _ in PUNCTUATED_PAIRS), encoding="utf-8")
    return out, trainer, sources


def test_translate_prints_detokenised_text_and_bleu_is_measured_on_it(punctuated_run, tmp_path, capsys):
    out, trainer, sources = punctuated_run
    valid = trainer.history["valid"]
    # BLEU during training compares the detokenised translations with the references as written.
    assert valid["exact_match"][-1] == 1.0 and valid["bleu"][-1] == pytest.approx(100.0)
    assert main(["translate", "--checkpoint", str(out / "checkpoint.pt"), "--input", str(sources),
                 "--device", "cpu"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [t for _, t in PUNCTUATED_PAIRS]  # "The man's wife laughs.", not "The man ' s wife laughs ."
    assert not any(" ." in line or " '" in line or " - " in line for line in lines)


def test_export_is_smaller_and_translates_like_the_full_checkpoint(punctuated_run, tmp_path, capsys):
    out, _, sources = punctuated_run
    full, small = out / "checkpoint.pt", tmp_path / "small.pt"
    assert main(["export", str(full), "--output", str(small)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["bytes"] == small.stat().st_size < 0.5 * full.stat().st_size == 0.5 * report["checkpoint_bytes"]
    outputs = {}
    for checkpoint in (full, small):
        for beam in ("1", "2"):
            target = tmp_path / f"{checkpoint.stem}.{beam}.en"
            assert main(["translate", "--checkpoint", str(checkpoint), "--input", str(sources), "--output",
                         str(target), "--beam", beam, "--device", "cpu"]) == 0
            outputs[checkpoint.stem, beam] = target.read_text(encoding="utf-8")
    assert outputs["checkpoint", "1"] == outputs["small", "1"] == "".join(t + "\n" for _, t in PUNCTUATED_PAIRS)
    assert outputs["checkpoint", "2"] == outputs["small", "2"]
    # An export has no optimizer state: it translates but cannot be resumed; it never overwrites its source.
    assert main(["train", "--resume", str(small), "--out", str(tmp_path / "again")] + TRAIN_FLAGS) == 2
    assert "is an inference-only export" in capsys.readouterr().err
    assert main(["export", str(full), "--output", str(full)]) == 2
    assert "is the checkpoint itself" in capsys.readouterr().err


def test_evaluate_prints_sacrebleu_of_the_detokenised_translations(punctuated_run, tmp_path, capsys):
    import sacrebleu

    out, _, _ = punctuated_run
    pairs = [("Ein Mann spielt.", "A man is playing.")] + PUNCTUATED_PAIRS[1:]  # one reference the model misses
    test = tmp_path / "test.tsv"
    test.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    hypotheses = tmp_path / "test.hyp"
    assert main(["evaluate", "--checkpoint", str(out / "checkpoint.pt"), "--test", str(test), "--output",
                 str(hypotheses), "--device", "cpu"]) == 0
    report = json.loads(capsys.readouterr().out)
    lines = hypotheses.read_text(encoding="utf-8").splitlines()
    assert lines == ["A man plays."] + [t for _, t in PUNCTUATED_PAIRS[1:]]
    expected = sacrebleu.corpus_bleu(lines, [[t for _, t in pairs]])
    assert report["bleu"] == round(expected.score, 2) < 100 and report["details"] == str(expected)
    assert report["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert report["exact_match"] == 11 / 12 and report["sentences"] == 12
