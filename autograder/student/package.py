"""Build the student package of a release: a wheel with the visible checks and no answers.

``autograder release --out DIR CHAPTER...`` calls :func:`build_package`, which writes
``DIR/transformer_book_student-<version>+chNN-py3-none-any.whl``. A student installs it
(``pip install <wheel>``: no build step, no network beyond the dependencies) and gets:

* ``autograder``: ``check(name, obj)`` for the notebooks' test cells and
  ``python -m autograder check NOTEBOOK``, running every visible check of the released
  chapters against expected results stored as data (:mod:`autograder.student.expected`);
  the chapters' check modules come along, so the hints are still computed from each
  case's inputs. No hidden check, no grading, no ``solutions`` call for an answer.
* ``solutions``: the reference modules that the released notebooks (and their visible
  cases) use, **minus** every module that defines or imports the answer to an exercise
  of a released or later chapter (the grading sandbox's rule, :func:`autograder.withhold.graded_modules`,
  applied to all of them). Its ``__init__`` is generated:

  - ``solutions.<name>`` for an exercise of a released chapter is the student's own
    definition from the notebook (``solutions.MultiHeadAttention`` in chapter 5's demo
    cells is the class written above), with a message saying what to write when it is
    not there yet;
  - a later chapter's building block that a setup cell imports (chapter 5's
    ``masked_softmax``) is a stand-in (:mod:`autograder.student.standins`), computed
    another way than the reference;
  - an object a notebook uses from a module that cannot ship whole (chapter 1's
    ``additive_attention`` beside the ``rnn_forward`` answer) ships as part of that
    module (:func:`partial_module`); where that part imports an exercise of a released
    chapter, the module it imports from is a shim calling the student's definition
    (chapter 6's ``MultiHeadAttention`` runs the student's ``masked_softmax``);
  - a part may import from another withheld module, which then ships its own part
    (chapter 10's ``Trainer`` imports ``solutions.translation.translate``, which runs the
    student's decoders through a shim of ``solutions.decoding``); a later chapter's
    exercise that a part calls is a stand-in (chapter 9's translations decode with a
    stand-in ``greedy_decode``; ``beam_search``, named but never called there, says it is
    not in the package);
  - anything else a notebook uses but the package leaves out raises an error that says
    why, and the build reports it (:attr:`StudentPackage.warnings`);
    :func:`autograder.release.release` refuses such a chapter (``ReleaseError``).

The data files of the packages that ship (a frozen corpus under ``solutions/``) ship
too (:func:`package_data`). One package serves one chapter: ``autograder release``
builds one per chapter, and a setup cell's ``require_chapter`` names the right wheel.

Check modules ship too (the verdicts and the hints), less their case makers (no hidden
case ships) and the body of every helper outside a verdict, whose results on the visible
cases ship instead (:mod:`autograder.student.hints`); a later chapter's stand-in that the
chapter calls with fixed arguments ships as recorded outputs
(:data:`~autograder.student.standins.RECORDED`). ``autograder.release.scan_release`` then
proves that no line of an answer of a released or later chapter is anywhere in the wheel,
and ``tests/autograder/test_wheel_answers.py`` that no function or class of it earns a
part of a released or later chapter's hidden checks.

The wheel is written directly (:mod:`autograder.student.wheel`), so building it needs
neither ``pip`` nor ``setuptools``.
"""
from __future__ import annotations

import ast
import inspect
import io
import json
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..book import answer_lines, chapter_ids
from ..checks import exercises_of, load_all
from ..fingerprint import import_closure
from ..untrusted import parse_source
from ..withhold import defined_names, graded_modules, import_target, imported_modules, module_names, withheld_names
from .expected import REPLAY, write_chapter, write_contents
from .hints import record_helpers, replayable, withhold_helpers
from .notebook import cell_source, read_notebook
from .wheel import write_wheel

__all__ = ["StudentPackage", "build_package", "package_files", "package_data", "notebook_uses", "partial_module",
           "check_modules", "shipped_modules", "REQUIREMENTS"]

AUTOGRADER_DIR = Path(__file__).resolve().parent.parent
REPO = AUTOGRADER_DIR.parent
SOLUTIONS_DIR = REPO / "solutions"
#: Folders under ``solutions`` whose files are never package data (build and editor leftovers).
SKIPPED_DATA = {"__pycache__", ".ipynb_checkpoints", "_build", ".DS_Store"}

#: Import name -> requirement, for every third-party module the package or a notebook imports.
REQUIREMENTS = {
    "numpy": "numpy>=1.24",
    "torch": "torch>=2.2",
    "matplotlib": "matplotlib>=3.7",
    # Colab pins ipython 7.34 and ipywidgets 7.7: the package uses only what those have
    # (tests/autograder/test_platforms.py resolves the wheel against Colab's pins)
    "ipywidgets": "ipywidgets>=7.6",
    "IPython": "ipython>=7.34",
    "sacrebleu": "sacrebleu>=2.3",
    "tqdm": "tqdm>=4.60",
    "tokenizers": "tokenizers>=0.15",
}
#: Where the student edition's ``autograder`` starts, besides the chapter's check modules:
#: what its generated ``__init__`` and ``__main__`` import (``check`` and its expected
#: results, ``require_chapter``, the ``check`` command). Every module these and the check
#: modules import ships unchanged (:func:`shipped_modules`).
STUDENT_ROOTS = ("checks/base.py", "student/__init__.py", "student/expected.py", "student/cli.py")
#: Modules the student side imports only inside functions that run when a release is
#: built, never in a student's kernel: ``student/expected.py`` reads the chapter's locked
#: cells from the repository's book (``locked_cells``) to record them as data.
RELEASE_ONLY = ("book.py",)

_AUTOGRADER_INIT = '''"""The student edition of ``autograder``: generated by `autograder release`, do not edit.

Released chapters: {chapters}. ``check(name, obj)`` runs the visible check of an
exercise against expected results stored as data in ``autograder/expected`` (no
reference answers here); ``python -m autograder check NOTEBOOK`` runs them all.
The hidden checks run when your work is graded.
"""
from __future__ import annotations

from pathlib import Path

from .checks.base import use_precomputed as _use_precomputed
from .student.expected import ExpectedStore as _ExpectedStore

from .student import require_chapter

__all__ = ["check", "require_chapter", "RELEASED"]

RELEASED = {chapters!r}
_use_precomputed(_ExpectedStore(Path(__file__).resolve().parent / "expected"))


def check(name, obj, hidden=False, seed=None):
    """Run the visible check of exercise ``name`` on ``obj``; see :func:`autograder.checks.base.check`."""
    from .checks.base import check as _check

    __tracebackhide__ = True  # noqa: F841 - keeps IPython tracebacks short
    return _check(name, obj, hidden=hidden, seed=seed)
'''

_AUTOGRADER_MAIN = '''"""``python -m autograder check NOTEBOOK`` (student edition)."""
import sys

from .student.cli import main

sys.exit(main())
'''

_SOLUTIONS_INIT = '''"""The reference package for students of {chapters} (generated by `autograder release`).

Do not edit. It holds only the earlier chapters' building blocks that these chapters use. Not here
(unused by these chapters, or defining or importing an answer of a released or later
chapter; a module marked "part of" in its docstring ships only the objects named there):
{left_out}
``solutions.<name>`` of an exercise of a released chapter is your own definition from
the notebook; {standin_line}
"""
import sys as _sys

{imports}

#: Exercises of the released chapters: ``solutions.<name>`` is the notebook's own.
EXERCISES = {exercises!r}
#: Exercises of later chapters (their references are not in this package).
LATER = {later!r}
#: What the released notebooks use that this package cannot hold, and why.
LEFT_OUT = {left_out_names!r}


class NotReleased(AttributeError):
    """A name whose reference this package does not hold."""


def __getattr__(name):
    chapter = EXERCISES.get(name)
    if chapter is not None:
        caller = _sys._getframe(1).f_globals
        if caller.get("__name__") == "__main__" and name in caller:
            return caller[name]
        raise NotReleased(
            f"solutions.{{name}} is an exercise of chapter {{chapter}}: this package has no reference answer "
            f"for it, so this cell uses yours. Write `{{name}}` in its exercise cell, run that cell, then run "
            "this one again.",
            name=name,  # the student package's kernel guard names the exercise from it
        )
    chapter = LATER.get(name)
    if chapter is not None:
        raise NotReleased(f"solutions.{{name}} is an exercise of chapter {{chapter}}, not released yet")
    if name in LEFT_OUT:
        raise NotReleased(f"solutions.{{name}} is not in the student package: {{LEFT_OUT[name]}}. The cells that "
                          "use it run in the book's full install (the web book shows their output).")
    raise AttributeError(f"module 'solutions' has no attribute {{name!r}}")
'''


@dataclass
class StudentPackage:
    """What :func:`build_package` made.

    Attributes:
        wheel: the wheel file.
        chapters: the released chapters.
        modules: the ``solutions`` modules it holds (dotted names).
        standins: the later chapters' building blocks it holds as stand-ins.
        warnings: what a released notebook uses that the package leaves out.
        withheld_helpers: check module -> hint helpers whose body is left out
            (:func:`withhold_helpers`).
        partial_modules: withheld module -> the objects of it that ship
            (:func:`partial_module`).
        shims: modules that ship as calls to the student's own definitions.
        replayed_calls: how many calls of the withheld helpers were recorded.
        requirements: the wheel's ``Requires-Dist`` (what its files and the notebooks import).
        data_files: the package data it ships (:func:`package_data`), paths in the wheel.
    """

    wheel: Path
    chapters: list[str]
    requirements: list[str] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)
    withheld_helpers: dict[str, list[str]] = field(default_factory=dict)
    partial_modules: dict[str, list[str]] = field(default_factory=dict)
    shims: list[str] = field(default_factory=list)
    replayed_calls: int = 0
    standins: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    data_files: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- what the notebooks use


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


def _notebook_sources(path: Path) -> list[str]:
    return [cell_source(c) for c in read_notebook(path)["cells"] if c.get("cell_type") == "code"]


# --------------------------------------------------------------------------- the solutions modules


class _Library:
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


def _segment(text: str, node: ast.stmt) -> str:
    """The source of top-level statement ``node``, its decorators included
    (``ast.get_source_segment`` starts a decorated class at ``class``: ``@dataclass`` would be lost)."""
    decorators = getattr(node, "decorator_list", [])
    if not decorators:
        return ast.get_source_segment(text, node)
    lines = text.splitlines()
    return "\n".join(lines[min(d.lineno for d in decorators) - 1:node.end_lineno])


def partial_module(library: "_Library", module: str, wanted: set[str], forbidden: set[str],
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
        copied = [ln.strip() for ln in _segment(text, node).splitlines() if ln.strip() in answers]
        if copied:
            return (None, f"its code repeats an answer ({copied[0]!r})", *failed[2:])
    doc = ast.get_docstring(tree) or module
    header = (f'"""Part of `{module}` (generated by `autograder release`, do not edit): only '
              f'{", ".join(sorted(wanted))}.\n\nThe rest of the module holds or uses an answer of a released or '
              f'later chapter. Original docstring:\n\n{doc}\n"""')
    body = "\n\n".join(_segment(text, n) for n in keep)
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


_SHIM = '''"""`{module}` for the package's own modules: your answers (generated by `autograder release`, do not edit).

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


# --------------------------------------------------------------------------- building


def _is_check_module(path: Path, autograder_dir: Path) -> bool:
    """Whether ``path`` is a chapter's check module (``autograder/checks/chNN_*.py``)."""
    return path.parent == autograder_dir / "checks" and path.name.startswith("ch")


def check_modules(chapters: list[str]) -> list[Path]:
    """The check modules of ``chapters`` and the check modules they import."""
    paths = {Path(sys.modules[type(ex).__module__].__file__) for c in chapters for ex in exercises_of(c)}
    return sorted(p for p in import_closure(paths, REPO) if _is_check_module(p, AUTOGRADER_DIR))


def shipped_modules(check_paths: list[Path], autograder_dir: Path = AUTOGRADER_DIR) -> list[str]:
    """The files of ``autograder`` that the student package ships unchanged: every module
    that :data:`STUDENT_ROOTS` and the chapter's check modules import, directly or not
    (:func:`autograder.fingerprint.import_closure`), less the check modules themselves
    (they ship without their answer helpers), the package's ``__init__`` (generated) and
    :data:`RELEASE_ONLY`. A module the student side starts to import ships; one it stops
    importing is withheld: nothing to list.

    Args:
        check_paths: the chapter's check modules (:func:`check_modules`).
        autograder_dir: the ``autograder`` package to read.

    Returns:
        Paths relative to ``autograder_dir``, sorted.
    """
    roots = [autograder_dir / rel for rel in STUDENT_ROOTS] + list(check_paths)
    generated = autograder_dir / "__init__.py"
    stop = {generated, *(autograder_dir / rel for rel in RELEASE_ONLY)}
    found = import_closure(roots, autograder_dir.parent, stop=stop)
    return sorted(p.relative_to(autograder_dir).as_posix() for p in found
                  if p.is_relative_to(autograder_dir) and not _is_check_module(p, autograder_dir))


#: The recorded outputs of the stand-ins of :data:`~autograder.student.standins.RECORDED`.
RECORDED_FILE = "solutions/_standins_recorded.npz"

def call_key(name, args):
    """The text that names a call of ``name`` with ``args`` among recorded outputs: an
    array or tensor by its kind, dtype, shape and values, anything else by its ``repr``."""
    def plain(value):
        kind = "tensor" if hasattr(value, "detach") else "array" if isinstance(value, np.ndarray) else ""
        if not kind:
            return repr(value)
        value = value.detach().cpu().numpy() if kind == "tensor" else value
        return f"{kind}({value.dtype}, {value.shape}, {value.tolist()!r})"

    return f"{name}({', '.join(plain(a) for a in args)})"


_RECORDED_LOOKUP = '''

{call_key}

def _recorded(name, args):
    """What stand-in ``name`` returned at release for ``args``: a later chapter's exercise
    ships here as recorded outputs for this chapter's own calls, not as code."""
    import pathlib

    key = call_key(name, args)
    with np.load(pathlib.Path(__file__).with_name("_standins_recorded.npz"), allow_pickle=False) as data:
        if key not in data.files:
            raise LookupError(f"{{name}} is a later chapter's exercise: this package holds its outputs only for "
                              f"the calls this chapter makes, not {{key}}")
        value = data[key]
        return torch.from_numpy(value) if "torch:" + key in data.files else value
'''


def _recorded_standin(node: ast.FunctionDef) -> str:
    """A stand-in's replacement: its signature (defaults kept), and a lookup of its
    recorded outputs for every argument."""
    params = [a.arg for a in node.args.args]
    return (f"def {node.name}({ast.unparse(node.args)}):\n"
            f'    """Recorded outputs of a later chapter\'s exercise, for this chapter\'s calls only (no code)."""\n'
            f"    return _recorded({node.name!r}, ({', '.join(params)}{',' if len(params) == 1 else ''}))\n")


def recorded_outputs(names: list[str]) -> dict[str, np.ndarray]:
    """The outputs of every recorded stand-in among ``names`` for its calls (key:
    :func:`call_key` of every argument, defaults included; a key ``torch:<key>`` marks an
    output that is a tensor)."""
    from . import standins  # imports torch: only when a package holds a stand-in

    recorded = {}
    for name in names:
        function = getattr(standins, name)
        for args in standins.RECORDED.get(name, ()):
            bound = inspect.signature(function).bind(*args)
            bound.apply_defaults()
            key = call_key(name, tuple(bound.arguments.values()))
            value = function(*args)
            if hasattr(value, "detach"):
                recorded["torch:" + key] = np.zeros(())
                value = value.detach().cpu().numpy()
            recorded[key] = np.asarray(value)
    return recorded


def _standin_sources(names: list[str]) -> str:
    """The stand-ins module of the package: the header of :mod:`~autograder.student.standins`
    (docstring and imports), the functions ``names`` and the stand-ins they call, nothing else;
    a stand-in of :data:`~autograder.student.standins.RECORDED` as a lookup of its
    recorded outputs (:func:`recorded_outputs`), never its code."""
    # standins imports torch and solutions: only when a package is built
    from .standins import RECORDED

    path = Path(__file__).with_name("standins.py")
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    doc = ast.get_source_segment(text, tree.body[0])
    imports = [ast.get_source_segment(text, n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    wanted, todo = set(), list(names)
    while todo:  # and the stand-ins they call (greedy_decode builds its mask with causal_mask)
        name = todo.pop()
        if name not in wanted:
            wanted.add(name)
            todo += [n.id for n in ast.walk(defs[name]) if isinstance(n, ast.Name) and n.id in defs]
    funcs = [_recorded_standin(n) if n.name in RECORDED else _segment(text, n)
             for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    lookup = _RECORDED_LOOKUP.format(call_key=inspect.getsource(call_key)) if wanted & set(RECORDED) else ""
    return (f"{doc}\n" + "\n".join(imports) + f"\n\n__all__ = {sorted(names)!r}\n{lookup}\n\n"
            + "\n\n\n".join(funcs) + "\n")


def _requirements(py_sources: list[str], imported: set[str], warnings: list[str]) -> list[str]:
    tops = set(imported)
    for text in py_sources:
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                tops.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                tops.add(node.module.split(".")[0])
    ours = {"solutions", "autograder", "__future__"}
    third = sorted(t for t in tops - ours if t not in sys.stdlib_module_names)
    missing = [t for t in third if t not in REQUIREMENTS]
    if missing:
        warnings.append(f"imported but not in REQUIREMENTS (add them there): {', '.join(missing)}")
    return sorted(REQUIREMENTS[t] for t in third if t in REQUIREMENTS)


@dataclass
class _Scope:
    """What a release may ship: the exercises by chapter and the ``solutions`` modules."""

    chapters: list[str]
    book: Path
    released: dict[str, str]  # exercise of a released chapter -> its chapter
    later: dict[str, str]  # exercise of a later chapter -> its chapter
    library: _Library
    answers: set[str]  # lines of their answers (book.answer_lines)
    kept: set[str]  # modules that define and import no answer of theirs

    @classmethod
    def of(cls, chapters: list[str], book: Path) -> "_Scope":
        chapter_of = {name: ex.chapter for name, ex in load_all().items()}
        withheld = {name for name, chapter in chapter_of.items() if chapter >= min(chapters)}
        library = _Library()
        stripped = graded_modules(withheld, SOLUTIONS_DIR, "solutions")
        return cls(chapters=list(chapters), book=Path(book),
                   released={n: chapter_of[n] for n in withheld if chapter_of[n] in chapters},
                   later={n: chapter_of[n] for n in withheld if chapter_of[n] not in chapters},
                   library=library, answers=set().union(*answer_lines(chapters, book).values()),
                   kept=set(library.files) - stripped - {"solutions"})

    @property
    def forbidden(self) -> set[str]:
        """The exercises of the released and later chapters, and what computes one."""
        return withheld_names(set(self.released) | set(self.later))


def _expected_files(chapters: list[str], book: Path) -> dict[str, bytes]:
    """``autograder/expected/<chapter>.json`` and ``.npz`` of every released chapter, and
    ``contents.json``, the exercises' names of every chapter of ``book``."""
    files = {}
    with tempfile.TemporaryDirectory(prefix="student-expected-") as tmp:
        paths = [write_contents(Path(tmp), {c: [ex.name for ex in exercises_of(c)] for c in chapter_ids(book)})]
        for chapter in chapters:
            paths += write_chapter(Path(tmp), chapter, exercises_of(chapter))
        for path in paths:
            files[f"autograder/expected/{path.name}"] = path.read_bytes()
    return files


def _sort_uses(scope: _Scope, names, modules, factories, check_names):
    """Sort what the notebooks, the stored cases and the check modules take from
    ``solutions``: modules that ship whole (``roots``), stand-ins by module path, and
    what cannot ship whole (``missing``: module -> names used from it)."""
    library, kept = scope.library, scope.kept
    # standins imports torch and solutions: only when a package is built
    from .standins import __all__ as standin_names

    roots = {m for m in modules if m in kept}
    missing: dict[str, set[str]] = {}
    standins: dict[str, set[str]] = {}
    for module, name in sorted(names | factories | check_names):
        target = f"{module}.{name}" if f"{module}.{name}" in library.files else None
        if target:  # `solutions.figures.plots`, `solutions.app.data`: a module
            if target in kept:
                roots.add(target)
            elif (module, name) in names:
                missing.setdefault(target, set())
            continue
        owner = library.owner(name) if module == "solutions" else (module if module in library.files else None)
        if owner in kept:
            roots.add(owner)
        elif name in scope.released and module == "solutions":
            continue  # resolved to the student's own definition by the generated __getattr__
        elif name in standin_names and (module, name) in names:
            standins.setdefault(module, set()).add(name)
        elif (module, name) in names:
            missing.setdefault(owner or module, set()).add(name)
        elif (module, name) in factories:
            raise ValueError(f"a visible case builds {module}.{name}, which the student package of "
                             f"{', '.join(scope.chapters)} cannot hold")
    return roots, standins, missing


#: A later exercise that shipped code names but no released cell calls.
_LATER = (
    "\n\ndef {name}(*args, **kwargs):\n"
    '    """{name} is an exercise of chapter {chapter}: not in this package (no stand-in either)."""\n'
    '    raise NotImplementedError("{name} is an exercise of chapter {chapter}, not released with these chapters: "\n'
    '                              "no released cell calls it")\n'
)


def _standin_module(module: str, wanted: set[str], available: set[str], later: dict[str, str]) -> str:
    """``solutions/<module>.py`` of the package when it holds only stand-ins: an import
    of each stand-in of :mod:`.standins`, and, for a later exercise that the shipped code
    names but no released cell calls (chapter 9's ``translate`` names ``beam_search``,
    for a beam its cells never ask for), a function that says it is not here.

    Raises:
        ValueError: a wanted name is neither a stand-in nor a later chapter's exercise.
    """
    ready = sorted(wanted & available)
    absent = sorted(wanted - available)
    text = (f'"""Stand-ins for {module} (generated by `autograder release`, do not edit): '
            'see solutions._standins."""\n')
    if ready:  # solutions/_standins.py, from a module of solutions or of one of its subpackages
        text += f"from {'.' * module.count('.')}_standins import {', '.join(ready)}\n"
    text += f"\n__all__ = {sorted(wanted)!r}\n"
    for name in absent:
        if name not in later:
            raise ValueError(f"{module}.{name} has no stand-in in autograder/student/standins.py")
        text += _LATER.format(name=name, chapter=int(later[name].split("_")[0]))
    return text


def package_data(root: Path, shipped: set[str], package: str = "solutions") -> dict[str, Path]:
    """The data files (not Python) of the ``solutions`` packages that ship: path in the wheel -> file.

    A data file belongs to the nearest folder above it that holds an ``__init__.py`` (a
    frozen corpus ``solutions/corpora/book.txt`` belongs to ``solutions``, which always
    ships); it ships when that package ships (its ``__init__`` or one of its modules is in
    ``shipped``). Caches and compiled files never ship.

    Args:
        root: the package's folder (``solutions/``).
        shipped: dotted names of the modules that ship.
        package: the package's import name.

    Returns:
        ``{"solutions/corpora/book.txt": Path(...)}``, sorted.
    """
    found = {}
    for path in sorted(Path(root).rglob("*")):
        rel = path.relative_to(root)
        if not path.is_file() or path.suffix in (".py", ".pyc", ".pyo") or "__pycache__" in rel.parts \
                or any(part.startswith(".") or part in SKIPPED_DATA for part in rel.parts):
            continue
        owner = path.parent
        while owner != Path(root) and not (owner / "__init__.py").is_file():
            owner = owner.parent
        dotted = ".".join([package, *owner.relative_to(root).parts])
        if dotted == package or any(m == dotted or m.startswith(dotted + ".") for m in shipped):
            found[f"{package}/{rel.as_posix()}"] = path
    return found


def _solutions_files(scope: _Scope, roots: set[str], standins: dict[str, set[str]], missing: dict[str, set[str]],
                     info: StudentPackage) -> dict[str, str]:
    """The package's ``solutions``: the modules of ``roots`` and what they import, the
    parts of ``missing`` that can ship (with their shims), placeholders that say why
    the rest cannot, the stand-ins, and the generated ``__init__``. Fills ``info``."""
    library = scope.library
    partials: dict[str, str] = {}  # withheld module -> the part of it that ships
    shim_sources: dict[str, str] = {}  # module -> a shim calling the student's definitions (or a placeholder)
    left_out_names: dict[str, str] = {}  # name a notebook uses -> why it is not here
    placeholders: dict[str, str] = {}  # module a notebook imports that cannot ship -> why
    shipped = library.closure(roots)
    requested = {module: set(wanted) for module, wanted in missing.items()}  # grows as parts chain
    shim_names: dict[str, set[str]] = {}  # shim module -> the student's names it calls
    shim_users: dict[str, set[str]] = {}  # shim module -> the partial modules importing from it
    pending = sorted(requested)
    while pending:
        module = pending.pop(0)
        wanted = requested[module]
        reason = "it holds or imports an answer of a released or later chapter"
        if wanted and module in library.files:
            source, why, needs, shims, chained, more_standins = partial_module(
                library, module, wanted, scope.forbidden, shipped | scope.kept, set(scope.released), scope.answers,
                later=scope.later, chain=True)
            clash = (set(shims) | set(more_standins)) & (set(partials) | shipped | set(requested))
            if source is not None and not clash:
                partials[module] = source
                shipped |= library.closure(needs)
                for shim, names in shims.items():
                    shim_names.setdefault(shim, set()).update(names)
                    shim_users.setdefault(shim, set()).add(module)
                for target, names in more_standins.items():
                    standins.setdefault(target, set()).update(names)
                for target, names in chained.items():  # a part of another withheld module, made in its turn
                    if not names <= requested.get(target, set()) or target not in partials:
                        requested[target] = requested.get(target, set()) | names
                        partials.pop(target, None)
                        if target not in pending:
                            pending.append(target)
                continue
            if source is not None:
                why = f"it would need {sorted(clash)} both as its own module and as a shim or stand-in"
            reason = f"{reason}, and the part that is used cannot ship alone: {why}"
        what = f"{module} ({', '.join(sorted(wanted))})" if wanted else module
        for name in wanted or [module.split(".", 1)[1]]:
            left_out_names[name] = reason
        if module in library.files and library.files[module].name != "__init__.py":
            placeholders[module] = reason
        info.warnings.append(f"{what}: left out ({reason}); the notebook cells that use it need the full package")
    for module in [*partials, *shim_names, *standins, *placeholders]:  # solutions.app for a part of solutions.app.trainer
        shipped |= library.closure(set(library.parents(module)))
    for shim, names in sorted(shim_names.items()):
        shim_sources[shim] = _SHIM.format(
            module=shim, users=", ".join(sorted(shim_users[shim])), names=", ".join(sorted(names)),
            names_list=sorted(names), assignments="\n".join(f"{n} = _yours({n!r})" for n in sorted(names)))
    if shipped - scope.kept:  # pragma: no cover - graded_modules is closed under imports
        raise RuntimeError(f"a kept module imports a withheld one: {sorted(shipped - scope.kept)}")
    info.modules = sorted(shipped)
    info.partial_modules = {m: sorted(requested[m]) for m in partials}
    info.shims = sorted(shim_sources)
    for module, reason in sorted(placeholders.items()):
        if module in partials or module in shim_sources or module in standins or module in shipped:
            continue
        message = (f"{module} is not in the student package: {reason}. The cells that use it run in the "
                   "book's full install (the web book shows their output).")
        shim_sources[module] = (f'"""Placeholder (generated by `autograder release`, do not edit): {module} is '
                                f'not in the student package."""\nraise ImportError({message!r})\n')

    def rel(module: str) -> str:
        return f"solutions/{library.files[module].relative_to(SOLUTIONS_DIR).as_posix()}"

    files = {rel(m): library.files[m].read_text(encoding="utf-8") for m in sorted(shipped)}
    for name, path in package_data(SOLUTIONS_DIR, shipped).items():  # a chapter's frozen corpus, ...
        files[name] = path.read_text(encoding="utf-8")
        info.data_files.append(name)
    files.update({rel(m): source for m, source in sorted({**partials, **shim_sources}.items())})
    # standins imports torch and solutions: only when a package is built
    from .standins import __all__ as standin_names

    info.standins = sorted(set().union(*standins.values()) & set(standin_names)) if standins else []
    if info.standins:
        files["solutions/_standins.py"] = _standin_sources(info.standins)
    for module, wanted in sorted(standins.items()):
        if module != "solutions":
            files[rel(module)] = _standin_module(module, wanted, set(standin_names), scope.later)
    reexports = [n for n in library.trees["solutions"].body if isinstance(n, ast.ImportFrom) and n.level == 1
                 and n.module and f"solutions.{n.module}" in shipped]
    stars = [n.module for n in reexports if any(a.name == "*" for a in n.names)]
    named = [(n.module, [a.name for a in n.names]) for n in reexports if not any(a.name == "*" for a in n.names)]
    modules = [n.module for n in reexports]
    imports = [f"from . import {', '.join(modules)}"] if modules else []
    imports += [f"from .{m} import *" for m in stars]
    imports += [f"from .{m} import {', '.join(names)}" for m, names in named]
    for module in sorted(partials):
        if library.files[module].name != "__init__.py" and module.count(".") == 1:
            imports.append(f"from .{module.split('.')[1]} import {', '.join(info.partial_modules[module])}")
    top_standins = sorted(standins.get("solutions", ()))
    if top_standins:
        imports.append(f"from ._standins import {', '.join(top_standins)}")
    exported = ([f"*{m}.__all__" for m in stars] + [repr(n) for _, names in named for n in names]
                + [repr(n) for n in top_standins])
    imports.append(f"__all__ = [{', '.join(exported)}]")
    files["solutions/__init__.py"] = _SOLUTIONS_INIT.format(
        chapters=", ".join(scope.chapters),
        left_out="\n".join(f"    {m}" for m in sorted(set(library.files) - shipped - {"solutions"})),
        standin_line=(f"stand-ins (not the reference) replace {', '.join(info.standins)}."
                      if info.standins else "no stand-ins."),
        imports="\n".join(imports), exercises=dict(sorted(scope.released.items())),
        later=dict(sorted(scope.later.items())), left_out_names=dict(sorted(left_out_names.items())),
    )
    return files


def _autograder_files(scope: _Scope, check_paths: list[Path], info: StudentPackage) -> dict[str, str]:
    """The package's ``autograder``: the shipped modules, the check modules without
    their answer-computing helpers, and the generated ``__init__`` and ``__main__``."""
    files = {f"autograder/{rel}": (AUTOGRADER_DIR / rel).read_text(encoding="utf-8")
             for rel in shipped_modules(check_paths)}
    replay = replayable(check_paths, scope.chapters)
    for path in check_paths:
        text, helpers = withhold_helpers(path.read_text(encoding="utf-8"), scope.answers, path.stem,
                                         replay.get(path.stem, (set(), set())))
        if helpers:
            info.withheld_helpers[path.stem] = helpers
        files[f"autograder/checks/{path.name}"] = text
    files["autograder/__init__.py"] = _AUTOGRADER_INIT.format(chapters=list(scope.chapters))
    files["autograder/__main__.py"] = _AUTOGRADER_MAIN
    return files


def package_files(chapters: list[str], book: Path) -> tuple[dict[str, bytes], StudentPackage]:
    """Every file of the student package of ``chapters`` (path inside the wheel -> bytes).

    Returns:
        ``(files, info)``; ``info.wheel`` is not set yet.
    """
    scope = _Scope.of(chapters, book)
    info = StudentPackage(wheel=Path(), chapters=list(chapters))
    files = _expected_files(scope.chapters, scope.book)
    factories = set()
    for key, data in files.items():
        if key.endswith(".json"):
            found = re.findall(r'"__objmarker__": "solutions\.(\w+)"', data.decode("utf-8"))
            factories |= {("solutions", name) for name in found}
    check_paths = check_modules(scope.chapters)
    sources = [src for c in scope.chapters for src in _notebook_sources(Path(book) / c / f"{c}.ipynb")]
    names, modules, imported = notebook_uses(sources)
    check_names, _, _ = notebook_uses([p.read_text(encoding="utf-8") for p in check_paths])
    roots, standins, missing = _sort_uses(scope, names, modules, factories, check_names)
    texts = {**_solutions_files(scope, roots, standins, missing, info), **_autograder_files(scope, check_paths, info)}
    info.requirements = _requirements([t for n, t in texts.items() if n.endswith(".py")], imported, info.warnings)
    files.update({name: text.encode("utf-8") for name, text in texts.items()})
    recorded = recorded_outputs(info.standins)
    if recorded:
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **recorded)
        files[RECORDED_FILE] = buffer.getvalue()
    if info.withheld_helpers:
        document, arrays = record_helpers(info.withheld_helpers, scope.chapters)
        info.replayed_calls = len(document["calls"])
        files[f"autograder/expected/{REPLAY}.json"] = (json.dumps(document, sort_keys=True) + "\n").encode("utf-8")
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **arrays)
        files[f"autograder/expected/{REPLAY}.npz"] = buffer.getvalue()
    return files, info


def build_package(out: Path, chapters: list[str], book: Path) -> StudentPackage:
    """Build the student package of ``chapters`` into ``out`` (a wheel).

    Args:
        out: the release folder.
        chapters: the released chapter ids.
        book: the folder of the source notebooks (what the notebooks use is read there).

    Returns:
        The :class:`StudentPackage` (its ``warnings`` name what the package leaves out
        that a notebook uses).
    """
    chapters = sorted(chapters)
    files, info = package_files(chapters, Path(book))
    info.wheel = write_wheel(out, files, chapters, info.requirements)
    return info
