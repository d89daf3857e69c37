"""Tests of the chapter 6 checks (``autograder/checks/ch06_masking.py``).

For every exercise: the reference passes, a different valid implementation
passes (visible and hidden), plausible wrong implementations are rejected with a
message that names the mistake, a ``NotImplementedError`` stub is reported as
not implemented, and hidden checks draw fresh random inputs.
"""
import functools
import numpy as np
import pytest
import torch

import check_helpers
from check_helpers import assert_reference_passes
from autograder import check
from autograder.checks import CheckFailure, get_exercise
from autograder.checks.base import make_rng

NAMES = ["padding_mask", "causal_mask", "decoder_mask", "masked_softmax"]

_rejected = functools.partial(check_helpers.rejected, any_word=True)


# --------------------------------------------------------------------------- shared


@pytest.mark.parametrize("name", NAMES)
def test_reference_passes(name, capsys):
    assert_reference_passes(name, capsys)


@pytest.mark.parametrize("name", NAMES)
def test_stub_is_not_implemented_yet(name):
    def stub(*args, **kwargs):
        raise NotImplementedError()

    with pytest.raises(CheckFailure, match="not implemented yet"):
        check(name, stub)


@pytest.mark.parametrize("name", NAMES)
def test_hidden_cases_are_fresh(name):
    exercise = get_exercise(name)

    def fingerprint(cases):
        parts = []
        for case in cases:
            for arg in case.args:
                value = getattr(arg, "value", arg)
                parts.append(np.asarray(value).tobytes() if value is not None else b"None")
        return b"|".join(parts)

    first = fingerprint(exercise.cases(make_rng(hidden=True), hidden=True))
    second = fingerprint(exercise.cases(make_rng(hidden=True), hidden=True))
    assert first != second
    visible = fingerprint(exercise.cases(make_rng(hidden=False), hidden=False))
    assert visible == fingerprint(exercise.cases(make_rng(hidden=False), hidden=False))


# --------------------------------------------------------------------------- padding_mask


def _check_ids(ids):
    if ids.dim() != 2:
        raise ValueError("ids must be (B, T)")


def test_padding_mask_valid_alternative():
    def padding_mask(ids, pad_id=0):
        _check_ids(ids)
        return torch.ne(ids, pad_id).unsqueeze(1).unsqueeze(2)  # (B, 1, 1, T)

    check("padding_mask", padding_mask)
    check("padding_mask", padding_mask, hidden=True)


def test_padding_mask_inverted_polarity():
    def padding_mask(ids, pad_id=0):
        _check_ids(ids)
        return (ids == pad_id)[:, None, None, :]

    _rejected("padding_mask", padding_mask, "polarity")


def test_padding_mask_wrong_shape_bt():
    def padding_mask(ids, pad_id=0):
        _check_ids(ids)
        return ids != pad_id

    _rejected("padding_mask", padding_mask, "(b, 1, 1, t)")


def test_padding_mask_wrong_shape_b1t():
    def padding_mask(ids, pad_id=0):
        _check_ids(ids)
        return (ids != pad_id)[:, None, :]

    _rejected("padding_mask", padding_mask, "one axis is missing")


def test_padding_mask_not_bool():
    def padding_mask(ids, pad_id=0):
        _check_ids(ids)
        return (ids != pad_id).long()[:, None, None, :]

    _rejected("padding_mask", padding_mask, "boolean")


def test_padding_mask_ignores_pad_id():
    def padding_mask(ids, pad_id=0):
        _check_ids(ids)
        return (ids != 0)[:, None, None, :]

    _rejected("padding_mask", padding_mask, "pad_id")


def test_padding_mask_no_validation():
    def padding_mask(ids, pad_id=0):
        return (ids != pad_id)[..., None, None, :]

    _rejected("padding_mask", padding_mask, "valueerror")


# --------------------------------------------------------------------------- causal_mask


def _check_size(size):
    if size < 1:
        raise ValueError("size must be positive")


def test_causal_mask_valid_alternative():
    def causal_mask(size):
        _check_size(size)
        i = torch.arange(size)
        return (i[None, :] <= i[:, None]).view(1, 1, size, size)  # key j <= query i

    check("causal_mask", causal_mask)
    check("causal_mask", causal_mask, hidden=True)


def test_causal_mask_strict_lower_triangle():
    def causal_mask(size):
        _check_size(size)
        return torch.ones(size, size, dtype=torch.bool).tril(-1)[None, None]

    _rejected("causal_mask", causal_mask, "diagonal is masked")


def test_causal_mask_upper_triangle():
    def causal_mask(size):
        _check_size(size)
        return torch.ones(size, size, dtype=torch.bool).triu()[None, None]

    _rejected("causal_mask", causal_mask, "upper triangle")


def test_causal_mask_inverted_polarity():
    def causal_mask(size):
        _check_size(size)
        return torch.ones(size, size, dtype=torch.bool).triu(1)[None, None]

    _rejected("causal_mask", causal_mask, "polarity")


def test_causal_mask_two_dimensional():
    def causal_mask(size):
        _check_size(size)
        return torch.ones(size, size, dtype=torch.bool).tril()

    _rejected("causal_mask", causal_mask, "leading axes")


def test_causal_mask_float():
    def causal_mask(size):
        _check_size(size)
        return torch.tril(torch.ones(1, 1, size, size))

    _rejected("causal_mask", causal_mask, "boolean")


def test_causal_mask_accepts_zero():
    def causal_mask(size):
        return torch.ones(size, size, dtype=torch.bool).tril()[None, None]

    _rejected("causal_mask", causal_mask, "valueerror")


# --------------------------------------------------------------------------- decoder_mask


def _pad(ids, pad_id):
    return (ids != pad_id)[:, None, None, :]  # (B, 1, 1, T)


def _causal(size):
    return torch.ones(size, size, dtype=torch.bool).tril()[None, None]  # (1, 1, T, T)


def test_decoder_mask_valid_alternative():
    def decoder_mask(tgt_ids, pad_id=0):
        _check_ids(tgt_ids)
        size = tgt_ids.size(1)
        keys = (tgt_ids != pad_id).unsqueeze(1).expand(-1, size, -1)  # (B, T, T)
        future = torch.triu(torch.ones(size, size, dtype=torch.bool), diagonal=1)
        return (keys & ~future).unsqueeze(1)  # (B, 1, T, T)

    check("decoder_mask", decoder_mask)
    check("decoder_mask", decoder_mask, hidden=True)


def test_decoder_mask_or_instead_of_and():
    def decoder_mask(tgt_ids, pad_id=0):
        _check_ids(tgt_ids)
        return _pad(tgt_ids, pad_id) | _causal(tgt_ids.size(1))

    _rejected("decoder_mask", decoder_mask, "or (|)")


def test_decoder_mask_missing_padding():
    def decoder_mask(tgt_ids, pad_id=0):
        _check_ids(tgt_ids)
        return _causal(tgt_ids.size(1)).expand(tgt_ids.size(0), 1, -1, -1)

    _rejected("decoder_mask", decoder_mask, "padding part is missing")


def test_decoder_mask_causal_only_shape():
    def decoder_mask(tgt_ids, pad_id=0):
        _check_ids(tgt_ids)
        return _causal(tgt_ids.size(1))

    _rejected("decoder_mask", decoder_mask, "padding part is missing")


def test_decoder_mask_missing_causal():
    def decoder_mask(tgt_ids, pad_id=0):
        _check_ids(tgt_ids)
        size = tgt_ids.size(1)
        return _pad(tgt_ids, pad_id).expand(-1, 1, size, size)

    _rejected("decoder_mask", decoder_mask, "causal part is missing")


def test_decoder_mask_inverted_polarity():
    def decoder_mask(tgt_ids, pad_id=0):
        _check_ids(tgt_ids)
        return ~(_pad(tgt_ids, pad_id) & _causal(tgt_ids.size(1)))

    _rejected("decoder_mask", decoder_mask, "polarity")


def test_decoder_mask_ignores_pad_id():
    def decoder_mask(tgt_ids, pad_id=0):
        _check_ids(tgt_ids)
        return _pad(tgt_ids, 0) & _causal(tgt_ids.size(1))

    _rejected("decoder_mask", decoder_mask, "pad_id")


# --------------------------------------------------------------------------- masked_softmax


def _check_mask(scores, mask):
    if mask is not None and torch.broadcast_shapes(mask.shape, scores.shape) != scores.shape:
        raise ValueError("mask does not broadcast to scores")


def _broadcast_ok(scores, mask):
    try:
        _check_mask(scores, mask)
    except RuntimeError as err:
        raise ValueError(str(err)) from None


def test_masked_softmax_valid_minus_inf_then_zero():
    """-inf fill, softmax, NaN rows zeroed by masked_fill: valid (masked_fill's backward sends 0)."""

    def masked_softmax(scores, mask):
        if mask is None:
            return scores.softmax(-1)
        _broadcast_ok(scores, mask)
        weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        return weights.masked_fill(~mask, 0.0)

    check("masked_softmax", masked_softmax)
    check("masked_softmax", masked_softmax, hidden=True)


def test_masked_softmax_valid_manual_exp():
    """A hand-written stable softmax with where(): also valid."""

    def masked_softmax(scores, mask):
        if mask is None:
            mask = torch.ones_like(scores, dtype=torch.bool)
        _broadcast_ok(scores, mask)
        mask = mask.expand_as(scores)
        low = torch.finfo(scores.dtype).min
        filled = torch.where(mask, scores, torch.full_like(scores, low))
        exp = torch.exp(filled - filled.amax(dim=-1, keepdim=True))
        exp = torch.where(mask, exp, torch.zeros_like(exp))
        total = exp.sum(dim=-1, keepdim=True)
        return exp / torch.where(total > 0, total, torch.ones_like(total))

    check("masked_softmax", masked_softmax)
    check("masked_softmax", masked_softmax, hidden=True)


def test_masked_softmax_nan_on_fully_masked_rows():
    def masked_softmax(scores, mask):
        _broadcast_ok(scores, mask)
        return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)

    _rejected("masked_softmax", masked_softmax, "all masked")


def test_masked_softmax_nan_gradient():
    """Additive -inf bias: zeros in the output, but NaN in the gradient."""

    def masked_softmax(scores, mask):
        _broadcast_ok(scores, mask)
        bias = torch.zeros_like(scores).masked_fill(~mask, float("-inf"))
        return torch.nan_to_num(torch.softmax(scores + bias, dim=-1), nan=0.0)

    _rejected("masked_softmax", masked_softmax, "gradient is nan")


def test_masked_softmax_large_negative_fill():
    """-1e4 and zeroed afterwards: fine on ordinary scores, wrong when scores go below -1e4."""

    def masked_softmax(scores, mask):
        if mask is None:
            return scores.softmax(-1)
        _broadcast_ok(scores, mask)
        weights = torch.softmax(scores.masked_fill(~mask, -1e4), dim=-1)
        return weights.masked_fill(~mask, 0.0)

    _rejected("masked_softmax", masked_softmax, "not below the real scores")


def test_masked_softmax_fixed_minus_1e9_overflows_float16():
    def masked_softmax(scores, mask):
        if mask is None:
            return scores.softmax(-1)
        _broadcast_ok(scores, mask)
        if scores.dtype == torch.float16:  # the rest is right, so only float16 fails
            weights = torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1)
        else:
            weights = torch.softmax(scores.masked_fill(~mask, torch.finfo(scores.dtype).min), dim=-1)
        return weights.masked_fill(~mask, 0.0)

    _rejected("masked_softmax", masked_softmax, "float16")


def test_masked_softmax_small_but_not_zero():
    """Fill with -30 and no zeroing: masked weights ~1e-14, not exactly 0."""

    def masked_softmax(scores, mask):
        if mask is None:
            return scores.softmax(-1)
        _broadcast_ok(scores, mask)
        return torch.softmax(scores.masked_fill(~mask, -30.0), dim=-1)

    with pytest.raises(CheckFailure) as info:
        check("masked_softmax", masked_softmax)  # the visible 2x4 case already shows it
    assert "exactly 0" in str(info.value)


def test_masked_softmax_uniform_on_fully_masked_rows():
    """finfo.min fill without zeroing afterwards: fully masked rows become uniform."""

    def masked_softmax(scores, mask):
        if mask is None:
            return scores.softmax(-1)
        _broadcast_ok(scores, mask)
        return torch.softmax(scores.masked_fill(~mask, torch.finfo(scores.dtype).min), dim=-1)

    _rejected("masked_softmax", masked_softmax, "all masked", "all zeros")


def test_masked_softmax_wrong_axis():
    def masked_softmax(scores, mask):
        if mask is None:
            return scores.softmax(-2)
        _broadcast_ok(scores, mask)
        weights = torch.softmax(scores.masked_fill(~mask, torch.finfo(scores.dtype).min), dim=-2)
        return weights.masked_fill(~mask, 0.0)

    _rejected("masked_softmax", masked_softmax, "axis -2")


def test_masked_softmax_fill_with_zero():
    def masked_softmax(scores, mask):
        if mask is None:
            return scores.softmax(-1)
        _broadcast_ok(scores, mask)
        weights = torch.softmax(scores.masked_fill(~mask, 0.0), dim=-1)
        return weights.masked_fill(~mask, 0.0)

    _rejected("masked_softmax", masked_softmax, "filled with 0")


def test_masked_softmax_inverted_polarity():
    def masked_softmax(scores, mask):
        if mask is None:
            return scores.softmax(-1)
        _broadcast_ok(scores, mask)
        weights = torch.softmax(scores.masked_fill(mask, torch.finfo(scores.dtype).min), dim=-1)
        return weights.masked_fill(mask, 0.0)

    _rejected("masked_softmax", masked_softmax, "polarity")


def test_masked_softmax_in_place():
    def masked_softmax(scores, mask):
        if mask is None:
            return scores.softmax(-1)
        _broadcast_ok(scores, mask)
        if scores.requires_grad:  # an in-place write on a leaf would raise; dodge it
            scores = scores.clone()
        scores.masked_fill_(~mask, torch.finfo(scores.dtype).min)
        return torch.softmax(scores, dim=-1).masked_fill(~mask, 0.0)

    _rejected("masked_softmax", masked_softmax, "in place")


def test_masked_softmax_no_shape_validation():
    def masked_softmax(scores, mask):
        if mask is None:
            return scores.softmax(-1)
        weights = torch.softmax(scores.masked_fill(~mask, torch.finfo(scores.dtype).min), dim=-1)
        return weights.masked_fill(~mask, 0.0)

    _rejected("masked_softmax", masked_softmax, "valueerror")
