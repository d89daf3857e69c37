"""Keep the notebooks' solution regions equal to the ``solutions`` package.

One source of truth: an exercise's answer lives in ``solutions``. The solution cell
of exercise ``name`` in a chapter notebook (nbgrader metadata ``solution: true``,
``grade_id: name``) is *generated* from ``inspect.getsource(solutions.<name>)``:

* a function keeps its ``def`` line and docstring visible; the body becomes the
  ``### BEGIN SOLUTION`` / ``### END SOLUTION`` region;
* a class keeps its ``class`` line, its docstring and every method's ``def`` line
  and docstring visible; each method body becomes its own region.

``python -m autograder.sync`` rewrites the notebooks; ``--check`` only reports
cells that differ and exits 1, which is what CI runs.
"""
from __future__ import annotations

import argparse
import ast
import inspect
import sys
import textwrap
from pathlib import Path

import nbformat

__all__ = ["solution_cell_source", "sync_notebook", "chapter_notebooks", "main"]

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
REPO = Path(__file__).resolve().parent.parent


def _body_start(node: ast.AST) -> int:
    """0-based index of the first body line after the docstring of ``node``."""
    first = node.body[0]
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        if len(node.body) == 1:
            raise ValueError(f"{getattr(node, 'name', '?')} has only a docstring")
        return first.end_lineno  # 1-based end line of the docstring == 0-based next line
    return first.lineno - 1


def _indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def solution_cell_source(obj) -> str:
    """The solution cell for ``obj`` (a function or class of ``solutions``)."""
    src = textwrap.dedent(inspect.getsource(obj)).rstrip("\n")
    lines = src.split("\n")
    tree = ast.parse(src)
    node = tree.body[0]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        regions = [(_body_start(node), node.end_lineno)]
    elif isinstance(node, ast.ClassDef):
        regions = [
            (_body_start(item), item.end_lineno)
            for item in node.body
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
        ]
        if not regions:
            raise ValueError(f"class {node.name} has no methods to turn into solutions")
    else:  # pragma: no cover - solutions exports functions and classes only
        raise ValueError(f"cannot make a solution cell from a {type(node).__name__}")
    out: list[str] = []
    cursor = 0
    for start, end in regions:
        body = lines[start:end]
        indent = _indent_of(next(line for line in body if line.strip()))
        out.extend(lines[cursor:start])
        out.append(indent + BEGIN)
        out.extend(body)
        out.append(indent + END)
        cursor = end
    out.extend(lines[cursor:])
    return "\n".join(out)


def chapter_notebooks(root: Path = REPO) -> list[Path]:
    """Every chapter notebook ``book/<id>/<id>.ipynb``, in chapter order."""
    return sorted(p for p in (root / "book").glob("*/*.ipynb") if p.stem == p.parent.name)


def sync_notebook(path: Path, write: bool) -> list[str]:
    """Regenerate the solution cells of one notebook; return the grade_ids that differed."""
    import solutions  # deferred: the reference package loads torch

    nb = nbformat.read(str(path), as_version=4)
    changed = []
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("solution"):
            continue
        grade_id = meta.get("grade_id", "")
        obj = getattr(solutions, grade_id, None)
        if obj is None or not (inspect.isfunction(obj) or inspect.isclass(obj)):
            continue  # a free-form solution cell that is not a contract object
        new = solution_cell_source(obj)
        if cell.source != new:
            changed.append(grade_id)
            cell.source = new
    if changed and write:
        nbformat.write(nb, str(path))
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m autograder.sync",
        description="Generate the notebooks' solution regions from the solutions package.",
    )
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every chapter notebook")
    parser.add_argument("--check", action="store_true", help="report differences, change nothing, exit 1 if any")
    args = parser.parse_args(argv)
    paths = args.notebooks or chapter_notebooks()
    stale = 0
    for path in paths:
        changed = sync_notebook(path, write=not args.check)
        if changed:
            stale += 1
            verb = "differs from solutions in" if args.check else "regenerated"
            print(f"{path}: {verb} {', '.join(changed)}")
    if args.check and stale:
        print("notebooks and solutions are not in sync: run `python -m autograder.sync`")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
