"""Tests of the chapter 5 checks: plausible wrong answers are rejected with a hint
that names the mistake, different valid answers are accepted."""
import functools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import check_helpers
from check_helpers import assert_reference_passes
import solutions
from autograder.checks import CheckFailure, check, get_exercise
from autograder.checks.base import make_rng

EXERCISES = ["split_heads", "merge_heads", "MultiHeadAttention"]

rejected = functools.partial(check_helpers.rejected, seed=5, any_word=True)


# --------------------------------------------------------------------------- reference and stubs


@pytest.mark.parametrize("name", EXERCISES)
def test_reference_passes_visible_and_hidden(name, capsys):
    assert_reference_passes(name, capsys)


def _stub_function(*args, **kwargs):
    raise NotImplementedError()


class _StubModule(nn.Module):
    def __init__(self, d_model, num_heads, dropout=0.0):
        super().__init__()
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        raise NotImplementedError()


@pytest.mark.parametrize("name, stub", [("split_heads", _stub_function), ("merge_heads", _stub_function),
                                        ("MultiHeadAttention", _StubModule)])
def test_not_implemented_stub_says_so(name, stub):
    with pytest.raises(CheckFailure, match="not implemented yet"):
        check(name, stub)


@pytest.mark.parametrize("name", EXERCISES)
def test_hidden_cases_are_fresh_each_run(name):
    exercise = get_exercise(name)
    first = exercise.cases(make_rng(hidden=True), hidden=True)
    second = exercise.cases(make_rng(hidden=True), hidden=True)

    def arrays(cases):
        return [a.value for c in cases for a in c.args if hasattr(a, "value")]

    assert len(first) == len(second)
    assert any(a.shape != b.shape or not np.array_equal(a, b) for a, b in zip(arrays(first), arrays(second)))


def test_visible_cases_are_reproducible():
    exercise = get_exercise("MultiHeadAttention")
    a = exercise.cases(make_rng(hidden=False), hidden=False)
    b = exercise.cases(make_rng(hidden=False), hidden=False)
    assert all(np.array_equal(x.state["w_q.weight"], y.state["w_q.weight"]) for x, y in zip(a, b))


# --------------------------------------------------------------------------- split_heads


def split_no_transpose(x, num_heads):
    batch, length, d_model = x.shape
    if d_model % num_heads:
        raise ValueError("not divisible")
    return x.view(batch, num_heads, length, d_model // num_heads)


def split_d_k_major(x, num_heads):
    batch, length, d_model = x.shape
    if d_model % num_heads:
        raise ValueError("not divisible")
    return x.reshape(batch, length, d_model // num_heads, num_heads).permute(0, 3, 1, 2)


def split_forgot_transpose(x, num_heads):
    batch, length, d_model = x.shape
    if d_model % num_heads:
        raise ValueError("not divisible")
    return x.reshape(batch, length, num_heads, d_model // num_heads)


def split_no_check(x, num_heads):
    batch, length, d_model = x.shape
    return x.reshape(batch, length, num_heads, -1).transpose(1, 2)


def split_via_numpy(x, num_heads):
    batch, length, d_model = x.shape
    if d_model % num_heads:
        raise ValueError("not divisible")
    y = x.detach().numpy().reshape(batch, length, num_heads, -1).transpose(0, 2, 1, 3)
    return torch.from_numpy(np.ascontiguousarray(y))


def test_split_heads_mistakes_are_named():
    rejected("split_heads", split_no_transpose, "without a transpose")
    rejected("split_heads", split_d_k_major, "wrong order", "(d_k, h)")
    rejected("split_heads", split_forgot_transpose, "transpose axes 1 and 2")
    rejected("split_heads", split_no_check, "should raise ValueError")
    rejected("split_heads", split_via_numpy, "gradient")


def split_by_chunks(x, num_heads):
    """A different valid answer: slice the features, stack the heads."""
    if x.shape[-1] % num_heads != 0:
        raise ValueError(f"d_model must be divisible by num_heads = {num_heads}")
    return torch.stack(torch.chunk(x, num_heads, dim=-1), dim=1)  # (B, h, T, d_k)


def test_split_heads_other_valid_answer_passes():
    check("split_heads", split_by_chunks)
    check("split_heads", split_by_chunks, hidden=True)


# --------------------------------------------------------------------------- merge_heads


def merge_no_transpose(x):
    batch, num_heads, length, d_k = x.shape
    return x.reshape(batch, length, num_heads * d_k)


def merge_d_k_major(x):
    batch, num_heads, length, d_k = x.shape
    return x.permute(0, 2, 3, 1).reshape(batch, length, num_heads * d_k)


def merge_view_without_contiguous(x):
    batch, num_heads, length, d_k = x.shape
    return x.transpose(1, 2).view(batch, length, num_heads * d_k)


def merge_heads_on_axis_1(x):
    batch, num_heads, length, d_k = x.shape
    return x.reshape(batch, num_heads, length * d_k)


def test_merge_heads_mistakes_are_named():
    rejected("merge_heads", merge_no_transpose, "transpose(1, 2) first")
    rejected("merge_heads", merge_d_k_major, "wrong order")
    msg = rejected("merge_heads", merge_view_without_contiguous, "view", "reshape", "contiguous")
    assert "Hint: a .view on a transposed" in msg
    rejected("merge_heads", merge_heads_on_axis_1, "axis 1")


def merge_by_cat(x):
    """A different valid answer: concatenate the heads along the features."""
    return torch.cat(x.unbind(dim=1), dim=-1)  # (B, T, h * d_k)


def test_merge_heads_other_valid_answer_passes():
    check("merge_heads", merge_by_cat)
    check("merge_heads", merge_by_cat, hidden=True)


# --------------------------------------------------------------------------- MultiHeadAttention


def make_mha(mistake=None):
    """A student-like MultiHeadAttention with one deliberate mistake (or none)."""

    class StudentMHA(nn.Module):
        def __init__(self, d_model, num_heads, dropout=0.0):
            super().__init__()
            if mistake != "no_divisibility_check" and d_model % num_heads != 0:
                raise ValueError("d_model must be divisible by num_heads")
            self.num_heads = num_heads
            self.d_k = d_model // num_heads
            self.w_q = nn.Linear(d_model, d_model)
            self.w_k = nn.Linear(d_model, d_model)
            self.w_v = nn.Linear(d_model, d_model)
            self.w_o = nn.Linear(d_model, d_model)
            if mistake == "extra_parameter":
                self.scale = nn.Parameter(torch.ones(1))
            self.dropout = nn.Dropout(dropout)
            self.attn_weights = None

        def split(self, x, length):
            batch = x.size(0)
            if mistake == "no_transpose":
                return x.view(batch, self.num_heads, length, self.d_k)
            return x.view(batch, length, self.num_heads, self.d_k).transpose(1, 2)  # (B, h, T, d_k)

        def forward(self, query, key, value, mask=None):
            batch, t_q, d_model = query.shape
            if mistake == "keys_from_query":
                key, value = query, query
            t_k = t_q if mistake == "query_length_for_keys" else key.size(1)
            q = self.split(self.w_q(query), t_q)
            k = self.split(self.w_k(key), t_k)
            v = self.split(self.w_v(value), t_k)
            scores = q @ k.transpose(-2, -1)
            if mistake != "no_scale":
                scores = scores / math.sqrt(self.d_k)
            if mask is not None:
                scores = scores.masked_fill(mask if mistake == "inverted_mask" else ~mask, float("-inf"))
            weights = torch.softmax(scores, dim=-2 if mistake == "softmax_over_queries" else -1)
            if mistake != "nan_rows":
                weights = torch.nan_to_num(weights, nan=0.0)
            if mistake == "averaged_weights":
                self.attn_weights = weights.mean(dim=1).detach()
            elif mistake != "no_weights":
                self.attn_weights = weights.detach()
            context = self.dropout(weights) @ v  # (B, h, T_q, d_k)
            merged = context.transpose(1, 2).reshape(batch, t_q, d_model)  # (B, T_q, d_model)
            return merged if mistake == "no_w_o" else self.w_o(merged)

    return StudentMHA


@pytest.mark.parametrize("mistake, words", [
    ("no_scale", ["√d_k"]),
    ("inverted_mask", ["polarity"]),
    ("softmax_over_queries", ["wrong axis"]),
    ("no_w_o", ["w_o is missing"]),
    ("no_transpose", ["wrong order"]),
    ("keys_from_query", ["come from the query"]),
    ("query_length_for_keys", ["T_q != T_k"]),
    ("averaged_weights", ["averaged over the heads"]),
    ("no_weights", ["attn_weights is not set"]),
    ("nan_rows", ["NaN"]),
    ("extra_parameter", ["w_q, w_k, w_v, w_o"]),
    ("no_divisibility_check", ["should raise ValueError"]),
])
def test_multi_head_attention_mistakes_are_named(mistake, words):
    rejected("MultiHeadAttention", make_mha(mistake), *words)


def test_a_student_style_valid_module_passes():
    """-inf + softmax + nan_to_num, .view after split: a different valid answer."""
    check("MultiHeadAttention", make_mha())
    check("MultiHeadAttention", make_mha(), hidden=True)


class FusedMHA(nn.Module):
    """A different valid answer: the fused kernel for the output, weights computed beside it."""

    def __init__(self, d_model, num_heads, dropout=0.0):
        super().__init__()
        if d_model % num_heads:
            raise ValueError("d_model must be divisible by num_heads")
        self.h = num_heads
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))
        self.attn_weights = None

    def forward(self, query, key, value, mask=None):
        q = solutions.split_heads(self.w_q(query), self.h)  # (B, h, T_q, d_k)
        k = solutions.split_heads(self.w_k(key), self.h)  # (B, h, T_k, d_k)
        v = solutions.split_heads(self.w_v(value), self.h)  # (B, h, T_k, d_k)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        self.attn_weights = solutions.masked_softmax(scores, mask).detach()
        context = self.attn_weights @ v
        if mask is None or bool(mask.any(-1).all()):  # SDPA gives NaN on fully masked rows
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.w_o(solutions.merge_heads(context))


def test_fused_valid_module_passes():
    check("MultiHeadAttention", FusedMHA)
    check("MultiHeadAttention", FusedMHA, hidden=True)
