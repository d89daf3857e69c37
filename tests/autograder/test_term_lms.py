"""The roster and the LMS gradebook files (``export --lms canvas|moodle``), read back by
the column rules Canvas and Moodle document for their grade import."""
from __future__ import annotations

import csv
import io
import re

import pytest

from autograder.cli import main
from autograder.lms import CANVAS_FIXED, ExportError, lms_export, parse_assignment_ids
from autograder.results import ClassResults, SubmissionGrade
from autograder.roster import RosterError, read_roster

ROSTER = """Student,Name,Email,Canvas ID,SIS User ID,Login,Section
ada,Ada Lovelace,ada@uni.edu,101,S1,alove,A
alan,Alan Turing,alan@uni.edu,102,S2,aturing,B
grace,Grace Hopper,grace@uni.edu,103,S3,ghopper,A
"""


def _results() -> ClassResults:
    return ClassResults(submissions=[
        SubmissionGrade("ada", "04_self_attention", "complete", 10.0, 10.0, 10.0),
        SubmissionGrade("ada", "05_multi_head_attention", "incomplete", 6.5, 12.0, 7.5, 3600.0, 1.0),
        SubmissionGrade("alan", "04_self_attention", "incomplete", 4.0, 10.0, 4.0),
        SubmissionGrade("alan", "05_multi_head_attention", "not submitted", 0.0, 12.0),
        SubmissionGrade("mallory", "04_self_attention", "complete", 10.0, 10.0, 10.0),  # not in the roster
    ])


def canvas_rules(text: str) -> list[dict]:
    """Read a Canvas gradebook import as Canvas documents it: the fixed identity columns
    first, assignment columns ``Name (id)`` (or a bare name: a new assignment), an optional
    ``Points Possible`` row, a numeric ID on every student row, scores numbers or blank."""
    rows = list(csv.reader(io.StringIO(text)))
    header = rows[0]
    assert header[:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
    assignments = header[5:]
    for name in assignments:
        assert re.fullmatch(r".+ \(\d+\)|[^()]+", name), name
    body = rows[1:]
    points = None
    if body and body[0][0].strip() == "Points Possible":
        points = [float(x) for x in body[0][5:]]
        body = body[1:]
    students = []
    for row in body:
        assert len(row) == len(header)
        assert row[1].isdigit(), f"Canvas matches on ID: {row}"
        scores = {}
        for i, cell in enumerate(row[5:]):
            if cell != "":
                value = float(cell)
                assert 0 <= value <= (points[i] if points else float("inf"))
                scores[assignments[i]] = value
        students.append({"id": row[1], "sis": row[2], "section": row[4], "scores": scores})
    return students


def test_roster_reads_aliases_and_rejects_duplicates(tmp_path):
    path = tmp_path / "roster.csv"
    path.write_text(ROSTER, encoding="utf-8")
    roster = read_roster(path)
    assert [s.id for s in roster.students] == ["ada", "alan", "grace"]
    assert roster.get("ada").lms_id == "101" and roster.get("ada").sortable_name == "Lovelace, Ada"
    assert roster.find(email="ALAN@uni.edu").id == "alan"
    assert roster.find(sis_id="S3").id == "grace"
    assert roster.find(name="grace  hopper").id == "grace"
    assert roster.find(lms_id="999") is None
    path.write_text(ROSTER + "ada2,Ada Two,ada@UNI.edu,104,S4,a2,A\n", encoding="utf-8")
    with pytest.raises(RosterError, match=r"line 5: email 'ada@UNI.edu' is already on line 2"):
        read_roster(path)
    path.write_text("Name,Email\nAda,ada@uni.edu\n", encoding="utf-8")
    with pytest.raises(RosterError, match="no 'id' column"):
        read_roster(path)


def test_a_spreadsheets_roster_keeps_its_line_numbers(tmp_path):
    """A byte-order mark, CRLF line ends and a quoted name holding a line break (as Excel writes
    them): read whole, and a message names the line of the file, not the count of rows."""
    path = tmp_path / "roster.csv"
    text = 'id,name,email\r\nada,"Ada\r\nLovelace",ada@uni.edu\r\n\r\nalan,Alan,ada@uni.edu\r\n'
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    with pytest.raises(RosterError, match=r"roster .*roster.csv, line 5: email 'ada@uni.edu' is already on line 2"):
        read_roster(path)
    path.write_bytes(b"\xef\xbb\xbf" + text.replace("alan,Alan,ada@", "alan,Alan,alan@").encode())
    assert [s.name for s in read_roster(path).students] == ["Ada\nLovelace", "Alan"]
    path.write_bytes(b"")
    with pytest.raises(RosterError, match="is empty: expected a header row with an 'id' column"):
        read_roster(path)
    path.write_bytes(b"id\xff\n")
    with pytest.raises(RosterError, match="cannot be read"):
        read_roster(path)


def test_canvas_export_reads_back_by_canvas_rules(tmp_path):
    (tmp_path / "roster.csv").write_text(ROSTER, encoding="utf-8")
    roster = read_roster(tmp_path / "roster.csv")
    export = lms_export(_results(), "canvas", roster,
                        assignment_ids=parse_assignment_ids(["04_self_attention=4401"]))
    students = canvas_rules(export.text)
    by_id = {s["id"]: s for s in students}
    assert set(by_id) == {"101", "102", "103"}
    assert by_id["101"]["scores"] == {"04_self_attention (4401)": 10.0, "05_multi_head_attention": 6.5}
    assert by_id["102"]["scores"] == {"04_self_attention (4401)": 4.0}  # not submitted: left blank
    assert by_id["103"]["scores"] == {}
    assert export.unknown == ["mallory"] and export.missing == ["grace"]
    assert any("mallory" in line and "NOT exported" in line for line in export.problems())
    assert list(csv.reader(io.StringIO(export.text)))[0][:5] == CANVAS_FIXED
    zero = lms_export(_results(), "canvas", roster, missing="zero")
    assert {s["id"]: s for s in canvas_rules(zero.text)}["103"]["scores"] == {
        "04_self_attention": 0.0, "05_multi_head_attention": 0.0}


def test_moodle_export_reads_back_by_moodle_rules(tmp_path):
    (tmp_path / "roster.csv").write_text(ROSTER.replace("grace@uni.edu", ""), encoding="utf-8")
    roster = read_roster(tmp_path / "roster.csv")
    export = lms_export(_results(), "moodle", roster, chapters=["04_self_attention", "05_multi_head_attention"])
    rows = list(csv.DictReader(io.StringIO(export.text)))
    # Moodle's CSV import: a header row, an identity column mapped to a user field (email), one
    # column per grade item with plain numbers (a '.' decimal point), blank = no change
    assert list(rows[0])[:4] == ["First name", "Last name", "ID number", "Email address"]
    assert [r["Email address"] for r in rows] == ["ada@uni.edu", "alan@uni.edu"]
    assert rows[0]["05_multi_head_attention"] == "6.5" and rows[1]["05_multi_head_attention"] == ""
    assert rows[0]["First name"] == "Ada" and rows[0]["Last name"] == "Lovelace"
    assert export.unmatched == ["grace"]  # no email: Moodle could not match her, and we say so


def test_export_needs_a_roster_and_good_ids():
    with pytest.raises(ExportError, match="needs --roster"):
        lms_export(_results(), "canvas", None)
    with pytest.raises(ExportError, match="CHAPTER=ID"):
        parse_assignment_ids(["04_self_attention=abc"])


def test_export_command(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    _results().write(out)
    (tmp_path / "roster.csv").write_text(ROSTER, encoding="utf-8")
    code = main(["export", str(out), "--lms", "canvas", "--roster", str(tmp_path / "roster.csv"),
                 "--assignment-id", "05_multi_head_attention=4402"])
    captured = capsys.readouterr()
    assert code == 1  # a graded student is not in the roster: said, and the exit status says so
    assert "mallory" in captured.err and "grace" in captured.err
    students = canvas_rules((out / "canvas_grades.csv").read_text(encoding="utf-8"))
    assert {s["id"]: s["scores"] for s in students}["101"]["05_multi_head_attention (4402)"] == 6.5


class FakeAssignment:
    def __init__(self, sent):
        self.sent = sent

    def submissions_bulk_update(self, **kwargs):
        self.sent.append(kwargs["grade_data"])
        return type("Progress", (), {"id": 77, "workflow_state": "queued"})()


class FakeCourse:
    """What canvasapi's Course offers the push: get_assignment(id)."""

    def __init__(self):
        self.sent: dict[int, list] = {}

    def get_assignment(self, assignment_id):
        return FakeAssignment(self.sent.setdefault(assignment_id, []))


def test_canvas_push_sends_the_file_cells_and_dry_run_sends_nothing(tmp_path, capsys):
    from autograder.lms import canvas_grade_data, push_canvas

    (tmp_path / "roster.csv").write_text(ROSTER, encoding="utf-8")
    roster = read_roster(tmp_path / "roster.csv")
    chapters = ["04_self_attention", "05_multi_head_attention"]
    ids = parse_assignment_ids(["04_self_attention=4401", "05_multi_head_attention=4402"])
    data = canvas_grade_data(_results(), roster, chapters, ids)
    assert data == {"4401": {"101": {"posted_grade": "10"}, "102": {"posted_grade": "4"}},
                    "4402": {"101": {"posted_grade": "6.5"}}}  # blank cells are not sent
    course = FakeCourse()
    assert push_canvas(data, course, dry_run=True)[0].startswith("dry run: assignment 4401 would get 2 grade(s)")
    assert course.sent == {}
    lines = push_canvas(data, course, dry_run=False)
    assert course.sent == {4401: [data["4401"]], 4402: [data["4402"]]} and "Canvas job 77" in lines[0]
    with pytest.raises(ExportError, match="missing for 05_multi_head_attention"):
        canvas_grade_data(_results(), roster, chapters, {"04_self_attention": "4401"})

    out = tmp_path / "out"
    out.mkdir()
    _results().write(out)
    code = main(["export", str(out), "--lms", "canvas", "--roster", str(tmp_path / "roster.csv"), "--dry-run",
                 "--assignment-id", "04_self_attention=4401", "--assignment-id", "05_multi_head_attention=4402",
                 "--chapters", *chapters])
    assert code == 1  # mallory is still not in the roster; the dry run printed and sent nothing
    assert "dry run: assignment 4402 would get 1 grade(s): 101=6.5" in capsys.readouterr().out
    assert main(["export", str(out), "--lms", "canvas", "--roster", str(tmp_path / "roster.csv"), "--push",
                 "--assignment-id", "04_self_attention=4401", "--chapters", "04_self_attention"]) == 2
    assert "CANVAS_API_TOKEN" in capsys.readouterr().err
