"""The wall-clock budget of 'train': the planner (with an injected clock), the schedule, the run's files.

No test here measures time: the trainer's clock is a fake that advances a fixed amount
per reading, and the command-line runs use budgets that end a run after its first step.
"""
import dataclasses
import json
import math
import os

import pytest
import torch

from solutions.app.checkpoint import EXPORT_FORMAT, load_checkpoint, model_from_checkpoint
from solutions.app.cli import main
from solutions.app.config import PRESETS
from solutions.app.schedule import RunPlan, TimeBudget, paper_adam, warmup_linear_decay
from solutions.app.train_command import parse_duration
from solutions.app.trainer import Trainer
from solutions.app.usage import UsageError

# One intra-op thread: these models are tiny, and a second thread only spins against the other
# xdist worker (CPU seconds, not speed). The multi30k-cpu runs set their own two threads.
pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY_TSV = os.path.join(os.path.dirname(__file__), "..", "data", "tiny_parallel.tsv")


class FakeClock:
    """A clock that moves ``tick`` seconds every time it is read."""

    def __init__(self, tick=1.0):
        self.now, self.tick = 1000.0, tick

    def __call__(self):
        self.now += self.tick
        return self.now


# -- the schedule ---------------------------------------------------------------------------------
def test_warmup_linear_decay_rises_peaks_and_falls_to_the_floor():
    peak, total, warmup = 1e-3, 1000, 100
    assert warmup_linear_decay(1, total, warmup, peak) == pytest.approx(1e-5)
    assert warmup_linear_decay(50, total, warmup, peak) == pytest.approx(5e-4)
    assert warmup_linear_decay(100, total, warmup, peak) == pytest.approx(peak)
    assert warmup_linear_decay(550, total, warmup, peak) == pytest.approx(peak * (0.02 + 0.98 * 0.5))
    assert warmup_linear_decay(1000, total, warmup, peak) == pytest.approx(0.02 * peak)
    assert warmup_linear_decay(5000, total, warmup, peak) == pytest.approx(0.02 * peak)  # past the plan: the floor
    rates = [warmup_linear_decay(step, total, warmup, peak) for step in range(1, total + 1)]
    assert max(rates) == rates[warmup - 1]
    assert all(a >= b for a, b in zip(rates[warmup:], rates[warmup + 1:]))


# -- the planner ----------------------------------------------------------------------------------
def test_time_budget_counts_from_its_start_and_what_a_resumed_run_used():
    clock = FakeClock(tick=0.0)
    budget = TimeBudget(600, clock=clock, start=clock.now - 50, used=100)
    assert budget.elapsed() == pytest.approx(150)
    assert budget.left() == pytest.approx(450)
    clock.now += 500
    assert budget.left() == pytest.approx(-50)


def test_run_plan_plans_reserves_and_stops_on_its_own_state():
    """The trainer's schedule part, without a trainer: a fake clock, measured times set by hand."""
    now = [0.0]
    config = PRESETS["tiny"].replace(schedule="linear", warmup_steps=10, lr_peak=1e-3, epochs=2, time_budget=100.0,
                                     beam_size=4, average_last=2, eval_sentences=10)
    plan = RunPlan(config, steps_per_epoch=50, budget=TimeBudget(100.0, clock=lambda: now[0]))
    assert plan.reserve() == pytest.approx(10.0)  # before anything is measured: a tenth of the budget
    assert plan.learning_rate(5) == pytest.approx(5e-4)  # warm-up over min(10, 100 // 10) steps
    plan.seconds["step"] = 0.5
    # no evaluation measured yet: 3 % of an epoch's steps; (100 - 10) / (0.5 + 0.75 / 50) = 174 more steps
    assert plan.replan(20) == 194 == plan.planned_steps
    assert plan.learning_rate(194) == pytest.approx(1e-3 * 0.02)  # the linear decay ends at the planned step
    assert not plan.exhausted(20, first_step=0) and plan.stop_reason is None
    now[0] = 95.0  # 5 s left: less than the reserve and a step
    assert not plan.exhausted(21, first_step=21)  # at least one step per run
    assert plan.exhausted(21, first_step=0) and plan.stop_reason == "budget"
    assert plan.exhausted(194, first_step=0) and plan.stop_reason == "planned steps done"
    plan.final_sentences = 100
    assert plan.final_beam_size() == 1  # beam search never timed: greedy
    plan.seconds["beam_sentence"] = 0.01
    now[0] = 90.0
    assert plan.final_beam_size() == 4  # 10 s left >= 1.1 * 0.01 * 100
    # The reserve: 2 evaluations (averaging), the beam at the references' length over the final and tuning
    # sentences, the final greedy decoding (an evaluation per 10 sentences), 30 % and 20 s.
    plan.seconds["eval"], plan.tune_sentences = 2.0, 60
    assert plan.reserve() == pytest.approx(1.3 * (2 * 2.0 + 0.01 * 160 + 2.0 * 100 / 10) + 20.0)
    plan.beam_length_ratio = 0.25  # the timed translations ran four times the references' length
    assert plan.reserve() == pytest.approx(1.3 * (2 * 2.0 + 0.0025 * 160 + 2.0 * 100 / 10) + 20.0)
    now[0] = 99.2  # the end's own check uses the time as measured: 0.8 s < 1.1 * 0.01 * 100 (0.28 s at the ratio)
    assert plan.final_beam_size() == 1
    now[0] = 90.0
    assert plan.state_dict() == {"planned_steps": 194, "budget_used": 90.0}
    resumed = RunPlan(config, 50, budget=TimeBudget(100.0, clock=lambda: 0.0))
    resumed.load_state_dict(plan.state_dict())
    assert resumed.planned_steps == 194 and resumed.budget.left() == pytest.approx(10.0)
    unbudgeted = RunPlan(config.replace(time_budget=None), 50)
    assert unbudgeted.final_beam_size() == 4 and not unbudgeted.no_time_to_evaluate()


def test_run_plan_times_steps_after_the_first_three_and_asks_to_replan_every_quarter_epoch():
    config = PRESETS["tiny"].replace(schedule="noam", time_budget=100.0)
    plan = RunPlan(config, steps_per_epoch=100, budget=TimeBudget(100.0, clock=lambda: 0.0))
    plan.begin(10)  # a loop that starts after step 10: steps 11-13 go untimed
    due = [plan.time_step(step, 9.0 if step <= 13 else 0.5, batches=100) for step in range(11, 34)]
    assert plan.seconds["step"] == pytest.approx(0.5)  # the slow first steps left out
    assert due == [False] * 22 + [True]  # first after 20 timed steps (step 33)
    plan.planned_steps = 500
    assert [s for s in range(34, 101) if plan.time_step(s, 0.5, batches=100)] == [50, 75, 100]  # a quarter epoch
    plan.time_step(101, 1.5, batches=100)
    assert plan.seconds["step"] == pytest.approx((87 * 0.5 + 1.5) / 88)  # the mean of the timed steps
    unbudgeted = RunPlan(config.replace(time_budget=None), 100)
    unbudgeted.begin(0)
    assert not any(unbudgeted.time_step(s, 0.5, batches=100) for s in range(1, 200))  # measured, never re-planned
    assert unbudgeted.seconds["step"] == pytest.approx(0.5)


def test_paper_adam_and_the_plans_scheduler_give_each_step_its_learning_rate():
    config = PRESETS["tiny"].replace(warmup_steps=4)
    plan = RunPlan(config, steps_per_epoch=10)
    model = torch.nn.Linear(2, 2)
    optimizer = paper_adam(model.parameters(), torch.device("cpu"))
    assert optimizer.defaults["betas"] == (0.9, 0.98) and optimizer.defaults["eps"] == 1e-9  # section 5.3
    assert optimizer.defaults["fused"] is False  # fused Adam on CUDA only
    scheduler = plan.scheduler(optimizer)
    rates = []
    for _ in range(6):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert rates == pytest.approx([plan.learning_rate(step) for step in range(1, 7)])  # step 1 first


def test_time_budget_plan_keeps_the_reserve_and_an_evaluation_per_epoch():
    clock = FakeClock(tick=0.0)
    budget = TimeBudget(1100, clock=clock, start=clock.now)
    # 1000 s for training: 1 s a step plus 45 s of evaluation per 450-step epoch = 1.1 s a step.
    assert budget.plan(step=20, seconds_per_step=1.0, steps_per_epoch=450, seconds_per_eval=45, reserve=100) \
        == 20 + int(1000 / 1.1)
    # Nothing left: still one more step (a plan is never behind the run).
    assert budget.plan(step=7, seconds_per_step=1.0, steps_per_epoch=10, seconds_per_eval=0, reserve=5000) == 8


@pytest.mark.parametrize("seconds", [0, -5, None])
def test_time_budget_must_be_positive(seconds):
    with pytest.raises(ValueError, match="positive number of seconds"):
        TimeBudget(seconds)


@pytest.mark.parametrize("text, seconds", [("60m", 3600), ("1h", 3600), ("1h30m", 5400), ("90s", 90),
                                           ("3600", 3600), ("2.5h", 9000), (" 45 min ", 2700)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "abc", "10x", "-5m", "0m", "5 5", "m"])
def test_parse_duration_refuses_what_is_not_a_duration(text):
    with pytest.raises(UsageError, match="--time-budget"):
        parse_duration(text)


def _pairs():
    from solutions.app.corpus import read_parallel

    return read_parallel(TINY_TSV)[0]


def _tiny_config(**changes):
    settings = dict(d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32, max_len=40,
                    batch_size=2, epochs=50, warmup_steps=10, schedule="linear", lr_peak=1e-3, eval_sentences=4,
                    quiet=True, device="cpu", seed=3)
    settings.update(changes)
    return PRESETS["tiny"].replace(**settings)


@pytest.mark.slow  # trains about 50 steps
def test_trainer_plans_its_steps_for_the_budget_and_stops_inside_it():
    """60 s of fake time is about 50 steps (15 an epoch, each ~0.9 s by the fake clock, a quarter
    second of it the timed step): planned at the first epoch's end (step 15), re-planned at
    steps 30, 40 and 45, stopped with the 20 s reserve kept; 50 epochs would take ~700 s.
    The plan is what the test sees: a learning rate that ignored it, or no plan, fails it."""
    pairs = _pairs()
    clock = FakeClock(tick=0.25)
    trainer = Trainer(_tiny_config(time_budget=60), pairs, pairs[:6], clock=clock, started=clock.now)
    trainer.train()
    assert trainer.planned_steps is not None and trainer.step <= trainer.planned_steps
    assert trainer.stop_reason in ("budget", "planned steps done")
    assert trainer.epoch < 50
    assert trainer.budget.left() >= 0  # stopped with the reserve still there
    # The linear schedule was fitted to the plan: the last step's rate is far below the peak.
    assert trainer.scheduler.get_last_lr()[0] < 0.5 * trainer.config.lr_peak
    assert [row["epoch"] for row in trainer.epoch_log] == list(range(1, trainer.epoch + 1))


def test_trainer_without_budget_follows_its_epochs():
    pairs = _pairs()
    trainer = Trainer(_tiny_config(epochs=2), pairs, pairs[:6], clock=FakeClock())
    trainer.train()
    assert trainer.stop_reason == "epochs" and trainer.epoch == 2 and trainer.planned_steps is None
    assert trainer.step == 2 * len(trainer.sampler)


def test_finish_averages_the_last_epochs_and_loads_the_best_weights(tmp_path):
    pairs = _pairs()
    trainer = Trainer(_tiny_config(epochs=3, average_last=3), pairs, pairs[:6], out_dir=str(tmp_path),
                      clock=FakeClock())
    trainer.train()
    report = trainer.finish()
    assert report["averaged"] == 3 and not math.isnan(report["averaged_bleu"])
    assert report["chosen"] in ("epoch", "averaged")
    best = load_checkpoint(tmp_path / "best.pt")
    assert best["format"] == EXPORT_FORMAT and "optimizer" not in best  # best.pt: no optimizer state
    assert "optimizer" in load_checkpoint(tmp_path / "checkpoint.pt")  # the resume file keeps it
    model = model_from_checkpoint(best)[0]
    loaded = dict(model.state_dict())
    for name, value in trainer.model.state_dict().items():
        assert (loaded[name] == value).all(), name  # the trainer's model now holds best.pt's weights


# -- the command line -----------------------------------------------------------------------------
def _corpus_dir(tmp_path, train, valid, test):
    folder = tmp_path / "corpus"
    folder.mkdir()
    for name, pairs in (("train.de-en.tsv", train), ("val.de-en.tsv", valid), ("test_2016.de-en.tsv", test)):
        (folder / name).write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    return folder


TINY_MODEL = ["--d-model", "16", "--heads", "2", "--layers", "1", "--d-ff", "32", "--bpe-vocab-size", "120",
              "--quiet"]


@pytest.fixture(scope="module")
def budget_run(tmp_path_factory):
    """A multi30k-cpu run (tiny model) on a folder of TSV files, with a budget too small for one epoch."""
    tmp_path = tmp_path_factory.mktemp("budget")
    pairs = _pairs()
    folder = _corpus_dir(tmp_path, pairs * 4, pairs[:6], pairs[6:12])
    # One broken line in the training file: multi30k-cpu skips it (and reports it).
    with open(folder / "train.de-en.tsv", "a", encoding="utf-8") as handle:
        handle.write("ein\tsatz\tmit zwei tabs\n")
    out = tmp_path / "run"
    argv = ["train", "--preset", "multi30k-cpu", "--data-dir", str(folder), "--time-budget", "0.01s",
            "--batch-size", "4", "--out", str(out)] + TINY_MODEL
    return folder, out, argv


def test_a_budget_too_small_for_an_epoch_says_so_and_leaves_a_usable_checkpoint(budget_run, capsys):
    folder, out, argv = budget_run
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "ran out after 1 of the" in err and "best.pt holds the model" in err
    assert "skipped 1 bad line" in err
    model, src, tgt, config = model_from_checkpoint(str(out / "best.pt"))
    assert config.time_budget == pytest.approx(0.01) and config.beam_size == 4
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["schema"] == 1 and results["preset"] == "multi30k-cpu"
    assert results["command"].startswith("python -m solutions train --preset multi30k-cpu --data-dir ")
    assert set(results) >= {"settings", "parameters", "data", "epochs", "valid", "test", "decoding",
                            "wall_minutes", "time_budget_minutes", "machine", "examples"}
    assert results["settings"]["model"]["d_model"] == 16 and results["settings"]["tokenizer"]["tokenizer"] == "bpe"
    assert results["data"]["train"] == {"file": "train.de-en.tsv", "files": ["train.de-en.tsv"],
                                        "sha256": results["data"]["train"]["sha256"], "pairs": 4 * len(_pairs()),
                                        "skipped_lines": 1}
    assert results["data"]["test"]["pairs"] == 6 and results["data"]["valid"]["file"] == "val.de-en.tsv"
    assert results["steps"] == 1 and results["stopped"] == "budget"
    assert results["epochs"][-1]["step"] == 1
    for split in ("valid", "test"):
        assert results[split]["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
        assert "case:lc" in results[split]["tutorial_signature"]
        assert 0 <= results[split]["bleu_tutorial_metric"] <= 100
    # Beam search was never timed in a run this short: the final translations are greedy, and say so.
    assert results["decoding"]["beam_size"] == 1 == results["test"]["beam_size"]
    assert [e["source"] for e in results["examples"]] == [s for s, _ in _pairs()[6:12]]
    assert results["machine"]["threads"] == 2 and results["time_budget_minutes"] == pytest.approx(0.01 / 60, abs=0.01)
    assert len((out / "results.json").read_bytes()) < 100_000


def test_the_quarter_hour_preset_is_the_hours_recipe_on_a_smaller_model():
    """multi30k-cpu-15m changes exactly what the README says it changes, nothing else."""
    hour, quarter = (dataclasses.asdict(PRESETS[name]) for name in ("multi30k-cpu", "multi30k-cpu-15m"))
    changed = {name for name in hour if name != "model" and hour[name] != quarter[name]}
    changed |= {f"model.{name}" for name in hour["model"] if hour["model"][name] != quarter["model"][name]}
    assert changed == {"model.num_encoder_layers", "model.num_decoder_layers", "model.dropout", "warmup_steps",
                       "eval_sentences", "time_budget", "average_last", "length_penalty_grid"}
    assert (quarter["model"]["num_encoder_layers"], quarter["model"]["num_decoder_layers"]) == (2, 2)
    assert (quarter["bpe_vocab_size"], quarter["warmup_steps"], quarter["time_budget"]) == (4000, 500, 900.0)
    assert quarter["average_last"] == 0 and quarter["length_penalty_grid"][-2:] == (2.5, 3.0)


def test_the_quarter_hour_preset_runs_from_the_command_line(tmp_path, capsys):
    """--preset multi30k-cpu-15m: its grid, warm-up and averaging reach the run; bad lines are skipped by default."""
    pairs = _pairs()
    folder = _corpus_dir(tmp_path, pairs * 4, pairs[:6], pairs[6:12])
    with open(folder / "train.de-en.tsv", "a", encoding="utf-8") as handle:
        handle.write("ein\tsatz\tmit zwei tabs\n")
    out = tmp_path / "run"
    assert main(["train", "--preset", "multi30k-cpu-15m", "--data-dir", str(folder), "--time-budget", "0.01s",
                 "--batch-size", "4", "--out", str(out)] + TINY_MODEL) == 0
    assert "skipped 1 bad line" in capsys.readouterr().err
    *_, config = model_from_checkpoint(str(out / "best.pt"))
    assert config.length_penalty_grid == PRESETS["multi30k-cpu-15m"].length_penalty_grid
    assert config.average_last == 0 and config.warmup_steps == 500
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["preset"] == "multi30k-cpu-15m" and results["steps"] == 1


def test_evaluate_reproduces_the_runs_test_score_from_best_pt(budget_run, capsys):
    folder, out, argv = budget_run
    if not (out / "results.json").exists():
        assert main(argv) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    capsys.readouterr()
    test_file = str(folder / "test_2016.de-en.tsv")
    assert main(["evaluate", "--checkpoint", str(out / "best.pt"), "--test", test_file,
                 "--beam", str(results["test"]["beam_size"])]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["bleu"] == results["test"]["bleu"]
    assert printed["bleu_tutorial_metric"] == results["test"]["bleu_tutorial_metric"]


def test_data_dir_needs_one_file_per_role(tmp_path, capsys):
    pairs = _pairs()
    folder = _corpus_dir(tmp_path, pairs, pairs[:3], pairs[3:6])
    (folder / "test_2017.de-en.tsv").write_text("a\tb\n", encoding="utf-8")
    assert main(["train", "--data-dir", str(folder), "--tokenizer", "bpe", "--out", str(tmp_path / "run")]
                + TINY_MODEL) == 2
    err = capsys.readouterr().err
    assert "2 (test_2016.de-en.tsv, test_2017.de-en.tsv)" in err and "expected exactly one test file" in err
    assert main(["train", "--data-dir", str(tmp_path / "nowhere"), "--out", str(tmp_path / "run")]) == 2
    assert "--data-dir: no such folder" in capsys.readouterr().err
    assert main(["train", "--data-dir", str(folder), "--train", TINY_TSV, "--out", str(tmp_path / "run")]) == 2
    assert "not two of them" in capsys.readouterr().err
