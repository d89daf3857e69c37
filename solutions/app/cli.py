"""Command line: ``transformer train | translate | evaluate | tune | export | bench`` (also ``python -m solutions ...``).

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
    python -m solutions tune --checkpoint runs/de-en/best.pt --data-dir .m30k
    python -m solutions export runs/de-en/best.pt --output de-en-small.pt
    python -m solutions bench --quick

Bad arguments, missing files and checkpoints that do not fit print one line
``transformer: error: ...`` to stderr and exit with status 2 (no traceback).
"""
import logging
import sys

from .checkpoint import CheckpointError
from .decode_commands import add_parsers as add_decode_parsers, run_evaluate, run_translate, run_tune
from .tool_commands import add_parsers as add_tool_parsers, run_bench, run_export
from .train_command import add_parser as add_train_parser, run_train
from .usage import Parser, UsageError

__all__ = ["main", "build_parser"]

#: The function that runs each command.
COMMANDS = {"train": run_train, "translate": run_translate, "evaluate": run_evaluate, "tune": run_tune,
            "export": run_export, "bench": run_bench}


def build_parser():
    """The ``argparse`` parser of the sub-commands (each added by the module that runs it)."""
    parser = Parser(prog="transformer", description="Train and run the Transformer of 'Attention Is All You Need'.")
    commands = parser.add_subparsers(dest="command", metavar="{train,translate,evaluate,tune,export,bench}",
                                     parser_class=Parser)
    commands.required = True
    add_train_parser(commands)
    add_decode_parsers(commands)
    add_tool_parsers(commands)
    return parser


def main(argv=None):
    """Entry point of ``transformer`` and ``python -m solutions``; returns the exit status."""
    try:
        args = build_parser().parse_args(argv)
        args.argv = list(sys.argv[1:] if argv is None else argv)
        if args.command == "train" and not getattr(args, "quiet", False):
            logging.basicConfig(level=logging.INFO, format="%(message)s")
        return COMMANDS[args.command](args)
    except (UsageError, CheckpointError, FileNotFoundError, ValueError) as error:
        print(f"transformer: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("transformer: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
