"""The second class of hidden students (issue 38), graded as a class is: ``python -m
autograder grade`` on a folder of submitted notebooks, in the sandbox, and each
student's feedback page read.

Each row of ``CLASS`` is one student's notebook: the chapter's own notebook with some
solution cells written as a student would (a single mistake, a slip of the keyboard, a
valid style, a blank), and the fair grade of each exercise written down before
grading: the parts it loses, the words its feedback page must hold (the diagnosis of
the mistake, the message of the student's own exception, the note a prompt promises)
and the words it must not hold (the diagnosis of another mistake, a dependency note the
dependency cannot explain). The rows are chapter 1's three students (careful, one
conceptual mistake per exercise, half done) and the list of the issue ("What was seen"): ε on
the standard deviation and the unbiased variance in 7.1, the rotation by -k in 3.3,
``noam_lr``'s warm-up exponent and its warm-up branch alone in 9.2, ``self.dropuot`` in
3.2, ``masked_fill(-inf)`` and an inverted mask in 5.3, ``k.tranpose`` and
``torch.wher`` typos, a typo in a ``MultiHeadAttention`` that calls a wrong
``split_heads``, and 7.4's promised note; and the rows found by probing since: another
name for ``TokenEmbedding``'s table, the merges applied last-learned first, the heads left
unmerged (with a ``MultiHeadAttention`` in the Annotated Transformer's ``linears`` style
calling them) and a masked fill of -20.

Every other exercise of a notebook is the reference's (full marks, no note), so a row
also shows that one student's mistake costs no other exercise.
"""
from __future__ import annotations

import html
import inspect
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest

import fixtures
import solutions
from autograder.checks import get_exercise
from autograder.checks.base import check_report
from autograder.sync import solution_cell_source
from check_helpers import notebook_namespace, stored_checks
from test_mutants import STYLES, notebook_names
from test_part_isolation import (BPE_TOKENIZE_REVERSED, ENCODER_LAYER_WITHOUT_MASK, FFN_WITHOUT_DROPOUT,
                                 FFN_WITHOUT_RELU, LAYER_NORM_UNBIASED, MHA_CALLING_HEADS, MHA_LINEARS, MHA_MINUS_INF,
                                 MHA_TRANPOSE, MHA_WHER, NOAM_WARMUP_HALF, POSITIONAL_ENCODING_TYPO,
                                 TOKEN_EMBEDDING_NAMED_TABLE, jacobian_norms_in_computed_order,
                                 masked_softmax_fill_minus_20, merge_heads_unmerged, rnn_forward_with_h0_row)

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py: tiny tensors, one thread

BOOK = Path(__file__).resolve().parents[2] / "book"
SEED = 7


def stub(name: str) -> str:
    """The released stub of ``name``: its cell with every solution region raising
    ``NotImplementedError`` (a student who has not started it)."""
    return fixtures._blank(solution_cell_source(getattr(solutions, name)))


# --------------------------------------------------------------------------- the cells, as students write them

# Chapter 1: a careful student in her own style, one with a conceptual mistake in each
# exercise (which states H holds, where the identity's norm goes), one half done.
RNN_CAREFUL = '''
def rnn_forward(x, h0, W_xh, W_hh, b_h):
    T, d_h = x.shape[0], h0.shape[0]
    H = np.empty((T, d_h))
    h = h0
    for t in range(T):
        h = np.tanh(x[t] @ W_xh + h @ W_hh + b_h)  # row vectors, as the chapter writes them
        H[t] = h
    return H
'''

JACOBIAN_CAREFUL = '''
def hidden_state_jacobian_norms(H, W_hh):
    T = H.shape[0]
    norms = np.ones(T)
    grad = np.eye(H.shape[1])  # ∂h_{T-1}/∂h_{T-1}
    for t in reversed(range(T - 1)):
        grad = grad @ (np.diag(1 - H[t + 1] ** 2) @ W_hh.T)  # ... @ J_{t+1}
        norms[t] = np.linalg.svd(grad, compute_uv=False).max()
    return norms
'''


def as_cell(answer, name: str) -> str:
    """A function of ``test_part_isolation``'s table as the notebook cell of ``name``."""
    return inspect.getsource(answer).replace(f"def {answer.__name__}(", f"def {name}(", 1)


RNN_WITH_H0_ROW = as_cell(rnn_forward_with_h0_row, "rnn_forward")
MERGE_HEADS_UNMERGED = as_cell(merge_heads_unmerged, "merge_heads")
MASKED_SOFTMAX_FILL_MINUS_20 = as_cell(masked_softmax_fill_minus_20, "masked_softmax")
JACOBIAN_IN_COMPUTED_ORDER = as_cell(jacobian_norms_in_computed_order, "hidden_state_jacobian_norms")

LAYER_NORM_EPS_ON_STD = '''
def layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    std = x.std(axis=-1, keepdims=True)
    return gamma * (x - mean) / (std + eps) + beta  # ε added to the standard deviation
'''

ROTATION_MINUS_K = '''
def relative_position_matrix(k, d_model):
    M = np.zeros((d_model, d_model))
    for i in range(d_model // 2):
        theta = k / 10000 ** (2 * i / d_model)
        c, s = np.cos(theta), np.sin(theta)
        M[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[c, -s], [s, c]]  # the textbook rotation: by -k here
    return M
'''

NOAM_WARMUP_ONLY = '''
def noam_lr(step, d_model, warmup_steps, factor=1.0):
    if step < 1:
        raise ValueError("step must be >= 1")
    return factor * d_model ** -0.5 * step * warmup_steps ** -1.5
'''

# True = blocked (torch.nn.MultiheadAttention's convention): NaN rows where every key is allowed.
MHA_INVERTED_MASK = MHA_MINUS_INF.replace("masked_fill(~mask,", "masked_fill(mask,")

SPLIT_HEADS_WRONG_ORDER = '''
def split_heads(x, num_heads):
    B, T, d_model = x.shape
    if d_model % num_heads != 0:
        raise ValueError("d_model must be divisible by num_heads")
    return x.reshape(B, num_heads, T, d_model // num_heads)  # no transpose: tokens and heads mixed
'''

MHA_CALLING_HEADS_TYPO = MHA_CALLING_HEADS.replace("self.dropout(self.attn", "self.dropuot(self.attn")

assert MHA_INVERTED_MASK.count("masked_fill(mask,") == 1 and MHA_CALLING_HEADS_TYPO.count("dropuot") == 1


# --------------------------------------------------------------------------- the class and its fair grades


@dataclass
class Fair:
    """The fair grade of one exercise: the parts it loses (indices of its parts), words its
    section of the feedback page holds and words it must not hold."""

    lost: set[int] | str = field(default_factory=set)  # "all" for a blank
    said: tuple[str, ...] = ()
    not_said: tuple[str, ...] = ()


@dataclass
class Student:
    id: str
    chapter: str
    cells: dict[str, str]
    fair: dict[str, Fair]


CLASS = [
    Student("rnn-careful", "01_rnn_limitations",
            {"rnn_forward": RNN_CAREFUL, "hidden_state_jacobian_norms": JACOBIAN_CAREFUL},
            {"rnn_forward": Fair(), "hidden_state_jacobian_norms": Fair()}),
    Student("rnn-conceptual", "01_rnn_limitations",
            {"rnn_forward": RNN_WITH_H0_ROW, "hidden_state_jacobian_norms": JACOBIAN_IN_COMPUTED_ORDER},
            # which states H holds is the first part's rule: the states' values are right
            {"rnn_forward": Fair({0}, said=("H has h0 as its first row",)),
             # where the identity's 1 goes is the first part's rule: the products are right
             "hidden_state_jacobian_norms": Fair({0}, said=("the norms are in the wrong order",))}),
    Student("rnn-half", "01_rnn_limitations",
            {"rnn_forward": RNN_CAREFUL, "hidden_state_jacobian_norms": stub("hidden_state_jacobian_norms")},
            {"rnn_forward": Fair(), "hidden_state_jacobian_norms": Fair("all", said=("not implemented yet",),
                                                                         not_said=("first",))}),
    Student("pos-enc", "03_positional_encoding",
            {"sinusoidal_positional_encoding": STYLES["sinusoidal_positional_encoding"],  # a float32 table
             "PositionalEncoding": POSITIONAL_ENCODING_TYPO, "relative_position_matrix": ROTATION_MINUS_K},
            {"sinusoidal_positional_encoding": Fair(),
             # the buffer (judged on the constructor) and the length check (raised before the typo) are kept
             "PositionalEncoding": Fair({1, 2}, said=("'PositionalEncoding' object has no attribute 'dropuot'",),
                                        not_said=("its message is not shown",)),
             # the 2-point block part holds the sign fixed: only the 2x2 rotation's part is lost
             "relative_position_matrix": Fair({0}, said=("it rotates by -k",))}),
    Student("mha-minus-inf", "05_multi_head_attention", {"MultiHeadAttention": MHA_MINUS_INF},
            {"MultiHeadAttention": Fair({2}, said=("needs masked_softmax (zeros, not NaN)",))}),
    Student("mha-inverted-mask", "05_multi_head_attention", {"MultiHeadAttention": MHA_INVERTED_MASK},
            {"MultiHeadAttention": Fair({2}, said=("mask polarity inverted",),
                                        not_said=("needs masked_softmax (zeros, not NaN)",))}),
    Student("mha-tranpose", "05_multi_head_attention", {"MultiHeadAttention": MHA_TRANPOSE},
            {"MultiHeadAttention": Fair({1, 2, 3}, said=("'Tensor' object has no attribute 'tranpose'",),
                                        not_said=("its message is not shown", "which fails its check"))}),
    Student("mha-wher", "05_multi_head_attention", {"MultiHeadAttention": MHA_WHER},
            # only the masked cases reach the typo: self-attention without a mask and the kept
            # weights are earned
            {"MultiHeadAttention": Fair({2}, said=("module 'torch' has no attribute 'wher'",),
                                        not_said=("its message is not shown", "which fails its check"))}),
    Student("heads-typo", "05_multi_head_attention",
            {"split_heads": SPLIT_HEADS_WRONG_ORDER, "MultiHeadAttention": MHA_CALLING_HEADS_TYPO},
            {"split_heads": Fair({0}, said=("without a transpose",)),
             # the typo is its own mistake: the wrong split_heads it calls does not explain it
             "MultiHeadAttention": Fair({1, 2, 3}, said=("'MultiHeadAttention' object has no attribute 'dropuot'",),
                                        not_said=("fix `split_heads` first", "its message is not shown"))}),
    Student("heads-calls", "05_multi_head_attention",
            {"split_heads": SPLIT_HEADS_WRONG_ORDER, "MultiHeadAttention": MHA_CALLING_HEADS},
            {"split_heads": Fair({0}, said=("without a transpose",)),
             "MultiHeadAttention": Fair(said=("calls your `split_heads`, which fails its check",
                                              "fix `split_heads` first"))}),
    Student("norm-eps", "07_add_and_norm",
            {"layer_norm": LAYER_NORM_EPS_ON_STD, "PositionwiseFeedForward": FFN_WITHOUT_RELU},
            {"layer_norm": Fair({2}, said=("ε belongs inside the square root",)),
             # the dropout part's cases hold the activation fixed
             "PositionwiseFeedForward": Fair({0}, said=("the ReLU between the two linear layers is missing",)),
             # 7.4's prompt: graded again with the reference feed-forward, "and the feedback says so"
             "EncoderLayer": Fair(said=("calls your `PositionwiseFeedForward`, which fails its check",
                                        "fix `PositionwiseFeedForward` first"))}),
    Student("norm-unbiased", "07_add_and_norm",
            {"layer_norm": LAYER_NORM_UNBIASED, "PositionwiseFeedForward": FFN_WITHOUT_DROPOUT,
             "EncoderLayer": ENCODER_LAYER_WITHOUT_MASK},
            {"layer_norm": Fair({0}, said=("you used the unbiased variance",)),
             "PositionwiseFeedForward": Fair({1}),
             # its own mistake (the mask) is charged; the regrade's note says it scored no more
             "EncoderLayer": Fair({2}, said=("the src_mask was ignored",
                                             "graded again with the reference `PositionwiseFeedForward` in its "
                                             "place it scored no more"),
                                  not_said=("fix `PositionwiseFeedForward` first",))}),
    Student("noam-half", "09_training",
            {"make_decoder_io": stub("make_decoder_io"), "noam_lr": NOAM_WARMUP_HALF,
             "label_smoothing_floor": stub("label_smoothing_floor")},
            {"make_decoder_io": Fair("all", said=("not implemented yet",)),
             # the warm-up part alone: the factor part holds the exponent fixed; the hint names -0.5
             "noam_lr": Fair({0}, said=("not warmup_steps**-0.5",), not_said=("not warmup_steps**-1.",)),
             "label_smoothing_floor": Fair("all", said=("not implemented yet",))}),
    # The rows found by probing (issue 38): the contract's names and the prompt's rules, each
    # charged to the part that states it.
    Student("names-and-order", "02_tokens_and_embeddings",
            {"TokenEmbedding": TOKEN_EMBEDDING_NAMED_TABLE.cell, "bpe_tokenize": BPE_TOKENIZE_REVERSED.cell},
            {"TokenEmbedding": Fair({0}, said=("named `embedding`",)),
             "bpe_tokenize": Fair({0}, said=("apply the merges in the order they were learned",))}),
    Student("heads-unmerged", "05_multi_head_attention",
            {"merge_heads": MERGE_HEADS_UNMERGED, "MultiHeadAttention": MHA_LINEARS.cell},
            {"merge_heads": Fair({0}, said=("transposed but not merged",)),
             # four layers in a ModuleList: only the layers part states their names; the
             # unmerged heads it calls are charged to merge_heads once
             "MultiHeadAttention": Fair({0}, said=("which the contract names", "fix `merge_heads` first"))}),
    Student("fill-minus-20", "06_masking", {"masked_softmax": MASKED_SOFTMAX_FILL_MINUS_20},
            {"masked_softmax": Fair({0}, said=("your masked fill is not below the real scores",))}),
    Student("noam-warmup-only", "09_training", {"noam_lr": NOAM_WARMUP_ONLY},
            # no min and no max in the code: the hint says what the output shows
            {"noam_lr": Fair({1}, said=("the smaller of step**-0.5 and",), not_said=("not the max",))}),
]


# --------------------------------------------------------------------------- grading the class


def submission(student: Student) -> nbformat.NotebookNode:
    """The chapter's own notebook (its locked cells, the reference's other answers) with
    the student's cells."""
    source = nbformat.read(str(BOOK / student.chapter / f"{student.chapter}.ipynb"), as_version=4)
    return fixtures.submission_with(source, **{n: c.strip("\n") for n, c in student.cells.items()})


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory, needs_sandbox):
    """``python -m autograder grade`` on the class (nbgrader's submitted layout), a fixed
    seed of the hidden cases, the sandbox. Returns the output folder."""
    from autograder.cli import main

    root = tmp_path_factory.mktemp("class")
    for student in CLASS:
        fixtures.write_notebook(submission(student),
                                root / "submitted" / student.id / student.chapter / f"{student.chapter}.ipynb")
    out = root / "out"
    # One job: this process's chapter libraries, reference results and font list serve every
    # student (a pool's workers each build their own); test_roundtrip grades with --jobs 2.
    rc = main(["grade", str(root / "submitted"), "--out", str(out), "--seed", str(SEED), "--no-progress",
               "--jobs", "1"])
    assert rc == 0
    return out


def page_sections(page: str) -> dict[str, str]:
    """The text of each exercise's section of a feedback page, without the student's code
    (the ``<pre>`` blocks: a typo shown in the code is not a diagnosis)."""
    sections = {}
    for m in re.finditer(r'<section id="([^"]+)">(.*?)</section>', page, re.S):
        body = re.sub(r"<pre>.*?</pre>", " ", m.group(2), flags=re.S)
        sections[html.unescape(m.group(1))] = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())
    return sections


def test_the_class_covers_the_issues_list():
    """Each student's cells are exercises of their chapter, and every exercise graded
    with a mistake has a fair grade written down."""
    for student in CLASS:
        chapter_exercises = {get_exercise(n).chapter for n in student.cells} | {
            get_exercise(n).chapter for n in student.fair}
        assert chapter_exercises == {student.chapter}, student.id
        assert set(student.cells) <= set(student.fair), student.id
    assert len({s.id for s in CLASS}) == len(CLASS)


@pytest.mark.parametrize("student", CLASS, ids=[s.id for s in CLASS])
def test_the_visible_check_a_hidden_draw_and_the_wheels_check_give_the_fair_parts(student):
    """The same notebooks in one process, as a kernel runs them (every exercise's cell in
    order, the student's or the reference's): the visible check, a hidden draw and the
    student package's check (its stored cases, no reference) each lose exactly the fair
    parts, so what a student sees before handing in is what the grade gives."""
    from autograder.checks import exercises_of

    ns = notebook_names()
    for exercise in exercises_of(student.chapter):
        name = exercise.name
        cell = student.cells.get(name) or solution_cell_source(getattr(solutions, name))
        ns = notebook_namespace(ns, cell)
    for name, fair in student.fair.items():
        want = set(range(len(get_exercise(name).parts))) if fair.lost == "all" else fair.lost
        reports = [check_report(name, ns[name]), check_report(name, ns[name], hidden=True, seed=1)]
        with stored_checks(student.chapter):
            reports.append(check_report(name, ns[name]))
        for where, report in zip(("visible", "a hidden draw", "the wheel's check"), reports):
            lost = {i for i, p in enumerate(report.parts) if not p.earned}
            # the wheel cannot regrade with a reference: the parts that would decide are named
            # "not decided here" with the grade's range, never a lower number alone
            undecided = {i for i, p in enumerate(report.parts) if p in report.undecided_parts()}
            text = f"{student.id} · {name} · {where}: lost {lost}\n{report.render(name)}"
            assert lost - undecided == want - undecided and want <= lost, text
            assert not undecided or ("not decided here" in report.score_label() and where == "the wheel's check"), text


@pytest.mark.slow
@pytest.mark.parametrize("student", CLASS, ids=[s.id for s in CLASS])
def test_each_student_gets_the_fair_grade_and_a_page_naming_the_mistake(graded_class, student):
    """The grade's rows (``results.json``) and the student's feedback page: every
    exercise at its fair parts, the other exercises at full marks; the page's section of
    each exercise holds its diagnosis and none of the words it must not hold."""
    from autograder.report import load_rows

    rows, grades = load_rows(graded_class)
    mine = {r.exercise: r for r in rows if (r.student, r.chapter) == (student.id, student.chapter)}
    page = (graded_class / "feedback" / student.id / f"{student.chapter}.html").read_text(encoding="utf-8")
    sections = page_sections(page)
    assert set(mine) == set(sections), (sorted(mine), sorted(sections))
    for name, row in mine.items():
        fair = student.fair.get(name, Fair())
        everything = set(range(len(get_exercise(name).parts)))
        lost = {i for i, p in enumerate(row.parts) if not p.earned}
        want = everything if fair.lost == "all" else fair.lost
        where = f"{student.id} · {name}: {sections[name]}"
        if fair.lost == "all":
            assert row.score == 0.0, where
        else:
            assert [p.name for p in row.parts] == list(get_exercise(name).parts), where
            assert lost == want, where
            assert row.score == sum(p.points for i, p in enumerate(row.parts) if i not in want), where
        for words in fair.said:
            assert words in sections[name], f"{words!r} not on the page\n{where}"
        for words in fair.not_said:
            assert words not in sections[name], f"{words!r} on the page\n{where}"
        if not fair.said:  # an exercise the student got right, or a part lost with its own hint
            assert not want or all(p.message for p in row.parts if not p.earned), where
    assert grades[(student.id, student.chapter)].score == sum(r.score for r in mine.values())
