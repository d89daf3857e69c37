"""The ``translate`` and ``evaluate`` commands: a trained checkpoint on sentences, or on a test corpus.

Both read a checkpoint (or an export) with its tokenizers, decode with the checkpoint's
decoding settings unless ``--beam``/``--length-penalty`` are given, and cut sources longer
than the model's positional table, with a warning naming the lines.
"""
import json
import os
import sys

import torch
from sacrebleu.metrics import BLEU

from ..translation import translate
from .checkpoint import model_from_checkpoint
from .device import resolve_device
from .evaluation import CorpusBLEU
from .inference import decoders_for
from .summary import TUTORIAL_METRIC
from .usage import UsageError, load_checkpoint_for_user, positive, read_corpus, warn

__all__ = ["add_parsers", "run_translate", "run_evaluate"]


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
