"""Imports inside functions in ``autograder/`` and ``solutions/`` say why they are there.

An import belongs at the top of its module (STYLE.md). One inside a function is allowed
where it breaks a real import cycle or defers a heavy or optional dependency (torch in
the checks, nbgrader, matplotlib, IPython, ...), and then a comment says which: on the
import's own line, or on the line just above it, which covers the run of imports that
starts there. An undocumented one fails this test with its file and line, so the count
can only fall.
"""
from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("autograder", "solutions")


def _comment_lines(source: str) -> set[int]:
    """The line numbers that hold a comment (alone or after code)."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {tok.start[0] for tok in tokens if tok.type == tokenize.COMMENT}


def _own_line_comments(source: str, comments: set[int]) -> set[int]:
    """The comment lines that hold nothing but the comment."""
    lines = source.splitlines()
    return {n for n in comments if lines[n - 1].lstrip().startswith("#")}


def _bodies(tree: ast.AST):
    """Every statement list inside a function: its body, and the bodies of its if/for/while/
    with/try/except/match blocks and of what it defines (one walk of the tree)."""
    def visit(node: ast.AST, in_function: bool):
        in_function = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        if in_function:
            for name in ("body", "orelse", "finalbody"):
                statements = getattr(node, name, None)
                if isinstance(statements, list) and statements and isinstance(statements[0], ast.stmt):
                    yield statements
        for child in ast.iter_child_nodes(node):
            yield from visit(child, in_function)

    yield from visit(tree, False)


def undocumented_function_imports(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line: import ...`` for each function-level import of ``path`` that no comment explains.

    A run of consecutive import statements is documented by a comment on the line just
    above its first import; an import is documented by a comment on any of its own lines.
    """
    source = path.read_text(encoding="utf-8")
    comments = _comment_lines(source)
    above = _own_line_comments(source, comments)
    lines = source.splitlines()
    found: dict[int, str] = {}
    for statements in _bodies(ast.parse(source, filename=str(path))):
        documented_run = False
        previous_import = False
        for statement in statements:
            if not isinstance(statement, (ast.Import, ast.ImportFrom)):
                previous_import = documented_run = False
                continue
            if statement.lineno - 1 in above:
                documented_run = True
            elif not previous_import:
                documented_run = False
            own = any(n in comments for n in range(statement.lineno, statement.end_lineno + 1))
            if not (own or documented_run):
                found[statement.lineno] = lines[statement.lineno - 1].strip()
            previous_import = True
    rel = path.relative_to(root).as_posix()
    return [f"{rel}:{line}: {text}" for line, text in sorted(found.items())]


def _modules():
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def test_every_function_level_import_says_why():
    problems = [problem for path in _modules() for problem in undocumented_function_imports(path)]
    assert not problems, (
        f"{len(problems)} import(s) inside functions without a comment saying why: move each to the top of "
        "its module, or say on its line (or the line above) which cycle it breaks or which heavy or "
        "optional import it defers:\n" + "\n".join(problems))


@pytest.mark.parametrize("source, flagged", [
    ("import os\n\ndef f():\n    import json\n    return json\n", [4]),
    ("def f():\n    # deferred: torch is heavy\n    import torch\n    import torch.nn as nn\n    x = 1\n"
     "    import math\n", [6]),
    ("def f():\n    import torch  # heavy\n    import math\n", [3]),
    ("def f():\n    try:\n        import yaml\n    except ImportError:\n        yaml = None\n", [3]),
    ("def f():\n    x = 1  # a comment on code\n    import json\n", [3]),
    ("def f():\n    from . import (\n        a,  # the cycle with a\n        b,\n    )\n", []),
    ("import json\n\nclass C:\n    def m(self):\n        import csv\n", [5]),
])
def test_the_rule_flags_an_import_without_its_comment(tmp_path, source, flagged):
    path = tmp_path / "probe.py"
    path.write_text(source, encoding="utf-8")
    assert [int(p.split(":")[1]) for p in undocumented_function_imports(path, tmp_path)] == flagged
