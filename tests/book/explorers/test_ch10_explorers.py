"""Tests of chapter 10's explorer logic, which lives in the notebook itself.

The cell that starts with ``# explorer-logic`` in ``book/10_inference/10_inference.ipynb``
defines ``decoding_steps`` (greedy decoding of one sentence with, per step, the top-k
candidates and the cross-attention row) and ``render_decoding_step`` (its picture). The
test executes the notebook's setup cell and that cell, then checks the functions on a
small seeded model (untrained: the logic does not depend on what the model learnt).
"""
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import solutions  # noqa: E402
from solutions.app.tokenizer import WordTokenizer  # noqa: E402
from explorer_helpers import explorer_namespace  # noqa: E402

SOURCES = ["the old dog sees a red cat", "two children like the car near the big house"]
TARGETS = ["lo brudralo sugano una ribrona putasa brogisat",
           "sesor kigoni la gegola tegrula kobril lo krupluno narusant"]


@pytest.fixture(scope="module")
def explorer():
    return explorer_namespace("10_inference")


@pytest.fixture(scope="module")
def setting():
    src_tok, tgt_tok = WordTokenizer.train(SOURCES), WordTokenizer.train(TARGETS)
    torch.manual_seed(0)
    model = solutions.Transformer(len(src_tok), len(tgt_tok), d_model=16, num_heads=2, num_encoder_layers=1,
                                  num_decoder_layers=2, d_ff=32, dropout=0.1, max_len=32)
    model.set_fused(True)
    return model, src_tok, tgt_tok


def test_steps_follow_greedy_decoding(explorer, setting):
    model, src_tok, tgt_tok = setting
    state = explorer["decoding_steps"](model, src_tok, tgt_tok, SOURCES[1], k=4, max_len=7)
    src = torch.tensor([src_tok.encode(SOURCES[1])])
    ys = solutions.greedy_decode(model.eval(), src, solutions.padding_mask(src), 7)[0, 1:]
    itos = {i: w for w, i in tgt_tok.vocab.items()}
    assert state["words"] == [itos[int(i)] for i in ys]
    assert state["source_words"] == SOURCES[1].split()
    n, vocab = len(state["words"]), len(tgt_tok)
    assert 1 <= n <= 7
    assert state["probs"].shape == (n, vocab) and state["cross"].shape == (n, len(SOURCES[1].split()))
    np.testing.assert_allclose(state["probs"].sum(axis=1), 1, atol=1e-5)
    np.testing.assert_allclose(state["cross"].sum(axis=1), 1, atol=1e-5)
    # the best candidate of every step is the token greedy decoding produced there
    assert [c[0][0] for c in state["candidates"]] == state["words"]


def test_candidates_are_the_top_k_of_each_step(explorer, setting):
    model, src_tok, tgt_tok = setting
    state = explorer["decoding_steps"](model, src_tok, tgt_tok, SOURCES[0], k=3, max_len=5)
    itos = {i: w for w, i in tgt_tok.vocab.items()}
    for row, candidates in zip(state["probs"], state["candidates"]):
        assert len(candidates) == 3
        probs = [p for _, p in candidates]
        assert probs == sorted(probs, reverse=True)
        top = np.argsort(-row)[:3]
        assert [w for w, _ in candidates] == [itos[int(i)] for i in top]
        np.testing.assert_allclose(probs, row[top], rtol=1e-6)


def test_cross_attention_is_the_chosen_layer_mean_of_heads(explorer, setting):
    model, src_tok, tgt_tok = setting
    first = explorer["decoding_steps"](model, src_tok, tgt_tok, SOURCES[0], max_len=5, layer=0)
    last = explorer["decoding_steps"](model, src_tok, tgt_tok, SOURCES[0], max_len=5, layer=-1)
    assert first["words"] == last["words"]
    assert not np.allclose(first["cross"], last["cross"])


def test_attention_path_is_restored(explorer, setting):
    model, src_tok, tgt_tok = setting
    layers = [m for m in model.modules() if isinstance(m, solutions.MultiHeadAttention)]
    before = [m.need_weights for m in layers]
    explorer["decoding_steps"](model, src_tok, tgt_tok, SOURCES[0], max_len=3)
    assert [m.need_weights for m in layers] == before


def test_bad_arguments(explorer, setting):
    model, src_tok, tgt_tok = setting
    with pytest.raises(ValueError):
        explorer["decoding_steps"](model, src_tok, tgt_tok, "   ")
    with pytest.raises(ValueError):
        explorer["decoding_steps"](model, src_tok, tgt_tok, SOURCES[0], k=0)


def test_render_draws_both_panels(explorer, setting):
    model, src_tok, tgt_tok = setting
    state = explorer["decoding_steps"](model, src_tok, tgt_tok, SOURCES[1], k=5, max_len=4)
    fig = explorer["render_decoding_step"](state, len(state["words"]) - 1)
    left, right = fig.axes
    assert len(left.patches) == 5 and len(right.patches) == len(SOURCES[1].split())
    assert [t.get_text() for t in right.get_xticklabels()] == SOURCES[1].split()
    plt.close(fig)
    with pytest.raises(ValueError):
        explorer["render_decoding_step"](state, len(state["words"]))
