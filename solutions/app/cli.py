"""Command line: ``transformer train | translate | evaluate | export | bench`` (also ``python -m solutions ...``).

Examples::

    python -m solutions train --preset tiny --out runs/tiny
    python -m solutions train --preset tiny --data corpus.tsv --epochs 20 --out runs/tsv
    python -m solutions train --train train.de:train.en --valid val.de:val.en --test test.de:test.en \
        --on-bad-line skip --out runs/de-en
    python -m solutions train --train train.tsv --tokenizer bpe --bpe-vocab-size 8000 --shared-vocab \
        --d-model 256 --heads 4 --layers 3 --d-ff 1024 --dropout 0.2 --threads 2 --out runs/mine
    python -m solutions train --resume runs/tiny/checkpoint.pt --epochs 8 --out runs/tiny
    torchrun --nproc_per_node 2 -m solutions train --preset tiny --out runs/ddp
    python -m solutions translate --checkpoint runs/tiny/checkpoint.pt "the dog sees a cat" --beam 4
    python -m solutions translate --checkpoint runs/de-en/best.pt --input test.de --output test.hyp
    cat sentences.txt | python -m solutions translate --checkpoint runs/de-en/best.pt -
    python -m solutions evaluate --checkpoint runs/de-en/best.pt --test test.de:test.en --beam 4
    python -m solutions export runs/de-en/best.pt --output de-en-small.pt
    python -m solutions bench --quick

Bad arguments, missing files and checkpoints that do not fit print one line
``transformer: error: ...`` to stderr and exit with status 2 (no traceback).
"""
import argparse
import json
import logging
import os
import re
import shlex
import sys
import time
import zipfile

import torch
from sacrebleu.metrics import BLEU

from ..configuration import ConfigError
from ..model import count_parameters
from ..translation import translate
from .bench import run_benchmarks
from .checkpoint import EXPORT_FORMAT, CheckpointError, export_checkpoint, load_checkpoint, model_from_checkpoint, \
    stored_config
from .config import PRESETS
from .corpus import file_sha256, read_parallel, split_pairs
from .device import resolve_device
from .distributed import cleanup_distributed
from .evaluation import CorpusBLEU
from .export import ctranslate2_available, export_ctranslate2
from .inference import decoders_for
from .profiling import format_profile, profile_training_step
from .summary import TUTORIAL_METRIC
from .synthetic import make_synthetic_splits
from .trainer import Trainer

__all__ = ["main", "build_parser"]


class UsageError(Exception):
    """A user error: reported as one line, exit status 2."""


def _warn(message):
    print(f"transformer: warning: {message}", file=sys.stderr)


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{message} (see '{self.prog} --help')")


def _decoding_options(parser):
    """The decoding options shared by 'translate' and 'evaluate'."""
    parser.add_argument("--beam", type=int,
                        help="beam size (default: the checkpoint's decoding setting, 1 = greedy with the "
                             "key/value cache, for checkpoints without one)")
    parser.add_argument("--length-penalty", type=float, metavar="ALPHA",
                        help="beam search length penalty (default: the checkpoint's, or 0.6)")
    parser.add_argument("--batch-size", type=int, default=64,
                        help="sentences decoded together by greedy decoding (default 64)")
    parser.add_argument("--max-len", type=int, help="most new tokens (default: source length + 50)")
    parser.add_argument("--device", default="auto", help="auto (default), cpu, cuda or cuda:N")
    parser.add_argument("--threads", type=int, metavar="N", help="CPU threads for torch (default: torch's choice)")


def build_parser():
    """The ``argparse`` parser of the three sub-commands."""
    parser = _Parser(prog="transformer", description="Train and run the Transformer of 'Attention Is All You Need'.")
    commands = parser.add_subparsers(dest="command", metavar="{train,translate,evaluate,export,bench}",
                                     parser_class=_Parser)
    commands.required = True

    train = commands.add_parser("train", help="train a model (synthetic task or a TSV corpus)",
                                description="Train a Transformer; writes OUT/checkpoint.pt after every epoch.")
    train.add_argument("--preset", choices=["tiny", "base", "multi30k-cpu"],
                       help="model and schedule: tiny (CPU minutes), base (the paper's) or multi30k-cpu (a "
                            "German-English corpus of Multi30k's size in an hour on 2 CPU cores: BPE, budgeted "
                            "schedule, checkpoint averaging, beam 4); default: tiny, or the checkpoint's with --resume")
    train.add_argument("--time-budget", metavar="DURATION",
                       help="wall time for the whole command (e.g. 60m, 1h, 90s, 3600): plans the schedule for "
                            "the steps that fit, and keeps time for validation and the final test decoding "
                            "(multi30k-cpu: 60m); 'none': no budget (the preset's epochs or --max-steps decide)")
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
                            "report the lines on stderr (skip, the default of multi30k-cpu)")
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
    schedule.add_argument("--length-penalty", type=float, metavar="ALPHA", help="beam search length penalty")
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

    translate = commands.add_parser(
        "translate", help="translate sentences with a trained checkpoint",
        description="Translate sentences given as arguments, from a file (--input) or from stdin ('-'); "
                    "one output line per input line, in order (an empty line gives an empty line). The "
                    "checkpoint holds the model and vocabularies. Inputs longer than the model's max_len "
                    "tokens are truncated, with a warning on stderr naming the lines.")
    translate.add_argument("sentences", nargs="*", help="source sentences (quote each one); '-' = read stdin")
    translate.add_argument("--input", metavar="FILE",
                           help="read sentences from FILE (UTF-8, one a line; '-' = stdin)")
    translate.add_argument("--output", metavar="FILE", help="write translations to FILE (default: stdout)")
    translate.add_argument("--checkpoint", required=True, help="a checkpoint written by 'train'")
    _decoding_options(translate)

    evaluate = commands.add_parser(
        "evaluate", help="BLEU of a checkpoint on a test corpus (sacreBLEU, detokenised)",
        description="Translate the source side of a test CORPUS with a checkpoint (or an export) and print, as one "
                    "JSON line, sacreBLEU's corpus BLEU of the detokenised translations against the target side, "
                    "with its signature and the exact-match rate.")
    evaluate.add_argument("--checkpoint", required=True, help="a checkpoint written by 'train', or an export")
    evaluate.add_argument("--test", required=True, metavar="CORPUS", help="PATH.tsv or SRC_FILE:TGT_FILE")
    evaluate.add_argument("--on-bad-line", choices=["error", "skip"], default="error",
                          help="a malformed line: stop (error, the default) or leave it out (skip)")
    evaluate.add_argument("--output", metavar="FILE", help="also write the translations to FILE")
    _decoding_options(evaluate)

    export = commands.add_parser(
        "export", help="write an inference-only checkpoint, or a CTranslate2 model",
        description="--format checkpoint (default): copy the weights, configuration and tokenizers of a checkpoint "
                    "(checkpoint.pt or best.pt) into a smaller file without the optimizer state and history; "
                    "'translate' reads it like the full checkpoint, 'train --resume' cannot continue from it. "
                    "--format ctranslate2: write a CTranslate2 model directory (weights, vocabularies and this "
                    "package's tokenizers, tokenizer.json) for the CTranslate2 engine (pip install ctranslate2); "
                    "its greedy translations are ours.")
    export.add_argument("checkpoint", metavar="CKPT", help="a checkpoint written by 'train', or an export")
    export.add_argument("--output", "-o", required=True, metavar="PATH",
                        help="the file (checkpoint) or the directory (ctranslate2) to write")
    export.add_argument("--format", choices=["checkpoint", "ctranslate2"], default="checkpoint",
                        help="checkpoint (default) or ctranslate2")
    export.add_argument("--quantization", metavar="TYPE",
                        help="ctranslate2 only: CTranslate2's weight type (int8, int8_float32, bfloat16, float16, "
                             "...; default: float32 as trained, whose translations equal ours)")
    export.add_argument("--force", action="store_true", help="ctranslate2 only: replace an existing directory")

    bench = commands.add_parser("bench", help="performance ratios (training step vs torch.nn.Transformer, cache)",
                                description="Side-by-side benchmarks of the reference package.")
    bench.add_argument("--quick", action="store_true", help="tiny sizes, a few repetitions (a smoke test)")
    bench.add_argument("--device", default="auto", help="auto (default), cpu, cuda or cuda:N")
    bench.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    bench.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                       help="wall time (default) or process CPU time (steadier on a shared CPU machine)")
    bench.add_argument("--threads", type=int, help="torch threads for the run (default: torch's choice)")
    bench.add_argument("--checkpoint", metavar="CKPT",
                       help="translation speed of this trained checkpoint (default: an untrained model of the "
                            "multi30k-cpu shape)")
    bench.add_argument("--translation-corpus", metavar="FILE",
                       help="sentences to translate: a TSV corpus (its source side) or a text file (default: "
                            "generated sentences with the word counts of Multi30k's test 2016)")
    bench.add_argument("--sentences", type=int, metavar="N",
                       help="sentences translated (default 1000; 16 with --quick)")
    bench.add_argument("--profile", choices=["bench", "multi30k"], metavar="SIZES",
                       help="instead of the benchmarks, profile a training step of ours and of torch.nn.Transformer "
                            "op by op (torch.profiler, CPU) at the bench's sizes or the multi30k-cpu preset's, and "
                            "print each model's top operators with their share of the step")
    return parser


def _positive(name, value):
    if value is not None and value < 1:
        raise UsageError(f"{name} must be a positive integer, got {value}")


def _load_checkpoint_for_user(option, path, missing="no such file"):
    """The checkpoint's state, or a :class:`UsageError` naming the file (never a torch traceback)."""
    if not os.path.isfile(path):
        raise UsageError(f"{option}: {missing}: {path}")
    problem = (f"{option}: {path} is not a readable checkpoint of this package "
               "(expected a file written by 'transformer train')")
    if not zipfile.is_zipfile(path):  # torch.save writes a zip archive
        raise UsageError(problem)
    try:
        return load_checkpoint(path)
    except CheckpointError:
        raise UsageError(problem) from None


def _corpus_files(option, spec):
    """The file(s) a CORPUS argument names: ``(path,)`` for TSV, ``(source, target)`` for a pair."""
    if os.path.isfile(spec):
        return (spec,)
    # SRC_FILE:TGT_FILE; try every colon, since a path may itself contain one.
    for index, char in enumerate(spec):
        if char == ":" and os.path.isfile(spec[:index]) and os.path.isfile(spec[index + 1:]):
            return spec[:index], spec[index + 1:]
    if ":" in spec:
        source, target = spec.split(":", 1)
        missing = source if not os.path.isfile(source) else target
        raise UsageError(f"{option}: no such file: {missing} (in {spec!r}; a CORPUS is PATH.tsv or "
                         "SRC_FILE:TGT_FILE)")
    raise UsageError(f"{option}: no such file: {spec} (a CORPUS is PATH.tsv or SRC_FILE:TGT_FILE)")


_SKIPPED = {}  # option -> lines left out by the last _read_corpus (for results.json)


def _read_corpus(option, spec, on_bad_line):
    """``(pairs, files)``: the pairs of a CORPUS and ``[{"path", "sha256"}]`` of its file(s)."""
    files = _corpus_files(option, spec)
    try:
        pairs, bad_lines = read_parallel(*files, on_bad_line=on_bad_line)
    except ValueError as error:
        hint = " (--on-bad-line skip leaves such lines out)" if on_bad_line == "error" and any(
            str(error).startswith(f"{path}:") for path in files) and "no sentence pairs" not in str(error) else ""
        raise UsageError(f"{option}: {error}{hint}") from None
    _SKIPPED[option] = len(bad_lines)
    if bad_lines and os.environ.get("RANK", "0") == "0":
        shown = "; ".join(str(bad) for bad in bad_lines[:5])
        more = f"; and {len(bad_lines) - 5} more" if len(bad_lines) > 5 else ""
        _warn(f"{option}: skipped {len(bad_lines)} bad line{'s' if len(bad_lines) > 1 else ''} "
              f"(kept {len(pairs)} pairs): {shown}{more}")
    return pairs, [{"path": os.path.abspath(path), "sha256": file_sha256(path)} for path in files]


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


def _load_data(args, state=None):
    """``(train, valid, test, identity)`` from ``--data`` or ``--train/--valid/--test``.

    ``state`` is the checkpoint of ``--resume``: without data options a synthetic run
    is regenerated as it was; a run on files needs its files again.
    """
    if args.data_dir is not None:
        if args.data is not None or args.train is not None or args.valid is not None or args.test is not None:
            raise UsageError("give --data-dir, or --data, or --train [--valid] [--test]; not two of them")
        files = _data_dir_files(args.data_dir)
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
        pairs, files = _read_corpus("--data", data, args.on_bad_line)
        if len(pairs) < 3:
            raise UsageError(f"--data: {data} has {len(pairs)} pairs; at least 3 are needed")
        return (*split_pairs(pairs, seed=args.seed), {"files": {"data": files}, "split_seed": args.seed})
    train, files = _read_corpus("--train", args.train, args.on_bad_line)
    identity = {"files": {"train": files}}
    given = {}
    for name in ("valid", "test"):
        if getattr(args, name) is not None:
            given[name], identity["files"][name] = _read_corpus("--" + name, getattr(args, name), args.on_bad_line)
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


def _data_dir_files(folder):
    """``{"train", "valid", "test"}`` → the TSV file of each role in ``folder`` (see ``--data-dir``)."""
    if not os.path.isdir(folder):
        raise UsageError(f"--data-dir: no such folder: {folder}")
    names = sorted(n for n in os.listdir(folder) if n.endswith(".tsv") and os.path.isfile(os.path.join(folder, n)))
    roles = {"train": ("train",), "valid": ("val", "dev"), "test": ("test",)}
    found = {}
    for role, prefixes in roles.items():
        matching = [n for n in names if n.lower().startswith(prefixes)]
        if len(matching) != 1:
            what = "no" if not matching else f"{len(matching)} ({', '.join(matching)})"
            raise UsageError(f"--data-dir: {folder} has {what} .tsv file(s) whose name starts with "
                             f"{' or '.join(repr(p) for p in prefixes)}; expected exactly one {role} file")
        found[role] = os.path.join(folder, matching[0])
    return found


def _check_train_flags(args):
    for name in ("epochs", "max_steps", "batch_size", "num_train", "bpe_vocab_size", "threads", "progress_steps",
                 "warmup_steps", "beam"):
        _positive("--" + name.replace("_", "-"), getattr(args, name))
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


def _train(args):
    started = time.monotonic()  # the time budget covers everything from here: data, tokenizer, training, test
    _check_train_flags(args)
    no_budget = args.time_budget is not None and args.time_budget.strip().lower() == "none"
    budget = parse_duration(args.time_budget) if args.time_budget is not None and not no_budget else None
    if args.on_bad_line is None:
        args.on_bad_line = "skip" if args.preset == "multi30k-cpu" else "error"
    state = None
    if args.resume:
        state = _load_checkpoint_for_user("--resume", args.resume, missing="no such checkpoint")
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
    train_pairs, valid_pairs, test_pairs, identity = _load_data(args, state)
    other_data = state is not None and _same_data_key(identity) != _same_data_key(state.get("data"))
    if other_data and not args.allow_other_data:
        raise UsageError(f"--resume: {args.resume} was trained on {_describe_data(state.get('data'))}, not on "
                         f"{_describe_data(identity)}; give the same data (or --allow-other-data)")
    # The decoders: batched beam search; on CUDA, greedy decoding replayed from CUDA graphs.
    if state is not None:
        trainer = Trainer.from_checkpoint(args.resume, train_pairs, valid_pairs, out_dir=args.out, started=started,
                                          other_data=other_data, decoders=decoders_for, **changes)
    else:
        trainer = Trainer(config, train_pairs, valid_pairs, out_dir=args.out, decoders=decoders_for, started=started)
    # --max-steps alone: the new total number of steps, not capped by a stored (or preset) epoch count.
    summary = trainer.fit(test_pairs, max_steps=args.max_steps if args.epochs is None else None, data_identity=identity,
                          command="python -m solutions " + " ".join(shlex.quote(a) for a in getattr(args, "argv", [])
                                                                    or []),
                          preset=args.preset, skipped_lines={role: _SKIPPED.get("--" + role, 0)
                                                             for role in ("train", "valid", "test", "data")})
    if summary is not None:
        if summary.stopped == "budget" and summary.epochs == 0:
            _warn(f"the time budget ({args.time_budget}) ran out after {summary.steps} of the "
                  f"{len(trainer.sampler)} steps of the first epoch: best.pt holds the model as it is now "
                  "(give a larger --time-budget for a useful model)")
        print(json.dumps(summary.as_dict()))
    cleanup_distributed()
    return 0


def _read_sentences(args):
    """``(sentences, where)``: the input lines and a name for messages ("FILE", "<stdin>", "argument")."""
    if args.input is not None and args.sentences:
        raise UsageError("give sentences as arguments or with --input, not both")
    source = args.input if args.input is not None else ("-" if args.sentences == ["-"] else None)
    if source is None:
        if not args.sentences:
            raise UsageError("no sentences: give them as arguments, with --input FILE, or '-' to read stdin")
        return list(args.sentences), "argument"
    if source == "-":
        name = "<stdin>"
        stream = getattr(sys.stdin, "buffer", None)
        data = stream.read() if stream is not None else sys.stdin.read().encode("utf-8")
    else:
        name = source
        if not os.path.isfile(source):
            raise UsageError(f"--input: no such file: {source}")
        with open(source, "rb") as handle:
            data = handle.read()
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    raw_lines = data.split(b"\n")
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()  # the final end of line ends the last line; it does not start a new one
    sentences = []
    for number, raw in enumerate(raw_lines, start=1):
        try:
            sentences.append(raw.rstrip(b"\r").decode("utf-8"))
        except UnicodeDecodeError as error:
            raise UsageError(f"{name}:{number}: not UTF-8: byte 0x{raw[error.start]:02x} at byte "
                             f"{error.start + 1} of the line") from None
    return sentences, name


class _TruncatingTokenizer:
    """A source tokenizer that keeps the first ``limit`` ids (what the positional table covers)."""

    def __init__(self, tokenizer, limit):
        self.tokenizer, self.limit = tokenizer, limit

    def encode(self, sentence):
        return self.tokenizer.encode(sentence)[:self.limit]

    def __len__(self):
        return len(self.tokenizer)


def _load_model(args):
    """``(model, src_tokenizer, tgt_tokenizer, device)`` from ``args.checkpoint`` (a checkpoint or an export)."""
    state = _load_checkpoint_for_user("--checkpoint", args.checkpoint)
    device = resolve_device(args.device)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    model, src_tokenizer, tgt_tokenizer, config = model_from_checkpoint(state, device=device)
    # The decoding the run chose (and measured its test score with), unless given.
    if args.beam is None:
        args.beam = config.beam_size
    if args.length_penalty is None:
        args.length_penalty = config.length_penalty
    return model, src_tokenizer, tgt_tokenizer, device


def _translate_lines(args, model, src_tokenizer, tgt_tokenizer, device, sentences, label):
    """One detokenised translation per sentence ("" for a blank one); too-long sources are cut, with a warning.

    ``label`` names a sentence in the warning: "argument", "FILE line", "<stdin> line" ...
    """
    limit = model.positional.pe.size(0)  # the longest source the encoder can place
    todo = [i for i, sentence in enumerate(sentences) if sentence.strip()]
    too_long = [i + 1 for i in todo if len(src_tokenizer.encode(sentences[i])) > limit]
    if too_long:
        shown = ", ".join(map(str, too_long[:10]))
        shown += f" and {len(too_long) - 10} more" if len(too_long) > 10 else ""
        _warn(f"{label}{'s' if len(too_long) > 1 else ''} {shown} longer than the model's max_len "
              f"({limit} tokens): truncated to the first {limit} tokens")
    outputs = [""] * len(sentences)  # an empty (or blank) line gives an empty line
    if todo:
        translated = translate(model, [sentences[i] for i in todo], _TruncatingTokenizer(src_tokenizer, limit),
                               tgt_tokenizer, beam_size=args.beam, max_len=args.max_len,
                               batch_size=args.batch_size, device=device, length_penalty=args.length_penalty,
                               **decoders_for(device))
        for i, line in zip(todo, translated):
            outputs[i] = line
    return outputs


def _write_lines(path, lines):
    text = "".join(line + "\n" for line in lines)
    if path is not None:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()


def _check_decoding_flags(args):
    for name in ("beam", "max_len", "batch_size", "threads"):
        _positive("--" + name.replace("_", "-"), getattr(args, name))
    if args.length_penalty is not None and args.length_penalty < 0:
        raise UsageError(f"--length-penalty must be >= 0, got {args.length_penalty}")


def _translate(args):
    _check_decoding_flags(args)
    sentences, where = _read_sentences(args)
    model, src_tokenizer, tgt_tokenizer, device = _load_model(args)
    label = "argument" if where == "argument" else f"{where} line"
    _write_lines(args.output, _translate_lines(args, model, src_tokenizer, tgt_tokenizer, device, sentences, label))
    return 0


def _evaluate(args):
    _check_decoding_flags(args)
    pairs, files = _read_corpus("--test", args.test, args.on_bad_line)
    model, src_tokenizer, tgt_tokenizer, device = _load_model(args)
    hypotheses = _translate_lines(args, model, src_tokenizer, tgt_tokenizer, device, [s for s, _ in pairs],
                                  "--test pair")
    references = [t for _, t in pairs]
    if args.output is not None:
        _write_lines(args.output, hypotheses)
    scorer = CorpusBLEU()
    bleu = scorer(hypotheses, references)
    tutorial = BLEU(lowercase=True, tokenize="13a", force=True).corpus_score(hypotheses, [references]).score
    print(json.dumps({"bleu": round(bleu, 2), "signature": scorer.signature, "details": str(scorer.last),
                      "bleu_tutorial_metric": round(tutorial, 2), "tutorial_metric": TUTORIAL_METRIC,
                      "length_penalty": args.length_penalty,
                      "exact_match": sum(h.split() == r.split() for h, r in zip(hypotheses, references)) / len(pairs),
                      "sentences": len(pairs), "beam": args.beam, "checkpoint": args.checkpoint,
                      "test": [f["path"] for f in files]}))
    return 0


def _export(args):
    state = _load_checkpoint_for_user("CKPT", args.checkpoint)
    if args.format == "ctranslate2":
        return _export_ctranslate2(args, state)
    if args.quantization is not None or args.force:
        raise UsageError("--quantization and --force apply to --format ctranslate2 only")
    if os.path.exists(args.output) and os.path.samefile(args.output, args.checkpoint):
        raise UsageError(f"--output {args.output} is the checkpoint itself: give another file")
    export_checkpoint(state, args.output)
    model = model_from_checkpoint(args.output)[0]
    print(json.dumps({"export": args.output, "bytes": os.path.getsize(args.output), "checkpoint": args.checkpoint,
                      "checkpoint_bytes": os.path.getsize(args.checkpoint),
                      "parameters": count_parameters(model)}))
    return 0


def _export_ctranslate2(args, state):
    if not ctranslate2_available():
        raise UsageError("--format ctranslate2 needs the ctranslate2 package: pip install ctranslate2 "
                         "(or pip install 'transformer-book[ctranslate2]')")
    if os.path.exists(args.output) and not args.force:
        raise UsageError(f"--output {args.output} exists: give another directory, or --force to replace it")
    if os.path.isfile(args.output):
        raise UsageError(f"--output {args.output} is a file: CTranslate2 writes a directory")
    try:
        export_ctranslate2(state, args.output, quantization=args.quantization, force=args.force)
    except ValueError as error:  # CTranslate2 refuses an unknown quantization type with a ValueError
        raise UsageError(f"--format ctranslate2: {error}") from None
    files = sorted(os.listdir(args.output))
    size = sum(os.path.getsize(os.path.join(args.output, name)) for name in files)
    print(json.dumps({"export": args.output, "format": "ctranslate2", "files": files, "bytes": size,
                      "quantization": args.quantization, "checkpoint": args.checkpoint}))
    return 0


def _bench(args):
    _positive("--threads", args.threads)
    _positive("--sentences", args.sentences)
    if args.checkpoint is not None:
        _load_checkpoint_for_user("--checkpoint", args.checkpoint)
    if args.translation_corpus is not None and not os.path.isfile(args.translation_corpus):
        raise UsageError(f"--translation-corpus: no such file: {args.translation_corpus}")
    if args.profile is not None:
        result = profile_training_step(args.profile, steps=2 if args.quick else 5, threads=args.threads)
        for line in format_profile(result):
            print(line)
        return 0
    run_benchmarks(quick=args.quick, device=args.device, json_path=args.json, clock=args.clock,
                   threads=args.threads, checkpoint=args.checkpoint, corpus=args.translation_corpus,
                   sentences=args.sentences)
    return 0


def main(argv=None):
    """Entry point of ``transformer`` and ``python -m solutions``; returns the exit status."""
    try:
        args = build_parser().parse_args(argv)
        args.argv = list(sys.argv[1:] if argv is None else argv)
        if args.command == "train" and not getattr(args, "quiet", False):
            logging.basicConfig(level=logging.INFO, format="%(message)s")
        handler = {"train": _train, "translate": _translate, "evaluate": _evaluate, "export": _export,
                   "bench": _bench}[args.command]
        return handler(args)
    except (UsageError, CheckpointError, FileNotFoundError, ValueError) as error:
        print(f"transformer: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("transformer: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
