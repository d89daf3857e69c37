"""``collect --from canvas|gradescope``: realistic downloads turned into nbgrader's folders,
one reason per file, nothing overwritten."""
from __future__ import annotations

import csv
import json
import zipfile

import pytest

from autograder.cli import main
from autograder.collect import CollectError, collect, nbgrader_timestamp, parse_canvas_name
from autograder.gradebook import submission_time
from autograder.roster import read_roster

CH = "04_self_attention"
ROSTER = """id,name,email,lms_id,sis_id,section
ada,Ada Lovelace,ada@uni.edu,101,S1,A
alan,Alan Turing,alan@uni.edu,102,S2,B
grace,Grace Hopper,grace@uni.edu,103,S3,A
kat,Katherine Johnson,kat@uni.edu,104,S4,B
"""


def notebook(tag: str) -> bytes:
    return json.dumps({"cells": [{"cell_type": "code", "source": f"# {tag}", "metadata": {}, "outputs": [],
                                  "execution_count": None}], "metadata": {}, "nbformat": 4,
                       "nbformat_minor": 5}).encode()


def canvas_zip(path, entries):
    with zipfile.ZipFile(path, "w") as z:
        for name, data, when in entries:
            info = zipfile.ZipInfo(name, date_time=when)
            z.writestr(info, data)
    return path


@pytest.fixture
def roster(tmp_path):
    (tmp_path / "roster.csv").write_text(ROSTER, encoding="utf-8")
    return read_roster(tmp_path / "roster.csv")


def test_canvas_names_parse():
    assert parse_canvas_name("lovelaceada_late_101_9001_04_self_attention-2.ipynb") == {
        "name": "lovelaceada", "late": True, "user": "101", "submission": 9001,
        "file": "04_self_attention.ipynb", "copy": 2}
    assert parse_canvas_name("notes.txt") is None


def test_canvas_download(tmp_path, roster):
    download = canvas_zip(tmp_path / "submissions.zip", [
        ("lovelaceada_101_9001_04_self_attention.ipynb", notebook("ada"), (2026, 11, 20, 16, 0, 0)),
        ("turingalan_late_102_9002_04_self_attention.ipynb", notebook("alan v1"), (2026, 11, 21, 9, 0, 0)),
        ("turingalan_late_102_9002_04_self_attention-1.ipynb", notebook("alan v2"), (2026, 11, 21, 10, 30, 0)),
        ("turingalan_late_102_9002_scratch.py", b"print(1)", (2026, 11, 21, 10, 30, 0)),
        ("hoppergrace_103_9003_mine.ipynb", notebook("grace a"), (2026, 11, 20, 12, 0, 0)),
        ("hoppergrace_103_9003_other.ipynb", notebook("grace b"), (2026, 11, 20, 12, 0, 0)),
        ("strangerx_999_9004_04_self_attention.ipynb", notebook("x"), (2026, 11, 20, 12, 0, 0)),
        ("README.txt", b"Canvas", (2026, 11, 20, 12, 0, 0)),
    ])
    submitted = tmp_path / "submitted"
    done = collect("canvas", download, submitted, CH, roster)
    outcome = {f.file: f for f in done.files}
    assert len(outcome) == 8  # one line per file of the download
    ada = submitted / "ada" / CH
    assert json.loads((ada / f"{CH}.ipynb").read_text())["cells"][0]["source"] == "# ada"
    stamp = (ada / "timestamp.txt").read_text().strip()
    assert stamp == "2026-11-20 16:00:00.000000 UTC"
    when, note = submission_time(stamp)  # the grader reads it as nbgrader's timestamp
    assert note == "" and when.hour == 16
    # the re-upload (-1) is the one kept; the first copy and the .py say why not
    assert json.loads((submitted / "alan" / CH / f"{CH}.ipynb").read_text())["cells"][0]["source"] == "# alan v2"
    assert outcome["turingalan_late_102_9002_04_self_attention-1.ipynb"].late
    assert "Canvas marked it late" in outcome["turingalan_late_102_9002_04_self_attention-1.ipynb"].reason
    assert "re-upload" in outcome["turingalan_late_102_9002_04_self_attention.ipynb"].reason
    assert outcome["turingalan_late_102_9002_scratch.py"].reason == "not a notebook (.ipynb)"
    # two notebooks, none named for the chapter: neither is guessed
    assert not (submitted / "grace").exists()
    assert "none is named" in outcome["hoppergrace_103_9003_mine.ipynb"].reason
    assert "not in the roster" in outcome["strangerx_999_9004_04_self_attention.ipynb"].reason
    assert "pattern" in outcome["README.txt"].reason
    log = list(csv.DictReader((submitted / ".collect" / f"canvas_{CH}.csv").open()))
    assert len(log) == 8 and {r["outcome"] for r in log} == {"collected", "skipped"}

    # collected again: unchanged; a different notebook in place is never overwritten
    (ada / f"{CH}.ipynb").write_bytes(notebook("ada edited by hand"))
    again = collect("canvas", download, submitted, CH, roster)
    outcome = {f.file: f for f in again.files}
    assert outcome["lovelaceada_101_9001_04_self_attention.ipynb"].outcome == "refused"
    assert outcome["turingalan_late_102_9002_04_self_attention-1.ipynb"].outcome == "unchanged"
    assert json.loads((ada / f"{CH}.ipynb").read_text())["cells"][0]["source"] == "# ada edited by hand"


GRADESCOPE_META = """\
submission_5001:
  :submitters:
  - :name: Ada Lovelace
    :sid: S1
    :email: ada@uni.edu
  :created_at: 2026-11-20 08:59:00.123456000 -08:00
  :score: 0.0
  :status: processed
  :history: []
submission_5002:
  :submitters:
  - :name: Grace Hopper
    :sid: S3
    :email: grace@uni.edu
  - :name: Katherine Johnson
    :sid: ''
    :email: KAT@uni.edu
  :created_at: 2026-11-20 18:30:00.000000000 +00:00
  :history:
  - :id: 4990
    :created_at: 2026-11-19 10:00:00.000000000 +00:00
submission_5003:
  :submitters:
  - :name: Nobody Known
    :sid: S99
    :email: nobody@uni.edu
  :created_at: 2026-11-20 10:00:00.000000000 +00:00
submission_5004:
  :submitters:
  - :name: Alan Turing
    :sid: S2
    :email: alan@uni.edu
  :created_at: 2026-11-20 10:00:00.000000000 +00:00
"""


def gradescope_export(root):
    base = root / "assignment_777_export"
    (base / "submission_5001").mkdir(parents=True)
    (base / "submission_5001" / f"{CH}.ipynb").write_bytes(notebook("ada gs"))
    (base / "submission_5002" / "work").mkdir(parents=True)
    (base / "submission_5002" / "work" / "attention.ipynb").write_bytes(notebook("group"))
    (base / "submission_5003").mkdir()
    (base / "submission_5003" / f"{CH}.ipynb").write_bytes(notebook("nobody"))
    (base / "submission_5004").mkdir()
    (base / "submission_5004" / "answers.pdf").write_bytes(b"%PDF")
    (base / "submission_5999").mkdir()
    (base / "submission_5999" / f"{CH}.ipynb").write_bytes(notebook("unlisted"))
    (base / "submission_metadata.yml").write_text(GRADESCOPE_META, encoding="utf-8")
    return base


def test_gradescope_export_folder_and_zip(tmp_path, roster):
    base = gradescope_export(tmp_path)
    submitted = tmp_path / "submitted"
    done = collect("gradescope", base, submitted, CH, roster)
    assert (submitted / "ada" / CH / "timestamp.txt").read_text().strip() == "2026-11-20 16:59:00.123456 UTC"
    # a group submission goes to every member (Katherine found by email, case aside)
    for member in ("grace", "kat"):
        assert json.loads((submitted / member / CH / f"{CH}.ipynb").read_text())["cells"][0]["source"] == "# group"
    reasons = {(f.file, f.student): f.reason for f in done.files}
    assert any("group submission of 2" in r and "attempt 2" in r for r in reasons.values())
    assert any("not in the roster" in r for (file, _), r in reasons.items() if "5003" in file)
    assert any(r == "no notebook in this submission" for (file, _), r in reasons.items() if "5004" in file)
    assert any("not listed" in r for (file, _), r in reasons.items() if "5999" in file)
    assert not (submitted / "alan").exists()

    zipped = tmp_path / "export.zip"
    with zipfile.ZipFile(zipped, "w") as z:
        for p in sorted(base.rglob("*")):
            if p.is_file():
                z.write(p, p.relative_to(tmp_path).as_posix())
    again = collect("gradescope", zipped, tmp_path / "from_zip", CH, roster)
    assert [f.outcome for f in again.files] == [f.outcome for f in done.files]


def test_collect_command_and_bad_downloads(tmp_path, capsys):
    (tmp_path / "roster.csv").write_text(ROSTER, encoding="utf-8")
    download = canvas_zip(tmp_path / "s.zip", [
        ("lovelaceada_101_9001_04_self_attention.ipynb", notebook("ada"), (2026, 11, 20, 16, 0, 0))])
    code = main(["collect", str(download), "--from", "canvas", "--chapter", CH,
                 "--submitted", str(tmp_path / "sub"), "--roster", str(tmp_path / "roster.csv")])
    assert code == 0 and "1 collected" in capsys.readouterr().out
    assert main(["collect", str(download), "--from", "canvas", "--chapter", CH, "--submitted", str(tmp_path / "b"),
                 "--roster", str(tmp_path / "roster.csv"), "--zip-timezone", "America/New_York"]) == 0
    assert (tmp_path / "b" / "ada" / CH / "timestamp.txt").read_text().strip() == "2026-11-20 21:00:00.000000 UTC"
    assert main(["collect", str(download), "--from", "canvas", "--chapter", CH, "--submitted", str(tmp_path / "c"),
                 "--zip-timezone", "Mars/Olympus"]) == 2
    (tmp_path / "bad.zip").write_bytes(b"not a zip")
    with pytest.raises(CollectError, match="not a zip"):
        collect("canvas", tmp_path / "bad.zip", tmp_path / "sub", CH)
    assert main(["collect", str(tmp_path / "bad.zip"), "--from", "gradescope", "--chapter", CH,
                 "--submitted", str(tmp_path / "sub")]) == 2


def test_timestamp_format_is_nbgraders():
    import datetime

    from nbgrader.utils import parse_utc

    when = datetime.datetime(2026, 11, 20, 17, 0, tzinfo=datetime.timezone(datetime.timedelta(hours=1)))
    text = nbgrader_timestamp(when)
    assert text == "2026-11-20 16:00:00.000000 UTC"
    assert parse_utc(text) == datetime.datetime(2026, 11, 20, 16, 0)
