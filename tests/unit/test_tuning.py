"""The length penalty chosen on validation: one beam search per beam size, every α of a grid, the test set last.

A tiny model trained for a few steps on the 32 pairs of tests/data (its validation and test
sets are 6 pairs each) is tuned by 'train' at the end of its run and by the 'tune' command;
the order of what is decoded is recorded by wrapping the functions the commands call.
"""
import json
import shutil

import pytest
import torch

from solutions.app import decode_commands, summary, train_command
from solutions.app.checkpoint import (DECODING_KEY, decoding_of, export_checkpoint, load_checkpoint,
                                     model_from_checkpoint)
from solutions.app.cli import main
from solutions.app.config import PRESETS, check_grid
from solutions.app.inference import batch_beam_search, best_hypothesis
from solutions.app.schedule import RunPlan, TimeBudget
from solutions.app.tuning import beam_hypotheses, parse_grid, tune_decoding
from solutions.configuration import ConfigError
from solutions.translation import translate
from test_budget import FakeClock
from test_training_outputs import TINY_MODEL, _corpus_dir

pytestmark = pytest.mark.usefixtures("one_torch_thread")

GRID = (0.0, 0.6, 3.0)  # 3.0 favours long hypotheses strongly: the choices differ on a weak model


def _recording(monkeypatch, module, name, calls, label):
    """Wrap ``module.name`` so that each call appends ``(label, sources decoded, kwargs)`` to ``calls``."""
    original = getattr(module, name)

    def wrapper(*args, **kwargs):
        pairs = args[1] if name == "tune_decoding" else args[3]
        calls.append((label, [s for s, _ in pairs], args, kwargs))
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)


@pytest.fixture(scope="module")
def tuned_run(tmp_path_factory):
    """The tiny preset for 120 steps (enough to end sentences at different lengths) with beam 3 and the grid
    GRID, on one thread (a module fixture runs before one_torch_thread), its decoding calls recorded in order."""
    tmp_path = tmp_path_factory.mktemp("tuning")
    folder, test_pairs = _corpus_dir(tmp_path)
    out = tmp_path / "run"
    calls = []
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as monkeypatch:
        _recording(monkeypatch, train_command, "tune_decoding", calls, "tune")
        _recording(monkeypatch, summary, "score_translations", calls, "score")
        status = main(["train", "--preset", "tiny", "--data-dir", str(folder), "--max-steps", "120", "--batch-size",
                       "8", "--schedule", "linear", "--lr-peak", "5e-3", "--warmup-steps", "10", "--threads", "1",
                       "--beam", "3", "--length-penalty-grid", ",".join(map(str, GRID)), "--seed", "1",
                       "--out", str(out)] + TINY_MODEL)
    torch.set_num_threads(threads)
    assert status == 0
    valid_sources = [line.split("\t")[0] for line in
                     (folder / "val.de-en.tsv").read_text(encoding="utf-8").splitlines()]
    return {"folder": folder, "out": out, "calls": calls, "test_sources": [s for s, _ in test_pairs],
            "valid_sources": valid_sources}


def test_every_alpha_of_one_search_is_that_alpha_s_beam_search(tuned_run):
    """The search does not depend on α: choosing among one search's hypotheses is translate's beam search."""
    model, src_tokenizer, tgt_tokenizer, _ = model_from_checkpoint(str(tuned_run["out"] / "best.pt"))
    sources = tuned_run["valid_sources"] + tuned_run["test_sources"]
    found = beam_hypotheses(model, sources, src_tokenizer, 3, batch_size=5)
    chosen = {}
    for alpha in (0.0, 0.6, 1.5, 3.0):
        expected = translate(model, sources, src_tokenizer, tgt_tokenizer, beam_size=3, length_penalty=alpha,
                             batch_size=5, beam=batch_beam_search)
        chosen[alpha] = [tgt_tokenizer.decode(best_hypothesis(h, alpha)[1:]) for h in found]
        assert chosen[alpha] == expected, alpha
    assert chosen[0.0] != chosen[3.0]  # α changes translations here: the comparison has teeth


def test_train_tunes_on_validation_before_the_test_set_is_decoded(tuned_run):
    calls, test_sources = tuned_run["calls"], tuned_run["test_sources"]
    labels = [(label, sources == test_sources) for label, sources, _, _ in calls]
    # Tuned once, on validation; the test set decoded only afterwards, with the beam and the choice.
    assert labels[0] == ("tune", False) and [label for label, _ in labels].count("tune") == 1
    assert calls[0][1] == tuned_run["valid_sources"] and not set(calls[0][1]) & set(test_sources)
    assert calls[0][3]["log"] is not None  # progress lines go to the run's log
    results = json.loads((tuned_run["out"] / "results.json").read_text(encoding="utf-8"))
    tuning = results["length_penalty_tuning"]
    assert [p["length_penalty"] for p in tuning["grid"]] == list(GRID) and tuning["sentences"] == 6
    assert tuning["bleu"] == max(p["bleu"] for p in tuning["grid"])
    best = next(p for p in tuning["grid"] if p["bleu"] == tuning["bleu"])  # the first of equal scores
    assert tuning["length_penalty"] == best["length_penalty"]
    beam_tests = [args for label, sources, args, _ in calls if label == "score" and sources == test_sources
                  and args[4] == 3]
    assert len(beam_tests) == 1 and beam_tests[0][5] == tuning["length_penalty"]  # the test set: once, with it
    assert results["decoding"]["length_penalty"] == tuning["length_penalty"] and results["decoding"][
        "length_penalty_tuned"]
    assert results["translations"]["beam"] == {"beam_size": 3, "length_penalty": tuning["length_penalty"]}
    assert 0 < results["test"]["brevity_penalty"] <= 1 and results["test"]["length_penalty"] == tuning[
        "length_penalty"]
    stored = load_checkpoint(str(tuned_run["out"] / "best.pt"))[DECODING_KEY]
    assert stored["grid"] == tuning["grid"] and stored["length_penalty"] == tuning["length_penalty"]


def test_translate_uses_the_tuned_length_penalty_unless_given_one(tuned_run, tmp_path, monkeypatch, capsys):
    best = str(tuned_run["out"] / "best.pt")
    # The config's own length penalty (0.6) is not the choice here: store another to tell them apart.
    state_beam, chosen, tuned = decoding_of(load_checkpoint(best))
    assert tuned and state_beam == 3
    copy = tmp_path / "best.pt"
    shutil.copy(best, copy)
    other = next(a for a in GRID if a != chosen)
    assert main(["tune", "--checkpoint", str(copy), "--valid", str(tuned_run["folder"] / "val.de-en.tsv"),
                 "--length-penalties", str(other)]) == 0
    capsys.readouterr()
    seen = []
    original = decode_commands.translate
    monkeypatch.setattr(decode_commands, "translate",
                        lambda *args, **kwargs: seen.append((kwargs["beam_size"], kwargs["length_penalty"]))
                        or original(*args, **kwargs))
    source = tuned_run["valid_sources"][0]
    assert main(["translate", "--checkpoint", str(copy), source]) == 0
    assert main(["translate", "--checkpoint", str(copy), "--length-penalty", "0.25", "--beam", "2", source]) == 0
    assert seen == [(3, other), (2, 0.25)]
    capsys.readouterr()
    exported = export_checkpoint(str(copy), tmp_path / "export.pt")  # an export translates alike
    assert decoding_of(load_checkpoint(exported)) == (3, other, True)


def test_the_tune_command_stores_the_choice_and_decodes_the_test_set_once(tuned_run, tmp_path, monkeypatch,
                                                                         capsys):
    copy, results = tmp_path / "best.pt", tmp_path / "results.json"
    shutil.copy(tuned_run["out"] / "best.pt", copy)
    shutil.copy(tuned_run["out"] / "results.json", results)
    calls = []
    _recording(monkeypatch, decode_commands, "tune_decoding", calls, "tune")
    _recording(monkeypatch, decode_commands, "score_translations", calls, "score")
    assert main(["tune", "--checkpoint", str(copy), "--data-dir", str(tuned_run["folder"]), "--length-penalties",
                 "0,0.6,3", "--beams", "2,3", "--results", str(results)]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out.strip().splitlines()[-1])
    assert [label for label, *_ in calls] == ["tune", "score"]
    assert calls[0][1] == tuned_run["valid_sources"] and calls[1][1] == tuned_run["test_sources"]
    assert [(p["beam_size"], p["length_penalty"]) for p in report["grid"]] == [
        (2, 0.0), (2, 0.6), (2, 3.0), (3, 0.0), (3, 0.6), (3, 3.0)]
    chosen = (report["beam_size"], report["length_penalty"])
    assert (calls[1][2][4], calls[1][2][5]) == chosen and report["test"]["beam_size"] == chosen[0]
    assert decoding_of(load_checkpoint(str(copy)))[:2] == chosen
    assert json.loads(results.read_text(encoding="utf-8"))["length_penalty_tuning"]["grid"] == report["grid"]
    assert "tuning: beam 2, 6/6 validation sentences decoded" in captured.err  # progress on stderr
    assert "valid BLEU" in captured.err and "chose beam" in captured.err
    assert report["at_grid_edge"] == (report["length_penalty"] in (0.0, 3.0))
    assert ("the chosen length penalty is the grid's" in captured.err) == report["at_grid_edge"]


@pytest.mark.parametrize("argv, message", [
    (["--length-penalties", "0,-1"], "--length-penalties: every value must be a number >= 0, got -1"),
    (["--length-penalties", "0,big"], "--length-penalties: expected comma-separated numbers"),
    (["--length-penalties", "0.6,0.6"], "--length-penalties: 0.6 given more than once"),
    (["--beams", "1,4"], "--beams: every value must be an integer >= 2, got 1"),
    (["--beams", "4.5"], "--beams: expected comma-separated integers"),
])
def test_the_tune_command_refuses_a_bad_grid_with_a_clear_message(tuned_run, argv, message, capsys):
    before = (tuned_run["out"] / "best.pt").read_bytes()
    assert main(["tune", "--checkpoint", str(tuned_run["out"] / "best.pt"), "--valid",
                 str(tuned_run["folder"] / "val.de-en.tsv")] + argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("transformer: error: ") and message in err and len(err.splitlines()) == 1
    assert (tuned_run["out"] / "best.pt").read_bytes() == before  # nothing written


def test_tune_needs_a_validation_corpus_and_train_a_sound_grid(tuned_run, tmp_path, capsys):
    best = str(tuned_run["out"] / "best.pt")
    assert main(["tune", "--checkpoint", best, "--test", str(tuned_run["folder"] / "test_2016.de-en.tsv")]) == 2
    assert "never the test set" in capsys.readouterr().err
    folder = str(tuned_run["folder"])
    for flags, message in ((["--length-penalty", "0.6", "--length-penalty-grid", "0,1"], "not both"),
                           (["--length-penalty-grid", "0,x"], "--length-penalty-grid: expected comma-separated"),
                           (["--length-penalty-grid", "-0.5"], "--length-penalty-grid: every value must be")):
        assert main(["train", "--data-dir", folder, "--max-steps", "1", "--out", str(tmp_path / "r")] + flags
                    + TINY_MODEL) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_grids_are_checked_where_they_are_made():
    assert parse_grid(" 0, 0.3 ,1.5", "--x") == (0.0, 0.3, 1.5) and check_grid([4, 2], "b", 2, True) == (4, 2)
    for bad, message in (([], "is empty"), ("0.6", "must be a list"), ([float("inf")], "got inf"),
                         ([True], "got True")):
        with pytest.raises(ValueError, match=message):
            check_grid(bad, "grid")
    with pytest.raises(ConfigError, match="length_penalty_grid: every value") as raised:
        PRESETS["tiny"].replace(length_penalty_grid=(0.6, -1))
    assert raised.value.fields == ("length_penalty_grid",)
    assert PRESETS["tiny"].replace(length_penalty_grid=[]).length_penalty_grid == ()
    assert PRESETS["multi30k-cpu"].length_penalty_grid == (0.0, 0.3, 0.6, 1.0, 1.5, 2.0)
    with pytest.raises(ValueError, match="beam sizes: every value must be an integer >= 2, got 1"):
        tune_decoding(None, [("a", "b")], None, None, GRID, beam_sizes=(1,))
    with pytest.raises(ValueError, match="no validation pairs"):
        tune_decoding(None, [], None, None, GRID)


def test_a_budget_keeps_time_for_the_tuning_or_skips_it():
    config = PRESETS["multi30k-cpu"].replace(time_budget=1000.0)
    clock = FakeClock(tick=0.0)
    plan = RunPlan(config, 100, TimeBudget(1000.0, clock), log=(messages := []).append)
    plan.seconds.update(step=0.5, eval=10.0, beam_sentence=0.1)
    plan.final_sentences = 1000
    without = plan.reserve()
    plan.tune_sentences = 1014
    assert plan.reserve() == pytest.approx(without + 1.3 * 0.1 * 1014)
    assert plan.can_tune() and not messages
    clock.now += 1000 - 1.1 * 0.1 * 2014 + 1  # a second too little left for validation and test
    assert not plan.can_tune() and "not enough to tune the length penalty" in messages[-1]
