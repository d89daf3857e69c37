"""The visible check, ``check(name, obj)``: run in the student's kernel, printed there.

:func:`check_report` runs an exercise's visible cases on an answer (regraded with the
reference of an earlier exercise that fails, the rule of
:mod:`autograder.checks.dependencies`); :func:`check` prints its verdict and returns
what nbgrader reads as the cell's grade.
"""
from __future__ import annotations

from typing import Any

from .cases import CheckFailure
from .dependencies import (called_dependencies, charged_once, dependency_note, dependency_unchanged_note, names_used,
                           own_failures)
from .draws import visible_cases
from .exercise import Exercise, get_exercise, run_in_process
from .precomputed import precomputed
from .scoring import Points, Report, evaluate, run_cases

__all__ = ["check", "check_report", "last_verdict"]


def _namespace_of(obj: Any) -> dict | None:
    """The global namespace in which ``obj``'s code looks up names (the notebook's)."""
    func = obj
    if isinstance(obj, type):
        func = next((v for v in vars(obj).values() if hasattr(v, "__globals__")), None)
    globals_ = getattr(func, "__globals__", None)
    return globals_ if isinstance(globals_, dict) else None


def _visible_failures(exercise: Exercise, namespace: dict) -> list[str]:
    """The exercises of ``exercise.uses`` whose answers in ``namespace`` fail their
    own visible check (or are unfinished)."""
    # the references when a case runs (trusted side only; they import torch)
    import solutions

    failing = []
    for dep in exercise.uses:
        answer = namespace.get(dep)
        if answer is None or answer is getattr(solutions, dep, None):
            continue
        dep_ex = get_exercise(dep)
        report = run_cases(dep_ex, answer, visible_cases(dep_ex))
        if not report.passed:
            failing.append(dep)
    return failing


def check_report(name: str, obj: Any, hidden: bool = False, seed: int | None = None) -> Report:
    """The :class:`Report` of the visible (or, with ``hidden``, the full) check of
    ``obj``, without printing or raising: what :func:`check` shows.

    When the answer calls an earlier exercise of the chapter (``uses``) whose
    answer fails its own visible check, the answer is checked again with the
    reference in its place and keeps the better report, with a note saying so.
    """
    exercise = get_exercise(name)
    cases = visible_cases(exercise, hidden, seed)
    results = [run_in_process(obj, case, exercise.kind) for case in cases]
    report = evaluate(exercise, results, cases)
    namespace = _namespace_of(obj)
    if not report.passed and exercise.uses and namespace is not None:
        failing = _visible_failures(exercise, namespace)
        if failing and precomputed() is not None:
            # The student package has no reference of this chapter's exercises to put
            # in place of the failing one: say which to fix first, when the answer's
            # code calls it (a blank answer calls nothing) and its failures may come
            # from it (not a slip in its own code); the grader regrades.
            called = called_dependencies(obj, failing)
            if called and not own_failures(exercise, obj, cases, results, called):
                report.notes.insert(0, dependency_note(name, sorted(names_used(obj)), called, regraded=False))
                report.regraded_when_graded = list(called)
        elif failing:
            # the references when a case runs (trusted side only; they import torch)
            import solutions

            saved = {d: namespace[d] for d in failing}
            try:
                namespace.update({d: getattr(solutions, d) for d in failing})
                second = run_cases(exercise, obj, cases)
            finally:
                namespace.update(saved)
            used = sorted(names_used(obj))
            report = charged_once(report, second, dependency_note(name, used, failing),
                                  dependency_unchanged_note(name, used, failing))
    return report


# The last report of each exercise's check in this process (a notebook's kernel): the
# student edition's demonstrations read it (autograder.student.unfinished).
_VERDICTS: dict[str, Report] = {}


def last_verdict(name: str) -> Report | None:
    """The report of the last :func:`check` of exercise ``name`` in this process, or
    ``None`` when it has not been checked here."""
    return _VERDICTS.get(name)


def check(name: str, obj: Any, hidden: bool = False, seed: int | None = None) -> "Points":
    """Check ``obj`` against exercise ``name``; print which parts pass.

    This is the one line in every test cell: ``check("softmax", softmax)``. It
    prints to standard output only. On full marks it returns ``None``; on partial
    credit the points earned, which nbgrader reads from the test cell's result as
    its partial grade (so a test cell's ``points`` must equal the sum of the
    exercise's parts, as a test ensures for the book's notebooks). It raises
    :class:`CheckFailure` — whose message explains every missed part — only when
    no point was earned.
    An answer that calls a failing earlier answer is also checked with the
    reference in its place (:func:`check_report`).

    Args:
        name: the contract name of the exercise.
        obj: your function or class.
        hidden: run the full randomised set (the instructors' hidden checks).
        seed: fix the random inputs (default: fixed for visible, fresh for hidden).

    Returns:
        ``None`` on full marks, else the points earned, as :class:`Points`.
    """
    get_exercise(name)
    if obj is None:
        raise CheckFailure(f"✗ {name}: nothing to check — define {name} in the cell above first")
    report = check_report(name, obj, hidden, seed)
    _VERDICTS[name] = report
    text = report.render(name)
    if report.score == 0 and report.max_score > 0:
        raise CheckFailure(text)
    print(text)
    if report.passed:
        return None  # no output: nbgrader gives the cell its full points, whatever they are
    return Points(report.score, report.max_score)
