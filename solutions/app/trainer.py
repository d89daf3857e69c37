"""The training loop: Adam with warm-up, label smoothing, evaluation, exact-resume checkpoints.

:class:`Trainer` trains a :class:`~solutions.model.Transformer` on sentence pairs
the way section 5 of the paper describes, at any scale from the book's ``tiny``
preset on a laptop CPU to the paper's ``base`` model on several GPUs:

- Adam(β1 = 0.9, β2 = 0.98, ε = 1e-9) with the warm-up schedule
  :func:`~solutions.training.noam_lr` (section 5.3), label-smoothed cross-entropy
  (section 5.4), gradient-norm clipping (not in the paper; a safety net);
- batches of similar length (:class:`~solutions.app.data.BucketBatchSampler`);
- after every epoch: validation loss, token accuracy, exact match and BLEU of
  greedy translations, kept in :attr:`Trainer.history`. BLEU is sacreBLEU's standard
  corpus BLEU (:class:`CorpusBLEU`) of the *detokenised* translations against the
  references as they are in the data; its signature is logged once per run;
- off a terminal, a log line every ``progress_seconds`` seconds or ``progress_steps``
  steps with the step, loss, tokens per second and the ETA (on a terminal, a tqdm bar);
- checkpoints that resume *exactly*: model, optimizer, schedule, the RNG states of
  ``random``/``numpy``/``torch``, the step and the position inside the epoch, plus the
  configuration, both vocabularies (so translating needs nothing else) and
  :attr:`Trainer.data_identity` (what the run was trained on); with an ``out_dir``,
  ``best.pt`` beside ``checkpoint.pt`` keeps the epoch of highest validation BLEU;
  :func:`export_checkpoint` writes the small inference-only version (no optimizer);
- ``device="auto" | "cpu" | "cuda"``; ``bf16=True`` runs the forward pass under
  ``torch.autocast(dtype=torch.bfloat16)`` on CUDA and on a CPU with native bfloat16
  arithmetic (AVX512-BF16 or AMX; :func:`cpu_has_bf16`: about 1.5 times the steps per
  second of float32 on 2 cores of an AMD EPYC with AVX512-BF16; the weights, the
  optimizer and the loss stay float32); on a CPU without it the switch warns and is
  ignored (emulated bfloat16 is slower than float32). ``compile=True`` uses
  ``torch.compile`` on CUDA and warns and is ignored on the CPU (it needs a C++ toolchain);
- several processes under ``torchrun`` (``DistributedDataParallel``; each process
  takes its share of every global batch; only rank 0 logs and saves).

Paper: section 5 (Training) and Table 3 (the base configuration).
"""
import collections
import dataclasses
import logging
import math
import os
import random
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from ..fused import fuse_attention
from ..masking import decoder_mask, padding_mask
from ..model import ConfigError, TransformerConfig
from .evaluation import CorpusBLEU
from .summary import (TRANSLATIONS_FILE, LoadSampler, RunSummary, results_document, score_translations,
                      write_json, write_translations)
from ..tokens import PAD_ID
from ..training import noam_lr
from ..translation import translate
from .data import (BucketBatchSampler, TranslationDataset, build_tokenizer, collate_batch, make_synthetic_splits,
                   tokenizer_from_state)
from .distributed import all_reduce_sum, setup_distributed

__all__ = ["TrainConfig", "TimeBudget", "warmup_linear_decay", "PRESETS", "Trainer", "CheckpointError",
           "load_checkpoint", "model_from_checkpoint", "resolve_device", "export_checkpoint", "CorpusBLEU",
           "book_splits", "book_config", "book_checkpoint"]

logger = logging.getLogger("solutions.app.trainer")

CHECKPOINT_FORMAT = "transformer-book-checkpoint/1"
# An inference-only checkpoint (export_checkpoint): weights, config and tokenizers, no optimizer.
EXPORT_FORMAT = "transformer-book-export/1"


@dataclass
class TrainConfig:
    """Everything that defines a training run (stored in every checkpoint).

    Model: ``model``, a :class:`~solutions.model.TransformerConfig` (section 3, Table 3:
    ``d_model``, ``num_heads``, the layers, ``d_ff``, ``dropout``, ``max_len``,
    ``share_embeddings``, ``norm_first``), checked when it is made. Read its sizes there
    (``config.model.d_model``); :meth:`replace` takes them by name too
    (``config.replace(d_model=64, epochs=3)``).

    Optimisation (section 5.3-5.4): ``batch_size`` (sentence pairs per global batch),
    ``epochs``, ``max_steps`` (stop early; ``None`` = run all epochs),
    ``warmup_steps``, ``lr_factor`` (multiplies :func:`noam_lr`), ``label_smoothing``,
    ``clip_norm`` (``None`` = no clipping).

    Data: ``tokenizer`` (``"word"`` or ``"bpe"``), ``bpe_vocab_size``, ``max_tokens``
    (longer pairs are dropped), ``bucket_size``. With ``model.share_embeddings`` one
    tokenizer is trained on both sides (the paper's shared vocabulary), and the two
    embeddings and the output projection are one matrix (section 3.4).

    Run: ``seed``, ``device`` (``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:1"``),
    ``bf16`` (CUDA, or a CPU with native bfloat16; elsewhere it warns and is ignored),
    ``compile`` (CUDA only; warns and is ignored on the CPU),
    ``eval_sentences`` (how many validation sentences are translated for exact
    match and BLEU each epoch; 0 = skip), ``log_every`` (steps between history points),
    ``quiet`` (no progress bar, no log lines), ``threads`` (``torch.set_num_threads``
    when the trainer is built; ``None`` = torch's default), ``progress_seconds`` and
    ``progress_steps`` (off a terminal, a progress line after this many seconds or
    steps, whichever comes first; ``None`` = never by that measure).

    Schedule and budget: ``schedule`` is ``"noam"`` (the paper's warm-up then
    ``1/sqrt(step)``, scaled by ``lr_factor``) or ``"linear"`` (:func:`warmup_linear_decay`:
    ``warmup_steps`` of linear warm-up to ``lr_peak``, then a linear decay that ends at
    the last planned step). ``time_budget`` (seconds, ``None`` = none) is the wall time
    of the whole run: :class:`TimeBudget` plans the steps that fit it (see
    :meth:`Trainer.train`). ``average_last`` (0 = off) averages the weights of the last
    N epoch ends at the end of the run (:meth:`Trainer.finish`). ``beam_size`` and
    ``length_penalty`` are the decoding of the final validation and test translations.

    A checkpoint stores ``dataclasses.asdict(config)`` (the model nested under
    ``"model"``); :meth:`from_dict` reads it back, and the flat dictionaries of older
    checkpoints too.
    """

    # model (its defaults: the paper's base model)
    model: TransformerConfig = field(default_factory=TransformerConfig)
    # optimisation
    batch_size: int = 64
    epochs: int = 10
    max_steps: int = None
    warmup_steps: int = 4000
    lr_factor: float = 1.0
    label_smoothing: float = 0.1
    clip_norm: float = 1.0
    # data
    tokenizer: str = "word"
    bpe_vocab_size: int = 8000
    max_tokens: int = 200
    bucket_size: int = 50
    # run
    seed: int = 0
    device: str = "auto"
    bf16: bool = False
    compile: bool = False
    eval_sentences: int = 500
    log_every: int = 10
    quiet: bool = False
    threads: int = None
    progress_seconds: float = 30.0
    progress_steps: int = None
    # schedule, budget and final decoding
    schedule: str = "noam"
    lr_peak: float = 1e-3
    time_budget: float = None
    average_last: int = 0
    beam_size: int = 1
    length_penalty: float = 0.6

    def __post_init__(self):
        """Check every field once, here (a :class:`~solutions.model.ConfigError` naming the field)."""
        if not isinstance(self.model, TransformerConfig):
            raise TypeError(f"model must be a TransformerConfig, got {type(self.model).__name__}")
        for name, (smallest, optional) in _INTEGER_FIELDS.items():
            value = getattr(self, name)
            if value is None and optional:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < smallest:
                allowed = f"an integer >= {smallest}" + (" or None" if optional else "")
                raise ConfigError(f"{name} must be {allowed}, got {value!r}", (name,))
        for name, (low, included, high, optional) in _NUMBER_FIELDS.items():
            value = getattr(self, name)
            if value is None and optional:
                continue
            number = not isinstance(value, bool) and isinstance(value, (int, float))
            if not number or not (value >= low if included else value > low) or (high is not None and value >= high):
                rule = f"{'>=' if included else '>'} {low}" + (f" and < {high}" if high is not None else "")
                raise ConfigError(f"{name} must be a number {rule}{' or None' if optional else ''}, got {value!r}",
                                  (name,))
        for name, choices in (("tokenizer", ("word", "bpe")), ("schedule", ("noam", "linear"))):
            if getattr(self, name) not in choices:
                raise ConfigError(f"{name} must be one of {choices}, got {getattr(self, name)!r}", (name,))
        for name in ("bf16", "compile", "quiet"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be True or False, got {getattr(self, name)!r}", (name,))
        if not isinstance(self.device, str) or not self.device:
            raise ConfigError(f"device must be a name such as 'auto', 'cpu' or 'cuda:0', got {self.device!r}",
                              ("device",))

    def replace(self, **changes):
        """A copy with some fields changed; the model's fields may be named directly
        (``replace(d_model=64)`` changes ``model.d_model``).

        Raises:
            ValueError: an unknown name, or a model the :class:`TransformerConfig` refuses
                (:class:`~solutions.model.ConfigError`, naming the field).
        """
        own = {f.name for f in dataclasses.fields(self)}
        sizes = {name: changes.pop(name) for name in list(changes) if name in _MODEL_NAMES}
        unknown = set(changes) - own
        if unknown:
            raise ValueError(f"unknown config fields: {sorted(unknown)}")
        model = changes.pop("model", self.model)
        return dataclasses.replace(self, model=model.replace(**sizes) if sizes else model, **changes)

    @classmethod
    def from_dict(cls, stored):
        """The config a checkpoint stored (``dataclasses.asdict``): the model nested under
        ``"model"``, or, in checkpoints written before it was, flat among the other fields."""
        stored = dict(stored)
        model = stored.pop("model", None)
        flat = {name: stored.pop(name) for name in list(stored) if name in _MODEL_NAMES}
        if model is None:
            model = flat
        elif flat:
            raise CheckpointError(f"a stored config has model fields both nested and flat: {sorted(flat)}")
        return cls(model=TransformerConfig(**model), **stored)

    def fixed_on_resume(self):
        """What a checkpoint's weights and vocabularies depend on, so a resumed run keeps it:
        ``{name: value}`` for the model's fields but ``dropout``, and the tokenizer's."""
        fixed = {name: getattr(self.model, name) for name in _MODEL_NAMES if name != "dropout"}
        return {**fixed, "tokenizer": self.tokenizer, "bpe_vocab_size": self.bpe_vocab_size}


_MODEL_NAMES = tuple(f.name for f in dataclasses.fields(TransformerConfig))
# TrainConfig's integer fields: {name: (smallest value, None allowed)}.
_INTEGER_FIELDS = {
    "batch_size": (1, False), "epochs": (1, False), "max_steps": (1, True), "warmup_steps": (0, False),
    "bpe_vocab_size": (5, False), "max_tokens": (1, False), "bucket_size": (1, False), "seed": (0, False),
    "eval_sentences": (0, False), "log_every": (1, False), "threads": (1, True), "progress_steps": (1, True),
    "average_last": (0, False), "beam_size": (1, False),
}
# Its real-valued fields: {name: (bound, bound included, upper bound (excluded) or None, None allowed)}.
_NUMBER_FIELDS = {
    "lr_factor": (0, False, None, False), "label_smoothing": (0, True, 1, False),
    "clip_norm": (0, True, None, True),  # 0 or None: no clipping
    "progress_seconds": (0, True, None, True), "lr_peak": (0, False, None, False),
    "time_budget": (0, False, None, True), "length_penalty": (0, True, None, False),
}


PRESETS = {
    # Multi30k German->English (29,000 pairs) in a wall-clock hour on 2 CPU cores: a 3+3 layer pre-norm
    # model of width 256 (about 7.6 M parameters with a shared 8k BPE vocabulary and tied embeddings),
    # bfloat16 autocast where the CPU has it, a warm-up to 2e-3 then linear decay fitted to the steps the
    # time budget allows, the last epochs averaged, beam 4. Measured on validation (README, "Multi30k"):
    # pre-norm at 2e-3 learns about 4 times faster than post-norm at 1e-3 in the first epoch, bfloat16
    # gives 1.35-1.5 times the steps per second at the same loss, word-level vocabularies do worse.
    "multi30k-cpu": TrainConfig(
        model=TransformerConfig(d_model=256, num_heads=4, num_encoder_layers=3, num_decoder_layers=3, d_ff=1024,
                                dropout=0.1, max_len=160, norm_first=True, share_embeddings=True),
        tokenizer="bpe", bpe_vocab_size=8000,
        batch_size=64, epochs=100, warmup_steps=800, schedule="linear", lr_peak=2e-3, bf16=True,
        label_smoothing=0.1, clip_norm=1.0, eval_sentences=2000, log_every=50, threads=2,
        time_budget=3600.0, average_last=4, beam_size=4, length_penalty=0.6,
    ),
    # The book's model: learns the synthetic task (>= 95% exact match) in minutes on 2 CPU cores.
    "tiny": TrainConfig(
        model=TransformerConfig(d_model=128, num_heads=4, num_encoder_layers=2, num_decoder_layers=2, d_ff=256,
                                dropout=0.1, max_len=64),
        batch_size=64, epochs=3, warmup_steps=400, lr_factor=0.5,
        label_smoothing=0.1, clip_norm=1.0, eval_sentences=500, log_every=20,
    ),
    # The paper's base model (Table 3): 512 / 8 heads / 6+6 layers / 2048, P_drop 0.1,
    # warm-up 4000 steps, label smoothing 0.1.
    "base": TrainConfig(
        model=TransformerConfig(max_len=256), batch_size=128, epochs=20, warmup_steps=4000, lr_factor=1.0,
        label_smoothing=0.1, clip_norm=1.0, eval_sentences=1000, log_every=50,
    ),
}


# The book's training run, defined once: chapter 9 trains it and saves it (book_checkpoint), chapter 10
# decodes that model and trains the same run only when the checkpoint is missing.
def book_splits():
    """The synthetic splits of the book's run: 20,000 training, 500 validation and 500 test pairs (seed 0)."""
    return make_synthetic_splits(num_train=20000, num_valid=500, num_test=500, seed=0)


def book_config():
    """The config of the book's run: the ``tiny`` preset for two epochs (626 steps) on the CPU, seed 0."""
    return PRESETS["tiny"].replace(epochs=2, device="cpu", eval_sentences=500, log_every=10, quiet=True)


def book_checkpoint(name="checkpoint.pt"):
    """Where chapter 9 saves the book's run: ``$TRANSFORMER_BOOK_RUNS/book/09_training/<name>``.

    Without the variable, ``runs/`` beside the ``solutions`` package (the repository's root).
    """
    package_parent = Path(__file__).resolve().parents[__name__.count(".")]  # solutions/app/trainer.py -> the folder holding solutions/
    return Path(os.environ.get("TRANSFORMER_BOOK_RUNS", package_parent / "runs")) / "book" / "09_training" / name


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: wrong format, or a config that does not match."""


def cpu_has_bf16():
    """True when this CPU computes bfloat16 natively (AVX512-BF16 or AMX), as oneDNN reports it."""
    try:
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch build without oneDNN
        return False


def resolve_device(name):
    """``"auto"`` → ``"cuda"`` when available, else ``"cpu"``; checks that CUDA exists when asked."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} requested but CUDA is not available (torch.cuda.is_available() is False)")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda[:N]', got {name!r}")
    return device


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


def model_from_checkpoint(path_or_state, device="cpu"):
    """Rebuild the trained model and its tokenizers from a checkpoint or an export (for translation).

    Returns:
        ``(model, src_tokenizer, tgt_tokenizer, config)``; the model is in eval mode
        with the fused attention path on.

    Raises:
        CheckpointError: when the stored weights do not fit the stored config.
    """
    state = load_checkpoint(path_or_state) if not isinstance(path_or_state, dict) else path_or_state
    config = TrainConfig.from_dict(state["config"])
    src_tokenizer = tokenizer_from_state(state["src_tokenizer"])
    tgt_tokenizer = tokenizer_from_state(state["tgt_tokenizer"])
    model = config.model.build(len(src_tokenizer), len(tgt_tokenizer))
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as error:
        raise CheckpointError(f"the checkpoint's weights do not match its config: {str(error).splitlines()[0]}") from error
    fuse_attention(model)  # SDPA with packed projections
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
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    temporary = path + ".tmp"
    torch.save(exported, temporary)
    os.replace(temporary, path)
    return path


def _refuse_export(state):
    if state.get("format") == EXPORT_FORMAT:
        raise CheckpointError("an inference-only export (no optimizer state) cannot be resumed: "
                              "resume from the full checkpoint it was exported from")


def warmup_linear_decay(step, total_steps, warmup_steps, peak, floor=0.02):
    """The learning rate of a planned run: linear warm-up to ``peak``, then linear decay.

    ``peak * step / warmup`` for ``step <= warmup``; afterwards it falls linearly to
    ``floor * peak`` at ``total_steps`` and stays there (a run planned too short does
    not stop learning altogether).

    Args:
        step: the optimizer step, counted from 1.
        total_steps: the last planned step.
        warmup_steps: steps of warm-up (at least 1).
        peak: the highest learning rate.
        floor: the final rate as a fraction of ``peak``.

    Returns:
        The learning rate (a float).
    """
    warmup_steps = max(1, warmup_steps)
    if step <= warmup_steps:
        return peak * step / warmup_steps
    remaining = max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
    return peak * (floor + (1 - floor) * remaining)


class TimeBudget:
    """A wall-clock budget for a whole run, and the plan of how many steps fit in it.

    Args:
        seconds: the budget.
        clock: a function returning seconds (default ``time.monotonic``; tests inject one).
        start: the clock's value when the run began (default: now), so that work done
            before the trainer exists (reading data, training the tokenizer) counts.
        used: seconds already spent by the run before (a resumed run).
    """

    def __init__(self, seconds, clock=time.monotonic, start=None, used=0.0):
        if not seconds or seconds <= 0:
            raise ValueError(f"a time budget must be a positive number of seconds, got {seconds!r}")
        self.seconds, self.clock, self.used = float(seconds), clock, float(used)
        self.start = clock() if start is None else start

    def elapsed(self):
        """Seconds of the budget spent so far (this process and, on resume, the run before)."""
        return self.used + self.clock() - self.start

    def left(self):
        """Seconds left (negative once the budget is overspent)."""
        return self.seconds - self.elapsed()

    def plan(self, step, seconds_per_step, steps_per_epoch, seconds_per_eval, reserve):
        """The last step the budget allows, counting an evaluation at every epoch end.

        Training ``n`` more steps costs ``n * seconds_per_step`` plus about
        ``n / steps_per_epoch`` evaluations; ``reserve`` seconds are kept for what
        comes after training (the final evaluation and test decoding).

        Args:
            step: the steps done so far.
            seconds_per_step: measured time of one training step.
            steps_per_epoch: batches in an epoch.
            seconds_per_eval: measured (or estimated) time of one end-of-epoch evaluation.
            reserve: seconds to keep for the end of the run.

        Returns:
            The planned total number of steps (at least ``step + 1``).
        """
        if seconds_per_step <= 0 or steps_per_epoch < 1:
            raise ValueError(f"expected seconds_per_step > 0 and steps_per_epoch >= 1, got "
                             f"{seconds_per_step} and {steps_per_epoch}")
        available = self.left() - reserve
        per_step = seconds_per_step + max(0.0, seconds_per_eval) / steps_per_epoch
        return step + max(1, int(available / per_step))


def _duration(seconds):
    """``75`` → ``"1m15s"``, ``3725`` → ``"1h02m"``: a short, log-friendly duration."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Trainer:
    """Train a Transformer on sentence pairs; evaluate; save and resume checkpoints.

    Args:
        config: a :class:`TrainConfig` (e.g. ``PRESETS["tiny"]``).
        train_pairs, valid_pairs: lists of ``(source, target)`` strings.
        src_tokenizer, tgt_tokenizer: trained on ``train_pairs`` when ``None``.
        out_dir: where :meth:`train` writes ``checkpoint.pt`` after every epoch
            (rank 0 only); ``None`` = no automatic checkpoints.
        distributed: a :class:`~solutions.app.distributed.DistributedContext`; default:
            read from the environment (``torchrun``).

    Building a trainer seeds ``random``, ``numpy`` and ``torch`` with ``config.seed``
    (the initialisation and the dropout masks depend on it).

    Attributes:
        model: the :class:`~solutions.model.Transformer` (unwrapped).
        optimizer, scheduler: Adam and the ``LambdaLR`` warm-up schedule.
        step, epoch: optimizer steps done; the current epoch (from 0).
        data_identity: a JSON-like description of the training data (set by the
            caller, e.g. file paths and SHA-256 fingerprints); stored in checkpoints.
        best_bleu: the highest validation BLEU at an epoch end so far (``None`` before).
        bleu: the :class:`CorpusBLEU` scorer (``bleu.signature`` after the first evaluation).
        history: ``{"train": {"step", "loss", "lr", "time"}, "valid": {"step", "epoch",
            "loss", "accuracy", "exact_match", "bleu", "time"}}`` (lists, for plots).

    Paper: section 5.
    """

    def __init__(self, config, train_pairs, valid_pairs=(), src_tokenizer=None, tgt_tokenizer=None,
                 out_dir=None, distributed=None, clock=None, started=None):
        if not isinstance(config, TrainConfig):
            raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
        if not train_pairs:
            raise ValueError("train_pairs is empty: nothing to train on")
        self.config = config
        self.device = resolve_device(config.device)
        self.context = distributed or setup_distributed(self.device.type)
        if self.context.enabled and self.device.type == "cuda":
            self.device = torch.device("cuda", self.context.local_rank)
        self.use_bf16 = bool(config.bf16) and (self.device.type == "cuda" or cpu_has_bf16())
        if config.bf16 and not self.use_bf16:
            warnings.warn("bf16=True needs CUDA or a CPU with native bfloat16 (AVX512-BF16 or AMX); this one "
                          "would emulate it, slower than float32: ignored", stacklevel=2)
        use_compile = self._cuda_only_switch("compile", config.compile)
        self.out_dir = out_dir
        if config.schedule not in ("noam", "linear"):
            raise ValueError(f"schedule must be 'noam' or 'linear', got {config.schedule!r}")
        clock = clock or time.monotonic
        # The budget starts before the tokenizers are trained: they are part of the run.
        self.budget = TimeBudget(config.time_budget, clock, started) if config.time_budget else None
        self.planned_steps = None  # the last step of the "linear" schedule, once planned
        self.final_sentences = 0  # sentences the caller will decode with the beam after train() (reserved time)
        self._timing = {"step": None, "eval": None, "beam_sentence": None}
        # Keyword arguments of every translate() call (the decoders: translate's greedy= and beam=);
        # the command line sets solutions.app.inference.decoders_for(device).
        self.translate_options = {}
        self._snapshots = []  # weights at the last `average_last` epoch ends (CPU copies)
        self.stop_reason = None
        self.clock, self._clock_start = clock, clock() if started is None else started
        self.epoch_log = []  # one row per evaluated epoch: epoch, step, minutes (wall), train and valid loss, BLEU
        self._epoch_loss = [0.0, 0]
        if config.threads is not None:
            if isinstance(config.threads, bool) or not isinstance(config.threads, int) or config.threads < 1:
                raise ValueError(f"threads must be a positive int or None, got {config.threads!r}")
            torch.set_num_threads(config.threads)
        self._seed(config.seed)

        if config.model.share_embeddings and src_tokenizer is None and tgt_tokenizer is None:
            # One vocabulary for both languages (section 5.1), so that the embeddings can be tied.
            src_tokenizer = tgt_tokenizer = build_tokenizer(
                [text for pair in train_pairs for text in pair], config.tokenizer, config.bpe_vocab_size)
        if src_tokenizer is None:
            src_tokenizer = build_tokenizer((s for s, _ in train_pairs), config.tokenizer, config.bpe_vocab_size)
        if tgt_tokenizer is None:
            tgt_tokenizer = build_tokenizer((t for _, t in train_pairs), config.tokenizer, config.bpe_vocab_size)
        self.src_tokenizer, self.tgt_tokenizer = src_tokenizer, tgt_tokenizer
        # max_len - 1: one position goes to <sos> / <eos>.
        limit = min(config.max_tokens, config.model.max_len - 1)
        self.train_data = TranslationDataset(train_pairs, src_tokenizer, tgt_tokenizer, max_len=limit)
        self.valid_data = TranslationDataset(valid_pairs, src_tokenizer, tgt_tokenizer, max_len=limit)
        if len(self.train_data) == 0:
            raise ValueError(f"no training pair fits max_tokens = {limit}")
        self.sampler = BucketBatchSampler(
            self.train_data.lengths(), config.batch_size, shuffle=True, seed=config.seed,
            bucket_size=config.bucket_size, num_replicas=self.context.world_size, rank=self.context.rank,
        )

        self.model = config.model.build(len(src_tokenizer), len(tgt_tokenizer)).to(self.device)
        fuse_attention(self.model)  # SDPA with packed projections
        self.train_model = self.model
        if self.context.enabled:
            from torch.nn.parallel import DistributedDataParallel

            device_ids = [self.device.index] if self.device.type == "cuda" else None
            self.train_model = DistributedDataParallel(self.model, device_ids=device_ids)
        if use_compile:
            self.train_model = torch.compile(self.train_model)
        # fused only on CUDA. On the CPU the fused kernel made the Adam step itself 2.9 times faster, but a
        # whole step only 1.28x at the median with quartiles 0.97-1.87 (README, "The levers"), and its
        # rounding differs from the loop's: the CLI test's model, which must learn 12 pairs by heart in 600
        # steps, then stopped at 8-10 of 12. Not worth a different model for a gain the noise hides.
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9,
                                          fused=self.device.type == "cuda")
        # LambdaLR counts from 0; the schedules count steps from 1.
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda index: self._learning_rate(index + 1))
        self.step = 0
        self.epoch = 0
        self.batch_in_epoch = 0
        self.elapsed = 0.0
        self.data_identity = None
        self.best_bleu = None
        self.bleu = CorpusBLEU()
        self.tokens_seen = 0  # source + target tokens of the training steps of this process's run
        self.history = {
            "train": {"step": [], "loss": [], "lr": [], "time": []},
            "valid": {"step": [], "epoch": [], "loss": [], "accuracy": [], "exact_match": [], "bleu": [], "time": []},
        }

    # -- set-up helpers -------------------------------------------------------------------------
    def _learning_rate(self, step):
        """The learning rate of step ``step`` (from 1) under ``config.schedule``."""
        config = self.config
        if config.schedule == "noam":
            return noam_lr(step, config.model.d_model, config.warmup_steps, config.lr_factor)
        total = self.planned_steps or config.max_steps or config.epochs * max(1, len(self.sampler))
        # Warm-up: at most a tenth of the planned run.
        return warmup_linear_decay(step, total, min(config.warmup_steps, max(1, total // 10)), config.lr_peak)

    def _cuda_only_switch(self, name, value):
        if value and self.device.type != "cuda":
            warnings.warn(f"{name}=True applies on CUDA only; ignored on {self.device.type}", stacklevel=3)
            return False
        return bool(value)

    @staticmethod
    def _seed(seed):
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)

    def _log(self, message):
        if self.context.is_main and not self.config.quiet:
            logger.info(message)

    # -- one step -------------------------------------------------------------------------------
    def _forward_loss(self, model, batch, smoothing):
        """Summed loss, number of target tokens and number of correct arg-max predictions."""
        src_mask = padding_mask(batch.src, PAD_ID)  # (B, 1, 1, S)
        tgt_mask = decoder_mask(batch.tgt_in, PAD_ID)  # (B, 1, T, T)
        with torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=self.use_bf16):
            logits = model(batch.src, batch.tgt_in, src_mask, tgt_mask)  # (B, T, V)
        vocab_size = logits.size(-1)
        loss_sum = F.cross_entropy(
            logits.float().reshape(-1, vocab_size), batch.labels.reshape(-1),  # (B*T, V), (B*T,)
            ignore_index=PAD_ID, label_smoothing=smoothing, reduction="sum",
        )
        keep = batch.labels != PAD_ID  # (B, T)
        correct = ((logits.argmax(dim=-1) == batch.labels) & keep).sum()
        return loss_sum, keep.sum(), correct

    def train_step(self, batch):
        """One optimizer step on a (local share of a) batch; returns the global mean loss per token."""
        self.train_model.train()
        batch = batch.to(self.device)
        loss_sum, tokens, _ = self._forward_loss(self.train_model, batch, self.config.label_smoothing)
        src_tokens = (batch.src != PAD_ID).sum()
        # Mean over the tokens of the *global* batch: DDP averages gradients over the
        # processes, so each scales its sum by world_size / global token count.
        totals = all_reduce_sum(torch.stack([loss_sum.detach(), tokens.float(), src_tokens.float()]), self.context)
        global_tokens = totals[1].clamp(min=1)
        loss = loss_sum * self.context.world_size / global_tokens
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.config.clip_norm:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.clip_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        self.tokens_seen += int(totals[1].item() + totals[2].item())
        return (totals[0] / global_tokens).item()

    # -- the loop -------------------------------------------------------------------------------
    def train(self, epochs=None, max_steps=None, callback=None):
        """Train until ``epochs`` epochs (total, counted from 0) or ``max_steps`` steps are done.

        On a terminal a tqdm bar shows the epoch's progress. Off a terminal (a log
        file, a batch job) a line goes to the log instead, every
        ``config.progress_seconds`` seconds or ``config.progress_steps`` steps::

            step 120/900 epoch 1/3 loss 3.214 lr 4.10e-04 5230 tok/s elapsed 1m02s ETA 6m45s

        (tokens per second: source and target tokens without padding, over the time
        spent in the training steps since the previous line; the ETA extrapolates the
        run so far, evaluations included; with a time budget, ``left`` is the budget
        left). ``quiet`` turns both off.

        With ``config.time_budget`` the run plans itself: after a few steps it measures
        the seconds per step and plans the last step the budget allows
        (:meth:`TimeBudget.plan`), keeping time for an evaluation at every epoch end
        and for the end of the run (an evaluation of the averaged weights and the
        beam decoding of :attr:`final_sentences` sentences); the "linear" schedule
        decays to that step. Every quarter epoch and at every epoch end the plan is
        made again with the measured step and evaluation times. The loop stops at the planned step or
        when the budget left is only the reserve; :attr:`stop_reason` says why.

        Args:
            epochs: defaults to ``config.epochs``.
            max_steps: defaults to ``config.max_steps`` (``None`` = no limit).
            callback: called as ``callback(trainer)`` after every step (e.g. to record a curve).

        Returns:
            :attr:`history`.
        """
        epochs = self.config.epochs if epochs is None else epochs
        max_steps = self.config.max_steps if max_steps is None else max_steps
        show_bar = self.context.is_main and not self.config.quiet and sys.stderr.isatty()
        log_progress = self.context.is_main and not self.config.quiet and not show_bar
        planned = self.step + max(0, (epochs - self.epoch) * len(self.sampler) - self.batch_in_epoch)
        if max_steps is not None:
            planned = min(planned, max(max_steps, self.step))
        now = time.perf_counter()
        self._progress = {"run_start": now, "first_step": self.step, "planned": planned, "epochs": epochs,
                          "last_time": now, "last_step": self.step, "last_tokens": self.tokens_seen, "busy": 0.0,
                          "run_busy": 0.0}
        measure_from = self.step + 3  # the first steps are slower (allocation); time the ones after
        recent = collections.deque(maxlen=200)  # seconds of the last timed steps
        self.stop_reason = None
        while self.epoch < epochs and (max_steps is None or self.step < max_steps):
            self.sampler.set_epoch(self.epoch)
            batches = list(self.sampler)
            bar = tqdm(total=len(batches), initial=self.batch_in_epoch, desc=f"epoch {self.epoch + 1}/{epochs}",
                       disable=not show_bar, leave=False, dynamic_ncols=True)
            start = time.perf_counter()
            for indices in batches[self.batch_in_epoch:]:
                if max_steps is not None and self.step >= max_steps:
                    break
                if self.budget is not None and self._budget_exhausted():
                    break
                step_start, clock_start = time.perf_counter(), self.clock()
                batch = collate_batch([self.train_data[i] for i in indices])
                loss = self.train_step(batch)
                self._epoch_loss[0] += loss
                self._epoch_loss[1] += 1
                self._progress["busy"] += time.perf_counter() - step_start
                seconds = self.clock() - clock_start
                if self.step > measure_from:
                    self._progress["run_busy"] += seconds
                    # The mean of the last steps: on a GPU the first hundred or so (new shapes, allocator
                    # growth) are several times slower than the rest, and would shrink every later plan.
                    recent.append(seconds)
                    self._timing["step"] = sum(recent) / len(recent)
                self.batch_in_epoch += 1
                if self.budget is not None and self.step >= measure_from + 20 and (
                        self.planned_steps is None or self.step % max(20, len(batches) // 4) == 0):
                    self._plan()  # first after 20 timed steps, then every quarter epoch (the load may change)
                lr = self.scheduler.get_last_lr()[0]
                if self.step % self.config.log_every == 0 or self.step == 1:
                    history = self.history["train"]
                    history["step"].append(self.step)
                    history["loss"].append(loss)
                    history["lr"].append(lr)
                    history["time"].append(self.elapsed + time.perf_counter() - start)
                bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}")
                bar.update(1)
                if log_progress:
                    self._log_progress(loss, lr)
                if callback is not None:
                    self.elapsed += time.perf_counter() - start
                    start = time.perf_counter()
                    callback(self)
            bar.close()
            self.elapsed += time.perf_counter() - start
            if self.batch_in_epoch < len(batches):
                break  # stopped inside the epoch (max_steps or the budget)
            self.epoch += 1
            self.batch_in_epoch = 0
            if self.budget is not None and self._timing["eval"] is not None and \
                    self.budget.left() < self._timing["eval"] + self._reserve():
                self.stop_reason = "budget"  # no time for this epoch's evaluation: finish() evaluates
                break
            self._end_of_epoch(epochs)
            if self.budget is not None and self._budget_exhausted():
                break
        if self.stop_reason is None and max_steps is not None and self.step >= max_steps:
            self.stop_reason = "max_steps"
        if self.stop_reason is None:
            self.stop_reason = "epochs"
        if self.out_dir is not None:
            self.save_checkpoint(os.path.join(self.out_dir, "checkpoint.pt"))
        return self.history

    def _end_of_epoch(self, epochs):
        """Evaluate, keep the best and the snapshots for averaging, save, and (with a budget) re-plan."""
        eval_start = self.clock()
        metrics = self.evaluate()
        self._timing["eval"] = self.clock() - eval_start
        self._log(f"epoch {self.epoch}/{epochs} step {self.step}: " + ", ".join(
            f"{name} {value:.4g}" for name, value in metrics.items()))
        self._keep_best(metrics["bleu"])
        self._log_epoch(metrics)
        if self.config.average_last > 1:
            self._snapshots.append({k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()})
            del self._snapshots[:-self.config.average_last]
        if self.out_dir is not None:
            self.save_checkpoint(os.path.join(self.out_dir, "checkpoint.pt"))
        if self.budget is not None:
            if self.config.beam_size > 1 and self.final_sentences:
                self._measure_beam()  # every epoch: an untrained model's translations run to the length limit
            if self._timing["step"] is not None:
                self._plan()

    def _log_epoch(self, metrics):
        """Append a row to :attr:`epoch_log` (wall minutes since the run began, mean training loss)."""
        total, count = self._epoch_loss
        wall = self.budget.elapsed() if self.budget is not None else self.clock() - self._clock_start
        self.epoch_log.append({"epoch": self.epoch, "step": self.step, "minutes": round(wall / 60, 2),
                               "train_loss": round(total / count, 4) if count else None,
                               "valid_loss": round(metrics["loss"], 4), "valid_bleu": round(metrics["bleu"], 2)})
        self._epoch_loss = [0.0, 0]

    def _measure_beam(self, sentences=12):
        """Time the final decoding's beam search on a few validation sentences (seconds per sentence).

        Measured again at every epoch end: the translations of an undertrained model run to the
        length limit, so the first measurement overstates what the final decoding will cost.
        """
        chosen = [s for s, _ in self.valid_data.pairs[:sentences]]
        if not chosen:
            return
        start = self.clock()
        translate(self.model, chosen, self.src_tokenizer, self.tgt_tokenizer, beam_size=self.config.beam_size,
                  length_penalty=self.config.length_penalty, device=self.device, **self.translate_options)
        self._timing["beam_sentence"] = (self.clock() - start) / len(chosen)

    def _reserve(self):
        """Seconds kept for the end of the run: evaluating averaged weights, beam decoding, saving.

        Before anything is measured: a tenth of the budget. Afterwards: one evaluation
        (two with averaging), the measured beam time of :attr:`final_sentences` sentences
        and their greedy decoding (an evaluation per ``eval_sentences`` sentences: an
        over-estimate, the evaluation also computes the loss), 30 % margin and 20 seconds
        for saving files.
        """
        evaluation, beam = self._timing["eval"], self._timing["beam_sentence"]
        if evaluation is None:
            return 0.1 * self.budget.seconds
        evaluations = 1 + (self.config.average_last > 1)
        greedy = evaluation * self.final_sentences / max(1, self.config.eval_sentences)
        # With a beam, the test set is decoded twice: with the beam, and greedily for the translations file.
        decoding = beam * self.final_sentences + greedy if beam is not None else greedy
        return 1.3 * (evaluations * evaluation + decoding) + 20.0

    def _plan(self):
        """(Re-)plan the last step of the budget from the measured times."""
        evaluation = self._timing["eval"]
        if evaluation is None:  # before the first evaluation: about 3 % of an epoch's training time
            evaluation = 0.03 * self._timing["step"] * len(self.sampler)
        planned = self.budget.plan(self.step, self._timing["step"], len(self.sampler), evaluation, self._reserve())
        if self.config.max_steps is not None:  # the linear schedule decays to the step the run will stop at
            planned = min(planned, max(self.config.max_steps, self.step))
        first = self.planned_steps is None
        self.planned_steps = planned
        self._progress["planned"] = planned
        if first:
            self._log(f"time budget {_duration(self.budget.seconds)}: {self._timing['step']:.3f} s/step, "
                      f"{_duration(self.budget.left())} left, planned {planned} steps "
                      f"(about {planned / max(1, len(self.sampler)):.1f} epochs)")

    def _budget_exhausted(self):
        """True (and :attr:`stop_reason` set) when the planned step is reached or only the reserve is left."""
        if self.planned_steps is not None and self.step >= self.planned_steps:
            self.stop_reason = "planned steps done"
            return True
        if self.step == self._progress["first_step"]:
            return False  # at least one step per run: the checkpoint it leaves is a trained model
        step_time = self._timing["step"] or 0.0
        if self.budget.left() < self._reserve() + step_time:
            self.stop_reason = "budget"
            return True
        return False

    def final_beam_size(self):
        """The beam size the end of the run can afford: ``config.beam_size``, or 1 (greedy) when a time
        budget is left too short for beam search over :attr:`final_sentences` sentences (or beam
        search was never timed, as when the budget ran out in the first epoch)."""
        beam = self.config.beam_size
        if beam == 1 or self.budget is None or not self.final_sentences:
            return beam
        per_sentence = self._timing["beam_sentence"]
        if per_sentence is not None and self.budget.left() >= 1.1 * per_sentence * self.final_sentences:
            return beam
        self._log(f"time budget: {_duration(self.budget.left())} left, not enough for beam search over "
                  f"{self.final_sentences} sentences; the final translations are greedy")
        return 1

    def _log_progress(self, loss, lr):
        """Log the progress line of :meth:`train` when ``progress_seconds`` or ``progress_steps`` have passed."""
        state, now = self._progress, time.perf_counter()
        seconds, steps = self.config.progress_seconds, self.config.progress_steps
        due_by_time = seconds is not None and now - state["last_time"] >= seconds
        due_by_steps = steps is not None and self.step - state["last_step"] >= steps
        if not (due_by_time or due_by_steps):
            return
        tokens_per_s = (self.tokens_seen - state["last_tokens"]) / max(state["busy"], 1e-9)
        elapsed = now - state["run_start"]
        done = self.step - state["first_step"]
        remaining = max(0, state["planned"] - self.step)
        eta = _duration(elapsed / done * remaining) if done else "?"
        left = f" left {_duration(self.budget.left())}" if self.budget is not None else ""
        self._log(f"step {self.step}/{state['planned']} epoch {self.epoch + 1}/{state['epochs']} loss {loss:.3f} "
                  f"lr {lr:.2e} {tokens_per_s:.0f} tok/s elapsed {_duration(elapsed)} ETA {eta}{left}")
        state.update(last_time=now, last_step=self.step, last_tokens=self.tokens_seen, busy=0.0)

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
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)
        return path

    def finish(self):
        """The end of a run: evaluate what :meth:`train` left unevaluated, and the averaged weights.

        When training stopped inside an epoch (the budget or ``max_steps``), the
        final weights are evaluated on the validation set; with ``average_last``
        N > 1, the mean of the weights at the last N epoch ends (and the final
        weights, when they are newer) is evaluated too. Whichever has the best
        validation BLEU becomes ``best.pt``, and its weights are loaded into
        :attr:`model` (so that a test evaluation afterwards uses them).

        Returns:
            ``{"final_bleu", "averaged_bleu", "averaged": int, "chosen": "epoch" | "final" |
            "averaged"}`` (BLEU values NaN when not evaluated).
        """
        report = {"final_bleu": math.nan, "averaged_bleu": math.nan, "averaged": 0, "chosen": "epoch"}
        best_weights = None
        last_evaluated = self.history["valid"]["step"][-1] if self.history["valid"]["step"] else None
        if last_evaluated != self.step and len(self.valid_data):
            metrics = self.evaluate()
            report["final_bleu"] = metrics["bleu"]
            self._log_epoch(metrics)
            self._log(f"final weights (step {self.step}): valid BLEU {report['final_bleu']:.2f}")
            if self._keep_best(report["final_bleu"]):
                report["chosen"] = "final"
            if self.config.average_last > 1:
                self._snapshots.append({k: v.detach().to("cpu", copy=True)
                                        for k, v in self.model.state_dict().items()})
                del self._snapshots[:-self.config.average_last]
        if self.config.average_last > 1 and len(self._snapshots) > 1 and len(self.valid_data):
            current = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            averaged = {name: (torch.stack([s[name].float() for s in self._snapshots]).mean(0).to(value.dtype)
                               if value.is_floating_point() else value)
                        for name, value in current.items()}
            self.model.load_state_dict({k: v.to(self.device) for k, v in averaged.items()})
            bleu = self.evaluate(self.valid_data.pairs)["bleu"]  # not recorded in the history
            report["averaged_bleu"], report["averaged"] = bleu, len(self._snapshots)
            self._log(f"average of the last {len(self._snapshots)} checkpoints: valid BLEU {bleu:.2f}")
            if not math.isnan(bleu) and (self.best_bleu is None or bleu > self.best_bleu):
                self.best_bleu = bleu
                best_weights = averaged
                report["chosen"] = "averaged"
                if self.out_dir is not None:
                    self.save_best(os.path.join(self.out_dir, "best.pt"), model_state=averaged)
            self.model.load_state_dict(current)
        if report["chosen"] == "epoch" and self.out_dir is not None and \
                os.path.isfile(os.path.join(self.out_dir, "best.pt")):
            best_weights = load_checkpoint(os.path.join(self.out_dir, "best.pt"))["model"]
        if best_weights is not None:
            self.model.load_state_dict({k: v.to(self.device) for k, v in best_weights.items()})
        return report

    # -- the whole run --------------------------------------------------------------------------
    def fit(self, test_pairs=(), max_steps=None, data_identity=None, command="", preset=None, skipped_lines=None):
        """Run training to its end: :meth:`train`, :meth:`finish`, the final decoding and the results files.

        After training (and the averaging of :meth:`finish`), the validation pairs are
        translated greedily and the test pairs with the run's decoding
        (:meth:`final_beam_size`); with an ``out_dir`` the main process writes
        ``history.json``, ``results.json`` and ``test_translations.jsonl`` (each test
        sentence's source, reference, greedy and final translation) there (the README's
        "Train on your own corpus"). Only the main process of a distributed run decodes and writes.

        Args:
            test_pairs: the held-out ``(source, target)`` pairs, decoded once, at the end.
            max_steps: the run's total steps when given alone (the epochs are raised to
                cover them; ``None`` = the config's epochs and ``max_steps``).
            data_identity: what the run trains on (files and their SHA-256, or the synthetic
                task's seed), stored in every checkpoint as :attr:`data_identity`.
            command, preset, skipped_lines: recorded in ``results.json`` (the command line,
                the preset's name, ``{"train"|"valid"|"test"|"data": lines left out}``).

        Returns:
            A :class:`~solutions.app.summary.RunSummary` (``None`` on the other processes of
            a distributed run).
        """
        test_pairs = list(test_pairs)
        if data_identity is not None:
            self.data_identity = data_identity
        if self.config.beam_size > 1:  # the end of the run decodes the test set with the beam: keep time for it
            self.final_sentences = len(test_pairs)
        if max_steps is not None:
            per_epoch = max(1, len(self.sampler))
            self.config = self.config.replace(epochs=max(1, math.ceil(max_steps / per_epoch)))
        load = LoadSampler()
        self.train()
        if not self.context.is_main:
            load.stop()
            return None
        finish = self.finish()
        final = {}
        # Validation with greedy decoding (as chosen during the run: quick); the test with the run's decoding.
        # The test set greedily too (the translations file keeps both): decoded once when the run's decoding is greedy.
        for name, pairs, beam_size in (("valid", self.valid_data.pairs, 1), ("test", test_pairs, self.final_beam_size()),
                                       ("test_greedy", test_pairs, 1)):
            if name == "test_greedy" and final.get("test", {}).get("beam_size") == 1:
                final[name] = final["test"]
            elif pairs:
                final[name] = score_translations(self.model, self.src_tokenizer, self.tgt_tokenizer, pairs, beam_size,
                                                 self.config.length_penalty, self.device, self.translate_options)
        test = {}
        if test_pairs:
            test = self.evaluate(test_pairs, max_sentences=0)  # loss and accuracy; BLEU with the final decoding
            test.update(bleu=final["test"]["bleu"], exact_match=final["test"]["exact_match"])
        signature = self.bleu.signature or final.get("test", {}).get("signature")
        results_path = wall_minutes = best = translations_path = None
        checkpoint = os.path.join(self.out_dir, "checkpoint.pt") if self.out_dir is not None else None
        if self.out_dir is not None:
            best = os.path.join(self.out_dir, "best.pt")
            best = best if os.path.isfile(best) else None
            write_json(os.path.join(self.out_dir, "history.json"),
                       {"history": self.history, "test": test, "data": self.data_identity, "bleu_signature": signature},
                       indent=1)
            translations = None
            if test_pairs:
                translations_path = os.path.join(self.out_dir, TRANSLATIONS_FILE)
                translations = write_translations(translations_path, test_pairs, final["test_greedy"]["hypotheses"],
                                                  final["test"]["hypotheses"], final["test"]["beam_size"],
                                                  self.config.length_penalty)
            results = results_document(self, final, finish, test_pairs, self.clock() - self._clock_start, load.stop(),
                                       command=command, preset=preset, skipped_lines=skipped_lines,
                                       translations=translations)
            results_path = os.path.join(self.out_dir, "results.json")
            write_json(results_path, results, indent=1, ensure_ascii=False)
            wall_minutes = results["wall_minutes"]
        else:
            load.stop()
        return RunSummary(checkpoint=checkpoint, steps=self.step, epochs=self.epoch, best=best,
                          best_valid_bleu=self.best_bleu, test=test, bleu_signature=signature, stopped=self.stop_reason,
                          results=results_path, wall_minutes=wall_minutes, translations=translations_path)

    # -- evaluation -----------------------------------------------------------------------------
    def evaluate(self, pairs=None, max_sentences=None):
        """Validation metrics; also appended to ``history["valid"]`` when ``pairs`` is ``None``.

        Args:
            pairs: sentence pairs to evaluate on (default: the validation split).
            max_sentences: translate at most this many for exact match and BLEU
                (default ``config.eval_sentences``).

        Returns:
            ``{"loss", "accuracy", "exact_match", "bleu"}``: label-smoothed loss and
            arg-max accuracy per target token (teacher forcing); the fraction of
            greedy translations equal to the reference (up to whitespace); corpus BLEU
            (:attr:`bleu`, sacreBLEU's standard signature, logged at the first
            evaluation) of the detokenised translations against the references as
            they are in the data. Empty data gives NaN.
        """
        record = pairs is None
        data = self.valid_data if pairs is None else TranslationDataset(
            pairs, self.src_tokenizer, self.tgt_tokenizer, max_len=self.config.model.max_len - 1)
        max_sentences = self.config.eval_sentences if max_sentences is None else max_sentences
        metrics = {"loss": math.nan, "accuracy": math.nan, "exact_match": math.nan, "bleu": math.nan}
        if len(data) > 0:
            self.model.eval()
            loss_sum, tokens, correct = 0.0, 0, 0
            with torch.no_grad():
                for start in range(0, len(data), 128):
                    batch = collate_batch([data[i] for i in range(start, min(start + 128, len(data)))])
                    s, n, c = self._forward_loss(self.model, batch.to(self.device), self.config.label_smoothing)
                    loss_sum, tokens, correct = loss_sum + s.item(), tokens + n.item(), correct + c.item()
            metrics["loss"] = loss_sum / max(tokens, 1)
            metrics["accuracy"] = correct / max(tokens, 1)
            if max_sentences:
                chosen = data.pairs[:max_sentences]
                hypotheses = translate(self.model, [s for s, _ in chosen], self.src_tokenizer,
                                       self.tgt_tokenizer, device=self.device, **self.translate_options)
                references = [t for _, t in chosen]
                # Both sides as text (translate() detokenises); whitespace runs do not count.
                same = sum(h.split() == r.split() for h, r in zip(hypotheses, references))
                metrics["exact_match"] = same / len(chosen)
                first = self.bleu.calls == 0
                metrics["bleu"] = self.bleu(hypotheses, references)
                if first:
                    self._log("BLEU: sacreBLEU corpus BLEU of detokenised translations, "
                              f"signature {self.bleu.signature}")
        if record:
            history = self.history["valid"]
            history["step"].append(self.step)
            history["epoch"].append(self.epoch)
            history["time"].append(self.elapsed)
            for name, value in metrics.items():
                history[name].append(value)
        return metrics

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
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        temporary = path + ".tmp"
        torch.save(self.state_dict(), temporary)
        os.replace(temporary, path)
        return path

    def load_state_dict(self, state):
        """Restore a :meth:`state_dict` (model, optimizer, schedule, RNG, position, history).

        Raises:
            CheckpointError: when the checkpoint's model config or vocabularies differ
            from this trainer's, or when it is an inference-only export.
        """
        _refuse_export(state)
        stored = TrainConfig.from_dict(state["config"]).fixed_on_resume()
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
    def from_checkpoint(cls, path, train_pairs, valid_pairs=(), out_dir=None, distributed=None, started=None,
                        other_data=False, **changes):
        """A trainer that continues the run saved at ``path``: same config, same vocabularies.

        Args:
            path: the checkpoint.
            train_pairs, valid_pairs: the data (the same as the saved run's for an exact resume).
            other_data: the data are not the saved run's (``--allow-other-data``): the stored
                best validation BLEU is forgotten (BLEU on another validation set is not comparable).
            changes: config fields to change, e.g. ``epochs=20`` or ``device="cuda"``;
                changing what the weights depend on (:meth:`TrainConfig.fixed_on_resume`: the
                model's sizes, the tokenizer) raises :class:`CheckpointError`.
        """
        state = load_checkpoint(path)
        _refuse_export(state)
        stored = TrainConfig.from_dict(state["config"])
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
                      out_dir=out_dir, distributed=distributed, started=started)
        trainer.load_state_dict(state)
        if other_data:
            trainer.best_bleu = None
        return trainer
