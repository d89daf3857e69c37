"""The ``export`` and ``bench`` commands: a checkpoint made smaller or converted, and the speed benchmarks."""
import json
import os

from ..model import count_parameters
from .bench import run_benchmarks
from .checkpoint import export_checkpoint, model_from_checkpoint
from .export import ctranslate2_available, export_ctranslate2
from .profiling import format_profile, profile_training_step
from .usage import UsageError, load_checkpoint_for_user, positive

__all__ = ["add_parsers", "run_export", "run_bench"]


def add_parsers(commands):
    """Add ``export`` and ``bench`` to the sub-command parsers ``commands``."""
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


def run_export(args):
    """``export``: an inference-only checkpoint, or a CTranslate2 model directory."""
    state = load_checkpoint_for_user("CKPT", args.checkpoint)
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


def run_bench(args):
    """``bench``: the speed benchmarks, or ``--profile``: a training step op by op."""
    positive("--threads", args.threads)
    positive("--sentences", args.sentences)
    if args.checkpoint is not None:
        load_checkpoint_for_user("--checkpoint", args.checkpoint)
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
