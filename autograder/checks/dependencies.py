"""One mistake charged once, in the student's kernel: which earlier answers an answer
calls, the notes that say so, and the better of two grades.

The grader's regrade (:mod:`autograder.reference_regrade`) and the visible check
(:func:`~autograder.checks.visible.check_report`) share these words and this rule.
"""
from __future__ import annotations

import re
from typing import Any

from .cases import ADVICE, Case, CheckFailure, Result
from .exercise import Exercise

__all__ = ["names_used", "dependency_note", "dependency_unchanged_note", "charged_once", "called_dependencies",
           "own_failures"]


def names_used(obj: Any) -> set[str]:
    """Global names the code of ``obj`` (a function, or a class's methods) refers to,
    and the names it reads from an enclosing scope (an answer defined inside a function)."""
    codes = []
    if isinstance(obj, type):
        for value in vars(obj).values():
            value = getattr(value, "__func__", value)
            if hasattr(value, "__code__"):
                codes.append(value.__code__)
            elif isinstance(value, property):
                codes += [f.__code__ for f in (value.fget, value.fset) if f is not None]
    elif hasattr(obj, "__code__"):
        codes.append(obj.__code__)
    names: set[str] = set()
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        names.update(code.co_freevars)
        codes.extend(c for c in code.co_consts if hasattr(c, "co_names"))
    return names


def dependency_note(name: str, used: list[str], failing: list[str], regraded: bool = True) -> str:
    """The note of an exercise graded with earlier references in place (``regraded``),
    or, in the student package, of one that could not be (no reference there).

    Args:
        name: the exercise graded.
        used: the global names its code refers to (:func:`names_used`).
        failing: the earlier exercises whose answers fall short.
        regraded: the grade with the references in place was better, which shows
            that the answer called one of ``failing`` (the note names those in
            ``used``, or all of ``failing`` when it reached them another way).
            Without a regrade only ``failing`` exercises in ``used`` are named;
            callers add no note when there is none (:func:`called_dependencies`).
    """
    called = [d for d in failing if d in used] or (failing if regraded else [])
    if not called:
        raise ValueError(f"`{name}` refers to none of {failing}: no dependency note without a regrade")
    which = ", ".join(f"`{d}`" for d in called)
    verb = "fails its check" if len(called) == 1 else "fail their checks"
    if not regraded:
        return (f"your `{name}` calls your {which}, which {verb}: fix {which} first (when your work "
                f"is graded, `{name}` is also graded with the reference {which} in its place)")
    return (f"your `{name}` calls your {which}, which {verb}; it was graded with the reference "
            f"{which} in its place: fix {which} first")


def dependency_unchanged_note(name: str, used: list[str], failing: list[str]) -> str | None:
    """The note of an exercise graded again with the references of ``failing`` in place
    of the answers it calls, which scored no more: the points it lost are its own. The
    prompts promise a note whenever that regrade runs; ``None`` when the answer's code
    calls none of ``failing`` (the regrade then says nothing about it)."""
    called = [d for d in failing if d in used]
    if not called:
        return None
    which = ", ".join(f"`{d}`" for d in called)
    verb = "fails its check" if len(called) == 1 else "fail their checks"
    return (f"your `{name}` calls your {which}, which {verb}; graded again with the reference {which} in its "
            "place it scored no more, so the points it lost are its own")


def charged_once(first, second, note: str, unchanged: str | None = None):
    """The grade an answer keeps after it was graded again with the reference in place of
    each failing earlier answer it calls: one mistake charged once.

    The rule of both graders, the notebook's :func:`~autograder.checks.visible.check_report`
    (on :class:`~autograder.checks.scoring.Report`) and the sandbox's regrade
    (:mod:`autograder.reference_regrade`, on its cell scores): ``second``
    wins when it scored more (the points were lost only through the earlier answers),
    with ``note`` (:func:`dependency_note`) first among its notes; else ``first`` stays.
    A ``second`` whose ``status`` is ``"cheat"`` (tampering caught in the regrade) wins
    whatever it scored: no earlier grade outweighs it.

    Args:
        first: the grade of the answer as written (``.score``, ``.notes``).
        second: the grade with the references in place, or ``None`` (not run).
        note: the note that says which answers were replaced.
        unchanged: the note ``first`` gets when ``second`` scored no more
            (:func:`dependency_unchanged_note`), or ``None`` for none.

    Returns:
        ``first`` or ``second`` (with the note).
    """
    if second is None:
        return first
    if getattr(second, "status", None) == "cheat":
        return second
    if second.score <= first.score:
        if unchanged and unchanged not in first.notes:
            first.notes.append(unchanged)
        return first
    second.notes.insert(0, note)
    return second


def called_dependencies(obj: Any, failing: list[str]) -> list[str]:
    """The exercises of ``failing`` that the code of ``obj`` refers to: an answer
    that never calls an earlier one (a blank answer, one written without it) is
    never told to fix that one first."""
    used = names_used(obj)
    return [d for d in failing if d in used]


def _innermost_function(traceback_text: str, names: set[str]) -> str | None:
    """The innermost frame of a traceback whose function is one of ``names``."""
    frames = re.findall(r'File "[^"\n]*", line \d+, in ([^\s]+)', traceback_text or "")
    return next((f for f in reversed(frames) if f in names), None)


def own_failures(exercise: Exercise, obj: Any, cases: list[Case], results: list[Result],
                 dependencies: list[str]) -> bool:
    """Whether every graded case ``obj`` fails raised in the answer's own code, not in
    one of ``dependencies``: then the failing earlier answers do not explain this
    failure (a typo in ``MultiHeadAttention.forward`` is not "fix ``split_heads``
    first"), and no dependency note is made.

    A case that failed with wrong values (not an exception) could come from a
    dependency, and so does an exception whose innermost frame among the answer's
    functions and the dependencies is a dependency's (or a function of the answer
    called like one), and an exception other than a slip of the answer's own code
    (:data:`_SLIPS`): a shape error in ``self.w_o(merge_heads(...))`` comes from what
    a wrong ``merge_heads`` returned."""
    own = {getattr(obj, "__name__", "")}
    if isinstance(obj, type):
        own |= {n for n, v in vars(obj).items() if hasattr(getattr(v, "__func__", v), "__code__")}
    own -= set(dependencies) | {""}
    known = own | set(dependencies)
    failed = 0
    for case, got in zip(cases, results):
        if exercise.part_of(case) == ADVICE:
            continue
        try:
            exercise.judge(case, got, exercise.expected(case))
            continue
        except CheckFailure:
            failed += 1
        raised = got.raised or {}
        if not raised or raised.get("type") == "NotImplementedError":
            return False
        if _innermost_function(str(raised.get("traceback") or ""), known) not in own:
            return False
        if raised.get("type") not in _SLIPS:
            return False
    return failed > 0


#: The exceptions an answer's own code raises whatever its dependencies return: a
#: misspelt name or attribute (``np.linalg.nrom``, ``self.dropuot``, ``k.tranpose``).
_SLIPS = frozenset({"NameError", "UnboundLocalError", "AttributeError"})
