"""Hints that need an answer: ship the helper's results on the visible cases, not its code.

The same goes for the results a case accepts besides the reference's
(:meth:`autograder.checks.base.Exercise.tolerated`: ``layer_norm`` with the unbiased
variance, for the parts that do not state it), which such helpers compute too.

Some checks' hints recompute an answer to compare the student's result with a
plausible mistake (chapter 10's ``beam_variant`` re-runs the beam search with one step
changed; chapter 1's ``_jacobian_norms`` computes the norms several wrong ways). Such a
helper is an answer, so the student package (:mod:`autograder.student.package`) keeps
its signature and replaces its body (:func:`withhold_helpers`) by a replay of what it
returned at release for the same arguments (:func:`record_helpers`,
:func:`autograder.student.expected.replay`).
"""
from __future__ import annotations

import ast
import dataclasses

import numpy as np

from ..wire import Tensor

__all__ = ["withhold_helpers", "record_helpers"]

_WITHHELD_DOC = ('"""Withheld from the student package: it computes an answer of a released or later chapter. '
                 'Its results on the visible cases were recorded at release (autograder.student.expected.replay)."""')


def _replay_call(node: ast.FunctionDef, helper: str) -> str:
    """``return replay("<helper>", {<every parameter>: <its value>})`` for ``node``."""
    args = node.args
    names = [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    return f"return _replay({helper!r}, {{{', '.join(f'{n!r}: {n}' for n in names)}}})"


def withhold_helpers(text: str, answers: set[str], module: str = "") -> tuple[str, list[str]]:
    """``text`` (a check module ``module``) with the body of every function that holds a
    line of ``answers`` replaced by a replay of its recorded results; and the names of
    those functions.

    Some hints recompute an answer to compare the student's result with a plausible
    mistake (``beam_variant`` re-runs the beam search with one step changed). Such a
    helper is an answer, so the package keeps its signature but not its body: the call
    returns what the helper returned at release for the same arguments
    (:func:`record_helpers`, :func:`autograder.student.expected.replay`), and raises
    ``LookupError`` for other arguments (the hint is then left out: ``diagnose``
    failing never hides the verdict). Top-level functions are the units (a nested
    helper goes with its owner); a method's body becomes a ``LookupError``.
    """
    tree = ast.parse(text)
    lines = text.splitlines()
    units = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            units.append((node, node.name))
        elif isinstance(node, ast.ClassDef):
            units += [(n, f"{node.name}.{n.name}") for n in node.body
                      if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    withheld = []
    for node, name in sorted(units, key=lambda u: -u[0].lineno):
        body = lines[node.body[0].lineno - 1: node.end_lineno]
        if not any(line.strip() in answers for line in body):
            continue
        first = node.body[0]
        indent = " " * first.col_offset
        call = (_replay_call(node, f"{module}.{name}") if "." not in name
                else 'raise LookupError("withheld from the student package")')
        lines[first.lineno - 1: node.end_lineno] = [indent + _WITHHELD_DOC, indent + call]
        withheld.append(name)
    if withheld:
        lines.append("\n\nfrom ..student.expected import replay as _replay  # noqa: E402 - the withheld helpers'")
    return "\n".join(lines) + "\n", sorted(withheld)


def _perturbed(value):
    """A wrong result of the same shape and kind as ``value`` (for recording hints)."""
    if isinstance(value, Tensor):
        marker = Tensor(_perturbed(value.value), value.requires_grad)
        if hasattr(value, "dtype"):
            marker.dtype = value.dtype
        return marker
    if isinstance(value, np.ndarray):
        if value.dtype == bool:
            return ~value
        return value + (1 if value.dtype.kind in "iu" else 0.5) if value.dtype.kind in "iuf" else value
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, list):
        return value + value[-1:] if value else [0]
    if isinstance(value, tuple):
        return tuple(_perturbed(v) for v in value)
    if isinstance(value, dict):
        return {**value, "<perturbed>": len(value)}
    return value


def record_helpers(helpers: dict[str, list[str]], chapters: list[str]) -> tuple[dict, dict[str, np.ndarray]]:
    """Run ``diagnose`` on every visible case of ``chapters`` (with the reference's
    result and a perturbed one as the answer) while the hint helpers ``helpers``
    (check module -> function names) record each call and its result.

    Returns:
        ``(document, arrays)`` of the replay file: ``{"calls": {call_key: result}}``.
    """
    import importlib
    import inspect

    from ..checks import exercises_of
    from ..checks.base import draw_cases, make_rng
    from .expected import call_key, encode_value

    runs = []
    for chapter in chapters:
        for exercise in exercises_of(chapter):
            for case in draw_cases(exercise, make_rng(False), False):
                runs.append((exercise, case, exercise.expected(case)))
    calls: dict = {}
    arrays: dict[str, np.ndarray] = {}

    def recorder(original, helper):
        signature = inspect.signature(original)

        def call(*args, **kwargs):
            result = original(*args, **kwargs)
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            key = call_key(helper, dict(bound.arguments))
            if key not in calls:
                try:
                    calls[key] = encode_value(result, arrays)
                except TypeError:
                    pass  # a result that is not data (a generator): that hint is not replayed
            return result

        return call

    patched = []
    try:
        for stem, names in helpers.items():
            module = importlib.import_module(f"autograder.checks.{stem}")
            for name in names:
                if "." not in name:
                    original = getattr(module, name)
                    setattr(module, name, recorder(original, f"{stem}.{name}"))
                    patched.append((module, name, original))
        for exercise, case, want in runs:
            try:  # the results another part's broken rule gives, which the case accepts
                exercise.tolerated(case, want)
            except Exception:  # noqa: BLE001 - not replayed either: the case then accepts the reference alone
                pass
            for got in (want, dataclasses.replace(want, value=_perturbed(want.value))):
                try:
                    exercise.diagnose(case, got, want)
                except Exception:  # noqa: BLE001 - a hint that fails here is not replayed either
                    pass
    finally:
        for module, name, original in patched:
            setattr(module, name, original)
    return {"format": 1, "calls": calls}, arrays
