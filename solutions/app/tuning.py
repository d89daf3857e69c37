"""The beam search's length penalty α (and beam size) chosen on validation, never on test.

A beam search with the GNMT length penalty scores a finished hypothesis
``log_prob / ((5 + len) / 6) ** α``; the best α depends on the model and the corpus (a
model that ends sentences early wants a larger one). :func:`tune_decoding` decodes the
validation set once per beam size with :func:`~solutions.app.inference.batch_beam_hypotheses`
and scores every α of a grid on it: the search itself does not depend on α (it only
chooses among the finished hypotheses, :func:`~solutions.app.inference.best_hypothesis`),
so the translations of every α are exactly those of a beam search run with it, for the cost
of one. The best validation BLEU wins (a tie: the earlier grid point). ``train`` tunes at
the end of a run and decodes the test set once, with the choice; the ``tune`` command does
it for a checkpoint; both store the result in the checkpoint
(:func:`~solutions.app.checkpoint.store_decoding`), where ``translate`` and ``evaluate`` find it
(:func:`~solutions.app.checkpoint.decoding_of`). The grid's default and its checks are
:class:`~solutions.app.config.TrainConfig`'s (:data:`~solutions.app.config.DEFAULT_LENGTH_PENALTIES`,
:func:`~solutions.app.config.check_grid`).

Reference: Wu et al. (2016), "Google's Neural Machine Translation System", section 7
(the penalty, and α tuned on a development set).
"""
import time

from ..masking import padding_mask
from ..tokens import UNK_ID
from ..translation import DECODE_BATCH_SIZE, length_sorted_batches
from .config import DEFAULT_LENGTH_PENALTIES, check_grid
from .evaluation import CorpusBLEU
from .inference import batch_beam_hypotheses, best_hypothesis

__all__ = ["parse_grid", "beam_hypotheses", "tune_decoding"]

def parse_grid(text, option, smallest=0, integer=False):
    """A comma-separated list such as ``"0,0.3,0.6,1,1.5"`` as a checked tuple
    (:func:`~solutions.app.config.check_grid`).

    Raises:
        ValueError: text that is not such a list, naming ``option``.
    """
    parts = [part.strip() for part in text.split(",")]
    convert = int if integer else float
    try:
        values = [convert(part) for part in parts]
    except ValueError:
        example = "1,4,8" if integer else "0,0.3,0.6,1,1.5"
        raise ValueError(f"{option}: expected comma-separated {'integers' if integer else 'numbers'} such as "
                         f"{example}, got {text!r}") from None
    return check_grid(values, option, smallest, integer)


def beam_hypotheses(model, sentences, src_tokenizer, beam_size, batch_size=DECODE_BATCH_SIZE, device=None,
                    progress=None):
    """Every sentence's finished beam-search hypotheses, batched as :func:`~solutions.translation.translate` batches.

    The sentences are encoded and decoded in batches of similar length
    (:func:`~solutions.translation.length_sorted_batches`, as ``translate`` batches them) with
    :func:`~solutions.app.inference.batch_beam_hypotheses`, each with at most its length + 50
    new tokens (capped by the positional table), as ``translate`` does: choosing with
    :func:`~solutions.app.inference.best_hypothesis` gives ``translate``'s translation for that α.

    Args:
        model: the trained model (put in eval mode).
        sentences: source strings.
        src_tokenizer: ``encode(str) -> list[int]``.
        beam_size: prefixes kept per sentence.
        batch_size: sentences decoded together.
        device: where to run (default: the model's device).
        progress: called as ``progress(done, total)`` after every batch (``None``: nothing).

    Returns:
        One list of ``(summed log probability, tokens)`` per sentence, in the order of ``sentences``.
    """
    model.eval()
    device = device or next(model.parameters()).device
    limit = model.positional.pe.size(0) - 1
    encoded = [src_tokenizer.encode(s) or [UNK_ID] for s in sentences]
    found = [None] * len(sentences)
    done = 0
    for chunk, src in length_sorted_batches(encoded, batch_size, device):  # src: (B, T_src)
        limits = [min(len(encoded[i]) + 50, limit) for i in chunk]
        for i, hypotheses in zip(chunk, batch_beam_hypotheses(model, src, padding_mask(src), beam_size, limits)):
            found[i] = hypotheses
        done += len(chunk)
        if progress is not None:
            progress(done, len(sentences))
    return found


def _score(hypotheses, references):
    """BLEU (sacreBLEU 13a, cased), brevity penalty and length ratio of detokenised ``hypotheses``; the signature."""
    scorer = CorpusBLEU()
    bleu = scorer(hypotheses, references)
    return {"bleu": round(bleu, 2), **scorer.lengths()}, scorer.signature


def tune_decoding(model, pairs, src_tokenizer, tgt_tokenizer, length_penalties=DEFAULT_LENGTH_PENALTIES,
                  beam_sizes=(4,), batch_size=DECODE_BATCH_SIZE, device=None, log=None, clock=time.monotonic):
    """Choose the beam size and α with the best BLEU on the validation ``pairs``.

    Each beam size costs one batched beam search over the pairs (:func:`beam_hypotheses`);
    every α of ``length_penalties`` is then scored on its hypotheses with sacreBLEU (13a,
    cased; brevity penalty and length ratio kept). The best BLEU wins; of equal scores,
    the first in grid order (beam sizes as given, then α as given).

    Args:
        model: the trained model.
        pairs: the validation ``(source, reference)`` pairs (never the test set).
        src_tokenizer, tgt_tokenizer: the model's tokenizers.
        length_penalties: the grid of α (checked by :func:`~solutions.app.config.check_grid`).
        beam_sizes: the beam sizes tried (each at least 2: α does nothing to greedy decoding).
        batch_size: sentences decoded together.
        device: where to run (default: the model's device).
        log: a function of one message: a line per decoded quarter of the pairs and per grid
            point (``None``: silent).
        clock: the clock of the reported seconds.

    Returns:
        ``{"beam_size", "length_penalty", "bleu", "at_grid_edge", "grid", "sentences", "signature",
        "seconds"}``: the choice and its validation BLEU, whether it is the grid's smallest or largest α
        (then a log line says that one beyond may do better), and ``grid``, one
        ``{"beam_size", "length_penalty", "bleu", "brevity_penalty", "length_ratio"}`` per point.

    Raises:
        ValueError: an empty or bad grid, a beam size below 2, or no pairs.
    """
    length_penalties = check_grid(length_penalties, "length penalties")
    beam_sizes = check_grid(beam_sizes, "beam sizes", smallest=2, integer=True)
    if not pairs:
        raise ValueError("no validation pairs to tune the decoding on")
    log = log or (lambda message: None)
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    started = clock()
    grid, signature = [], None
    for beam_size in beam_sizes:
        shown = [0]

        def progress(done, total, beam_size=beam_size, shown=shown):
            if done == total or done * 4 >= (shown[0] + 1) * total:
                shown[0] = done * 4 // total
                log(f"tuning: beam {beam_size}, {done}/{total} validation sentences decoded "
                    f"({clock() - started:.0f} s)")

        found = beam_hypotheses(model, sources, src_tokenizer, beam_size, batch_size, device, progress)
        for alpha in length_penalties:
            translations = [tgt_tokenizer.decode(best_hypothesis(h, alpha)[1:]) for h in found]
            scores, signature = _score(translations, references)
            grid.append({"beam_size": beam_size, "length_penalty": alpha, **scores})
            log(f"tuning: beam {beam_size}, length penalty {alpha:g}: valid BLEU {scores['bleu']:.2f} "
                f"(brevity penalty {scores['brevity_penalty']:.3f}, length ratio {scores['length_ratio']:.3f})")
    best = max(grid, key=lambda point: point["bleu"])  # the first of equal scores
    log(f"tuning: chose beam {best['beam_size']}, length penalty {best['length_penalty']:g} "
        f"(valid BLEU {best['bleu']:.2f}) in {clock() - started:.0f} s")
    edge = len(length_penalties) > 1 and best["length_penalty"] in (min(length_penalties), max(length_penalties))
    if edge:
        side = "largest" if best["length_penalty"] == max(length_penalties) else "smallest"
        log(f"tuning: the chosen length penalty is the grid's {side}: one beyond it may score higher on "
            f"validation (a wider grid costs no more decoding)")
    return {"beam_size": best["beam_size"], "length_penalty": best["length_penalty"], "bleu": best["bleu"],
            "at_grid_edge": edge, "grid": grid, "sentences": len(pairs), "signature": signature,
            "seconds": round(clock() - started, 1)}
