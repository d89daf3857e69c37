"""The ``translate``, ``evaluate`` and ``tune`` commands: a trained checkpoint on sentences, or on a corpus.

``translate`` and ``evaluate`` read a checkpoint (or an export) with its tokenizers, decode
with the checkpoint's decoding (the beam size and length penalty tuned on validation when it
stores them, else its config's) unless ``--beam``/``--length-penalty`` are given, and cut
sources longer than the model's positional table, with a warning naming the lines. ``tune``
chooses that decoding on a validation corpus (:func:`~solutions.app.tuning.tune_decoding`),
stores it in the checkpoint, and decodes a test corpus once with it.
"""
import json
import os
import sys
import time

import torch
from sacrebleu.metrics import BLEU

from ..translation import translate
from .checkpoint import decoding_of, model_from_checkpoint, store_decoding, stored_config
from .device import resolve_device
from .evaluation import CorpusBLEU
from .inference import decoders_for
from .summary import TUTORIAL_METRIC, score_translations, write_json
from .config import DEFAULT_LENGTH_PENALTIES
from .tuning import parse_grid, tune_decoding
from .usage import UsageError, data_dir_files, load_checkpoint_for_user, positive, read_corpus, warn

__all__ = ["add_parsers", "run_translate", "run_evaluate", "run_tune"]


def _decoding_options(parser):
    """The decoding options shared by 'translate' and 'evaluate'."""
    parser.add_argument("--beam", type=int,
                        help="beam size (default: the checkpoint's decoding: tuned on validation, or its run's "
                             "setting; 1 = greedy with the key/value cache)")
    parser.add_argument("--length-penalty", type=float, metavar="ALPHA",
                        help="beam search length penalty (default: the checkpoint's: tuned on validation, or its "
                             "run's setting)")
    parser.add_argument("--batch-size", type=int, default=64,
                        help="sentences decoded together by greedy decoding (default 64)")
    parser.add_argument("--max-len", type=int, help="most new tokens (default: source length + 50)")
    parser.add_argument("--device", default="auto", help="auto (default), cpu, cuda or cuda:N")
    parser.add_argument("--threads", type=int, metavar="N", help="CPU threads for torch (default: torch's choice)")


def add_parsers(commands):
    """Add ``translate`` and ``evaluate`` to the sub-command parsers ``commands``."""
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

    tune = commands.add_parser(
        "tune", help="choose the beam search's length penalty (and beam size) on validation",
        description="Decode a VALIDATION corpus with beam search once per beam size, score every length penalty "
                    "of the grid on it (sacreBLEU, detokenised; the search does not depend on the penalty, so each "
                    "point is exactly that penalty's beam search), keep the best, store it in the checkpoint "
                    "(translate and evaluate then use it) and decode the TEST corpus once with it. Prints one "
                    "JSON line; progress goes to stderr.")
    tune.add_argument("--checkpoint", required=True, help="a checkpoint written by 'train' (best.pt), or an export")
    tune.add_argument("--data-dir", metavar="DIR",
                      help="a folder holding the validation ('val' or 'dev' ...) and test ('test' ...) TSV files, "
                           "as 'train --data-dir' reads it")
    tune.add_argument("--valid", metavar="CORPUS", help="the validation corpus (instead of --data-dir)")
    tune.add_argument("--test", metavar="CORPUS",
                      help="the test corpus, decoded once with the choice (instead of --data-dir; optional)")
    tune.add_argument("--length-penalties", metavar="LIST",
                      help="the grid of length penalties, comma-separated (default: the checkpoint's grid, or "
                           + ",".join(f"{a:g}" for a in DEFAULT_LENGTH_PENALTIES) + ")")
    tune.add_argument("--beams", metavar="LIST",
                      help="beam sizes to try, comma-separated, each >= 2 (default: the checkpoint's beam size, or "
                           "4 when it decodes greedily); each costs one decoding of the validation corpus")
    tune.add_argument("--output", metavar="CKPT",
                      help="write the checkpoint with its tuned decoding here (default: replace --checkpoint)")
    tune.add_argument("--results", metavar="FILE",
                      help="also record the tuning (the grid's scores, the choice, the test score) in this "
                           "results.json, under 'length_penalty_tuning'")
    tune.add_argument("--on-bad-line", choices=["error", "skip"], default="error",
                      help="a malformed line: stop (error, the default) or leave it out (skip)")
    tune.add_argument("--batch-size", type=int, default=64, help="sentences decoded together (default 64)")
    tune.add_argument("--device", default="auto", help="auto (default), cpu, cuda or cuda:N")
    tune.add_argument("--threads", type=int, metavar="N", help="CPU threads for torch (default: torch's choice)")


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
    state = load_checkpoint_for_user("--checkpoint", args.checkpoint)
    device = resolve_device(args.device)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    model, src_tokenizer, tgt_tokenizer, _ = model_from_checkpoint(state, device=device)
    # The decoding the run chose (tuned on validation, or its setting), unless given.
    beam, length_penalty, _ = decoding_of(state)
    if args.beam is None:
        args.beam = beam
    if args.length_penalty is None:
        args.length_penalty = length_penalty
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
        warn(f"{label}{'s' if len(too_long) > 1 else ''} {shown} longer than the model's max_len "
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
        positive("--" + name.replace("_", "-"), getattr(args, name))
    if args.length_penalty is not None and args.length_penalty < 0:
        raise UsageError(f"--length-penalty must be >= 0, got {args.length_penalty}")


def run_translate(args):
    """``translate``: one translation per input line, to stdout or ``--output``."""
    _check_decoding_flags(args)
    sentences, where = _read_sentences(args)
    model, src_tokenizer, tgt_tokenizer, device = _load_model(args)
    label = "argument" if where == "argument" else f"{where} line"
    _write_lines(args.output, _translate_lines(args, model, src_tokenizer, tgt_tokenizer, device, sentences, label))
    return 0


def run_evaluate(args):
    """``evaluate``: sacreBLEU of a checkpoint on a test CORPUS, printed as one JSON line."""
    _check_decoding_flags(args)
    pairs, files = read_corpus("--test", args.test, args.on_bad_line)
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


def _tuning_corpora(args):
    """``(valid_spec, test_spec or None)`` from ``--data-dir`` or ``--valid``/``--test``."""
    if args.data_dir is not None:
        if args.valid is not None or args.test is not None:
            raise UsageError("give --data-dir, or --valid [--test]; not both")
        files = data_dir_files(args.data_dir)
        return files["valid"], files["test"]
    if args.valid is None:
        raise UsageError("tune needs a validation corpus: --data-dir DIR or --valid CORPUS (never the test set)")
    return args.valid, args.test


def run_tune(args):
    """``tune``: the checkpoint's length penalty (and beam size) chosen on validation, the test decoded once with it."""
    for name in ("batch_size", "threads"):
        positive("--" + name.replace("_", "-"), getattr(args, name))
    valid_spec, test_spec = _tuning_corpora(args)
    state = load_checkpoint_for_user("--checkpoint", args.checkpoint)
    config_beam, _, _ = decoding_of(state)
    try:
        grid = parse_grid(args.length_penalties, "--length-penalties") if args.length_penalties is not None \
            else (stored_config(state).length_penalty_grid or DEFAULT_LENGTH_PENALTIES)
        beams = parse_grid(args.beams, "--beams", smallest=2, integer=True) if args.beams is not None \
            else (config_beam if config_beam > 1 else 4,)
    except ValueError as error:
        raise UsageError(str(error)) from None
    valid_pairs, valid_files = read_corpus("--valid", valid_spec, args.on_bad_line)
    test_pairs, test_files = read_corpus("--test", test_spec, args.on_bad_line) if test_spec else ([], [])
    device = resolve_device(args.device)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    model, src_tokenizer, tgt_tokenizer, _ = model_from_checkpoint(state, device=device)
    started_cpu, started = time.process_time(), time.monotonic()

    def log(message):
        print(f"transformer: {message}", file=sys.stderr, flush=True)

    tuning = tune_decoding(model, valid_pairs, src_tokenizer, tgt_tokenizer, grid, beams, args.batch_size, device,
                           log=log)
    tuning["valid"] = {"files": [f["path"] for f in valid_files], "sha256": [f["sha256"] for f in valid_files]}
    written = store_decoding(args.checkpoint, tuning, args.output)
    log(f"stored beam {tuning['beam_size']}, length penalty {tuning['length_penalty']:g} in {written}")
    test = None
    if test_pairs:
        pace = tuning["seconds"] / (tuning["sentences"] * len(beams))  # seconds per validation sentence and beam
        log(f"decoding the test set once ({len(test_pairs)} sentences, beam {tuning['beam_size']}, length penalty "
            f"{tuning['length_penalty']:g}; about {pace * len(test_pairs):.0f} s at the validation's pace)")
        scores = score_translations(model, src_tokenizer, tgt_tokenizer, test_pairs, tuning["beam_size"],
                                    tuning["length_penalty"], device, decoders_for(device))
        test = {k: v for k, v in scores.items() if k not in ("hypotheses", "tutorial_metric")}
        test["files"] = [f["path"] for f in test_files]
    report = {"checkpoint": written, **{k: v for k, v in tuning.items() if k != "valid"}, "valid": tuning["valid"],
              "test": test, "wall_seconds": round(time.monotonic() - started, 1),
              "process_cpu_seconds": round(time.process_time() - started_cpu, 1), "threads": torch.get_num_threads()}
    if args.results is not None:
        _record_in_results(args.results, report)
    print(json.dumps(report))
    return 0


def _record_in_results(path, report):
    """Add ``report`` to the results.json at ``path`` under ``length_penalty_tuning`` (the rest kept)."""
    if not os.path.isfile(path):
        raise UsageError(f"--results: no such file: {path}")
    try:
        with open(path, encoding="utf-8") as handle:
            results = json.load(handle)
    except (OSError, ValueError) as error:
        raise UsageError(f"--results: {path} is not a readable results.json ({error})") from None
    results["length_penalty_tuning"] = report
    write_json(path, results, indent=1, ensure_ascii=False)
