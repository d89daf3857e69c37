"""Tests of the chapter 5 checks: plausible wrong answers lose the part they are
about, with a hint that names the mistake; valid answers in other styles earn
full marks (visible and hidden checks; the sandboxed grader: test_checks_sandboxed.py);
a wrong ``split_heads`` is charged once."""
import functools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import check_helpers
from check_helpers import cases_drawn_once  # noqa: F401 (a fixture: each seeded draw made once per process)
from check_helpers import assert_noted, notebook_namespace
from check_helpers import accepted, partly
import solutions
from autograder.checks import CheckFailure, check, get_exercise
from autograder.checks.base import check_report, make_rng

# One intra-op thread (conftest's fixture; importing check_helpers does not activate its own):
# tiny tensors, and a second thread only spins against the other xdist worker.
pytestmark = pytest.mark.usefixtures("one_torch_thread", "cases_drawn_once")

EXERCISES = ["split_heads", "merge_heads", "MultiHeadAttention"]

rejected = functools.partial(check_helpers.rejected, seed=5, any_word=True)


# --------------------------------------------------------------------------- reference and stubs


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


class _ReleasedModule(nn.Module):
    """The released skeleton: both methods unfinished."""

    def __init__(self, d_model, num_heads, dropout=0.0):
        super().__init__()
        raise NotImplementedError()

    def forward(self, query, key, value, mask=None):
        raise NotImplementedError()


@pytest.mark.parametrize("name, stub", [("split_heads", _stub_function), ("merge_heads", _stub_function),
                                        ("MultiHeadAttention", _ReleasedModule)])
def test_not_implemented_stub_says_so(name, stub):
    with pytest.raises(CheckFailure, match="not implemented yet"):
        check(name, stub)


def test_layers_written_and_forward_unfinished_earns_the_layers_part():
    """Code that is written is graded, never reported as "not implemented"."""
    report = partly("MultiHeadAttention", _StubModule, ["layers w_q, w_k, w_v, w_o"],
                    ["self-attention", "cross-attention and masks", "attn_weights"], "not implemented yet")
    assert report.score == 1


def test_visible_cases_are_reproducible():
    exercise = get_exercise("MultiHeadAttention")
    a = exercise.cases(make_rng(hidden=False), hidden=False)
    b = exercise.cases(make_rng(hidden=False), hidden=False)
    assert all(np.array_equal(x.state["w_q.weight"], y.state["w_q.weight"]) for x, y in zip(a, b) if x.state)
    assert sum(1 for x in a if x.state) >= 4


# --------------------------------------------------------------------------- split_heads


def make_split(rearrange):
    """A split_heads answer that checks d_model % num_heads, then returns
    ``rearrange(x, batch, length, num_heads, d_k)``: the mistake is in the rearranging."""
    def split_heads(x, num_heads):
        batch, length, d_model = x.shape
        if d_model % num_heads:
            raise ValueError("not divisible")
        return rearrange(x, batch, length, num_heads, d_model // num_heads)

    return split_heads


split_no_transpose = make_split(lambda x, b, t, h, d_k: x.view(b, h, t, d_k))
split_d_k_major = make_split(lambda x, b, t, h, d_k: x.reshape(b, t, d_k, h).permute(0, 3, 1, 2))
split_forgot_transpose = make_split(lambda x, b, t, h, d_k: x.reshape(b, t, h, d_k))
split_via_numpy = make_split(lambda x, b, t, h, d_k: torch.from_numpy(
    np.ascontiguousarray(x.detach().numpy().reshape(b, t, h, d_k).transpose(0, 2, 1, 3))))


def split_no_check(x, num_heads):
    batch, length, d_model = x.shape
    return x.reshape(batch, length, num_heads, -1).transpose(1, 2)


def test_split_heads_mistakes_are_named():
    rejected("split_heads", split_no_transpose, "without a transpose")
    rejected("split_heads", split_d_k_major, "wrong order", "(d_k, h)")
    rejected("split_heads", split_forgot_transpose, "transpose axes 1 and 2")
    rejected("split_heads", split_no_check, "should raise ValueError", "d_model % num_heads != 0")
    rejected("split_heads", split_via_numpy, "gradient")


def split_by_chunks(x, num_heads):
    """A different valid answer: slice the features, stack the heads."""
    if x.shape[-1] % num_heads != 0:
        raise ValueError(f"d_model must be divisible by num_heads = {num_heads}")
    return torch.stack(torch.chunk(x, num_heads, dim=-1), dim=1)  # (B, h, T, d_k)


def test_split_heads_other_valid_answer_passes():
    accepted("split_heads", split_by_chunks)


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
    accepted("merge_heads", merge_by_cat)


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
    ("keys_from_query", ["w_k(key)"]),
    ("query_length_for_keys", ["T_q != T_k"]),
    ("averaged_weights", ["averaged over the heads"]),
    ("no_weights", ["attn_weights is not set"]),
    ("nan_rows", ["NaN"]),
    ("extra_parameter", ["w_q, w_k, w_v, w_o", "unexpected ['scale']"]),
])
def test_multi_head_attention_mistakes_are_named(mistake, words):
    rejected("MultiHeadAttention", make_mha(mistake), *words)


def test_a_student_style_valid_module_passes():
    """-inf + softmax + nan_to_num, .view after split: a different valid answer."""
    accepted("MultiHeadAttention", make_mha())


def test_no_divisibility_check_in_the_module_is_full_marks_with_advice():
    """The contract names that error for split_heads only: here it is advice."""
    report = accepted("MultiHeadAttention", make_mha("no_divisibility_check"))
    assert any("the reference raises ValueError (d_model=10 is not divisible by 4 heads)" in a for a in report.advice)


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
    accepted("MultiHeadAttention", FusedMHA)


# --------------------------------------------------------------------------- more valid styles, as notebook cells

# Each answer is the text of a solution cell: the in-process tests exec them into
# one namespace (as a notebook kernel does), the sandboxed grader runs them as cells
# (test_checks_sandboxed.py).

SPLIT_UNFLATTEN = '''
def split_heads(x, num_heads):
    """unflatten the features into (h, d_k), then put the heads before the tokens."""
    if x.size(-1) % num_heads != 0:
        raise ValueError(f"d_model = {x.size(-1)} is not divisible by num_heads = {num_heads}")
    return x.unflatten(-1, (num_heads, -1)).transpose(1, 2)  # (B, h, T, d_k)
'''

SPLIT_SLICES = '''
def split_heads(x, num_heads):
    """Head i is the slice i*d_k:(i+1)*d_k of the features: slice and stack."""
    d_model = x.shape[-1]
    if d_model % num_heads:
        raise ValueError("d_model must be divisible by num_heads")
    d_k = d_model // num_heads
    return torch.stack([x[..., i * d_k:(i + 1) * d_k] for i in range(num_heads)], dim=1)  # (B, h, T, d_k)
'''

SPLIT_NO_TRANSPOSE = '''
def split_heads(x, num_heads):
    """Wrong: a view straight to (B, h, T, d_k) mixes tokens across heads."""
    batch, length, d_model = x.shape
    if d_model % num_heads:
        raise ValueError("d_model must be divisible by num_heads")
    return x.reshape(batch, num_heads, length, d_model // num_heads)
'''

MERGE_FLATTEN = '''
def merge_heads(x):
    """Tokens first again, then flatten (h, d_k) into one feature axis."""
    return x.transpose(1, 2).flatten(2)  # (B, T, h * d_k)
'''

MERGE_CONTIGUOUS_VIEW = '''
def merge_heads(x):
    batch, num_heads, length, d_k = x.shape
    return x.permute(0, 2, 1, 3).contiguous().view(batch, length, num_heads * d_k)
'''

UNFINISHED_MERGE = '''
def merge_heads(x):
    # YOUR CODE HERE
    raise NotImplementedError()
'''

MHA_NOTEBOOK = '''
class MultiHeadAttention(nn.Module):
    """The notebook's own split_heads / merge_heads and the imported masked_softmax."""

    def __init__(self, d_model, num_heads, dropout=0.0):
        super().__init__()
        self.num_heads = num_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        self.attn_weights = None

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.w_q(query), self.num_heads)  # (B, h, T_q, d_k)
        k = split_heads(self.w_k(key), self.num_heads)  # (B, h, T_k, d_k)
        v = split_heads(self.w_v(value), self.num_heads)  # (B, h, T_k, d_k)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, h, T_q, T_k)
        weights = masked_softmax(scores, mask)
        self.attn_weights = weights.detach()
        return self.w_o(merge_heads(self.dropout(weights) @ v))  # (B, T_q, d_model)
'''

MHA_HEAD_LOOP = '''
class MultiHeadAttention(nn.Module):
    """One head at a time with einsum, masked with torch.where, no validation."""

    def __init__(self, d_model, num_heads, dropout=0.0):
        super().__init__()
        self.h, self.d_k = num_heads, d_model // num_heads
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))
        self.attn_weights = None

    def forward(self, query, key, value, mask=None):
        q, k, v = self.w_q(query), self.w_k(key), self.w_v(value)
        heads, maps = [], []
        for i in range(self.h):
            cols = slice(i * self.d_k, (i + 1) * self.d_k)
            scores = torch.einsum("bqd,bkd->bqk", q[..., cols], k[..., cols]) / self.d_k ** 0.5
            if mask is not None:
                m = mask.expand(mask.size(0), self.h, *mask.shape[2:])[:, i] if mask.size(1) > 1 else mask[:, 0]
                scores = torch.where(m, scores, torch.tensor(float("-inf"), dtype=scores.dtype))
                w = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
            else:
                w = torch.softmax(scores, dim=-1)
            maps.append(w)
            heads.append(w @ v[..., cols])  # (B, T_q, d_k)
        self.attn_weights = torch.stack(maps, dim=1).detach()  # (B, h, T_q, T_k)
        return self.w_o(torch.cat(heads, dim=-1))
'''


def notebook(*sources):
    """The objects of ``sources`` defined in one namespace, like a notebook kernel."""
    return notebook_namespace({"np": np, "math": math, "torch": torch, "nn": nn, "F": F, "masked_softmax": solutions.masked_softmax}, *sources)


@pytest.mark.parametrize("source", [SPLIT_UNFLATTEN, SPLIT_SLICES], ids=["unflatten", "slices"])
def test_more_valid_split_heads_styles_earn_full_marks(source):
    accepted("split_heads", notebook(source)["split_heads"])


@pytest.mark.parametrize("source", [MERGE_FLATTEN, MERGE_CONTIGUOUS_VIEW], ids=["flatten", "contiguous-view"])
def test_more_valid_merge_heads_styles_earn_full_marks(source):
    accepted("merge_heads", notebook(source)["merge_heads"])


def test_a_notebook_module_with_its_own_split_and_merge_earns_full_marks():
    accepted("MultiHeadAttention", notebook(SPLIT_SLICES, MERGE_FLATTEN, MHA_NOTEBOOK)["MultiHeadAttention"])


def test_a_head_by_head_einsum_module_without_validation_earns_full_marks():
    report = accepted("MultiHeadAttention", notebook(MHA_HEAD_LOOP)["MultiHeadAttention"])
    assert report.advice  # d_model=10, 4 heads: advice only


# --------------------------------------------------------------------------- half-right answers: partial credit


def test_split_heads_without_the_named_error_loses_only_that_part():
    partly("split_heads", split_no_check, ["shapes and head order"],
           ["d_model % num_heads != 0 raises ValueError"], "should raise ValueError", "RuntimeError")


def test_split_heads_without_transpose_keeps_the_error_part():
    partly("split_heads", split_no_transpose, ["d_model % num_heads != 0 raises ValueError"],
           ["shapes and head order"], "without a transpose")


def test_merge_heads_without_transpose_keeps_the_shape_part():
    partly("merge_heads", merge_no_transpose, ["shape (B, T, h·d_k)"], ["heads concatenated in order"],
           "transpose(1, 2) first")


@pytest.mark.parametrize("mistake, missed, words", [
    ("no_weights", ["attn_weights"], "attn_weights is not set"),
    ("averaged_weights", ["attn_weights"], "averaged over the heads"),
    ("inverted_mask", ["cross-attention and masks"], "polarity"),
    ("nan_rows", ["cross-attention and masks"], "NaN"),
    ("keys_from_query", ["cross-attention and masks"], "w_k(key)"),
    # w_o is a rule of "self-attention" (MultiHead = Concat(heads) W_O): the masked cases accept it
    ("no_w_o", ["self-attention"], "w_o is missing"),
])
def test_multi_head_attention_mistakes_cost_their_part(mistake, missed, words):
    parts = ["layers w_q, w_k, w_v, w_o", "self-attention", "cross-attention and masks", "attn_weights"]
    partly("MultiHeadAttention", make_mha(mistake), [p for p in parts if p not in missed], missed, words)


# --------------------------------------------------------------------------- one mistake charged once


@pytest.mark.parametrize("wrong, culprit", [(SPLIT_NO_TRANSPOSE, "split_heads"), (UNFINISHED_MERGE, "merge_heads")],
                         ids=["wrong-split", "unfinished-merge"])
def test_a_failing_helper_is_charged_once(wrong, culprit):
    sources = {"split_heads": SPLIT_UNFLATTEN, "merge_heads": MERGE_FLATTEN, culprit: wrong}
    ns = notebook(sources["split_heads"], sources["merge_heads"], MHA_NOTEBOOK)
    assert not check_report(culprit, ns[culprit], hidden=True).passed
    report = check_report("MultiHeadAttention", ns["MultiHeadAttention"], hidden=True)
    assert report.passed, report.render("MultiHeadAttention")
    assert_noted(report.notes, "MultiHeadAttention", culprit)
    assert ns[culprit] is not getattr(solutions, culprit)
