"""What a Python file imports, read from its code: the one walker of the layout tests.

``tests/unit/test_package_layout.py`` (the reference's reading order) and
``tests/autograder/test_import_direction.py`` (the autograder's floors) both ask which
modules a file imports, relative or absolute, anywhere in its code (a function-level
import counts: it is still an arrow between two modules).
"""
from __future__ import annotations

import ast
from pathlib import Path

__all__ = ["imported_names"]


def imported_names(path: Path, root: Path) -> set[str]:
    """The dotted names a file imports, absolute, each module and each name taken from it.

    ``from .text import read_csv`` in ``autograder/roster.py`` gives ``autograder.text`` and
    ``autograder.text.read_csv``; ``import torch.nn`` gives ``torch.nn``.

    Args:
        path: the ``.py`` file.
        root: the folder its top package stands in (relative imports resolve from there).
    """
    package = list(path.relative_to(root).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found
