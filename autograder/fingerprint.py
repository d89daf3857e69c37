"""The one fingerprint of "the same grader": a digest of exactly the code and data that judge.

A journal entry is reused (:mod:`autograder.journal`) and shards are merged
(:mod:`autograder.shard`) only when they were graded by the same grader, and both ask
this module what that means. Three things decide a grade besides the submission, its
source notebook (keyed on its own: ``source_sha256``) and the run's settings (keyed on
their own: :meth:`autograder.grading.RunSettings.options`):

* **the judging code** of ``autograder``: :mod:`autograder.grading`, the program inside
  the sandbox (:mod:`autograder.runner`, the stub package it sees, and the references' program
  of a regrade, :mod:`autograder.oracle`), every module of
  ``autograder/checks`` (they register themselves when ``load_all`` imports them by
  name, so all are roots), and every module these import, followed with :mod:`ast`
  through module-level and function-level imports alike (the sandbox, its walls,
  ``confine.py``, the wire format, the withholding rule, …);
* **the reference**: every file of ``solutions`` the sandbox ships (its ``.py`` files
  and data), less ``solutions/figures`` — the book's diagrams and plots, which hold no
  answer and which no check reads;
* nothing else: the batch, the CSVs, the feedback pages, the class report and the
  command line present grades; editing them regrades nobody.

:func:`judging_files` lists the files; :func:`grader_fingerprint` digests them (path
and bytes).
"""
from __future__ import annotations

import ast
import functools
import hashlib
from pathlib import Path

__all__ = ["ROOT", "imported_names", "import_closure", "judging_files", "grader_fingerprint"]

#: The repository: its ``autograder`` and ``solutions`` packages.
ROOT = Path(__file__).resolve().parent.parent
#: The packages whose imports are followed.
_PACKAGES = ("autograder", "solutions")
#: Where judging starts: files relative to the repository root, and folders all of whose modules are roots.
_ROOT_FILES = ("autograder/grading.py", "autograder/runner.py", "autograder/oracle.py", "autograder/stub/__init__.py")
_ROOT_FOLDERS = ("autograder/checks",)
#: Parts of ``solutions`` that hold no answer and judge nothing.
_NOT_REFERENCE = ("figures",)


def _module_file(root: Path, dotted: str) -> Path | None:
    """The file of a dotted module name of one of :data:`_PACKAGES` (``None``: not one of theirs)."""
    parts = dotted.split(".")
    if parts[0] not in _PACKAGES:
        return None
    base = root.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(root: Path, path: Path) -> frozenset[Path]:
    """The files of :data:`_PACKAGES` that ``path`` imports, anywhere in its code, with
    the ``__init__`` of every package on the way (importing ``a.b.c`` runs ``a`` and ``a.b``)."""
    stat = path.stat()
    return _parsed_imports(root, path, stat.st_mtime_ns, stat.st_size)


def imported_names(path: Path, root: Path = ROOT) -> set[str]:
    """The dotted names a file imports, absolute, each module and each name taken from it,
    anywhere in its code (a function-level import counts too).

    ``from .text import read_csv`` in ``autograder/roster.py`` gives ``autograder.text`` and
    ``autograder.text.read_csv``; ``import torch.nn`` gives ``torch.nn``.

    Args:
        path: the ``.py`` file.
        root: the folder its top package stands in (relative imports resolve from there).
    """
    package = list(path.relative_to(root).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
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


@functools.lru_cache(maxsize=1024)
def _parsed_imports(root: Path, path: Path, mtime_ns: int, size: int) -> frozenset[Path]:
    """:func:`_imports` of one version of a file (keyed on its modification time and size:
    a file edited since is parsed again)."""
    found = set()
    for name in imported_names(path, root):
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            file = _module_file(root, ".".join(parts[:i]))
            if file is not None:
                found.add(file)
    return frozenset(found)


def import_closure(roots, root: Path = ROOT, stop=frozenset()) -> set[Path]:
    """The files of ``autograder`` and ``solutions`` that ``roots`` import, directly or
    not, anywhere in their code (:func:`imported_names`), with the ``__init__`` of every
    package on the way; the roots included.

    Args:
        roots: the ``.py`` files to start from.
        root: the repository (the folder of the two packages).
        stop: files that are kept out, and whose own imports are not followed.

    Returns:
        The files, as paths under ``root``.
    """
    root = Path(root)
    todo = [Path(p) for p in roots]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen or path in stop or "__pycache__" in path.parts:
            continue
        seen.add(path)
        todo += [p for p in _imports(root, path) if p not in seen]
    return seen


def judging_files(root: Path = ROOT) -> list[Path]:
    """Every file whose bytes can change a grade (see the module's docstring), sorted.

    Args:
        root: the repository (its ``autograder`` and ``solutions`` folders).

    Returns:
        The judging code of ``autograder`` (the roots and every module they import) and
        the reference files of ``solutions``, as paths under ``root``.
    """
    root = Path(root)
    roots = [root / f for f in _ROOT_FILES if (root / f).is_file()]
    for folder in _ROOT_FOLDERS:
        roots += sorted((root / folder).rglob("*.py"))
    code = {p for p in import_closure(roots, root) if p.relative_to(root).parts[0] == "autograder"}
    solutions = root / "solutions"
    reference = {p for p in solutions.rglob("*")
                 if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
                 and p.relative_to(solutions).parts[0] not in _NOT_REFERENCE}
    return sorted(code | reference)


def grader_fingerprint(root: Path = ROOT) -> str:
    """SHA-256 of :func:`judging_files` (each file's path under ``root`` and its bytes):
    the ``grader`` of every journal key and of a shard's manifest. A journal entry made
    by another grader is not reused; shards of different graders are not merged."""
    root = Path(root)
    h = hashlib.sha256()
    for path in judging_files(root):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()
