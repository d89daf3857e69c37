"""Tests of ``solutions.figures.plots``: the plotting helpers draw what they say, on the Agg backend."""
import os
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from solutions.figures import plots as viz  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _random_weights(*shape):
    scores = np.random.default_rng(0).normal(size=shape)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_plot_attention_rows_are_queries_and_labels_are_tokens():
    w = _random_weights(3, 5)
    ax = viz.plot_attention(w, query_tokens=["a", "b", "c"], key_tokens=list("vwxyz"), title="t")
    image = ax.get_images()[0]
    np.testing.assert_allclose(image.get_array(), w)  # queries on rows, keys on columns
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    assert [t.get_text() for t in ax.get_xticklabels()] == list("vwxyz")
    assert ax.get_title() == "t"
    assert ax.figure is not None


def test_plot_attention_annotates_small_maps_only_by_default():
    small = viz.plot_attention(_random_weights(2, 3))
    assert len(small.texts) == 6
    assert small.texts[0].get_text() == f"{_random_weights(2, 3)[0, 0]:.2f}"
    big = viz.plot_attention(_random_weights(12, 12))
    assert len(big.texts) == 0
    forced = viz.plot_attention(_random_weights(12, 12), annotate=True)
    assert len(forced.texts) == 144


def test_plot_attention_accepts_torch_and_leading_singleton_axes():
    w = torch.softmax(torch.randn(1, 1, 4, 4, requires_grad=True), dim=-1)
    ax = viz.plot_attention(w)
    np.testing.assert_allclose(ax.get_images()[0].get_array(), w.detach().numpy()[0, 0], rtol=1e-6)


def test_plot_attention_draws_into_given_axes():
    fig, (left, right) = plt.subplots(1, 2)
    returned = viz.plot_attention(_random_weights(2, 2), ax=right)
    assert returned is right
    assert not left.get_images()


@pytest.mark.parametrize("bad", [np.zeros(4), np.zeros((2, 3, 4))])
def test_plot_attention_rejects_wrong_rank(bad):
    with pytest.raises(ValueError, match="2 axes"):
        viz.plot_attention(bad)


def test_plot_attention_rejects_mismatched_labels():
    with pytest.raises(ValueError, match="key_tokens"):
        viz.plot_attention(_random_weights(2, 3), key_tokens=["a", "b"])


def test_plot_heads_one_map_per_head_with_shared_scale():
    w = _random_weights(5, 3, 4)
    fig = viz.plot_heads(w, query_tokens=["x", "y", "z"], titles=[f"h{i}" for i in range(5)])
    maps = [ax for ax in fig.axes if ax.get_images()]
    assert len(maps) == 5
    for head, ax in enumerate(maps):
        np.testing.assert_allclose(ax.get_images()[0].get_array(), w[head])
        assert ax.get_title() == f"h{head}"
        assert ax.get_images()[0].get_clim() == maps[0].get_images()[0].get_clim()


def test_plot_head_steps_draws_each_step_with_its_numbers_and_the_merge_below():
    """Three Axes per head (input, weights, output), then the merged output in a row of its
    own under the output column, its token labels on its left, in the empty weights column
    of its row; about 7 inches wide at most (the book's column at full size, issue 39:
    Figure 5.1's numbers legible)."""
    x = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    w = _random_weights(3, 3)
    heads = [{"title": "h1", "input": x, "weights": w, "output": w @ x},
             {"title": "h2", "input": torch.tensor(x), "weights": w, "output": w @ x, "features": [2, 3]}]
    merged = np.hstack([w @ x, w @ x])
    fig = viz.plot_head_steps(heads, ["a", "b", "c"], merged=merged)
    assert len(fig.axes) == 3 * 2 + 1
    weights_ax, second_input = fig.axes[1], fig.axes[3]
    assert [t.get_text() for t in weights_ax.get_xticklabels()] == ["a", "b", "c"]  # keys on the columns
    assert [t.get_text() for t in second_input.get_xticklabels()] == ["2", "3"]  # the head's own features
    assert f"{w[0, 0]:.3f}" in [t.get_text() for t in weights_ax.texts]
    fig.canvas.draw()
    last_output, merged_ax = fig.axes[5].get_position(), fig.axes[6].get_position()
    assert merged_ax.y1 < last_output.y0  # below the last head
    assert abs(merged_ax.x0 - last_output.x0) < 0.01  # in the output column
    assert f"{merged[0, 0]:.3f}" in [t.get_text() for t in fig.axes[6].texts]
    assert [t.get_text() for t in fig.axes[6].get_yticklabels()] == ["a", "b", "c"]
    # its labels sit left of it, under the last head's weights: clear of every other Axes
    labels = [t.get_window_extent() for t in fig.axes[6].get_yticklabels()]
    assert all(box.x1 <= fig.axes[6].get_window_extent().x0 for box in labels)
    assert all(not box.overlaps(ax.get_window_extent()) for box in labels for ax in fig.axes[:6])
    assert fig.get_size_inches()[0] <= 7.1


def test_plot_head_steps_keeps_a_gap_between_neighbouring_numbers():
    """Figure 5.1's shapes (inputs of 4 and 2 features, 3 tokens): between two numbers of a
    row stands at least a text height of white (square cells as tall as a figure row left
    half of one, and scaled to the book's column "0.452 0.274" read "0.4520.274")."""
    x = np.array([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 1.0]])
    w = _random_weights(3, 3)
    heads = [{"title": "one head", "input": x, "weights": w, "output": w @ x},
             {"title": "head 1", "input": x[:, :2], "weights": w, "output": w @ x[:, :2]},
             {"title": "head 2", "input": x[:, 2:], "weights": w, "output": w @ x[:, 2:], "features": [2, 3]}]
    fig = viz.plot_head_steps(heads, ["cats", "chase", "mice"], merged=np.hstack([w @ x[:, :2], w @ x[:, 2:]]))
    _assert_numbers_apart(fig)
    assert min(t.get_fontsize() for ax in fig.axes for t in ax.texts) >= 11  # legible (issue 39)


def _assert_numbers_apart(fig):
    """Between two numbers of a row of any Axes of ``fig`` stands at least a text height of white."""
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)
    for ax in fig.axes:
        boxes = [t.get_window_extent(renderer) for t in ax.texts]
        for a in boxes:
            right = [b.x0 - a.x1 for b in boxes if b.x0 > a.x1 and abs(b.y0 - a.y0) < 1]
            assert not right or min(right) >= a.height, (ax.get_title(), min(right) / a.height)


def test_plot_head_steps_rejects_a_matrix_of_other_rows():
    with pytest.raises(ValueError, match="h1: weights must have 3 rows"):
        viz.plot_head_steps([{"title": "h1", "input": np.eye(3), "weights": np.eye(2), "output": np.eye(3)}],
                            ["a", "b", "c"])
    with pytest.raises(ValueError, match="at least one row"):
        viz.plot_head_steps([], ["a"])


def test_plot_query_steps_draws_every_step_of_one_query_with_its_numbers():
    """Figure 4.2's "I am good": scores (2, 0, 2), ÷ 2, weights (0.422, 0.155, 0.422), the
    output (1.267, 1, 0.888); a key of the wrong width or a missing label is refused."""
    keys = np.array([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0], [1.0, 1.0, 1.0, 0.0]])
    values = np.array([[1.0, 2.0, 0.0], [0.0, 1.0, 3.0], [2.0, 0.0, 1.0]])
    fig = viz.plot_query_steps(torch.tensor([1.0, 0.0, 1.0, 0.0]), keys, values, ["I", "am", "good"], "I")
    assert len(fig.axes) == 8
    texts = [[t.get_text() for t in ax.texts] for ax in fig.axes]
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["I", "am", "good"]  # a row per key
    assert texts[1] == ["2", "0", "2"] and texts[2] == ["1", "0", "1"]
    assert texts[3] == ["0.422", "0.155", "0.422"]
    assert texts[5][:2] == ["0.422", "0.845"]  # weight 0.422 times v_1 = (1, 2, 0)
    assert texts[6] == ["1", "0", "1", "0"]  # the query
    assert texts[7][0] == "1.267" and texts[7][2] == "0.888"  # its output, the weighted rows summed
    _assert_numbers_apart(fig)
    # legible at the book's column (issue 39): 11-point numbers, about 7.7 inches at most
    assert min(t.get_fontsize() for ax in fig.axes for t in ax.texts) >= 11
    assert fig.get_size_inches()[0] <= 7.8
    with pytest.raises(ValueError, match="expected query"):
        viz.plot_query_steps(np.ones(3), keys, values, ["I", "am", "good"])
    with pytest.raises(ValueError, match="tokens has 2 labels"):
        viz.plot_query_steps(np.ones(4), keys, values, ["I", "am"])



def test_plot_projections_draws_x_times_each_matrix_with_its_product():
    """Figure 4.8's "I am good": one X times W^Q, W^K, W^V, the products written in the cells
    and the chosen token's row outlined in X and in each product; a matrix of the wrong
    height, a missing label or a token out of range is refused."""
    x = np.array([[0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0]])
    w_q = np.array([[0, 1, 0, 1], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]], dtype=float)
    w_v = np.array([[-1, 1, 2], [1, 0, 0], [1, 0, 1], [0, 2, 0]], dtype=float)
    fig = viz.plot_projections(torch.tensor(x), [("Q", w_q), ("V", w_v)], ["I", "am", "good"], token=1)
    matrices = [ax for ax in fig.axes if ax.get_images()]
    assert len(matrices) == 2 * 3 and len(fig.axes) == 2 * 5  # X, W, product; "@" and "="
    texts = [[t.get_text() for t in ax.texts] for ax in matrices]
    assert texts[2] == ["1", "0", "1", "0", "0", "2", "0", "1", "1", "1", "0", "0"]  # X W^Q
    assert texts[5] == ["1", "2", "0", "0", "1", "3", "2", "0", "1"]  # X W^V, -1 included
    assert "-1" in texts[4]
    assert [t.get_text() for t in matrices[0].get_yticklabels()] == ["I", "am", "good"]
    outlined = [ax for ax in matrices if ax.patches]
    assert outlined == [matrices[0], matrices[2], matrices[3], matrices[5]]  # X and the products
    assert outlined[1].patches[0].get_y() == 0.5  # the row of "am"
    _assert_numbers_apart(fig)
    with pytest.raises(ValueError, match="W\\^K must have shape"):
        viz.plot_projections(x, [("K", np.ones((3, 4)))], ["I", "am", "good"])
    with pytest.raises(ValueError, match="tokens has 2 labels"):
        viz.plot_projections(x, [("Q", w_q)], ["I", "am"])
    with pytest.raises(ValueError, match="token must be in 0..2"):
        viz.plot_projections(x, [("Q", w_q)], ["I", "am", "good"], token=3)
    with pytest.raises(ValueError, match="at least one"):
        viz.plot_projections(x, [], ["I", "am", "good"])

def test_plot_heads_wraps_rows_to_fit_the_column():
    """Four maps of 10 tokens (3 inches each) go two a row, 7 inches wide where one row was
    13 (Figure 5.6, shown at half size); four small maps still share one row."""
    wide = viz.plot_heads(_random_weights(4, 10, 10))
    maps = [ax for ax in wide.axes if ax.get_images()]
    assert len({ax.get_position().y0 for ax in maps}) == 2 and wide.get_size_inches()[0] <= 7.5
    small = viz.plot_heads(_random_weights(4, 3, 3))
    assert len({ax.get_position().y0 for ax in small.axes if ax.get_images()}) == 1


def test_plot_heads_accepts_batch_of_one_and_rejects_bad_titles():
    fig = viz.plot_heads(torch.softmax(torch.randn(1, 2, 3, 3), dim=-1))
    assert [ax.get_title() for ax in fig.axes if ax.get_images()] == ["head 0", "head 1"]
    with pytest.raises(ValueError, match="titles"):
        viz.plot_heads(_random_weights(2, 3, 3), titles=["only one"])
    with pytest.raises(ValueError, match="3 axes"):
        viz.plot_heads(_random_weights(3, 3))


def test_plot_mask_fills_true_cells_and_has_a_legend():
    causal = torch.tril(torch.ones(4, 4, dtype=torch.bool))[None, None]  # (1, 1, 4, 4)
    ax = viz.plot_mask(causal, query_tokens=list("abcd"), key_tokens=list("abcd"), title="causal")
    drawn = ax.get_images()[0].get_array()
    np.testing.assert_array_equal(drawn, causal[0, 0].numpy().astype(float))
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("True" in t and "attend" in t for t in legend)
    assert ax.get_title() == "causal"


def test_plot_mask_draws_a_padding_mask_as_one_row():
    pad = torch.tensor([[True, True, False]])[:, None, None, :]  # (1, 1, 1, 3)
    ax = viz.plot_mask(pad)
    np.testing.assert_array_equal(ax.get_images()[0].get_array(), [[1.0, 1.0, 0.0]])


def test_plot_mask_rejects_non_boolean():
    with pytest.raises(TypeError, match="boolean"):
        viz.plot_mask(np.ones((2, 2)))


def test_show_explorer_static_displays_the_figure(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    monkeypatch.setenv(viz.STATIC_ENV_VAR, "1")

    def render_static():
        fig, ax = plt.subplots()
        ax.plot([0, 1])
        return fig

    def build_widget():
        raise AssertionError("the widget must not be built in the static book")

    assert viz.show_explorer(build_widget, render_static) is None
    assert len(shown) == 1 and isinstance(shown[0], matplotlib.figure.Figure)
    assert not plt.fignum_exists(shown[0].number)  # closed: the inline backend won't repeat it


def test_show_explorer_live_displays_the_widget(monkeypatch):
    import ipywidgets

    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    monkeypatch.delenv(viz.STATIC_ENV_VAR, raising=False)
    slider = ipywidgets.IntSlider(value=3)

    def render_static():
        raise AssertionError("the static figure must not be drawn live")

    viz.show_explorer(lambda: slider, render_static)
    assert shown == [slider]
    with pytest.raises(TypeError, match="widget"):
        viz.show_explorer(lambda: "not a widget", render_static)
    with pytest.raises(TypeError, match="callables"):
        viz.show_explorer(None, render_static)


def test_plot_attention_writes_weights_as_large_as_their_cells_allow():
    """A map drawn into a large panel (an explorer's, Figure 4.6) writes its weights at
    11 points, legible at the book's column, where a fixed 8 points read as about 8 px
    (issue 39); a new figure's 8 x 8 map still keeps a text height between numbers."""
    w = _random_weights(3, 3)
    fig, (left, _) = plt.subplots(1, 2, figsize=(9, 3.3))
    viz.plot_attention(w, ["I", "am", "good"], ["I", "am", "good"], ax=left)
    assert {t.get_fontsize() for t in left.texts} == {11.0}
    crowded = viz.plot_attention(_random_weights(8, 8))
    sizes = {t.get_fontsize() for t in crowded.texts}
    assert len(sizes) == 1 and 8.0 <= sizes.pop() <= 11.0
    _assert_numbers_apart(crowded.figure)
    plt.close("all")


def test_plot_head_blocks_draws_every_matrix_cell_by_cell_and_fits_the_column():
    """Figure 5.2: the Lucas sizes (T = 3, d_model = 9, h = 3) as blocks of cells."""
    from matplotlib.patches import Rectangle

    fig = viz.plot_head_blocks(seq_len=3, d_model=9, num_heads=3)
    ax = fig.axes[0]
    cells = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_fill()]
    # X, Q, K, V (3 x 9 each); per head Q_i, K_i, V_i, head_i (3 x 3) and weights (3 x 3);
    # concat and output (3 x 9); W^O (9 x 9)
    assert len(cells) == 4 * 27 + 3 * 5 * 9 + 2 * 27 + 81
    texts = [t.get_text() for t in ax.texts]
    for name in ("X", "$Q = X W^Q$", "$K_1$", "head$_2$", "concat", "$W^O$", "output"):
        assert any(t.startswith(name) for t in texts), name
    assert "(9 × 9)" in " ".join(texts)
    assert fig.get_size_inches()[0] <= 7.0  # the book's column at full size
    # a head's shade: the same within its block of Q's columns, different across heads
    q_top_row = sorted((p for p in cells if p.get_facecolor()[2] > p.get_facecolor()[0] + 0.05
                        and abs(p.get_y() - cells[0].get_y()) < 1e-9), key=lambda p: p.get_x())[:9]
    shades = [tuple(round(v, 3) for v in p.get_facecolor()) for p in q_top_row]
    assert shades[0] == shades[1] == shades[2] != shades[3] == shades[5] != shades[6]


def test_plot_head_blocks_rejects_sizes_that_do_not_split_or_fit():
    with pytest.raises(ValueError, match="not divisible"):
        viz.plot_head_blocks(3, 10, 3)
    with pytest.raises(ValueError, match="positive int"):
        viz.plot_head_blocks(0, 9, 3)
    with pytest.raises(ValueError, match="inches wide"):
        viz.plot_head_blocks(3, 64, 8)


def test_importing_the_helpers_does_not_import_matplotlib():
    # A chapter's setup cell imports the helpers in every grading sandbox, which never
    # draws: matplotlib is imported when a helper first draws (plots._pyplot).
    code = ("import sys, solutions.figures.plots as p; "
            "assert not [m for m in sys.modules if m.split('.')[0] == 'matplotlib'], 'imported'; "
            "import numpy as np; p.plot_mask(np.tril(np.ones((3, 3), bool))); "
            "assert 'matplotlib.pyplot' in sys.modules")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "MPLBACKEND": "Agg"})
    assert done.returncode == 0, done.stderr
