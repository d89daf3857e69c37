"""What defines a training run: :class:`TrainConfig`, the presets, and the book's own run.

:class:`TrainConfig` holds the model's sizes (a :class:`~solutions.configuration.TransformerConfig`)
beside the run's own fields (optimisation, data, device, schedule and budget, final
decoding) and checks every field once, when it is made (a
:class:`~solutions.configuration.ConfigError` naming the field). Every checkpoint stores it;
:meth:`TrainConfig.from_dict` reads it back. :data:`PRESETS` are the named runs of the
command line (``--preset``); :func:`book_splits`, :func:`book_config` and
:func:`book_checkpoint` define the run that chapter 9 trains and chapter 10 decodes.

Paper: section 5 (Training) and Table 3 (the base configuration).
"""
import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..configuration import ConfigError, TransformerConfig
from .synthetic import make_synthetic_splits

__all__ = ["TrainConfig", "PRESETS", "DEFAULT_LENGTH_PENALTIES", "check_grid", "book_splits", "book_config",
           "book_checkpoint"]

#: The length penalties a run with beam search tries on validation by default
#: (:func:`~solutions.app.tuning.tune_decoding`): none, the paper's 0.6 and its neighbours.
DEFAULT_LENGTH_PENALTIES = (0.0, 0.3, 0.6, 1.0, 1.5, 2.0)


def check_grid(values, name, smallest=0, integer=False):
    """``values`` as a tuple, checked: not empty, no repeats, each a finite number ``>= smallest``.

    Args:
        values: the grid (a sequence of numbers).
        name: what to call it in an error (a field or an option).
        smallest: the lowest value allowed (0 for α, 1 for beam sizes).
        integer: the values must be integers (beam sizes).

    Raises:
        ValueError: naming ``name`` and the value at fault.
    """
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ValueError(f"{name} must be a list of numbers, got {values!r}")
    values = tuple(values)
    if not values:
        raise ValueError(f"{name} is empty: give at least one value")
    kind = "an integer" if integer else "a number"
    for value in values:
        number = isinstance(value, int) if integer else isinstance(value, (int, float))
        if isinstance(value, bool) or not number or not math.isfinite(value) or value < smallest:
            raise ValueError(f"{name}: every value must be {kind} >= {smallest}, got {value!r}")
    repeated = sorted({v for v in values if values.count(v) > 1})
    if repeated:
        raise ValueError(f"{name}: {', '.join(map(str, repeated))} given more than once")
    return values


@dataclass
class TrainConfig:
    """Everything that defines a training run (stored in every checkpoint).

    Model: ``model``, a :class:`~solutions.configuration.TransformerConfig` (section 3, Table 3:
    ``d_model``, ``num_heads``, the layers, ``d_ff``, ``dropout``, ``max_len``,
    ``share_embeddings``, ``norm_first``), checked when it is made. Read its sizes there
    (``config.model.d_model``); :meth:`replace` takes them by name too
    (``config.replace(d_model=64, epochs=3)``).

    Optimisation (section 5.3-5.4): ``batch_size`` (sentence pairs per global batch),
    ``epochs``, ``max_steps`` (stop early; ``None`` = run all epochs),
    ``warmup_steps``, ``lr_factor`` (multiplies :func:`~solutions.training.noam_lr`), ``label_smoothing``,
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
    ``1/sqrt(step)``, scaled by ``lr_factor``) or ``"linear"`` (:func:`~solutions.app.schedule.warmup_linear_decay`:
    ``warmup_steps`` of linear warm-up to ``lr_peak``, then a linear decay that ends at
    the last planned step). ``time_budget`` (seconds, ``None`` = none) is the wall time
    of the whole run: :class:`~solutions.app.schedule.TimeBudget` plans the steps that fit it (see
    :meth:`~solutions.app.trainer.Trainer.train`). ``average_last`` (0 = off) averages the weights of the last
    N epoch ends at the end of the run (:meth:`~solutions.app.trainer.Trainer.finish`). ``beam_size`` is the
    beam of the final test translations. With ``beam_size > 1`` and a ``length_penalty_grid`` (a tuple of α,
    ``()`` = off), the end of the run chooses the α of that grid with the best validation BLEU
    (:func:`~solutions.app.tuning.tune_decoding`) and decodes the test set with it; otherwise with the fixed
    ``length_penalty``.

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
    length_penalty_grid: tuple = DEFAULT_LENGTH_PENALTIES

    def __post_init__(self):
        """Check every field once, here (a :class:`~solutions.configuration.ConfigError` naming the field)."""
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
        grid = self.length_penalty_grid
        try:  # a stored config holds a tuple, a results file a list; empty = no tuning
            self.length_penalty_grid = () if isinstance(grid, (list, tuple)) and not grid \
                else check_grid(grid, "length_penalty_grid")
        except ValueError as error:
            raise ConfigError(str(error), ("length_penalty_grid",)) from None
        if not isinstance(self.device, str) or not self.device:
            raise ConfigError(f"device must be a name such as 'auto', 'cpu' or 'cuda:0', got {self.device!r}",
                              ("device",))

    def replace(self, **changes):
        """A copy with some fields changed; the model's fields may be named directly
        (``replace(d_model=64)`` changes ``model.d_model``).

        Raises:
            ValueError: an unknown name, or a model the :class:`TransformerConfig` refuses
                (:class:`~solutions.configuration.ConfigError`, naming the field).
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
        ``"model"``, or, in checkpoints written before it was, flat among the other fields.

        Raises:
            ConfigError: a field out of range, or model fields both nested and flat
                (:func:`~solutions.app.checkpoint.stored_config` reports it as a
                :class:`~solutions.app.checkpoint.CheckpointError` of the checkpoint).
        """
        stored = dict(stored)
        model = stored.pop("model", None)
        flat = {name: stored.pop(name) for name in list(stored) if name in _MODEL_NAMES}
        if model is None:
            model = flat
        elif flat:
            raise ConfigError(f"a stored config has model fields both nested and flat: {sorted(flat)}",
                              tuple(sorted(flat)))
        return cls(model=TransformerConfig(**model), **stored)

    def fixed_on_resume(self):
        """What a checkpoint's weights and vocabularies depend on, so a resumed run keeps it:
        ``{name: value}`` for the model's fields but ``dropout`` and ``attention`` (how it
        computes, not what), and the tokenizer's."""
        fixed = {name: getattr(self.model, name) for name in _MODEL_NAMES if name not in ("dropout", "attention")}
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
    # model of width 256 (about 6.6 M parameters with a shared 4k BPE vocabulary and tied embeddings),
    # bfloat16 autocast where the CPU has it, a warm-up to 2e-3 then linear decay fitted to the steps the
    # time budget allows, the last epochs averaged, beam 4 with its length penalty tuned on validation.
    # Measured on validation (README, "Multi30k"):
    # pre-norm at 2e-3 learns about 4 times faster than post-norm at 1e-3 in the first epoch, bfloat16
    # gives 1.35-1.5 times the steps per second at the same loss, word-level vocabularies do worse, and
    # 4,000 subwords beat 8,000 by 2 to 4 BLEU at every epoch from the fifth.
    "multi30k-cpu": TrainConfig(
        model=TransformerConfig(d_model=256, num_heads=4, num_encoder_layers=3, num_decoder_layers=3, d_ff=1024,
                                dropout=0.1, max_len=160, norm_first=True, share_embeddings=True),
        tokenizer="bpe", bpe_vocab_size=4000,
        batch_size=64, epochs=100, warmup_steps=800, schedule="linear", lr_peak=2e-3, bf16=True,
        label_smoothing=0.1, clip_norm=1.0, eval_sentences=2000, log_every=50, threads=2,
        time_budget=3600.0, average_last=4, beam_size=4, length_penalty=0.6,
        length_penalty_grid=DEFAULT_LENGTH_PENALTIES,
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

# Multi30k in a quarter of an hour on the same 2 cores: the hour's recipe on a smaller model that learns
# faster per step and per second, 2+2 layers (about 4.7 M parameters with the shared 4,000-subword
# vocabulary); a warm-up of 500 steps (of about 3,200), half the dropout (seven epochs underfit), BLEU
# after each epoch on 500 validation sentences (on the whole set, the epochs' evaluations take about an
# eighth of the quarter hour), no checkpoint averaging (the few epoch ends of a short run are far apart),
# and a grid of length penalties up to 3. Chosen on validation by quarter-hour runs (README, "Multi30k").
PRESETS["multi30k-cpu-15m"] = PRESETS["multi30k-cpu"].replace(
    num_encoder_layers=2, num_decoder_layers=2, dropout=0.05, warmup_steps=500,
    eval_sentences=500, time_budget=900.0, average_last=0, length_penalty_grid=DEFAULT_LENGTH_PENALTIES + (2.5, 3.0),
)


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
    # solutions/app/config.py -> the folder that holds solutions/
    package_parent = Path(__file__).resolve().parents[__name__.count(".")]
    return Path(os.environ.get("TRANSFORMER_BOOK_RUNS", package_parent / "runs")) / "book" / "09_training" / name
