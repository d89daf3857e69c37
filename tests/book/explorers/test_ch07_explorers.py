"""Tests of chapter 7's explorer logic, which lives in the notebook itself.

The cell that starts with ``# explorer-logic`` in
``book/07_add_and_norm/07_add_and_norm.ipynb`` defines ``gradient_profile`` (the gradient
norm reaching each block of a stack of feed-forward blocks, with or without residual
connections, with post-, pre- or no LayerNorm) and ``render_gradient_profile`` (its
picture). The test executes the notebook's setup cell and that cell, then checks the
functions' results against an independent computation.
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import solutions  # noqa: E402
from explorer_helpers import explorer_namespace  # noqa: E402


@pytest.fixture(scope="module")
def explorer():
    return explorer_namespace("07_add_and_norm")


def _by_hand(depth, residual, norm, d_model=8, seed=0):
    """The same stack written out with plain torch layers: the gradient of block 0's first weight."""
    torch.manual_seed(seed)
    ffns = [solutions.PositionwiseFeedForward(d_model, 4 * d_model) for _ in range(depth)]
    norms = [torch.nn.LayerNorm(d_model) for _ in range(depth)]
    h = torch.randn(4, 8, d_model)
    for ffn, ln in zip(ffns, norms):
        if norm == "post":
            h = ln(h + ffn(h)) if residual else ln(ffn(h))
        elif norm == "pre":
            h = h + ffn(ln(h)) if residual else ffn(ln(h))
        else:
            h = h + ffn(h) if residual else ffn(h)
    target = torch.randn(h.shape, generator=torch.Generator().manual_seed(seed + 1))
    (h * target).sum().backward()
    return [f.linear1.weight.grad.norm().item() for f in ffns]


def test_profile_has_one_positive_norm_per_block(explorer):
    state = explorer["gradient_profile"](5, True, "post")
    assert state["depth"] == 5 and state["residual"] is True and state["norm"] == "post"
    assert len(state["grad_norms"]) == 5
    assert all(np.isfinite(g) and g > 0 for g in state["grad_norms"])


@pytest.mark.parametrize("residual", [True, False])
@pytest.mark.parametrize("norm", ["post", "pre", "none"])
def test_profile_matches_the_stack_written_out(explorer, residual, norm):
    got = explorer["gradient_profile"](4, residual, norm, d_model=8, seed=2)["grad_norms"]
    want = _by_hand(4, residual, norm, d_model=8, seed=2)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_settings_change_the_profile(explorer):
    runs = {(r, n): explorer["gradient_profile"](6, r, n)["grad_norms"]
            for r in (True, False) for n in ("post", "pre", "none")}
    values = [tuple(np.round(v, 6)) for v in runs.values()]
    assert len(set(values)) == len(values)  # every control matters


def test_residuals_keep_the_bottom_gradient_alive(explorer):
    deep_plain = explorer["gradient_profile"](12, False, "none")["grad_norms"]
    deep_residual = explorer["gradient_profile"](12, True, "none")["grad_norms"]
    assert deep_plain[0] < 1e-3 * deep_plain[-1]  # vanishes towards the bottom
    assert 0.25 < deep_residual[0] / deep_residual[-1] < 4  # stays level


def test_seed_fixes_the_profile(explorer):
    a = explorer["gradient_profile"](3, True, "pre", seed=7)["grad_norms"]
    b = explorer["gradient_profile"](3, True, "pre", seed=7)["grad_norms"]
    c = explorer["gradient_profile"](3, True, "pre", seed=8)["grad_norms"]
    assert a == b and a != c


@pytest.mark.parametrize("args", [(0, True, "post"), (65, True, "post"), (2.0, True, "post"),
                                  (True, True, "post"), (4, True, "middle"), (4, "yes", "pre")])
def test_bad_settings_raise(explorer, args):
    with pytest.raises(ValueError):
        explorer["gradient_profile"](*args)


def test_render_draws_one_point_per_block(explorer):
    state = explorer["gradient_profile"](7, False, "pre")
    fig = explorer["render_gradient_profile"](state)
    try:
        ax = fig.axes[0]
        assert ax.get_title() == "depth 7, no residuals, norm: pre"
        assert ax.get_yscale() == "log"
        xs, ys = ax.lines[0].get_data()
        assert list(xs) == list(range(1, 8))
        np.testing.assert_allclose(ys, state["grad_norms"])
    finally:
        plt.close(fig)
