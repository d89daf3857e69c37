"""Tests of the chapter 11 checks (``sentence_statistics``, ``bootstrap_bleu``): plausible
wrong answers are rejected with a hint that names the mistake and lose only the part that
states their rule, valid answers in other styles earn full marks, and the chapter's own
notebook is graded through the real sandboxed grader (the reference and fresh hidden inputs:
test_checks_registry.py)."""
import functools
import json
import math
from collections import Counter
from pathlib import Path

import pytest
import numpy as np
import sacrebleu
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

import check_helpers
from check_helpers import cases_drawn_once  # noqa: F401 (a fixture: each seeded draw made once per process)
import solutions
from autograder.checks import get_exercise
from autograder.sync import solution_cell_source
from check_helpers import accepted, assert_full_marks, grade_in_sandbox

pytestmark = pytest.mark.usefixtures("one_torch_thread", "cases_drawn_once")  # tests/conftest.py: tiny tensors, one thread

rejected = functools.partial(check_helpers.rejected, seed=11)
partly = functools.partial(check_helpers.partly, seed=11)

SUMS, PENALTY, ZERO = get_exercise("bootstrap_bleu").parts
ALL = {SUMS, PENALTY, ZERO}
MATCHES, TOTALS, SHORT = get_exercise("sentence_statistics").parts
TRANSLATIONS = Path(__file__).resolve().parents[2] / "book" / "11_real_german" / "multi30k_test_translations.jsonl"


def make_bleu(per_sentence=False, unique=False, mean="geometric", scale=100.0, penalty="right", smooth=False):
    """A loop-style answer with one switch per plausible mistake."""
    def bleu_of(sums, order):
        m, t, c, r = sums[:order], sums[order:2 * order], sums[-2], sums[-1]
        if c == 0:
            return 0.0
        if min(m) == 0:
            if not smooth:
                return 0.0
            m = [x if x > 0 else 1e-9 for x in m]
        p = [a / b for a, b in zip(m, t)]
        bp = {"right": 1.0 if c > r else math.exp(1 - r / c),
              "inverted": 1.0 if c > r else math.exp(1 - c / r),
              "always": math.exp(1 - r / c)}[penalty]
        if mean == "arithmetic":
            return scale * bp * sum(p) / order
        return scale * bp * math.exp(sum(math.log(x) for x in p) / order)

    def bootstrap_bleu(stats, resamples):
        stats = np.asarray(stats, dtype=float)
        order = (stats.shape[1] - 2) // 2
        out = []
        for row in resamples:
            rows = sorted(set(row.tolist())) if unique else row
            if per_sentence:
                out.append(float(np.mean([bleu_of(stats[i], order) for i in rows])))
            else:
                out.append(bleu_of(stats[rows].sum(axis=0), order))
        return np.array(out)

    return bootstrap_bleu


# --------------------------------------------------------------------------- wrong answers


def test_the_mean_of_sentence_scores_is_rejected_and_loses_only_the_sums():
    rejected("bootstrap_bleu", make_bleu(per_sentence=True), "not the mean of the sentences' scores")
    partly("bootstrap_bleu", make_bleu(per_sentence=True), {PENALTY, ZERO}, {SUMS})


def test_counting_a_repeated_sentence_once_loses_only_the_sums():
    rejected("bootstrap_bleu", make_bleu(unique=True), "a sentence drawn twice counts twice")
    partly("bootstrap_bleu", make_bleu(unique=True), {PENALTY, ZERO}, {SUMS})


def test_an_arithmetic_mean_of_the_precisions_is_rejected():
    rejected("bootstrap_bleu", make_bleu(mean="arithmetic"), "geometric mean")


def test_a_score_between_0_and_1_is_rejected():
    rejected("bootstrap_bleu", make_bleu(scale=1.0), "multiply by 100")


def test_an_inverted_penalty_loses_only_the_penalty():
    rejected("bootstrap_bleu", make_bleu(penalty="inverted"), "not exp(1 - C / R)")
    partly("bootstrap_bleu", make_bleu(penalty="inverted"), {SUMS, ZERO}, {PENALTY})


def test_a_penalty_for_long_output_loses_only_the_penalty():
    rejected("bootstrap_bleu", make_bleu(penalty="always"), "the penalty is 1")
    partly("bootstrap_bleu", make_bleu(penalty="always"), {SUMS, ZERO}, {PENALTY})


def test_smoothing_a_zero_count_loses_only_the_zero_part():
    rejected("bootstrap_bleu", make_bleu(smooth=True), "no smoothing")
    partly("bootstrap_bleu", make_bleu(smooth=True), {SUMS, PENALTY}, {ZERO})


def test_the_wrong_shape_is_named():
    def one_number(stats, resamples):
        return float(solutions.bootstrap_bleu(stats, resamples).mean())

    rejected("bootstrap_bleu", one_number, "one score per resample", any_word=True)


def test_the_visible_check_rejects_every_mutant_the_hidden_one_does():
    for wrong in (make_bleu(per_sentence=True), make_bleu(unique=True), make_bleu(penalty="inverted"),
                  make_bleu(penalty="always"), make_bleu(smooth=True), make_bleu(mean="arithmetic")):
        rejected("bootstrap_bleu", wrong, hidden=False)


# --------------------------------------------------------------------------- right answers, other styles


def test_the_loop_answer_passes():
    accepted("bootstrap_bleu", make_bleu())


def test_a_vectorised_numpy_answer_passes():
    def bootstrap_bleu(stats, resamples):
        stats = np.asarray(stats, dtype=np.float64)
        k = (stats.shape[1] - 2) // 2
        sums = stats[resamples].sum(axis=1)
        m, t, c, r = sums[:, :k], sums[:, k:2 * k], sums[:, -2], sums[:, -1]
        with np.errstate(divide="ignore", invalid="ignore"):
            log_mean = np.log(m / t).mean(axis=1)
            bp = np.where(c > r, 1.0, np.exp(1 - r / c))
            score = 100 * bp * np.exp(log_mean)
        return np.where((m.min(axis=1) > 0) & (c > 0), score, 0.0)

    accepted("bootstrap_bleu", bootstrap_bleu)


def test_a_float32_array_passes_and_a_wrong_float32_one_still_fails():
    """The prompt asks for "a float array": from integer counts float32 is as right as
    float64 (the dtype rule of EXERCISES.md), compared at float32's tolerance; a float32
    answer with a mistake still loses its part."""
    def in_float32(answer):
        return lambda stats, resamples: np.asarray(answer(stats, resamples), dtype=np.float32)

    accepted("bootstrap_bleu", in_float32(solutions.bootstrap_bleu))
    partly("bootstrap_bleu", in_float32(make_bleu(penalty="inverted")), [SUMS, ZERO], [PENALTY], "not exp(1 - C / R)")


def test_an_answer_through_sacrebleus_formula_passes():
    def bootstrap_bleu(stats, resamples):
        k = (len(stats[0]) - 2) // 2
        out = []
        for row in resamples:
            s = np.asarray(stats)[row].sum(axis=0)
            out.append(sacrebleu.BLEU.compute_bleu(s[:k].tolist(), s[k:2 * k].tolist(), int(s[-2]), int(s[-1]),
                                                   smooth_method="none", max_ngram_order=k).score)
        return np.array(out)

    accepted("bootstrap_bleu", bootstrap_bleu)


def test_the_identity_resample_is_sacrebleus_corpus_score():
    """The reference's two functions together give sacreBLEU's default score (13a tokens)."""
    tokenizer = Tokenizer13a()
    hyps = ["A dog runs in the snow.", "Two men are talking.", "A woman sits on a red bench."]
    refs = ["A dog is running in the snow.", "Two men talk.", "A woman is sitting on a bench."]
    stats = solutions.sentence_statistics([tokenizer(h).split() for h in hyps], [tokenizer(r).split() for r in refs])
    score = solutions.bootstrap_bleu(stats, np.arange(3)[None])[0]
    assert math.isclose(score, sacrebleu.corpus_bleu(hyps, [refs], smooth_method="none").score, rel_tol=1e-12)


# --------------------------------------------------------------------------- the real grading path

SOLUTION = '''
def bootstrap_bleu(stats, resamples):
    stats = np.asarray(stats, dtype=np.float64)
    k = (stats.shape[1] - 2) // 2
    scores = []
    for row in resamples:
        s = stats[row].sum(axis=0)
        if s[-2] == 0 or s[:k].min() == 0:
            scores.append(0.0)
            continue
        bp = 1.0 if s[-2] > s[-1] else math.exp(1 - s[-1] / s[-2])
        scores.append(100 * bp * math.exp(np.mean(np.log(s[:k] / s[k:2 * k]))))
    return np.array(scores)
'''

WRONG = SOLUTION.replace("stats[row].sum(axis=0)", "stats[np.unique(row)].sum(axis=0)")


# --------------------------------------------------------------------------- sentence_statistics


def make_counts(clip="min", totals="hypothesis", swap=False, clamp=True):
    """A loop-style answer with one switch per plausible mistake."""
    def sentence_statistics(hypotheses, references, max_order=4):
        rows = []
        for hyp, ref in zip(hypotheses, references):
            m, t = [], []
            for n in range(1, max_order + 1):
                h = Counter(tuple(hyp[i:i + n]) for i in range(len(hyp) - n + 1))
                r = Counter(tuple(ref[i:i + n]) for i in range(len(ref) - n + 1))
                m.append({"min": sum(min(k, r[g]) for g, k in h.items()),
                          "none": sum(k for g, k in h.items() if g in r),
                          "distinct": len(h.keys() & r.keys())}[clip])
                length = {"hypothesis": len(hyp), "tokens": len(hyp) + n - 1, "reference": len(ref)}[totals]
                t.append(max(length - n + 1, 0) if clamp else length - n + 1)
            rows.append(m + t + ([len(ref), len(hyp)] if swap else [len(hyp), len(ref)]))
        return np.array(rows, dtype=np.int64).reshape(len(rows), 2 * max_order + 2)

    return sentence_statistics


# (mistake, the part it loses, words of its hint): each loses that part alone, with the hint.
COUNTING_MISTAKES = [
    ({"clip": "none"}, MATCHES, "clip each n-gram's count"),
    ({"clip": "distinct"}, MATCHES, "each distinct shared n-gram once"),
    ({"totals": "tokens"}, TOTALS, "not its tokens"),
    ({"totals": "reference"}, TOTALS, "not the reference's"),
    ({"swap": True}, TOTALS, "c, the hypothesis's length"),
    ({"clamp": False}, SHORT, "not c - n + 1 below 0"),
]


@pytest.mark.parametrize("mistake, lost, hint", COUNTING_MISTAKES, ids=[str(m[0]) for m in COUNTING_MISTAKES])
def test_a_counting_mistake_is_named_and_loses_only_its_part(mistake, lost, hint):
    partly("sentence_statistics", make_counts(**mistake), {MATCHES, TOTALS, SHORT} - {lost}, {lost}, hint)


def test_a_crash_on_an_empty_sentence_loses_only_the_short_sentences():
    def sentence_statistics(hypotheses, references, max_order=4):
        for hyp in hypotheses:
            hyp[0]  # IndexError on an empty hypothesis
        return solutions.sentence_statistics(hypotheses, references, max_order)

    partly("sentence_statistics", sentence_statistics, {MATCHES, TOTALS}, {SHORT}, "an empty sentence has no n-grams")


def test_a_fixed_order_of_4_is_named():
    def sentence_statistics(hypotheses, references, max_order=4):
        return solutions.sentence_statistics(hypotheses, references)

    rejected("sentence_statistics", sentence_statistics, "K = max_order")


def test_the_visible_check_rejects_every_counting_mutant():
    for mistake, _, _ in COUNTING_MISTAKES:
        rejected("sentence_statistics", make_counts(**mistake), hidden=False)


def test_the_loop_counting_answer_passes():
    """(A dict-based float answer is test_mutants.STYLES' row, graded in the sandbox too.)"""
    accepted("sentence_statistics", make_counts())


def test_the_counts_of_the_stored_translations_are_sacrebleus():
    """The reference on the chapter's 1,000 real test translations: its rows summed are
    sacreBLEU's counts, and with bootstrap_bleu they give its default score."""
    rows = [json.loads(line) for line in TRANSLATIONS.read_text(encoding="utf-8").splitlines()]
    tokenizer = Tokenizer13a()
    for key in ("greedy", "beam"):
        hyps, refs = [r[key] for r in rows], [r["reference"] for r in rows]
        stats = solutions.sentence_statistics([tokenizer(h).split() for h in hyps],
                                              [tokenizer(r).split() for r in refs])
        sacre = sacrebleu.corpus_bleu(hyps, [refs])
        total = stats.sum(axis=0).tolist()
        assert total == [*sacre.counts, *sacre.totals, sacre.sys_len, sacre.ref_len]
        assert math.isclose(solutions.bootstrap_bleu(stats, np.arange(len(rows))[None])[0], sacre.score,
                            rel_tol=1e-12)


def test_a_string_instead_of_tokens_is_refused_by_the_reference():
    with pytest.raises(TypeError, match="split each sentence first"):
        solutions.sentence_statistics(["a dog runs"], ["a dog is running"])


# The reference's own cell with one rule broken: every hypothesis n-gram found in the reference counts.
COUNTS_WRONG = solution_cell_source(solutions.sentence_statistics).replace(
    "sum((hyp_grams & ref_grams).values())", "sum(k for g, k in hyp_grams.items() if g in ref_grams)")
assert "hyp_grams.items()" in COUNTS_WRONG


def test_the_sandboxed_grader_gives_full_marks_and_charges_each_mistake_to_its_part(tmp_path):
    """Both exercises in one notebook per round (one sandboxed grading each)."""
    right = grade_in_sandbox("11_real_german", tmp_path / "right", bootstrap_bleu=SOLUTION)  # 11.1: the notebook's
    assert_full_marks(right, {"bootstrap_bleu": 4, "sentence_statistics": 4})
    wrong = grade_in_sandbox("11_real_german", tmp_path / "wrong", bootstrap_bleu=WRONG,
                             sentence_statistics=COUNTS_WRONG)
    bootstrap, counted = wrong["bootstrap_bleu"], wrong["sentence_statistics"]
    assert (bootstrap.status, bootstrap.score) == ("partial", 2), bootstrap
    assert {p.name: p.score for p in bootstrap.parts} == {SUMS: 0, PENALTY: 1, ZERO: 1}
    assert "counts twice" in bootstrap.reason
    assert (counted.status, counted.score) == ("partial", 2), counted
    assert {p.name: p.score for p in counted.parts} == {MATCHES: 0, TOTALS: 1, SHORT: 1}
    assert "clip each n-gram's count" in counted.reason
