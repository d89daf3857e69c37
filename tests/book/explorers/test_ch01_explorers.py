"""Tests of chapter 1's explorer logic, which lives in the notebook itself.

The cell that starts with ``# explorer-logic`` in
``book/01_rnn_limitations/01_rnn_limitations.ipynb`` defines ``gradient_explorer_state``
(a tanh RNN with ``W_hh = rho * Q``, its states and its gradient norms) and
``render_gradient_explorer`` (its picture). The test executes the notebook's setup cell
and that cell, then checks the functions' results against the reference.
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import solutions  # noqa: E402
from explorer_helpers import explorer_namespace  # noqa: E402


@pytest.fixture(scope="module")
def explorer():
    return explorer_namespace("01_rnn_limitations")


def test_state_shapes(explorer):
    state = explorer["gradient_explorer_state"](1.0, 30, 0.5)
    d_h = explorer["EXPLORER_D_H"]
    assert state["norms"].shape == (30,) and state["distance"].shape == (30,)
    assert state["states"].shape == (30, d_h) and state["pre_activations"].shape == (30, d_h)
    assert list(state["distance"]) == list(range(29, -1, -1))
    assert state["norms"][-1] == 1.0


def test_states_and_norms_are_the_reference(explorer):
    state = explorer["gradient_explorer_state"](1.1, 12, 0.7, seed=3)
    H, Z = state["states"], state["pre_activations"]
    assert np.allclose(np.tanh(Z), H)  # h_t = tanh(z_t)
    rng = np.random.default_rng(3)  # the same draws as the explorer: Q first, then the inputs
    d_h = explorer["EXPLORER_D_H"]
    Q, _ = np.linalg.qr(rng.normal(size=(d_h, d_h)))
    x = rng.normal(size=(12, d_h)) * 0.7
    want_H = solutions.rnn_forward(x, np.zeros(d_h), np.eye(d_h), 1.1 * Q, np.zeros(d_h))
    assert np.allclose(H, want_H)
    assert np.allclose(state["norms"], solutions.hidden_state_jacobian_norms(want_H, 1.1 * Q))
    assert state["mean_slope"] == pytest.approx(np.mean(1 - want_H ** 2))


def test_zero_inputs_and_orthogonal_weights_keep_every_norm_at_one(explorer):
    state = explorer["gradient_explorer_state"](1.0, 50, 0.0)
    assert np.allclose(state["norms"], 1.0)
    assert state["saturated"] == 0.0 and state["mean_slope"] == 1.0


def test_spectral_radius_orders_the_far_norm(explorer):
    far = [explorer["gradient_explorer_state"](rho, 40, 0.1)["norms"][0] for rho in (0.8, 1.0, 1.2)]
    assert far[0] < 1e-3 < far[1] < 1 < far[2]


def test_larger_inputs_saturate_and_shrink_the_gradient(explorer):
    quiet = explorer["gradient_explorer_state"](1.2, 40, 0.1)
    loud = explorer["gradient_explorer_state"](1.2, 40, 2.0)
    assert loud["saturated"] > quiet["saturated"] and loud["mean_slope"] < quiet["mean_slope"]
    assert loud["norms"][0] < 1e-3 < 1 < quiet["norms"][0]


@pytest.mark.parametrize("args", [(1.0, 1, 0.5), (1.0, 201, 0.5), (1.0, 4.0, 0.5), (1.0, True, 0.5),
                                  (-0.1, 10, 0.5), (3.5, 10, 0.5), (1.0, 10, -1.0), (1.0, 10, 6.0)])
def test_bad_arguments_raise(explorer, args):
    with pytest.raises(ValueError):
        explorer["gradient_explorer_state"](*args)


def test_render_draws_both_panels(explorer):
    fig = explorer["render_gradient_explorer"](explorer["gradient_explorer_state"](1.0, 40, 0.5))
    try:
        left, right = fig.axes
        assert left.get_yscale() == "log" and len(left.lines[0].get_xdata()) == 40
        assert "mean slope" in right.get_title()
    finally:
        plt.close(fig)
