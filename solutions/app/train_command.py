"""The ``train`` command: flags into a :class:`~solutions.app.config.TrainConfig`, the data, a run.

The command only parses, calls and prints: the flags become one checked config (a
:class:`~solutions.configuration.ConfigError` becomes a usage error naming the flags),
the data are read or generated (with their identity, so that ``--resume`` can check it),
:meth:`~solutions.app.trainer.Trainer.fit` runs to the end and writes the results files,
and the :class:`~solutions.app.summary.RunSummary` it returns is printed as one JSON line.
"""
import json
import os
import re
import shlex
import time

from ..configuration import ConfigError
from .checkpoint import EXPORT_FORMAT, stored_config
from .config import DEFAULT_LENGTH_PENALTIES, PRESETS
from .corpus import split_pairs
from .distributed import cleanup_distributed
from .inference import decoders_for
from .synthetic import make_synthetic_splits
from .trainer import Trainer
from .tuning import parse_grid, tune_decoding
from .usage import UsageError, data_dir_files, load_checkpoint_for_user, positive, read_corpus, warn

__all__ = ["add_parser", "run_train", "parse_duration"]


def add_parser(commands):
    """Add ``train`` to the sub-command parsers ``commands``."""
    train = commands.add_parser("train", help="train a model (synthetic task or a TSV corpus)",
                                description="Train a Transformer; writes OUT/checkpoint.pt after every epoch.")
    train.add_argument("--preset", choices=["tiny", "base", "multi30k-cpu", "multi30k-cpu-15m"],
                       help="model and schedule: tiny (CPU minutes), base (the paper's), multi30k-cpu (a "
                            "German-English corpus of Multi30k's size in an hour on 2 CPU cores: BPE, budgeted "
                            "schedule, checkpoint averaging, beam 4) or multi30k-cpu-15m (the same corpus in a "
                            "quarter of an hour: a smaller model and vocabulary); default: tiny, or the "
                            "checkpoint's with --resume")
    train.add_argument("--time-budget", metavar="DURATION",
                       help="wall time for the whole command (e.g. 60m, 1h, 90s, 3600): plans the schedule for "
                            "the steps that fit, and keeps time for validation and the final test decoding "
                            "(multi30k-cpu: 60m, multi30k-cpu-15m: 15m); 'none': no budget (the preset's epochs "
                            "or --max-steps decide)")
    corpus = "a CORPUS is a PATH.tsv of 'source<TAB>target' lines, or SRC_FILE:TGT_FILE, two UTF-8 " \
             "plain-text files with one sentence per line (line i of one translates line i of the other)"
    train.add_argument("--data", metavar="CORPUS",
                       help="one corpus cut into train/valid/test (90/5/5 %%, seeded), or 'synthetic' (the book's "
                            "generated task; the default without --data/--train); " + corpus)
    train.add_argument("--data-dir", metavar="DIR",
                       help="a folder with the three corpora as TSV: the .tsv files whose names start with "
                            "'train', 'val' (or 'dev') and 'test' (e.g. Multi30k's train.de-en.tsv, val.de-en.tsv, "
                            "test_2016_flickr.de-en.tsv)")
    train.add_argument("--train", metavar="CORPUS", help="the training corpus (instead of --data)")
    train.add_argument("--valid", metavar="CORPUS",
                       help="the validation corpus (BLEU each epoch, best.pt); default: 5%% cut from --train")
    train.add_argument("--test", metavar="CORPUS",
                       help="the test corpus (evaluated at the end); default: 5%% cut from --train")
    train.add_argument("--on-bad-line", choices=["error", "skip"],
                       help="a line with a wrong number of tabs, an empty side or bytes that are not UTF-8: "
                            "stop with FILE:LINE and the problem (error, the default), or leave it out and "
                            "report the lines on stderr (skip, the default of the multi30k presets)")
    train.add_argument("--num-train", type=int, help="synthetic training pairs (default 20000)")
    train.add_argument("--epochs", type=int,
                       help="total number of epochs, also on --resume (default: the preset's or the checkpoint's; "
                            "without it, --max-steps alone decides when to stop)")
    train.add_argument("--max-steps", type=int,
                       help="stop after this many optimizer steps in total, also on --resume")
    train.add_argument("--batch-size", type=int, help="sentence pairs per (global) batch")
    train.add_argument("--tokenizer", choices=["word", "bpe"],
                       help="word level (split at spaces; the default) or BPE subwords (Hugging Face tokenizers; "
                            "punctuation split off, and decoded back to ordinary text): use bpe for real corpora; "
                            "part of the model: on --resume it must match")
    train.add_argument("--device", default="auto", help="auto (default), cpu, cuda or cuda:N")
    train.add_argument("--bf16", action="store_true",
                       help="bfloat16 autocast of the forward pass (CUDA, or a CPU with native bfloat16: "
                            "AVX512-BF16 or AMX; ignored with a warning on other CPUs)")
    train.add_argument("--compile", action="store_true", help="torch.compile (CUDA only; ignored with a warning on CPU)")
    train.add_argument("--seed", type=int,
                       help="seed of data, initialisation and dropout (default 0, or the checkpoint's)")
    train.add_argument("--out", default="runs/transformer",
                       help="output folder: checkpoint.pt (last epoch), best.pt (best validation BLEU), "
                            "history.json (default runs/transformer)")
    train.add_argument("--resume", metavar="CKPT",
                       help="continue the run saved in this checkpoint; give the same data it was trained on "
                            "(checked by SHA-256; a synthetic run needs none)")
    train.add_argument("--allow-other-data", action="store_true",
                       help="with --resume: accept data other than the checkpoint's (fine-tuning)")
    train.add_argument("--quiet", action="store_true", help="no progress bar and no log lines")
    train.add_argument("--threads", type=int, metavar="N",
                       help="CPU threads for torch (torch.set_num_threads; default: torch's choice, or the "
                            "checkpoint's with --resume)")
    train.add_argument("--progress-seconds", type=float, metavar="SECONDS",
                       help="when stderr is not a terminal: a progress line (step, loss, tokens/s, ETA) at least "
                            "this often (default 30; 0 = after every step)")
    train.add_argument("--progress-steps", type=int, metavar="N",
                       help="a progress line every N steps instead (and also every --progress-seconds, when "
                            "that is given too)")
    schedule = train.add_argument_group("schedule and decoding", "default: the preset's (or the checkpoint's)")
    schedule.add_argument("--schedule", choices=["noam", "linear"],
                          help="noam (the paper's warm-up then 1/sqrt(step)) or linear (warm-up to --lr-peak, then "
                               "linear decay to the last planned step)")
    schedule.add_argument("--lr-peak", type=float, metavar="LR", help="the linear schedule's highest learning rate")
    schedule.add_argument("--warmup-steps", type=int, metavar="N", help="warm-up steps")
    schedule.add_argument("--label-smoothing", type=float, metavar="EPS", help="label smoothing in [0, 1)")
    schedule.add_argument("--average-last", type=int, metavar="N",
                          help="at the end, average the weights of the last N epochs (0 = off)")
    schedule.add_argument("--beam", type=int, metavar="K", help="beam size of the final validation and test")
    schedule.add_argument("--length-penalty", type=float, metavar="ALPHA",
                          help="a fixed beam search length penalty (no tuning on validation)")
    schedule.add_argument("--length-penalty-grid", metavar="LIST",
                          help="with --beam > 1: at the end, decode the validation set once and choose the length "
                               "penalty of this comma-separated grid with the best BLEU; the test set is decoded "
                               "with it and best.pt keeps it for 'translate' (default "
                               + ",".join(f"{a:g}" for a in DEFAULT_LENGTH_PENALTIES) + "; 'none' = no tuning)")
    model = train.add_argument_group(
        "model", "default: the preset's; stored in the checkpoint. On --resume they may be left out; given, they "
                 "must match the checkpoint (--dropout may change)")
    model.add_argument("--d-model", type=int, metavar="N", help="width of every layer (tiny 128, base 512)")
    model.add_argument("--heads", type=int, metavar="N", help="attention heads; must divide --d-model (tiny 4, base 8)")
    model.add_argument("--layers", type=int, metavar="N", help="encoder layers = decoder layers (tiny 2, base 6)")
    model.add_argument("--d-ff", type=int, metavar="N",
                       help="inner width of the feed-forward layers (tiny 256, base 2048)")
    model.add_argument("--dropout", type=float, metavar="P", help="dropout rate in [0, 1) (0.1)")
    model.add_argument("--bpe-vocab-size", type=int, metavar="N",
                       help="vocabulary size of --tokenizer bpe (default 8000)")
    model.add_argument("--shared-vocab", action="store_true",
                       help="one tokenizer for both languages and tied embeddings (source, target and output "
                            "projection share one matrix, as in the paper)")


def _same_data_key(identity):
    """What must match for "the same data": file contents and how they were split (not the paths)."""
    if identity is None:
        return None
    if "synthetic" in identity:
        return ("synthetic", identity["synthetic"]["num_train"], identity["synthetic"]["seed"])
    files = sorted((role, tuple(f["sha256"] for f in entries)) for role, entries in identity["files"].items())
    return ("files", tuple(files), identity.get("split_seed"))


def _describe_data(identity):
    """A data identity as the command-line options that reproduce it."""
    if identity is None:
        return "data it does not record (a checkpoint written before data identities were stored)"
    if "synthetic" in identity:
        synthetic = identity["synthetic"]
        return f"--data synthetic --num-train {synthetic['num_train']} --seed {synthetic['seed']}"
    parts = [f"--{role} " + ":".join(f["path"] for f in entries)
             + " (sha256 " + ", ".join(f["sha256"][:12] for f in entries) + ")"
             for role, entries in identity["files"].items()]
    if identity.get("split_seed") is not None:
        parts.append(f"--seed {identity['split_seed']}")
    return " ".join(parts)


def _load_data(args, state=None, skipped=None):
    """``(train, valid, test, identity)`` from ``--data`` or ``--train/--valid/--test``.

    ``state`` is the checkpoint of ``--resume``: without data options a synthetic run
    is regenerated as it was; a run on files needs its files again. ``skipped`` records
    the bad lines left out per option (:func:`~solutions.app.usage.read_corpus`).
    """
    if args.data_dir is not None:
        if args.data is not None or args.train is not None or args.valid is not None or args.test is not None:
            raise UsageError("give --data-dir, or --data, or --train [--valid] [--test]; not two of them")
        files = data_dir_files(args.data_dir)
        args.train, args.valid, args.test = files["train"], files["valid"], files["test"]
    if args.data is not None and args.train is not None:
        raise UsageError("give --data (one corpus, split here) or --train [--valid] [--test], not both")
    for name in ("valid", "test"):
        if getattr(args, name) is not None and args.train is None:
            raise UsageError(f"--{name} needs --train (--data cuts its own validation and test sets)")
    stored = state.get("data") if state is not None else None
    data = args.data
    if data is None and args.train is None:
        if state is not None and (stored is None or "synthetic" not in stored) and not args.allow_other_data:
            raise UsageError(f"--resume: {args.resume} was trained on {_describe_data(stored)}; give that data "
                             "again (or --allow-other-data to continue on other data)")
        data = "synthetic"
    if data == "synthetic":
        num_train = args.num_train
        if num_train is None:
            synthetic = (stored or {}).get("synthetic") if state is not None else None
            num_train = synthetic["num_train"] if synthetic else 20000
        identity = {"synthetic": {"num_train": num_train, "seed": args.seed}}
        return (*make_synthetic_splits(num_train, 500, 500, seed=args.seed), identity)
    if data is not None:
        pairs, files = read_corpus("--data", data, args.on_bad_line, skipped)
        if len(pairs) < 3:
            raise UsageError(f"--data: {data} has {len(pairs)} pairs; at least 3 are needed")
        return (*split_pairs(pairs, seed=args.seed), {"files": {"data": files}, "split_seed": args.seed})
    train, files = read_corpus("--train", args.train, args.on_bad_line, skipped)
    identity = {"files": {"train": files}}
    given = {}
    for name in ("valid", "test"):
        if getattr(args, name) is not None:
            given[name], identity["files"][name] = read_corpus("--" + name, getattr(args, name), args.on_bad_line,
                                                               skipped)
    if len(given) < 2:  # cut the missing split(s) from --train
        if len(train) < 3:
            raise UsageError(f"--train: {args.train} has {len(train)} pairs; at least 3 are needed to cut "
                             "the missing --valid/--test from it")
        train, valid, test = split_pairs(train, valid_fraction=0 if "valid" in given else 0.05,
                                         test_fraction=0 if "test" in given else 0.05, seed=args.seed)
        given.setdefault("valid", valid)
        given.setdefault("test", test)
        identity["split_seed"] = args.seed
    return train, given["valid"], given["test"], identity


# Model flags of 'train': (argparse name, flag, config fields it sets).
_MODEL_FLAGS = (
    ("d_model", "--d-model", ("d_model",)),
    ("heads", "--heads", ("num_heads",)),
    ("layers", "--layers", ("num_encoder_layers", "num_decoder_layers")),
    ("d_ff", "--d-ff", ("d_ff",)),
    ("tokenizer", "--tokenizer", ("tokenizer",)),
    ("bpe_vocab_size", "--bpe-vocab-size", ("bpe_vocab_size",)),
)


def _requested_model(args):
    """``{config field: (flag as typed, value)}`` for the model flags given on the command line."""
    requested = {}
    for name, flag, fields in _MODEL_FLAGS:
        value = getattr(args, name)
        if value is not None:
            requested.update({field: (f"{flag} {value}", value) for field in fields})
    if args.shared_vocab:
        requested["share_embeddings"] = ("--shared-vocab", True)
    return requested


def parse_duration(text):
    """Seconds in a duration such as ``"60m"``, ``"1h30m"``, ``"90s"``, ``"2.5h"`` or ``"3600"`` (seconds).

    Raises:
        UsageError: when ``text`` is not such a duration, or is not positive.
    """
    units = {"h": 3600, "m": 60, "min": 60, "s": 1, "": 1}
    cleaned = text.strip().lower()
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*(h|min|m|s|)", cleaned)
    if not cleaned or not parts or re.sub(r"(\d+(?:\.\d+)?)\s*(h|min|m|s|)", "", cleaned).strip() \
            or sum(1 for _, unit in parts if unit == "") > (1 if len(parts) == 1 else 0):
        raise UsageError(f"--time-budget: expected a duration such as 60m, 1h30m, 90s or 3600 (seconds), or 'none', "
                         f"got {text!r}")
    seconds = sum(float(number) * units[unit] for number, unit in parts)
    if seconds <= 0:
        raise UsageError(f"--time-budget must be positive, got {text!r}")
    return seconds


def _check_train_flags(args):
    for name in ("epochs", "max_steps", "batch_size", "num_train", "bpe_vocab_size", "threads", "progress_steps",
                 "warmup_steps", "beam"):
        positive("--" + name.replace("_", "-"), getattr(args, name))
    if args.average_last is not None and args.average_last < 0:
        raise UsageError(f"--average-last must be >= 0, got {args.average_last}")
    if args.lr_peak is not None and not args.lr_peak > 0:
        raise UsageError(f"--lr-peak must be positive, got {args.lr_peak}")
    if args.label_smoothing is not None and not 0 <= args.label_smoothing < 1:
        raise UsageError(f"--label-smoothing must be in [0, 1), got {args.label_smoothing}")
    if args.length_penalty is not None and args.length_penalty < 0:
        raise UsageError(f"--length-penalty must be >= 0, got {args.length_penalty}")
    if args.progress_seconds is not None and args.progress_seconds < 0:
        raise UsageError(f"--progress-seconds must be >= 0, got {args.progress_seconds}")


def _length_penalty_grid(args):
    """``--length-penalty-grid`` as a tuple (``()`` for 'none'), or a usage error naming the flag."""
    if args.length_penalty is not None:
        raise UsageError("give --length-penalty (a fixed value) or --length-penalty-grid (tuned on validation), "
                         "not both")
    if args.length_penalty_grid.strip().lower() == "none":
        return ()
    try:
        return parse_grid(args.length_penalty_grid, "--length-penalty-grid")
    except ValueError as error:
        raise UsageError(str(error)) from None


def _check_resume_model(args, stored):
    """Refuse model flags (or a --preset) that differ from the checkpoint's model: one line naming them."""
    wanted = {}
    if args.preset is not None:
        wanted = {name: (f"--preset {args.preset}", value)
                  for name, value in PRESETS[args.preset].fixed_on_resume().items()
                  if name not in ("tokenizer", "bpe_vocab_size")}
    wanted.update(_requested_model(args))
    fixed = stored.fixed_on_resume()
    clashing = [f"{name} is {fixed[name]!r} in the checkpoint, {value!r} with {flag}"
                for name, (flag, value) in wanted.items() if fixed[name] != value]
    if clashing:
        raise UsageError(f"--resume: {args.resume} does not match the requested model: " + "; ".join(clashing)
                         + " (a resumed run keeps its model: leave these flags out, or start a new run with "
                           "another --out)")


def _model_error(args, error):
    """The :class:`~solutions.configuration.ConfigError` of the model the flags ask for, as a usage
    error naming the flags that set the fields at fault (or the preset, or the checkpoint)."""
    typed = {field: flag for field, (flag, _) in _requested_model(args).items()}
    if args.dropout is not None:
        typed["dropout"] = f"--dropout {args.dropout}"
    for field in error.fields:  # a run field (TrainConfig's own check) set by its flag
        if field not in typed and getattr(args, field, None) is not None:
            typed[field] = f"--{field.replace('_', '-')} {getattr(args, field)}"
    flags = list(dict.fromkeys(typed[field] for field in error.fields if field in typed))
    source = f"--preset {args.preset}" if args.preset else ("the checkpoint" if args.resume else "--preset tiny")
    return UsageError(f"{', '.join(flags) or source}: {error}")


def run_train(args):
    """``train``: read (or generate) the data, train to the end, print the run's summary as one JSON line."""
    started = time.monotonic()  # the time budget covers everything from here: data, tokenizer, training, test
    _check_train_flags(args)
    no_budget = args.time_budget is not None and args.time_budget.strip().lower() == "none"
    budget = parse_duration(args.time_budget) if args.time_budget is not None and not no_budget else None
    if args.on_bad_line is None:
        args.on_bad_line = "skip" if args.preset in ("multi30k-cpu", "multi30k-cpu-15m") else "error"
    state = None
    if args.resume:
        state = load_checkpoint_for_user("--resume", args.resume, missing="no such checkpoint")
        if state["format"] == EXPORT_FORMAT:
            raise UsageError(f"--resume: {args.resume} is an inference-only export (written by 'transformer "
                             "export', without the optimizer state): resume from the checkpoint.pt or best.pt "
                             "it was exported from")
    elif args.allow_other_data:
        raise UsageError("--allow-other-data applies to --resume only")
    if args.seed is None:
        args.seed = state["config"].get("seed", 0) if state is not None else 0
    changes = {"device": args.device, "quiet": args.quiet, "seed": args.seed}
    if args.bf16:
        changes["bf16"] = True
    if args.compile:
        changes["compile"] = True
    for name in ("epochs", "max_steps", "batch_size", "dropout", "threads", "progress_seconds", "progress_steps",
                 "schedule", "lr_peak", "warmup_steps", "label_smoothing", "average_last", "length_penalty"):
        if getattr(args, name) is not None:
            changes[name] = getattr(args, name)
    if args.beam is not None:
        changes["beam_size"] = args.beam
    if args.length_penalty is not None:
        changes["length_penalty_grid"] = ()  # a fixed α: nothing to tune
    if args.length_penalty_grid is not None:
        changes["length_penalty_grid"] = _length_penalty_grid(args)
    if budget is not None or no_budget:
        changes["time_budget"] = budget
    if args.epochs is not None and args.max_steps is None:
        changes["max_steps"] = None  # --epochs alone: the new total, not capped by a stored --max-steps
    if args.progress_steps is not None and args.progress_seconds is None:
        changes["progress_seconds"] = None  # every N steps, not also every 30 s
    base = stored_config(state) if state is not None else PRESETS[args.preset or "tiny"]
    if args.bpe_vocab_size is not None and (args.tokenizer or base.tokenizer) != "bpe":
        raise UsageError("--bpe-vocab-size applies to --tokenizer bpe only"
                         + (" (the checkpoint's tokenizer is word level)" if state is not None else ""))
    if state is not None:
        _check_resume_model(args, base)
    requested = {} if state is not None else {field: value for field, (_, value) in _requested_model(args).items()}
    try:  # the one check of the model's sizes (TransformerConfig's) and of the run's fields (TrainConfig's)
        config = base.replace(**changes, **requested)
    except ConfigError as error:
        raise _model_error(args, error) from None
    # The flags are sound: now read (or generate) the data.
    skipped = {}
    train_pairs, valid_pairs, test_pairs, identity = _load_data(args, state, skipped)
    other_data = state is not None and _same_data_key(identity) != _same_data_key(state.get("data"))
    if other_data and not args.allow_other_data:
        raise UsageError(f"--resume: {args.resume} was trained on {_describe_data(state.get('data'))}, not on "
                         f"{_describe_data(identity)}; give the same data (or --allow-other-data)")
    # The decoders: batched beam search; on CUDA, greedy decoding replayed from CUDA graphs. The tuner
    # chooses the beam's length penalty on validation at the end of the run.
    if state is not None:
        trainer = Trainer.from_checkpoint(args.resume, train_pairs, valid_pairs, out_dir=args.out, started=started,
                                          other_data=other_data, decoders=decoders_for, tuner=tune_decoding,
                                          **changes)
    else:
        trainer = Trainer(config, train_pairs, valid_pairs, out_dir=args.out, decoders=decoders_for, tuner=tune_decoding,
                          started=started)
    # --max-steps alone: the new total number of steps, not capped by a stored (or preset) epoch count.
    summary = trainer.fit(test_pairs, max_steps=args.max_steps if args.epochs is None else None, data_identity=identity,
                          command="python -m solutions " + " ".join(shlex.quote(a) for a in getattr(args, "argv", [])
                                                                    or []),
                          preset=args.preset, skipped_lines={role: skipped.get("--" + role, 0)
                                                             for role in ("train", "valid", "test", "data")})
    if summary is not None:
        if summary.stopped == "budget" and summary.epochs == 0:
            warn(f"the time budget ({args.time_budget}) ran out after {summary.steps} of the "
                 f"{len(trainer.sampler)} steps of the first epoch: best.pt holds the model as it is now "
                 "(give a larger --time-budget for a useful model)")
        print(json.dumps(summary.as_dict()))
    cleanup_distributed()
    return 0
