"""Tests of chapter 4's explorer logic: the notebook cell marked ``# explorer-logic``
(``attention_at_temperature``, ``entropy_bits``, ``draw_temperature``) is executed
here after the chapter's setup cell, so the test checks the code the book runs."""
import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import solutions  # noqa: E402
from explorer_helpers import explorer_namespace  # noqa: E402


@pytest.fixture(scope="module")
def ns():
    return explorer_namespace("04_self_attention")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


SCORES = np.array([[2.0, 0.0, 2.0], [0.0, 3.0, 2.0], [1.0, 1.0, 2.0]])  # "I am good": Q Kᵀ


def test_temperature_sqrt_d_k_is_the_papers_scaled_attention(ns):
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(4, 16)), rng.normal(size=(5, 16)), rng.normal(size=(5, 3))
    _, want = solutions.scaled_dot_product_attention(q, k, v)
    got = ns["attention_at_temperature"](q @ k.T, math.sqrt(16))
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_rows_sum_to_one_at_every_temperature(ns):
    for tau in (0.05, 0.5, 2.0, 50.0):
        w = ns["attention_at_temperature"](SCORES, tau)
        assert w.shape == SCORES.shape
        np.testing.assert_allclose(w.sum(axis=-1), 1.0)
        assert (w >= 0).all()


def test_low_temperature_is_a_hard_lookup_and_high_is_uniform(ns):
    cold = ns["attention_at_temperature"](SCORES, 0.01)
    np.testing.assert_allclose(cold[1], [0.0, 1.0, 0.0], atol=1e-12)  # unique best key wins
    np.testing.assert_allclose(cold[0], [0.5, 0.0, 0.5], atol=1e-12)  # a tie stays a tie
    hot = ns["attention_at_temperature"](SCORES, 1e6)
    np.testing.assert_allclose(hot, 1 / 3, atol=1e-5)


def test_entropy_falls_as_the_temperature_falls(ns):
    entropies = [ns["entropy_bits"](ns["attention_at_temperature"](SCORES, t)).mean() for t in (100, 10, 2, 1, 0.1)]
    assert all(a > b for a, b in zip(entropies, entropies[1:]))
    assert ns["entropy_bits"](np.array([1.0, 0.0, 0.0])) == 0.0
    np.testing.assert_allclose(ns["entropy_bits"](np.full(4, 0.25)), 2.0)


@pytest.mark.parametrize("tau", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_temperature_raises_value_error(ns, tau):
    with pytest.raises(ValueError, match="temperature"):
        ns["attention_at_temperature"](SCORES, tau)


def test_draw_temperature_draws_the_weights_with_token_labels(ns):
    tokens = ["I", "am", "good"]
    ax = ns["draw_temperature"](SCORES, 2.0, tokens)
    np.testing.assert_allclose(ax.get_images()[0].get_array(), ns["attention_at_temperature"](SCORES, 2.0))
    assert [t.get_text() for t in ax.get_yticklabels()] == tokens
    assert ax.get_title().startswith("τ = 2.00")


def test_the_explorer_picture_marks_tau_on_the_entropy_path(ns):
    """Figure 4.6: the weights at τ beside the mean entropy over the slider's range, which
    rises from a third of a bit (the tie of "I") to log2 3, with τ marked on it."""
    fig = ns["draw_temperature_path"](SCORES, 2.0, ["I", "am", "good"])
    ax_map, ax_path = fig.axes[:2]  # (the colour bar comes last)
    np.testing.assert_allclose(ax_map.get_images()[0].get_array(), ns["attention_at_temperature"](SCORES, 2.0))
    curve, dot = ax_path.get_lines()[:2]
    taus, path = curve.get_data()
    assert taus[0] == pytest.approx(10 ** -1.3) and taus[-1] == pytest.approx(100.0)
    assert all(a < b for a, b in zip(path, path[1:]))  # warmer is flatter, all the way
    assert path[0] == pytest.approx(1 / 3, abs=0.01) and path[-1] == pytest.approx(math.log2(3), abs=0.01)
    here = ns["entropy_bits"](ns["attention_at_temperature"](SCORES, 2.0)).mean()
    assert list(dot.get_xdata()) == [2.0] and dot.get_ydata()[0] == pytest.approx(here)
