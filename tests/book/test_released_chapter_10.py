"""The released chapter 10 decodes chapter 9's run, as a student who ran chapter 9 has it, and
trains that run itself when it is missing.

Chapter 10's first code cell loads the model chapter 9 saved (``book_checkpoint``: the
runs folder beside the student package, or ``$TRANSFORMER_BOOK_RUNS``) and, when it
finds none of the book's run, trains the same run (626 steps: most of the minute a blank
chapter 10 took here before). A student who runs chapter 10 has normally run chapter 9
in the same environment (the README: install the next chapter's wheel over the last);
pip leaves the runs folder where it is. So:

* **the blank release** (``tests/released_runs.run_blank``, after the answered check of
  ``test_release_runs.py``) runs in a student venv holding chapter 10's wheel, with the
  run the book build's chapter 9 execution saved placed where the student's chapter 9
  saves it; the cell says it decodes the loaded model. The build is not started here: the
  test waits for a build under way (the other xdist worker's), and with no fresh build
  (this module alone) the chapter trains the run itself, as before, and the cell says so.
  The module is the last of the group ``"releases"`` (its name sorts last), so in ``make
  test`` the build has long ended when it starts;
* **the path without the run** is run on chapter 9's run made tiny (the same cell of the
  released notebook, its statements up to the ``if`` on the checkpoint, in the student
  venv, with an empty runs folder): it says it trains, trains two epochs without
  translating (chapter 10's ``greedy_decode`` is blank), and its two models are, weight
  for weight, those chapter 9's way of training gives (the whole run, translating at each
  epoch's end, with the reference package).
"""
from __future__ import annotations

import dataclasses
import json
import subprocess
import time
from pathlib import Path

import pytest
import torch
from book_helpers import after_any_book_build
from notebook_runs import slowest_cells
from released_runs import check_answered, classroom, run_blank, stream_text

from solutions.app.checkpoint import load_checkpoint
from solutions.app.config import TrainConfig, book_checkpoint, book_config
from solutions.app.synthetic import make_synthetic_splits
from solutions.app.trainer import Trainer
from solutions.configuration import TransformerConfig

# The release of every chapter (released_chapters), on the group's worker; the group's last module.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("releases")]

CHAPTER = "10_inference"
#: chapter 9's two saved models: epoch -> file name (``book_checkpoint``'s)
SAVED = {2: "checkpoint.pt", 1: "epoch1.pt"}
LOADED = "decoding chapter 9's model, loaded from the runs folder"
TRAINED = "training the same run here"


@pytest.fixture(scope="module")
def room(released_chapters, tmp_path_factory):
    """A student venv with chapter 10's wheel and a Jupyter kernel spec (:class:`released_runs.Classroom`)."""
    with classroom(released_chapters, tmp_path_factory) as room:
        room.use(CHAPTER)
        yield room


def book_build_run() -> dict[int, Path] | None:
    """Chapter 9's run as the book build left it (epoch -> file), once no build is under way;
    None without a fresh build, or when the files there are not the book's run (its config,
    each file its epoch: what chapter 10 checks before it loads them)."""
    if not after_any_book_build():
        return None
    saved = {epoch: book_checkpoint(name) for epoch, name in SAVED.items()}
    if not all(path.is_file() for path in saved.values()):
        return None
    for epoch, path in saved.items():
        state = load_checkpoint(path)
        if TrainConfig.from_dict(state["config"]) != book_config() or state["epoch"] != epoch:
            return None
    return saved


def student_runs_folder(room) -> Path:
    """Where the student's chapter 9 saves its run: the folder of the installed package's
    ``book_checkpoint()``, asked of the student venv."""
    asked = subprocess.run([str(room.python), "-c", "from solutions.app.config import book_checkpoint; "
                            "print(book_checkpoint())"], cwd=room.work, env=room.env, capture_output=True,
                           text=True, timeout=120)
    assert asked.returncode == 0, asked.stderr
    return Path(asked.stdout.strip()).parent


def test_the_released_chapter_10_decodes_chapter_9s_run(room):
    started = time.perf_counter()
    folder = room.hand_out(CHAPTER)
    check_answered(room, CHAPTER, folder)
    waited = time.perf_counter()
    run = book_build_run()
    waited = time.perf_counter() - waited
    if run is not None:  # the files chapter 9 saved, where the student's chapter 9 saves them
        runs = student_runs_folder(room)
        runs.mkdir(parents=True, exist_ok=True)
        for path in run.values():
            (runs / path.name).write_bytes(path.read_bytes())
    blank, stopped = run_blank(room, CHAPTER, folder)
    loader = next(c for c in blank.cells if c.cell_type == "code" and "book_checkpoint(" in c.source)
    said = stream_text(loader)
    assert (LOADED if run is not None else TRAINED) in said, said
    print(f"\n{CHAPTER}: {'the book build' if run else 'no build'}'s chapter 9 run (waited {waited:.0f} s for it), "
          f"{time.perf_counter() - started:.0f} s, {stopped} demonstrations waiting on a blank exercise; "
          f"slowest cells: {slowest_cells(blank)}")


# Chapter 9's run made tiny: the branch, not the numbers (those are the build's, on the real run).
TINY = TrainConfig(model=TransformerConfig(d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                                           d_ff=32, dropout=0.1, max_len=64),
                   batch_size=16, epochs=2, warmup_steps=4, eval_sentences=8, device="cpu", quiet=True)
TINY_SPLITS = {"num_train": 64, "num_valid": 8, "num_test": 8, "seed": 0}

# In the student venv: the setup cell and the loading cell's statements up to its ``if`` on the
# checkpoint, with the book's run replaced by the tiny one; both models saved for the comparison.
WITHOUT_THE_RUN = """
import ast, json, sys
import nbformat
import torch
import solutions.app.config as config
from solutions.app.config import TrainConfig
from solutions.app.synthetic import make_synthetic_splits

torch.set_num_threads(1)
tiny, splits, out = TrainConfig.from_dict(json.loads(sys.argv[2])), json.loads(sys.argv[3]), sys.argv[4]
config.book_config = lambda: tiny
config.book_splits = lambda: make_synthetic_splits(**splits)
nb = nbformat.read(sys.argv[1], as_version=4)
setup = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "setup")
loader = next(c for c in nb.cells if c.cell_type == "code" and "book_checkpoint(" in c.source)
body = ast.parse(loader.source).body
upto = next(i for i, node in enumerate(body) if isinstance(node, ast.If)) + 1
cell = {}
exec(compile(setup.source, "setup cell", "exec"), cell)
exec(compile(ast.Module(body[:upto], type_ignores=[]), "loading cell", "exec"), cell)
torch.save({"final": cell["model"].state_dict(), "epoch1": cell["model_epoch1"].state_dict(),
            "epochs": list(cell["valid"]["epoch"])}, out)
"""


def test_without_chapter_9s_run_the_released_chapter_10_trains_the_same_run(room, tmp_path):
    env = dict(room.env, TRANSFORMER_BOOK_RUNS=str(tmp_path / "runs"))  # an empty runs folder
    released = room.out / CHAPTER / f"{CHAPTER}.ipynb"
    out = tmp_path / "trained.pt"
    ran = subprocess.run([str(room.python), "-c", WITHOUT_THE_RUN, str(released), json.dumps(dataclasses.asdict(TINY)),
                          json.dumps(TINY_SPLITS), str(out)], cwd=room.work, env=env, capture_output=True,
                         text=True, timeout=300)
    assert ran.returncode == 0, ran.stdout + ran.stderr[-3000:]
    assert TRAINED in ran.stdout and LOADED not in ran.stdout, ran.stdout
    trained = torch.load(out)
    assert trained["epochs"] == [1, 2]

    # chapter 9's way, with the reference package: one epoch (saved), then the second, validating
    # by translation at each epoch's end
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train_pairs, valid_pairs, _ = make_synthetic_splits(**TINY_SPLITS)
        trainer = Trainer(TINY, train_pairs, valid_pairs)
        trainer.train(epochs=1)
        epoch1 = {k: v.clone() for k, v in trainer.model.state_dict().items()}
        trainer.train()
    finally:
        torch.set_num_threads(threads)
    for name, want in (("epoch1", epoch1), ("final", trainer.model.state_dict())):
        got = trained[name]
        assert got.keys() == want.keys(), name
        assert all(torch.equal(got[k], want[k]) for k in want), f"the {name} model is not chapter 9's"
    assert not all(torch.equal(epoch1[k], trainer.model.state_dict()[k]) for k in epoch1)  # two epochs, two models
