"""A small simulated term, end to end, through the CLI as the README's "A term" section
runs it: a roster, a Canvas download (chapter 4) and a Gradescope export (chapter 5),
due dates, an extension and late days, a resubmission regraded with a reason, two copied
submissions among honest ones, the report, and the Canvas and Moodle imports read back.
Student code is graded for real, in the sandbox."""
from __future__ import annotations

import csv
import io
import json
import zipfile

import pytest

from autograder.bench import make_book
from autograder.cli import main
from autograder.results import ClassResults
from autograder.similarity import stub_cells

from test_term_lms import canvas_rules
from test_term_similarity import COPIERS, HONEST, submission_for

CH4, CH5 = "04_self_attention", "05_multi_head_attention"
ROSTER = """id,name,email,lms_id,sis_id,section
ann,Ann Arbor,ann@uni.edu,201,S201,A
ben,Ben Nevis,ben@uni.edu,202,S202,A
cat,Cat Stevens,cat@uni.edu,203,S203,B
cop1,Coco Pie,cop1@uni.edu,204,S204,B
cop2,Cora Pike,cop2@uni.edu,205,S205,B
"""
# ann and ben write their own code, cat too but with a bug, cop1 and cop2 hand in one work
WORK = {"ann": HONEST["honest1"], "ben": HONEST["honest2"],
        "cat": dict(HONEST["honest3"], self_attention="return x"),
        "cop1": COPIERS["copier_a"], "cop2": COPIERS["copier_b"]}
CANVAS_NAMES = {"ann": "arborann", "ben": "nevisben", "cat": "stevenscat", "cop1": "piecoco", "cop2": "pikecora"}
# Canvas zip dates (UTC); chapter 4 is due 2026-11-20 17:00
HANDED_IN = {"ann": (2026, 11, 20, 16, 0, 0), "ben": (2026, 11, 21, 10, 0, 0), "cat": (2026, 11, 20, 19, 0, 0),
             "cop1": (2026, 11, 20, 15, 0, 0), "cop2": (2026, 11, 20, 15, 30, 0)}
GRADESCOPE_META = """\
submission_9001:
  :submitters:
  - :name: Ann Arbor
    :sid: S201
    :email: ann@uni.edu
  :created_at: 2026-11-27 16:00:00.000000000 +00:00
submission_9002:
  :submitters:
  - :name: Ben Nevis
    :sid: S202
    :email: ben@uni.edu
  :created_at: 2026-11-27 12:00:00.000000000 +00:00
submission_9003:
  :submitters:
  - :name: Coco Pie
    :sid: S204
    :email: cop1@uni.edu
  - :name: Cora Pike
    :sid: S205
    :email: cop2@uni.edu
  :created_at: 2026-11-28 09:00:00.000000000 +00:00
  :history:
  - :id: 8990
    :created_at: 2026-11-26 09:00:00.000000000 +00:00
"""


def run(*args: str) -> int:
    return main([str(a) for a in args])


@pytest.mark.slow
def test_a_term_from_downloads_to_lms_files(tmp_path, needs_sandbox, capsys):
    book = make_book(tmp_path / "course", [CH4, CH5])
    stubs = stub_cells(CH4, book)
    roster = tmp_path / "roster.csv"
    roster.write_text(ROSTER, encoding="utf-8")
    # the downloads, as Canvas and Gradescope make them
    canvas = tmp_path / "submissions.zip"
    with zipfile.ZipFile(canvas, "w") as z:
        for i, (student, answers) in enumerate(WORK.items()):
            late = "late_" if student in ("ben", "cat") else ""
            name = f"{CANVAS_NAMES[student]}_{late}{201 + i}_{7000 + i}_{CH4}.ipynb"
            z.writestr(zipfile.ZipInfo(name, date_time=HANDED_IN[student]),
                       json.dumps(submission_for(book, CH4, stubs, answers)))
    export = tmp_path / "assignment_55_export"
    reference5 = (book / CH5 / f"{CH5}.ipynb").read_text(encoding="utf-8")
    for folder in ("submission_9001", "submission_9002", "submission_9003"):
        (export / folder).mkdir(parents=True)
        (export / folder / f"{CH5}.ipynb").write_text(reference5, encoding="utf-8")
    (export / "submission_metadata.yml").write_text(GRADESCOPE_META, encoding="utf-8")
    extensions = tmp_path / "extensions.csv"
    extensions.write_text("student,chapter,due\nben,04_self_attention,2099-01-01 00:00:00 UTC\n", encoding="utf-8")
    sub, out = tmp_path / "submitted", tmp_path / "OUT"

    # 1. submissions in
    assert run("collect", canvas, "--from", "canvas", "--chapter", CH4, "--submitted", sub, "--roster", roster) == 0
    assert run("collect", export, "--from", "gradescope", "--chapter", CH5, "--submitted", sub,
               "--roster", roster) == 0
    assert (sub / "cat" / CH4 / "timestamp.txt").read_text().strip() == "2026-11-20 19:00:00.000000 UTC"
    assert sorted(p.name for p in sub.iterdir() if (p / CH5).is_dir()) == ["ann", "ben", "cop1", "cop2"]

    # the release of chapter 5 would hand ben chapter 4's answers while his extension is open
    assert run("release", "--out", tmp_path / "release", CH5, "--extensions", extensions, "--book", book) == 1
    assert "ben (04_self_attention until 2099-01-01" in capsys.readouterr().err

    # 2. each chapter with its due date, then the term
    late = ["--extensions", extensions, "--late-days", "1", "--book", book, "--no-progress", "--seed", "9"]
    assert run("grade", sub, "--out", out, "--chapters", CH4, "--duedate", "2026-11-20 17:00:00 UTC", *late) == 0
    assert run("grade", sub, "--out", out, "--chapters", CH5, "--duedate", "2026-11-27 17:00:00 UTC", *late) == 0
    assert run("grade", sub, "--out", out, *late) == 0
    results = ClassResults.read(out)
    g = {(s.student, s.chapter): s for s in results.submissions}
    assert g["ben", CH4].extension_seconds > 0 and g["ben", CH4].late_seconds == 0  # the extension
    assert g["cat", CH4].late_days_used == 1 and g["cat", CH4].late_seconds == 0  # 2 h late: a late day
    assert g["cop1", CH5].late_days_used == 1 and g["cop2", CH5].late_days_used == 1  # the group's 16 h
    assert g["cat", CH5].status == "not submitted"
    cat4 = {e.exercise: e for e in results.exercises if (e.student, e.chapter) == ("cat", CH4)}
    assert cat4["self_attention"].score == 0 and cat4["softmax"].score == cat4["softmax"].max_score

    # 3. cat resubmits a fixed notebook (by hand: collect never overwrites); a regrade with its reason
    fixed = submission_for(book, CH4, stubs, HONEST["honest3"])
    (sub / "cat" / CH4 / f"{CH4}.ipynb").write_text(json.dumps(fixed), encoding="utf-8")
    before = tmp_path / "before.json"
    before.write_text((out / "results.json").read_text(encoding="utf-8"), encoding="utf-8")
    capsys.readouterr()
    assert run("grade", sub, "--out", out, *late, "--reason", "regrade request #12") == 0
    assert "1 score(s) changed" in capsys.readouterr().out
    assert run("regrades", out) == 0
    # logged: chapter 5's first run, the term's, the regrade (a first grading is no regrade);
    # one chapter's run changes no other chapter
    assert "3 run(s), 1 change(s)" in capsys.readouterr().out
    page = (out / "report" / "regrades.html").read_text(encoding="utf-8")
    assert "regrade request #12" in page and "cat" in page and "new submission" in page
    assert f"python -m autograder grade {sub} --out {out}" in page  # the command as typed
    assert run("regrades", "--diff", before, out) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("cat · 04_self_attention · self_attention: 0 → ") and "new submission" in lines[0]
    assert lines[-1] == "1 changed score(s)"

    # 4. the copied pair, and only it
    assert run("similarity", sub, "--chapter", CH4, "--book", book, "--to", tmp_path / "similarity.html") == 0
    printed = capsys.readouterr().out
    assert "cop1 · cop2: 100 %" in printed and "1 pair(s) flagged" in printed
    assert printed.count("FLAGGED") == 1

    # the report of the term
    assert run("report", out) == 0
    chapter_page = (out / "report" / f"{CH4}.html").read_text(encoding="utf-8")
    assert "Late and resubmitted" in chapter_page and "(ben: extension" in chapter_page
    term = (out / "report" / "term.html").read_text(encoding="utf-8")
    assert term.count("<svg") == 2 and "<script" not in term

    # the LMS files, read back by their import rules
    final = {(s.student, s.chapter): s.score for s in ClassResults.read(out).submissions}
    assert run("export", out, "--lms", "canvas", "--roster", roster, "--to", tmp_path / "canvas.csv",
               "--assignment-id", f"{CH4}=4401", "--assignment-id", f"{CH5}=4402") == 0
    students = {s["id"]: s["scores"] for s in canvas_rules((tmp_path / "canvas.csv").read_text(encoding="utf-8"))}
    lms_id = {"ann": "201", "ben": "202", "cat": "203", "cop1": "204", "cop2": "205"}
    for student, uid in lms_id.items():
        want = {f"{CH4} (4401)": final[student, CH4]}
        if (student, CH5) in final and student != "cat":
            want[f"{CH5} (4402)"] = final[student, CH5]
        assert students[uid] == want
    assert run("export", out, "--lms", "moodle", "--roster", roster, "--to", tmp_path / "moodle.csv") == 0
    rows = list(csv.DictReader(io.StringIO((tmp_path / "moodle.csv").read_text(encoding="utf-8"))))
    assert {r["Email address"]: r[CH4] for r in rows}["cat@uni.edu"] == f"{final['cat', CH4]:g}"
