"""Chapter 11's diagram: how sure a BLEU score is, by resampling the test sentences' counts.

Drawn in the book's figure language (:mod:`solutions.figures.diagram`). ``LAYOUTS`` maps
the file written to the function that lays the diagram out; :func:`solutions.figures.diagram.registry`
draws the SVG from it.
"""
from __future__ import annotations

from .diagram import GAP, Diagram, Layout

__all__ = ["LAYOUTS"]


def _bootstrap_layout() -> Diagram:
    """Chapter 11: sentence counts once, S resamples of indices, summed counts, S scores."""
    d = Diagram(
        name="bootstrap-bleu",
        title="How sure is a BLEU score? Bootstrap resampling of the test sentences",
        desc=("A top-to-bottom diagram of bootstrap resampling for BLEU. The N test translations "
              "and their references are counted once: a table stats of shape (N, 2K + 2), one row "
              "per sentence holding the clipped n-gram matches m_1 to m_K, the hypothesis n-grams "
              "t_1 to t_K, and the two lengths c and r. Beside it, resamples of shape (S, N): S rows "
              "of sentence indices drawn with replacement, so a sentence may appear twice or not at "
              "all. Summing, for each resample, the rows of the sentences it names (a row as often as its index appears) gives the "
              "summed counts of every resampled test set, shape (S, 2K + 2); BLEU computed from each "
              "row gives S scores, shape (S,), whose spread (for example the 2.5th and 97.5th "
              "percentiles) is the uncertainty the test set's size leaves in the score."),
    )
    pairs = d.tensor("pairs", "N sentences", "other", word="hypothesis, reference", cx=150, top=20)
    count = d.operation("count once per sentence", cx=150, after=pairs)
    stats = d.tensor("stats", "(N, 2K + 2)", "other", word="counts", cx=150, after=count, min_width=150)
    stats_note = d.note(["row i: m_1 … m_K,", "t_1 … t_K, c, r"], x=stats.left, top=stats.bottom + 6)

    draw = d.operation("draw N indices with replacement", cx=430, top=count.top)
    resamples = d.tensor("resamples", "(S, N)", "masks", word="indices", cx=430, after=draw, min_width=150)
    d.note(["a sentence may come", "twice, or not at all"], x=resamples.left, top=resamples.bottom + 6)

    top = stats_note.bottom + GAP + 4
    column = (stats.right + resamples.left) / 2  # the summed flow runs between the two inputs
    gather = d.operation("sum each resample's rows", cx=column, top=top)
    d.arrow((stats.right, stats.cy), (column - 12, stats.cy), (column - 12, gather.top))
    d.arrow((resamples.left, resamples.cy), (column + 12, resamples.cy), (column + 12, gather.top))
    sums = d.tensor("sums", "(S, 2K + 2)", "other", word="one test set per row", cx=column, after=gather,
                    min_width=150)
    formula = d.operation("BLEU of each row (§10.6)", cx=column, after=sums)
    scores = d.tensor("scores", "(S,)", "scores", word="", cx=column, after=formula)
    d.note(["their spread: how much the", "choice of sentences moves", "the score"],
           x=scores.right + 14, top=scores.top + 2)
    d.note(["the formula needs only", "these sums"], x=sums.right + 14, top=sums.top + 6)
    return d


#: Chapter diagrams: file (relative to the repository) → the function laying it out.
LAYOUTS: dict[str, Layout] = {
    "book/11_real_german/figures/bootstrap_bleu.svg": _bootstrap_layout,
}
