"""Tests of chapter 3's explorer logic, which lives in the notebook itself.

The cell that starts with ``# explorer-logic`` in
``book/03_positional_encoding/03_positional_encoding.ipynb`` defines
``pe_explorer_state`` (one column pair's waves and one position's similarity to all
others) and ``render_pe_explorer`` (its picture). The test executes the notebook's
setup cell and that cell, then checks the functions' results against the formula.
"""
import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from explorer_helpers import explorer_namespace  # noqa: E402


@pytest.fixture(scope="module")
def explorer():
    return explorer_namespace("03_positional_encoding")


def test_state_shapes(explorer):
    state = explorer["pe_explorer_state"](20, 4)
    length = explorer["EXPLORER_LENGTH"]
    for key in ("positions", "sin", "cos", "similarity"):
        assert state[key].shape == (length,), key
    assert state["position"] == 20 and state["pair"] == 4


@pytest.mark.parametrize("pair", [0, 5, 31])
def test_waves_follow_the_formula(explorer, pair):
    d_model = explorer["EXPLORER_D_MODEL"]
    state = explorer["pe_explorer_state"](0, pair)
    omega = 1 / 10000 ** (2 * pair / d_model)
    pos = np.arange(explorer["EXPLORER_LENGTH"])
    np.testing.assert_allclose(state["sin"], np.sin(pos * omega), atol=1e-12)
    np.testing.assert_allclose(state["cos"], np.cos(pos * omega), atol=1e-12)
    assert state["wavelength"] == pytest.approx(2 * math.pi / omega)


def test_wavelength_grows_with_the_pair(explorer):
    lengths = [explorer["pe_explorer_state"](0, i)["wavelength"] for i in range(explorer["EXPLORER_D_MODEL"] // 2)]
    assert lengths[0] == pytest.approx(2 * math.pi)
    assert all(a < b for a, b in zip(lengths, lengths[1:]))


@pytest.mark.parametrize("position", [0, 37, 99])
def test_similarity_is_one_at_the_position_and_at_most_one_elsewhere(explorer, position):
    sim = explorer["pe_explorer_state"](position, 3)["similarity"]
    assert sim[position] == pytest.approx(1.0)
    others = np.delete(sim, position)
    assert np.all(others < 1 - 1e-6) and np.all(others >= -1)


def test_similarity_slides_with_the_position(explorer):
    """The offset property: the profile around position 40 is the one around position 10, shifted."""
    at_10 = explorer["pe_explorer_state"](10, 0)["similarity"]
    at_40 = explorer["pe_explorer_state"](40, 0)["similarity"]
    np.testing.assert_allclose(at_40[30:70], at_10[0:40], atol=1e-12)
    assert not np.allclose(at_40, at_10)


@pytest.mark.parametrize("args", [(-1, 0), (100, 0), (0, 32), (0, -1), (2.0, 0), (True, 0), (0, 1.5)])
def test_bad_arguments_raise(explorer, args):
    with pytest.raises(ValueError):
        explorer["pe_explorer_state"](*args)


def test_render_draws_waves_and_similarity(explorer):
    state = explorer["pe_explorer_state"](20, 4)
    fig = explorer["render_pe_explorer"](state)
    try:
        titles = [ax.get_title() for ax in fig.axes]
        assert titles[0].startswith("pair 4: wavelength")
        assert titles[1] == "cosine similarity of PE(20) and PE(q)"
        labels = [line.get_label() for line in fig.axes[0].get_lines()]
        assert "column 8 (sin)" in labels and "column 9 (cos)" in labels
    finally:
        plt.close(fig)
