"""The journal's one codec and the one fingerprint of "the same grader".

* :func:`autograder.journal.entry_text` / :func:`~autograder.journal.parse_entry` write and
  read an entry, with its version; anything else is refused with a message that names
  the file and what was found. A score, a part, a submission's grade and a notebook's
  scores are checked where they are made, too: one of the wrong shape made in code is
  refused with a :class:`~autograder.scores.ScoreError` naming the field.
* :func:`autograder.fingerprint.grader_fingerprint` changes when the code that judges
  changes (a check, the sandbox's walls, the reference) and not when a view of the
  grades does (the class report, the batch's CSVs, a diagram of the book): shown on a
  copy of the repository's two packages, edited one file at a time.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from autograder import fingerprint, journal
from autograder.results import ClassResults, ResultsError, SubmissionGrade
from autograder.scores import ExerciseScore, NotebookScores, PartScore, ScoreError, Status, SubmissionStatus
from autograder.submissions import Submission

REPO = Path(__file__).resolve().parents[2]


def _graded(tmp_path: Path, wrong: str | None = None) -> journal.Graded:
    rows = [ExerciseScore("ann", "04_self_attention", "softmax", 1.0, 2.0, Status.PARTIAL, "", grade_id="test_softmax",
                          parts=[PartScore("values", 0.0, 1.0, "wrong <b>values</b>", "normalise over the last axis"),
                                 PartScore("shape", 1.0, 1.0)], notes=["advice (no points): a note"])]
    sub = Submission("ann", "04_self_attention", tmp_path / "ann.ipynb")
    return journal.Graded(sub, rows, {"submission_sha256": "ab" * 32, "grader": "g"}, wrong_chapter=wrong)


# One score as the journal writes it (ExerciseScore.to_dict), for the malformed variants below.
_RECORD = {"student": "ann", "chapter": "04_self_attention", "exercise": "softmax", "score": 0.0, "max_score": 2.0,
           "status": "failed", "reason": "", "parts": [], "notes": [], "auto_score": None, "grade_id": "test_softmax",
           "manual_score": None, "extra_credit": None, "comment": ""}


def test_an_entry_reads_back_as_it_was_written(tmp_path):
    graded = _graded(tmp_path, wrong="05_multi_head_attention")
    journal.write_journal(tmp_path, graded)
    entry = journal.read_journal_entry(tmp_path, graded.submission)
    assert entry == journal.JournalEntry(graded.scores, graded.key, "05_multi_head_attention")
    score = entry.scores[0]
    assert isinstance(score, ExerciseScore) and score.status is Status.PARTIAL  # typed, not a dict row
    assert score.parts[0] == PartScore("values", 0.0, 1.0, "wrong <b>values</b>", "normalise over the last axis")
    assert journal.read_journal(tmp_path, graded.submission, graded.key) == entry
    assert journal.read_journal(tmp_path, graded.submission, dict(graded.key, grader="other")) is None
    assert journal.read_journal_entry(tmp_path, Submission("bob", "04_self_attention", None)) is None


@pytest.mark.parametrize("text, words", [
    ("{ not json", "is not JSON"),
    (json.dumps({"version": 3, "scores": [], "key": {}}), "journal version 3, this grader reads version 4"),
    (json.dumps([1, 2]), "journal version 'list'"),
    (json.dumps({"version": 4, "scores": "all passed", "key": {}}), "of the wrong type"),
    (json.dumps({"version": 4, "scores": [], "key": {}, "wrong_chapter": 5}), "of the wrong type"),
    # a version-3 row (the fields grading's old CellScore had) under version 4: no student, no chapter
    (json.dumps({"version": 4, "key": {}, "scores": [{"exercise": "softmax", "grade_id": "test_softmax", "score": 0.0,
                                                      "max_score": 2.0, "status": "missing", "reason": "",
                                                      "parts": [], "notes": []}]}), "cannot be read"),
    (json.dumps({"version": 4, "key": {}, "scores": [_RECORD | {"status": "great"}]}), "status 'great' is none of"),
    (json.dumps({"version": 4, "key": {}, "scores": [_RECORD | {"score": "2"}]}), "score must be a finite number"),
    (json.dumps({"version": 4, "key": {}, "scores": [_RECORD | {"parts": [{"name": "values"}]}]}), "cannot be read"),
    (json.dumps({"version": 4, "key": {}, "scores": [_RECORD | {"notes": "one"}]}), "notes must be a list"),
])
def test_an_entry_of_another_version_or_shape_is_refused_by_name(tmp_path, text, words):
    graded = _graded(tmp_path)
    journal.write_journal(tmp_path, graded)
    path = tmp_path / ".journal" / "ann" / "04_self_attention.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(journal.JournalError, match=words) as caught:
        journal.read_journal_entry(tmp_path, graded.submission)
    assert str(path) in str(caught.value)
    assert journal.read_journal(tmp_path, graded.submission, graded.key) is None  # graded again


def test_results_read_back_typed_and_a_status_that_is_none_is_refused(tmp_path):
    graded = _graded(tmp_path)
    assert graded.status is SubmissionStatus.INCOMPLETE  # a partial exercise
    line = SubmissionGrade("ann", "04_self_attention", graded.status, score=1.0, max_score=2.0, raw_score=1.0)
    results = ClassResults(graded.scores, [line])
    text = results.to_json()
    assert json.loads(text)["submissions"][0]["status"] == "incomplete"  # its word in the file
    back = ClassResults.from_json(text)
    assert back == results and back.submissions[0].status is SubmissionStatus.INCOMPLETE
    assert back.exercises[0].status is Status.PARTIAL
    data = json.loads(text)
    data["submissions"][0]["status"] = "done"
    with pytest.raises(ResultsError, match="submission status 'done' is none of complete, incomplete"):
        ClassResults.from_json(json.dumps(data))
    data["submissions"][0] = dict(line.to_dict(), graded_by="me")
    with pytest.raises(ResultsError, match="no field 'graded_by'"):
        ClassResults.from_json(json.dumps(data))


def _score(**fields) -> ExerciseScore:
    """A partial score of 1 of 2 points over two parts, with ``fields`` changed."""
    base = dict(student="ann", chapter="04_self_attention", exercise="softmax", score=1.0, max_score=2.0,
                status=Status.PARTIAL, reason="",
                parts=[PartScore("values", 0.0, 1.0, "wrong"), PartScore("shape", 1.0, 1.0)])
    return ExerciseScore(**{**base, **fields})


@pytest.mark.parametrize("fields, words", [
    ({"score": 3.0, "status": Status.PASSED, "parts": []},
     "score of 'softmax': score 3.0 is outside 0..2.0 (max_score)"),
    ({"score": -1.0, "status": Status.FAILED, "parts": []}, "score -1.0 is outside 0..2.0"),
    ({"score": float("nan")}, "score must be a finite number, got nan"),
    ({"max_score": -2.0, "score": 0.0, "status": Status.FAILED, "parts": []}, "max_score must not be negative"),
    ({"score": 2.0}, "status 'partial' needs score between 0 and 2.0, got 2.0"),
    ({"status": Status.PASSED}, "status 'passed' needs score 2.0 (max_score), got 1.0"),
    ({"status": Status.MISSING}, "status 'missing' needs score 0, got 1.0"),
    ({"auto_score": 0.0, "manual_score": 1.0}, "status 'partial' needs auto_score between 0 and 2.0, got 0.0"),
    ({"parts": [PartScore("values", 1.0, 1.0)]}, "its parts are worth 1.0 together, not max_score 2.0"),
    ({"parts": [PartScore("values", 0.0, 1.0), PartScore("shape", 0.0, 1.0)]},
     "its parts earned 0.0 together, not score 1.0"),
    ({"parts": [{"name": "values"}]}, "parts must be a list of PartScore"),
    ({"reason": None}, "reason must be text"),
    ({"extra_credit": "1"}, "extra_credit must be a finite number or null"),
    ({"status": "done"}, "status 'done' is none of passed"),
])
def test_a_score_made_in_code_is_refused_by_the_field_it_gets_wrong(fields, words):
    """A score is checked where it is made, not only where one is read from a file."""
    with pytest.raises(ScoreError, match=re.escape(words)):
        _score(**fields)
    # a hand grade is a grader's: the final score is only a number (the checks' stays bounded)
    assert _score(auto_score=1.0, manual_score=2.0, extra_credit=1.0, score=3.0).score == 3.0


@pytest.mark.parametrize("make, words", [
    (lambda: PartScore("values", 1.5, 1.0), "part 'values': score 1.5 is outside 0..1.0 (its points)"),
    (lambda: PartScore("values", 0.0, -1.0), "part 'values': points must not be negative"),
    (lambda: PartScore("", 0.0, 1.0), "a part's name must be non-empty text"),
    (lambda: PartScore("values", 0.0, 1.0, message=None), "part 'values': message must be text"),
    (lambda: SubmissionGrade("ann", "04", "done"), "submission status 'done' is none of"),
    (lambda: SubmissionGrade("ann", "04", "complete", score=2.0, max_score=2.0, raw_score=1.0),
     "the grade of ann/04: score 2.0 is not raw_score 1.0 less the penalty 0.0"),
    (lambda: SubmissionGrade("ann", "04", "complete", score=1.0, raw_score=1.5, penalty=0.5, max_score=-1.0),
     "max_score must not be negative"),
    (lambda: SubmissionGrade("ann", "04", "incomplete", late_seconds=float("inf")), "late_seconds must be a finite"),
    (lambda: SubmissionGrade("ann", "04", "incomplete", late_days_used=1.5), "late_days_used must be a whole number"),
    (lambda: SubmissionGrade("", "04", "incomplete"), "student must be non-empty text"),
    (lambda: SubmissionGrade("ann", "04", "not submitted", submission_sha256="ab" * 32),
     "status 'not submitted' names no notebook"),
    (lambda: SubmissionGrade("ann", "04", "incomplete", submission_sha256=5), "submission_sha256 must be text"),
    (lambda: SubmissionGrade("ann", "04", "complete", wrong_chapter="05"),
     "a notebook of another chapter (wrong_chapter '05') is 'incomplete', not 'complete'"),
    (lambda: SubmissionGrade("ann", "04", "incomplete", wrong_chapter="04"), "wrong_chapter must be another chapter"),
    (lambda: NotebookScores([_score()], wrong_chapter="05"), "wrong_chapter '05' names another chapter"),
    (lambda: NotebookScores([{"score": 1}]), "a notebook's scores must be a list of ExerciseScore"),
])
def test_a_part_a_submission_or_a_notebook_made_in_code_is_refused_by_name(make, words):
    with pytest.raises(ScoreError, match=re.escape(words)):
        make()


def test_what_the_batch_makes_is_accepted():
    """The shapes the grader and the batch make pass: a late, penalised grade; a score
    of floats summed from scaled parts; a missing notebook's; a wrong chapter's."""
    line = SubmissionGrade("ann", "04", "incomplete", score=0.0, max_score=2.0, raw_score=0.25, penalty=0.5,
                           late_seconds=90.0, late_days_used=1, submission_sha256="ab" * 32, wrong_chapter="05")
    assert line.score == 0.0 and line.status is SubmissionStatus.INCOMPLETE
    third = 2.0 / 3.0
    scaled = _score(score=third * 2, parts=[PartScore("a", third, third), PartScore("b", third, third),
                                            PartScore("c", 0.0, third)])
    assert scaled.status is Status.PARTIAL
    missing = _score(score=0.0, status="missing", parts=[])
    assert NotebookScores([missing], wrong_chapter="05").wrong_chapter == "05"


@pytest.fixture(scope="module")
def repo_copy(tmp_path_factory):
    """The repository's ``autograder`` and ``solutions`` packages, copied (no caches)."""
    root = tmp_path_factory.mktemp("repo")
    for package in ("autograder", "solutions"):
        shutil.copytree(REPO / package, root / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return root


def _edited(root: Path, rel: str) -> str:
    """The fingerprint of ``root`` with one line appended to ``rel``, then ``rel`` restored."""
    path = root / rel
    before = path.read_bytes()
    try:
        path.write_bytes(before + b"\n# edited\n")
        return fingerprint.grader_fingerprint(root)
    finally:
        path.write_bytes(before)


JUDGES = ["autograder/confine.py", "autograder/sandbox.py", "autograder/grading.py", "autograder/runner.py",
          "autograder/wire.py", "autograder/untrusted.py", "autograder/checks/ch04_self_attention.py",
          "autograder/checks/base.py", "autograder/scores.py", "solutions/attention.py",
          "solutions/corpora/book_prose_train.txt"]
PRESENTS = ["autograder/report.py", "autograder/batch.py", "autograder/feedback.py", "autograder/cli.py",
            "autograder/shard.py", "autograder/journal.py", "autograder/files.py", "solutions/figures/diagram.py",
            "solutions/figures/ch04.py"]


def test_the_fingerprint_follows_the_code_that_judges_and_nothing_else(repo_copy):
    files = {p.relative_to(repo_copy).as_posix() for p in fingerprint.judging_files(repo_copy)}
    assert set(JUDGES) <= files and not set(PRESENTS) & files
    base = fingerprint.grader_fingerprint(repo_copy)
    assert fingerprint.grader_fingerprint(repo_copy) == base  # deterministic
    for rel in JUDGES:
        assert _edited(repo_copy, rel) != base, f"editing {rel} must change the grader"
    for rel in PRESENTS:
        assert _edited(repo_copy, rel) == base, f"editing {rel} changes no grade"
    assert fingerprint.grader_fingerprint(repo_copy) == base


def test_a_module_the_judge_starts_to_import_joins_the_fingerprint(repo_copy):
    """Nothing is listed by hand: a new module enters once the judging code imports it."""
    new = repo_copy / "autograder" / "tolerance.py"
    new.write_text("RTOL = 1e-5\n", encoding="utf-8")
    grading = repo_copy / "autograder" / "grading.py"
    before = grading.read_bytes()
    try:
        assert new not in fingerprint.judging_files(repo_copy)
        grading.write_bytes(before + b"\n\ndef _tolerance():\n    from .tolerance import RTOL\n    return RTOL\n")
        assert new in fingerprint.judging_files(repo_copy)
    finally:
        grading.write_bytes(before)
        new.unlink()
