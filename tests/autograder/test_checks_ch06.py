"""Tests of the chapter 6 checks (``autograder/checks/ch06_masking.py``).

For every exercise: valid implementations in other styles
earn full marks (visible and hidden checks; the sandboxed grader: test_checks_sandboxed.py), plausible
wrong implementations lose the part they are about with a message that names the
mistake, bad-input behaviour is advice worth no points, a wrong ``padding_mask``
or ``causal_mask`` is charged once in ``decoder_mask``, a ``NotImplementedError``
stub is reported as not implemented. That the reference passes and hidden checks
draw fresh inputs is tested for every exercise in test_checks_registry.py.
"""
import functools

import numpy as np
import pytest
import torch

import check_helpers
from check_helpers import cases_drawn_once  # noqa: F401 (a fixture: each seeded draw made once per process)
from check_helpers import assert_noted, notebook_namespace
from check_helpers import accepted, partly, stub_says_not_implemented
from autograder.checks.base import check_report

# One intra-op thread (conftest's fixture; importing check_helpers does not activate its own):
# tiny tensors, and a second thread only spins against the other xdist worker.
pytestmark = pytest.mark.usefixtures("one_torch_thread", "cases_drawn_once")

NAMES = ["padding_mask", "causal_mask", "decoder_mask", "masked_softmax"]

_rejected = functools.partial(check_helpers.rejected, any_word=True)


# --------------------------------------------------------------------------- shared


@pytest.mark.parametrize("name", NAMES)
def test_stub_is_not_implemented_yet(name):
    stub_says_not_implemented(name)


# --------------------------------------------------------------------------- padding_mask


def _check_ids(ids):
    if ids.dim() != 2:
        raise ValueError("ids must be (B, T)")


def test_padding_mask_valid_alternative():
    def padding_mask(ids, pad_id=0):
        _check_ids(ids)
        return torch.ne(ids, pad_id).unsqueeze(1).unsqueeze(2)  # (B, 1, 1, T)

    accepted("padding_mask", padding_mask)


def test_padding_mask_inverted_polarity():
    def padding_mask(ids, pad_id=0):
        _check_ids(ids)
        return (ids == pad_id)[:, None, None, :]

    _rejected("padding_mask", padding_mask, "polarity")


def test_padding_mask_inverted_without_validation_is_diagnosed_by_its_real_mistake():
    """No ValueError for 1-D ids (advice) and inverted polarity (the mistake): the
    missed part names the polarity; the missing validation is advice only."""
    def padding_mask(ids, pad_id=0):
        return (ids == pad_id)[..., None, None, :]

    report = partly("padding_mask", padding_mask, ["shape and bool dtype"], ["True at real tokens"], "polarity")
    missed = next(p for p in report.parts if not p.earned)
    assert "ValueError" not in missed.message and "polarity" in missed.message
    assert report.advice


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


def test_padding_mask_no_validation_is_full_marks_with_advice():
    """The contract names no error for 1-D ids: advice, worth no points."""
    def padding_mask(ids, pad_id=0):
        return (ids != pad_id)[..., None, None, :]

    report = accepted("padding_mask", padding_mask)
    assert any("the reference raises ValueError (1-D ids (no batch axis)); yours returned normally" in a
               for a in report.advice), report.advice


# --------------------------------------------------------------------------- causal_mask


def _check_size(size):
    if size < 1:
        raise ValueError("size must be positive")


def test_causal_mask_valid_alternative():
    def causal_mask(size):
        _check_size(size)
        i = torch.arange(size)
        return (i[None, :] <= i[:, None]).view(1, 1, size, size)  # key j <= query i

    accepted("causal_mask", causal_mask)


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


def test_causal_mask_accepting_zero_is_full_marks_with_advice():
    """size < 1 is not graded: an empty mask for 0, torch's RuntimeError for -3."""
    def causal_mask(size):
        return torch.ones(size, size, dtype=torch.bool).tril()[None, None]

    report = accepted("causal_mask", causal_mask)
    assert any("(size 0); yours returned normally" in a for a in report.advice)
    assert any("(a negative size); yours raised RuntimeError" in a for a in report.advice)


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

    accepted("decoder_mask", decoder_mask)


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


def _lowest(scores):
    """The most negative number of the scores' dtype."""
    return torch.finfo(scores.dtype).min


def make_masked_softmax(fill, zero=True, dim=-1, invert=False):
    """A masked_softmax answer: for mask=None a plain softmax over ``dim``; else the
    broadcast check, the masked scores filled with ``fill`` (a number, or a function of
    the scores), a softmax over ``dim`` and, with ``zero``, the masked weights set to 0.
    ``invert`` masks the True positions (the wrong polarity)."""
    def masked_softmax(scores, mask):
        if mask is None:
            return scores.softmax(dim)
        _broadcast_ok(scores, mask)
        masked = mask if invert else ~mask
        weights = torch.softmax(scores.masked_fill(masked, fill(scores) if callable(fill) else fill), dim=dim)
        return weights.masked_fill(masked, 0.0) if zero else weights

    return masked_softmax


def test_masked_softmax_valid_minus_inf_then_zero():
    """-inf fill, softmax, NaN rows zeroed by masked_fill: valid (masked_fill's backward sends 0)."""
    accepted("masked_softmax", make_masked_softmax(float("-inf")))


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

    accepted("masked_softmax", masked_softmax)


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
    _rejected("masked_softmax", make_masked_softmax(-1e4), "not below the real scores")


def test_masked_softmax_fixed_minus_1e9_overflows_float16():
    # -1e9 in float16 only: the rest is right, so only float16 fails.
    answer = make_masked_softmax(lambda scores: -1e9 if scores.dtype == torch.float16 else _lowest(scores))
    _rejected("masked_softmax", answer, "float16")


def test_masked_softmax_small_but_not_zero():
    """Fill 30 below the lowest score and no zeroing: masked weights ~1e-14, not exactly 0.
    (A fixed -30 is above the real scores of magnitude 1e4 and loses the values too.)"""
    partly("masked_softmax", make_masked_softmax(lambda s: s.min() - 30, zero=False), ["values"],
           ["masked positions exactly 0", "fully masked rows give zeros, not NaN"], "exactly 0", "all zeros",
           hidden=False)  # the visible cases already show it


def test_masked_softmax_uniform_on_fully_masked_rows():
    """finfo.min fill without zeroing afterwards: fully masked rows become uniform."""
    _rejected("masked_softmax", make_masked_softmax(_lowest, zero=False), "all masked", "all zeros")


def test_masked_softmax_wrong_axis():
    _rejected("masked_softmax", make_masked_softmax(_lowest, dim=-2), "axis -2")


def test_masked_softmax_fill_with_zero():
    _rejected("masked_softmax", make_masked_softmax(0.0), "filled with 0")


def test_masked_softmax_inverted_polarity():
    _rejected("masked_softmax", make_masked_softmax(_lowest, invert=True), "polarity")


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


def test_masked_softmax_with_torchs_own_shape_error_is_full_marks_with_advice():
    def masked_softmax(scores, mask):
        if mask is None:
            return scores.softmax(-1)
        weights = torch.softmax(scores.masked_fill(~mask, torch.finfo(scores.dtype).min), dim=-1)
        return weights.masked_fill(~mask, 0.0)

    report = accepted("masked_softmax", masked_softmax)
    assert any("the reference raises ValueError (a (2, 1, 5) mask for (2, 3, 4) scores); yours raised RuntimeError" in a
               for a in report.advice), report.advice


# --------------------------------------------------------------------------- more valid styles, as notebook cells

# Each answer is the text of a solution cell: the in-process tests exec them into
# one namespace (as a notebook kernel does), the sandboxed grader runs them as cells
# (test_checks_sandboxed.py).

PAD_RESHAPE = '''
def padding_mask(ids, pad_id=0):
    """eq, negate, reshape; no validation."""
    return ~ids.eq(pad_id).reshape(ids.size(0), 1, 1, -1)  # (B, 1, 1, T)
'''

PAD_LOOP = '''
def padding_mask(ids, pad_id=0):
    """One position at a time."""
    batch, length = ids.shape
    mask = torch.zeros(batch, 1, 1, length, dtype=torch.bool)
    for b in range(batch):
        for t in range(length):
            mask[b, 0, 0, t] = bool(ids[b, t] != pad_id)
    return mask
'''

PAD_LONG = '''
def padding_mask(ids, pad_id=0):
    """Right positions, wrong dtype: .long() turns the mask into 0/1 integers."""
    return (ids != pad_id).long()[:, None, None, :]
'''

CAUSAL_NOT_TRIU = '''
def causal_mask(size):
    """Everything that is not strictly in the future."""
    future = torch.triu(torch.ones(size, size, dtype=torch.bool), diagonal=1)
    return (~future).view(1, 1, size, size)
'''

CAUSAL_NUMPY = '''
def causal_mask(size):
    """np.tri is the lower triangle, diagonal included."""
    return torch.from_numpy(np.tri(size, dtype=bool))[None, None]  # (1, 1, T, T)
'''

UNFINISHED_CAUSAL = '''
def causal_mask(size):
    # YOUR CODE HERE
    raise NotImplementedError()
'''

DEC_NOTEBOOK = '''
def decoder_mask(tgt_ids, pad_id=0):
    """The notebook's own padding_mask and causal_mask, combined by AND."""
    return padding_mask(tgt_ids, pad_id) & causal_mask(tgt_ids.size(1))  # (B, 1, T, T)
'''

DEC_LOGICAL_AND = '''
def decoder_mask(tgt_ids, pad_id=0):
    """torch.logical_and of a (B, 1, 1, T) and a (T, T) mask, then the head axis."""
    length = tgt_ids.shape[1]
    keys = (tgt_ids != pad_id)[:, None, :]  # (B, 1, T)
    lower = torch.tril(torch.ones(length, length)).bool()  # (T, T)
    return torch.logical_and(keys, lower).unsqueeze(1)  # (B, 1, T, T)
'''

MS_LOG_SOFTMAX = '''
def masked_softmax(scores, mask):
    """exp(log_softmax) with a finite fill; masked weights zeroed."""
    if mask is None:
        mask = torch.ones_like(scores, dtype=torch.bool)
    filled = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.log_softmax(filled, dim=-1).exp()
    return weights.masked_fill(~mask, 0.0)
'''

MS_FLOAT64 = '''
def masked_softmax(scores, mask):
    """Everything in float64 (a wider result than the scores: correct)."""
    s = scores.double()
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(s, dim=-1)
    return torch.where(torch.isnan(weights), torch.zeros_like(weights), weights) if mask is None else \\
        weights.masked_fill(~mask, 0.0).nan_to_num(0.0)
'''


def notebook(*sources):
    """The functions of ``sources`` defined in one namespace, like a notebook kernel."""
    return notebook_namespace({"np": np, "torch": torch}, *sources)


@pytest.mark.parametrize("name, source", [
    ("padding_mask", PAD_RESHAPE), ("padding_mask", PAD_LOOP),
    ("causal_mask", CAUSAL_NOT_TRIU), ("causal_mask", CAUSAL_NUMPY),
    ("decoder_mask", DEC_LOGICAL_AND),
    ("masked_softmax", MS_LOG_SOFTMAX),
], ids=["pad-reshape", "pad-loop", "causal-not-triu", "causal-numpy", "decoder-logical-and", "softmax-log-softmax"])
def test_more_valid_styles_earn_full_marks(name, source):
    accepted(name, notebook(source)[name])


def test_a_decoder_mask_from_the_notebooks_own_masks_earns_full_marks():
    accepted("decoder_mask", notebook(PAD_LOOP, CAUSAL_NUMPY, DEC_NOTEBOOK)["decoder_mask"])


def test_a_float64_masked_softmax_earns_full_marks_with_a_note():
    report = accepted("masked_softmax", notebook(MS_FLOAT64)["masked_softmax"])
    assert any("returned float64 where the reference returns float" in n for n in report.notes), report.notes


# --------------------------------------------------------------------------- half-right answers: partial credit


def test_an_integer_padding_mask_loses_only_the_dtype_part():
    partly("padding_mask", notebook(PAD_LONG)["padding_mask"], ["True at real tokens"], ["shape and bool dtype"],
           "int64", "boolean")


def test_a_padding_mask_of_shape_b_t_loses_only_the_shape_part():
    partly("padding_mask", lambda ids, pad_id=0: ids != pad_id, ["True at real tokens"], ["shape and bool dtype"],
           "(B, 1, 1, T)")


def test_a_two_dimensional_causal_mask_loses_only_the_shape_part():
    partly("causal_mask", lambda size: torch.ones(size, size, dtype=torch.bool).tril(),
           ["True on and below the diagonal"], ["shape and bool dtype"], "leading axes")


def test_an_upper_triangle_causal_mask_keeps_the_shape_part():
    partly("causal_mask", lambda size: torch.ones(size, size, dtype=torch.bool).triu()[None, None],
           ["shape and bool dtype"], ["True on and below the diagonal"], "upper triangle")


def test_decoder_mask_with_padding_on_the_query_axis_is_named():
    def decoder_mask(tgt_ids, pad_id=0):
        rows = (tgt_ids != pad_id)[:, None, :, None]  # (B, 1, T, 1): the queries, not the keys
        return rows & _causal(tgt_ids.size(1))

    partly("decoder_mask", decoder_mask, ["shape and bool dtype"], ["padding and causal combined"],
           "query axis (rows)", "padded KEYS", hidden=False)


def test_decoder_mask_with_padding_on_both_axes_is_named():
    def decoder_mask(tgt_ids, pad_id=0):
        keep = tgt_ids != pad_id
        return keep[:, None, :, None] & keep[:, None, None, :] & _causal(tgt_ids.size(1))

    partly("decoder_mask", decoder_mask, ["shape and bool dtype"], ["padding and causal combined"],
           "query axis (rows)", "padded KEYS")


def test_decoder_mask_or_keeps_the_shape_part():
    def decoder_mask(tgt_ids, pad_id=0):
        return _pad(tgt_ids, pad_id) | _causal(tgt_ids.size(1))

    partly("decoder_mask", decoder_mask, ["shape and bool dtype"], ["padding and causal combined"], "OR (|)")


def test_a_logsumexp_masked_softmax_that_loses_float16_digits_is_told_why():
    """exp(s - logsumexp(s)) adds the log-sum back to scores near -3e4, where float16
    is spaced 16 apart: on some inputs (seed 10 among them) the weights come out
    wrong, and the hint names the precision, not the fill (which is right)."""
    def masked_softmax(scores, mask):
        if mask is None:
            return scores.softmax(-1)
        filled = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        return torch.exp(filled - torch.logsumexp(filled, dim=-1, keepdim=True)).masked_fill(~mask, 0.0)

    message = partly("masked_softmax", masked_softmax,
                     ["masked positions exactly 0", "fully masked rows give zeros, not NaN"], ["values"],
                     "float16 arithmetic lost the differences", seed=10).render("masked_softmax")
    assert "masked fill is not below" not in message


def test_masked_softmax_nan_rows_lose_only_the_fully_masked_part():
    def masked_softmax(scores, mask):
        if mask is None:
            return scores.softmax(-1)
        return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)

    partly("masked_softmax", masked_softmax, ["values", "masked positions exactly 0"],
           ["fully masked rows give zeros, not NaN"], "ALL masked")


def test_masked_softmax_nan_gradient_loses_only_the_fully_masked_part():
    def masked_softmax(scores, mask):
        if mask is None:
            return scores.softmax(-1)
        bias = torch.zeros_like(scores).masked_fill(~mask, float("-inf"))
        return torch.nan_to_num(torch.softmax(scores + bias, dim=-1), nan=0.0)

    partly("masked_softmax", masked_softmax, ["values", "masked positions exactly 0"],
           ["fully masked rows give zeros, not NaN"], "gradient is NaN")


# --------------------------------------------------------------------------- one mistake charged once

POLARITY_PAD = '''
def padding_mask(ids, pad_id=0):
    return (ids == pad_id)[:, None, None, :]  # wrong: True at <pad>
'''


@pytest.mark.parametrize("pad, causal, culprit", [(POLARITY_PAD, CAUSAL_NUMPY, "padding_mask"),
                                                   (PAD_LOOP, UNFINISHED_CAUSAL, "causal_mask")],
                         ids=["wrong-padding", "unfinished-causal"])
def test_a_failing_mask_is_charged_once_in_decoder_mask(pad, causal, culprit):
    ns = notebook(pad, causal, DEC_NOTEBOOK)
    assert not check_report(culprit, ns[culprit], hidden=True).passed
    report = check_report("decoder_mask", ns["decoder_mask"], hidden=True)
    assert report.passed, report.render("decoder_mask")
    assert_noted(report.notes, "decoder_mask", culprit)
    assert "not implemented" not in report.render("decoder_mask")
