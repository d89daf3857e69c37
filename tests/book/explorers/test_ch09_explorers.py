"""Tests of chapter 9's explorer logic, which lives in the notebook itself.

The cell that starts with ``# explorer-logic`` in ``book/09_training/09_training.ipynb``
defines ``schedule_explorer_state`` (the learning rate of every step of a run under the
warm-up schedule, and its peak) and ``render_schedule_explorer`` (its picture). The test
executes the notebook's setup cell and that cell, then checks the functions' results
against the paper's formula written out here.
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
    return explorer_namespace("09_training")


def paper_rate(step, d_model, warmup, factor):
    """Equation 3 of the paper, written independently of the notebook."""
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def test_state_shapes_and_steps_from_one(explorer):
    state = explorer["schedule_explorer_state"](400, 128, 0.5, total_steps=1000)
    assert state["steps"].shape == state["lr"].shape == (1000,)
    assert state["steps"][0] == 1 and state["steps"][-1] == 1000
    assert np.all(state["lr"] > 0)


@pytest.mark.parametrize("warmup, d_model, factor", [(400, 128, 0.5), (100, 512, 1.0), (1500, 64, 2.0)])
def test_rates_follow_equation_3(explorer, warmup, d_model, factor):
    state = explorer["schedule_explorer_state"](warmup, d_model, factor, total_steps=2000)
    want = np.array([paper_rate(s, d_model, warmup, factor) for s in range(1, 2001)])
    np.testing.assert_allclose(state["lr"], want, rtol=1e-12)


@pytest.mark.parametrize("warmup", [10, 400, 1999])
def test_peak_is_at_the_end_of_the_warm_up(explorer, warmup):
    state = explorer["schedule_explorer_state"](warmup, 256, 1.0, total_steps=2000)
    assert state["peak_step"] == warmup
    assert math.isclose(state["peak_lr"], (256 * warmup) ** -0.5 * 1.0, rel_tol=1e-12)


def test_warm_up_longer_than_the_run_peaks_at_the_last_step(explorer):
    state = explorer["schedule_explorer_state"](5000, 128, 1.0, total_steps=300)
    assert state["peak_step"] == 300
    assert np.all(np.diff(state["lr"]) > 0)  # still rising: linear warm-up


def test_factor_and_width_scale_the_curve(explorer):
    base = explorer["schedule_explorer_state"](400, 128, 1.0)
    doubled = explorer["schedule_explorer_state"](400, 128, 2.0)
    wider = explorer["schedule_explorer_state"](400, 512, 1.0)
    np.testing.assert_allclose(doubled["lr"], 2 * base["lr"], rtol=1e-12)
    np.testing.assert_allclose(wider["lr"], base["lr"] / 2, rtol=1e-12)  # (512 / 128) ** -0.5 = 1 / 2


def test_render_draws_the_curve_and_marks_the_peak(explorer):
    state = explorer["schedule_explorer_state"](400, 128, 0.5)
    fig = explorer["render_schedule_explorer"](state)
    ax = fig.axes[0]
    curve, marker = ax.lines[0], ax.lines[1]
    np.testing.assert_allclose(curve.get_ydata(), state["lr"])
    assert list(marker.get_xdata()) == [400] and math.isclose(marker.get_ydata()[0], state["peak_lr"])
    assert "step 400" in ax.texts[0].get_text()
    plt.close(fig)
