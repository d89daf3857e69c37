"""The journal's one codec and the one fingerprint of "the same grader".

* :func:`autograder.journal.entry_text` / :func:`~autograder.journal.parse_entry` write and
  read an entry, with its version; anything else is refused with a message that names
  the file and what was found.
* :func:`autograder.fingerprint.grader_fingerprint` changes when the code that judges
  changes (a check, the sandbox's walls, the reference) and not when a view of the
  grades does (the class report, the batch's CSVs, a diagram of the book): shown on a
  copy of the repository's two packages, edited one file at a time.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from autograder import fingerprint, journal
from autograder.results import ClassResults, ResultsError, SubmissionGrade
from autograder.scores import ExerciseScore, PartScore, Status, SubmissionStatus
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
