"""Checkpoints: the file format, reading it safely, exports, and the trainer's exact resume.

A *checkpoint* (``checkpoint.pt``, format ``transformer-book-checkpoint/1``) holds everything
a run needs to continue exactly where it stopped: the model, Adam's state, the schedule,
the RNG states of ``random``/``numpy``/``torch``, the step and the position inside the
epoch, the :class:`~solutions.app.config.TrainConfig`, both vocabularies (so translating
needs nothing else) and the run's ``data_identity`` (what it was trained on). An *export*
(``best.pt`` and :func:`export_checkpoint`'s files, ``transformer-book-export/1``) is the
inference-only version: weights, config and tokenizers, no optimizer; it cannot be resumed.

:func:`load_checkpoint` reads either (``weights_only=True``), :func:`model_from_checkpoint`
rebuilds the model and its tokenizers for translation, and :class:`CheckpointMixin` is
the :class:`~solutions.app.trainer.Trainer`'s part that writes and restores its state.
Every file is written to a temporary name and renamed, so a crash never leaves half a file.
"""
import dataclasses
import math
import os
import random

import numpy as np
import torch

from ..configuration import ConfigError
from .config import TrainConfig
from .tokenizer import tokenizer_from_state

__all__ = ["CHECKPOINT_FORMAT", "EXPORT_FORMAT", "CheckpointError", "load_checkpoint", "stored_config",
           "model_from_checkpoint", "export_checkpoint", "CheckpointMixin"]

CHECKPOINT_FORMAT = "transformer-book-checkpoint/1"
# An inference-only checkpoint (export_checkpoint): weights, config and tokenizers, no optimizer.
EXPORT_FORMAT = "transformer-book-export/1"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: wrong format, or a config that does not match."""


def _save_atomically(state, path):
    """``torch.save`` to ``path + ".tmp"``, then rename it to ``path`` (its folder made when missing)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    temporary = path + ".tmp"
    torch.save(state, temporary)
    os.replace(temporary, path)
    return path


def _numpy_state_to_plain(state):
    name, keys, pos, has_gauss, cached = state
    return [name, keys.tolist(), int(pos), int(has_gauss), float(cached)]


def _numpy_state_from_plain(state):
    name, keys, pos, has_gauss, cached = state
    return (name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached)


def load_checkpoint(path, map_location="cpu"):
    """Read a checkpoint written by :meth:`Trainer.save_checkpoint` (safely: ``weights_only=True``).

    Also reads the inference-only files of :func:`export_checkpoint` (``state["format"]``
    tells them apart: they have no optimizer and cannot be resumed).

    Raises:
        FileNotFoundError: no such file.
        CheckpointError: not a checkpoint of this package.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"checkpoint not found: {path}")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:  # torch raises several types for a corrupt file
        first_line = (str(error).strip().splitlines() or [""])[0][:200]
        raise CheckpointError(f"{path} is not a readable checkpoint ({type(error).__name__}: {first_line})") from error
    if not isinstance(state, dict) or state.get("format") not in (CHECKPOINT_FORMAT, EXPORT_FORMAT):
        raise CheckpointError(f"{path} is not a checkpoint of this package (format {CHECKPOINT_FORMAT})")
    return state




def stored_config(state):
    """The :class:`~solutions.app.config.TrainConfig` a checkpoint stored.

    Raises:
        CheckpointError: the stored config is not one this package can read (a field
            out of range, or model fields both nested and flat).
    """
    try:
        return TrainConfig.from_dict(state["config"])
    except ConfigError as error:
        raise CheckpointError(f"the checkpoint's config: {error}") from error


def model_from_checkpoint(path_or_state, device="cpu"):
    """Rebuild the trained model and its tokenizers from a checkpoint or an export (for translation).

    Returns:
        ``(model, src_tokenizer, tgt_tokenizer, config)``; the model is in eval mode, built
        as the stored ``config.model`` says (``attention="fused"``, the default: the fast path).

    Raises:
        CheckpointError: when the stored weights do not fit the stored config.
    """
    state = load_checkpoint(path_or_state) if not isinstance(path_or_state, dict) else path_or_state
    config = stored_config(state)
    src_tokenizer = tokenizer_from_state(state["src_tokenizer"])
    tgt_tokenizer = tokenizer_from_state(state["tgt_tokenizer"])
    model = config.model.build(len(src_tokenizer), len(tgt_tokenizer))
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as error:
        raise CheckpointError(f"the checkpoint's weights do not match its config: {str(error).splitlines()[0]}") from error
    return model.to(device).eval(), src_tokenizer, tgt_tokenizer, config


def export_checkpoint(source, path):
    """Write an inference-only checkpoint: weights, config and tokenizers (no optimizer, no history).

    ``translate`` and :func:`model_from_checkpoint` read it like a full checkpoint;
    :meth:`Trainer.from_checkpoint` refuses it (there is nothing to resume). For the
    ``tiny`` preset it is about a third of the full checkpoint, whose Adam state holds
    two more numbers per parameter.

    Args:
        source: a checkpoint path, or a state dict from :func:`load_checkpoint`.
        path: the file to write (replaced atomically).

    Returns:
        ``path``.

    Raises:
        CheckpointError: when ``source`` is not a usable checkpoint.
    """
    state = load_checkpoint(source) if not isinstance(source, dict) else source
    model_from_checkpoint(state)  # the weights must fit the config before anything is written
    exported = {"format": EXPORT_FORMAT}
    for key in ("config", "src_tokenizer", "tgt_tokenizer", "model", "data", "best_bleu", "step", "epoch"):
        exported[key] = state.get(key)
    return _save_atomically(exported, os.fspath(path))


def _refuse_export(state):
    if state.get("format") == EXPORT_FORMAT:
        raise CheckpointError("an inference-only export (no optimizer state) cannot be resumed: "
                              "resume from the full checkpoint it was exported from")



class CheckpointMixin:
    """The :class:`~solutions.app.trainer.Trainer`'s checkpoints: its state, written, restored, resumed.

    Reads and sets the trainer's model, optimizer, scheduler, tokenizers, position
    (``step``, ``epoch``, ``batch_in_epoch``, ``elapsed``), history, ``budget`` and
    ``context`` (only the main process writes).
    """

    # -- checkpoints ----------------------------------------------------------------------------
    # -- checkpoints ----------------------------------------------------------------------------
    def state_dict(self):
        """Everything needed to resume exactly (see the module docstring)."""
        return {
            "format": CHECKPOINT_FORMAT,
            "config": dataclasses.asdict(self.config),
            "src_tokenizer": self.src_tokenizer.state(),
            "tgt_tokenizer": self.tgt_tokenizer.state(),
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng": {
                "python": list(random.getstate()),
                "numpy": _numpy_state_to_plain(np.random.get_state()),
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            },
            "step": self.step,
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "elapsed": self.elapsed,
            "history": self.history,
            "world_size": self.context.world_size,
            "data": self.data_identity,
            "best_bleu": self.best_bleu,
            "planned_steps": self.planned_steps,
            "epoch_log": self.epoch_log,
            "budget_used": self.budget.elapsed() if self.budget is not None else None,
        }

    def save_checkpoint(self, path):
        """Write :meth:`state_dict` to ``path`` (rank 0 only; atomic replace). Returns ``path``."""
        path = os.fspath(path)
        if not self.context.is_main:
            return path
        return _save_atomically(self.state_dict(), path)

    def load_state_dict(self, state):
        """Restore a :meth:`state_dict` (model, optimizer, schedule, RNG, position, history).

        Raises:
            CheckpointError: when the checkpoint's model config or vocabularies differ
            from this trainer's, or when it is an inference-only export.
        """
        _refuse_export(state)
        stored = stored_config(state).fixed_on_resume()
        run = self.config.fixed_on_resume()
        different = [name for name in run if stored[name] != run[name]]
        if different:
            details = ", ".join(f"{n}: checkpoint {stored[n]!r} vs run {run[n]!r}" for n in different)
            raise CheckpointError(f"checkpoint config does not match this run ({details})")
        if (state["src_tokenizer"] != self.src_tokenizer.state()
                or state["tgt_tokenizer"] != self.tgt_tokenizer.state()):
            raise CheckpointError("checkpoint vocabularies differ from this run's (build the trainer with "
                                  "Trainer.from_checkpoint to reuse them)")
        try:
            self.model.load_state_dict(state["model"])
        except RuntimeError as error:
            raise CheckpointError(f"checkpoint weights do not fit the model: {str(error).splitlines()[0]}") from error
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.step, self.epoch, self.batch_in_epoch = state["step"], state["epoch"], state["batch_in_epoch"]
        self.elapsed = state.get("elapsed", 0.0)
        self.data_identity = state.get("data")
        self.best_bleu = state.get("best_bleu")
        self.planned_steps = state.get("planned_steps")
        self.epoch_log = list(state.get("epoch_log") or [])
        if self.budget is not None and state.get("budget_used"):
            self.budget.used = state["budget_used"]  # the budget is the whole run's, interruptions aside
        self.history = state["history"]
        rng = state["rng"]
        python_state = rng["python"]
        random.setstate((python_state[0], tuple(python_state[1]), python_state[2]))
        np.random.set_state(_numpy_state_from_plain(rng["numpy"]))
        torch.set_rng_state(rng["torch"])
        if rng["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])

    @classmethod
    def from_checkpoint(cls, path, train_pairs, valid_pairs=(), out_dir=None, distributed=None, decoders=None,
                        started=None, other_data=False, **changes):
        """A trainer that continues the run saved at ``path``: same config, same vocabularies.

        Args:
            path: the checkpoint.
            train_pairs, valid_pairs: the data (the same as the saved run's for an exact resume).
            out_dir, distributed, decoders, started: as for the trainer's constructor.
            other_data: the data are not the saved run's (``--allow-other-data``): the stored
                best validation BLEU is forgotten (BLEU on another validation set is not comparable).
            changes: config fields to change, e.g. ``epochs=20`` or ``device="cuda"``;
                changing what the weights depend on (:meth:`TrainConfig.fixed_on_resume`: the
                model's sizes, the tokenizer) raises :class:`CheckpointError`.
        """
        state = load_checkpoint(path)
        _refuse_export(state)
        stored = stored_config(state)
        config = stored.replace(**changes)
        before, after = stored.fixed_on_resume(), config.fixed_on_resume()
        clashing = [name for name in before if before[name] != after[name]]
        if clashing:
            raise CheckpointError(
                "checkpoint config does not match: " + ", ".join(
                    f"{n} is {before[n]!r} in the checkpoint, {after[n]!r} requested" for n in clashing)
            )
        trainer = cls(config, train_pairs, valid_pairs,
                      src_tokenizer=tokenizer_from_state(state["src_tokenizer"]),
                      tgt_tokenizer=tokenizer_from_state(state["tgt_tokenizer"]),
                      out_dir=out_dir, distributed=distributed, decoders=decoders, started=started)
        trainer.load_state_dict(state)
        if other_data:
            trainer.best_bleu = None
        return trainer

    def _keep_best(self, bleu):
        """Record a new best validation BLEU; with an ``out_dir``, also write ``best.pt`` (no optimizer state)."""
        if math.isnan(bleu) or (self.best_bleu is not None and bleu <= self.best_bleu):
            return False
        self.best_bleu = bleu
        if self.out_dir is not None:
            # Saved after best_bleu is updated, so that best.pt records its own score.
            self.save_best(os.path.join(self.out_dir, "best.pt"))
        return True

    def save_best(self, path, model_state=None):
        """Write the inference checkpoint ``best.pt``: weights, config, tokenizers, history; no optimizer.

        ``translate``, ``evaluate`` and :func:`model_from_checkpoint` read it; a run
        resumes from ``checkpoint.pt`` (which keeps the optimizer state). Rank 0 only.

        Args:
            path: the file (replaced atomically).
            model_state: weights to store instead of the model's (e.g. averaged ones).
        """
        path = os.fspath(path)
        if not self.context.is_main:
            return path
        state = {"format": EXPORT_FORMAT, "config": dataclasses.asdict(self.config),
                 "src_tokenizer": self.src_tokenizer.state(), "tgt_tokenizer": self.tgt_tokenizer.state(),
                 "model": self.model.state_dict() if model_state is None else model_state,
                 "data": self.data_identity, "best_bleu": self.best_bleu, "step": self.step, "epoch": self.epoch,
                 "history": self.history}
        return _save_atomically(state, path)
