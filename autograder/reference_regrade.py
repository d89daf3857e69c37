"""One mistake charged once: a cell graded again with the references of earlier exercises.

An exercise that lost points and ``uses`` an earlier exercise of the notebook that fell
short is graded once more with that reference in its place and keeps the better grade
(:func:`regrades` names them, :func:`regrade` runs one); the reference is called across
the wall (:class:`~autograder.reference_calls.ReferenceCalls`), never put in the
student's process (ARCHITECTURE.md §3).
"""
from __future__ import annotations

import ast
from pathlib import Path

from .cells import GradedCell
from .checks.dependencies import charged_once, dependency_note, dependency_unchanged_note
from .checks.exercise import get_exercise
from .jobs import Budget, write_job
from .limits import Limits
from .reference_calls import ReferenceCalls
from .scores import Status
from .untrusted import one_line, parse_untrusted
from .verdicts import collect

__all__ = ["regrades", "regrade", "across_the_wall"]


def _falls_short(g: GradedCell) -> bool:
    return g.result is None or g.result.score < g.result.max_score


def regrades(graded: list[GradedCell]):
    """Yield ``(cell, failing earlier exercises)`` for each cell that lost points and
    uses (``Exercise.uses``) an earlier exercise of this notebook that fell short
    of full marks. Yielded in notebook order, after the earlier cells' own
    regrades, so "falls short" is each earlier exercise's final grade."""
    for i, g in enumerate(graded):
        if g.exercise is None or g.source is None or g.result is None:
            continue
        if g.result.status not in (Status.FAILED, Status.PARTIAL) or not g.exercise.uses:
            continue
        if g.blank_stub:
            continue  # the released stub raises before it reads any name: a regrade runs it the same
        earlier = {h.name: h for h in graded[:i]}
        failing = [d for d in g.exercise.uses if d in earlier and _falls_short(earlier[d])]
        if failing:
            yield g, failing


def across_the_wall(name: str) -> bool:
    """Whether the reference of exercise ``name`` can be called from outside the
    student's process in a regrade (:class:`~autograder.reference_calls.ReferenceCalls`): a
    function exercise whose arguments and results are data (a callable argument, or a
    model whose methods ``greedy_decode`` calls, is called back), or a class exercise,
    whose stand-in holds the reference's parameters as data and runs its modules outside."""
    try:
        exercise = get_exercise(name)
    except ValueError:
        return False
    return exercise.kind in ("function", "class")


def regrade(g: GradedCell, failing: list[str], graded: list[GradedCell], setup: list[str], job_dir: Path,
             lib_dir: Path, limits: Limits, sandbox: bool, clock: Budget, references_lib: Path | None) -> None:
    """Grade ``g`` again with the references of ``failing`` in place of those
    answers; keep the better grade, with a note that names what was replaced.

    No reference a graded cell can read is in its process (issue 36): a failing
    function or class exercise's name is bound there to a stand-in (a function, or a
    module holding the reference's parameters as data) whose calls run the reference in
    a sandbox of its own (:class:`~autograder.reference_calls.ReferenceCalls`), started before
    the student's run so that its start is not charged to the budget; the regrade is
    judged and reported like any run. Every other earlier answer is the student's own;
    the reference of ``g`` itself is never there. A failing exercise whose reference
    cannot be called across the wall (none is: :func:`across_the_wall`) is never put
    there as source: the first grade stands, as it does if the references' sandbox does
    not start.
    """
    context: list[dict] = []
    remote = {h for h in failing if across_the_wall(h)}
    if remote != set(failing):
        return
    for h in graded:
        if h is g:
            break
        if h.name in remote:
            context.append({"exercise": h.name, "reference": h.exercise.kind})
        elif h.source is not None:
            context.append({"exercise": h.name, "source": h.source})
    first = g.result
    bundles = write_job(job_dir, setup, [g], context)
    if remote:
        with ReferenceCalls(remote, references_lib, job_dir.with_name(job_dir.name + "-references"), limits,
                            sandbox) as calls:
            # The references' start is not charged to the student's budget: the run starts after it.
            if not calls.wait_ready():
                return  # no references: the first grade stands
            outcome = clock.run(job_dir, lib_dir, limits, sandbox, bundles, calls.hand_over())
    else:
        outcome = clock.run(job_dir, lib_dir, limits, sandbox, bundles)
    collect([g], outcome, limits)
    used = sorted(_names_in(g.source))
    unchanged = dependency_unchanged_note(g.name, used, failing)  # the prompts promise a note either way
    g.result = charged_once(first, g.result, one_line(dependency_note(g.name, used, failing)),
                            one_line(unchanged) if unchanged else None)
    if g.result is not first and g.result.status not in (Status.PASSED, Status.CHEAT):
        g.result.reason = f"{g.result.notes[0]}. {g.result.reason}"  # both one line already, neither cut


def _names_in(source: str) -> set[str]:
    """Names the student's cell loads (trusted parse of untrusted text, within
    :data:`~autograder.untrusted.MAX_PARSED_SOURCE`; an empty set above it)."""
    try:
        tree = parse_untrusted(source, "<submission>")
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # SourceTooLarge is a ValueError
        return set()
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
