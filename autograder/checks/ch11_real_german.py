"""Checks of chapter 11, translating real German: ``sentence_statistics`` and ``bootstrap_bleu``.

The contract is ``shared/EXERCISES.md`` section 11; the reference is ``solutions/bleu.py``
(Papineni et al., 2002, for the clipped counts and BLEU from summed counts; Koehn, 2004,
for the bootstrap).

``sentence_statistics``'s parts are held apart by their inputs and one tolerance:

* the clipped matches: every hypothesis has at least ``K`` tokens (no order without
  n-grams), and its words repeat, so clipping shows; a result whose totals or lengths
  follow a wrong rule of the second part (tokens for every order, the reference's
  n-grams, ``c`` and ``r`` swapped) is accepted there (:meth:`SentenceStatistics.tolerated`);
* the totals and lengths: no token repeats within a sentence, so every way of counting
  matches (clipped, unclipped, distinct n-grams) gives the same ``m_n``;
* short and empty sentences: distinct tokens again, and the second part's wrong rules
  tolerated, so only a total below 0, a row left out or a crash on no tokens fails it.

``bootstrap_bleu``'s cases hold the other parts' rules fixed through their inputs:

* the sums: every sentence's hypothesis is as long as its reference (so ``BP = 1`` by any
  formula) and matches at every order (so no score is 0);
* the brevity penalty and the zero rule: every resample repeats one sentence, so the
  sums are a multiple of that sentence's counts, and summing, averaging sentence scores
  or counting a repeated sentence once all give the same number.

The diagnoses recompute the plausible wrong answers from the case's inputs (the mean of
the sentences' own scores, a repeated sentence counted once, an arithmetic mean, a score
in ``[0, 1]``, a penalty from ``C / R``, a penalty above 1 for long output, a smoothed
zero) and name the one the result equals.
"""
from __future__ import annotations

import dataclasses
import math
from collections import Counter

import numpy as np

from .base import Case, Exercise, close, register

CHAPTER = "11_real_german"


# --------------------------------------------------------------------------- sentence_statistics

#: Caption words: the cases' sentences are drawn from them (distinct ones where a part needs it).
_WORDS = ("a two the man woman dog child girl boy group people street water snow ball bike shirt red "
          "blue black white young old is are runs sits plays stands walks holds rides jumps in on at "
          "with near under").split()


def _counts(hypotheses, references, order, *, clip="min", totals="hypothesis", swap=False, clamp=True):
    """Rows ``[m_1 … m_K, t_1 … t_K, c, r]`` with switches for the plausible mistakes.

    ``clip``: "min" (the rule), "none" (every hypothesis n-gram found in the reference counts)
    or "distinct" (each distinct shared n-gram once). ``totals``: "hypothesis" (the rule),
    "tokens" (``c`` for every order) or "reference" (the reference's n-grams). ``swap``:
    ``c`` and ``r`` exchanged. ``clamp=False``: ``c - n + 1`` below 0 for a short hypothesis.
    """
    rows = []
    for hyp, ref in zip(hypotheses, references):
        matches, counted = [], []
        for n in range(1, order + 1):
            h = Counter(tuple(hyp[i:i + n]) for i in range(len(hyp) - n + 1))
            r = Counter(tuple(ref[i:i + n]) for i in range(len(ref) - n + 1))
            if clip == "none":
                matches.append(sum(k for gram, k in h.items() if gram in r))
            elif clip == "distinct":
                matches.append(len(set(h) & set(r)))
            else:
                matches.append(sum((h & r).values()))
            length = {"tokens": len(hyp) + n - 1, "reference": len(ref)}.get(totals, len(hyp))
            counted.append(max(length - n + 1, 0) if clamp else length - n + 1)
        lengths = [len(ref), len(hyp)] if swap else [len(hyp), len(ref)]
        rows.append(matches + counted + lengths)
    return np.array(rows, dtype=np.int64).reshape(len(rows), 2 * order + 2)


def _repeating(rng, length):
    """A sentence of ``length`` tokens from six words: its n-grams repeat."""
    return [str(w) for w in rng.choice(_WORDS[:6], size=length)]


def _distinct_pair(rng, hyp_len, ref_len):
    """A hypothesis and a reference, no token twice in either; the reference takes one or two
    runs of the hypothesis's tokens (so n-grams of several orders match) and words of its own."""
    words = [str(w) for w in rng.permutation(_WORDS)]
    hyp, spare = words[:hyp_len], words[hyp_len:]
    ref = []
    if hyp_len:
        start = int(rng.integers(0, hyp_len))
        run = hyp[start:start + int(rng.integers(1, hyp_len - start + 1))]
        ref = run[:ref_len]
    while len(ref) < ref_len:
        ref.insert(int(rng.integers(0, len(ref) + 1)), spare.pop())
    return hyp, ref


@register
class SentenceStatistics(Exercise):
    """``sentence_statistics(hypotheses, references, max_order=4) -> np.ndarray (N, 2K + 2)``."""

    name = "sentence_statistics"
    chapter = CHAPTER
    kind = "function"
    what = ("each sentence pair's clipped n-gram matches, its hypothesis n-grams and the two lengths, "
            "short and empty sentences included")
    parts = {
        "the clipped matches m_1 … m_K": 2,
        "the totals t_1 … t_K and the lengths c, r": 1,
        "short and empty sentences": 1,
    }
    #: the second part's wrong rules, accepted in the other parts' cases
    TOLERATED = ({"totals": "tokens"}, {"totals": "reference"}, {"swap": True})

    def cases(self, rng, hidden):
        matches, totals, short = self.parts

        def case(pairs, label, part, order=4):
            hyps = [list(h) for h, _ in pairs]
            refs = [list(r) for _, r in pairs]
            kwargs = {} if order == 4 else {"max_order": order}
            return Case(args=(hyps, refs), kwargs=kwargs, label=label, part=part, compare="values",
                        rtol=0, atol=0)

        def repeating(n, order=4):
            return [(_repeating(rng, int(rng.integers(order, 12))), _repeating(rng, int(rng.integers(2, 12))))
                    for _ in range(n)]

        def distinct(n, low=4):
            return [_distinct_pair(rng, int(rng.integers(low, 12)), int(rng.integers(3, 12))) for _ in range(n)]

        papineni = ("the the the the the the the".split(), "the cat is on the mat".split())
        echo = ("a dog a dog runs".split(), "a dog runs after a ball".split())
        cases = [
            case([papineni, echo], "'the' seven times against a reference holding it twice; 'a dog' twice "
                 "against once", matches),
            case(repeating(4), "4 pairs of sentences whose words repeat", matches),
            case(repeating(3, order=2), "max_order=2: 3 pairs, 6 columns", matches, order=2),
            case(distinct(4), "4 pairs, no token twice in a sentence, the lengths differ", totals),
            case([("two men sit".split(), "two men are sitting".split()),
                  ([], "a dog".split()),
                  ("a dog runs".split(), [])],
                 "a 3-token hypothesis (no 4-gram), an empty hypothesis, an empty reference", short),
        ]
        if not hidden:
            return cases
        cases += [
            case(repeating(10), "10 pairs of sentences whose words repeat", matches),
            case(repeating(5, order=3), "max_order=3: 5 pairs", matches, order=3),
            case(repeating(4, order=1), "max_order=1: 4 pairs", matches, order=1),
            case(distinct(8), "8 pairs, no token twice in a sentence", totals),
        ]
        lengths = [int(k) for k in rng.integers(0, 4, size=5)]
        cases.append(case([_distinct_pair(rng, k, int(rng.integers(0, 6))) for k in lengths],
                          f"5 hypotheses of {lengths} tokens", short))
        return cases

    def tolerated(self, case, want):
        """The first and third parts' cases accept the totals and lengths of the second part's wrong
        rules: that part states them, so they are charged to it alone."""
        if self.part_of(case) == list(self.parts)[1] or case.expect_error or len(case.args) != 2:
            return []
        order = case.kwargs.get("max_order", 4)
        right = np.asarray(want.value)
        out = []
        for rule in self.TOLERATED:
            value = _counts(*case.args, order, **rule)
            if value.shape == right.shape and not np.array_equal(value, right):
                out.append(dataclasses.replace(want, value=value))
        return out

    def diagnose(self, case, got, want):
        hyps, refs = case.args
        order = case.kwargs.get("max_order", 4)
        try:
            mine = np.asarray(got.value, dtype=np.float64)
        except (TypeError, ValueError):
            return "return an integer numpy array of shape (N, 2K + 2), one row per sentence pair."
        shape = (len(hyps), 2 * order + 2)
        if mine.shape != shape:
            return (f"return one row per sentence pair and 2K + 2 columns (K = max_order = {order}): shape "
                    f"{shape}, not {mine.shape}.")
        variants = {
            "clip each n-gram's count at the number of times the reference holds it: here an n-gram the "
            "hypothesis repeats counts every time.": {"clip": "none"},
            "an n-gram the hypothesis holds twice can match twice, if the reference holds it twice too: "
            "you counted each distinct shared n-gram once.": {"clip": "distinct"},
            "t_n counts the hypothesis's n-grams, c - n + 1 of them, not its tokens.": {"totals": "tokens"},
            "t_n counts the hypothesis's n-grams, not the reference's.": {"totals": "reference"},
            "the last two columns are c, the hypothesis's length, then r, the reference's.": {"swap": True},
            "a hypothesis shorter than n has no n-grams: t_n is 0, not c - n + 1 below 0.": {"clamp": False},
        }
        right = np.asarray(want.value, dtype=np.float64)
        for hint, rule in variants.items():
            variant = _counts(hyps, refs, order, **rule)
            if np.array_equal(mine, variant) and not np.array_equal(variant, right):
                return hint
        return None

    def raised_hint(self, case, got):
        if got.raised is not None and got.raised.get("type") in ("IndexError", "ValueError", "ZeroDivisionError"):
            return ("an empty sentence has no n-grams: its matches and totals are 0 and its length is 0; "
                    "a hypothesis shorter than n has no n-grams of order n.")
        return None


# --------------------------------------------------------------------------- the trusted formula


def _bleu(sums, order, *, mean="geometric", scale=100.0, penalty="right", smooth=False):
    """BLEU of one row of summed counts, with switches for the plausible mistakes."""
    matches, totals, c, r = sums[:order], sums[order:2 * order], sums[-2], sums[-1]
    if c == 0:
        return 0.0
    if min(matches) == 0:
        if not smooth:
            return 0.0
        matches = [m if m > 0 else 1e-9 for m in matches]
    precisions = [m / t for m, t in zip(matches, totals)]
    if penalty == "inverted":
        bp = 1.0 if c > r else math.exp(1 - c / r)
    elif penalty == "always":
        bp = math.exp(1 - r / c)
    else:
        bp = 1.0 if c > r else math.exp(1 - r / c)
    if mean == "arithmetic":
        return scale * bp * sum(precisions) / order
    return scale * bp * math.exp(sum(math.log(p) for p in precisions) / order)


def _variant(stats, resamples, *, per_sentence=False, unique=False, **rule):
    """Scores of every resample with one rule broken (see :func:`_bleu` for ``rule``)."""
    stats = np.asarray(stats, dtype=np.float64)
    order = (stats.shape[1] - 2) // 2
    out = []
    for row in np.asarray(resamples):
        rows = np.unique(row) if unique else row
        if per_sentence:
            out.append(float(np.mean([_bleu(stats[i], order, **rule) for i in rows])))
        else:
            out.append(_bleu(stats[rows].sum(axis=0), order, **rule))
    return np.array(out)


# --------------------------------------------------------------------------- inputs


def _sentence(rng, order, *, hyp_len, ref_len, zero_from=None):
    """One sentence's counts ``[m_1 … m_K, t_1 … t_K, c, r]``: ``t_n`` from the length, ``m_n``
    at least 1 and falling with ``n`` (0 from the order ``zero_from`` on)."""
    totals = [max(hyp_len - n + 1, 0) for n in range(1, order + 1)]
    matches, previous = [], hyp_len
    for n, total in enumerate(totals, start=1):
        m = int(rng.integers(1, min(total, previous) + 1)) if total and previous else 0
        if zero_from is not None and n >= zero_from:
            m = 0
        matches.append(m)
        previous = m
    return matches + totals + [hyp_len, ref_len]


def _stats_equal_lengths(rng, n, order=4):
    """``n`` sentences, each hypothesis as long as its reference, matching at every order."""
    rows = []
    for _ in range(n):
        length = int(rng.integers(order + 1, 16))
        rows.append(_sentence(rng, order, hyp_len=length, ref_len=length))
    return np.array(rows, dtype=np.int64)


def _resamples(rng, n, s):
    """``s`` resamples of ``n`` indices with replacement, each with at least one repeat."""
    rows = rng.integers(0, n, size=(s, n))
    rows[:, 0] = rows[:, 1]  # a sentence drawn twice in every row
    return rows


def _single(indices, m):
    """One resample per index, repeating it ``m`` times: ``(len(indices), m)``."""
    return np.repeat(np.asarray(indices, dtype=np.int64)[:, None], m, axis=1)


@register
class BootstrapBleu(Exercise):
    """``bootstrap_bleu(stats, resamples) -> np.ndarray (S,)``."""

    name = "bootstrap_bleu"
    chapter = CHAPTER
    kind = "function"
    what = ("corpus BLEU of each resample from its sentences' summed counts (repeats counted), "
            "the brevity penalty of the summed lengths, and 0 for a zero match count")
    parts = {
        "BLEU from each resample's summed counts, repeats counted": 2,
        "the brevity penalty of the summed lengths": 1,
        "a zero match count (or no output) gives 0": 1,
    }

    def cases(self, rng, hidden):
        sums, penalty, zero = self.parts

        def case(stats, resamples, label, part):
            return Case(args=(np.asarray(stats, dtype=np.int64), np.asarray(resamples, dtype=np.int64)),
                        label=label, part=part, compare="values", rtol=1e-9, atol=1e-9)

        lengths = [  # (hypothesis, reference) tokens: shorter, equal, longer
            (6, 9), (12, 13), (8, 8), (11, 7)]
        penalty_stats = np.array([_sentence(rng, 4, hyp_len=c, ref_len=r) for c, r in lengths])
        zero_stats = np.array([
            _sentence(rng, 4, hyp_len=7, ref_len=7, zero_from=4),  # no 4-gram matches
            _sentence(rng, 4, hyp_len=9, ref_len=9, zero_from=2),  # only unigrams match
            [0] * 8 + [0, 6],  # an empty hypothesis
            _sentence(rng, 4, hyp_len=8, ref_len=8),  # a sentence that scores
        ])
        stats = _stats_equal_lengths(rng, 6)
        cases = [
            case(stats, _resamples(rng, 6, 5), "6 sentences, 5 resamples of 6 with repeats", sums),
            case(stats, [[0, 1, 2, 3, 4, 5], [5, 4, 3, 2, 1, 0]], "the test set itself, in two orders", sums),
            case(stats, [[2, 2, 2, 2, 2, 2], [0, 0, 0, 1, 1, 1]], "sentences drawn 6 and 3 times", sums),
            case(penalty_stats, _single(range(4), 3),
                 "hypotheses shorter than, as long as and longer than the references", penalty),
            case(zero_stats, _single(range(4), 2), "no 4-gram match, only unigrams, an empty output", zero),
        ]
        if not hidden:
            return cases
        for n, s in ((12, 8), (30, 4)):
            stats = _stats_equal_lengths(rng, n)
            cases.append(case(stats, _resamples(rng, n, s), f"{n} sentences, {s} resamples", sums))
        stats = np.array([_sentence(rng, 2, hyp_len=int(k), ref_len=int(k)) for k in rng.integers(3, 12, size=5)])
        cases.append(case(stats, _resamples(rng, 5, 6), "max order 2 (6 columns)", sums))
        lengths = [(int(c), int(c) + int(d)) for c, d in zip(rng.integers(5, 15, size=4), rng.integers(-4, 6, size=4))]
        penalty_stats = np.array([_sentence(rng, 4, hyp_len=c, ref_len=r) for c, r in lengths])
        cases.append(case(penalty_stats, _single(range(4), int(rng.integers(2, 5))),
                          f"(hypothesis, reference) lengths {lengths}", penalty))
        zero_stats = np.array([_sentence(rng, 4, hyp_len=10, ref_len=int(rng.integers(8, 13)),
                                         zero_from=int(rng.integers(2, 5))) for _ in range(3)])
        cases.append(case(zero_stats, _single(range(3), 3), "a zero match count at a random order", zero))
        return cases

    def diagnose(self, case, got, want):
        try:
            mine = np.asarray(got.value, dtype=np.float64)
        except (TypeError, ValueError):
            return "return a float array of shape (S,): one score per row of resamples."
        stats, resamples = case.args
        if mine.shape != (len(resamples),):
            return f"return one score per resample: shape ({len(resamples)},), not {mine.shape}."
        variants = {
            "sum the sentences' counts over the resample first, then compute BLEU once: corpus BLEU "
            "is not the mean of the sentences' scores.": _variant(stats, resamples, per_sentence=True),
            "a sentence drawn twice counts twice: index the rows with the resample as it is "
            "(stats[row]), not its set of distinct indices.": _variant(stats, resamples, unique=True),
            "the precisions are combined by a geometric mean, exp of the mean of their logs, not an "
            "arithmetic mean.": _variant(stats, resamples, mean="arithmetic"),
            "BLEU is on sacreBLEU's scale, 0 to 100: multiply by 100.": _variant(stats, resamples, scale=1.0),
            "the penalty is exp(1 - R / C), with R the references' tokens and C the hypotheses': not "
            "exp(1 - C / R).": _variant(stats, resamples, penalty="inverted"),
            "when the hypotheses hold more tokens than the references the penalty is 1 (exp(1 - R / C) "
            "would exceed 1).": _variant(stats, resamples, penalty="always"),
            "a match count of 0 makes the score 0: no smoothing, log 0 is -inf.":
                _variant(stats, resamples, smooth=True),
        }
        right = np.asarray(want.value, dtype=np.float64)
        for hint, variant in variants.items():
            if close(mine, variant, rtol=1e-6, atol=1e-9) and not close(variant, right, rtol=1e-6, atol=1e-9):
                return hint
        return None

    def raised_hint(self, case, got):
        if got.raised is not None and got.raised.get("type") in ("ZeroDivisionError", "FloatingPointError"):
            return "an empty output (C = 0) or a zero match count scores 0: test for it before dividing or taking logs."
        return None
