"""The released blank stub, recognised: a cell that cannot earn a point from a regrade.

A cell that is still the released stub (one ``def``/``class`` of the exercise whose
function raises ``NotImplementedError`` first) raised in every case because nothing was
written; graded again with the earlier exercises' references in place it raises the
same, so it is not regraded (:func:`raised_by_stub`, read by
:func:`autograder.verdicts.collect`). Both tests are trusted parses of untrusted text.
"""
from __future__ import annotations

import ast
import re

from .cells import GradedCell
from .untrusted import parse_untrusted

__all__ = ["raised_by_stub"]


# The released stub's raise: ``raise NotImplementedError()`` (or without the call).
def _is_stub_raise(node: ast.stmt) -> bool:
    if not isinstance(node, ast.Raise) or node.cause is not None:
        return False
    exc = node.exc
    if isinstance(exc, ast.Call) and not exc.args and not exc.keywords:
        exc = exc.func
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"


def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        return body[1:]
    return body


_LITERAL_NODES = (ast.Constant, ast.Tuple, ast.List, ast.Set, ast.Dict, ast.UnaryOp, ast.USub, ast.UAdd,
                  ast.expr_context)


def _plain_def(node: ast.FunctionDef) -> bool:
    """A ``def`` whose definition runs no code of the submission's: no decorator, every
    default a literal (``1``, ``-1e-9``, ``("<pad>", "<unk>")``, ``None``)."""
    defaults = [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]
    return not node.decorator_list and all(isinstance(n, _LITERAL_NODES) for d in defaults for n in ast.walk(d))


def _dotted(node: ast.expr) -> bool:
    """A base class written as a name or a dotted name (``nn.Module``): no call."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _stub_entry(source: str | None, name: str, kind: str) -> tuple[str, int] | None:
    """Where the cell ``source`` of exercise ``name`` raises, when it is the released
    blank stub: ``(function, line)`` of its ``raise NotImplementedError()``, else ``None``.

    The stub, as a trusted parse sees it: the cell is one ``def name`` (a function
    exercise) or one ``class name`` (a class exercise, with its ``__init__``), nothing
    else at its top level; that function's body, after its docstring, *starts* with the
    raise; its definition runs none of the submission's code (no decorator, constant
    defaults, a class's bases plain dotted names, its body only a docstring and such
    ``def``s). Called, the function raises before it reads any name: what the names of
    the earlier exercises are bound to cannot change that.
    """
    try:
        tree = parse_untrusted(source or "", "<submission>")
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # SourceTooLarge is a ValueError
        return None
    if len(tree.body) != 1 or getattr(tree.body[0], "name", None) != name:
        return None
    node = tree.body[0]
    if kind == "class":
        if not (isinstance(node, ast.ClassDef) and not node.decorator_list and not node.keywords
                and all(_dotted(b) for b in node.bases)):
            return None
        methods = _without_docstring(node.body)
        if not all(isinstance(m, ast.FunctionDef) and _plain_def(m) for m in methods):
            return None
        inits = [m for m in methods if m.name == "__init__"]
        if len(inits) != 1:
            return None
        function = inits[0]
    elif isinstance(node, ast.FunctionDef) and _plain_def(node):
        function = node
    else:
        return None
    body = _without_docstring(function.body)
    if not body or not _is_stub_raise(body[0]):
        return None
    return function.name, body[0].lineno


_FRAME = re.compile(r'^  File "(?P<file>[^"\n]*)", line (?P<line>\d+), in (?P<function>\S+)$', re.M)


def raised_by_stub(g: GradedCell, report: dict) -> bool:
    """Whether every case of ``g``'s run raised the released stub's ``NotImplementedError``
    in the stub's own frame: the cell is the stub (:func:`_stub_entry`, a trusted parse),
    and each case's traceback ends in the cell's function (``__init__`` of a class, at
    phase ``init``; the function itself, at phase ``call``) at the line of that raise,
    called by the runner itself (``run_case``), not by a dependency or through a
    wrapper. Such a cell cannot earn a point from a regrade (:func:`~autograder.reference_regrade.regrades`): it
    raises there exactly as here. A traceback is the submission's text, read here only
    to *skip* a regrade, which can only add points: a forged one costs its own cell.
    """
    if g.exercise is None:
        return False
    entry = _stub_entry(g.source, g.name, g.exercise.kind)
    cases = report.get("cases")
    if entry is None or not cases or not isinstance(cases, list):
        return False
    function, line = entry
    phase = "init" if g.exercise.kind == "class" else "call"
    for case in cases:
        raised = case.get("result", {}).get("raised") if isinstance(case, dict) else None
        if not (isinstance(raised, dict) and raised.get("type") == "NotImplementedError"
                and raised.get("phase") == phase and isinstance(raised.get("traceback"), str)):
            return False
        frames = _FRAME.findall(raised["traceback"])
        if len(frames) < 2:
            return False
        (caller_file, _, caller), last = frames[-2], frames[-1]
        if last != (f"<cell {g.name}>", str(line), function):
            return False
        if not (caller_file.endswith("runner.py") and caller == "run_case"):
            return False
    return True
