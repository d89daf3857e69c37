"""Chapters 3-6 graded through the real sandboxed grader, on each chapter's own
notebook with some solution cells replaced (:func:`check_helpers.grade_in_sandbox`):
answers in other valid styles earn full marks, and a wrong early answer that later
answers call is charged once. The answers are the chapter tests' own
(``test_checks_chNN.py``), where they are also checked in one process."""
import re

import pytest

import test_checks_ch03 as ch03
import test_checks_ch04 as ch04
import test_checks_ch05 as ch05
import test_checks_ch06 as ch06
from check_helpers import assert_charged_once, assert_full_marks, grade_in_sandbox

POINTS = {
    "04_self_attention": {"softmax": 3, "scaled_dot_product_attention": 4, "self_attention": 3},
    "05_multi_head_attention": {"split_heads": 2, "merge_heads": 2, "MultiHeadAttention": 6},
    "06_masking": {"padding_mask": 2, "causal_mask": 2, "decoder_mask": 2, "masked_softmax": 4},
}

# (chapter, {exercise: solution cell}, (exercise, a pattern one of its notes matches) or None)
OTHER_STYLES = [
    ("03_positional_encoding",
     {"sinusoidal_positional_encoding": ch03.PE_LOOPS, "PositionalEncoding": ch03.PE_MODULE_TORCH,
      "relative_position_matrix": ch03.ROTATION_COMPLEX},
     None),
    ("04_self_attention",
     {"softmax": ch04.SOFTMAX_LOOP, "scaled_dot_product_attention": ch04.SDPA_LOOP,
      "self_attention": ch04.SELF_ATTENTION_EINSUM},
     ("softmax", "float64 where the reference returns float32")),
    ("05_multi_head_attention",
     {"split_heads": ch05.SPLIT_SLICES, "merge_heads": ch05.MERGE_CONTIGUOUS_VIEW,
      "MultiHeadAttention": ch05.MHA_HEAD_LOOP},
     ("MultiHeadAttention", r"^advice \(no points\)")),
    ("06_masking",
     {"padding_mask": ch06.PAD_RESHAPE, "causal_mask": ch06.CAUSAL_NOT_TRIU, "decoder_mask": ch06.DEC_LOGICAL_AND,
      "masked_softmax": ch06.MS_LOG_SOFTMAX},
     ("padding_mask", r"^advice \(no points\)")),
]


@pytest.mark.slow
@pytest.mark.parametrize("chapter, cells, note", OTHER_STYLES, ids=[c for c, _, _ in OTHER_STYLES])
def test_sandbox_grades_other_valid_styles_full(tmp_path, needs_sandbox, chapter, cells, note):
    scores = grade_in_sandbox(chapter, tmp_path, **cells)
    assert_full_marks(scores, POINTS.get(chapter))
    if note:
        exercise, pattern = note
        assert any(re.search(pattern, n) for n in scores[exercise].notes), scores[exercise].notes


# (chapter, {exercise: solution cell}, the arguments of assert_charged_once after scores)
CHARGED_ONCE = [
    ("04_self_attention",
     {"softmax": ch04.NAIVE_SOFTMAX, "scaled_dot_product_attention": ch04.SDPA_REFERENCE_STYLE,
      "self_attention": ch04.SELF_ATTENTION_OWN_SDPA},
     dict(culprit="softmax", score=2, parts={"values on random inputs": 1, "any axis": 1, "no overflow at 1e4": 0},
          reason="exp overflowed", callers={"scaled_dot_product_attention": 4}, passed=["self_attention"])),
    ("05_multi_head_attention",
     {"split_heads": ch05.SPLIT_NO_TRANSPOSE, "merge_heads": ch05.MERGE_FLATTEN,
      "MultiHeadAttention": ch05.MHA_NOTEBOOK},
     dict(culprit="split_heads", score=1,
          parts={"shapes and head order": 0, "d_model % num_heads != 0 raises ValueError": 1},
          reason="without a transpose", callers={"MultiHeadAttention": 6}, passed=["merge_heads"])),
    ("06_masking",
     {"padding_mask": ch06.PAD_LONG, "causal_mask": ch06.CAUSAL_NUMPY, "decoder_mask": ch06.DEC_NOTEBOOK},
     dict(culprit="padding_mask", score=1, parts={"shape and bool dtype": 0, "True at real tokens": 1},
          reason="boolean", callers={"decoder_mask": 2}, passed=["causal_mask", "masked_softmax"])),
]


@pytest.mark.slow
@pytest.mark.parametrize("chapter, cells, charged", CHARGED_ONCE, ids=[c for c, _, _ in CHARGED_ONCE])
def test_sandbox_charges_a_wrong_answer_once(tmp_path, needs_sandbox, chapter, cells, charged):
    scores = grade_in_sandbox(chapter, tmp_path, **cells)
    assert_charged_once(scores, **charged)
    for name in charged["passed"]:  # at full marks, without the note: their own answers pass
        assert scores[name].score == POINTS[chapter][name], scores[name]
