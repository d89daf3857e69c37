"""A ``solutions`` module that cannot ship whole: the part of it a notebook uses, and shims.

An object a released notebook uses from a module that holds an answer ships as *part*
of that module (:func:`partial_module`: the object and what it refers to, nothing that
names an answer); where that part imports an exercise of a released chapter, the module
it imports from ships as a shim (:data:`SHIM`) that calls the student's own definition.
"""
from __future__ import annotations

import ast
from pathlib import Path

from ..untrusted import parse_source
from ..withhold import defined_names, import_target, imported_modules, module_names
from .shipped import REPO

__all__ = ["SOLUTIONS_DIR", "Library", "partial_module", "segment", "SHIM"]

SOLUTIONS_DIR = REPO / "solutions"


class Library:
    """The ``solutions`` modules: their syntax trees, exports and imports."""

    def __init__(self, root: Path = SOLUTIONS_DIR):
        self.root = root
        self.files = module_names(root, "solutions")
        self.trees = {m: parse_source(p.read_text(encoding="utf-8"), str(p)) for m, p in self.files.items()}
        self.imports = {m: imported_modules(t, m, self.files[m].name == "__init__.py", "solutions") & set(self.files)
                        for m, t in self.trees.items()}
        self.defined = {m: defined_names(t) for m, t in self.trees.items()}
        init = self.trees["solutions"]
        self.star = [f"solutions.{n.module}" for n in init.body  # the modules the __init__ re-exports, in order
                     if isinstance(n, ast.ImportFrom) and n.level == 1 and n.module]

    def owner(self, name: str) -> str | None:
        """The module that defines top-level name ``name`` (the ``__init__``'s star order first)."""
        for module in self.star + sorted(self.files):
            if module != "solutions" and name in self.defined[module]:
                return module
        return None

    def closure(self, roots: set[str]) -> set[str]:
        """``roots`` and every module they import, transitively, with the subpackages
        that hold them (``solutions.app`` for ``solutions.app.data``: Python imports it first)."""
        todo, seen = list(roots), set()
        while todo:
            module = todo.pop()
            if module in seen or module == "solutions":
                continue
            seen.add(module)
            todo.extend(self.imports.get(module, ()))
            todo.extend(self.parents(module))
        return seen

    def parents(self, module: str) -> list[str]:
        """The subpackages of ``solutions`` above ``module`` (``["solutions.app"]``)."""
        parts = module.split(".")
        return [p for i in range(2, len(parts)) if (p := ".".join(parts[:i])) in self.files]

    def import_target(self, node: ast.ImportFrom, module: str) -> str:
        """The dotted module that ``from ... import`` statement ``node`` of ``module`` reads from."""
        return import_target(node, module, self.files[module].name == "__init__.py")


def _bound_names(node: ast.stmt) -> set[str]:
    """Names a top-level statement binds (a def, a class, an assignment, an import)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return {n.id for t in targets if t is not None for n in ast.walk(t) if isinstance(n, ast.Name)}


def segment(text: str, node: ast.stmt) -> str:
    """The source of top-level statement ``node``, its decorators included
    (``ast.get_source_segment`` starts a decorated class at ``class``: ``@dataclass`` would be lost)."""
    decorators = getattr(node, "decorator_list", [])
    if not decorators:
        return ast.get_source_segment(text, node)
    lines = text.splitlines()
    return "\n".join(lines[min(d.lineno for d in decorators) - 1:node.end_lineno])


def partial_module(library: Library, module: str, wanted: set[str], forbidden: set[str],
                   shipped: set[str], yours: set[str] = frozenset(), answers: set[str] = frozenset(),
                   later: dict[str, str] | None = None, chain: bool = False
                   ) -> tuple[str | None, str, set[str], dict[str, set[str]], dict[str, set[str]], dict[str, set[str]]]:
    """The part of a withheld module that defines ``wanted`` and nothing of an answer.

    A module is withheld whole when it defines an exercise (``solutions.rnn`` defines
    ``rnn_forward``), but a notebook may use another of its objects
    (``additive_attention``). This keeps the module's docstring, the top-level
    statements that define ``wanted`` and, transitively, what they refer to; it gives up
    when one of those refers to a ``forbidden`` name (an exercise of a released or later
    chapter, or an object that computes one), holds a line of ``answers`` (code copied
    from an answer) or imports from a module that cannot ship. Three kinds of import
    are kept all the same:

    * a name of ``yours`` (an exercise of a released chapter): the module it comes from
      ships as a shim calling the student's own definition (chapter 6's
      ``MultiHeadAttention`` runs the student's ``masked_softmax``);
    * a name of ``later`` (an exercise of a later chapter, name -> chapter) imported
      from another module: that module ships as stand-ins (chapter 9's
      ``translate`` decodes with a stand-in greedy search; see :mod:`.standins`);
    * with ``chain``, any other name imported from a withheld module: that module
      must then ship the name as a part of its own (the caller makes it, recursively:
      chapter 10's ``Trainer`` imports ``translate``, part of ``solutions.translation``).

    Returns:
        ``(source, reason, needs, shims, chained, standins)``: the partial module's
        source (``None`` when it gives up, ``reason`` says why), the ``solutions``
        modules it imports from, the shim modules it needs (module -> names), the
        withheld modules whose parts it needs (module -> names) and the stand-in
        modules it needs (module -> names).
    """
    later = later or {}
    tree = library.trees[module]
    path = library.files[module]
    text = path.read_text(encoding="utf-8")
    statements = [n for n in tree.body if not (isinstance(n, ast.Expr) and n is tree.body[0])]
    binders = {name: node for node in statements for name in _bound_names(node)}
    keep: list[ast.stmt] = []
    todo = sorted(wanted)
    needs: set[str] = set()
    shims: dict[str, set[str]] = {}
    chained: dict[str, set[str]] = {}
    standins: dict[str, set[str]] = {}
    seen: set[str] = set()
    failed = None, "", set(), {}, {}, {}
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        node = binders.get(name)
        source = None
        if isinstance(node, ast.ImportFrom) and node.level:
            source = library.import_target(node, module)
        imported = source is not None and source != module and source not in shipped
        if name in yours and imported:
            shims.setdefault(source, set()).add(name)
        elif name in later and imported:
            standins.setdefault(source, set()).add(name)
        elif name in forbidden:
            why = f"it needs {name}, an exercise of a released or later chapter (or code computing one)"
            return (None, why, *failed[2:])
        elif node is None:
            continue  # a builtin, or a name the module does not define
        elif source is not None and source in library.files and source not in shipped:
            if not chain:
                return (None, f"it imports {name} from {source}, which cannot ship", *failed[2:])
            chained.setdefault(source, set()).add(name)
        else:
            if source is not None:
                needs.add(source)
            if node not in keep:
                keep.append(node)
                todo += [n.id for n in ast.walk(node) if isinstance(n, ast.Name)]
            continue
        if node not in keep:
            keep.append(node)
    keep.sort(key=lambda n: n.lineno)
    for node in keep:
        copied = [ln.strip() for ln in segment(text, node).splitlines() if ln.strip() in answers]
        if copied:
            return (None, f"its code repeats an answer ({copied[0]!r})", *failed[2:])
    doc = ast.get_docstring(tree) or module
    header = (f'"""Part of `{module}` (generated by `autograder release`, do not edit): only '
              f'{", ".join(sorted(wanted))}.\n\nThe rest of the module holds or uses an answer of a released or '
              f'later chapter. Original docstring:\n\n{doc}\n"""')
    body = "\n\n".join(segment(text, n) for n in keep)
    for kind in (shims, standins, chained):  # every name the kept imports take from such a module
        for source, names in kind.items():
            for node in keep:
                if isinstance(node, ast.ImportFrom) and node.level and library.import_target(node, module) == source:
                    names.update(a.name for a in node.names)
    for source, names in shims.items():
        if not names <= set(yours):
            return (None, f"it imports {sorted(names - set(yours))} from {source}, which cannot ship", *failed[2:])
    for source, names in standins.items():
        if not names <= set(later):
            return (None, f"it imports {sorted(names - set(later))} from {source}, which cannot ship", *failed[2:])
    return f"{header}\n{body}\n\n__all__ = {sorted(wanted)!r}\n", "", needs, shims, chained, standins


SHIM = '''"""`{module}` for the package's own modules: your answers (generated by `autograder release`, do not edit).

The package's {users} imports {names} from here; each one calls the definition of
that name in your notebook (an exercise of a released chapter), so the reference code
around it runs with your answer.
"""
import sys as _sys

__all__ = {names_list!r}


def _yours(name):
    def call(*args, **kwargs):
        answer = getattr(_sys.modules.get("__main__"), name, None)
        if answer is None:
            raise NameError(f"{{name}} is not defined: write it in its exercise cell and run that cell first")
        return answer(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call


{assignments}
'''
