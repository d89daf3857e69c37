"""The withholding rule: which modules of ``solutions`` a chapter's answers take with them.

When exercises are graded (in the sandbox) or released (in the student package), the
modules of ``solutions`` that define one of them, or an object that computes one
(:data:`COMPUTES_EXERCISES`), or import such a module, directly or through others,
are left out: :func:`graded_modules`. The rule reads the package's code with
:mod:`ast` (:func:`module_names`, :func:`defined_names`, :func:`imported_modules`),
so a new module is withheld or shipped by what it defines and imports, never by a
list. The grading sandbox's library (:func:`autograder.library.build_library`) and
the student package (:mod:`autograder.student.package`) both apply it; neither
needs the other.
"""
from __future__ import annotations

import ast
from pathlib import Path

from .untrusted import parse_source

__all__ = ["SOLUTIONS_DIR", "FIGURES_SUBPACKAGE", "COMPUTES_EXERCISES", "module_names", "defined_names",
           "import_target", "imported_modules", "withheld_names", "graded_modules"]

SOLUTIONS_DIR = Path(__file__).resolve().parent.parent / "solutions"
#: ``solutions.figures``: the book's diagrams and plots, which hold no answer (withheld only if they imported one).
FIGURES_SUBPACKAGE = "figures"


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of the package at ``root``."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(root).with_suffix("")
        parts = [package, *rel.parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def defined_names(tree: ast.Module) -> set[str]:
    """Top-level names a module defines (functions, classes, assignments)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names.add(target.id)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def import_target(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The dotted module a ``from ... import`` statement of ``module`` reads from:
    ``from ..training import x`` in ``solutions.app.trainer`` is ``solutions.training``,
    ``from .data import x`` there ``solutions.app.data``."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    anchor = base[: len(base) - (node.level - 1)]
    return ".".join([*anchor, *(node.module.split(".") if node.module else [])])


def imported_modules(tree: ast.Module, module: str, is_package: bool, package: str) -> set[str]:
    """Every module of ``package`` that ``module`` imports, anywhere in its code
    (module level or inside functions): ``from .x import y``, ``from . import x``,
    ``from ..x import y`` (in a subpackage), ``import package.x``,
    ``from package.x import y``, ``from package import x``."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == package or alias.name.startswith(package + "."):
                    found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            target = import_target(node, module, is_package)
            if target != package and not target.startswith(package + "."):
                continue
            found.add(target)
            for alias in node.names:  # `from . import x` names submodules too
                found.add(f"{target}.{alias.name}")
    return found


# Objects of a later chapter whose code computes an earlier chapter's exercise: a
# `softmax` answer could return `masked_softmax(torch.from_numpy(x), None).numpy()`,
# and a `DecoderLayer` could run its own submodules through the key/value cache's
# decoder step. Grading any exercise listed here withholds the module that
# defines the object (and, as for every stripped module, what imports it).
COMPUTES_EXERCISES: dict[str, tuple[str, ...]] = {
    "masked_softmax": ("softmax",),
    "IncrementalDecoder": ("DecoderLayer",),
}


def withheld_names(graded_names: set[str]) -> set[str]:
    """The graded names and every object that computes one of them."""
    names = set(graded_names)
    names |= {obj for obj, computes in COMPUTES_EXERCISES.items() if set(computes) & set(graded_names)}
    return names


def graded_modules(graded_names: set[str], root: Path = SOLUTIONS_DIR, package: str = "solutions") -> set[str]:
    """The modules of ``package`` to strip when ``graded_names`` are being graded.

    A module is stripped when it defines one of the names or an object that
    computes one (:data:`COMPUTES_EXERCISES`), or imports (directly or through
    other modules, found with :mod:`ast`) a stripped module. The package's
    ``__init__`` is always regenerated, never copied.

    Args:
        graded_names: the contract names graded in this chapter (``{"softmax", ...}``).
        root: the package's folder.
        package: its import name.

    Returns:
        Dotted names of the modules to leave out (``{"solutions.attention", ...}``).
    """
    modules = module_names(root, package)
    trees = {name: parse_source(path.read_text(encoding="utf-8"), str(path)) for name, path in modules.items()}
    withheld = withheld_names(set(graded_names))
    figures = f"{package}.{FIGURES_SUBPACKAGE}"
    stripped = {  # the figures hold no answer and import no reference module (tested): never by name
        name for name, tree in trees.items()
        if name != package and not (name == figures or name.startswith(figures + "."))
        and defined_names(tree) & withheld
    }
    imports = {
        name: imported_modules(tree, name, modules[name].name == "__init__.py", package)
        for name, tree in trees.items()
    }
    changed = True
    while changed:  # transitive closure over "imports a stripped module"
        changed = False
        for name, targets in imports.items():
            if name == package or name in stripped:
                continue
            if any(t in stripped or any(t.startswith(s + ".") for s in stripped) for t in targets):
                stripped.add(name)
                changed = True
    # a subpackage whose __init__ is stripped takes its modules with it
    for name in list(modules):
        if any(name.startswith(s + ".") for s in stripped):
            stripped.add(name)
    return stripped
