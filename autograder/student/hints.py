"""Check helpers ship as their results on the visible cases, never as code that could compute an answer.

The same goes for the results a case accepts besides the reference's
(:meth:`autograder.checks.base.Exercise.tolerated`: ``layer_norm`` with the unbiased
variance, for the parts that do not state it), which such helpers compute too.

Some checks' hints recompute an answer to compare the student's result with a
plausible mistake (chapter 10's ``beam_variant`` re-runs the beam search with one step
changed; chapter 4's ``_softmax``, chapter 7's ``_ln_variant`` compute the answer with a
switch). Whether a helper can is not read from its lines: the student package
(:mod:`autograder.student.package`) ships a check's verdict as it is and replaces the
body of every other helper (:func:`withhold_helpers`) by a replay of what it returned at
release for the same arguments (:func:`record_helpers`,
:func:`autograder.student.expected.replay`); a verdict helper given only the case's data
is replayed too (:func:`replayable`), and no case maker ships.
"""
from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect

import numpy as np

from ..wire import Tensor
from .expected import call_key, encode_value

__all__ = ["withhold_helpers", "replayable", "record_helpers"]

_WITHHELD_DOC = ('"""Withheld from the student package: a check helper ships as its results on the visible cases, '
                 'recorded at release (autograder.student.expected.replay), never as code that could compute an '
                 'answer."""')


def _replay_call(node: ast.FunctionDef, helper: str) -> str:
    """``return replay("<helper>", {<every parameter>: <its value>})`` for ``node``
    (a method's ``self`` or ``cls`` left out: a key is data)."""
    args = node.args
    names = [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
    if "." in helper and names and names[0] in ("self", "cls"):
        names = names[1:]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    return f"return _replay({helper!r}, {{{', '.join(f'{n!r}: {n}' for n in names)}}})"


# The methods of a check's exercise class that decide a verdict on the student's side
# (their bodies, and every helper they reach, ship as they are), and ``diagnose``, which
# orchestrates the hints (it ships; what it calls is replayed).
VERDICT_METHODS = frozenset({"judge", "_judge", "raised_hint", "call_hint", "error_hint", "expected"})
HINT_METHODS = frozenset({"diagnose"})
# The methods that draw an exercise's cases: the package reads its visible cases from
# ``autograder/expected``, so no case maker ships, and no hidden case with it.
CASE_METHODS = frozenset({"cases", "_cases"})
_NO_CASES = 'raise LookupError("the student package reads its visible cases from autograder/expected")'


def _units(tree: ast.Module) -> dict[str, ast.AST]:
    """``name -> node`` of every top-level function (``name``) and method (``Class.name``)."""
    units = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            units[node.name] = node
        elif isinstance(node, ast.ClassDef):
            units.update({f"{node.name}.{n.name}": n for n in node.body
                          if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))})
    return units


def _references(nodes: list[ast.AST], units: dict[str, ast.AST], bases: dict[str, list[str]],
                owner: str = "") -> set[str]:
    """The units ``nodes`` (of class ``owner``, or module level) name: a top-level
    function by its name; a method by ``self.<name>``, ``cls.<name>`` or
    ``super().<name>``: the one of ``owner`` or of its bases in the module, else every
    class's of that name (an attribute of another object)."""
    def lineage(cls: str) -> list[str]:
        seen, todo = [], [cls]
        while todo:
            c = todo.pop(0)
            if c and c not in seen:
                seen.append(c)
                todo += bases.get(c, [])
        return seen

    methods: dict[str, set[str]] = {}
    for unit in units:
        if "." in unit:
            methods.setdefault(unit.split(".", 1)[1], set()).add(unit)
    found = set()
    for root in nodes:
        for node in ast.walk(root):
            if isinstance(node, ast.Name) and node.id in units:
                found.add(node.id)
            elif isinstance(node, ast.Attribute) and node.attr in methods:
                own = [f"{c}.{node.attr}" for c in lineage(owner) if f"{c}.{node.attr}" in units]
                overrides = {m for m in methods[node.attr] if owner and owner in lineage(m.split(".", 1)[0])}
                found |= (set(own[:1]) | overrides) if own or overrides else methods[node.attr]
    return found


def _verdict_path(tree: ast.Module, units: dict[str, ast.AST]) -> set[str]:
    """The units the student's side runs as they are: the verdict methods, what the
    module's own statements run at import (class bodies, decorators, defaults), and
    every unit these reach, but not through a hint method (``diagnose``: what it calls
    is replayed)."""
    outside = []  # the module's statements, less the bodies of its units
    bases: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            outside += [*node.decorator_list, *node.args.defaults, *filter(None, node.args.kw_defaults)]
        elif isinstance(node, ast.ClassDef):
            bases[node.name] = [b.id for b in node.bases if isinstance(b, ast.Name)]
            outside += [*node.bases, *node.decorator_list]
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    outside += [*item.decorator_list, *item.args.defaults, *filter(None, item.args.kw_defaults)]
                else:
                    outside.append(item)
        else:
            outside.append(node)
    kept = {u for u in units if u.rsplit(".", 1)[-1] in VERDICT_METHODS} | _references(outside, units, bases)
    todo = list(kept)
    while todo:
        unit = todo.pop()
        if unit.rsplit(".", 1)[-1] in HINT_METHODS:
            continue
        owner = unit.rsplit(".", 1)[0] if "." in unit else ""
        for found in _references([units[unit]], units, bases, owner) - kept:
            kept.add(found)
            todo.append(found)
    return {u for u in kept if u in units and u.rsplit(".", 1)[-1] not in CASE_METHODS}


def withhold_helpers(text: str, answers: set[str], module: str = "",
                     behaviour: tuple[set[str], set[str]] = (frozenset(), frozenset())) -> tuple[str, list[str]]:
    """``text`` (a check module ``module``) as the student package ships it: every
    helper that could compute an answer holds a replay of its recorded results instead
    of its body; and the names of those helpers.

    The rule is by behaviour, not by text: the student's side runs a check's verdict
    (``judge``, ``raised_hint``, … and every helper they reach: :func:`_verdict_path`)
    and its hints (``diagnose``); every other top-level function and method — the hint
    helpers that recompute an answer or a plausible mistake (``_softmax``,
    ``_ln_variant``, ``beam_variant``), whatever their lines — is replaced by a replay of
    what it returned at release for the same arguments on the visible cases
    (:func:`record_helpers`, :func:`autograder.student.expected.replay`; other arguments
    raise ``LookupError`` and the hint is left out: ``diagnose`` failing never hides the
    verdict). A unit that holds a line of ``answers`` is withheld even on the verdict
    path. ``behaviour`` (:func:`replayable`) is what the helpers did on the visible
    cases: ``(compares, replays)``; a helper given the answer's result ships (it
    compares), one given the case's data only is replayed even on the verdict path
    (``greedy_variant``). The case makers (``cases``) ship no body at all, so no hidden case's shape,
    label or tolerance ships either. Top-level functions and methods are the units (a
    nested helper goes with its owner); a method's replay leaves ``self`` out of the key.
    """
    tree = ast.parse(text)
    lines = text.splitlines()
    units = _units(tree)
    compares, replay = behaviour
    kept = (_verdict_path(tree, units) | set(compares)) - set(replay)
    withheld = []
    for name, node in sorted(units.items(), key=lambda u: -u[1].lineno):
        body = lines[node.body[0].lineno - 1: node.end_lineno]
        leaf = name.rsplit(".", 1)[-1]
        holds_answer = any(line.strip() in answers for line in body)
        if not holds_answer and (name in kept or leaf in HINT_METHODS or leaf in VERDICT_METHODS):
            continue
        first = node.body[0]
        indent = " " * first.col_offset
        if leaf in CASE_METHODS:
            replacement = [indent + _NO_CASES]
        else:
            replacement = [indent + _WITHHELD_DOC, indent + _replay_call(node, f"{module}.{name}")]
        lines[first.lineno - 1: node.end_lineno] = replacement
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


def _runs(chapters: list[str]) -> list:
    """``(exercise, case, want)`` for every visible case of ``chapters`` (repository only)."""
    # repository only (recording a release's hints): the checks' case drawing
    from ..checks import exercises_of
    from ..checks.base import draw_cases, make_rng

    return [(exercise, case, exercise.expected(case)) for chapter in chapters for exercise in exercises_of(chapter)
            for case in draw_cases(exercise, make_rng(False), False)]


def _holds(arguments: dict, got) -> bool:
    """Whether ``arguments`` hold the answer's result ``got``, its value or what it
    raised, or any result."""
    fields = [v for v in (getattr(got, "value", None), getattr(got, "raised", None)) if v is not None]
    for arg in arguments.values():
        for item in (arg, *(arg if isinstance(arg, (list, tuple)) else ())):
            if item is got or any(item is f for f in fields) or type(item).__name__ == "Result":
                return True
    return False


def _recorded(helpers: dict[str, list[str]], chapters: list[str]):
    """Run every visible case's verdict and hints (``judge`` and ``diagnose``, with the
    reference's result and a perturbed one as the answer) while ``helpers`` (check
    module -> unit names) record each call.

    Returns:
        ``(calls, arrays, takes_answer, gave_data)``: ``call_key -> encoded result`` of
        every call whose arguments and result are data; the units that were given the
        answer's result or returned something that is not data (they cannot be
        replayed); the units of which a call was recorded.
    """
    calls: dict = {}
    arrays: dict[str, np.ndarray] = {}
    takes_answer: set[str] = set()
    gave_data: set[str] = set()
    current = [None]

    def recorder(original, helper, method):
        signature = inspect.signature(original)

        def call(*args, **kwargs):
            result = original(*args, **kwargs)
            try:
                bound = signature.bind(*args, **kwargs)
                bound.apply_defaults()
                arguments = dict(bound.arguments)
                if method:  # the key leaves self out (_replay_call)
                    arguments.pop(next(iter(signature.parameters)), None)
                if _holds(arguments, current[0]):
                    takes_answer.add(helper)  # it compares with the answer: it ships
                    return result
                key = call_key(helper, arguments)
            except (TypeError, ValueError):
                return result  # arguments that are not data (a function): withheld, that hint is left out
            try:
                if key not in calls:
                    calls[key] = encode_value(result, arrays)
                gave_data.add(helper)
            except (TypeError, ValueError):
                takes_answer.add(helper)  # a result that is not data (a model, a context): it ships
            return result

        return call

    runs = _runs(chapters)  # the cases and the reference's results, before any helper records
    patched = []
    try:
        for stem, names in helpers.items():
            module = importlib.import_module(f"autograder.checks.{stem}")
            for name in names:
                owner_name, _, attr = name.rpartition(".")
                if attr in CASE_METHODS:
                    continue  # never called on the student's side
                owner = getattr(module, owner_name) if owner_name else module
                original = owner.__dict__[attr] if owner_name else getattr(module, attr)
                if isinstance(original, (staticmethod, classmethod)):
                    continue  # not replayed: its hint is left out
                setattr(owner, attr, recorder(original, f"{stem}.{name}", bool(owner_name)))
                patched.append((owner, attr, original))
        for exercise, case, want in runs:
            try:  # the results another part's broken rule gives, which the case accepts
                exercise.tolerated(case, want)
            except Exception:  # noqa: BLE001 - not replayed either: the case then accepts the reference alone
                pass
            for got in (want, dataclasses.replace(want, value=_perturbed(want.value))):
                current[0] = got
                for step in (exercise.judge, exercise.diagnose):
                    try:
                        step(case, got, want)
                    except Exception:  # noqa: BLE001 - a failing verdict or hint records what it reached
                        pass
    finally:
        current[0] = None
        for owner, attr, original in patched:
            setattr(owner, attr, original)
    return calls, arrays, takes_answer, gave_data


def replayable(paths: list, chapters: list[str]) -> dict[str, tuple[set[str], set[str]]]:
    """Which helpers of the check modules ``paths`` ship as code and which as recorded
    results, by what they do on the visible cases of ``chapters`` (verdicts and hints
    run with the reference's result and a perturbed one).

    Returns:
        check module -> ``(compares, replays)``: the helpers given the answer's result
        or returning something that is not data (they compare, or build a model: they
        ship as code), and those given the case's data only and returning data (their
        recorded results serve: ``_softmax``, ``greedy_variant``, the answer with a switch).
    """
    helpers = {}
    for path in paths:
        units = _units(ast.parse(path.read_text(encoding="utf-8")))
        helpers[path.stem] = sorted(u for u in units if u.rsplit(".", 1)[-1] not in
                                    (VERDICT_METHODS | HINT_METHODS | CASE_METHODS))
    _, _, takes_answer, recorded = _recorded(helpers, chapters)
    return {stem: ({n for n in names if f"{stem}.{n}" in takes_answer},
                   {n for n in names if f"{stem}.{n}" in recorded and f"{stem}.{n}" not in takes_answer})
            for stem, names in helpers.items()}


def record_helpers(helpers: dict[str, list[str]], chapters: list[str]) -> tuple[dict, dict[str, np.ndarray]]:
    """Run ``judge`` and ``diagnose`` on every visible case of ``chapters`` (with the
    reference's result and a perturbed one as the answer) while the withheld helpers
    ``helpers`` (check module -> unit names) record each call and its result.

    Returns:
        ``(document, arrays)`` of the replay file: ``{"calls": {call_key: result}}``.
    """
    calls, arrays, _, _ = _recorded(helpers, chapters)
    return {"format": 1, "calls": calls}, arrays
