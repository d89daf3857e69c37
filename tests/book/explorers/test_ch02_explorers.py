"""Tests of chapter 2's explorer logic, which lives in the notebook itself.

The cell that starts with ``# explorer-logic`` in
``book/02_tokens_and_embeddings/02_tokens_and_embeddings.ipynb`` defines
``bpe_explorer_state`` (a sentence's BPE segmentation after the first k merges, and
the token count for every k) and ``render_bpe_explorer`` (its picture). The test
executes the notebook's setup cell and that cell, then checks the functions' results
on merges learned from a small corpus here.
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

import solutions  # noqa: E402
from explorer_helpers import explorer_namespace  # noqa: E402

CORPUS = ["low " * 5 + "lower " * 2 + "newest " * 6 + "widest " * 3, "the lowest newer wider"]
SENTENCE = "lowest newer wider"


@pytest.fixture(scope="module")
def explorer():
    return explorer_namespace("02_tokens_and_embeddings")


@pytest.fixture(scope="module")
def merges():
    learned = solutions.learn_bpe(CORPUS, 30)
    assert 12 < len(learned) < 30  # the corpus runs out of pairs first
    return learned


def test_zero_merges_spells_every_word_out(explorer, merges):
    state = explorer["bpe_explorer_state"](merges, 0, sentence=SENTENCE)
    assert state["pieces"] == [list(w) + ["</w>"] for w in SENTENCE.split()]
    assert state["n_tokens"] == sum(len(w) + 1 for w in SENTENCE.split())
    assert state["last"] == []


@pytest.mark.parametrize("k", [1, 5, 12, None])
def test_pieces_are_the_reference_segmentation(explorer, merges, k):
    k = len(merges) if k is None else k  # None: every merge (learning stopped early, at 21)
    state = explorer["bpe_explorer_state"](merges, k, sentence=SENTENCE)
    want = [solutions.bpe_tokenize(w, merges[:k]) for w in SENTENCE.split()]
    assert state["pieces"] == want
    assert state["n_tokens"] == sum(map(len, want))
    assert ["".join(p) for p in state["pieces"]] == [w + "</w>" for w in SENTENCE.split()]  # nothing lost
    assert state["last"] == list(merges[max(0, k - 3):k])


def test_curve_counts_tokens_and_never_rises(explorer, merges):
    state = explorer["bpe_explorer_state"](merges, 7, sentence=SENTENCE, step=4)
    ks = [k for k, _ in state["curve"]]
    assert ks[0] == 0 and ks[-1] == len(merges) and 7 in ks and ks == sorted(set(ks))
    for k, n in state["curve"]:
        assert n == sum(len(solutions.bpe_tokenize(w, merges[:k])) for w in SENTENCE.split())
    counts = [n for _, n in state["curve"]]
    assert all(a >= b for a, b in zip(counts, counts[1:]))  # a merge never adds a token
    assert counts[-1] < counts[0]


@pytest.mark.parametrize("k", [-1, None, 2.0, True, "3"])
def test_bad_merge_counts_raise(explorer, merges, k):
    k = len(merges) + 1 if k is None else k  # None: one more merge than was learned
    with pytest.raises(ValueError):
        explorer["bpe_explorer_state"](merges, k, sentence=SENTENCE)


def test_empty_sentence_raises(explorer, merges):
    with pytest.raises(ValueError):
        explorer["bpe_explorer_state"](merges, 3, sentence="   ")


def test_render_draws_one_box_per_token_and_the_curve(explorer, merges):
    state = explorer["bpe_explorer_state"](merges, 12, sentence=SENTENCE)
    fig = explorer["render_bpe_explorer"](state)
    try:
        top, bottom = fig.axes
        texts = [t.get_text() for t in top.texts]
        assert texts == [p.replace("</w>", "_") for pieces in state["pieces"] for p in pieces]
        assert f"{state['n_tokens']} tokens" in top.get_title()
        xs, ys = bottom.lines[1].get_data()
        assert list(xs) == [12] and list(ys) == [state["n_tokens"]]
    finally:
        plt.close(fig)
