"""The batch's results in nbgrader's own gradebook, readable by nbgrader's tools."""
from __future__ import annotations

import csv
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from autograder.journal import Graded
from autograder.scores import ExerciseScore, Status
from autograder.submissions import Submission
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
        rows.append(ExerciseScore(student, CHAPTER, grade_id[5:], points if ok else 0.0, points,
                                  Status.PASSED if ok else Status.FAILED,
                                  "" if ok else "the output has the wrong values", grade_id=grade_id))
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


def test_hand_grades_and_comments_are_read_back_and_never_overwritten(tmp_path, source):
    db = tmp_path / "gradebook.db"
    tests = _tests(source)
    first, second = tests[0][0], tests[1][0]
    write_gradebook(db, {CHAPTER: source}, [_graded(source, "ann", set())])
    with alembic_on_path(), _open(db) as gb:  # what the formgrader writes
        grade = gb.find_grade(first, CHAPTER, CHAPTER, "ann")
        grade.manual_score, grade.extra_credit = 0.5, 0.25
        gb.find_grade(second, CHAPTER, CHAPTER, "ann").extra_credit = 1.0
        gb.find_comment(first[5:], CHAPTER, CHAPTER, "ann").manual_comment = "see me"
        gb.db.commit()
    recorded = write_gradebook(db, {CHAPTER: source}, [_graded(source, "ann", {g for g, _ in tests})])
    ann = recorded[("ann", CHAPTER)]
    assert ann.grades[first] == {"auto_score": tests[0][1], "manual_score": 0.5, "extra_credit": 0.25,
                                 "score": 0.75}
    assert ann.grades[second]["score"] == tests[1][1] + 1.0  # auto score plus extra credit
    assert ann.comments == {first[5:]: "see me"}
    assert ann.raw_score == pytest.approx(sum(p for _, p in tests) - tests[0][1] + 0.75 + 1.0)
    assert (ann.late_seconds, ann.penalty, ann.score) == (0.0, 0.0, ann.raw_score)
    with alembic_on_path(), _open(db) as gb:
        assert gb.find_comment(first[5:], CHAPTER, CHAPTER, "ann").auto_comment == "passed"


@pytest.mark.parametrize("method,penalty", [("none", 0.0), ("zero", None)])
def test_late_penalty_follows_nbgraders_late_submission_plugin(tmp_path, source, method, penalty):
    from traitlets.config import Config

    config = Config()
    config.LateSubmissionPlugin.penalty_method = method
    tests = _tests(source)
    results = [_graded(source, "early", {tests[0][0]}, timestamp="2026-11-20 16:59:00 UTC"),
               _graded(source, "late", {tests[0][0]}, timestamp="2026-11-20 19:00:00 Europe/Berlin")]
    recorded = write_gradebook(tmp_path / "gradebook.db", {CHAPTER: source}, results,
                               duedate="2026-11-20 17:00:00 UTC", config=config)
    early, late = recorded[("early", CHAPTER)], recorded[("late", CHAPTER)]
    assert (early.late_seconds, early.penalty) == (0.0, 0.0)
    assert late.late_seconds == 3600.0  # 19:00 in Berlin is 18:00 UTC
    want = late.raw_score if penalty is None else penalty  # "zero": the penalty is the whole score
    assert late.penalty == want and late.score == late.raw_score - want
    with alembic_on_path(), _open(db := tmp_path / "gradebook.db") as gb:
        assert gb.find_submission_notebook(CHAPTER, CHAPTER, "late").late_submission_penalty == (
            None if method == "none" else want)
        assert str(gb.find_assignment(CHAPTER).duedate) == "2026-11-20 17:00:00"
    assert db.is_file()


def test_a_due_date_must_be_a_date():
    from autograder.extensions import parse_duedate

    assert str(parse_duedate("2026-11-20 18:00:00 Europe/Berlin")) == "2026-11-20 17:00:00"
    with pytest.raises(ValueError, match="expected a date and time"):
        parse_duedate("friday")
