"""Parity: our MultiHeadAttention against torch.nn.MultiheadAttention with copied weights.

PyTorch's boolean masks mean True = masked OUT; ours mean True = may attend, so
every mask is inverted on the way to torch. Rows with every key masked are left
out (torch returns NaN there; we return zeros, tested in the unit tests).
"""
import pytest
import torch
from torch import nn

from solutions import MultiHeadAttention, causal_mask, padding_mask

from copy_weights import copy_attention

D_MODEL, HEADS = 16, 4


def copied_pair(dtype):
    ours = MultiHeadAttention(D_MODEL, HEADS).to(dtype)
    ref = nn.MultiheadAttention(D_MODEL, HEADS, batch_first=True).to(dtype)
    copy_attention(ours, ref)
    return ours, ref


TOL = {torch.float32: 1e-5, torch.float64: 1e-12}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("case", ["self", "self_padding", "self_causal_padding", "cross", "cross_padding"])
def test_multihead_matches_torch(case, need_weights, dtype):
    ours, ref = copied_pair(dtype)
    ours.need_weights = need_weights
    B, T_q, T_k = 3, 5, (7 if case.startswith("cross") else 5)
    x = torch.randn(B, T_q, D_MODEL, dtype=dtype)
    memory = torch.randn(B, T_k, D_MODEL, dtype=dtype) if case.startswith("cross") else x
    lengths = torch.tensor([T_k, T_k - 2, 3])
    ids = torch.where(torch.arange(T_k)[None, :] < lengths[:, None], 5, 0)  # (B, T_k), 0 = pad

    mask, key_padding_mask, attn_mask = None, None, None
    if "padding" in case:
        mask = padding_mask(ids)  # ours: (B, 1, 1, T_k), True = may attend
        key_padding_mask = ids == 0  # torch: (B, T_k), True = ignore
    if "causal" in case:
        mask = mask & causal_mask(T_q)  # (B, 1, T, T)
        attn_mask = ~causal_mask(T_q)[0, 0]  # torch: (T, T), True = not allowed

    out = ours(x, memory, memory, mask)
    ref_out, ref_weights = ref(
        x, memory, memory, key_padding_mask=key_padding_mask, attn_mask=attn_mask, average_attn_weights=False
    )
    tol = TOL[dtype]
    torch.testing.assert_close(out, ref_out, rtol=tol, atol=tol)
    if need_weights:
        torch.testing.assert_close(ours.attn_weights, ref_weights, rtol=tol, atol=tol)  # (B, h, T_q, T_k)
        _, averaged = ref(x, memory, memory, key_padding_mask=key_padding_mask, attn_mask=attn_mask)
        torch.testing.assert_close(ours.attn_weights.mean(1), averaged, rtol=tol, atol=tol)  # (B, T_q, T_k)


@pytest.mark.parametrize("need_weights", [True, False])
def test_multihead_gradients_match_torch(need_weights):
    dtype = torch.float64
    ours, ref = copied_pair(dtype)
    ours.need_weights = need_weights
    x = torch.randn(2, 4, D_MODEL, dtype=dtype)
    memory = torch.randn(2, 6, D_MODEL, dtype=dtype)
    ids = torch.tensor([[5, 5, 5, 5, 0, 0], [5, 5, 5, 5, 5, 5]])
    upstream = torch.randn(2, 4, D_MODEL, dtype=dtype)
    (ours(x, memory, memory, padding_mask(ids)) * upstream).sum().backward()
    (ref(x, memory, memory, key_padding_mask=ids == 0, need_weights=False)[0] * upstream).sum().backward()
    grad_q = ref.in_proj_weight.grad[:D_MODEL]
    grad_v = ref.in_proj_weight.grad[2 * D_MODEL :]
    torch.testing.assert_close(ours.w_q.weight.grad, grad_q, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(ours.w_v.weight.grad, grad_v, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(ours.w_o.weight.grad, ref.out_proj.weight.grad, rtol=1e-10, atol=1e-12)
