"""Command line: ``transformer train | translate | bench`` (also ``python -m solutions ...``).

Examples::

    python -m solutions train --preset tiny --out runs/tiny
    python -m solutions train --preset tiny --data corpus.tsv --epochs 20 --out runs/tsv
    python -m solutions train --resume runs/tiny/checkpoint.pt --epochs 8 --out runs/tiny
    torchrun --nproc_per_node 2 -m solutions train --preset tiny --out runs/ddp
    python -m solutions translate --checkpoint runs/tiny/checkpoint.pt "the dog sees a cat" --beam 4
    python -m solutions bench --quick

Bad arguments, missing files and checkpoints that do not fit print one line
``transformer: error: ...`` to stderr and exit with status 2 (no traceback).
"""
import argparse
import json
import logging
import os
import sys

__all__ = ["main", "build_parser"]


class UsageError(Exception):
    """A user error: reported as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{message} (see '{self.prog} --help')")


def build_parser():
    """The ``argparse`` parser of the three sub-commands."""
    parser = _Parser(prog="transformer", description="Train and run the Transformer of 'Attention Is All You Need'.")
    commands = parser.add_subparsers(dest="command", metavar="{train,translate,bench}", parser_class=_Parser)
    commands.required = True

    train = commands.add_parser("train", help="train a model (synthetic task or a TSV corpus)",
                                description="Train a Transformer; writes OUT/checkpoint.pt after every epoch.")
    train.add_argument("--preset", choices=["tiny", "base"],
                       help="model and schedule: tiny (CPU minutes) or base (the paper's); default: tiny, "
                            "or the checkpoint's with --resume")
    train.add_argument("--data", default="synthetic",
                       help="'synthetic' (the book's task, generated) or a PATH.tsv of 'source<TAB>target' lines")
    train.add_argument("--num-train", type=int, default=20000, help="synthetic training pairs (default 20000)")
    train.add_argument("--epochs", type=int, help="number of epochs (default: the preset's)")
    train.add_argument("--max-steps", type=int, help="stop after this many optimizer steps")
    train.add_argument("--batch-size", type=int, help="sentence pairs per (global) batch")
    train.add_argument("--tokenizer", choices=["word", "bpe"], help="word level or BPE (Hugging Face tokenizers)")
    train.add_argument("--device", default="auto", help="auto (default), cpu, cuda or cuda:N")
    train.add_argument("--bf16", action="store_true", help="bfloat16 autocast (CUDA only; ignored with a warning on CPU)")
    train.add_argument("--compile", action="store_true", help="torch.compile (CUDA only; ignored with a warning on CPU)")
    train.add_argument("--seed", type=int, default=0, help="seed of data, initialisation and dropout (default 0)")
    train.add_argument("--out", default="runs/transformer", help="output folder (default runs/transformer)")
    train.add_argument("--resume", metavar="CKPT", help="continue the run saved in this checkpoint")
    train.add_argument("--quiet", action="store_true", help="no progress bar and no log lines")

    translate = commands.add_parser("translate", help="translate sentences with a trained checkpoint",
                                    description="Translate sentences; the checkpoint holds the model and vocabularies.")
    translate.add_argument("sentences", nargs="+", help="source sentences (quote each one)")
    translate.add_argument("--checkpoint", required=True, help="a checkpoint written by 'train'")
    translate.add_argument("--beam", type=int, default=1, help="beam size (default 1 = greedy with the key/value cache)")
    translate.add_argument("--max-len", type=int, help="most new tokens (default: source length + 50)")
    translate.add_argument("--device", default="auto", help="auto (default), cpu, cuda or cuda:N")

    bench = commands.add_parser("bench", help="performance ratios (training step vs torch.nn.Transformer, cache)",
                                description="Side-by-side benchmarks of the reference package.")
    bench.add_argument("--quick", action="store_true", help="tiny sizes, a few repetitions (a smoke test)")
    bench.add_argument("--device", default="auto", help="auto (default), cpu, cuda or cuda:N")
    bench.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    bench.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                       help="wall time (default) or process CPU time (steadier on a shared CPU machine)")
    bench.add_argument("--threads", type=int, help="torch threads for the run (default: torch's choice)")
    return parser


def _positive(name, value):
    if value is not None and value < 1:
        raise UsageError(f"{name} must be a positive integer, got {value}")


def _load_data(args):
    from .data import make_synthetic_splits, read_tsv, split_pairs

    if args.data == "synthetic":
        _positive("--num-train", args.num_train)
        return make_synthetic_splits(args.num_train, 500, 500, seed=args.seed)
    if not os.path.isfile(args.data):
        raise UsageError(f"--data: no such file: {args.data} (give 'synthetic' or a PATH.tsv)")
    pairs = read_tsv(args.data)
    if len(pairs) < 3:
        raise UsageError(f"--data: {args.data} has {len(pairs)} pairs; at least 3 are needed")
    return split_pairs(pairs, seed=args.seed)


def _train(args):
    from .trainer import PRESETS, Trainer

    for name in ("epochs", "max_steps", "batch_size"):
        _positive("--" + name.replace("_", "-"), getattr(args, name))
    changes = {"device": args.device, "quiet": args.quiet, "seed": args.seed}
    if args.bf16:
        changes["bf16"] = True
    if args.compile:
        changes["compile"] = True
    for name in ("epochs", "max_steps", "batch_size", "tokenizer"):
        if getattr(args, name) is not None:
            changes[name] = getattr(args, name)
    train_pairs, valid_pairs, test_pairs = _load_data(args)
    if args.resume:
        if not os.path.isfile(args.resume):
            raise UsageError(f"--resume: no such checkpoint: {args.resume}")
        from .trainer import MODEL_FIELDS, load_checkpoint

        stored = load_checkpoint(args.resume)["config"]
        if args.preset is not None:
            preset = PRESETS[args.preset]
            clashing = [n for n in MODEL_FIELDS if stored.get(n) != getattr(preset, n) and n != "tokenizer"]
            if clashing:
                raise UsageError(
                    f"checkpoint config does not match --preset {args.preset}: "
                    + ", ".join(f"{n} {stored[n]!r} != {getattr(preset, n)!r}" for n in clashing)
                )
        trainer = Trainer.from_checkpoint(args.resume, train_pairs, valid_pairs, out_dir=args.out, **changes)
    else:
        config = PRESETS[args.preset or "tiny"].replace(**changes)
        trainer = Trainer(config, train_pairs, valid_pairs, out_dir=args.out)
    context = trainer.context
    if context.is_main and not args.quiet:
        from .model import count_parameters

        logging.getLogger("solutions.trainer").info(
            "training %s parameters on %d pairs (%s, %d process%s), batches of %d",
            f"{count_parameters(trainer.model):,}", len(trainer.train_data), trainer.device,
            context.world_size, "es" if context.world_size > 1 else "", trainer.config.batch_size)
    trainer.train()
    if context.is_main:
        test = trainer.evaluate(test_pairs) if test_pairs else {}
        summary = {"checkpoint": os.path.join(args.out, "checkpoint.pt"), "steps": trainer.step,
                   "epochs": trainer.epoch, "test": test}
        with open(os.path.join(args.out, "history.json"), "w", encoding="utf-8") as handle:
            json.dump({"history": trainer.history, "test": test}, handle, indent=1)
        print(json.dumps(summary))
    from .distributed import cleanup_distributed

    cleanup_distributed()
    return 0


def _translate(args):
    from .decoding import translate
    from .trainer import model_from_checkpoint, resolve_device

    _positive("--beam", args.beam)
    _positive("--max-len", args.max_len)
    if not os.path.isfile(args.checkpoint):
        raise UsageError(f"--checkpoint: no such file: {args.checkpoint}")
    device = resolve_device(args.device)
    model, src_tokenizer, tgt_tokenizer, _ = model_from_checkpoint(args.checkpoint, device=device)
    for line in translate(model, args.sentences, src_tokenizer, tgt_tokenizer, beam_size=args.beam,
                          max_len=args.max_len, device=device):
        print(line)
    return 0


def _bench(args):
    from .bench import run_benchmarks

    _positive("--threads", args.threads)
    run_benchmarks(quick=args.quick, device=args.device, json_path=args.json, clock=args.clock,
                   threads=args.threads)
    return 0


def main(argv=None):
    """Entry point of ``transformer`` and ``python -m solutions``; returns the exit status."""
    from .trainer import CheckpointError

    try:
        args = build_parser().parse_args(argv)
        if args.command == "train" and not getattr(args, "quiet", False):
            logging.basicConfig(level=logging.INFO, format="%(message)s")
        handler = {"train": _train, "translate": _translate, "bench": _bench}[args.command]
        return handler(args)
    except (UsageError, CheckpointError, FileNotFoundError, ValueError) as error:
        print(f"transformer: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("transformer: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
