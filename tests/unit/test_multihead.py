"""Chapter 5: splitting heads and multi-head attention (our own behaviour; parity vs torch in tests/parity)."""
import math

import pytest
import torch

from solutions import MultiHeadAttention, causal_mask, merge_heads, padding_mask, split_heads
from solutions.fused import use_fused_attention


def test_split_heads_shape_and_layout():
    x = torch.arange(2 * 3 * 8, dtype=torch.float32).reshape(2, 3, 8)
    heads = split_heads(x, 4)
    assert heads.shape == (2, 4, 3, 2)
    # head h of position t holds features h*d_k .. (h+1)*d_k - 1 of x[:, t]
    for h in range(4):
        torch.testing.assert_close(heads[:, h], x[:, :, 2 * h : 2 * h + 2])


def test_merge_heads_inverts_split_heads_also_for_non_contiguous_input():
    x = torch.randn(2, 5, 12)
    torch.testing.assert_close(merge_heads(split_heads(x, 3)), x, rtol=0, atol=0)
    y = torch.randn(2, 12, 5).transpose(1, 2)  # non-contiguous (2, 5, 12)
    torch.testing.assert_close(merge_heads(split_heads(y, 4)), y, rtol=0, atol=0)


def test_split_heads_errors():
    with pytest.raises(ValueError, match="not divisible"):
        split_heads(torch.randn(1, 2, 10), 3)
    with pytest.raises(ValueError, match=r"\(B, T, d_model\)"):
        split_heads(torch.randn(2, 10), 2)
    with pytest.raises(ValueError, match=r"\(B, h, T, d_k\)"):
        merge_heads(torch.randn(2, 3, 4))


def test_module_attributes():
    mha = MultiHeadAttention(16, 4, dropout=0.2)
    assert (mha.num_heads, mha.d_k, mha.dropout.p, mha.need_weights) == (4, 4, 0.2, True)
    for name in ("w_q", "w_k", "w_v", "w_o"):
        layer = getattr(mha, name)
        assert isinstance(layer, torch.nn.Linear) and layer.weight.shape == (16, 16) and layer.bias is not None
    assert sorted(k for k, _ in mha.named_parameters()) == sorted(
        f"w_{p}.{t}" for p in "qkvo" for t in ("weight", "bias")
    )
    with pytest.raises(ValueError, match="not divisible"):
        MultiHeadAttention(10, 3)


def explicit_multihead(mha, query, key, value, mask):
    """Per-head loop written from the paper's equations, no split_heads."""
    d_model, h = query.size(-1), mha.num_heads
    d_k = d_model // h
    q_all, k_all, v_all = mha.w_q(query), mha.w_k(key), mha.w_v(value)
    heads, weights = [], []
    for i in range(h):
        cols = slice(i * d_k, (i + 1) * d_k)
        scores = q_all[..., cols] @ k_all[..., cols].transpose(-2, -1) / math.sqrt(d_k)
        if mask is not None:
            scores = scores.masked_fill(~mask[:, 0], float("-inf"))
        w = torch.softmax(scores, dim=-1)
        heads.append(w @ v_all[..., cols])
        weights.append(w)
    return mha.w_o(torch.cat(heads, dim=-1)), torch.stack(weights, dim=1)


@pytest.mark.parametrize("cross", [False, True])
def test_matches_per_head_loop(cross):
    mha = MultiHeadAttention(12, 3).double()
    x = torch.randn(2, 4, 12, dtype=torch.float64)
    memory = torch.randn(2, 6, 12, dtype=torch.float64) if cross else x
    ids = torch.tensor([[3, 4, 5, 6, 0, 0], [3, 0, 0, 0, 0, 0]])[:, : memory.size(1)]
    mask = padding_mask(ids)
    out = mha(x, memory, memory, mask)
    expected, expected_weights = explicit_multihead(mha, x, memory, memory, mask)
    assert out.shape == (2, 4, 12) and mha.attn_weights.shape == (2, 3, 4, memory.size(1))
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(mha.attn_weights, expected_weights, rtol=1e-12, atol=1e-12)
    assert not mha.attn_weights.requires_grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_readable_and_fast_paths_agree_including_fully_masked_rows(dtype):
    torch.manual_seed(1)
    mha = MultiHeadAttention(16, 4).to(dtype)
    x = torch.randn(3, 5, 16, dtype=dtype, requires_grad=True)
    memory = torch.randn(3, 7, 16, dtype=dtype)
    src = torch.tensor([[4, 5, 6, 0, 0, 0, 0], [0] * 7, [4, 4, 4, 4, 4, 4, 4]])  # batch 1: every key masked
    for query, kv, mask in [(x, memory, padding_mask(src)), (x, x, causal_mask(5)), (x, memory, None)]:
        mha.need_weights = True
        slow = mha(query, kv, kv, mask)
        slow_grad = torch.autograd.grad(slow.sum(), x)[0]
        mha.need_weights = False
        fast = mha(query, kv, kv, mask)
        fast_grad = torch.autograd.grad(fast.sum(), x)[0]
        assert mha.attn_weights is None
        tol = 1e-6 if dtype == torch.float32 else 1e-12
        torch.testing.assert_close(fast, slow, rtol=tol, atol=tol)
        torch.testing.assert_close(fast_grad, slow_grad, rtol=tol, atol=tol)
        assert not torch.isnan(fast).any() and not torch.isnan(fast_grad).any()


def test_fully_masked_query_row_outputs_the_output_bias():
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(1, 3, 8)
    mask = torch.zeros(1, 1, 1, 3, dtype=torch.bool)
    out = mha(x, x, x, mask)
    torch.testing.assert_close(out, mha.w_o.bias.expand(1, 3, 8))
    assert torch.all(mha.attn_weights == 0)


def test_causal_mask_blocks_the_future():
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(1, 5, 8)
    out = mha(x, x, x, causal_mask(5))
    changed = x.clone()
    changed[:, 3:] = torch.randn(1, 2, 8)  # change positions 3 and 4 only
    out_changed = mha(changed, changed, changed, causal_mask(5))
    torch.testing.assert_close(out[:, :3], out_changed[:, :3])
    assert not torch.allclose(out[:, 3:], out_changed[:, 3:])
    assert torch.all(mha.attn_weights.triu(1) == 0)


def test_dropout_on_weights_only_in_training():
    mha = MultiHeadAttention(8, 2, dropout=0.5)
    x = torch.randn(2, 4, 8)
    mha.eval()
    torch.testing.assert_close(mha(x, x, x), mha(x, x, x))
    mha.train()
    assert not torch.allclose(mha(x, x, x), mha(x, x, x))
    mha.need_weights = False
    assert not torch.allclose(mha(x, x, x), mha(x, x, x))


@pytest.mark.parametrize(
    "mask, error, message",
    [
        (torch.ones(2, 1, 1, 5), TypeError, "boolean"),
        (torch.ones(2, 1, 1, 6, dtype=torch.bool), ValueError, "does not broadcast"),
        (torch.ones(3, 1, 1, 5, dtype=torch.bool), ValueError, "does not broadcast"),
        (torch.ones(2, 2, 1, 4, 5, dtype=torch.bool), ValueError, "does not broadcast"),
    ],
)
def test_bad_masks_raise(mask, error, message):
    mha = MultiHeadAttention(8, 2)
    x, memory = torch.randn(2, 4, 8), torch.randn(2, 5, 8)
    for need_weights in (True, False):
        mha.need_weights = need_weights
        with pytest.raises(error, match=message):
            mha(x, memory, memory, mask)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_paths_agree_on_cuda_including_fully_masked_rows(dtype):
    """Fused CUDA kernels must also give 0 for a query with no key (in float16 some average the values)."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(64, 4).to("cuda", dtype)
    x = torch.randn(3, 9, 64, device="cuda", dtype=dtype)
    src = torch.tensor([[4] * 5 + [0] * 4, [0] * 9, [4] * 9], device="cuda")
    mask = padding_mask(src)
    slow = mha(x, x, x, mask)
    mha.need_weights = False
    fast = mha(x, x, x, mask)
    assert not torch.isnan(fast).any()
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}[dtype]
    torch.testing.assert_close(fast, slow, rtol=tol, atol=tol)
    fused = use_fused_attention(mha)  # the class the trainer runs, holding the same parameters
    torch.testing.assert_close(fused(x, x, x, mask), slow, rtol=tol, atol=tol)


@pytest.mark.parametrize("fused", [False, True])
def test_a_3d_mask_per_sentence_is_refused_even_when_batch_equals_heads(fused):
    # (B, T_q, T_k) with B == h would silently mask head i with sentence i's mask
    from solutions.fused import FusedMultiHeadAttention

    torch.manual_seed(0)
    mha = (FusedMultiHeadAttention if fused else MultiHeadAttention)(8, 2).eval()
    mha.need_weights = not fused
    x = torch.randn(2, 3, 8)
    per_sentence = torch.ones(2, 3, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"3-D mask \(2, 3, 3\) is ambiguous.*mask\[:, None\]"):
        mha(x, x, x, per_sentence)
    assert mha(x, x, x, per_sentence[:, None]).shape == (2, 3, 8)  # with the head axis: fine
    assert mha(x, x, x, per_sentence[:1]).shape == (2, 3, 8)  # (1, T_q, T_k) broadcasts unambiguously
