"""Parity: our EncoderLayer against torch.nn.TransformerEncoderLayer with copied weights.

The reference runs in training mode with dropout 0: that keeps torch off its
inference fast path (nested tensors that zero padded positions), so every
position is compared.
"""
import pytest
import torch
from torch import nn

from solutions import EncoderLayer, padding_mask
from solutions.fused import use_fused_attention

from copy_weights import copy_attention, copy_feed_forward_and_norms, layer_pair, layer_state_dict_keys

D_MODEL, HEADS, D_FF = 16, 4, 32


def encoder_pair(norm_first, dtype):
    ours, ref = layer_pair(EncoderLayer, nn.TransformerEncoderLayer, (D_MODEL, HEADS, D_FF), norm_first, dtype)
    copy_attention(ours.self_attn, ref.self_attn)
    copy_feed_forward_and_norms(ours, ref, ["norm1", "norm2"])
    ref.train()  # dropout is 0; train() only avoids the inference fast path
    return ours, ref


TOL = {torch.float32: 1e-5, torch.float64: 1e-12}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("fused", [False, True])
def test_encoder_layer_matches_torch(norm_first, fused, dtype):
    ours, ref = encoder_pair(norm_first, dtype)
    if fused:  # packed q/k/v projections on the fast path
        use_fused_attention(ours)
    assert ours.self_attn.need_weights is not fused
    src = torch.tensor([[5, 6, 7, 8, 9, 4], [5, 6, 7, 0, 0, 0], [5, 6, 0, 0, 0, 0]])
    x = torch.randn(3, 6, D_MODEL, dtype=dtype)
    out = ours(x, padding_mask(src))
    expected = ref(x, src_key_padding_mask=src == 0)
    tol = TOL[dtype]
    torch.testing.assert_close(out, expected, rtol=tol, atol=tol)
    torch.testing.assert_close(ours(x), ref(x), rtol=tol, atol=tol)  # no mask


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_gradients_match_torch(norm_first):
    ours, ref = encoder_pair(norm_first, torch.float64)
    src = torch.tensor([[5, 6, 7, 0], [5, 6, 7, 8]])
    x = torch.randn(2, 4, D_MODEL, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(2, 4, D_MODEL, dtype=torch.float64)
    grad_ours = torch.autograd.grad((ours(x, padding_mask(src)) * upstream).sum(), [x, ours.feed_forward.linear1.weight])
    grad_ref = torch.autograd.grad((ref(x, src_key_padding_mask=src == 0) * upstream).sum(), [x, ref.linear1.weight])
    for a, b in zip(grad_ours, grad_ref):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_encoder_state_dict_keys_are_exactly_the_contract():
    keys = list(EncoderLayer(D_MODEL, HEADS, D_FF).state_dict())
    assert keys == layer_state_dict_keys(["self_attn"], ["norm1", "norm2"])
