"""The command line: train, resume, translate, and one-line errors with exit status 2."""
import json
from pathlib import Path

import pytest
import torch

from solutions.cli import main


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """One intra-op thread per test: small ops gain nothing from more, and on a shared
    machine (or beside another xdist worker) extra threads only contend."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


CORPUS = str(Path(__file__).resolve().parents[1] / "data" / "tiny_parallel.tsv")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    code = main(["train", "--preset", "tiny", "--data", CORPUS, "--epochs", "2", "--device", "cpu",
                 "--out", str(out), "--quiet"])
    torch.set_num_threads(threads)
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
    (["translate", "--checkpoint", CORPUS, "hello"], "not a readable checkpoint"),
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
