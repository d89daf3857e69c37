"""Tests of the chapter 7 checks: plausible wrong answers are rejected with a hint
that names the mistake, different valid answers pass, hidden inputs are fresh."""
import functools
import pickle

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import check_helpers
from check_helpers import assert_reference_passes
from check_helpers import accepted, one_torch_thread  # noqa: F401 (one_torch_thread: autouse fixture)
import solutions
from autograder.checks import get_exercise
from autograder.checks.base import make_rng

NAMES = ["layer_norm", "PositionwiseFeedForward", "ResidualSublayer", "EncoderLayer"]

rejected = functools.partial(check_helpers.rejected, seed=13)


@pytest.mark.parametrize("name", NAMES)
def test_reference_passes_visible_and_hidden(name, capsys):
    assert_reference_passes(name, capsys)


@pytest.mark.parametrize("name", NAMES)
def test_hidden_cases_are_fresh_each_run(name):
    ex = get_exercise(name)
    first = ex.cases(make_rng(hidden=True), hidden=True)
    second = ex.cases(make_rng(hidden=True), hidden=True)
    assert len(first) > len(ex.cases(make_rng(hidden=False), hidden=False))
    fingerprint = lambda cases: pickle.dumps([(c.args, c.init, c.state) for c in cases])  # noqa: E731
    assert fingerprint(first) != fingerprint(second)


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


# --------------------------------------------------------------------------- PositionwiseFeedForward


def make_ffn(activation=F.relu, dropout_at="hidden"):
    class PositionwiseFeedForward(nn.Module):
        def __init__(self, d_model, d_ff, dropout=0.0):
            super().__init__()
            self.linear1 = nn.Linear(d_model, d_ff)
            self.linear2 = nn.Linear(d_ff, d_model)
            self.dropout = nn.Dropout(dropout)

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
