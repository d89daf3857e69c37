"""Corpus BLEU from its counts, and how sure a BLEU score is (chapter 11).

Corpus BLEU (Papineni et al., 2002) is a function of a few counts summed over the test
set: for each order n the clipped n-gram matches and the hypothesis n-grams, and the two
lengths. Each sentence contributes its own counts (:func:`sentence_statistics`), so the
score of any other test set drawn from the same sentences, a *bootstrap resample* that
takes some sentences twice and leaves others out (Koehn, 2004), is the same
formula applied to other sums (:func:`bootstrap_bleu`). The spread of those scores says
how much of a difference between two systems the choice of test sentences alone could
make.
"""
from __future__ import annotations

import math
from collections import Counter

import numpy as np

__all__ = ["sentence_statistics", "bootstrap_bleu"]


def sentence_statistics(hypotheses, references, max_order=4):
    """BLEU's counts of every sentence pair, one row each.

    Args:
        hypotheses: the system's translations, each a list of tokens
            (sacreBLEU's ``Tokenizer13a()(text).split()`` gives the
            tokens of its default score).
        references: one reference per hypothesis, in the same order,
            each a list of tokens.
        max_order: the longest n-gram counted, ``K`` (4 in BLEU).

    Shape:
        output: ``(N, 2K + 2)``, ``N = len(hypotheses)``.

    Returns:
        An integer array whose row ``i`` is
        ``[m_1 … m_K, t_1 … t_K, c, r]`` for pair ``i``: ``m_n`` the
        hypothesis's ``n``-grams found in the reference, each counted
        at most as often as the reference holds it (clipped); ``t_n``
        the hypothesis's ``n``-grams; ``c`` and ``r`` the hypothesis's
        and the reference's lengths in tokens.

    Raises:
        ValueError: the two lists differ in length, or
            ``max_order < 1``.
        TypeError: a sentence is a string, not a list of tokens.
    """
    if len(references) != len(hypotheses):  # one pair per row
        raise ValueError(
            f"expected one reference per hypothesis, got "
            f"{len(hypotheses)} hypotheses and {len(references)}")
    if max_order < 1:
        raise ValueError(f"max_order must be >= 1, got {max_order}")
    rows = []
    for hyp, ref in zip(hypotheses, references):
        if isinstance(hyp, str) or isinstance(ref, str):
            raise TypeError("expected lists of tokens, got a string: "
                            "split each sentence first")
        matches, totals = [], []
        for n in range(1, max_order + 1):
            hyp_grams = Counter(tuple(hyp[i:i + n])
                                for i in range(len(hyp) - n + 1))
            ref_grams = Counter(tuple(ref[i:i + n])
                                for i in range(len(ref) - n + 1))
            # & keeps the smaller count of each n-gram: the clipping
            matches.append(sum((hyp_grams & ref_grams).values()))
            totals.append(max(len(hyp) - n + 1, 0))
        rows.append(matches + totals + [len(hyp), len(ref)])
    width = 2 * max_order + 2
    return np.array(rows, dtype=np.int64).reshape(len(rows), width)


def bootstrap_bleu(stats, resamples):
    """Corpus BLEU of each resampled test set, from the counts.

    Args:
        stats: the counts of the ``N`` test sentences, one row each,
            as :func:`sentence_statistics` returns them:
            ``[m_1 … m_K, t_1 … t_K, c, r]``.
        resamples: ``S`` test sets, one row each, of sentence indices
            into ``stats``; an index may appear several times (the
            sentence then counts several times) or not at all.

    Shape:
        stats: ``(N, 2K + 2)``; resamples: ``(S, M)``; output: ``(S,)``.

    Returns:
        A float array (float64 or float32: either is correct): for each
        row of ``resamples``, BLEU of the
        counts of its sentences summed (``M_n``, ``T_n``, ``C``, ``R``):
        ``100 · BP · exp((1/K) Σ_n log(M_n / T_n))``, ``BP = 1`` if
        ``C > R``, else ``exp(1 - R / C)``; 0 when some ``M_n`` is 0
        or ``C`` is 0.
    """
    stats = np.asarray(stats, dtype=np.float64)
    resamples = np.asarray(resamples)
    if stats.ndim != 2 or stats.shape[1] < 4 or stats.shape[1] % 2:
        raise ValueError(f"stats must be (N, 2K + 2): {stats.shape}")
    if resamples.ndim != 2 or resamples.dtype.kind not in "iu":
        raise ValueError("resamples must be a 2-D array of indices, "
                         f"got {resamples.dtype} {resamples.shape}")
    k = (stats.shape[1] - 2) // 2
    sums = stats[resamples].sum(axis=1)  # (S, 2K + 2), repeats again
    scores = np.zeros(len(sums))
    for s, row in enumerate(sums):
        matches, totals, c, r = row[:k], row[k:2 * k], row[-2], row[-1]
        if c == 0 or matches.min() == 0:
            continue  # no smoothing: log 0 makes the score 0
        log_mean = np.mean(np.log(matches / totals))
        penalty = 1.0 if c > r else math.exp(1 - r / c)
        scores[s] = 100 * penalty * math.exp(log_mean)
    return scores
