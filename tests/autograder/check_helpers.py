"""Shared helpers of the per-chapter check tests (``test_checks_chNN.py``).

They go through :func:`autograder.checks.base.check_report`, the report behind the
visible ``check`` (including its "one mistake charged once" substitution), so a
partly right answer — which ``check`` does not raise for — is still seen.
"""
import atexit
import contextlib
import functools
import shutil
import tempfile
import textwrap
from pathlib import Path

import pytest

from autograder.checks import CheckFailure, check
from autograder.checks import visible as visible_check
from autograder.checks.base import check_report, use_precomputed
from autograder.checks.draws import visible_cases
from autograder.checks.precomputed import precomputed
from autograder.checks.scoring import evaluate
from autograder.reference_results import reference_results


def rejected(name, wrong, *words, seed=None, hidden=True, any_word=False):
    """Assert that the check of ``name`` does not give ``wrong`` full marks and that
    the report names the mistake: every one of ``words`` (case-sensitive), or with
    ``any_word`` at least one of them (case-insensitive). Returns the report's text."""
    report = check_report(name, wrong, hidden=hidden, seed=seed)
    message = report.render(name)
    assert not report.passed, f"{name}: a wrong answer got full marks:\n{message}"
    if any_word:
        assert any(w.lower() in message.lower() for w in words), message
    else:
        for word in words:
            assert word in message, f"{word!r} not in the message:\n{message}"
    return message


def accepted(name, obj):
    """Assert that ``obj`` earns full marks in the visible and the hidden check of
    ``name``. Returns the hidden report (its notes and advice)."""
    for hidden in (False, True):
        report = check_report(name, obj, hidden=hidden)
        assert report.passed and report.score == report.max_score, report.render(name)
    return report


def partly(name, obj, earned, missed, *words, hidden=True, seed=None):
    """Assert that ``obj`` earns exactly the parts ``earned`` and misses ``missed``
    (part names), and that the report's text holds every one of ``words``."""
    report = check_report(name, obj, hidden=hidden, seed=seed)
    got = {p.name: p.earned for p in report.parts}
    assert {n for n, e in got.items() if e} == set(earned) and {n for n, e in got.items() if not e} == set(missed), \
        report.render(name)
    message = report.render(name)
    for word in words:
        assert word in message, f"{word!r} not in the message:\n{message}"
    assert 0 < report.score < report.max_score
    return report


def stub_says_not_implemented(name):
    """Assert that the visible check of ``name`` answers a stub that raises
    ``NotImplementedError`` with "not implemented yet" (a released, blank exercise)."""
    def stub(*args, **kwargs):
        raise NotImplementedError()

    with pytest.raises(CheckFailure, match="not implemented yet"):
        check(name, stub)


def notebook_namespace(names, *sources):
    """One namespace holding ``sources`` (dedented code) run in order, as a notebook
    kernel's cells share one, starting from ``names`` (what the chapter's setup cell
    gives the answers). Each chapter's tests wrap it with their own ``names``."""
    ns = dict(names)
    for source in sources:
        exec(textwrap.dedent(source), ns)  # noqa: S102 - the test's own code
    return ns


def assert_noted(notes, caller, culprit):
    """Assert that the first of ``notes`` says ``caller`` was graded with the reference
    ``culprit`` in place of the student's failing one, and to fix ``culprit`` first."""
    assert notes[0].startswith(f"your `{caller}` calls your `{culprit}`, which fails its check"), notes
    assert f"fix `{culprit}` first" in notes[0], notes


def assert_regraded(name, obj, culprit, hidden=False, seed=None):
    """Assert that ``obj``, an answer of ``name`` calling a ``culprit`` that fails its
    own check, earns full marks graded with the reference in place of ``culprit``:
    the note of :func:`assert_noted` comes first and the report does not pass on the
    culprit's "not implemented". Returns the report."""
    report = check_report(name, obj, hidden=hidden, seed=seed)
    message = report.render(name)
    assert report.passed and report.score == report.max_score, message
    assert_noted(report.notes, name, culprit)
    assert "not implemented" not in message, message
    return report


def grade_in_sandbox(chapter, tmp_path, seed=5, **cells):
    """Grade, through the real sandboxed grader, the chapter's own notebook
    (``book/<chapter>/<chapter>.ipynb``: its setup cell and points) with the
    solution cells ``name=source`` replaced. Returns ``{exercise: ExerciseScore}``."""
    from pathlib import Path

    import nbformat

    import fixtures
    from autograder.grading import grade_submission

    source = Path(__file__).resolve().parents[2] / "book" / chapter / f"{chapter}.ipynb"
    nb = fixtures.submission_with(nbformat.read(str(source), as_version=4), **cells)
    scores = grade_submission(source, fixtures.write_notebook(nb, Path(tmp_path) / "submission.ipynb"),
                              seed=seed).scores
    return {s.exercise: s for s in scores}


def assert_full_marks(scores, points=None):
    """Every ExerciseScore of ``scores`` (``{exercise: ExerciseScore}``) passed with every part
    earned; with ``points`` (``{exercise: points}``), at exactly those points."""
    for name, s in scores.items():
        want = s.max_score if points is None else points[name]
        assert (s.status, s.score, s.max_score) == ("passed", want, want), s
        assert all(p.score == p.points for p in s.parts), s


def assert_charged_once(scores, culprit, score, parts, reason, callers, passed=()):
    """Assert how the sandboxed grader charged one wrong exercise that later answers
    call (``scores``: ``{exercise: ExerciseScore}``): ``culprit`` is partial at ``score``
    with exactly ``parts`` (``{part: score}``) and ``reason`` in its reason; each
    exercise of ``callers`` (``{exercise: points}``) passed at those points with the
    note of :func:`assert_noted`; each of ``passed`` passed."""
    wrong = scores[culprit]
    assert (wrong.status, wrong.score) == ("partial", score), wrong
    assert {p.name: p.score for p in wrong.parts} == parts
    assert reason in wrong.reason
    for name, points in callers.items():
        s = scores[name]
        assert (s.status, s.score) == ("passed", points), s
        assert_noted(s.notes, name, culprit)
    for name in passed:
        assert scores[name].status == "passed", scores[name]


@functools.cache
def _stored_folder(chapter: str) -> Path:
    """A folder holding the student package's stored visible checks of ``chapter``
    (:func:`autograder.student.expected.write_chapter`), written once per process."""
    from autograder.checks import exercises_of
    from autograder.student.expected import write_chapter

    folder = Path(tempfile.mkdtemp(prefix=f"stored-{chapter}-"))
    atexit.register(shutil.rmtree, folder, True)
    write_chapter(folder, chapter, exercises_of(chapter))
    return folder


@contextlib.contextmanager
def stored_checks(chapter: str):
    """Within the block, the visible check judges as the student package does: from the
    release's stored cases and results of ``chapter``, with no reference to compute or
    regrade with (:func:`autograder.checks.base.use_precomputed`)."""
    from autograder.student.expected import ExpectedStore

    use_precomputed(ExpectedStore(_stored_folder(chapter)))
    try:
        yield
    finally:
        use_precomputed(None)


# The cases drawn_cases gave last and the draw they are a copy of: the reference's results
# of that draw serve the evaluate call that judges exactly those cases next.
_LAST_GIVEN: list = [None, None]


def drawn_cases(exercise, hidden=False, seed=None):
    """:func:`~autograder.checks.draws.visible_cases`, each seeded draw made once per process.

    A draw of a fixed seed (the visible set, or a hidden set with ``seed``) is the same
    cases every time, and some take seconds to draw (``beam_search`` searches for beams
    that tell its variants apart). The grader's own cache of draws keeps it
    (:func:`~autograder.reference_results.reference_results`, keyed by the exercise and
    its reference) and every call gets a deep copy, so no answer can change what the next
    one is judged on. A fresh hidden draw (``seed=None``) and the student package's stored
    cases are never kept."""
    if (hidden and seed is None) or precomputed() is not None:
        return visible_cases(exercise, hidden, seed)
    draw = reference_results(exercise, hidden, seed)
    cases = draw.cases()
    _LAST_GIVEN[:] = [cases, draw]
    return cases


def _evaluate_with_kept_references(exercise, results, cases, *args, **kwargs):
    """:func:`~autograder.checks.scoring.evaluate`; on cases :func:`drawn_cases` just gave,
    with the reference's results of that draw (``wants``), each computed once and copied
    per call, as the grader judges. Any other call as it is."""
    given, draw = _LAST_GIVEN
    if cases is not given or args or kwargs:
        return evaluate(exercise, results, cases, *args, **kwargs)
    return evaluate(exercise, results, cases, wants=draw)


@pytest.fixture
def cases_drawn_once(monkeypatch):
    """:func:`~autograder.checks.base.check_report` (and the regrade of an answer calling a
    failing one) judging on :func:`drawn_cases`: the same cases, drawn once per process,
    and the reference's results of each draw, computed once. A module requests it with
    ``pytest.mark.usefixtures("cases_drawn_once")`` after importing it from here."""
    monkeypatch.setattr(visible_check, "visible_cases", drawn_cases)
    monkeypatch.setattr(visible_check, "evaluate", _evaluate_with_kept_references)
