"""Tests of the chapter 3 checks: plausible wrong answers are rejected with a hint
that names the mistake, different valid answers pass, hidden inputs are fresh."""
import functools
import math
import pickle

import numpy as np
import pytest
import torch
from torch import nn

import check_helpers
from check_helpers import assert_reference_passes
from check_helpers import accepted
import solutions
from autograder.checks import get_exercise
from autograder.checks.base import make_rng

NAMES = ["sinusoidal_positional_encoding", "PositionalEncoding", "relative_position_matrix"]

rejected = functools.partial(check_helpers.rejected, seed=11)


@pytest.mark.parametrize("name", NAMES)
def test_reference_passes_visible_and_hidden(name, capsys):
    assert_reference_passes(name, capsys)


@pytest.mark.parametrize("name", NAMES)
def test_hidden_cases_are_fresh_each_run(name):
    ex = get_exercise(name)
    first = ex.cases(make_rng(hidden=True), hidden=True)
    second = ex.cases(make_rng(hidden=True), hidden=True)
    assert len(first) > len(ex.cases(make_rng(hidden=False), hidden=False))
    fingerprint = lambda cases: pickle.dumps([(c.args, c.init) for c in cases])  # noqa: E731
    assert fingerprint(first) != fingerprint(second)


# --------------------------------------------------------------------------- sinusoidal_positional_encoding


def make_pe(swap=False, exponent=lambda col: 2 * (col // 2), check_odd=True, start=0):
    def sinusoidal_positional_encoding(max_len, d_model):
        if check_odd and d_model % 2:
            raise ValueError("d_model must be even")
        pos = np.arange(start, start + max_len)[:, None]
        cols = np.arange(d_model)
        angle = pos / 10000 ** (exponent(cols) / d_model)
        even, odd = (np.cos, np.sin) if swap else (np.sin, np.cos)
        return np.where(cols % 2 == 0, even(angle), odd(angle))

    return sinusoidal_positional_encoding


def test_pe_with_sin_and_cos_swapped_is_rejected():
    rejected("sinusoidal_positional_encoding", make_pe(swap=True), "swapped")


def test_pe_with_exponent_i_is_rejected():
    rejected("sinusoidal_positional_encoding", make_pe(exponent=lambda col: col // 2), "uses i where the paper has 2i")


def test_pe_with_a_frequency_per_column_is_rejected():
    rejected("sinusoidal_positional_encoding", make_pe(exponent=lambda col: col), "own frequency")


def test_pe_from_position_one_is_rejected():
    rejected("sinusoidal_positional_encoding", make_pe(start=1), "positions start at 0")


def test_pe_accepting_odd_d_model_is_rejected():
    def truncating(max_len, d_model):
        return make_pe(check_odd=False)(max_len, d_model)

    rejected("sinusoidal_positional_encoding", truncating, "should raise ValueError", "d_model % 2")


def test_a_different_valid_pe_passes():
    def with_exp_log(max_len, d_model):
        if d_model % 2 != 0:
            raise ValueError("d_model must be even")
        position = torch.arange(max_len, dtype=torch.float32)[:, None]
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        return pe.numpy()  # float32: "floats" in any precision

    accepted("sinusoidal_positional_encoding", with_exp_log)


# --------------------------------------------------------------------------- PositionalEncoding


def make_positional(as_parameter=False, dropout_first=False, use_dropout=True, check_len=True, as_attribute=False):
    class PositionalEncoding(nn.Module):
        def __init__(self, d_model, max_len=5000, dropout=0.1):
            super().__init__()
            table = torch.tensor(solutions.sinusoidal_positional_encoding(max_len, d_model), dtype=torch.float32)
            if as_parameter:
                self.pe = nn.Parameter(table)
            elif as_attribute:
                self.pe = table
            else:
                self.register_buffer("pe", table)
            self.dropout = nn.Dropout(dropout)

        def forward(self, x):
            if check_len and x.size(1) > self.pe.size(0):
                raise ValueError("sequence longer than max_len")
            if dropout_first:
                return self.dropout(x) + self.pe[: x.size(1)]
            if not use_dropout:
                return x + self.pe[: x.size(1)]
            return self.dropout(x + self.pe[: x.size(1)])

    return PositionalEncoding


def test_positional_encoding_with_pe_as_parameter_is_rejected():
    rejected("PositionalEncoding", make_positional(as_parameter=True), "must not be a parameter", "register_buffer")


def test_positional_encoding_with_pe_as_plain_attribute_is_rejected():
    rejected("PositionalEncoding", make_positional(as_attribute=True), "buffer named pe")


def test_positional_encoding_without_dropout_is_rejected():
    rejected("PositionalEncoding", make_positional(use_dropout=False), "dropout is missing")


def test_positional_encoding_with_dropout_before_the_sum_is_rejected():
    rejected("PositionalEncoding", make_positional(dropout_first=True), "before adding pe")


def test_positional_encoding_without_max_len_check_is_rejected():
    rejected("PositionalEncoding", make_positional(check_len=False), "should raise ValueError", "max_len")


def test_a_different_valid_positional_encoding_passes():
    class BatchedTable(nn.Module):
        """pe kept as (1, max_len, d_model), persistent, built in torch."""

        def __init__(self, d_model, max_len=5000, dropout=0.1):
            super().__init__()
            position = torch.arange(max_len)[:, None].double()
            div = 10000.0 ** (torch.arange(0, d_model, 2).double() / d_model)
            table = torch.zeros(max_len, d_model, dtype=torch.float64)
            table[:, 0::2] = torch.sin(position / div)
            table[:, 1::2] = torch.cos(position / div)
            self.register_buffer("pe", table.float()[None])
            self.dropout = nn.Dropout(p=dropout)

        def forward(self, x):
            length = x.shape[1]
            if length > self.pe.shape[1]:
                raise ValueError(f"{length} positions but max_len is {self.pe.shape[1]}")
            return self.dropout(x + self.pe[:, :length])

    accepted("PositionalEncoding", BatchedTable)


# --------------------------------------------------------------------------- relative_position_matrix


def make_rotation(transpose=False, exponent=lambda i: 2 * i, check_odd=True):
    def relative_position_matrix(k, d_model):
        if check_odd and d_model % 2:
            raise ValueError("d_model must be even")
        M = np.zeros((d_model, d_model))
        for i in range(d_model // 2):
            t = k / 10000 ** (exponent(i) / d_model)
            block = np.array([[math.cos(t), math.sin(t)], [-math.sin(t), math.cos(t)]])
            M[2 * i:2 * i + 2, 2 * i:2 * i + 2] = block.T if transpose else block
        return M

    return relative_position_matrix


def test_rotation_transposed_is_rejected():
    rejected("relative_position_matrix", make_rotation(transpose=True), "transposed", "-k")


def test_rotation_with_exponent_i_is_rejected():
    rejected("relative_position_matrix", make_rotation(exponent=lambda i: i), "uses i where the paper has 2i")


def test_rotation_accepting_odd_d_model_is_rejected():
    rejected("relative_position_matrix", make_rotation(check_odd=False), "should raise ValueError")


def test_rotation_identity_is_rejected():
    def identity(k, d_model):
        if d_model % 2:
            raise ValueError("odd")
        return np.eye(d_model)

    rejected("relative_position_matrix", identity, "identity", "k w_i")


def test_a_different_valid_rotation_passes():
    def vectorised(k, d_model):
        if d_model % 2:
            raise ValueError("d_model must be even")
        w = 1.0 / 10000 ** (np.arange(0, d_model, 2) / d_model)  # (d_model / 2,)
        c, s = np.cos(k * w), np.sin(k * w)
        M = np.zeros((d_model, d_model))
        idx = np.arange(0, d_model, 2)
        M[idx, idx], M[idx, idx + 1] = c, s
        M[idx + 1, idx], M[idx + 1, idx + 1] = -s, c
        return M

    accepted("relative_position_matrix", vectorised)
