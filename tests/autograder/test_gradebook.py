"""The batch's results in nbgrader's own gradebook, readable by nbgrader's tools."""
from __future__ import annotations

import csv
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from autograder.batch import Graded, Submission
from autograder.bench import make_book
from autograder.gradebook import alembic_on_path, db_url, write_gradebook

CHAPTER = "04_self_attention"


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    book = make_book(tmp_path_factory.mktemp("gb"), [CHAPTER])
    return book / CHAPTER / f"{CHAPTER}.ipynb"


def _tests(source: Path) -> list[tuple[str, float]]:
    nb = nbformat.read(str(source), as_version=4)
    return [(c.metadata.nbgrader["grade_id"], float(c.metadata.nbgrader["points"])) for c in nb.cells
            if c.get("metadata", {}).get("nbgrader", {}).get("grade")]


def _graded(source: Path, student: str, passed: set[str], path: Path | None = Path("x.ipynb"),
            timestamp: str | None = None) -> Graded:
    rows = []
    for grade_id, points in _tests(source):
        ok = grade_id in passed
        rows.append({"exercise": grade_id[5:], "grade_id": grade_id, "score": points if ok else 0.0,
                     "max_score": points, "status": "passed" if ok else "failed",
                     "reason": "" if ok else "the output has the wrong values"})
    return Graded(Submission(student, CHAPTER, path, timestamp), rows)


def _open(db: Path) -> Gradebook:
    return Gradebook(db_url(db))


def test_gradebook_holds_the_assignment_and_the_auto_scores(tmp_path, source):
    db = tmp_path / "gradebook.db"
    tests = _tests(source)
    first = tests[0][0]
    results = [
        _graded(source, "ann", {g for g, _ in tests}, timestamp="2026-11-20 10:00:00.000000 UTC"),
        _graded(source, "bob", {first}),
        _graded(source, "cat", set(), path=None),  # did not submit: no nbgrader submission
    ]
    write_gradebook(db, {CHAPTER: source}, results)
    with alembic_on_path(), _open(db) as gb:
        nb = gb.find_notebook(CHAPTER, CHAPTER)
        assert sorted((c.name, c.max_score) for c in nb.grade_cells) == sorted(tests)
        assert {c.name for c in nb.solution_cells} == {g[5:] for g, _ in tests}
        assert {c.name for c in nb.source_cells} >= {"setup"}
        assert sorted(s.id for s in gb.students) == ["ann", "bob"]
        ann = gb.find_submission(CHAPTER, "ann")
        bob = gb.find_submission(CHAPTER, "bob")
        assert ann.score == pytest.approx(sum(p for _, p in tests)) == ann.max_score
        assert bob.score == pytest.approx(dict(tests)[first])
        assert ann.timestamp.year == 2026
        assert not bob.needs_manual_grade
        comment = gb.find_comment(tests[1][0][5:], CHAPTER, CHAPTER, "bob")
        assert comment.auto_comment == "failed: the output has the wrong values"


def test_rewriting_updates_rows_and_keeps_manual_scores(tmp_path, source):
    db = tmp_path / "gradebook.db"
    tests = _tests(source)
    write_gradebook(db, {CHAPTER: source}, [_graded(source, "ann", set())])
    with alembic_on_path(), _open(db) as gb:
        grade = gb.find_grade(tests[0][0], CHAPTER, CHAPTER, "ann")
        grade.manual_score = 0.5  # a grader's override in the formgrader
        gb.db.commit()
    write_gradebook(db, {CHAPTER: source}, [_graded(source, "ann", {g for g, _ in tests})])
    write_gradebook(db, {CHAPTER: source}, [_graded(source, "ann", {g for g, _ in tests})])
    with alembic_on_path(), _open(db) as gb:
        assert len(gb.assignment_submissions(CHAPTER)) == 1
        sub = gb.find_submission_notebook(CHAPTER, CHAPTER, "ann")
        assert len(sub.grades) == len(tests)
        kept = gb.find_grade(tests[0][0], CHAPTER, CHAPTER, "ann")
        assert kept.manual_score == 0.5 and kept.auto_score == tests[0][1]
        assert kept.needs_manual_grade  # nbgrader's rule: a manual score is flagged for review
        assert gb.find_grade(tests[1][0], CHAPTER, CHAPTER, "ann").auto_score == tests[1][1]


def test_nbgrader_export_reads_our_gradebook(tmp_path, source):
    from nbgrader.plugins import CsvExportPlugin

    db = tmp_path / "gradebook.db"
    tests = _tests(source)
    write_gradebook(db, {CHAPTER: source}, [_graded(source, "ann", {tests[0][0]}), _graded(source, "bob", set())])
    dest = tmp_path / "export.csv"
    with alembic_on_path(), _open(db) as gb:
        CsvExportPlugin(to=str(dest)).export(gb)
    with open(dest, encoding="utf-8") as fh:
        rows = {r["student_id"]: r for r in csv.DictReader(fh)}
    assert float(rows["ann"]["score"]) == tests[0][1]
    assert float(rows["bob"]["score"]) == 0.0
    assert float(rows["ann"]["max_score"]) == sum(p for _, p in tests)
