"""Scores and tables as text (``autograder/text.py``), shared by every report and the student package."""
from autograder.text import MESSAGE_WIDTH, check_report, check_table, check_verdict, csv_cell, csv_text, csv_uncell, score_text, table


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


def test_check_report_gives_each_missed_part_its_diagnosis_then_notes_advice_and_verdict():
    rows = [{"exercise": "softmax", "score": 3.0, "max_score": 3.0, "status": "passed", "message": "", "parts_line": "",
             "notes": ["float64 in, float32 out"], "advice": []},
            {"exercise": "self_attention", "score": 1.5, "max_score": 4.0, "status": "partial",
             "message": "values: wrong axis\nscaling: divided by d_k, not sqrt(d_k)",
             "parts_line": "values 0/2 · scaling 0/1 · shapes 1.5/1.5", "notes": [],
             "advice": ["raise ValueError for a 1-D input\n(second line not shown)", " "]}]
    text, status = check_report(rows)
    assert status == 1
    assert text.splitlines()[2:4] == ["softmax         3/3     passed   ok",
                                      "self_attention  1.5/4   partial  values: wrong axis"]
    assert text.splitlines()[4:] == [
        "  note on softmax: float64 in, float32 out",
        "",
        "self_attention: values 0/2 · scaling 0/1 · shapes 1.5/1.5",
        "  scaling: divided by d_k, not sqrt(d_k)",
        "  advice on self_attention (no points): raise ValueError for a 1-D input",
        "",
        "1 of 2 exercises pass the visible checks (the hidden checks, run when grading, test more cases).",
    ]
    assert check_report(rows[:1])[1] == 0
