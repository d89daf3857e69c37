"""Checkpoints: the file format, reading it safely, exports, and the trainer's exact resume.

A *checkpoint* (``checkpoint.pt``, format ``transformer-book-checkpoint/1``) holds everything
a run needs to continue exactly where it stopped: the model, Adam's state, the schedule,
the RNG states of ``random``/``numpy``/``torch``, the step and the position inside the
epoch, the :class:`~solutions.app.config.TrainConfig`, both vocabularies (so translating
needs nothing else) and the run's ``data_identity`` (what it was trained on). An *export*
(``best.pt`` and :func:`export_checkpoint`'s files, ``transformer-book-export/1``) is the
inference-only version: weights, config and tokenizers, no optimizer; it cannot be resumed.

:func:`load_checkpoint` reads either (``weights_only=True``), :func:`model_from_checkpoint`
rebuilds the model and its tokenizers for translation. For the
:class:`~solutions.app.trainer.Trainer`: :class:`Checkpointer` writes a run's files in its
output folder (rank 0 only) and keeps the best validation BLEU; :func:`rng_state` and
:func:`trainer_state` and :func:`restore_trainer` turn a trainer's public state (model,
optimizer, schedule, position, history, the random generators, its plan's budget) into a
checkpoint and back, :func:`best_state` into ``best.pt``; :func:`resume_point` reads a
checkpoint to continue from and checks it against the requested changes. Every file is
written to a temporary name and renamed, so a crash never leaves half a file.
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

__all__ = ["CHECKPOINT_FORMAT", "EXPORT_FORMAT", "DECODING_KEY", "CheckpointError", "load_checkpoint", "stored_config",
           "model_from_checkpoint", "export_checkpoint", "Checkpointer", "trainer_state", "restore_trainer",
           "best_state", "resume_point", "store_decoding", "decoding_of"]

CHECKPOINT_FORMAT = "transformer-book-checkpoint/1"
# An inference-only checkpoint (export_checkpoint): weights, config and tokenizers, no optimizer.
EXPORT_FORMAT = "transformer-book-export/1"
#: The key of a checkpoint's decoding tuned on validation (:func:`~solutions.app.tuning.tune_decoding`'s result).
DECODING_KEY = "decoding"


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
    for key in ("config", "src_tokenizer", "tgt_tokenizer", "model", "data", "best_bleu", "step", "epoch",
                DECODING_KEY):
        exported[key] = state.get(key)
    return _save_atomically(exported, os.fspath(path))


def store_decoding(source, decoding, path=None):
    """Write a checkpoint with its tuned decoding (:func:`~solutions.app.tuning.tune_decoding`'s result) stored.

    Args:
        source: a checkpoint or export path.
        decoding: the tuned decoding (``beam_size``, ``length_penalty``, the grid's scores ...).
        path: the file to write (default: ``source``, replaced atomically).

    Returns:
        The path written.
    """
    state = load_checkpoint(source)
    state[DECODING_KEY] = decoding
    return _save_atomically(state, os.fspath(path if path is not None else source))


def decoding_of(state):
    """``(beam_size, length_penalty, tuned)``: how a checkpoint translates unless told otherwise.

    The decoding tuned on validation when the checkpoint stores one (``tuned`` True), else its
    config's ``beam_size`` and ``length_penalty``.
    """
    tuned = state.get(DECODING_KEY)
    if tuned:
        return tuned["beam_size"], tuned["length_penalty"], True
    config = stored_config(state)
    return config.beam_size, config.length_penalty, False


def _refuse_export(state):
    if state.get("format") == EXPORT_FORMAT:
        raise CheckpointError("an inference-only export (no optimizer state) cannot be resumed: "
                              "resume from the full checkpoint it was exported from")


def _rng_state():
    """The states of ``random``, ``numpy`` and ``torch`` (and CUDA's), as a checkpoint stores them."""
    return {
        "python": list(random.getstate()),
        "numpy": _numpy_state_to_plain(np.random.get_state()),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def _restore_rng(state):
    """Set the generators to a :func:`_rng_state`."""
    python_state = state["python"]
    random.setstate((python_state[0], tuple(python_state[1]), python_state[2]))
    np.random.set_state(_numpy_state_from_plain(state["numpy"]))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _check_resumable(state, config, src_tokenizer, tgt_tokenizer):
    """Refuse a checkpoint whose model or vocabularies a run of ``config`` cannot continue.

    Raises:
        CheckpointError: an inference-only export, a model config other than ``config``'s
            (:meth:`~solutions.app.config.TrainConfig.fixed_on_resume`), or other vocabularies.
    """
    _refuse_export(state)
    stored = stored_config(state).fixed_on_resume()
    run = config.fixed_on_resume()
    different = [name for name in run if stored[name] != run[name]]
    if different:
        details = ", ".join(f"{n}: checkpoint {stored[n]!r} vs run {run[n]!r}" for n in different)
        raise CheckpointError(f"checkpoint config does not match this run ({details})")
    if state["src_tokenizer"] != src_tokenizer.state() or state["tgt_tokenizer"] != tgt_tokenizer.state():
        raise CheckpointError("checkpoint vocabularies differ from this run's (build the trainer with "
                              "Trainer.from_checkpoint to reuse them)")


def resume_point(path, **changes):
    """What a run continued from ``path`` starts with: ``(state, config, src_tokenizer, tgt_tokenizer)``.

    Args:
        path: the checkpoint (not an export).
        changes: config fields to change, e.g. ``epochs=20`` or ``device="cuda"``; changing
            what the weights depend on (:meth:`~solutions.app.config.TrainConfig.fixed_on_resume`:
            the model's sizes, the tokenizer) raises :class:`CheckpointError`.
    """
    state = load_checkpoint(path)
    _refuse_export(state)
    stored = stored_config(state)
    config = stored.replace(**changes)
    before, after = stored.fixed_on_resume(), config.fixed_on_resume()
    clashing = [name for name in before if before[name] != after[name]]
    if clashing:
        raise CheckpointError("checkpoint config does not match: " + ", ".join(
            f"{n} is {before[n]!r} in the checkpoint, {after[n]!r} requested" for n in clashing))
    return state, config, tokenizer_from_state(state["src_tokenizer"]), tokenizer_from_state(state["tgt_tokenizer"])


class Checkpointer:
    """A run's files in its output folder: ``checkpoint.pt`` (to resume) and ``best.pt`` (the best weights).

    Only the main process writes (``is_main``); every file is replaced atomically. It also
    keeps the best validation BLEU so far, which ``best.pt`` records.

    Args:
        out_dir: the folder, or ``None`` (nothing is written; the best BLEU is still kept).
        is_main: whether this process writes (rank 0 of a distributed run).

    Attributes:
        best_bleu: the highest validation BLEU passed to :meth:`improves` (``None`` before).
    """

    def __init__(self, out_dir, is_main=True):
        self.out_dir, self.is_main = out_dir, is_main
        self.best_bleu = None

    def path(self, name):
        """``out_dir/name``, or ``None`` without an output folder."""
        return os.path.join(self.out_dir, name) if self.out_dir is not None else None

    def save(self, make_state, path):
        """Write ``make_state()`` to ``path`` (rank 0 only: elsewhere it is not even made; atomic
        replace). Returns ``path``."""
        path = os.fspath(path)
        return _save_atomically(make_state(), path) if self.is_main else path

    def improves(self, bleu):
        """Whether ``bleu`` beats :attr:`best_bleu` (NaN never does); if so it becomes the best."""
        if math.isnan(bleu) or (self.best_bleu is not None and bleu <= self.best_bleu):
            return False
        self.best_bleu = bleu
        return True

    def best_weights(self):
        """The weights of ``out_dir/best.pt`` when it exists, else ``None``."""
        path = self.path("best.pt")
        return load_checkpoint(path)["model"] if path is not None and os.path.isfile(path) else None


def trainer_state(trainer):
    """A :class:`~solutions.app.trainer.Trainer`'s checkpoint (format :data:`CHECKPOINT_FORMAT`), from its
    public attributes: config, tokenizers, model, optimizer, scheduler, position, history, data
    identity, best BLEU, epoch log, its plan's :meth:`~solutions.app.schedule.RunPlan.state_dict`,
    and the states of the random generators."""
    return {"format": CHECKPOINT_FORMAT, "config": dataclasses.asdict(trainer.config),
            "src_tokenizer": trainer.src_tokenizer.state(), "tgt_tokenizer": trainer.tgt_tokenizer.state(),
            "model": trainer.model.state_dict(), "optimizer": trainer.optimizer.state_dict(),
            "scheduler": trainer.scheduler.state_dict(), "rng": _rng_state(), "step": trainer.step,
            "epoch": trainer.epoch, "batch_in_epoch": trainer.batch_in_epoch, "elapsed": trainer.elapsed,
            "history": trainer.history, "world_size": trainer.context.world_size, "data": trainer.data_identity,
            "best_bleu": trainer.checkpointer.best_bleu, "epoch_log": trainer.epoch_log,
            **trainer.plan.state_dict()}


def restore_trainer(trainer, state):
    """Restore a :func:`trainer_state` into ``trainer`` (model, optimizer, schedule, RNG, position, history).

    Raises:
        CheckpointError: when the checkpoint's model config or vocabularies differ
            from the trainer's, or when it is an inference-only export.
    """
    _check_resumable(state, trainer.config, trainer.src_tokenizer, trainer.tgt_tokenizer)
    try:
        trainer.model.load_state_dict(state["model"])
    except RuntimeError as error:
        raise CheckpointError(f"checkpoint weights do not fit the model: {str(error).splitlines()[0]}") from error
    trainer.optimizer.load_state_dict(state["optimizer"])
    trainer.scheduler.load_state_dict(state["scheduler"])
    trainer.step, trainer.epoch, trainer.batch_in_epoch = state["step"], state["epoch"], state["batch_in_epoch"]
    trainer.elapsed = state.get("elapsed", 0.0)
    trainer.data_identity = state.get("data")
    trainer.checkpointer.best_bleu = state.get("best_bleu")
    trainer.record.load(state["history"], state.get("epoch_log"))
    trainer.plan.load_state_dict(state)
    _restore_rng(state["rng"])


def best_state(trainer, model_state=None):
    """The inference checkpoint ``best.pt`` of ``trainer`` (format :data:`EXPORT_FORMAT`): weights
    (``model_state`` instead of the model's when given), config, tokenizers, data, best BLEU,
    position and history; no optimizer. ``translate``, ``evaluate`` and
    :func:`model_from_checkpoint` read it; a run resumes from ``checkpoint.pt``."""
    return {"format": EXPORT_FORMAT, "config": dataclasses.asdict(trainer.config),
            "src_tokenizer": trainer.src_tokenizer.state(), "tgt_tokenizer": trainer.tgt_tokenizer.state(),
            "model": trainer.model.state_dict() if model_state is None else model_state,
            "data": trainer.data_identity, "best_bleu": trainer.checkpointer.best_bleu, "step": trainer.step,
            "epoch": trainer.epoch, "history": trainer.history}
