"""Scores and tables as text (``autograder/text.py``), shared by every report and the student package."""
from autograder.text import MESSAGE_WIDTH, check_table, check_verdict, csv_cell, csv_text, csv_uncell, score_text, table


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


def test_check_prints_one_table_and_one_verdict_for_both_commands():
    rows = [{"exercise": "softmax", "score": 3.0, "max_score": 3.0, "status": "passed"},
            {"exercise": "self_attention", "score": 1.5, "max_score": 4.0, "status": "partial"}]
    assert check_table(rows, ["ok", "wrong axis"]).splitlines()[2:] == [
        "softmax         3/3     passed   ok",
        "self_attention  1.5/4   partial  wrong axis",
    ]
    assert check_verdict(rows) == ("1 of 2 exercises pass the visible checks (the hidden checks, run when "
                                   "grading, test more cases).", 1)
    assert check_verdict(rows[:1])[1] == 0
    assert check_verdict([])[1] == 1  # nothing checked is not a pass


def test_csv_text_quotes_every_field_and_guards_formula_starts_after_any_separator():
    text = csv_text(["id", "reason"], [["=1+1", "raised ValueError: a;=7*6, -2 and\t@x"], ["ann", "1.5"]])
    assert text.splitlines() == [
        '"id","reason"',
        '"\'=1+1","raised ValueError: a;\'=7*6, \'-2 and\t\'@x"',
        '"ann","1.5"',
    ]
    assert csv_uncell(csv_cell("raised ValueError: a;=7*6, -2 and\t@x")) == "raised ValueError: a;=7*6, -2 and\t@x"
    assert csv_cell("values - expected, 1e-3") == "values - expected, 1e-3"  # no separator right before: text
