"""Tests of chapter 6's explorer logic, which lives in the notebook itself.

The cell that starts with ``# explorer-logic`` in ``book/06_masking/06_masking.ipynb``
defines ``mask_explorer_state`` (the mask and weights of the "build a mask" explorer)
and ``render_mask_explorer`` (its picture). The test executes the notebook's setup
cell and that cell, then checks the functions' results.
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import solutions  # noqa: E402
from explorer_helpers import explorer_namespace  # noqa: E402


@pytest.fixture(scope="module")
def explorer():
    return explorer_namespace("06_masking")


def test_state_shapes_and_tokens(explorer):
    state = explorer["mask_explorer_state"]([4, 6], causal=True)
    assert state["ids"].shape == (2, 6)
    assert state["mask"].shape == (2, 1, 6, 6) and state["mask"].dtype == torch.bool
    assert state["weights"].shape == (2, 6, 6)
    assert state["tokens"][0][4:] == ["<pad>", "<pad>"]
    assert "<pad>" not in state["tokens"][1]


@pytest.mark.parametrize("causal", [False, True])
def test_mask_is_padding_and_optionally_causal(explorer, causal):
    state = explorer["mask_explorer_state"]([2, 5], causal=causal)
    want = solutions.padding_mask(state["ids"]).expand(-1, 1, 6, 6)
    if causal:
        want = want & solutions.causal_mask(6)
    assert torch.equal(state["mask"], want)


@pytest.mark.parametrize("causal", [False, True])
def test_weights_are_a_masked_softmax(explorer, causal):
    state = explorer["mask_explorer_state"]([3, 6], causal=causal)
    mask, weights = state["mask"][:, 0], state["weights"]  # (B, T, T)
    assert torch.all(weights[~mask] == 0)
    # Right padding: every query sees token 0, so no row is empty and each sums to 1.
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 6))
    if causal:
        assert torch.all(weights.triu(1) == 0)
    else:
        future = torch.ones(6, 6, dtype=torch.bool).triu(1)
        assert torch.all(weights[1][future] > 0)  # the unpadded sentence sees the future


def test_shorter_sentence_moves_weight_onto_real_tokens(explorer):
    long = explorer["mask_explorer_state"]([6, 6], causal=False, seed=3)["weights"]
    short = explorer["mask_explorer_state"]([2, 6], causal=False, seed=3)["weights"]
    assert torch.all(short[0, :, :2] >= long[0, :, :2])  # renormalised over fewer keys
    torch.testing.assert_close(short[1], long[1])  # the other sentence is unaffected


def test_seed_fixes_the_scores(explorer):
    a = explorer["mask_explorer_state"]([3, 4], causal=True, seed=7)["weights"]
    b = explorer["mask_explorer_state"]([3, 4], causal=True, seed=7)["weights"]
    c = explorer["mask_explorer_state"]([3, 4], causal=True, seed=8)["weights"]
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize("lengths", [[0, 3], [3, 7], [3], [2.5, 3], [True, 3]])
def test_bad_lengths_raise(explorer, lengths):
    with pytest.raises(ValueError):
        explorer["mask_explorer_state"](lengths, causal=True)


def test_render_draws_mask_and_weights_per_sentence(explorer):
    state = explorer["mask_explorer_state"]([4, 6], causal=True)
    fig = explorer["render_mask_explorer"](state)
    try:
        titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
        assert titles == ["sentence 0: mask", "sentence 1: mask", "sentence 0: weights", "sentence 1: weights"]
        labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
        assert labels == state["tokens"][0]
    finally:
        plt.close(fig)
