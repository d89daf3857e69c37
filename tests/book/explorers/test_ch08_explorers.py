"""Tests of chapter 8's explorer logic, which lives in the notebook itself.

The cell that starts with ``# explorer-logic`` in
``book/08_transformer/08_transformer.ipynb`` defines ``size_breakdown`` (the closed-form
parameter breakdown and memory of an encoder–decoder Transformer with tied embeddings)
and ``render_size_explorer`` (its picture). The test executes the notebook's setup cell
and that cell, then checks the results against models built on PyTorch's ``meta`` device
and counted by ``solutions.count_parameters``.
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
    return explorer_namespace("08_transformer")


def meta_model(d_model, num_heads, num_layers, d_ff, vocab_size):
    with torch.device("meta"):
        return solutions.Transformer(vocab_size, vocab_size, d_model=d_model, num_heads=num_heads,
                                     num_encoder_layers=num_layers, num_decoder_layers=num_layers, d_ff=d_ff,
                                     share_embeddings=True)


@pytest.mark.parametrize("config", [(512, 8, 6, 2048, 37000), (1024, 16, 6, 4096, 37000), (64, 2, 3, 96, 500),
                                    (48, 3, 1, 7, 11)])
def test_total_equals_the_count_of_a_real_model(explorer, config):
    d_model, num_heads, num_layers, d_ff, vocab = config
    state = explorer["size_breakdown"](d_model, num_heads, num_layers, d_ff, vocab_size=vocab)
    assert state["total"] == sum(state["parameters"].values())
    assert state["total"] == solutions.count_parameters(meta_model(*config))


def test_groups_match_the_model_parameters_by_name(explorer):
    state = explorer["size_breakdown"](64, 4, 2, 128, vocab_size=300)
    model = meta_model(64, 4, 2, 128, 300)
    by_kind = {"attn": 0, "feed_forward": 0, "norm": 0}
    for name, p in model.named_parameters():
        for key in by_kind:
            if key in name:
                by_kind[key] += p.numel()
    assert state["parameters"]["attention"] == by_kind["attn"]
    assert state["parameters"]["feed-forward"] == by_kind["feed_forward"]
    assert state["parameters"]["layer norms"] == by_kind["norm"]
    assert state["parameters"]["embeddings (tied)"] == 300 * 64 and state["parameters"]["output bias"] == 300


def test_the_paper_models(explorer):
    assert explorer["size_breakdown"](512, 8, 6, 2048)["total"] == solutions.paper_parameter_count("base")
    assert explorer["size_breakdown"](1024, 16, 6, 4096)["total"] == solutions.paper_parameter_count("big")


def test_heads_change_memory_not_parameters(explorer):
    four = explorer["size_breakdown"](512, 4, 6, 2048)
    sixteen = explorer["size_breakdown"](512, 16, 6, 2048)
    assert four["parameters"] == sixteen["parameters"] and four["total"] == sixteen["total"]
    assert sixteen["attention_mb"] == pytest.approx(4 * four["attention_mb"])


def test_memory_figures(explorer):
    state = explorer["size_breakdown"](512, 8, 6, 2048, seq_len=128)
    mb = 1e6
    assert state["weights_mb"] == pytest.approx(4 * state["total"] / mb)
    assert state["adam_mb"] == pytest.approx(4 * state["weights_mb"])
    assert state["attention_mb"] == pytest.approx(3 * 8 * 128 * 128 * 4 / mb)
    doubled = explorer["size_breakdown"](512, 8, 6, 2048, seq_len=256)
    assert doubled["attention_mb"] == pytest.approx(4 * state["attention_mb"])  # quadratic in T


def test_width_scales_layers_quadratically_and_the_embedding_linearly(explorer):
    small = explorer["size_breakdown"](256, 8, 6, 1024)["parameters"]
    large = explorer["size_breakdown"](512, 8, 6, 2048)["parameters"]
    assert large["embeddings (tied)"] == 2 * small["embeddings (tied)"]
    assert 3.9 < large["attention"] / small["attention"] < 4.0
    assert 3.9 < large["feed-forward"] / small["feed-forward"] < 4.0


@pytest.mark.parametrize("args", [(512, 3, 6, 2048), (0, 1, 6, 2048), (512, 8, 0, 2048), (512, 8, 6, 2.5),
                                  (True, 1, 6, 2048)])
def test_bad_configurations_raise(explorer, args):
    with pytest.raises(ValueError):
        explorer["size_breakdown"](*args)


def test_render_draws_one_bar_segment_per_group(explorer):
    state = explorer["size_breakdown"](512, 8, 6, 2048)
    fig = explorer["render_size_explorer"](state, title="base model")
    try:
        ax = fig.axes[0]
        widths = [patch.get_width() for patch in ax.patches]
        assert len(widths) == len(explorer["EXPLORER_GROUPS"])
        assert sum(widths) == pytest.approx(state["total"] / 1e6)
        assert "63.1M" in ax.get_title()
    finally:
        plt.close(fig)
