"""Parity: our DecoderLayer against torch.nn.TransformerDecoderLayer with copied weights.

torch's ``multihead_attn`` is our ``cross_attn``; its boolean masks mean True =
masked out, ours True = may attend.
"""
import pytest
import torch
from torch import nn

from solutions import DecoderLayer, decoder_mask, padding_mask

from copy_weights import copy_attention, copy_feed_forward_and_norms, layer_pair, layer_state_dict_keys

D_MODEL, HEADS, D_FF = 16, 4, 32
TOL = {torch.float32: 1e-5, torch.float64: 1e-12}


def decoder_pair(norm_first, dtype):
    ours, ref = layer_pair(DecoderLayer, nn.TransformerDecoderLayer, (D_MODEL, HEADS, D_FF), norm_first, dtype)
    copy_attention(ours.self_attn, ref.self_attn)
    copy_attention(ours.cross_attn, ref.multihead_attn)
    copy_feed_forward_and_norms(ours, ref, ["norm1", "norm2", "norm3"])
    return ours, ref


def batch(dtype):
    """T_src = 7 ≠ T_tgt = 5, padding in both."""
    src = torch.tensor([[5, 6, 7, 8, 9, 4, 4], [5, 6, 7, 0, 0, 0, 0], [5, 0, 0, 0, 0, 0, 0]])
    tgt = torch.tensor([[1, 6, 7, 8, 9], [1, 6, 0, 0, 0], [1, 6, 7, 8, 0]])
    x = torch.randn(3, 5, D_MODEL, dtype=dtype)
    memory = torch.randn(3, 7, D_MODEL, dtype=dtype)
    return src, tgt, x, memory


def torch_masks(src, tgt):
    causal = torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool).triu(1)  # True = future, not allowed
    return dict(tgt_mask=causal, tgt_key_padding_mask=tgt == 0, memory_key_padding_mask=src == 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("fused", [False, True])
def test_decoder_layer_matches_torch(norm_first, fused, dtype):
    ours, ref = decoder_pair(norm_first, dtype)
    ours.self_attn.need_weights = ours.cross_attn.need_weights = not fused
    src, tgt, x, memory = batch(dtype)
    out = ours(x, memory, src_mask=padding_mask(src), tgt_mask=decoder_mask(tgt))
    expected = ref(x, memory, **torch_masks(src, tgt))
    tol = TOL[dtype]
    torch.testing.assert_close(out, expected, rtol=tol, atol=tol)
    # no masks at all
    torch.testing.assert_close(ours(x, memory), ref(x, memory), rtol=tol, atol=tol)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_gradients_match_torch(norm_first):
    ours, ref = decoder_pair(norm_first, torch.float64)
    src, tgt, x, memory = batch(torch.float64)
    memory.requires_grad_(True)
    upstream = torch.randn(3, 5, D_MODEL, dtype=torch.float64)
    out = ours(x, memory, src_mask=padding_mask(src), tgt_mask=decoder_mask(tgt))
    grad_ours = torch.autograd.grad((out * upstream).sum(), [memory, ours.cross_attn.w_k.weight])
    expected = ref(x, memory, **torch_masks(src, tgt))
    grad_ref = torch.autograd.grad((expected * upstream).sum(), [memory, ref.multihead_attn.in_proj_weight])
    torch.testing.assert_close(grad_ours[0], grad_ref[0], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(grad_ours[1], grad_ref[1][D_MODEL : 2 * D_MODEL], rtol=1e-10, atol=1e-12)


def test_decoder_state_dict_keys_are_exactly_the_contract():
    keys = list(DecoderLayer(D_MODEL, HEADS, D_FF).state_dict())
    assert keys == layer_state_dict_keys(["self_attn", "cross_attn"], ["norm1", "norm2", "norm3"])
