"""Tests of the chapter 3 checks: plausible wrong answers are rejected with a hint
that names the mistake, valid answers in other styles earn full marks, half-right
answers earn the parts they get right, an answer that calls a wrong earlier answer
is graded with the reference in its place (that the reference passes and hidden inputs are
fresh: test_checks_registry.py; the other styles in the sandboxed grader: test_checks_sandboxed.py)."""
import functools
import math

import numpy as np
import pytest
import torch
from torch import nn

import check_helpers
from check_helpers import cases_drawn_once  # noqa: F401 (a fixture: each seeded draw made once per process)
from check_helpers import grade_in_sandbox
from check_helpers import accepted
import solutions
from autograder.checks.base import check_report

# One intra-op thread (conftest's fixture; importing check_helpers does not activate its own):
# tiny tensors, and a second thread only spins against the other xdist worker.
pytestmark = pytest.mark.usefixtures("one_torch_thread", "cases_drawn_once")

NAMES = ["sinusoidal_positional_encoding", "PositionalEncoding", "relative_position_matrix"]

rejected = functools.partial(check_helpers.rejected, seed=11)
partly = functools.partial(check_helpers.partly, seed=11)


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


def test_pe_accepting_odd_d_model_loses_the_named_error_part_only():
    partly("sinusoidal_positional_encoding", make_pe(check_odd=False),
           ["shape (max_len, d_model)", "sin/cos pairs (d_model = 2)", "frequencies 1/10000^(2i/d_model)"],
           ["odd d_model raises ValueError"], "should raise ValueError", "d_model % 2")


def test_pe_with_exponent_i_earns_the_shape_pair_and_error_parts():
    partly("sinusoidal_positional_encoding", make_pe(exponent=lambda col: col // 2),
           ["shape (max_len, d_model)", "sin/cos pairs (d_model = 2)", "odd d_model raises ValueError"],
           ["frequencies 1/10000^(2i/d_model)"], "uses i where the paper has 2i")


def test_pe_with_sin_and_cos_swapped_loses_the_pairs_part_alone():
    """Which of sin and cos comes first is the pairs part's rule: the frequencies' cases
    accept the swap (issue 38: one mistake, one part)."""
    partly("sinusoidal_positional_encoding", make_pe(swap=True),
           ["shape (max_len, d_model)", "frequencies 1/10000^(2i/d_model)", "odd d_model raises ValueError"],
           ["sin/cos pairs (d_model = 2)"], "swapped")


def test_a_different_valid_pe_passes():
    def with_exp_log(max_len, d_model):
        if d_model % 2 != 0:
            raise ValueError("d_model must be even")
        position = torch.arange(max_len, dtype=torch.float64)[:, None]
        div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model, dtype=torch.float64)
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        return pe.numpy()

    accepted("sinusoidal_positional_encoding", with_exp_log)


def test_pe_by_stacking_sin_and_cos_earns_full_marks():
    def stacked(max_len, d_model):
        if d_model % 2:
            raise ValueError(f"d_model must be even, got {d_model}")
        angle = np.arange(max_len)[:, None] * 10000.0 ** (-np.arange(0, d_model, 2) / d_model)  # (max_len, d/2)
        return np.stack([np.sin(angle), np.cos(angle)], axis=-1).reshape(max_len, d_model)  # sin, cos interleaved

    report = accepted("sinusoidal_positional_encoding", stacked)
    assert report.notes == [] and report.advice == []


def test_pe_with_python_loops_earns_full_marks():
    def loops(max_len, d_model):
        if d_model % 2 == 1:
            raise ValueError("sin and cos come in pairs: d_model must be even")
        pe = np.zeros((max_len, d_model))
        for pos in range(max_len):
            for i in range(0, d_model, 2):
                angle = pos / math.pow(10000, i / d_model)
                pe[pos, i], pe[pos, i + 1] = math.sin(angle), math.cos(angle)
        return pe

    accepted("sinusoidal_positional_encoding", loops)


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


def test_positional_encoding_without_max_len_check_loses_the_named_error_part_only():
    partly("PositionalEncoding", make_positional(check_len=False),
           ["pe: a buffer, not a parameter", "x + pe[:seq_len]", "dropout on the sum"],
           ["seq_len > max_len raises ValueError"], "should raise ValueError", "max_len")


def test_positional_encoding_with_pe_as_parameter_loses_the_buffer_part_only():
    partly("PositionalEncoding", make_positional(as_parameter=True),
           ["x + pe[:seq_len]", "dropout on the sum", "seq_len > max_len raises ValueError"],
           ["pe: a buffer, not a parameter"], "must not be a parameter")


def test_positional_encoding_with_dropout_before_the_sum_loses_the_dropout_part_only():
    partly("PositionalEncoding", make_positional(dropout_first=True),
           ["pe: a buffer, not a parameter", "x + pe[:seq_len]", "seq_len > max_len raises ValueError"],
           ["dropout on the sum"], "before adding pe")


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


def test_positional_encoding_with_a_float64_persistent_table_earns_full_marks_with_a_note():
    class Float64Table(nn.Module):
        def __init__(self, d_model, max_len=5000, dropout=0.1):
            super().__init__()
            self.register_buffer("pe", torch.from_numpy(solutions.sinusoidal_positional_encoding(max_len, d_model)))
            self.p = dropout

        def forward(self, x):
            if x.shape[-2] > len(self.pe):
                raise ValueError("the sequence is longer than max_len")
            return torch.nn.functional.dropout(x + self.pe[: x.shape[-2]], self.p, self.training)

    report = accepted("PositionalEncoding", Float64Table)
    assert any("float64 where the reference returns float32" in n for n in report.notes)


def test_positional_encoding_with_an_extra_buffer_narrow_and_unsqueeze_earns_full_marks():
    class Narrowed(nn.Module):
        def __init__(self, d_model, max_len=5000, dropout=0.1):
            super().__init__()
            inv_freq = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (d_model / 2,)
            angle = torch.arange(max_len, dtype=torch.float64)[:, None] * inv_freq  # (max_len, d_model / 2)
            self.register_buffer("inv_freq", inv_freq)  # another buffer besides pe: allowed
            self.register_buffer("pe", torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1).float())
            self.dropout = nn.Dropout(dropout)
            self.max_len = max_len

        def forward(self, x):
            seq_len = x.size(1)
            if seq_len > self.max_len:
                raise ValueError(f"seq_len {seq_len} > max_len {self.max_len}")
            return self.dropout(x + self.pe.narrow(0, 0, seq_len).unsqueeze(0))

    accepted("PositionalEncoding", Narrowed)


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


def test_rotation_without_validation_earns_full_marks_with_advice():
    report = accepted("relative_position_matrix", make_rotation(check_odd=False))
    assert any("the reference raises ValueError" in a for a in report.advice)


def test_rotation_with_exponent_i_earns_the_d_model_2_part():
    partly("relative_position_matrix", make_rotation(exponent=lambda i: i), ["one 2x2 rotation by k (d_model = 2)"],
           ["block-diagonal, w_i = 1/10000^(2i/d_model)"], "uses i where the paper has 2i")


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


def test_rotation_from_complex_exponentials_earns_full_marks():
    def complex_rotation(k, d_model):
        w = 10000.0 ** (-np.arange(0, d_model, 2) / d_model)  # (d_model / 2,)
        z = np.exp(1j * k * w)  # cos(k w) + i sin(k w)
        M = np.zeros((d_model, d_model))
        for i, (c, s) in enumerate(zip(z.real, z.imag)):
            M[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[c, s], [-s, c]]
        return M

    accepted("relative_position_matrix", complex_rotation)


def test_rotation_read_off_the_encoding_table_earns_full_marks():
    def from_table(k, d_model):
        pe_k = solutions.sinusoidal_positional_encoding(abs(k) + 1, d_model)[abs(k)]  # (sin k w_i, cos k w_i)
        s, c = np.sign(k) * pe_k[0::2], pe_k[1::2]
        M = np.zeros((d_model, d_model))
        even = np.arange(0, d_model, 2)
        M[even, even], M[even, even + 1], M[even + 1, even], M[even + 1, even + 1] = c, s, -s, c
        return M

    accepted("relative_position_matrix", from_table)


# --------------------------------------------------------------------------- one mistake charged once


WRONG_TABLE = """
def sinusoidal_positional_encoding(max_len, d_model):
    if d_model % 2:
        raise ValueError("d_model must be even")
    angle = np.arange(max_len)[:, None] / 10000 ** (np.arange(0, d_model, 2) / d_model)
    pe = np.zeros((max_len, d_model))
    pe[:, 0::2], pe[:, 1::2] = np.cos(angle), np.sin(angle)  # swapped
    return pe
"""

UNFINISHED_TABLE = """
def sinusoidal_positional_encoding(max_len, d_model):
    raise NotImplementedError()
"""

LATER_ANSWERS = """
class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        table = sinusoidal_positional_encoding(max_len, d_model)
        self.register_buffer("pe", torch.tensor(table, dtype=torch.float32))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        if x.size(1) > self.pe.size(0):
            raise ValueError("sequence longer than max_len")
        return self.dropout(x + self.pe[: x.size(1)])


def relative_position_matrix(k, d_model):
    pe_k = sinusoidal_positional_encoding(abs(k) + 1, d_model)[abs(k)]
    s, c = np.sign(k) * pe_k[0::2], pe_k[1::2]
    M = np.zeros((d_model, d_model))
    even = np.arange(0, d_model, 2)
    M[even, even], M[even, even + 1], M[even + 1, even], M[even + 1, even + 1] = c, s, -s, c
    return M
"""


def notebook_namespace(*sources):
    """The functions of ``sources`` defined in one namespace, as notebook cells are."""
    return check_helpers.notebook_namespace({"np": np, "torch": torch, "nn": nn, "math": math}, *sources)


@pytest.mark.parametrize("earlier", [WRONG_TABLE, UNFINISHED_TABLE], ids=["wrong", "unfinished"])
@pytest.mark.parametrize("name", ["PositionalEncoding", "relative_position_matrix"])
def test_a_later_answer_calling_a_failing_table_is_graded_with_the_reference_table(name, earlier):
    ns = notebook_namespace(earlier, LATER_ANSWERS)
    assert not check_report("sinusoidal_positional_encoding", ns["sinusoidal_positional_encoding"]).passed
    for hidden in (False, True):
        report = check_report(name, ns[name], hidden=hidden)
        assert report.passed and report.score == report.max_score, report.render(name)
        assert report.notes[0].startswith(f"your `{name}` calls your `sinusoidal_positional_encoding`")
        assert "fix `sinusoidal_positional_encoding` first" in report.notes[0]
    assert ns["sinusoidal_positional_encoding"] is not solutions.sinusoidal_positional_encoding  # put back


def test_a_later_answer_that_is_wrong_itself_still_loses_points_with_the_reference_table():
    ns = notebook_namespace(WRONG_TABLE, LATER_ANSWERS.replace("self.dropout(x + self.pe", "(x + self.pe"))
    report = check_report("PositionalEncoding", ns["PositionalEncoding"], hidden=True, seed=11)
    assert [p.name for p in report.parts if not p.earned] == ["dropout on the sum"]
    assert "dropout is missing" in report.render("PositionalEncoding")


# --------------------------------------------------------------------------- the sandboxed grader, on the chapter's notebook

PE_LOOPS = """
def sinusoidal_positional_encoding(max_len, d_model):
    if d_model % 2 == 1:
        raise ValueError(f"d_model must be even, got {d_model}")
    pe = np.zeros((max_len, d_model))
    for pos in range(max_len):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            pe[pos, 2 * i] = math.sin(angle)
            pe[pos, 2 * i + 1] = math.cos(angle)
    return pe
"""

PE_MODULE_TORCH = """
class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)          # (max_len, 1)
        div = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(position * div)
        pe[:, 1::2] = torch.cos(position * div)
        self.register_buffer("pe", pe)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        T = x.shape[1]
        if T > self.pe.shape[0]:
            raise ValueError("longer than max_len")
        return self.dropout(x + self.pe[:T])
"""

ROTATION_COMPLEX = """
def relative_position_matrix(k, d_model):
    w = 1.0 / 10000 ** (np.arange(0, d_model, 2) / d_model)
    z = np.exp(1j * k * w)                           # one rotation per pair, as a complex number
    M = np.zeros((d_model, d_model))
    for i, (c, s) in enumerate(zip(z.real, z.imag)):
        M[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[c, s], [-s, c]]
    return M
"""


@pytest.mark.slow
def test_sandbox_charges_a_wrong_table_once(tmp_path, needs_sandbox):
    later, rotation = LATER_ANSWERS.split("\n\ndef relative_position_matrix")
    scores = grade_in_sandbox(
        "03_positional_encoding", tmp_path,
        sinusoidal_positional_encoding=WRONG_TABLE,
        PositionalEncoding=later,
        relative_position_matrix="def relative_position_matrix" + rotation,
    )
    table = scores["sinusoidal_positional_encoding"]
    assert table.status == "partial" and 0 < table.score < table.max_score, table
    for name in ("PositionalEncoding", "relative_position_matrix"):
        s = scores[name]
        assert (s.status, s.score) == ("passed", s.max_score), s
        assert "fix `sinusoidal_positional_encoding` first" in s.notes[0]
