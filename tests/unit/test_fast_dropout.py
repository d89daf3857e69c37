"""The fast path's dropout (``solutions.fused``): 16-bit random numbers instead of ``bernoulli_``.

``FastDropout`` must be dropout: each element dropped with probability ``p`` (rounded to
a multiple of 2⁻¹⁶), the kept ones scaled so the expectation is ``x``, the gradient through
the same mask, reproducible by seed; ``nn.Dropout`` wherever its fast mask does not apply.
A fused build holds it in place of every ``nn.Dropout`` with the same ``state_dict``, and
the fused attention's own dropout on the CPU equals the readable path's.
"""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from solutions import MultiHeadAttention, padding_mask
from solutions.configuration import TransformerConfig
from solutions.fused import FastDropout, FusedMultiHeadAttention, dropout_keep_mask, use_fast_dropout


def dropped_fraction(mask):
    return (mask == 0).double().mean().item()


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_keep_mask_drops_p_of_every_lane_and_keeps_the_expectation(p):
    torch.manual_seed(0)
    mask = dropout_keep_mask((512, 1024), p)  # 2**19 elements
    effective = round(p * 2 ** 16) / 2 ** 16
    assert abs(effective - p) <= 2 ** -17
    kept = mask[mask != 0]
    assert torch.all(kept == 1 / (1 - effective)), "kept elements are scaled by 1 / (1 - p')"
    # Each of the four 16-bit draws of a 64-bit word drops its share: all 64 bits are random
    # (int64's random_() without the full range leaves the top bit 0, and that lane would never drop).
    sigma = (p * (1 - p) / (mask.numel() / 4)) ** 0.5
    for lane in range(4):
        assert dropped_fraction(mask.view(-1, 4)[:, lane]) == pytest.approx(effective, abs=5 * sigma)
    assert mask.double().mean().item() == pytest.approx(1.0, abs=5 * sigma / (1 - p))


def test_keep_mask_is_reproducible_by_seed_and_generator_and_new_on_every_call():
    torch.manual_seed(3)
    first, second = dropout_keep_mask((64, 33), 0.1), dropout_keep_mask((64, 33), 0.1)
    torch.manual_seed(3)
    assert torch.equal(dropout_keep_mask((64, 33), 0.1), first)  # an odd size: the last word is cut
    assert not torch.equal(first, second)
    masks = [dropout_keep_mask((7, 5), 0.2, torch.float64, torch.Generator().manual_seed(9)) for _ in range(2)]
    assert torch.equal(*masks) and masks[0].dtype == torch.float64 and masks[0].shape == (7, 5)


def test_keep_mask_rejects_what_is_not_a_probability_or_a_float_dtype():
    with pytest.raises(ValueError, match=r"p must be in \[0, 1\)"):
        dropout_keep_mask((4,), 1.0)
    with pytest.raises(ValueError, match=r"p must be in \[0, 1\)"):
        dropout_keep_mask((4,), -0.1)
    with pytest.raises(TypeError, match="floating-point"):
        dropout_keep_mask((4,), 0.1, torch.int64)


@pytest.mark.parametrize("inplace", [False, True])
def test_fast_dropout_drops_scales_and_back_propagates_through_the_same_mask(inplace):
    torch.manual_seed(0)
    x = torch.ones(256, 256, dtype=torch.float64, requires_grad=True)
    dropout = FastDropout(0.25, inplace=inplace).train()
    out = dropout(x * 2)  # a non-leaf, so inplace is allowed
    assert dropped_fraction(out) == pytest.approx(0.25, abs=0.01)
    assert set(out.unique().tolist()) == {0.0, 2 / 0.75}
    out.sum().backward()
    assert torch.equal(x.grad, out.detach())  # d out / d x = 2 · mask = out where x = 1
    assert isinstance(dropout, nn.Dropout) and dropout.state_dict() == {}


def test_fast_dropout_is_the_identity_in_evaluation_and_for_p_0_and_nn_dropout_elsewhere():
    x = torch.randn(8, 16)
    assert FastDropout(0.5).eval()(x) is x
    assert FastDropout(0.0).train()(x) is x
    assert torch.equal(FastDropout(1.0).train()(x), torch.zeros_like(x))
    half = x.bfloat16()  # not float32/float64: F.dropout, the same numbers for the same seed
    torch.manual_seed(5)
    expected = F.dropout(half, 0.3, True)
    torch.manual_seed(5)
    assert torch.equal(FastDropout(0.3).train()(half), expected)


def test_use_fast_dropout_replaces_every_nn_dropout_and_keeps_the_state_dict():
    config = TransformerConfig(d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32,
                               dropout=0.2, max_len=32)
    torch.manual_seed(0)
    fused = config.build(50, 60)
    torch.manual_seed(0)
    readable = config.replace(attention="readable").build(50, 60)
    fast = [m for m in fused.modules() if isinstance(m, nn.Dropout)]
    assert fast and all(type(m) is FastDropout and m.p == 0.2 for m in fast)
    assert all(type(m) is nn.Dropout for m in readable.modules() if isinstance(m, nn.Dropout))
    assert len(fast) == sum(isinstance(m, nn.Dropout) for m in readable.modules())
    assert fused.state_dict().keys() == readable.state_dict().keys()
    assert all(torch.equal(fused.state_dict()[k], v) for k, v in readable.state_dict().items())
    one = use_fast_dropout(nn.Dropout(0.4, inplace=True).eval())
    assert type(one) is FastDropout and one.p == 0.4 and one.inplace and not one.training
    with pytest.raises(TypeError, match="torch.nn.Module"):
        use_fast_dropout("dropout")


def test_fused_attention_drops_its_weights_on_the_cpu_as_the_readable_path_does():
    torch.manual_seed(0)
    readable = use_fast_dropout(MultiHeadAttention(16, 4, dropout=0.3)).double().train()  # need_weights=True
    fused = FusedMultiHeadAttention.sharing(readable)  # same weights, same dropout module
    x = torch.randn(3, 5, 16, dtype=torch.float64)
    mask = padding_mask(torch.tensor([[1, 2, 3, 0, 0], [1, 2, 3, 4, 5], [0, 0, 0, 0, 0]]))  # last: no key at all
    outputs, grads = [], []
    for module in (readable, fused):
        torch.manual_seed(7)  # the same draws: one (B, h, T_q, T_k) mask for the weights
        source = x.clone().requires_grad_()
        out = module(source, source, source, mask)
        out.square().sum().backward()
        outputs.append(out)
        grads.append(source.grad)
    torch.testing.assert_close(outputs[1], outputs[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-12, atol=1e-12)
    assert torch.isfinite(grads[1]).all()
    torch.manual_seed(7)
    assert not torch.allclose(fused(x, x, x, mask), fused.eval()(x, x, x, mask))  # dropout did act
