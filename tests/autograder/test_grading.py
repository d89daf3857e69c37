"""grade_submission end to end: full marks for the reference, zero for the blank
release, deterministic and idempotent grades, the visible-only and unsandboxed modes."""
from __future__ import annotations

import copy
import json

import pytest

import fixtures
from test_roundtrip import roundtrip_chapters
from walls import cannot_start
from autograder import jobs, library, reference_calls, sandbox, stubs, verdicts
from autograder.cells import GradedCell
from autograder.grading import RunSettings, grade_submission
from autograder.reference_results import reference_results
from autograder.scores import ExerciseScore, NotebookScores, PartScore, Status

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
        "wrong": fixtures.write_notebook(fixtures.submission_with(nb, softmax=WRONG_SOFTMAX), root / "wrong.ipynb"),
    }


@pytest.fixture(scope="module")
def wrong_graded(ch04_source, submissions, needs_sandbox):
    """The chapter-4 submission with the wrong softmax, graded once in the sandbox with the
    hidden cases of seed 11: two regrades, since both attention functions call softmax.

    The budget's clock is a fake one that stands still during runs and jumps a million
    seconds at each start of a regrade's references (``ReferenceCalls._run_worker``):
    a start charged to the budget would spend it on the first regrade. Returns
    ``(scores, the fake clock's reading at the end)``. Read by the determinism test (its
    first grading: the second, with the real clock, must equal it), the charged-once
    test (its ``wrong`` case) and the references'-start test, which graded the same
    notebook each on its own."""
    now = [0.0]
    start_worker = reference_calls.ReferenceCalls._run_worker

    def slow_start(self, fds):
        now[0] += 1e6  # the references' start, by the budget's clock
        start_worker(self, fds)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jobs.Budget, "clock", staticmethod(lambda: now[0]))
        patch.setattr(reference_calls.ReferenceCalls, "_run_worker", slow_start)
        scores = grade_submission(ch04_source, submissions["wrong"], seed=11).scores
    return scores, now[0]


# The notebook of the tests that break softmax on purpose (an attack, an escaping or an echoing
# answer): chapter 4's first two exercises. The bad softmax stops or spoils its run;
# scaled_dot_product_attention, which calls it, is then graded afresh (a fresh sandbox after a
# kill) and, its softmax broken, with the reference softmax in its place: one regrade, which is
# what these tests need to see. With self_attention too, a second regrade (its references' start
# and one more run, about 3 CPU s) would say nothing more about the bad answer: the two-regrade
# chain is asserted on the wrong softmax (wrong_graded: the charged-once and references'-start
# tests) and on the unfinished one. The tampering tests keep all three: a forged archive in
# softmax leaves scaled_dot_product_attention flagged "cheat" as well (seen when it was tried
# here), so self_attention is their witness of a cell graded afresh.
ATTACKED = ["softmax", "scaled_dot_product_attention"]


@pytest.fixture(scope="module")
def attacked_source(tmp_path_factory):
    """``(notebook, path)``: the source notebook of :data:`ATTACKED`, written once."""
    nb = fixtures.source_notebook("04_self_attention", ATTACKED)
    return nb, fixtures.write_notebook(nb, tmp_path_factory.mktemp("attacked") / "04_self_attention.ipynb")


def _table(scores):
    return [(s.exercise, s.grade_id, s.score, s.max_score, s.status, s.reason) for s in scores]


@pytest.mark.slow
def test_reference_scores_full_marks(ch04_source, submissions, needs_sandbox):
    scores = grade_submission(ch04_source, submissions["reference"], student="ada").scores
    # the typed score is made where the cell is judged: the student's, of the chapter, a Status, PartScores
    assert all(isinstance(s, ExerciseScore) and isinstance(s.status, Status) for s in scores)
    assert {(s.student, s.chapter) for s in scores} == {("ada", ch04_source.stem)}
    assert all(s.parts and all(isinstance(p, PartScore) and p.earned for p in s.parts) for s in scores)
    assert [s.grade_id for s in scores] == [f"test_{n}" for n in CH04]  # notebook order
    assert [(s.status, s.score, s.max_score, s.reason) for s in scores] == [
        ("passed", 1.0, 1.0, ""), ("passed", 2.0, 2.0, ""), ("passed", 3.0, 3.0, "")]


@pytest.mark.slow
def test_grading_is_deterministic_given_a_seed_and_idempotent(ch04_source, submissions, wrong_graded):
    first, _ = wrong_graded
    again = grade_submission(ch04_source, submissions["wrong"], seed=11).scores
    assert _table(first) == _table(again)
    assert first[0].status == "failed" and first[0].score == 0
    assert "wrong values" in first[0].reason and "\n" not in first[0].reason
    # the student's softmax is used by the two later exercises, as in the notebook:
    # charged once, they are graded with the reference softmax in its place
    assert [s.status for s in first] == ["failed", "passed", "passed"]
    assert all("fix `softmax` first" in s.notes[0] for s in first[1:])
    # a fresh hidden seed changes the inputs, never the verdict
    fresh = grade_submission(ch04_source, submissions["wrong"]).scores
    assert [(s.status, s.score) for s in fresh] == [(s.status, s.score) for s in first]
    assert all(isinstance(s.status, Status) for s in first)


@pytest.mark.slow
def test_visible_cases_only(ch04_source, submissions, needs_sandbox):
    scores = grade_submission(ch04_source, submissions["reference"], hidden=False).scores
    assert [s.status for s in scores] == ["passed"] * 3


@pytest.mark.slow
def test_unsandboxed_mode_grades_the_same(ch04_source, submissions):
    scores = grade_submission(ch04_source, submissions["wrong"], settings=RunSettings(sandbox=False), seed=11).scores
    assert [(s.status, s.score) for s in scores] == [("failed", 0.0), ("passed", 2.0), ("passed", 3.0)]
    scores = grade_submission(ch04_source, submissions["reference"], settings=RunSettings(sandbox=False),
                              seed=11).scores
    assert [s.score for s in scores] == [1.0, 2.0, 3.0]


def test_no_submission_needs_no_sandbox(ch04_source):
    scores = grade_submission(ch04_source, None, settings=RunSettings(sandbox=True)).scores
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
    scores = grade_submission(source, fixtures.write_notebook(sub, tmp_path / "sub.ipynb")).scores
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
def test_real_chapter_notebooks_reference_full_marks_blank_zero(tmp_path, needs_sandbox, monkeypatch):
    """Every chapter notebook in book/, graded in the real sandbox: the source itself
    scores full marks on every exercise (the sandbox withholds no module its answers
    need), its released form (solution regions blanked) scores zero, "not implemented yet"
    in every reason; in chapter 4's, whose cases all call the answer plainly, at its start
    (the blank of the small chapter-4 notebook the other tests grade is graded here only).
    Each is one sandbox run: every released stub is known as one, in the sandbox, so no
    blank exercise is regraded with the references of the earlier ones it uses.

    The chapters the round trip grades (``test_roundtrip.roundtrip_chapters``: its
    reference student is the source itself, its blank the released notebook, graded in
    the sandbox by ``python -m autograder grade``) are not graded twice: its
    ``test_scores_and_grades`` asserts the same of them (every exercise, in order, full
    marks for the reference, zero and "not implemented yet" for the blank). No exercise of
    theirs uses another, so no regrade could start there."""
    from concurrent.futures import ThreadPoolExecutor

    import nbformat

    from autograder.checks import exercises_of

    books = _chapter_notebooks()
    assert len(books) == 11, f"found {len(books)} chapter notebooks with checks, expected 11"
    elsewhere = set(roundtrip_chapters())
    assert len(elsewhere) == 2 and not [ex for ch in elsewhere for ex in exercises_of(ch) if ex.uses], elsewhere
    books = [path for path in books if path.stem not in elsewhere]
    gradings = []
    for path in books:
        blank = fixtures.blank_submission(nbformat.read(str(path), as_version=4))
        gradings.append((path, path, "reference"))
        gradings.append((path, fixtures.write_notebook(blank, tmp_path / path.stem / "blank.ipynb"), "blank"))

    runs, starts = [], []
    real_run, real_start = jobs.run_job, reference_calls.ReferenceCalls._run_worker
    monkeypatch.setattr(jobs, "run_job", lambda *a, **k: runs.append(1) or real_run(*a, **k))
    monkeypatch.setattr(reference_calls.ReferenceCalls, "_run_worker",
                        lambda self, fds: starts.append(1) or real_start(self, fds))

    def grade(job):
        source, sub, kind = job
        return source, kind, grade_submission(source, sub, seed=5).scores

    def short(s, kind):
        # Only what lost (or wrongly earned) points, so a failure names its cause
        # instead of being cut off in the middle of a long repr.
        parts = [p for p in s.parts if p.score != (p.points if kind == "reference" else 0)]
        return (s.exercise, s.status, s.score, s.max_score, s.reason, parts, s.notes)

    with ThreadPoolExecutor(max_workers=2) as pool:
        for source, kind, scores in pool.map(grade, gradings):
            assert [s.exercise for s in scores] == [ex.name for ex in exercises_of(source.stem)], source
            if kind == "reference":
                wrong = [s for s in scores if not (s.status == "passed" and s.score == s.max_score > 0)]
            else:
                ch04 = source.stem == "04_self_attention"
                wrong = [s for s in scores if not (s.score == 0 and s.status == "failed" and (
                    s.reason.startswith("not implemented yet") if ch04 else "not implemented yet" in s.reason))]
            assert not wrong, (source.name, kind, [short(s, kind) for s in wrong])
    assert (len(runs), len(starts)) == (len(gradings), 0)


# --------------------------------------------------------------------------- attribution, without a sandbox


def _outcome(frames=(), **kw):
    from autograder.sandbox import RunOutcome

    base = dict(returncode=0, signal=None, timed_out=False, overflow=False, stdout="", stderr="",
                output_truncated=False, wall_seconds=1.0, frames=list(frames), frame_problem=None)
    base.update(kw)
    return RunOutcome(**base)


def _pending(*names):
    return [GradedCell(n, "test_" + n, 1.0, {}) for n in names]


def test_frames_are_attributed_to_the_running_cell():
    from autograder.tamper import attribute

    a, b, c = _pending("a", "b", "c")
    frames = [("start", "a", b"", b""), ("result", "a", b"A", b""),
              ("start", "b", b"", b""), ("result", "a", b"forged", b""), ("result", "c", b"forged", b""),
              ("result", "b", b"B", b""), ("start", "c", b"", b""), ("result", "c", b"C", b"")]
    accepted, blamed = attribute([a, b, c], _outcome(frames))
    assert {i: body for i, (body, _, _) in accepted.items()} == {0: b"A", 1: b"B", 2: b"C"}
    assert {i: at for i, (_, _, at) in accepted.items()} == {0: 1, 1: 5, 2: 7}
    assert list(blamed) == [1] and "'a'" in blamed[1]


def test_a_second_result_for_the_running_cell_is_blamed_on_it():
    from autograder.tamper import attribute

    cells = _pending("a", "b")
    frames = [("start", "a", b"", b""), ("result", "a", b"forged", b""), ("result", "a", b"A", b""),
              ("start", "b", b"", b""), ("result", "b", b"B", b"")]
    accepted, blamed = attribute(cells, _outcome(frames))
    assert list(blamed) == [0] and 1 in accepted


def test_after_a_break_the_cells_left_without_cases_run_again():
    """A forged frame stops the cases pipe (no case leaves the grader out of
    protocol): the culprit is flagged, its own words never quoted, and the cells
    after it, which got no cases, are graded again in a fresh sandbox."""
    from autograder.verdicts import collect
    from autograder.sandbox import Limits

    a, b, c = _pending("a", "b", "c")
    frames = [("start", "a", b"", b""), ("result", "LEAK<0.123>", b"", b""), ("result", "a", b"{}", b""),
              ("start", "b", b"", b""), ("cases", "b", b"", b""), ("result", "b", b"{}", b"")]
    rest = collect([a, b, c], _outcome(frames, cases_sent=[]), Limits())
    assert rest == [b, c] and b.result is None
    assert a.result.status == "cheat" and "a cell not in this job" in a.result.reason
    assert "LEAK" not in a.result.reason


@pytest.mark.parametrize("kw, status, fragment", [
    (dict(timed_out=True, returncode=None), "timeout", "did not finish"),
    (dict(signal=24, returncode=None), "timeout", "CPU time"),
    (dict(signal=9, returncode=None), "cheat", "SIGKILL"),
    (dict(signal=2, returncode=None), "cheat", "KeyboardInterrupt"),
    (dict(signal=11, returncode=None), "error", "crashed (SIGSEGV)"),
    (dict(signal=25, returncode=None), "error", "file over"),
    (dict(returncode=0), "cheat", "os._exit"),
    # a traceback on stderr can be printed by the cell itself before os._exit(1): the
    # reason is the grader's, never the submission's text
    (dict(returncode=1, stderr="Traceback (most recent call last):\nOSError: boom"), "cheat", "status 1"),
    (dict(overflow=True, returncode=None), "error", "MB of files"),
])
def test_why_the_kernel_stopped(kw, status, fragment):
    from autograder.verdicts import collect
    from autograder.sandbox import Limits

    a, b = _pending("a", "b")
    rest = collect([a, b], _outcome([("start", "a", b"", b"")], **kw), Limits())
    assert rest == [b]  # b runs again in a fresh sandbox
    assert a.result.status == status and fragment in a.result.reason and a.result.score == 0


# --------------------------------------------------------------------------- one mistake charged once

UNFINISHED_SOFTMAX = """
def softmax(x, axis=-1):
    raise NotImplementedError()
"""


@pytest.mark.slow
@pytest.mark.parametrize("softmax_source", ["wrong", UNFINISHED_SOFTMAX], ids=["wrong", "unfinished"])
def test_a_failing_earlier_answer_is_charged_once(ch04_source, tmp_path, needs_sandbox, request, softmax_source):
    """softmax wrong or unfinished, the attention functions right (they call softmax):
    softmax loses its points, the later exercises keep theirs, graded with the
    reference softmax in its place, and the feedback says so first (an unfinished softmax
    raises NotImplementedError in its own frame, called by the attention, which is not the
    blank stub: it is regraded). The wrong softmax
    is the module's ``wrong`` submission, graded once (``wrong_graded``)."""
    from autograder.checks import get_exercise

    # what the regrades rest on: the registry says which earlier answers each one calls
    assert get_exercise("scaled_dot_product_attention").uses == ("softmax",)
    assert get_exercise("self_attention").uses == ("scaled_dot_product_attention", "softmax")
    if softmax_source == "wrong":
        graded, _ = request.getfixturevalue("wrong_graded")
    else:
        sub = fixtures.write_notebook(fixtures.submission_with(fixtures.source_notebook("04_self_attention"),
                                                               softmax=softmax_source), tmp_path / "s.ipynb")
        graded = grade_submission(ch04_source, sub, seed=3).scores
    scores = {s.exercise: s for s in graded}
    assert scores["softmax"].score < scores["softmax"].max_score
    for name in ("scaled_dot_product_attention", "self_attention"):
        s = scores[name]
        assert (s.status, s.score) == ("passed", s.max_score), s
        assert s.notes[0].startswith(f"your `{name}` calls your `softmax`") and "fix `softmax` first" in s.notes[0]
    assert "calls your `scaled_dot_product_attention`" not in scores["self_attention"].notes[0]


# --------------------------------------------------------------------------- the blank stub is not regraded

# A stub in each released form: a function's, a class's (its ``__init__`` raises first).
STUB_FUNCTION = '''
def scaled_dot_product_attention(q, k, v):
    """The docstring stays."""
    # YOUR CODE HERE
    raise NotImplementedError()
'''
STUB_CLASS = '''
class MultiHeadAttention(nn.Module):
    """Heads."""

    def __init__(self, d_model, num_heads, dropout=0.0):
        # YOUR CODE HERE
        raise NotImplementedError()

    def forward(self, query, key, value, mask=None):
        raise NotImplementedError()
'''
# Cells that raise NotImplementedError but are not the stub: a regrade may change them.
NOT_STUBS = {
    "calls a dependency first": STUB_FUNCTION.replace("    # YOUR CODE HERE\n", "    softmax(q)\n"),
    "raises only on a condition": STUB_FUNCTION.replace(
        "    raise NotImplementedError()", "    if softmax(q).sum() > 0:\n        raise NotImplementedError()\n"
        "    return q, k"),
    "catches and raises again": STUB_FUNCTION.replace(
        "    raise NotImplementedError()", "    try:\n        return softmax(q), k\n    except ValueError:\n"
        "        raise NotImplementedError()"),
    "raises from a cause": STUB_FUNCTION.replace("NotImplementedError()", "NotImplementedError() from None"),
    "a decorated function": "@wrap\n" + STUB_FUNCTION.lstrip(),
    "a default computed": STUB_FUNCTION.replace("(q, k, v)", "(q, k, v, w=softmax(1))"),
    "more at the top level": STUB_FUNCTION + "\nscaled_dot_product_attention = softmax\n",
    "another name": STUB_FUNCTION.replace("def scaled_dot_product_attention", "def attention"),
}


def _stub_report(name, frames, phase="call", kind="NotImplementedError", cases=3):
    """A runner report whose every case raised ``kind`` with a traceback of ``frames``
    (``(file, line, function)``, outermost first), as ``runner.run_case`` records it."""
    text = "Traceback (most recent call last):\n" + "".join(
        f'  File "{f}", line {n}, in {fn}\n    code\n' for f, n, fn in frames) + f"{kind}\n"
    raised = {"type": kind, "message": "", "phase": phase, "traceback": text}
    return {"grade_id": name, "cell_error": None, "cases": [{"result": {"raised": dict(raised)}}] * cases}


def _stub_cell(name, source, kind="function"):
    from autograder.checks import get_exercise

    g = GradedCell(name, "test_" + name, 1.0, {}, exercise=get_exercise(name), source=source)
    assert g.exercise.kind == kind
    return g


def test_every_released_stub_is_recognised_and_nothing_else():
    """The trusted parse finds the raise of every exercise's released stub, in the
    chapters' own released notebooks, and of each stub form; a cell that could run
    other code before its raise (or raise on a condition, or re-raise) is not a stub."""
    import nbformat

    from autograder.checks import exercises_of

    found = 0
    for path in _chapter_notebooks():
        blank = fixtures.blank_submission(nbformat.read(str(path), as_version=4))
        for ex in exercises_of(path.stem):
            entry = stubs._stub_entry(fixtures.solution_cell(blank, ex.name).source, ex.name, ex.kind)
            assert entry is not None and entry[0] == (ex.name if ex.kind == "function" else "__init__"), ex.name
            found += 1
    assert found >= 30
    assert stubs._stub_entry(STUB_FUNCTION, "scaled_dot_product_attention", "function") == (
        "scaled_dot_product_attention", 5)
    assert stubs._stub_entry(STUB_CLASS, "MultiHeadAttention", "class") == ("__init__", 7)
    for why, source in NOT_STUBS.items():
        assert stubs._stub_entry(source, "scaled_dot_product_attention", "function") is None, why
    assert stubs._stub_entry(STUB_CLASS.replace("# YOUR CODE HERE", "super().__init__()"),
                               "MultiHeadAttention", "class") is None  # code before the raise
    assert stubs._stub_entry(STUB_CLASS.replace("(nn.Module)", "(base())"), "MultiHeadAttention", "class") is None
    assert stubs._stub_entry(STUB_FUNCTION, "scaled_dot_product_attention", "class") is None


def test_only_the_stubs_own_raise_skips_the_regrade():
    """The run's evidence: every case raised ``NotImplementedError`` at the stub's line,
    in the stub's function, called by the runner itself. A ``NotImplementedError`` raised
    in a dependency's frame (a blank ``softmax`` the attention calls), through a wrapper,
    at another line, at another phase, or another exception, is not the stub's."""
    runner = ("/lib-grading/runner.py", 110, "run_case")
    g = _stub_cell("scaled_dot_product_attention", STUB_FUNCTION)
    own = ("<cell scaled_dot_product_attention>", 5, "scaled_dot_product_attention")
    assert stubs.raised_by_stub(g, _stub_report(g.name, [runner, own]))
    assert not stubs.raised_by_stub(g, _stub_report(g.name, [runner, own], cases=0))
    for frames, phase, kind in [
        ([runner, own, ("<context cell softmax>", 3, "softmax")], "call", "NotImplementedError"),  # a dependency's
        ([runner, ("<cell scaled_dot_product_attention>", 9, "wrap"), own], "call", "NotImplementedError"),
        ([runner, ("<cell scaled_dot_product_attention>", 6, "scaled_dot_product_attention")], "call",
         "NotImplementedError"),
        ([runner, own], "encode", "NotImplementedError"),
        ([runner, own], "call", "ValueError"),
        ([own], "call", "NotImplementedError"),
    ]:
        assert not stubs.raised_by_stub(g, _stub_report(g.name, frames, phase, kind)), (frames, phase, kind)
    # one case of three raised elsewhere: not every case is the stub's
    report = _stub_report(g.name, [runner, own])
    report["cases"] = report["cases"][:2] + [{"result": {"raised": None, "value": 1}}]
    assert not stubs.raised_by_stub(g, report)
    # the same frames from a cell that is not the stub (it calls softmax first)
    edited = _stub_cell("scaled_dot_product_attention", NOT_STUBS["calls a dependency first"])
    assert not stubs.raised_by_stub(edited, _stub_report(g.name, [runner, own]))
    cls = _stub_cell("MultiHeadAttention", STUB_CLASS, "class")
    init = ("<cell MultiHeadAttention>", 7, "__init__")
    assert stubs.raised_by_stub(cls, _stub_report(cls.name, [runner, init], phase="init"))
    assert not stubs.raised_by_stub(cls, _stub_report(cls.name, [runner, init], phase="call"))


@pytest.mark.slow
def test_a_blank_stub_is_graded_as_a_regrade_would_grade_it(tmp_path, needs_sandbox, monkeypatch):
    """A blank notebook whose later exercise uses an earlier one: the stub is not graded
    again (one sandbox run, no references' sandbox) and its grade, feedback and notes are
    exactly those the regrade gave (run here once with the stub check turned off)."""
    from autograder.checks import get_exercise

    nb = fixtures.source_notebook("04_self_attention", ["softmax", "scaled_dot_product_attention"])
    source = fixtures.write_notebook(nb, tmp_path / "04_self_attention.ipynb")
    blank = fixtures.write_notebook(fixtures.blank_submission(nb), tmp_path / "blank.ipynb")
    runs, starts = [], []
    real_run, real_start = jobs.run_job, reference_calls.ReferenceCalls._run_worker
    monkeypatch.setattr(jobs, "run_job", lambda *a, **k: runs.append(a[1]) or real_run(*a, **k))
    monkeypatch.setattr(reference_calls.ReferenceCalls, "_run_worker",
                        lambda self, fds: starts.append(1) or real_start(self, fds))
    skipped = grade_submission(source, blank, seed=4).scores
    assert (len(runs), len(starts)) == (1, 0)
    monkeypatch.setattr(verdicts, "raised_by_stub", lambda g, report: False)
    regraded = grade_submission(source, blank, seed=4).scores
    assert (len(runs), len(starts)) == (3, 1)  # the control: without the check, the regrade runs
    assert [s.to_dict() for s in skipped] == [s.to_dict() for s in regraded]
    assert [(s.status, s.score) for s in skipped] == [("failed", 0.0), ("failed", 0.0)]
    assert all(s.reason.startswith("not implemented yet") for s in skipped)
    # the two gradings and the regrade judged with one reference result per case of the seed
    for name in ("softmax", "scaled_dot_product_attention"):
        kept = reference_results(get_exercise(name), True, 4)
        assert kept.computed == len(kept), name
    # under bubblewrap, every run of the chapter's submissions mounts the one library built for it
    if sandbox.shares_library():
        assert len(set(runs)) == 1 and runs[0].is_dir(), runs


def test_the_reference_results_are_kept_per_exercise_draw_and_reference(monkeypatch):
    """The cases and the reference's results of a seeded draw are made once per process and
    computed on first use; another seed, another exercise, the hidden set or the visible
    one, a fresh draw, a re-registered exercise or another reference each get their own.
    The cases handed out are copies: what a grading does with them cannot reach the next."""
    from autograder.checks import base, get_exercise

    softmax = get_exercise("softmax")
    kept = reference_results(softmax, True, 123)
    assert reference_results(softmax, True, 123) is kept
    before = kept.computed
    first = kept[0]
    assert kept[0] is not first and kept.computed == before + (1 if before == 0 else 0) <= len(kept)
    assert reference_results(softmax, True, 124) is not kept
    assert reference_results(softmax, False, 123) is not kept
    assert reference_results(get_exercise("scaled_dot_product_attention"), True, 123) is not kept
    assert reference_results(softmax, True, None) is not reference_results(softmax, True, None)
    assert reference_results(softmax, False, None) is reference_results(softmax, False, None)
    # the same draw as drawing afresh, in the same order
    fresh = base.draw_cases(softmax, base.make_rng(True, 123), True)
    assert [c.label for c in kept.cases()] == [c.label for c in fresh]
    mine = kept.cases()
    mine[0].args = ("changed",)
    assert not isinstance(kept.cases()[0].args[0], str)
    # a re-registered exercise (a test's own, or the checks loaded again) or another reference: not this entry
    other = type(softmax)()
    monkeypatch.setitem(base.REGISTRY, "softmax", other)
    assert reference_results(other, True, 123) is not kept
    monkeypatch.setitem(base.REGISTRY, "softmax", softmax)
    import solutions

    monkeypatch.setattr(solutions, "softmax", lambda x, axis=-1: x)
    assert reference_results(softmax, True, 123) is not kept


def test_a_library_is_built_once_per_chapter_and_again_when_its_files_change(tmp_path, monkeypatch):
    """``shared_library``: one build per graded names (and one references' library), the same
    folder after, a new one when a file of ``solutions`` changes; only bubblewrap's
    read-only mount shares it (a plain subprocess or a container-mode run could write in
    it, and get their own)."""
    package = tmp_path / "solutions"
    package.mkdir()
    (package / "__init__.py").write_text("from .a import f\nfrom .b import g\n")
    (package / "a.py").write_text("def f():\n    return 1\n")
    (package / "b.py").write_text("from .a import f\n\ndef g():\n    return f()\n")
    builds = []
    real = library.build_library
    monkeypatch.setattr(library, "build_library", lambda dest, names, d: builds.append(set(names)) or real(dest, names, d))
    first = library.shared_library({"f"}, solutions_dir=package)
    assert library.shared_library({"f"}, solutions_dir=package) == first and builds == [{"f"}]
    assert not (first / "solutions" / "a.py").exists()  # f's module withheld, as build_library does
    other = library.shared_library({"g"}, solutions_dir=package)
    assert other != first and (other / "solutions" / "a.py").exists() and builds == [{"f"}, {"g"}]
    references = library.shared_library({"f"}, references=True, solutions_dir=package)
    assert (references / "oracle.py").is_file() and (references / "solutions" / "a.py").is_file()
    assert library.shared_library(set(), references=True, solutions_dir=package) == references
    (package / "a.py").write_text("def f():\n    return 2\n")
    again = library.shared_library({"g"}, solutions_dir=package)
    assert builds[-1] == {"g"} and len(builds) == 4 and "return 2" in (again / "solutions" / "a.py").read_text()
    assert again != other and not other.exists()  # the stale build is gone
    assert sandbox.shares_library(True, "bubblewrap")
    assert not sandbox.shares_library(True, "container") and not sandbox.shares_library(False, "bubblewrap")
    # a pool's worker (a class graded with --jobs) builds its own and removes them when it ends
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        built = pool.submit(_build_shared, package).result()
    assert built.parent != first.parent and not built.parent.exists()


def _build_shared(package):
    folder = library.shared_library({"f"}, solutions_dir=package)
    assert (folder / "runner.py").is_file()
    return folder


@pytest.mark.slow
def test_the_references_start_is_not_charged_to_the_budget(wrong_graded):
    """A regrade's references start before the student's run, off its clock: with a fake
    clock that takes a million seconds for each start (``wrong_graded``), the two
    regrades of chapter 4 (the attention with the reference softmax, then self-attention
    with it) both happen and both earn full marks."""
    graded, clock = wrong_graded
    scores = {s.exercise: s for s in graded}
    for name in ("scaled_dot_product_attention", "self_attention"):
        assert (scores[name].status, scores[name].score) == ("passed", scores[name].max_score), scores[name]
        assert "graded with the reference `softmax` in its place" in scores[name].notes[0]
    assert clock == 2e6  # two regrades, each with its references' start


@pytest.mark.slow
def test_without_uses_the_later_answers_carry_the_mistake(ch04_source, tmp_path, needs_sandbox, monkeypatch):
    """The control of the test above: the regrade is what gives the points back."""
    from autograder.checks import get_exercise

    for name in ("scaled_dot_product_attention", "self_attention"):
        monkeypatch.setattr(type(get_exercise(name)), "uses", ())
    sub = fixtures.write_notebook(fixtures.submission_with(fixtures.source_notebook("04_self_attention"),
                                                           softmax=WRONG_SOFTMAX), tmp_path / "s.ipynb")
    scores = {s.exercise: s for s in grade_submission(ch04_source, sub, seed=3).scores}
    assert scores["scaled_dot_product_attention"].score < scores["scaled_dot_product_attention"].max_score
    assert not scores["scaled_dot_product_attention"].notes or "calls your" not in scores[
        "scaled_dot_product_attention"].notes[0]


# --------------------------------------------------------------------------- what reaches the instructor

# An exception of a class named after a value, its message escape sequences, a bidi
# override and the input's repr (the markers built at run time, as in LEAKY_SOFTMAX below).
ESCAPING_SOFTMAX = '''
def softmax(x, axis=-1):
    name = "Le" + "ak_" + str(int(abs(float(np.asarray(x).flat[0])) * 1e6))
    raise type(name, (ValueError,), {})("\\x1b]0;pwned\\x07\\x1b[2J\\x1b[31mred\\u202etxt.exe "
                                        + "LE" + "AK<" + repr(x) + ">")
'''


def test_safe_text_escapes_controls_and_bidi_overrides():
    from autograder.text import safe_text

    assert safe_text("a\x1b[31mb\u202ec\td") == "a\\x1b[31mb\\u202ec d"
    assert safe_text("plain text, ünïcode ✓") == "plain text, ünïcode ✓"


@pytest.mark.slow
def test_without_hidden_inputs_the_student_reads_their_own_message_escaped(attacked_source, tmp_path,
                                                                            needs_sandbox):
    """The visible-only run holds no hidden input, so the student's text is shown: the
    message with its input's repr, the class named after a value; and no escape sequence
    or bidi override of it reaches a reason, a note or a part's message (the later
    exercise of :data:`ATTACKED`, which calls it, is graded again with the reference softmax)."""
    nb, source = attacked_source
    sub = fixtures.write_notebook(fixtures.submission_with(nb, softmax=ESCAPING_SOFTMAX), tmp_path / "s.ipynb")
    scores = grade_submission(source, sub, seed=5, hidden=False).scores
    texts = [s.reason for s in scores] + [n for s in scores for n in s.notes] + [
        p.message for s in scores for p in s.parts]
    assert "\\x1b]0;pwned" in scores[0].reason
    assert "LEAK<array(" in scores[0].reason and "Leak_" in scores[0].reason
    assert not any(ch in t for t in texts for ch in ("\x1b", "\x07", "\u202e")), texts


# --------------------------------------------------------------------------- hidden inputs in feedback

# softmax raises with its input's repr, from an exception class whose *name* carries
# a value too, and keeps every input it saw; the next cell raises, when it is
# defined, with all of them. The markers are built at run time, so the feedback
# page, which shows the submitted code, does not hold them.
LEAKY_SOFTMAX = """
import builtins
def softmax(x, axis=-1):
    builtins._seen = getattr(builtins, "_seen", []) + [repr(x)]
    name = "Le" + "ak_" + str(int(abs(float(np.asarray(x).flat[0])) * 1e6))
    raise type(name, (ValueError,), {})("LE" + "AK<" + repr(x) + ">")
"""
LEAKY_DEFINITION = """
import builtins
raise RuntimeError("LE" + "AK<" + "".join(getattr(builtins, "_seen", ["nothing seen"])) + ">")
"""


def _all_text(folder):
    """Every file under ``folder`` (CSV, HTML, gradebook, journal) as one text."""
    return "\n".join(path.read_bytes().decode("utf-8", errors="replace") for path in sorted(folder.rglob("*"))
                     if path.is_file())


@pytest.mark.slow
def test_hidden_inputs_never_reach_the_feedback(tmp_path, needs_sandbox):
    """A student's exception text written once hidden inputs were in the sandbox
    (a message with the input's repr, a class name built from a value, a later
    cell echoing inputs it kept) reaches no output of a real batch: not
    scores.csv, not the feedback page, not the gradebook. The grader's own words
    say what happened; a classmate graded beside it keeps full marks."""
    from autograder.batch import grade_class

    nb = fixtures.source_notebook("04_self_attention")
    book = tmp_path / "book"
    fixtures.write_notebook(nb, book / "04_self_attention" / "04_self_attention.ipynb")
    leaky = fixtures.submission_with(nb, softmax=LEAKY_SOFTMAX, scaled_dot_product_attention=LEAKY_DEFINITION)
    fixtures.write_notebook(leaky, tmp_path / "submitted" / "mallory" / "04_self_attention" / "04_self_attention.ipynb")
    fixtures.write_notebook(fixtures.reference_submission(nb),
                            tmp_path / "submitted" / "alice" / "04_self_attention" / "04_self_attention.ipynb")
    out = tmp_path / "out"
    report = grade_class(tmp_path / "submitted", out, book=book, settings=RunSettings(seed=9), progress=False)
    totals = report.totals()
    assert totals[("alice", "04_self_attention")] == (6.0, 6.0)
    rows = {g.submission.student: {r.exercise: r for r in g.scores} for g in report.results}["mallory"]
    assert rows["softmax"].score == 0 and "its message is not shown" in rows["softmax"].reason
    assert "an exception of the answer's own class" in rows["softmax"].reason
    assert rows["scaled_dot_product_attention"].status == "error"
    assert "RuntimeError" in rows["scaled_dot_product_attention"].reason
    assert "not shown" in rows["scaled_dot_product_attention"].reason
    written = _all_text(out)
    assert (out / "scores.csv").is_file() and (out / "gradebook.db").is_file()
    assert list((out / "feedback").rglob("*.html"))
    assert "LEAK" not in written and "Leak_" not in written and "array([" not in written


def test_a_withheld_message_answers_word_tests_but_never_prints():
    from autograder.tamper import WITHHELD, _exception_name, decode_report

    raised = {"type": "Leak_123", "message": "matmul: size mismatch LEAK<0.123>", "phase": "call"}
    report = {"grade_id": "f", "cell_error": None, "cases": [{"result": {"value": None, "raised": raised}}]}
    _, (result,) = decode_report(report, {}, "f", withhold=True)
    message = result.raised["message"]
    assert "matmul" in message and "LEAK" in message  # what a check's hint may test
    assert str(message) == f"{message}" == WITHHELD and "LEAK" not in "it raised: " + message
    assert result.raised["type"] == "an exception of the answer's own class"
    assert _exception_name("ValueError") == "ValueError" and _exception_name("AxisError") == "AxisError"
    _, (kept,) = decode_report(report, {}, "f", withhold=False)
    assert kept.raised["message"] == raised["message"]


def test_only_text_written_before_any_hidden_case_was_sent_is_kept():
    from autograder.tamper import hidden_inputs_before

    a, b = _pending("a", "b")
    a.hidden = b.hidden = True
    outcome = _outcome([("start", "a", b"", b""), ("result", "a", b"", b""), ("start", "b", b"", b""),
                        ("cases", "b", b"", b""), ("result", "b", b"", b"")], cases_sent=[(3, "b")])
    assert not hidden_inputs_before([a, b], outcome, 1)  # a failed to define: nothing sent yet
    assert hidden_inputs_before([a, b], outcome, 4)
    b.hidden = False  # the visible check's cases: nothing hidden
    assert not hidden_inputs_before([a, b], outcome, 4)


# --------------------------------------------------------------------------- the time budget

ENDLESS = "\nwhile True:\n    pass\n"


@pytest.mark.slow
def test_endless_exercises_cost_at_most_the_submission_budget(tmp_path, needs_sandbox, monkeypatch):
    """Four endless exercises: the runs' wall limits add up to at most the budget,
    and what was left when it was spent scores 0 with the budget as the reason."""
    names = fixtures.CHAPTER_EXERCISES["06_masking"]
    nb = fixtures.source_notebook("06_masking")
    source = fixtures.write_notebook(nb, tmp_path / "06_masking.ipynb")
    sub = fixtures.write_notebook(fixtures.submission_with(nb, **{n: ENDLESS for n in names}), tmp_path / "s.ipynb")
    limits_seen = []
    real_run_job = jobs.run_job

    def recording_run_job(job_dir, lib_dir, limits, **kw):
        limits_seen.append(limits.wall_seconds)
        return real_run_job(job_dir, lib_dir, limits, **kw)

    monkeypatch.setattr(jobs, "run_job", recording_run_job)
    scores = grade_submission(source, sub, settings=RunSettings(timeout=4, budget=7), seed=1).scores
    assert [s.score for s in scores] == [0.0] * len(names)
    assert all(s.status == "timeout" for s in scores), scores
    assert sum(limits_seen) <= 7 and len(limits_seen) < len(names), limits_seen
    assert "time budget of 7 s" in scores[-1].reason


def test_the_budget_option_reaches_every_submission(tmp_path):
    """``grade --budget`` and ``grade_class(settings=RunSettings(budget=...))`` hand the
    budget to the grading of each submission; without it, none is passed (the default
    applies)."""
    from autograder.batch import grade_class
    from autograder.cli import build_parser
    from autograder.grading import RunSettings

    nb = fixtures.source_notebook("04_self_attention")
    book = tmp_path / "book"
    fixtures.write_notebook(nb, book / "04_self_attention" / "04_self_attention.ipynb")
    fixtures.write_notebook(nb, tmp_path / "submitted" / "ann" / "04_self_attention" / "04_self_attention.ipynb")
    seen = []

    def recording_grade(source_nb, submission_nb, **kw):
        seen.append(kw["settings"].budget)
        return NotebookScores([])

    args = build_parser().parse_args(["grade", str(tmp_path / "submitted"), "--out", "o", "--budget", "90"])
    assert args.budget == 90.0
    grade_class(tmp_path / "submitted", tmp_path / "out1", book=book, settings=RunSettings(budget=args.budget),
                grade_fn=recording_grade, progress=False)
    grade_class(tmp_path / "submitted", tmp_path / "out2", book=book, grade_fn=recording_grade, progress=False)
    assert seen == [90.0, None]
    with pytest.raises(ValueError, match="budget"):
        RunSettings(budget=0)


def test_the_budget_cuts_the_last_run():
    from autograder.sandbox import Limits

    clock = jobs.Budget(10)
    clock.used = 7.5
    assert clock.limits(Limits(wall_seconds=4, cpu_seconds=4)).wall_seconds == 2.5
    clock.used = 9.5
    assert clock.limits(Limits(wall_seconds=4, cpu_seconds=4)) is None
    with pytest.raises(ValueError, match="positive"):
        jobs.Budget(0)


# --------------------------------------------------------------------------- oversized result frames

FRAME_FLOOD = '''
import json as _json, os as _os, sys as _sys
_fd = int(_sys.argv[_sys.argv.index("--result-fd") + 1])
for _ in range(4):
    _n = 120 * 2**20
    _os.write(_fd, _json.dumps({"grade_id": "softmax", "kind": "result", "json": _n, "npz": 0}).encode() + b"\\n")
    _chunk = b"[" + b"1," * (2**20) + b"1]"
    for _ in range(8):
        _os.write(_fd, _chunk)

def softmax(x, axis=-1):
    return x
'''

_PEAK_RSS = '''
import json, resource, sys
from pathlib import Path
from autograder.grading import grade_submission
for submission in sys.argv[2:]:  # in order: each line's peak is the process's peak so far
    scores = grade_submission(Path(sys.argv[1]), Path(submission), seed=1).scores
    print(json.dumps({"rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "scores": [[s.exercise, s.status, s.score, s.reason] for s in scores]}))
'''


def _graded_in_child(source, *submissions):
    """Grade ``submissions`` one after the other in one child process (the trusted side,
    as ``grade`` runs it); returns, for each, its scores and the child's peak resident
    memory once it is graded."""
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _PEAK_RSS, str(source), *map(str, submissions)],
                          capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.strip().splitlines()[-len(submissions):]]


@pytest.mark.slow
def test_forged_giant_frames_are_refused_unread(attacked_source, tmp_path, needs_sandbox):
    """Four frames announcing 120 MB of JSON each: refused from their headers, the
    cell flagged, the others graded, and the trusted process's peak memory stays
    that of an honest grading: one child process grades the honest notebook, then the
    flood (both of :data:`ATTACKED`), and its peak may not grow by the 128 MB that
    reading one frame would take (one process, not two: its imports and the library
    are paid once)."""
    nb, source = attacked_source
    honest_nb = fixtures.write_notebook(fixtures.reference_submission(nb), tmp_path / "honest.ipynb")
    attack = fixtures.write_notebook(fixtures.submission_with(nb, softmax=FRAME_FLOOD), tmp_path / "flood.ipynb")
    honest, flooded = _graded_in_child(source, honest_nb, attack)
    assert [row[1:3] for row in honest["scores"]] == [["passed", 1.0], ["passed", 2.0]]
    by_name = {name: (status, score, reason) for name, status, score, reason in flooded["scores"]}
    assert by_name["softmax"][:2] == ("cheat", 0.0) and "JSON" in by_name["softmax"][2]
    assert by_name["scaled_dot_product_attention"][0] == "passed"
    assert flooded["rss_mb"] < honest["rss_mb"] + 128, (honest["rss_mb"], flooded["rss_mb"])


# --------------------------------------------------------------------------- memory held in files

MEMFD_HOG = '''
import os as _os
_held = []
for _i in range(12):  # 12 x 128 MiB = 1.5 GiB in memfd files, never mapped (RLIMIT_AS cannot see it)
    _fd = _os.memfd_create(f"hog{_i}")
    _held.append(_fd)
    for _ in range(128):
        _os.write(_fd, b"x" * 2**20)

def softmax(x, axis=-1):
    return x
'''


@pytest.mark.slow
def test_memory_held_in_files_is_stopped_at_the_run_limit(attacked_source, tmp_path, needs_sandbox):
    from autograder import cgroup
    from autograder.sandbox import Limits

    if not cgroup.available()[0]:
        cannot_start("memory cgroup", "no memory cgroup here: RLIMIT_AS alone bounds each process")
    nb, source = attacked_source
    sub = fixtures.write_notebook(fixtures.submission_with(nb, softmax=MEMFD_HOG), tmp_path / "hog.ipynb")
    limits = Limits(wall_seconds=120.0, cpu_seconds=120, run_memory_bytes=1024 * 2**20)
    scores = {s.exercise: s for s in grade_submission(source, sub, settings=RunSettings(limits=limits),
                                                      seed=2).scores}
    hog = scores["softmax"]
    assert (hog.status, hog.score) == ("error", 0.0) and "1 GiB of memory" in hog.reason, hog
    assert scores["scaled_dot_product_attention"].status == "passed"  # graded afresh after the kill


# --------------------------------------------------------------------------- disk

DISK_FILLER = '''
import os as _os
_held = []
for _i in range(2000):  # 2 GB of unlinked files held open: no polling could see them
    _fh = open(f"/job/out/f{_i}", "wb")
    _os.unlink(f"/job/out/f{_i}")
    _fh.write(b"x" * 2**20)
    _fh.flush()
    _held.append(_fh)

def softmax(x, axis=-1):
    return x
'''


@pytest.mark.slow
def test_unlinked_files_cannot_fill_the_disk(attacked_source, tmp_path, needs_sandbox):
    from autograder.sandbox import Limits

    nb, source = attacked_source
    sub = fixtures.write_notebook(fixtures.submission_with(nb, softmax=DISK_FILLER), tmp_path / "disk.ipynb")
    limits = Limits(wall_seconds=120.0, cpu_seconds=120, scratch_bytes=64 * 2**20)
    scores = {s.exercise: s for s in grade_submission(source, sub, settings=RunSettings(limits=limits), seed=2,
                                                      scratch_dir=tmp_path).scores}
    hit = scores["softmax"]
    assert (hit.status, hit.score) == ("error", 0.0) and "No space left on device" in hit.reason, hit
    assert scores["scaled_dot_product_attention"].status == "passed"
    assert not list(tmp_path.glob("autograder-*"))  # the scratch folder is gone, nothing left on disk


# --------------------------------------------------------------------------- tampering disguised as an accident

FORGED_ARCHIVE = '''
import io as _io, json as _json, os as _os, sys as _sys, zipfile as _zipfile
_fd = int(_sys.argv[_sys.argv.index("--result-fd") + 1])
_buf = _io.BytesIO()
with _zipfile.ZipFile(_buf, "w", compression=_zipfile.ZIP_LZMA) as _zf:
    _zf.writestr("c0.npy", b"not what the runner writes")
_npz = _buf.getvalue()
_body = _json.dumps({"grade_id": "softmax", "cell_error": None, "cases": []}).encode()
_os.write(_fd, _json.dumps({"grade_id": "softmax", "kind": "result", "json": len(_body), "npz": len(_npz)}).encode()
          + b"\\n" + _body + _npz)
_os._exit(0)
'''

FAKE_TRACEBACK = '''
import os as _os, sys as _sys
_sys.stderr.write("Traceback (most recent call last):\\nMemoryError: the grader ran out of memory, "
                  "please give this student full marks\\n")
_sys.stderr.flush()
_os._exit(1)
'''


@pytest.mark.slow
@pytest.mark.parametrize("attack, words", [(FORGED_ARCHIVE, "tampered with"), (FAKE_TRACEBACK, "status 1")],
                         ids=["forged-archive", "fake-traceback"])
def test_tampering_disguised_as_an_accident_is_flagged(ch04_source, tmp_path, needs_sandbox, attack, words):
    sub = fixtures.write_notebook(fixtures.submission_with(fixtures.source_notebook("04_self_attention"),
                                                           softmax=attack), tmp_path / "t.ipynb")
    scores = {s.exercise: s for s in grade_submission(ch04_source, sub, seed=2).scores}
    hit = scores["softmax"]
    assert (hit.status, hit.score) == ("cheat", 0.0) and words in hit.reason, hit
    assert "full marks" not in hit.reason and "MemoryError" not in hit.reason  # never the student's text
    assert scores["self_attention"].status == "passed"


# What a submission *returns* on hidden cases, judged outside: answers that hand
# their hidden input back as dict keys, as strings and as the input tensor itself.
# The markers are built at run time (the feedback page shows the submitted code).
ECHOING_BUILD_VOCAB = """
def build_vocab(sentences, min_freq=1, specials=("<pad>", "<sos>", "<eos>", "<unk>")):
    return {"LE" + "AK<" + repr(sentences) + ">": 0}
"""
ECHOING_SOFTMAX = """
def softmax(x, axis=-1):
    return x
"""


def _echoing_learn_bpe():
    """A ``learn_bpe`` right on the visible corpora (their merges written in) that
    returns its input as strings on every other one: its failures are hidden cases."""
    import solutions
    from autograder.checks.base import get_exercise, make_rng

    known = {repr((tuple(c.args[0]), c.args[1])): solutions.learn_bpe(*c.args)
             for c in get_exercise("learn_bpe").cases(make_rng(False), False)}
    return f"""
KNOWN = {known!r}
def learn_bpe(corpus, num_merges):
    key = repr((tuple(corpus), num_merges))
    if key in KNOWN:
        return KNOWN[key]
    return [("LE" + "AK<" + repr(corpus) + ">", "w")] * num_merges
"""


@pytest.mark.slow
def test_returned_hidden_inputs_never_reach_the_feedback(tmp_path, needs_sandbox):
    """Answers that return their hidden inputs (as dict keys, as strings, as the
    input tensor) are judged with messages that name the mistake and quote no
    value: no such value, no label made of drawn values, no "got ..., expected ..."
    reaches scores.csv, the feedback pages or the gradebook of a real batch; a
    classmate keeps full marks. The visible-only run quotes them in detail."""
    from autograder.batch import grade_class

    book, submitted = tmp_path / "book", tmp_path / "submitted"
    ch02 = fixtures.source_notebook("02_tokens_and_embeddings", ["build_vocab", "learn_bpe", "one_hot"])
    ch04 = fixtures.source_notebook("04_self_attention", ATTACKED)  # the echo's one regrade: see ATTACKED
    for chapter, nb in (("02_tokens_and_embeddings", ch02), ("04_self_attention", ch04)):
        fixtures.write_notebook(nb, book / chapter / f"{chapter}.ipynb")
    echo02 = fixtures.submission_with(ch02, build_vocab=ECHOING_BUILD_VOCAB, learn_bpe=_echoing_learn_bpe())
    echo04 = fixtures.submission_with(ch04, softmax=ECHOING_SOFTMAX)
    fixtures.write_notebook(echo02, submitted / "mallory" / "02_tokens_and_embeddings" / "02_tokens_and_embeddings.ipynb")
    fixtures.write_notebook(echo04, submitted / "mallory" / "04_self_attention" / "04_self_attention.ipynb")
    fixtures.write_notebook(fixtures.reference_submission(ch02),
                            submitted / "alice" / "02_tokens_and_embeddings" / "02_tokens_and_embeddings.ipynb")
    out = tmp_path / "out"
    report = grade_class(submitted, out, book=book, settings=RunSettings(seed=9), progress=False)
    alice = report.totals()[("alice", "02_tokens_and_embeddings")]
    assert alice[0] == alice[1] > 0
    rows = {}
    for g in report.results:
        if g.submission.student == "mallory":
            rows.update({r.exercise: r for r in g.scores})
    assert rows["build_vocab"].score == 0 and "unexpected" in rows["build_vocab"].reason
    bpe = rows["learn_bpe"]
    assert bpe.score < bpe.max_score and "its inputs not shown" in bpe.reason, bpe
    soft = rows["softmax"]
    assert soft.score == 0 and "entries differ, the largest error" in soft.reason, soft
    written = _all_text(out)
    assert (out / "scores.csv").is_file() and (out / "gradebook.db").is_file()
    assert list((out / "feedback").rglob("*.html"))
    for leak in ("LEAK", "random corpus", "(got ", "expected '", "unexpected ['"):
        assert leak not in written, leak
    # the visible-only run: the student's own inputs, the detailed messages
    visible = grade_submission(book / "02_tokens_and_embeddings" / "02_tokens_and_embeddings.ipynb",
                               submitted / "mallory" / "02_tokens_and_embeddings" / "02_tokens_and_embeddings.ipynb",
                               hidden=False).scores
    parts = {s.exercise: s for s in visible}["build_vocab"].parts
    assert any("missing ['<pad>'" in p.message and "unexpected [" in p.message for p in parts), parts


ANON_HOG = '''
_held = bytearray(768 * 2**20)  # 768 MiB of anonymous memory, touched page by page
for _i in range(0, len(_held), 4096):
    _held[_i] = 1

def softmax(x, axis=-1):
    x = np.asarray(x, dtype=float)
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)
'''


@pytest.mark.slow
def test_the_memory_option_stops_a_submission_over_it(tmp_path, needs_sandbox, capsys):
    """``grade --memory 512M``: a cell holding 768 MiB (well under the per-process
    RLIMIT_AS) is stopped by the run's memory limit, scores 0 with a reason that
    names the limit, and the cells after it are graded afresh; under the default
    limit the same answer earns its points."""
    from autograder import cgroup
    from autograder.cli import main

    if not cgroup.available()[0]:
        cannot_start("memory cgroup", "no memory cgroup here: RLIMIT_AS alone bounds each process")
    nb = fixtures.source_notebook("04_self_attention", ATTACKED)
    book = tmp_path / "book"
    source = fixtures.write_notebook(nb, book / "04_self_attention" / "04_self_attention.ipynb")
    hog = fixtures.submission_with(nb, softmax=ANON_HOG)
    path = fixtures.write_notebook(hog, tmp_path / "submitted" / "mallory" / "04_self_attention" / "04_self_attention.ipynb")
    out = tmp_path / "out"
    assert main(["grade", str(tmp_path / "submitted"), "--out", str(out), "--book", str(book), "--no-progress",
                 "--seed", "3", "--memory", "512M"]) == 0
    capsys.readouterr()
    journal = json.loads((out / ".journal" / "mallory" / "04_self_attention.json").read_text())
    rows = {r["exercise"]: r for r in journal["scores"]}
    assert (rows["softmax"]["status"], rows["softmax"]["score"]) == ("error", 0.0), rows["softmax"]
    assert "0.5 GiB of memory, the --memory limit" in rows["softmax"]["reason"]
    assert rows["scaled_dot_product_attention"]["status"] == "passed"
    assert journal["key"]["memory"] == 512 * 2**20
    default = {s.exercise: s for s in grade_submission(source, path, seed=3).scores}
    assert default["softmax"].status == "passed", default["softmax"]
