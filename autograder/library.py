"""The read-only library a sandbox imports (``/lib-grading``, its ``PYTHONPATH``).

A student's run gets :func:`build_library`: ``runner.py``, the stub ``autograder`` package
with the wire format, and a copy of ``solutions`` without the modules that define or
import the graded chapter's answers (:mod:`autograder.withhold` decides which). The
references' sandbox of a regrade gets :func:`reference_library`: ``solutions`` whole and
``oracle.py`` (:class:`autograder.reference_calls.ReferenceCalls`).

A class graded in one process needs the same library for every submission of a chapter:
:func:`shared_library` builds each once per process (about 0.3 s of parsing and copying
each time otherwise), for runs that mount it read-only (bubblewrap's ``--ro-bind``), and
byte-compiles it once there, so the runs (``-B``: they write no caches) read compiled
modules instead of compiling ``solutions`` at every start.
"""
from __future__ import annotations

import ast
import compileall
import os
import shutil
import tempfile
import threading
from multiprocessing.util import Finalize
from pathlib import Path

from . import fork_server
from .untrusted import parse_source
from .withhold import SOLUTIONS_DIR, graded_modules, module_names

__all__ = ["build_library", "reference_library", "shared_library", "AUTOGRADER_DIR"]

AUTOGRADER_DIR = Path(__file__).resolve().parent


def _generated_init(root: Path, package: str, kept: set[str], stripped: set[str]) -> str:
    """An ``__init__.py`` re-exporting the kept modules the original re-exports."""
    tree = parse_source((root / "__init__.py").read_text(encoding="utf-8"), str(root / "__init__.py"))
    lines = [
        f'"""Stripped copy of `{package}` for grading: generated, do not edit.',
        "",
        "Left out (they define or import this chapter's graded answers):",
        *(f"    {name}" for name in sorted(stripped)),
        '"""',
    ]
    star: list[str] = []
    named: list[tuple[str, list[str]]] = []  # `from .module import a, b` of a kept module
    submodules: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module and f"{package}.{node.module}" in kept:
                if any(a.name == "*" for a in node.names):
                    star.append(node.module)
                else:
                    named.append((node.module, [a.name for a in node.names]))
            elif node.module is None:
                submodules.extend(a.name for a in node.names if f"{package}.{a.name}" in kept)
    for name in star + [module for module, _ in named]:
        if name not in submodules:
            submodules.append(name)
    if submodules:
        lines.append(f"from . import {', '.join(submodules)}")
    lines.extend(f"from .{name} import *" for name in star)
    lines.extend(f"from .{module} import {', '.join(names)}" for module, names in named)
    exported = " ".join(f"*getattr({name}, '__all__', [])," for name in star)
    exported += "".join(f" {name!r}," for _, names in named for name in names)
    lines.append(f"__all__ = [{exported}]")
    return "\n".join(lines) + "\n"


def build_library(dest: Path, graded_names: set[str], solutions_dir: Path = SOLUTIONS_DIR) -> Path:
    """Write the sandbox's read-only ``PYTHONPATH`` folder and return it.

    It holds ``runner.py``, ``zygote.py`` (the fork-server, :mod:`autograder.zygote`), the stub ``autograder`` package with the wire format
    (``autograder/wire.py``, which the runner imports) and a copy of
    ``solutions`` without the modules of :func:`~autograder.withhold.graded_modules` (only sources and
    data files; no ``__pycache__``), whose ``__init__`` re-exports what is left.

    Args:
        dest: an empty or missing folder.
        graded_names: the contract names graded in this chapter.
        solutions_dir: the ``solutions`` package folder.

    Returns:
        ``dest``.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(AUTOGRADER_DIR / "runner.py", dest / "runner.py")
    shutil.copyfile(AUTOGRADER_DIR / "zygote.py", dest / "zygote.py")
    (dest / "autograder").mkdir(exist_ok=True)
    shutil.copyfile(AUTOGRADER_DIR / "stub" / "__init__.py", dest / "autograder" / "__init__.py")
    shutil.copyfile(AUTOGRADER_DIR / "wire.py", dest / "autograder" / "wire.py")
    package = "solutions"
    stripped = graded_modules(graded_names, solutions_dir, package)
    modules = module_names(solutions_dir, package)
    kept = set(modules) - stripped
    target = dest / package
    for path in sorted(solutions_dir.rglob("*")):
        rel = path.relative_to(solutions_dir)
        if "__pycache__" in rel.parts or path.is_dir() or path.suffix in (".pyc", ".pyo"):
            continue
        if path.suffix == ".py":
            name = ".".join([package, *rel.with_suffix("").parts])
            if name.endswith(".__init__"):
                name = name[: -len(".__init__")]
            if name in stripped or name == package:
                continue
        out = target / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, out)
    target.mkdir(exist_ok=True)
    (target / "__init__.py").write_text(_generated_init(solutions_dir, package, kept, stripped), encoding="utf-8")
    for path in [dest, *dest.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return dest


def reference_library(dest: Path, solutions_dir: Path = SOLUTIONS_DIR) -> Path:
    """The library of the references' sandbox (:class:`~autograder.reference_calls.ReferenceCalls`): ``solutions``
    whole (no student code runs there), the wire format, ``oracle.py`` and, beside the
    wire format in the stub package, the runner it borrows its autograd function from."""
    build_library(dest, set(), solutions_dir)
    for source, target in (("oracle.py", "oracle.py"), ("runner.py", "autograder/runner.py")):
        shutil.copyfile(AUTOGRADER_DIR / source, dest / target)
        (dest / target).chmod(0o644)
    return dest


# The files a library is made of besides ``solutions``: a change to any rebuilds it.
_COPIED = ("runner.py", "zygote.py", "oracle.py", "wire.py", "stub/__init__.py")


def _signature(solutions_dir: Path) -> tuple:
    """What a built library depends on: every file of ``solutions_dir`` and of
    :data:`_COPIED`, by path, size and modification time."""
    files = sorted(p for p in solutions_dir.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    files += [AUTOGRADER_DIR / name for name in _COPIED]
    return tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files)


def _byte_compile(dest: Path) -> None:
    """Byte-compile the packages of a built library in place (``__pycache__`` beside each
    module, readable by the sandbox's uid), with this interpreter, the one the runs start.
    Made from the library's own files, which nothing changes afterwards; a module that
    does not compile is left to fail in the run as it would have. The scripts at the top
    (``runner.py``) are compiled by every run anyway: Python keeps no cache of a script."""
    for package in sorted(p for p in dest.iterdir() if p.is_dir()):
        compileall.compile_dir(str(package), quiet=2, workers=1)
    for path in dest.rglob("__pycache__"):
        path.chmod(0o755)
        for compiled in path.iterdir():
            compiled.chmod(0o644)


class _SharedLibraries:
    """The libraries :func:`shared_library` built in this process, in a private folder
    removed when the process ends: by ``atexit`` in a main process, and by
    multiprocessing's own exit in a pool's worker (a class graded with ``--jobs``), which
    leaves by ``os._exit``, where ``atexit`` does not run. A forked child starts with
    none of its parent's (the parent removes those when it ends)."""

    def __init__(self):
        self._forget()
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self.lock = threading.Lock()
        self.root: Path | None = None
        self.built: dict[tuple, tuple[tuple, Path]] = {}  # (kind, names, solutions) -> (signature, folder)

    def get(self, references: bool, graded_names: frozenset[str], solutions_dir: Path) -> Path:
        key = (references, graded_names, str(solutions_dir))
        signature = _signature(solutions_dir)
        with self.lock:
            known = self.built.get(key)
            if known is not None and known[0] == signature and known[1].is_dir():
                return known[1]
            if known is not None:
                shutil.rmtree(known[1], ignore_errors=True)
            if self.root is None:
                self.root = Path(tempfile.mkdtemp(prefix="autograder-libraries-"))
                self.root.chmod(0o755)
                Finalize(None, shutil.rmtree, args=(str(self.root),), kwargs={"ignore_errors": True}, exitpriority=0)
            dest = Path(tempfile.mkdtemp(prefix="lib-", dir=self.root))
            if references:
                reference_library(dest, solutions_dir)
            else:
                build_library(dest, set(graded_names), solutions_dir)
            _byte_compile(dest)
            fork_server.serves_many(dest)  # every run of the process mounts it: its zygote pays from the first
            self.built[key] = (signature, dest)
            return dest


_SHARED = _SharedLibraries()


def shared_library(graded_names: set[str], *, references: bool = False,
                   solutions_dir: Path = SOLUTIONS_DIR) -> Path:
    """The library of :func:`build_library` (``references``: of :func:`reference_library`),
    built once per process for these names and rebuilt when a file it is made of changes.

    Only for runs that mount it read-only and write nothing beside it (bubblewrap's
    ``--ro-bind``, :func:`autograder.sandbox.run_job`): a plain subprocess could write in
    it, and a container-mode run takes its library folder for its own uid; those build
    their own, per submission (:func:`build_library`). Nothing of a submission is in it:
    it is made from ``solutions`` and the grader's files only. Safe from threads (a class
    graded with ``--jobs``).

    Args:
        graded_names: the contract names graded in the chapter (ignored with ``references``).
        references: the references' library of a regrade instead.
        solutions_dir: the ``solutions`` package folder.

    Returns:
        The library's folder (do not write in it; removed when the process ends).
    """
    return _SHARED.get(references, frozenset(() if references else graded_names), Path(solutions_dir))
