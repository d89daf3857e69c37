"""Round trip through the real commands: release → students submit → grade → reports.

Uses the chapter notebooks on disk whose checks exist — the first two, to keep
the suite fast; ``python -m autograder selftest`` (``make selftest``) grades every
chapter — or a generated notebook for chapter 4 when none exists; three students
per chapter: the reference (source)
notebook, the blank released notebook, and a partially wrong one. Student code
runs in the sandbox when bubblewrap works here, else as a plain subprocess.
"""
from __future__ import annotations

import csv
import html
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder.fingerprint import grader_fingerprint
from autograder.bench import make_book, make_submission
from autograder.checks import exercises_of
from autograder.book import chapter_ids, secret_lines

REPO = Path(__file__).resolve().parents[2]
STUDENTS = ("reference", "blank", "wrong")

pytestmark = pytest.mark.slow


def _sandbox_ok() -> bool:
    from autograder.sandbox import check_sandbox

    try:
        check_sandbox()
    except (RuntimeError, OSError):
        return False
    return True


def _run(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "autograder", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, f"autograder {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def page_lines(page: str) -> set[str]:
    """The text lines of an HTML page, tags removed and entities decoded."""
    return {html.unescape(re.sub(r"<[^>]+>", "", ln)).strip() for ln in page.splitlines()}


def _read(path: Path) -> list[dict]:
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def roundtrip_chapters(book: Path = REPO / "book") -> list[str]:
    """The chapters the round trip grades: the first two of ``book`` with checks. Their
    reference and released notebooks are graded here only (test_grading's real-chapter
    test grades the others'), so :func:`test_scores_and_grades` holds its assertions."""
    return [c for c in chapter_ids(book) if exercises_of(c)][:2]


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    root = tmp_path_factory.mktemp("roundtrip")
    book = REPO / "book"
    chapters = roundtrip_chapters(book)
    if not chapters:
        chapters = ["04_self_attention"]
        book = make_book(root, chapters)
    release_dir = root / "release"
    # Drift between notebooks and `solutions` is test_sync.py's failure, not this one's.
    _run("release", "--out", str(release_dir), "--book", str(book), "--chapters", *chapters, "--no-sync-check")
    submitted = root / "submitted"
    sources = {}
    for chapter in chapters:
        source = nbformat.read(str(book / chapter / f"{chapter}.ipynb"), as_version=4)
        sources[chapter] = source
        for student in STUDENTS:
            folder = submitted / student / chapter
            folder.mkdir(parents=True)
            if student == "blank":  # exactly what `release` handed out
                shutil.copy2(release_dir / chapter / f"{chapter}.ipynb", folder / f"{chapter}.ipynb")
            else:
                nbformat.write(make_submission(source, chapter, student), str(folder / f"{chapter}.ipynb"))
    out = root / "out"
    args = ["grade", str(submitted), "--out", str(out), "--book", str(book), "--jobs", "2", "--seed", "3",
            "--no-progress"]
    if not _sandbox_ok():
        args.append("--unsafe-no-sandbox")
    fingerprint = grader_fingerprint()
    proc = _run(*args)
    return {"fingerprint": fingerprint, "out": out, "chapters": chapters, "sources": sources,
            "submitted": submitted, "stdout": proc.stdout, "args": args}


def test_scores_and_grades(graded_class):
    out, chapters = graded_class["out"], graded_class["chapters"]
    grades = {(g["student_id"], g["assignment"]): g for g in _read(out / "grades.csv")}
    scores = _read(out / "scores.csv")
    assert set(grades) == {(s, c) for s in STUDENTS for c in chapters}
    for chapter in chapters:
        ref, blank, wrong = (grades[(s, chapter)] for s in STUDENTS)
        assert float(ref["max_score"]) > 0
        assert ref["score"] == ref["max_score"] and ref["status"] == "complete", ref
        assert blank["score"] == "0" and blank["status"] == "incomplete"
        assert 0 < float(wrong["score"]) < float(wrong["max_score"]), wrong
        rows = [r for r in scores if r["assignment"] == chapter]
        for student in STUDENTS:  # one row per exercise, in the chapter's order
            assert [r["exercise"] for r in rows if r["student_id"] == student] == [
                ex.name for ex in exercises_of(chapter)], (student, chapter)
        for r in rows:
            if r["student_id"] == "blank":  # the released notebook: zero, "not implemented yet" everywhere
                assert r["status"] == "failed" and float(r["score"]) == 0 and "not implemented yet" in r["reason"], r
            if r["student_id"] == "reference":  # the source itself: the sandbox withholds nothing it needs
                assert r["status"] == "passed" and r["reason"] == "", r
                assert float(r["score"]) == float(r["max_score"]) > 0, r
        wrong_rows = [r for r in rows if r["student_id"] == "wrong" and r["status"] != "passed"]
        # a wrong body may still earn the parts it gets right (partial credit), never all
        assert wrong_rows and all(float(r["score"]) < float(r["max_score"]) and r["reason"] for r in wrong_rows)


def test_gradebook_agrees_with_the_csv(graded_class):
    from nbgrader.api import Gradebook

    from autograder.gradebook import alembic_on_path, db_url

    out = graded_class["out"]
    grades = {(g["student_id"], g["assignment"]): float(g["score"]) for g in _read(out / "grades.csv")}
    with alembic_on_path(), Gradebook(db_url(out / "gradebook.db")) as gb:
        seen = {(s.student.id, s.assignment.name): s.score for c in graded_class["chapters"]
                for s in gb.assignment_submissions(c)}
    assert seen == pytest.approx(grades)


def test_feedback_shows_no_hidden_test_and_no_reference(graded_class):
    out = graded_class["out"]
    for chapter, source in graded_class["sources"].items():
        secret = secret_lines(source)
        for student in ("blank", "wrong"):
            page = (out / "feedback" / student / f"{chapter}.html").read_text(encoding="utf-8")
            nb = nbformat.read(str(graded_class["submitted"] / student / chapter / f"{chapter}.ipynb"),
                               as_version=4)
            own = {ln.strip() for c in nb.cells for ln in c.source.splitlines()}
            lines = page_lines(page)
            assert not any("BEGIN HIDDEN TESTS" in ln or "hidden=True" in ln for ln in lines)
            leaked = sorted(lines & (secret - own))
            assert leaked == [], f"{student}/{chapter}: {leaked[:3]}"
        wrong = page_lines((out / "feedback" / "wrong" / f"{chapter}.html").read_text(encoding="utf-8"))
        assert any(ln.endswith("# a bug") for ln in wrong)  # the student's own code is shown


def test_regrading_changes_nothing(graded_class):
    out = graded_class["out"]
    before = {p: p.read_bytes() for p in [out / "scores.csv", out / "grades.csv", *sorted((out / "feedback").rglob("*.html"))]}
    proc = _run(*graded_class["args"])
    if grader_fingerprint() == graded_class["fingerprint"]:  # nobody edited the grading code meanwhile
        assert "graded 0 submission(s)" in proc.stdout
    assert {p: p.read_bytes() for p in before} == before
