"""Chapter 6: padding, causal and decoder masks, and the masked softmax (True = may attend)."""
import pytest
import torch
import torch.nn.functional as F

from solutions import (
    causal_mask, check_attention_mask, decoder_mask, masked_softmax, padding_mask, zero_fully_masked_rows,
)


def test_padding_mask_values_and_shape():
    ids = torch.tensor([[5, 6, 0, 0], [7, 0, 8, 0]])
    mask = padding_mask(ids)
    assert mask.shape == (2, 1, 1, 4) and mask.dtype == torch.bool
    assert mask[:, 0, 0].tolist() == [[True, True, False, False], [True, False, True, False]]


def test_padding_mask_custom_pad_id():
    ids = torch.tensor([[0, 9, 9]])
    assert padding_mask(ids, pad_id=9)[0, 0, 0].tolist() == [True, False, False]


@pytest.mark.parametrize(
    "ids, error",
    [([[1, 2]], TypeError), (torch.ones(2, 3, 4, dtype=torch.long), ValueError), (torch.ones(2, 3), TypeError)],
)
def test_padding_mask_rejects_bad_ids(ids, error):
    with pytest.raises(error):
        padding_mask(ids)


def test_causal_mask_lower_triangle():
    mask = causal_mask(4)
    assert mask.shape == (1, 1, 4, 4) and mask.dtype == torch.bool
    for i in range(4):
        for j in range(4):
            assert bool(mask[0, 0, i, j]) == (j <= i)


@pytest.mark.parametrize("size", [0, -1, 2.5, True])
def test_causal_mask_rejects_bad_size(size):
    with pytest.raises(ValueError, match="positive int"):
        causal_mask(size)


def test_decoder_mask_is_padding_and_causal():
    tgt = torch.tensor([[1, 4, 5, 0], [1, 6, 0, 0]])
    mask = decoder_mask(tgt)
    assert mask.shape == (2, 1, 4, 4) and mask.dtype == torch.bool
    for b in range(2):
        for i in range(4):
            for j in range(4):
                assert bool(mask[b, 0, i, j]) == (j <= i and int(tgt[b, j]) != 0)


def test_masked_softmax_zero_on_masked_positions_and_renormalised():
    scores = torch.randn(2, 3, 5, dtype=torch.float64)
    mask = torch.tensor([True, False, True, True, False])
    weights = masked_softmax(scores, mask)
    assert torch.all(weights[..., ~mask] == 0)
    expected = torch.softmax(scores[..., mask], dim=-1)
    torch.testing.assert_close(weights[..., mask], expected, rtol=1e-12, atol=1e-12)


def test_masked_softmax_none_is_plain_softmax():
    scores = torch.randn(3, 4)
    torch.testing.assert_close(masked_softmax(scores, None), torch.softmax(scores, dim=-1))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_masked_softmax_fully_masked_row_is_zero_without_nan(dtype):
    scores = torch.randn(2, 3, 4).to(dtype).requires_grad_(True)
    mask = torch.ones(2, 1, 3, 4, dtype=torch.bool)[:, 0]
    mask[0, 1] = False  # every key of row 1 in batch 0 is masked
    weights = masked_softmax(scores, mask)
    assert not torch.isnan(weights).any()
    assert torch.all(weights[0, 1] == 0)
    torch.testing.assert_close(weights.float().sum(-1)[1], torch.ones(3), atol=1e-2, rtol=0)
    (weights * torch.randn(2, 3, 4).to(dtype)).sum().backward()
    assert not torch.isnan(scores.grad).any()
    assert torch.all(scores.grad[0, 1] == 0)


def test_masked_softmax_large_scores_do_not_leak_into_masked_positions():
    scores = torch.tensor([[1e4, -1e4, 3e38]])
    mask = torch.tensor([[True, True, False]])
    weights = masked_softmax(scores, mask)
    assert weights.tolist() == [[1.0, 0.0, 0.0]]


def test_masked_softmax_gradient_matches_softmax_over_kept_keys():
    scores = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(4, 6) > 0.3
    mask[:, 0] = True
    upstream = torch.randn(4, 6, dtype=torch.float64)
    (masked_softmax(scores, mask) * upstream).sum().backward()
    expected_grad = torch.zeros_like(scores)
    for i in range(4):
        s = scores.detach()[i, mask[i]].clone().requires_grad_(True)
        (torch.softmax(s, -1) * upstream[i, mask[i]]).sum().backward()
        expected_grad[i, mask[i]] = s.grad
    torch.testing.assert_close(scores.grad, expected_grad, rtol=1e-10, atol=1e-12)


def test_masked_softmax_rejects_non_boolean_mask():
    with pytest.raises(TypeError, match="boolean"):
        masked_softmax(torch.randn(2, 3), torch.ones(2, 3))


def test_masked_softmax_rejects_non_broadcastable_mask():
    with pytest.raises(ValueError, match="does not broadcast"):
        masked_softmax(torch.randn(2, 3), torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="does not broadcast"):
        masked_softmax(torch.randn(2, 3), torch.ones(5, 2, 3, dtype=torch.bool))  # would enlarge scores


def test_masked_softmax_rejects_integer_scores():
    with pytest.raises(TypeError, match="floating-point"):
        masked_softmax(torch.ones(2, 3, dtype=torch.long), None)


# -- the helpers of the fused paths: the mask check and the zeros of fully masked rows --------------
SCORES = (2, 4, 3, 5)  # (B, h, T_q, T_k)


@pytest.mark.parametrize("mask", [
    None,
    torch.ones(2, 1, 1, 5, dtype=torch.bool),  # padding mask
    torch.ones(1, 1, 3, 5, dtype=torch.bool),  # causal-like (T_q, T_k)
    torch.ones(2, 4, 3, 5, dtype=torch.bool),  # one mask per head
    torch.ones(1, 3, 5, dtype=torch.bool),  # 3-D with a leading 1
    torch.ones(3, 5, dtype=torch.bool),
])
def test_check_attention_mask_accepts_what_broadcasts_to_the_heads(mask):
    assert check_attention_mask(mask, SCORES) is None


@pytest.mark.parametrize("mask, error, message", [
    (torch.ones(2, 1, 1, 5), TypeError, "boolean"),  # a float mask would be added to the scores by SDPA
    ([[True] * 5], TypeError, "boolean"),
    (torch.ones(2, 1, 1, 6, dtype=torch.bool), ValueError, r"\(2, 1, 1, 6\) does not broadcast to .*\(2, 4, 3, 5\)"),
    (torch.ones(3, 1, 1, 5, dtype=torch.bool), ValueError, "does not broadcast"),  # the batch axis
    (torch.ones(2, 2, 4, 3, 5, dtype=torch.bool), ValueError, "does not broadcast"),  # one axis too many
    (torch.ones(2, 3, 5, dtype=torch.bool), ValueError, r"3-D mask \(2, 3, 5\) is ambiguous.*h = 4 heads"),
    (torch.ones(4, 3, 5, dtype=torch.bool), ValueError, "ambiguous"),  # B == h would broadcast, wrongly
])
def test_check_attention_mask_refuses_and_names_the_mistake(mask, error, message):
    with pytest.raises(error, match=message):
        check_attention_mask(mask, SCORES)


def test_zero_fully_masked_rows_zeroes_exactly_the_queries_without_a_key():
    output = torch.randn(2, 1, 3, 4, dtype=torch.float64, requires_grad=True)  # (B, h, T_q, d_v)
    mask = torch.tensor([[True, False, True], [False, False, False], [False, True, False]])[None, None]
    mask = mask.expand(2, 1, 3, 3).clone()
    mask[1] = True  # sentence 1: every query has keys
    fixed = zero_fully_masked_rows(output, mask)
    assert fixed[0, 0, 1].eq(0).all()
    torch.testing.assert_close(fixed[0, 0, [0, 2]], output[0, 0, [0, 2]], rtol=0, atol=0)
    torch.testing.assert_close(fixed[1], output[1], rtol=0, atol=0)
    fixed.sum().backward()  # no gradient flows into a zeroed row
    assert output.grad[0, 0, 1].eq(0).all() and output.grad[0, 0, 0].eq(1).all()
    assert zero_fully_masked_rows(output, None) is output


def test_zero_fully_masked_rows_makes_sdpa_agree_with_masked_softmax():
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 4, 3, dtype=torch.float64, generator=generator) for _ in range(3))
    mask = padding_mask(torch.tensor([[5, 6, 0, 0], [0, 0, 0, 0]]))  # (2, 1, 1, 4): sentence 1 has no key
    readable = masked_softmax(q @ k.transpose(-2, -1) / 3 ** 0.5, mask) @ v  # (B, h, T_q, d_v)
    fused = zero_fully_masked_rows(F.scaled_dot_product_attention(q, k, v, attn_mask=mask), mask)
    torch.testing.assert_close(fused, readable, rtol=1e-12, atol=1e-12)
    assert fused[1].eq(0).all()
