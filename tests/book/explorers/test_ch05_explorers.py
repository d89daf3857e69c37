"""Tests of chapter 5's explorer logic: the notebook cell marked ``# explorer-logic``
(``relation_scores``, ``head_view``, ``render_head``) is executed and its functions called."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from solutions.figures.plots import plot_attention  # noqa: E402
from explorer_helpers import explorer_namespace  # noqa: E402


@pytest.fixture(scope="module")
def logic():
    return explorer_namespace("05_multi_head_attention")


def _heads(batch=3, length=6):
    """Weights (B, 3, T, T): head 0 previous-token, head 1 first-token, head 2 uniform over the past."""
    w = np.zeros((batch, 3, length, length))
    for t in range(length):
        w[:, 0, t, max(t - 1, 0)] = 1.0
        w[:, 1, t, 0] = 1.0
        w[:, 2, t, : t + 1] = 1.0 / (t + 1)
    return w


def test_relation_scores_identify_previous_and_first_token_heads(logic):
    scores = logic["relation_scores"](_heads())
    assert len(scores) == 3
    assert scores[0] == {"previous": 1.0, "first": 0.0}
    assert scores[1] == {"previous": 0.0, "first": 1.0}
    # uniform over the past: queries t = 2..5 give 1/(t+1) to each key
    expected = np.mean([1.0 / (t + 1) for t in range(2, 6)])
    assert scores[2]["previous"] == pytest.approx(expected)
    assert scores[2]["first"] == pytest.approx(expected)


def test_relation_scores_accept_torch_tensors_and_reject_bad_shapes(logic):
    torch = pytest.importorskip("torch")
    scores = logic["relation_scores"](torch.from_numpy(_heads()))
    assert scores[0]["previous"] == 1.0
    with pytest.raises(ValueError, match=r"\(B, h, T, T\)"):
        logic["relation_scores"](np.zeros((2, 5, 5)))
    with pytest.raises(ValueError):
        logic["relation_scores"](np.zeros((1, 2, 4, 5)))


def test_head_view_picks_one_map_with_labels_and_title(logic):
    weights = _heads()
    weights[1, 1] *= 0.5  # make example 1 distinguishable
    sequences = np.array([[0, 1, 2, 3, 4, 5], [15, 14, 13, 12, 11, 10], [0] * 6])
    w, labels, title = logic["head_view"](weights, sequences, example=1, head=1)
    np.testing.assert_array_equal(w, weights[1, 1])
    assert labels == ["0:p", "1:o", "2:n", "3:m", "4:l", "5:k"]
    assert title.startswith("head 1:") and "on the first" in title


@pytest.mark.parametrize("example, head", [(3, 0), (-1, 0), (0, 3)])
def test_head_view_rejects_out_of_range_choices(logic, example, head):
    with pytest.raises(ValueError):
        logic["head_view"](_heads(), np.zeros((3, 6), dtype=int), example=example, head=head)


def test_render_head_draws_the_chosen_map(logic):
    fig, ax = plt.subplots()
    try:
        out = logic["render_head"](_heads(), np.zeros((3, 6), dtype=int), example=0, head=0, ax=ax)
        assert out is ax
        assert ax.get_title().startswith("head 0: 100% on the previous token")
        np.testing.assert_array_equal(ax.images[0].get_array(), _heads()[0, 0])
        assert [t.get_text() for t in ax.get_xticklabels()] == [f"{i}:a" for i in range(6)]
    finally:
        plt.close(fig)
