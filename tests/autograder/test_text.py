"""Scores and tables as text (``autograder/text.py``), shared by every report and the student package."""
from autograder.text import MESSAGE_WIDTH, score_text, table


def test_scores_read_without_a_trailing_zero_and_at_most_four_decimals():
    assert [score_text(x) for x in (2.0, 0, 1.5, 1 / 3, 2.00004, 2.00006, -0.5)] == \
        ["2", "0", "1.5", "0.3333", "2", "2.0001", "-0.5"]


def test_table_pads_columns_to_the_widest_cell_and_strips_trailing_spaces():
    out = table([["softmax", "3/3", "passed", "ok"], ["self_attention", "0/4", "failed", "wrong axis"]],
                ["exercise", "points", "status", "message"])
    assert out.splitlines() == [
        "exercise        points  status  message",
        "--------------  ------  ------  ----------",
        "softmax         3/3     passed  ok",
        "self_attention  0/4     failed  wrong axis",
    ]


def test_a_long_message_is_kept_whole_but_does_not_widen_the_rule():
    message = "x" * (MESSAGE_WIDTH + 50)
    lines = table([["a", message]], ["exercise", "message"]).splitlines()
    assert lines[1] == "--------  " + "-" * MESSAGE_WIDTH
    assert lines[2].endswith(message)
