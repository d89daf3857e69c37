"""grade_submission end to end: full marks for the reference, zero for the blank
release, deterministic and idempotent grades, the visible-only and unsandboxed modes."""
from __future__ import annotations

import copy

import pytest

import fixtures
from autograder.grading import STATUSES, CellScore, grade_submission

CH04 = ["softmax", "scaled_dot_product_attention", "self_attention"]

# softmax over the wrong axis: wrong on every non-square case, with a diagnosis
WRONG_SOFTMAX = """
def softmax(x, axis=-1):
    x = np.asarray(x, dtype=float)
    e = np.exp(x - np.max(x, axis=0, keepdims=True))
    return e / np.sum(e, axis=0, keepdims=True)
"""


@pytest.fixture(scope="module")
def submissions(tmp_path_factory):
    root = tmp_path_factory.mktemp("subs")
    nb = fixtures.source_notebook("04_self_attention")
    return {
        "reference": fixtures.write_notebook(fixtures.reference_submission(nb), root / "reference.ipynb"),
        "blank": fixtures.write_notebook(fixtures.blank_submission(nb), root / "blank.ipynb"),
        "wrong": fixtures.write_notebook(fixtures.submission_with(nb, softmax=WRONG_SOFTMAX), root / "wrong.ipynb"),
    }


def _table(scores):
    return [(s.exercise, s.grade_id, s.score, s.max_score, s.status, s.reason) for s in scores]


@pytest.mark.slow
def test_reference_scores_full_marks(ch04_source, submissions, needs_sandbox):
    scores = grade_submission(ch04_source, submissions["reference"])
    assert all(isinstance(s, CellScore) for s in scores)
    assert [s.grade_id for s in scores] == [f"test_{n}" for n in CH04]  # notebook order
    assert [(s.status, s.score, s.max_score, s.reason) for s in scores] == [
        ("passed", 1.0, 1.0, ""), ("passed", 2.0, 2.0, ""), ("passed", 3.0, 3.0, "")]


@pytest.mark.slow
def test_blank_release_scores_zero(ch04_source, submissions, needs_sandbox):
    scores = grade_submission(ch04_source, submissions["blank"])
    assert [s.score for s in scores] == [0.0, 0.0, 0.0]
    assert all(s.status == "failed" and s.reason.startswith("not implemented yet") for s in scores)


@pytest.mark.slow
def test_grading_is_deterministic_given_a_seed_and_idempotent(ch04_source, submissions, needs_sandbox):
    first = grade_submission(ch04_source, submissions["wrong"], seed=11)
    again = grade_submission(ch04_source, submissions["wrong"], seed=11)
    assert _table(first) == _table(again)
    assert first[0].status == "failed" and first[0].score == 0
    assert "wrong values" in first[0].reason and "\n" not in first[0].reason
    # the student's softmax is used by the two later exercises, as in the notebook
    assert [s.status for s in first] == ["failed", "failed", "failed"]
    # a fresh hidden seed changes the inputs, never the verdict
    fresh = grade_submission(ch04_source, submissions["wrong"])
    assert [(s.status, s.score) for s in fresh] == [(s.status, s.score) for s in first]
    assert all(s.status in STATUSES for s in first)


@pytest.mark.slow
def test_visible_cases_only(ch04_source, submissions, needs_sandbox):
    scores = grade_submission(ch04_source, submissions["reference"], hidden=False)
    assert [s.status for s in scores] == ["passed"] * 3


@pytest.mark.slow
def test_unsandboxed_mode_grades_the_same(ch04_source, submissions):
    scores = grade_submission(ch04_source, submissions["wrong"], sandbox=False, seed=11)
    assert [(s.status, s.score) for s in scores] == [("failed", 0.0)] * 3
    scores = grade_submission(ch04_source, submissions["reference"], sandbox=False, seed=11)
    assert [s.score for s in scores] == [1.0, 2.0, 3.0]


def test_no_submission_needs_no_sandbox(ch04_source):
    scores = grade_submission(ch04_source, None, sandbox=True)
    assert [(s.status, s.score, s.max_score) for s in scores] == [
        ("missing", 0.0, 1.0), ("missing", 0.0, 2.0), ("missing", 0.0, 3.0)]


def test_unknown_exercise_in_the_source_is_reported_per_cell(ch04_notebook, tmp_path):
    nb = copy.deepcopy(ch04_notebook)
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade_id") == "softmax":
            meta["grade_id"] = "no_such_exercise"
        elif meta.get("grade_id") == "test_softmax":
            meta["grade_id"] = "test_no_such_exercise"
    source = fixtures.write_notebook(nb, tmp_path / "04_self_attention.ipynb")
    sub = copy.deepcopy(nb)
    for name in CH04[1:]:
        sub.cells.remove(fixtures.solution_cell(sub, name))
    scores = grade_submission(source, fixtures.write_notebook(sub, tmp_path / "sub.ipynb"))
    assert scores[0].exercise == "no_such_exercise" and scores[0].status == "error"
    assert "no exercise called 'no_such_exercise'" in scores[0].reason
    assert [s.status for s in scores[1:]] == ["missing", "missing"]


def test_broken_source_notebook_raises(tmp_path):
    source = fixtures.write_notebook("{", tmp_path / "04_self_attention.ipynb")
    with pytest.raises(ValueError, match="source notebook"):
        grade_submission(source, None)


def _chapter_notebooks():
    from autograder.checks import exercises_of
    from autograder.sync import chapter_notebooks

    return [p for p in chapter_notebooks() if exercises_of(p.stem)]


@pytest.mark.slow
def test_real_chapter_notebooks_reference_full_marks_blank_zero(tmp_path, needs_sandbox):
    """Every chapter notebook in book/ whose checks exist: the source itself scores
    full marks, its released form (solution regions blanked) scores zero."""
    from concurrent.futures import ThreadPoolExecutor

    import nbformat

    books = _chapter_notebooks()
    if not books:
        pytest.skip("no chapter notebook with registered checks yet")
    jobs = []
    for path in books:
        blank = fixtures.blank_submission(nbformat.read(str(path), as_version=4))
        jobs.append((path, path, "reference"))
        jobs.append((path, fixtures.write_notebook(blank, tmp_path / path.stem / "blank.ipynb"), "blank"))

    def grade(job):
        source, sub, kind = job
        return source, kind, grade_submission(source, sub, seed=5)

    with ThreadPoolExecutor(max_workers=2) as pool:
        for source, kind, scores in pool.map(grade, jobs):
            assert scores, source
            if kind == "reference":
                assert all(s.status == "passed" and s.score == s.max_score > 0 for s in scores), (source, scores)
            else:
                assert all(s.score == 0 and s.status == "failed" for s in scores), (source, scores)


# --------------------------------------------------------------------------- attribution, without a sandbox


def _outcome(frames=(), **kw):
    from autograder.sandbox import RunOutcome

    base = dict(returncode=0, signal=None, timed_out=False, overflow=False, stdout="", stderr="",
                output_truncated=False, wall_seconds=1.0, frames=list(frames), frame_problem=None)
    base.update(kw)
    return RunOutcome(**base)


def _pending(*names):
    from autograder.grading import _Graded

    return [_Graded(n, "test_" + n, 1.0, {}) for n in names]


def test_frames_are_attributed_to_the_running_cell():
    from autograder.grading import _attribute

    a, b, c = _pending("a", "b", "c")
    frames = [("start", "a", b"", b""), ("result", "a", b"A", b""),
              ("start", "b", b"", b""), ("result", "a", b"forged", b""), ("result", "c", b"forged", b""),
              ("result", "b", b"B", b""), ("start", "c", b"", b""), ("result", "c", b"C", b"")]
    accepted, blamed = _attribute([a, b, c], _outcome(frames))
    assert {i: body for i, (body, _) in accepted.items()} == {0: b"A", 1: b"B", 2: b"C"}
    assert list(blamed) == [1] and "'a'" in blamed[1]


def test_a_second_result_for_the_running_cell_is_blamed_on_it():
    from autograder.grading import _attribute

    cells = _pending("a", "b")
    frames = [("start", "a", b"", b""), ("result", "a", b"forged", b""), ("result", "a", b"A", b""),
              ("start", "b", b"", b""), ("result", "b", b"B", b"")]
    accepted, blamed = _attribute(cells, _outcome(frames))
    assert list(blamed) == [0] and 1 in accepted


@pytest.mark.parametrize("kw, status, fragment", [
    (dict(timed_out=True, returncode=None), "timeout", "did not finish"),
    (dict(signal=24, returncode=None), "timeout", "CPU time"),
    (dict(signal=9, returncode=None), "cheat", "SIGKILL"),
    (dict(signal=2, returncode=None), "cheat", "KeyboardInterrupt"),
    (dict(signal=11, returncode=None), "error", "crashed (SIGSEGV)"),
    (dict(signal=25, returncode=None), "error", "file over"),
    (dict(returncode=0), "cheat", "os._exit"),
    (dict(returncode=1, stderr="Traceback (most recent call last):\nOSError: boom"), "error", "OSError: boom"),
    (dict(overflow=True, returncode=None), "error", "MB of files"),
])
def test_why_the_kernel_stopped(kw, status, fragment):
    from autograder.grading import _collect
    from autograder.sandbox import Limits

    a, b = _pending("a", "b")
    rest = _collect([a, b], _outcome([("start", "a", b"", b"")], **kw), Limits())
    assert rest == [b]  # b runs again in a fresh sandbox
    assert a.result.status == status and fragment in a.result.reason and a.result.score == 0
