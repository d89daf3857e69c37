"""Tests of the chapter 7 checks: plausible wrong answers are rejected with a hint
that names the mistake, valid answers in other styles earn full marks, half-right
answers earn the parts they get right, an EncoderLayer built on a wrong earlier
answer is graded with the reference in its place (that the reference passes and hidden inputs are
fresh: test_checks_registry.py)."""
import functools

import pytest
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import check_helpers
from check_helpers import cases_drawn_once  # noqa: F401 (a fixture: each seeded draw made once per process)
from check_helpers import accepted
from check_helpers import assert_regraded, notebook_namespace
import solutions
from autograder.sync import solution_cell_source
from autograder.checks import get_exercise
from autograder.checks.base import check_report

pytestmark = pytest.mark.usefixtures("one_torch_thread", "cases_drawn_once")  # tests/conftest.py: tiny tensors, one thread

NAMES = ["layer_norm", "PositionwiseFeedForward", "ResidualSublayer", "EncoderLayer"]

rejected = functools.partial(check_helpers.rejected, seed=13)
partly = functools.partial(check_helpers.partly, seed=13)

NORMALISED, AFFINE, EPS, SHAPES = get_exercise("layer_norm").parts
FFN, FFN_DROPOUT = get_exercise("PositionwiseFeedForward").parts
POST, PRE, RES_DROPOUT = get_exercise("ResidualSublayer").parts
ENC_POST, ENC_PRE, ENC_MASK = get_exercise("EncoderLayer").parts


# --------------------------------------------------------------------------- layer_norm


def make_layer_norm(ddof=0, eps_outside=False, axis=-1, swap=False):
    def layer_norm(x, gamma, beta, eps=1e-5):
        mean = x.mean(axis=axis, keepdims=True)
        var = x.var(axis=axis, ddof=ddof, keepdims=True)
        z = (x - mean) / (np.sqrt(var) + eps if eps_outside else np.sqrt(var + eps))
        return z * beta + gamma if swap else z * gamma + beta

    return layer_norm


def test_layer_norm_with_unbiased_variance_is_rejected():
    rejected("layer_norm", make_layer_norm(ddof=1), "unbiased variance")


def test_layer_norm_with_eps_outside_the_root_is_rejected():
    rejected("layer_norm", make_layer_norm(eps_outside=True), "inside the square root")


def test_layer_norm_over_the_wrong_axis_is_rejected():
    rejected("layer_norm", make_layer_norm(axis=0), "wrong axis")


def test_layer_norm_with_gamma_and_beta_swapped_is_rejected():
    rejected("layer_norm", make_layer_norm(swap=True), "swapped")


def test_a_different_valid_layer_norm_passes():
    def via_torch_formula(x, gamma, beta, eps=1e-5):
        centred = x - np.mean(x, axis=-1, keepdims=True)
        var = np.mean(centred ** 2, axis=-1, keepdims=True)
        return centred * (1.0 / np.sqrt(var + eps)) * gamma + beta

    accepted("layer_norm", via_torch_formula)


def test_layer_norm_with_loops_and_no_validation_passes():
    def with_loops(x, gamma, beta, eps=1e-5):
        x = np.asarray(x)
        rows = x.reshape(-1, x.shape[-1])
        out = np.empty_like(rows)
        for i, row in enumerate(rows):
            mean = sum(row) / len(row)
            var = sum((v - mean) ** 2 for v in row) / len(row)
            out[i] = [(v - mean) / (var + eps) ** 0.5 for v in row]
        return out.reshape(x.shape) * gamma + beta

    accepted("layer_norm", with_loops)


def test_layer_norm_in_float64_passes_with_a_note():
    def in_float64(x, gamma, beta, eps=1e-5):
        x = np.asarray(x, dtype=np.float64)
        z = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)
        return z * np.asarray(gamma, dtype=np.float64) + beta

    report = accepted("layer_norm", in_float64)
    assert any("float64 where the reference returns float32" in note for note in report.notes), report.notes


def test_layer_norm_through_torch_with_torchs_own_errors_passes_with_advice():
    def via_torch(x, gamma, beta, eps=1e-5):
        t = torch.from_numpy(np.asarray(x))
        out = F.layer_norm(t, t.shape[-1:], torch.from_numpy(np.asarray(gamma)), torch.from_numpy(np.asarray(beta)),
                           eps)
        return out.numpy()

    report = accepted("layer_norm", via_torch)
    assert any("the reference raises ValueError" in a and "yours raised RuntimeError" in a for a in report.advice), report.advice


def test_layer_norm_ignoring_the_eps_argument_loses_only_that_part():
    def fixed_eps(x, gamma, beta, eps=1e-5):
        return make_layer_norm()(x, gamma, beta)

    partly("layer_norm", fixed_eps, [NORMALISED, AFFINE, SHAPES], [EPS], "use the eps argument")


def test_layer_norm_for_matrices_only_loses_the_leading_shapes():
    def rows_only(x, gamma, beta, eps=1e-5):
        mean = x.mean(axis=1, keepdims=True)
        var = x.var(axis=1, keepdims=True)
        return (x - mean) / np.sqrt(var + eps) * gamma + beta

    partly("layer_norm", rows_only, [NORMALISED, AFFINE, EPS], [SHAPES], "axis")


def test_layer_norm_without_gamma_and_beta_keeps_the_normalisation():
    def no_affine(x, gamma, beta, eps=1e-5):
        return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)

    partly("layer_norm", no_affine, [NORMALISED, EPS, SHAPES], [AFFINE], "gamma and beta are not applied")


# --------------------------------------------------------------------------- PositionwiseFeedForward


def make_ffn(activation=F.relu, dropout_at="hidden"):
    """A PositionwiseFeedForward answer: the reference's modules, a forward with the
    named activation and its dropout at the named place."""
    class PositionwiseFeedForward(solutions.PositionwiseFeedForward):
        def forward(self, x):
            if dropout_at == "input":
                x = self.dropout(x)
            h = activation(self.linear1(x))
            if dropout_at == "hidden":
                h = self.dropout(h)
            out = self.linear2(h)
            return self.dropout(out) if dropout_at == "output" else out

    return PositionwiseFeedForward


def test_ffn_with_gelu_is_rejected():
    rejected("PositionwiseFeedForward", make_ffn(activation=F.gelu), "GELU")


def test_ffn_without_activation_is_rejected():
    rejected("PositionwiseFeedForward", make_ffn(activation=lambda t: t), "ReLU between")


def test_ffn_with_dropout_on_the_input_loses_only_the_dropout():
    partly("PositionwiseFeedForward", make_ffn(dropout_at="input"), [FFN], [FFN_DROPOUT], "not on the input")


def test_ffn_with_einsum_passes():
    class Einsum(nn.Module):
        def __init__(self, d_model, d_ff, dropout=0.0):
            super().__init__()
            self.linear1 = nn.Linear(d_model, d_ff)
            self.linear2 = nn.Linear(d_ff, d_model)
            self.dropout = nn.Dropout(p=dropout)

        def forward(self, x):
            h = torch.einsum("btd,fd->btf", x, self.linear1.weight) + self.linear1.bias  # (B, T, d_ff)
            h = self.dropout(h.clamp_min(0.0))
            return torch.einsum("btf,df->btd", h, self.linear2.weight) + self.linear2.bias  # (B, T, d_model)

    accepted("PositionwiseFeedForward", Einsum)


def test_ffn_with_relu_module_and_no_validation_passes():
    class WithModules(nn.Module):
        def __init__(self, d_model, d_ff, dropout=0.0):
            super().__init__()
            self.linear1, self.relu = nn.Linear(d_model, d_ff), nn.ReLU()
            self.dropout, self.linear2 = nn.Dropout(dropout), nn.Linear(d_ff, d_model)

        def forward(self, x):
            for layer in (self.linear1, self.relu, self.dropout, self.linear2):
                x = layer(x)
            return x

    accepted("PositionwiseFeedForward", WithModules)


def test_ffn_with_dropout_after_linear2_is_rejected():
    rejected("PositionwiseFeedForward", make_ffn(dropout_at="output"), "wrong place", "not after linear2")


def test_ffn_without_dropout_is_rejected():
    rejected("PositionwiseFeedForward", make_ffn(dropout_at=None), "dropout is missing")


def test_ffn_with_other_layer_names_is_rejected():
    class Sequential(nn.Module):
        def __init__(self, d_model, d_ff, dropout=0.0):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model))

        def forward(self, x):
            return self.net(x)

    rejected("PositionwiseFeedForward", Sequential, "linear1 = nn.Linear(d_model, d_ff)")


def test_a_different_valid_ffn_passes():
    class Functional(nn.Module):
        def __init__(self, d_model, d_ff, dropout=0.0):
            super().__init__()
            self.linear1 = nn.Linear(d_model, d_ff)
            self.linear2 = nn.Linear(d_ff, d_model)
            self.p = dropout

        def forward(self, x):
            h = torch.clamp(F.linear(x, self.linear1.weight, self.linear1.bias), min=0)
            h = F.dropout(h, self.p, training=self.training)
            return F.linear(h, self.linear2.weight, self.linear2.bias)

    accepted("PositionwiseFeedForward", Functional)


# --------------------------------------------------------------------------- ResidualSublayer


def make_residual(swap=False, residual=True, dropout_on_sum=False):
    class ResidualSublayer(nn.Module):
        def __init__(self, d_model, dropout=0.0, norm_first=False):
            super().__init__()
            self.norm = nn.LayerNorm(d_model)
            self.dropout = nn.Dropout(dropout)
            self.norm_first = norm_first != swap

        def forward(self, x, sublayer):
            keep = x if residual else 0
            if self.norm_first:
                if dropout_on_sum:
                    return self.dropout(keep + sublayer(self.norm(x)))
                return keep + self.dropout(sublayer(self.norm(x)))
            if dropout_on_sum:
                return self.norm(self.dropout(keep + sublayer(x)))
            return self.norm(keep + self.dropout(sublayer(x)))

    return ResidualSublayer


def test_residual_with_pre_and_post_norm_swapped_is_rejected():
    rejected("ResidualSublayer", make_residual(swap=True), "pre- and post-norm are swapped")


def test_residual_without_the_residual_is_rejected():
    rejected("ResidualSublayer", make_residual(residual=False), "residual is missing")


def test_residual_with_dropout_on_the_sum_is_rejected():
    rejected("ResidualSublayer", make_residual(dropout_on_sum=True), "not on the sum")


def test_residual_whose_pre_norm_adds_the_normalised_x_keeps_post_norm():
    class NormalisedResidual(make_residual()):
        def forward(self, x, sublayer):
            if self.norm_first:
                h = self.norm(x)
                return h + self.dropout(sublayer(h))
            return super().forward(x, sublayer)

    partly("ResidualSublayer", NormalisedResidual, [POST, RES_DROPOUT], [PRE], "adds the normalised x")


def test_residual_with_two_forward_methods_passes():
    class TwoPaths(nn.Module):
        def __init__(self, d_model, dropout=0.0, norm_first=False):
            super().__init__()
            self.norm = nn.LayerNorm(d_model)
            self.dropout = nn.Dropout(dropout)
            self.forward = self.pre_norm if norm_first else self.post_norm  # chosen once

        def post_norm(self, x, sublayer):
            return self.norm(torch.add(x, self.dropout(sublayer(x))))

        def pre_norm(self, x, sublayer):
            return x.add(self.dropout(sublayer(self.norm(x))))

    accepted("ResidualSublayer", TwoPaths)


def test_residual_with_a_functional_layer_norm_passes():
    class FunctionalNorm(nn.Module):
        def __init__(self, d_model, dropout=0.0, norm_first=False):
            super().__init__()
            self.norm = nn.LayerNorm(d_model)
            self.dropout = nn.Dropout(dropout)
            self.norm_first = norm_first

        def _norm(self, x):
            return F.layer_norm(x, (x.size(-1),), self.norm.weight, self.norm.bias, self.norm.eps)

        def forward(self, x, sublayer):
            if self.norm_first:
                return x + self.dropout(sublayer(self._norm(x)))
            return self._norm(x + self.dropout(sublayer(x)))

    accepted("ResidualSublayer", FunctionalNorm)


def test_residual_with_a_renamed_norm_is_rejected():
    class Renamed(nn.Module):
        def __init__(self, d_model, dropout=0.0, norm_first=False):
            super().__init__()
            self.layer_norm = nn.LayerNorm(d_model)
            self.norm_first = norm_first

        def forward(self, x, sublayer):
            return self.layer_norm(x + sublayer(x))

    rejected("ResidualSublayer", Renamed, "norm.weight")


def test_a_different_valid_residual_sublayer_passes():
    class Functional(nn.Module):
        def __init__(self, d_model, dropout=0.0, norm_first=False):
            super().__init__()
            self.norm = nn.LayerNorm(d_model, eps=1e-5)
            self.p, self.pre = dropout, norm_first

        def forward(self, x, sublayer):
            inner = self.norm(x) if self.pre else x
            y = x + F.dropout(sublayer(inner), self.p, self.training)
            return y if self.pre else self.norm(y)

    accepted("ResidualSublayer", Functional)


# --------------------------------------------------------------------------- EncoderLayer


def make_encoder(swap_norms=False, residual=True, ignore_mask=False, flip=False):
    class EncoderLayer(nn.Module):
        def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
            super().__init__()
            self.self_attn = solutions.MultiHeadAttention(d_model, num_heads, dropout)
            self.feed_forward = solutions.PositionwiseFeedForward(d_model, d_ff, dropout)
            self.norm1 = nn.LayerNorm(d_model)
            self.norm2 = nn.LayerNorm(d_model)
            self.dropout = nn.Dropout(dropout)
            self.norm_first = norm_first != flip

        def forward(self, x, src_mask=None):
            mask = None if ignore_mask else src_mask
            n1, n2 = (self.norm2, self.norm1) if swap_norms else (self.norm1, self.norm2)
            keep = 1.0 if residual else 0.0
            if self.norm_first:
                h = n1(x)
                x = keep * x + self.dropout(self.self_attn(h, h, h, mask))
                return keep * x + self.dropout(self.feed_forward(n2(x)))
            x = n1(keep * x + self.dropout(self.self_attn(x, x, x, mask)))
            return n2(keep * x + self.dropout(self.feed_forward(x)))

    return EncoderLayer


def test_encoder_without_residual_is_rejected():
    rejected("EncoderLayer", make_encoder(residual=False), "residual connections are missing")


def test_encoder_with_norms_swapped_is_rejected():
    rejected("EncoderLayer", make_encoder(swap_norms=True), "norm1 and norm2 are swapped")


def test_encoder_ignoring_the_mask_is_rejected():
    rejected("EncoderLayer", make_encoder(ignore_mask=True), "src_mask was ignored")


def test_encoder_with_pre_and_post_norm_swapped_is_rejected():
    rejected("EncoderLayer", make_encoder(flip=True), "pre- and post-norm are swapped")


def test_a_different_valid_encoder_layer_passes():
    class WithResidualSublayers(nn.Module):
        """Built from the chapter's own ResidualSublayer idea, written inline."""

        def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
            super().__init__()
            self.self_attn = solutions.MultiHeadAttention(d_model, num_heads, dropout)
            self.feed_forward = solutions.PositionwiseFeedForward(d_model, d_ff, dropout)
            self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
            self.drop = nn.Dropout(dropout)
            self.norm_first = norm_first

        def _sublayer(self, x, norm, fn):
            if self.norm_first:
                return x + self.drop(fn(norm(x)))
            return norm(x + self.drop(fn(x)))

        def forward(self, x, src_mask=None):
            x = self._sublayer(x, self.norm1, lambda h: self.self_attn(h, h, h, mask=src_mask))
            return self._sublayer(x, self.norm2, self.feed_forward)

    accepted("EncoderLayer", WithResidualSublayers)


def test_encoder_whose_pre_norm_adds_the_normalised_x_keeps_post_norm_and_mask():
    class NormalisedResidual(make_encoder()):
        def forward(self, x, src_mask=None):
            if not self.norm_first:
                return super().forward(x, src_mask)
            h = self.norm1(x)
            x = h + self.self_attn(h, h, h, src_mask)
            h = self.norm2(x)
            return h + self.feed_forward(h)

    partly("EncoderLayer", NormalisedResidual, [ENC_POST, ENC_MASK], [ENC_PRE], "adds the normalised x")


def test_encoder_with_functional_norms_and_a_positional_mask_passes():
    class Functional(nn.Module):
        def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
            super().__init__()
            self.self_attn = solutions.MultiHeadAttention(d_model, num_heads, dropout)
            self.feed_forward = solutions.PositionwiseFeedForward(d_model, d_ff, dropout)
            self.norm1 = nn.LayerNorm(d_model)
            self.norm2 = nn.LayerNorm(d_model)
            self.p, self.norm_first = dropout, norm_first

        def forward(self, x, src_mask=None):
            sublayers = [(self.norm1, lambda h: self.self_attn(h, h, h, src_mask)), (self.norm2, self.feed_forward)]
            for norm, fn in sublayers:
                if self.norm_first:
                    x = x + F.dropout(fn(norm(x)), self.p, self.training)
                else:
                    x = norm(x + F.dropout(fn(x), self.p, self.training))
            return x

    accepted("EncoderLayer", Functional)


def test_encoder_choosing_its_path_once_passes():
    class ChosenPath(nn.Module):
        def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
            super().__init__()
            self.self_attn = solutions.MultiHeadAttention(d_model, num_heads, dropout)
            self.feed_forward = solutions.PositionwiseFeedForward(d_model, d_ff, dropout)
            self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
            self.dropout1, self.dropout2 = nn.Dropout(dropout), nn.Dropout(dropout)
            self._path = self._pre_norm if norm_first else self._post_norm

        def _attend(self, h, mask):
            return self.dropout1(self.self_attn(query=h, key=h, value=h, mask=mask))

        def _post_norm(self, x, mask):
            x = self.norm1(torch.add(x, self._attend(x, mask)))
            return self.norm2(torch.add(x, self.dropout2(self.feed_forward(x))))

        def _pre_norm(self, x, mask):
            x = x + self._attend(self.norm1(x), mask)
            return x + self.dropout2(self.feed_forward(self.norm2(x)))

        def forward(self, x, src_mask=None):
            return self._path(x, src_mask)

    accepted("EncoderLayer", ChosenPath)


# The reference EncoderLayer as its notebook cell: it calls PositionwiseFeedForward by its bare
# name, so in one namespace it picks up whatever answer the notebook defined.
ENCODER_SOURCE = solution_cell_source(solutions.EncoderLayer)


def _notebook(*sources):
    """One namespace holding ``sources`` in order, as a notebook's cells share one."""
    return notebook_namespace({"nn": nn, "torch": torch, "F": F, "np": np, "MultiHeadAttention": solutions.MultiHeadAttention}, *sources)


# The reference's feed-forward cell with GELU in place of ReLU.
GELU_FEED_FORWARD = solution_cell_source(solutions.PositionwiseFeedForward).replace("F.relu(", "F.gelu(")


def test_an_encoder_on_a_wrong_feed_forward_gets_full_marks_and_the_note():
    ns = _notebook(GELU_FEED_FORWARD, ENCODER_SOURCE)
    assert not check_report("PositionwiseFeedForward", ns["PositionwiseFeedForward"]).passed
    assert_regraded("EncoderLayer", ns["EncoderLayer"], "PositionwiseFeedForward", hidden=True)


def test_an_encoder_on_an_unfinished_feed_forward_gets_full_marks_and_the_note():
    ns = _notebook("""
        class PositionwiseFeedForward(nn.Module):
            def __init__(self, d_model, d_ff, dropout=0.0):
                super().__init__()
                raise NotImplementedError()
    """, ENCODER_SOURCE)
    assert_regraded("EncoderLayer", ns["EncoderLayer"], "PositionwiseFeedForward")


def test_an_encoder_with_its_own_mistake_on_a_wrong_feed_forward_is_still_diagnosed():
    ns = _notebook("""
        class PositionwiseFeedForward(nn.Module):
            def __init__(self, d_model, d_ff, dropout=0.0):
                super().__init__()
                raise NotImplementedError()
    """, ENCODER_SOURCE.replace("self.self_attn(x, x, x, src_mask)", "self.self_attn(x, x, x)"))
    report = check_report("EncoderLayer", ns["EncoderLayer"], hidden=True, seed=13)
    assert [p.earned for p in report.parts] == [True, True, False], report.render("EncoderLayer")
    assert "src_mask was ignored" in report.render("EncoderLayer")
