"""What the released notebooks use of ``solutions``: names, modules, imports, read from their code."""
from __future__ import annotations

import ast
from pathlib import Path

from .notebook import cell_source, read_notebook

__all__ = ["notebook_uses", "notebook_sources"]


def _code(source: str) -> ast.Module | None:
    lines = ["" if ln.lstrip().startswith(("%", "!")) else ln for ln in source.splitlines()]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def notebook_uses(sources: list[str]) -> tuple[set[tuple[str, str]], set[str], set[str]]:
    """What code cells take from ``solutions`` and which top-level modules they import.

    Returns:
        ``(names, modules, imports)``: ``(module, name)`` pairs (``("solutions",
        "masked_softmax")`` for ``from solutions import masked_softmax`` or
        ``solutions.masked_softmax``; ``("solutions.figures.plots", "show_explorer")``), the
        ``solutions`` submodules named (``"solutions.figures.plots"``) and the top-level modules
        imported (``"numpy"``).
    """
    names: set[tuple[str, str]] = set()
    modules: set[str] = set()
    imports: set[str] = set()
    for source in sources:
        tree = _code(source)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    imports.add(alias.name.split(".")[0])
                    if alias.name.startswith("solutions."):
                        modules.add(alias.name)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imports.add(node.module.split(".")[0])
                if node.module == "solutions" or node.module.startswith("solutions."):
                    names.update((node.module, alias.name) for alias in node.names)
                    if node.module != "solutions":
                        modules.add(node.module)
            elif isinstance(node, ast.Attribute) and not node.attr.startswith("__"):
                owner = _dotted(node.value)  # solutions.masked_softmax, solutions.app.data.make_synthetic_splits
                if owner == "solutions" or owner.startswith("solutions."):
                    names.add((owner, node.attr))
    return names, modules, imports


def _dotted(node: ast.expr) -> str:
    """``a.b.c`` for an attribute chain of names, ``""`` for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def notebook_sources(path: Path) -> list[str]:
    return [cell_source(c) for c in read_notebook(path)["cells"] if c.get("cell_type") == "code"]
