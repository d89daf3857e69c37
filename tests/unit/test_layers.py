"""Chapters 7-8: layer_norm, the feed-forward network, Add & Norm, encoder and decoder layers."""
import numpy as np
import pytest
import torch
from torch import nn

from solutions import (
    DecoderLayer,
    EncoderLayer,
    MultiHeadAttention,
    PositionwiseFeedForward,
    ResidualSublayer,
    layer_norm,
    padding_mask,
)


def test_layer_norm_matches_torch():
    x = np.random.randn(2, 3, 6)
    gamma, beta = np.random.randn(6), np.random.randn(6)
    ref = nn.LayerNorm(6).double()
    with torch.no_grad():
        ref.weight.copy_(torch.tensor(gamma))
        ref.bias.copy_(torch.tensor(beta))
    expected = ref(torch.tensor(x)).detach().numpy()
    np.testing.assert_allclose(layer_norm(x, gamma, beta), expected, rtol=1e-10, atol=1e-12)


def test_layer_norm_uses_biased_variance_and_eps():
    x = np.array([[1.0, 2.0, 3.0, 6.0]])
    out = layer_norm(x, np.ones(4), np.zeros(4), eps=0.5)
    mean, var = 3.0, ((1 - 3) ** 2 + (2 - 3) ** 2 + 0 + (6 - 3) ** 2) / 4  # 3.5: divided by d, not d - 1
    np.testing.assert_allclose(out, (x - mean) / np.sqrt(var + 0.5), rtol=1e-12)


def test_layer_norm_rows_have_mean_zero_variance_one():
    out = layer_norm(np.random.randn(5, 16) * 7 + 3, np.ones(16), np.zeros(16))
    np.testing.assert_allclose(out.mean(-1), 0, atol=1e-12)
    np.testing.assert_allclose(out.var(-1), 1, atol=1e-4)


def test_layer_norm_rejects_wrong_gamma():
    with pytest.raises(ValueError, match="gamma and beta"):
        layer_norm(np.zeros((2, 4)), np.ones(3), np.zeros(4))


def test_feed_forward_is_relu_mlp_per_position():
    ffn = PositionwiseFeedForward(8, 32).double()
    assert ffn.linear1.weight.shape == (32, 8) and ffn.linear2.weight.shape == (8, 32)
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    W1, b1, W2, b2 = ffn.linear1.weight, ffn.linear1.bias, ffn.linear2.weight, ffn.linear2.bias
    expected = torch.clamp(x @ W1.T + b1, min=0) @ W2.T + b2  # max(0, x W1 + b1) W2 + b2
    torch.testing.assert_close(ffn(x), expected)
    # position-wise: each position on its own gives the same result
    torch.testing.assert_close(ffn(x[:, 2:3]), expected[:, 2:3])


def test_feed_forward_dropout_inside():
    ffn = PositionwiseFeedForward(8, 32, dropout=0.5)
    x = torch.randn(2, 5, 8)
    assert not torch.allclose(ffn(x), ffn(x))
    ffn.eval()
    torch.testing.assert_close(ffn(x), ffn(x))


@pytest.mark.parametrize("norm_first", [False, True])
def test_residual_sublayer_formula(norm_first):
    block = ResidualSublayer(8, dropout=0.0, norm_first=norm_first)
    with torch.no_grad():
        block.norm.weight.normal_()
        block.norm.bias.normal_()
    linear = nn.Linear(8, 8)
    x = torch.randn(2, 3, 8)
    if norm_first:
        expected = x + linear(block.norm(x))
    else:
        expected = block.norm(x + linear(x))
    torch.testing.assert_close(block(x, linear), expected)
    assert isinstance(block.norm, nn.LayerNorm) and block.norm.eps == 1e-5


def test_residual_sublayer_dropout_on_sublayer_output_only():
    block = ResidualSublayer(8, dropout=0.999, norm_first=True)
    x = torch.randn(2, 3, 8)
    out = block(x, lambda h: torch.full_like(h, 5.0))  # almost every sublayer output is dropped
    assert (out == x).float().mean() > 0.9


@pytest.mark.parametrize("layer_cls", [EncoderLayer, DecoderLayer])
def test_layer_attributes(layer_cls):
    layer = layer_cls(16, 4, 32, dropout=0.1, norm_first=True)
    assert isinstance(layer.self_attn, MultiHeadAttention)
    assert isinstance(layer.feed_forward, PositionwiseFeedForward)
    norms = ["norm1", "norm2"] + (["norm3"] if layer_cls is DecoderLayer else [])
    for name in norms:
        assert isinstance(getattr(layer, name), nn.LayerNorm) and getattr(layer, name).eps == 1e-5
    if layer_cls is DecoderLayer:
        assert isinstance(layer.cross_attn, MultiHeadAttention)
        assert layer.cross_attn is not layer.self_attn
    assert layer.norm_first is True and layer.self_attn.dropout.p == 0.1


def test_state_dict_loads_strictly_into_a_fresh_layer():
    source, target = DecoderLayer(16, 4, 32), DecoderLayer(16, 4, 32)
    target.load_state_dict(source.state_dict(), strict=True)
    x, memory = torch.randn(2, 3, 16), torch.randn(2, 4, 16)
    source.eval(), target.eval()
    torch.testing.assert_close(target(x, memory), source(x, memory))


def test_encoder_padding_positions_do_not_influence_others():
    layer = EncoderLayer(16, 4, 32).eval()
    src = torch.tensor([[5, 6, 7, 0, 0]])
    x = torch.randn(1, 5, 16)
    changed = x.clone()
    changed[:, 3:] = torch.randn(1, 2, 16)  # change only padded positions
    mask = padding_mask(src)
    torch.testing.assert_close(layer(x, mask)[:, :3], layer(changed, mask)[:, :3])


def test_decoder_output_depends_on_memory_only_at_unmasked_keys():
    layer = DecoderLayer(16, 4, 32).eval()
    src = torch.tensor([[5, 6, 0, 0]])
    x, memory = torch.randn(1, 3, 16), torch.randn(1, 4, 16)
    changed = memory.clone()
    changed[:, 2:] = torch.randn(1, 2, 16)
    out = layer(x, memory, src_mask=padding_mask(src))
    torch.testing.assert_close(out, layer(x, changed, src_mask=padding_mask(src)))
    assert not torch.allclose(out, layer(x, changed))
