"""What a finished 'train' run leaves beside results.json: every test sentence's translations.

The runs are a few optimizer steps of a tiny model on the 32 pairs of tests/data; the
test set's translations are then checked against the scores in results.json and against
what 'evaluate' writes from best.pt (the path a user takes to reproduce them).
"""
import hashlib
import json
import os

import pytest

from solutions.app.cli import main
from solutions.app.config import PRESETS
from solutions.app.corpus import read_parallel
from solutions.app.evaluation import CorpusBLEU
from solutions.app.summary import TRANSLATIONS_FILE, write_translations
from solutions.app import device as device_module
from solutions.app.trainer import Trainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY_TSV = os.path.join(os.path.dirname(__file__), "..", "data", "tiny_parallel.tsv")
TINY_MODEL = ["--d-model", "16", "--heads", "2", "--layers", "1", "--d-ff", "32", "--quiet"]


def _corpus_dir(tmp_path):
    """train (the 32 pairs twice), val (6 pairs) and test (6 other pairs, one of them with a tab-free quote)."""
    pairs = read_parallel(TINY_TSV)[0]
    folder = tmp_path / "corpus"
    folder.mkdir()
    for name, chosen in (("train.de-en.tsv", pairs * 2), ("val.de-en.tsv", pairs[:6]),
                         ("test_2016.de-en.tsv", pairs[6:12])):
        (folder / name).write_text("".join(f"{s}\t{t}\n" for s, t in chosen), encoding="utf-8")
    return folder, pairs[6:12]


def _read_lines(path):
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


@pytest.fixture(scope="module")
def beam_run(tmp_path_factory):
    """The tiny preset for 8 steps on a folder of TSV files, the test set decoded with beam 3."""
    tmp_path = tmp_path_factory.mktemp("translations")
    folder, test_pairs = _corpus_dir(tmp_path)
    out = tmp_path / "run"
    argv = ["train", "--preset", "tiny", "--data-dir", str(folder), "--max-steps", "8", "--batch-size", "8",
            "--beam", "3", "--length-penalty", "0.8", "--seed", "1", "--out", str(out)] + TINY_MODEL
    return folder, test_pairs, out, argv


def test_the_run_keeps_every_test_sentence_s_greedy_and_beam_translation(beam_run, capsys):
    folder, test_pairs, out, argv = beam_run
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    path = out / TRANSLATIONS_FILE
    assert printed["translations"] == str(path)
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    described = results["translations"]
    assert described["file"] == TRANSLATIONS_FILE and described["sentences"] == len(test_pairs)
    assert described["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert described["beam"] == {"beam_size": 3, "length_penalty": 0.8} and described["greedy"] == {"beam_size": 1}
    rows = _read_lines(path)
    assert [row["index"] for row in rows] == list(range(len(test_pairs)))
    assert [(row["source"], row["reference"]) for row in rows] == test_pairs
    # The file holds the translations the run scored: BLEU of each column is the score results.json reports.
    references = [t for _, t in test_pairs]
    assert results["test"]["beam_size"] == 3 and results["test_greedy"]["beam_size"] == 1
    assert round(CorpusBLEU()([row["beam"] for row in rows], references), 2) == results["test"]["bleu"]
    assert round(CorpusBLEU()([row["greedy"] for row in rows], references), 2) == results["test_greedy"]["bleu"]


def test_evaluate_from_best_pt_writes_the_same_translations(beam_run, tmp_path, capsys):
    folder, test_pairs, out, argv = beam_run
    if not (out / TRANSLATIONS_FILE).exists():
        assert main(argv) == 0
    rows = _read_lines(out / TRANSLATIONS_FILE)
    test_file = str(folder / "test_2016.de-en.tsv")
    for column, beam in (("greedy", "1"), ("beam", "3")):
        written = tmp_path / f"{column}.txt"
        assert main(["evaluate", "--checkpoint", str(out / "best.pt"), "--test", test_file, "--beam", beam,
                     "--length-penalty", "0.8", "--output", str(written)]) == 0
        assert written.read_text(encoding="utf-8").splitlines() == [row[column] for row in rows], column
    capsys.readouterr()


def test_a_greedy_run_decodes_the_test_set_once_and_time_budget_none_lifts_the_preset_s(tmp_path, capsys):
    folder, test_pairs = _corpus_dir(tmp_path)
    out = tmp_path / "run"
    # multi30k-cpu has a 60-minute budget and beam 4: 'none' lifts the budget, --beam 1 decodes greedily.
    assert main(["train", "--preset", "multi30k-cpu", "--data-dir", str(folder), "--time-budget", "none",
                 "--max-steps", "3", "--batch-size", "8", "--beam", "1", "--bpe-vocab-size", "120",
                 "--out", str(out)] + TINY_MODEL) == 0
    capsys.readouterr()
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["time_budget_minutes"] is None and results["settings"]["training"]["time_budget"] is None
    assert results["steps"] == 3 and results["stopped"] == "max_steps"
    assert results["test_greedy"] == results["test"] and results["test"]["beam_size"] == 1
    rows = _read_lines(out / TRANSLATIONS_FILE)
    assert [row["greedy"] for row in rows] == [row["beam"] for row in rows]
    assert [(row["source"], row["reference"]) for row in rows] == test_pairs


def test_results_say_what_the_forward_pass_ran_in_not_only_what_was_asked(tmp_path, monkeypatch, capsys):
    """``--bf16`` on a CPU without native bfloat16 is ignored with a warning; results.json
    keeps the request (settings) and says the run was float32 (machine.autocast)."""
    monkeypatch.setattr(device_module, "cpu_has_bf16", lambda: False)
    folder, _ = _corpus_dir(tmp_path)
    out = tmp_path / "run"
    argv = ["train", "--preset", "tiny", "--data-dir", str(folder), "--max-steps", "2", "--batch-size", "8",
            "--bf16", "--device", "cpu", "--seed", "1", "--out", str(out)] + TINY_MODEL
    with pytest.warns(UserWarning, match="bf16=True needs CUDA"):
        assert main(argv) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["settings"]["training"]["bf16"] is True
    assert results["machine"]["autocast"] == "float32"


def test_time_budget_refuses_what_is_neither_a_duration_nor_none(tmp_path, capsys):
    assert main(["train", "--preset", "tiny", "--time-budget", "nothing", "--out", str(tmp_path / "run")]) == 2
    assert "--time-budget: expected a duration such as 60m" in capsys.readouterr().err


def test_write_translations_keeps_any_text_and_refuses_missing_translations(tmp_path):
    pairs = [("ein\tTab", "a \"tab\""), ("Zeile\nzwei", "ünïcode")]
    described = write_translations(str(tmp_path / "t.jsonl"), pairs, ["g1", "g2"], ["b1", "b2"], 4, 0.6)
    rows = _read_lines(tmp_path / "t.jsonl")
    assert [(row["source"], row["reference"], row["greedy"], row["beam"]) for row in rows] == \
        [("ein\tTab", "a \"tab\"", "g1", "b1"), ("Zeile\nzwei", "ünïcode", "g2", "b2")]
    assert described["sha256"] == hashlib.sha256((tmp_path / "t.jsonl").read_bytes()).hexdigest()
    assert described["sentences"] == 2 and described["beam"] == {"beam_size": 4, "length_penalty": 0.6}
    with pytest.raises(ValueError, match="one greedy and one beam translation per pair"):
        write_translations(str(tmp_path / "u.jsonl"), pairs, ["g1"], ["b1", "b2"], 4, 0.6)
    assert not (tmp_path / "u.jsonl").exists()


def test_a_budgeted_run_with_max_steps_fits_its_schedule_to_max_steps():
    """The linear schedule decays to the step the run stops at, not to what a long budget would allow."""
    pairs = read_parallel(TINY_TSV)[0]

    class SlowClock:  # 0.01 s per reading: a 3600 s budget would plan thousands of steps
        now = 0.0

        def __call__(self):
            self.now += 0.01
            return self.now

    clock = SlowClock()
    config = PRESETS["tiny"].replace(d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32,
                                     max_len=40, batch_size=2, epochs=50, warmup_steps=4, schedule="linear",
                                     lr_peak=1e-3, eval_sentences=0, quiet=True, device="cpu", seed=3,
                                     time_budget=3600, max_steps=40)
    trainer = Trainer(config, pairs, pairs[:6], clock=clock, started=clock.now)
    trainer.train()
    assert trainer.step == 40 and trainer.planned_steps == 40
    assert trainer.scheduler.get_last_lr()[0] == pytest.approx(0.02 * 1e-3, rel=0.05)  # the floor: the plan's end
