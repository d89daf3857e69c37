"""Run the grading runner on untrusted code: bubblewrap, an unprivileged uid, limits.

What the student's code sees (ARCHITECTURE.md §4, DESIGN.md "Grading does not
trust student code"):

* the system (``/usr`` and the ``/bin``, ``/lib*`` links, a few files of ``/etc``)
  and the Python installation (the venv and its base interpreter), read-only;
* ``/lib-grading`` (``PYTHONPATH``), read-only: a copy of ``solutions`` stripped of the
  modules that define the graded chapter's answers and of every module importing
  them (:func:`build_library`), the stub ``autograder`` package whose ``check``
  does nothing (with the wire format, ``wire.py``), and ``runner.py``;
* ``/job``, read-only (``job.json``: the setup and the cells' source, no case),
  with ``/job/out`` a size-limited tmpfs, and a small private ``/tmp``; nothing
  of the host is writable;
* two inherited pipes: the result pipe (the runner's frames out) and the cases
  pipe, on which each graded cell's cases arrive only when the runner asks for
  them, after that cell is defined and every earlier cell is done
  (:class:`_CaseFeeder`): code that runs before a cell's check finds none of its
  cases in any file or pipe;
* no network (a new, empty network namespace), a new PID/IPC/UTS namespace and
  session, nothing of the repository (no ``book/``, no checks, no gradebook, no
  other submissions), and the venv's editable-install hooks hidden, so
  ``import solutions`` cannot reach the originals.

The process runs as an unprivileged uid with no capabilities (so
``RLIMIT_NPROC`` holds: it is not enforced for root). When we are root, bwrap
runs without a user namespace (its binds need root to reach the interpreter
under ``/root``) and ``setpriv`` drops to a fresh uid inside, after ``prlimit``
has set the limits; otherwise bwrap's user namespace keeps the caller's own,
unprivileged uid. Limits: CPU time, address space, processes, open files and
file size; the parent enforces the wall
time, caps the captured output and the bytes written to the job directory, and
kills the whole sandbox (its PID namespace dies with it) when any is exceeded.

``sandbox=False`` runs the runner as a plain subprocess with the same limits and
``PYTHONPATH``: for machines without bubblewrap, and **not tamper-proof**.
"""
from __future__ import annotations

import ast
import builtins
import dataclasses
import io
import json
import logging
import math
import os
import queue
import secrets
import select
import shutil
import signal
import site
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import answer_shapes, cgroup, wire
from .isolation import container_plan, current_isolation
from .runner import MODEL_METHODS
from .untrusted import parse_source
from .withhold import SOLUTIONS_DIR, graded_modules, module_names

__all__ = [
    "Limits",
    "RunOutcome",
    "limits_for",
    "parse_size",
    "bwrap_path",
    "build_library",
    "run_job",
    "check_sandbox",
    "case_frame",
    "SANDBOX_JOB_DIR",
    "SANDBOX_LIB_DIR",
    "ReferenceCalls",
    "reference_library",
]

log = logging.getLogger(__name__)

AUTOGRADER_DIR = Path(__file__).resolve().parent

# Where the job and the library appear inside the sandbox.
SANDBOX_JOB_DIR = "/job"
SANDBOX_LIB_DIR = "/lib-grading"

MiB = 2**20
GiB = 2**30


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandbox run (every one is a parameter of grading).

    Attributes:
        wall_seconds: wall-clock time of the whole run; the parent kills it after.
        cpu_seconds: CPU time per process (``RLIMIT_CPU``; SIGXCPU, then SIGKILL).
        memory_bytes: address space per process (``RLIMIT_AS``). torch reserves
            about 0.7 GiB of address space on import; 4 GiB leaves room for the
            checks' tensors while a memory hog gets ``MemoryError``.
        processes: processes and threads of the sandbox uid (``RLIMIT_NPROC``);
            bounds a fork bomb. The uid is fresh for every run, so parallel
            gradings do not share this budget.
        open_files: file descriptors per process (``RLIMIT_NOFILE``).
        file_bytes: size of any one written file (``RLIMIT_FSIZE``).
        output_bytes: how much of stdout and of stderr is kept (the rest is read
            and dropped, so a flood neither blocks the runner nor fills memory).
        scratch_bytes: total bytes the run may write to its writable job folder
            (a tmpfs of this size inside the sandbox: writes past it fail with
            ENOSPC, whether the files are kept, deleted or unlinked while open).
        tmp_bytes: size of the sandbox's private ``/tmp`` (a tmpfs).
        result_bytes: total bytes read from the result pipe (one run, all frames).
        run_memory_bytes: all the memory of the whole run — every process, and
            what it holds in memfd, ``/dev/shm`` and tmpfs files, which
            ``RLIMIT_AS`` does not see — bounded by a memory cgroup per run
            (:mod:`autograder.cgroup`) where the machine allows one.
        result_json_bytes: the JSON part of one result frame. Arrays travel in the
            frame's ``.npz`` part, so honest JSON is a few kilobytes; this bound
            keeps a forged frame from costing the trusted process the ~10x memory
            that decoding JSON into Python objects takes.
    """

    wall_seconds: float = 120.0
    cpu_seconds: int = 120
    memory_bytes: int = 4 * GiB
    processes: int = 64
    open_files: int = 256
    file_bytes: int = 256 * MiB
    output_bytes: int = 64 * 1024
    scratch_bytes: int = 512 * MiB
    tmp_bytes: int = 64 * MiB
    result_bytes: int = 256 * MiB
    result_json_bytes: int = 4 * MiB
    run_memory_bytes: int = 2 * GiB

    def __post_init__(self):
        for name in ("wall_seconds", "cpu_seconds", "memory_bytes", "processes", "open_files",
                     "file_bytes", "output_bytes", "scratch_bytes", "tmp_bytes", "result_bytes",
                     "result_json_bytes", "run_memory_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"Limits.{name} must be positive, got {getattr(self, name)!r}")


_SIZE_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_size(text: str | int) -> int:
    """A size in bytes from ``"512M"``, ``"2G"``, ``"1.5G"``, ``"300K"`` or a plain
    number of bytes (units are powers of 1024; ``KiB``/``MB`` spellings too).

    Raises:
        ValueError: not such a size, or not positive.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        raw = str(text).strip().upper().replace(" ", "")
        for suffix in ("IB", "B"):
            if len(raw) > 1 and raw.endswith(suffix) and raw[-len(suffix) - 1:-len(suffix)] in "KMGT":
                raw = raw[:-len(suffix)]
                break
        unit = raw[-1:] if raw[-1:] in _SIZE_UNITS and raw[-1:].isalpha() else ""
        number = raw[: len(raw) - len(unit)]
        try:
            value = int(float(number) * _SIZE_UNITS[unit])
        except (ValueError, OverflowError):
            raise ValueError(f"expected a size such as 512M or 2G, got {text!r}") from None
    if value <= 0:
        raise ValueError(f"expected a positive size such as 512M or 2G, got {text!r}")
    return value


def limits_for(timeout: float = 120.0, *, memory: int | None = None, disk: int | None = None,
               processes: int | None = None) -> Limits:
    """The :class:`Limits` of one sandbox run from the grading options.

    Args:
        timeout: wall-clock seconds of the run (``--timeout``); also its CPU time.
        memory: bytes of all the run's memory (``--memory``: its memory cgroup,
            :attr:`Limits.run_memory_bytes`); each process's address space
            (``RLIMIT_AS``) is raised to it when it is larger than the default.
        disk: bytes the run may write to its scratch tmpfs (``--disk``:
            :attr:`Limits.scratch_bytes`).
        processes: processes and threads of the run (``--processes``: ``RLIMIT_NPROC``).
            ``None`` keeps a limit's default.

    Raises:
        ValueError: a value that is not positive.
    """
    limits = Limits(wall_seconds=float(timeout), cpu_seconds=max(1, math.ceil(timeout)))
    changes: dict = {}
    if memory is not None:
        changes["run_memory_bytes"] = int(memory)
        changes["memory_bytes"] = max(limits.memory_bytes, int(memory))
    if disk is not None:
        changes["scratch_bytes"] = int(disk)
    if processes is not None:
        changes["processes"] = int(processes)
    return dataclasses.replace(limits, **changes) if changes else limits


@dataclass
class RunOutcome:
    """How one sandbox run ended.

    Attributes:
        returncode: the runner's exit status (``None`` when it died of a signal or
            was killed by the parent).
        signal: the signal that ended the runner, when known (``signal.Signals``
            value), else ``None``.
        timed_out: the parent killed it at the wall-time limit.
        overflow: the parent killed it for writing more than ``scratch_bytes``.
        stdout, stderr: the first ``output_bytes`` of each, decoded leniently.
        output_truncated: more output was produced than was kept.
        wall_seconds: how long the run took.
        frames: the result frames read from the result pipe, in arrival order:
            ``(grade_id, json_bytes, npz_bytes)`` (see :func:`autograder.wire.read_frames`).
        frame_problem: ``None``, or what was wrong with the result pipe's stream.
        memory_exceeded: the run's memory cgroup hit ``run_memory_bytes`` and the
            kernel killed a process of it.
        memory_peak_bytes: the run's peak memory as its cgroup saw it (``None``
            without a cgroup).
        cgroup_path: the run's cgroup (removed, with every member killed, when
            :func:`run_job` returns), or ``None``.
        cases_sent: ``(frame index, grade_id)`` of each case bundle written to the
            cases pipe: the bundle went out in answer to the frame at that index of
            ``frames``, so whatever came in an earlier frame was written before any
            of those cases was in the sandbox.
    """

    returncode: int | None
    signal: int | None
    timed_out: bool
    overflow: bool
    stdout: str
    stderr: str
    output_truncated: bool
    wall_seconds: float
    frames: list = field(default_factory=list)
    frame_problem: str | None = None
    memory_exceeded: bool = False
    memory_peak_bytes: int | None = None
    cgroup_path: str | None = None
    cases_sent: list = field(default_factory=list)


# --------------------------------------------------------------------------- the library


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

    It holds ``runner.py``, the stub ``autograder`` package with the wire format
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


# --------------------------------------------------------------------------- the sandbox


def bwrap_path() -> str | None:
    """The bubblewrap executable, or ``None`` where it is not installed."""
    return shutil.which("bwrap")


def _python_roots() -> list[Path]:
    """The folders the interpreter needs: the venv and its base installation."""
    roots = []
    for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix):
        for path in (Path(prefix), Path(prefix).resolve()):
            if not any(path == r or r in path.parents for r in roots) and path.exists():
                roots.append(path)
    exe = Path(sys.executable).resolve()
    if not any(r in exe.parents for r in roots):
        roots.append(exe.parent)
    return [r for r in roots if r != Path("/")]


def _editable_hooks() -> list[Path]:
    """The venv's editable-install files (``__editable__*``): inside the sandbox
    they would map ``solutions``/``autograder`` to the repository; we hide them."""
    dirs = {Path(p) for p in site.getsitepackages() if p}
    dirs.add(Path(sysconfig.get_paths()["purelib"]))
    hooks = []
    for d in dirs:
        if d.is_dir():
            hooks.extend(sorted(d.glob("__editable__*")))
    return hooks


def _parents_dirs(path: Path, made: set[Path]) -> list[str]:
    """bwrap arguments creating the parents of ``path`` world-traversable (bwrap
    would otherwise make them 0700 and the unprivileged uid could not pass)."""
    args = []
    for parent in reversed(path.parents):
        if parent == Path("/") or parent in made or parent.is_symlink():
            continue
        made.add(parent)
        args += ["--perms", "0755", "--dir", str(parent)]
    return args


# What of /etc the interpreter, numpy/torch and matplotlib use; not the host's
# users, groups, hosts or credentials.
_ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "alternatives", "fonts", "mime.types")


def _bwrap_args(job_dir: Path, lib_dir: Path, limits: Limits, out_on_host: bool = False) -> list[str]:
    """bubblewrap's arguments. The run's writable ``/job/out`` is a tmpfs of
    ``scratch_bytes`` inside the sandbox (results travel through the result pipe),
    so nothing the run writes — unlinked open files included — reaches the host's
    disk, and its pages count against the run's memory cgroup; only the
    file-result mode (``out_on_host``) binds the host's ``job_dir/out`` instead."""
    args = [
        "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
        "--hostname", "sandbox", "--new-session", "--die-with-parent", "--clearenv",
        "--ro-bind", "/usr", "/usr",
    ]
    if os.geteuid() != 0:
        # Unprivileged caller: bwrap needs a user namespace; the caller's own uid
        # is not root, so RLIMIT_NPROC holds without the setpriv step.
        args[:0] = ["--unshare-user", "--disable-userns"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / name
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            args += ["--ro-bind", str(host), str(host)]
    args += ["--perms", "0755", "--dir", "/etc"]
    for name in _ETC_FILES:
        host = Path("/etc") / name
        if host.exists():
            args += ["--ro-bind", str(host), str(host)]
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += ["--perms", "1777", "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp"]
    made: set[Path] = {Path("/usr"), Path("/etc")}
    for root in _python_roots():
        if root == Path("/usr") or Path("/usr") in root.parents:
            continue
        args += _parents_dirs(root, made) + ["--ro-bind", str(root), str(root)]
    for hook in _editable_hooks():
        args += ["--ro-bind", "/dev/null", str(hook)]
    args += ["--ro-bind", str(lib_dir), SANDBOX_LIB_DIR]
    args += ["--ro-bind", str(job_dir), SANDBOX_JOB_DIR]
    if out_on_host:
        args += ["--bind", str(job_dir / "out"), f"{SANDBOX_JOB_DIR}/out"]
    else:
        args += ["--perms", "1777", "--size", str(limits.scratch_bytes), "--tmpfs", f"{SANDBOX_JOB_DIR}/out"]
    args += ["--chdir", "/tmp"]
    return args


def _environment(lib_dir: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "LANG": "C.UTF-8",
        "PYTHONPATH": lib_dir,
        "PYTHONHASHSEED": "0",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": "/tmp/matplotlib",
        "OMP_NUM_THREADS": "1",  # threads count against RLIMIT_NPROC
        "MKL_NUM_THREADS": "1",
        "TRANSFORMER_BOOK_STATIC": "1",
    }


def _prlimit_args(limits: Limits) -> list[str]:
    return [
        shutil.which("prlimit") or "/usr/bin/prlimit",
        f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + 2}",
        f"--as={limits.memory_bytes}",
        f"--nproc={limits.processes}",
        f"--nofile={limits.open_files}",
        f"--fsize={limits.file_bytes}",
        "--core=0",
        "--",
    ]


def _fresh_uid() -> int:
    """A uid no other process uses, so each run has its own RLIMIT_NPROC budget."""
    return 1_000_000 + secrets.randbelow(1_000_000_000)


class _CaseFeeder:
    """Write each graded cell's cases to the runner's cases pipe when, and only
    when, the runner asks for them in protocol order.

    The frames read so far must be exactly the protocol's beginning: for each
    graded cell in job order, ``start``, then at most one ``cases`` request, then
    ``result``. A request that continues that sequence is answered with that
    cell's bundle, once; the first frame out of it stops the feeder for good (the
    pipe is closed, so a runner waiting for cases reads end of file), and the
    grader blames the cell that was running (:func:`autograder.grading._attribute`).
    Writing happens in a thread of its own, so a runner that asks and never reads
    cannot stall the reader of the result pipe.

    Args:
        fd: the write end of the cases pipe.
        bundles: ``(grade_id, frame bytes)`` per graded cell, in job order.
    """

    def __init__(self, fd: int, bundles: list[tuple[str, bytes]]):
        self.stream = os.fdopen(fd, "wb")
        self.order = [grade_id for grade_id, _ in bundles]
        self.bundles = dict(bundles)
        self.sent: list[tuple[int, str]] = []
        self.position, self.state, self.frames_seen = 0, "start", 0
        self.queue: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._write, daemon=True)
        self.thread.start()

    def on_frame(self, kind: str, grade_id: str) -> None:
        """Follow the protocol with one more frame from the result pipe."""
        index, self.frames_seen = self.frames_seen, self.frames_seen + 1
        if self.state == "broken":
            return
        expected = self.order[self.position] if self.position < len(self.order) else None
        if grade_id == expected and (self.state, kind) == ("start", "start"):
            self.state = "defining"
        elif grade_id == expected and (self.state, kind) == ("defining", "cases"):
            self.state = "checking"
            self.sent.append((index, grade_id))
            self.queue.put(self.bundles.pop(grade_id))
        elif grade_id == expected and self.state in ("defining", "checking") and kind == "result":
            self.position, self.state = self.position + 1, "start"
        else:
            self.stop()

    def stop(self) -> None:
        """Send nothing more; close the pipe once what was queued is written."""
        if self.state != "broken":
            self.state = "broken"
            self.queue.put(None)

    def _write(self) -> None:
        try:
            while True:
                item = self.queue.get()
                if item is None:
                    break
                self.stream.write(item)
                self.stream.flush()
        except (OSError, ValueError):
            pass  # the run is over (EPIPE): nothing is waiting for these cases
        finally:
            try:
                self.stream.close()
            except OSError:
                pass

    def close(self) -> list[tuple[int, str]]:
        """Stop after the run; return ``(frame index, grade_id)`` of each bundle sent."""
        self.stop()
        self.thread.join(timeout=10)
        return list(self.sent)


def case_frame(grade_id: str, specs: list, arrays: dict) -> bytes:
    """The bytes of the ``cases`` frame that carries one cell's case specs."""
    buf = io.BytesIO()
    wire.write_frame(buf, grade_id, specs, arrays, kind="cases")
    return buf.getvalue()


class _Frames:
    """Read the runner's result pipe in a thread (:func:`autograder.wire.read_frames`),
    following the protocol with the case feeder when there is one."""

    def __init__(self, fd: int, limits: Limits, feeder: _CaseFeeder | None = None):
        self.stream = os.fdopen(fd, "rb")
        self.frames: list = []
        self.problem: str | None = None
        self.limits = limits
        self.feeder = feeder
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            _, self.problem = wire.read_frames(
                self.stream, self.limits.result_bytes, self.limits.result_bytes, into=self.frames,
                max_json_bytes=self.limits.result_json_bytes,
                on_frame=self.feeder.on_frame if self.feeder is not None else None, drain=False,
            )
            if self.feeder is not None:
                # A stream that ended or broke asks for nothing more: a runner waiting
                # for cases reads the end of the cases pipe instead of waiting forever.
                self.feeder.stop()
            while self.stream.read(65536):  # drain, so the writer never blocks
                pass
        except (OSError, ValueError) as exc:
            self.problem = self.problem or f"the result pipe failed ({type(exc).__name__})"
        finally:
            if self.feeder is not None:
                self.feeder.stop()
            self.stream.close()

    def result(self) -> tuple[list, str | None]:
        self.thread.join(timeout=10)
        return list(self.frames), self.problem


class _Capped:
    """Drain a pipe in a thread, keeping only the first ``cap`` bytes."""

    def __init__(self, stream, cap: int):
        self.stream, self.cap = stream, cap
        self.chunks: list[bytes] = []
        self.kept = 0
        self.truncated = False
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        while True:
            try:
                chunk = self.stream.read1(65536)
            except (OSError, ValueError):
                break
            if not chunk:
                break
            room = self.cap - self.kept
            if room > 0:
                self.chunks.append(chunk[:room])
                self.kept += min(room, len(chunk))
            if len(chunk) > room:
                self.truncated = True

    def text(self) -> str:
        self.thread.join(timeout=5)
        return b"".join(self.chunks).decode("utf-8", errors="replace")


def _scratch_size(path: Path, cap_files: int = 10_000) -> int:
    """Bytes under ``path`` (a huge number of files counts as over any limit)."""
    total, count = 0, 0
    stack = [path]
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    count += 1
                    if count > cap_files:
                        return 1 << 62
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(Path(entry.path))
                        else:
                            total += entry.stat(follow_symlinks=False).st_blocks * 512
                    except OSError:
                        continue
        except OSError:
            continue
    return total


def run_job(job_dir: Path, lib_dir: Path, limits: Limits | None = None, *, sandbox: bool = True,
            result_pipe: bool = True, cases: list[tuple[str, bytes]] | None = None,
            isolation: str | None = None, script: str = "runner.py",
            reference_fds: tuple[int, int] | None = None) -> RunOutcome:
    """Run ``python runner.py JOB_DIR`` on a prepared job, sandboxed, and wait for it.

    Args:
        job_dir: the job folder (``job.json``); its ``out/`` is created here (the
            run's writable ``/job/out`` is a tmpfs inside the sandbox).
        lib_dir: the folder from :func:`build_library`.
        limits: resource limits (defaults: :class:`Limits`).
        sandbox: ``False`` runs a plain subprocess — NOT tamper-proof.
        result_pipe: hand the runner a pipe for its results (``--result-fd``)
            instead of letting it write ``out/result_*`` files.
        cases: ``(grade_id, case_frame(...))`` per graded cell of the job, in job
            order: handed to the runner through a second pipe (``--cases-fd``), each
            cell's only when the runner asks for them in protocol order
            (:class:`_CaseFeeder`), so no case is ever in a file. ``None``: no
            cases pipe; the runner reads ``cases_<grade_id>`` files from the job
            folder (the runner's own tests).
        isolation: with ``sandbox``, ``"bubblewrap"`` or ``"container"``
            (:mod:`autograder.isolation`); default: the process's mode
            (``AUTOGRADER_ISOLATION``, ``auto``: bubblewrap where it starts).
        script: the program of ``lib_dir`` to run in place of ``runner.py``, with
            the same arguments (``executor.py``: :mod:`autograder.executor`).
        reference_fds: ``(out, in)``, the child's ends of a regrade's reference pipes
            (:class:`ReferenceCalls`), handed to it as ``--reference-fds OUT IN`` and
            closed here once it holds them.

    Returns:
        A :class:`RunOutcome`.

    Raises:
        RuntimeError: ``sandbox=True`` and bubblewrap is not installed.
        ValueError: ``cases`` without ``result_pipe`` (the runner asks for its cases
            on the result pipe).
    """
    limits = limits or Limits()
    run = _start_run(job_dir, lib_dir, limits, sandbox, result_pipe, cases, isolation, script, reference_fds)
    proc, group, start, run_uid, mode, read_fd, cases_write = (run.proc, run.group, run.start, run.uid, run.mode,
                                                               run.read_fd, run.cases_write)
    out_dir = Path(job_dir).resolve() / "out"
    feeder = None
    if cases is not None:
        feeder = _CaseFeeder(cases_write, cases)
    try:
        outcome = _watch(proc, start, out_dir, limits, sandbox, read_fd if result_pipe else None, group, feeder,
                         uid=run_uid, container=mode == "container")
    finally:
        if group is not None:
            group.remove()  # every process the run left, in whatever session: killed
        if run_uid is not None:
            _kill_uid(run_uid)
    if feeder is not None:
        outcome.cases_sent = feeder.close()
    return outcome


@dataclass
class _Started:
    """A run :func:`_start_run` started: its process, cgroup, start time, own uid (container
    mode), isolation mode, and the parent's ends of the result and cases pipes."""

    proc: subprocess.Popen
    group: object
    start: float
    uid: int | None
    mode: str | None
    read_fd: int | None
    cases_write: int | None


def _close(fds) -> None:
    for fd in fds:
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


def _start_run(job_dir: Path, lib_dir: Path, limits: Limits, sandbox: bool, result_pipe: bool, cases, isolation,
               script: str, reference_fds: tuple[int, int] | None) -> _Started:
    """Start the run of :func:`run_job`. It owns ``reference_fds`` from the first line: the
    child's ends (those and the pipes made here) are closed once the child holds them, and
    on any failure before that (bubblewrap missing, a container that cannot be prepared,
    no process) every end, both sides, is closed before the error goes up."""
    made: list[int] = []
    child_fds: tuple = tuple(reference_fds or ())
    started = False
    try:
        if cases is not None and not result_pipe:
            raise ValueError("cases travel through a pipe only beside the result pipe: pass result_pipe=True")
        job_dir = Path(job_dir).resolve()
        lib_dir = Path(lib_dir).resolve()
        out_dir = job_dir / "out"
        out_dir.mkdir(exist_ok=True)
        python = os.path.abspath(sys.executable)  # a relative path would not resolve inside the sandbox
        read_fd = write_fd = cases_read = cases_write = None
        if result_pipe:
            read_fd, write_fd = os.pipe()
            made += [read_fd, write_fd]
        if cases is not None:
            cases_read, cases_write = os.pipe()
            made += [cases_read, cases_write]
        pipe_args = ["--result-fd", str(write_fd)] if result_pipe else []
        if cases is not None:
            pipe_args += ["--cases-fd", str(cases_read)]
        if reference_fds is not None:
            pipe_args += ["--reference-fds", *(str(fd) for fd in reference_fds)]
        child_fds = tuple(fd for fd in (write_fd, cases_read, *(reference_fds or ())) if fd is not None)
        mode = None
        if sandbox:
                mode = isolation or current_isolation()
        run_uid = None  # container mode: the run's own uid, whose every process is killed at the end
        if mode == "container":
            command, env, cwd, run_uid = _container_command(job_dir, lib_dir, limits, python, pipe_args, script)
        elif sandbox:
            bwrap = bwrap_path()
            if bwrap is None:
                raise RuntimeError("bubblewrap (bwrap) is not installed: install it, or grade with sandbox=False "
                                   "(unsafe)")
            inner = [python, "-s", "-B", f"{SANDBOX_LIB_DIR}/{script}", SANDBOX_JOB_DIR, *pipe_args]
            command = [bwrap, *_bwrap_args(job_dir, lib_dir, limits, out_on_host=not result_pipe)]
            for key, value in _environment(SANDBOX_LIB_DIR).items():
                command += ["--setenv", key, value]
            command += ["--", *_prlimit_args(limits)]
            if os.geteuid() == 0:
                uid = _fresh_uid()
                for path in [job_dir, *job_dir.iterdir()]:
                    path.chmod(0o755 if path.is_dir() else 0o644)
                os.chown(out_dir, uid, uid)
                out_dir.chmod(0o700)
                command += [
                    shutil.which("setpriv") or "/usr/bin/setpriv",
                    f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                    "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--",
                ]
            command += inner
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
            cwd = "/"
        else:
            env = _environment(str(lib_dir))
            env["MPLCONFIGDIR"] = str(job_dir / "out" / ".matplotlib")
            env["HOME"] = str(job_dir / "out")
            command = [*_prlimit_args(limits), python, "-s", "-B", str(lib_dir / script), str(job_dir), *pipe_args]
            cwd = str(out_dir)
        group = None
        if cgroup.available()[0]:
            try:
                group = cgroup.RunCgroup.create(limits.run_memory_bytes)
                command = group.wrap(command)
            except OSError as exc:
                log.warning("grading sandbox: no memory cgroup for this run (%s)", exc)
                group = None
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=env, cwd=cwd, start_new_session=True, pass_fds=child_fds,
            )
        except BaseException:
            if group is not None:
                group.remove()
            raise
        started = True
        return _Started(proc, group, start, run_uid, mode, read_fd, cases_write)
    except BaseException:
        _close(set(made) | set(child_fds))
        raise
    finally:
        if started:
            _close(child_fds)  # only the runner holds these ends: EOF/EPIPE when it is gone


def _watch(proc: subprocess.Popen, start: float, out_dir: Path, limits: Limits, sandbox: bool,
           read_fd: int | None, group, feeder: _CaseFeeder | None = None, uid: int | None = None,
           container: bool = False) -> RunOutcome:
    """Wait for a started run within its limits and collect how it ended."""
    result_pipe = read_fd is not None
    frames = _Frames(read_fd, limits, feeder) if result_pipe else None
    out = _Capped(proc.stdout, limits.output_bytes)
    err = _Capped(proc.stderr, limits.output_bytes)
    timed_out = overflow = False
    next_size_check = start
    while proc.poll() is None:
        now = time.monotonic()
        if now - start > limits.wall_seconds:
            timed_out = True
            break
        if now >= next_size_check:
            if _scratch_size(out_dir) > limits.scratch_bytes:
                overflow = True
                break
            next_size_check = now + 0.5
        try:
            proc.wait(timeout=0.05)
        except subprocess.TimeoutExpired:
            pass
    if proc.poll() is None:
        _kill(proc)
    if group is not None:
        group.kill_all()  # stragglers in other sessions would hold the pipes open
    if uid is not None:
        _kill_uid(uid)  # container mode: every process of the run's own uid, whatever its session
    if feeder is not None:
        feeder.stop()
    wall = time.monotonic() - start
    stdout, stderr = out.text(), err.text()
    frame_list, frame_problem = frames.result() if frames is not None else ([], None)
    # Container mode execs all the way to the runner: a signal shows as a negative code, as in plain mode.
    returncode, sig = _exit_status(proc.returncode, sandbox and not container)
    if timed_out or overflow:
        returncode, sig = None, None
    exceeded = group is not None and group.oom_killed()
    return RunOutcome(
        returncode=returncode, signal=sig, timed_out=timed_out, overflow=overflow,
        stdout=stdout, stderr=stderr, output_truncated=out.truncated or err.truncated, wall_seconds=wall,
        frames=frame_list, frame_problem=frame_problem, memory_exceeded=exceeded,
        memory_peak_bytes=group.peak_bytes() if group is not None else None,
        cgroup_path=str(group.path) if group is not None else None,
    )


# --------------------------------------------------------------------------- container mode


def _container_command(job_dir: Path, lib_dir: Path, limits: Limits, python: str,
                       pipe_args: list[str], script: str = "runner.py") -> tuple[list[str], dict, str, int | None]:
    """The command of a container-mode run (:mod:`autograder.isolation`): ``unshare --net
    --ipc`` where permitted, ``prlimit``, ``setpriv`` to a fresh uid (as root), then
    :mod:`autograder.confine` (Landlock, seccomp) and the runner. Returns ``(command, env, cwd, uid)``."""
    plan = container_plan()
    out_dir = job_dir / "out"
    confine = lib_dir / "confine.py"
    if not confine.is_file():
        shutil.copyfile(AUTOGRADER_DIR / "confine.py", confine)
        confine.chmod(0o644)
    uid = _fresh_uid() if plan["separate_user"] else None
    for path in [job_dir, *job_dir.iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    if uid is not None:
        # The run's own folders: only its uid (and root) may enter them, so no other run reads this job.
        for folder in (job_dir, lib_dir, out_dir):
            os.chown(folder, uid, uid)
            folder.chmod(0o700)
    reads = [str(r) for r in _python_roots()] + ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
                                                 "/proc", "/sys/devices/system/cpu", "/dev/null", "/dev/zero",
                                                 "/dev/urandom", "/dev/random"]
    reads += [str(Path("/etc") / name) for name in _ETC_FILES]
    reads += [str(lib_dir), str(job_dir)]
    inner = [python, "-s", "-B", str(confine)]
    for path in reads:
        inner += ["--read", path]
    inner += ["--write", str(out_dir), "--write", "/dev/null"]
    if plan["no_tcp"]:
        inner.append("--no-tcp")
    inner += ["--", python, "-s", "-B", str(lib_dir / script), str(job_dir), *pipe_args]
    command = []
    namespaces = [flag for flag, ok in (("--net", plan["unshare_net"]), ("--ipc", plan.get("unshare_ipc"))) if ok]
    if namespaces:  # IPC: a System V segment or POSIX queue dies with the run (seccomp refuses them anyway)
        command += [shutil.which("unshare") or "/usr/bin/unshare", *namespaces, "--"]
    command += _prlimit_args(limits)
    if uid is not None:
        keep = ",+dac_read_search" if plan["read_search"] else ""
        command += [shutil.which("setpriv") or "/usr/bin/setpriv", f"--reuid={uid}", f"--regid={uid}",
                    "--clear-groups", f"--inh-caps=-all{keep}", f"--bounding-set=-all{keep}", "--no-new-privs"]
        if plan["read_search"]:
            command += ["--ambient-caps=+dac_read_search"]
        command += ["--"]
    command += inner
    env = _environment(str(lib_dir))
    env.update(HOME=str(out_dir), TMPDIR=str(out_dir), MPLCONFIGDIR=str(out_dir / ".matplotlib"))
    return command, env, str(out_dir), uid


def _kill_uid(uid: int) -> None:
    """Kill every process of ``uid`` (a container-mode run's own uid): ``kill(-1)`` as that uid."""
    setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
    try:
        subprocess.run([setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--",
                        shutil.which("kill") or "/bin/kill", "-KILL", "-1"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        pass


_SANDBOX_OK: dict[tuple, str] = {}


def check_sandbox(limits: Limits | None = None, isolation: str | None = None) -> None:
    """Start one empty sandbox (cached per process) so that a broken installation is
    reported as such, not blamed on the first student cell that happens to run.

    Raises:
        RuntimeError: bubblewrap is missing or cannot start the interpreter.
    """
    if isolation is None:
        isolation = current_isolation()
    key = (os.geteuid(), sys.executable, isolation)
    if key in _SANDBOX_OK:
        return
    with tempfile.TemporaryDirectory(prefix="autograder-check-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        lib = root / "lib"
        lib.mkdir()
        (lib / "runner.py").write_text("import numpy\nprint('sandbox ok')\n", encoding="utf-8")
        job = root / "job"
        job.mkdir()
        outcome = run_job(job, lib, limits or Limits(wall_seconds=60.0), isolation=isolation)
    if outcome.returncode != 0 or "sandbox ok" not in outcome.stdout:
        raise RuntimeError(
            f"the grading sandbox ({isolation}) does not start: "
            + (outcome.stderr.strip().splitlines() or [f"exit status {outcome.returncode}"])[-1]
        )
    _SANDBOX_OK[key] = "ok"


def _kill(proc: subprocess.Popen) -> None:
    """Kill the run: its process group (plain mode), and bwrap, whose death takes the
    sandbox's PID namespace — every process the student started — with it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass
    proc.wait()


def _exit_status(code: int, sandbox: bool) -> tuple[int | None, int | None]:
    """``(exit status, signal)``: bubblewrap reports a child killed by signal N as
    exit status 128 + N; a plain subprocess as ``-N``."""
    if code is None:
        return None, None
    if code < 0:
        return None, -code
    if sandbox and code > 128 and code - 128 < 65:
        return None, code - 128
    return code, None


# --------------------------------------------------------------------------- a regrade's references


class ReferenceCalls:
    """Relay a regrade's calls of failing earlier exercises to their references, which run
    in a sandbox of their own (:mod:`autograder.oracle`), never in the student's process
    (issue 36: a reference the graded cell can read, it can send out through its feedback,
    a file or shared memory).

    The student's run gets the ends ``child_fds`` (``--reference-fds``): the names of the
    failing exercises are bound there to stand-ins (:class:`autograder.runner.Reference`
    for a function, :func:`autograder.runner.module_stand_in` for a class), which write a
    ``call`` frame and read an ``answer``; meanwhile the reference may call back a callable
    the call passed (``callback`` and ``return`` frames), which may call a stand-in in turn.
    A thread here reads each frame, admits it and forwards it. Why a sandbox of its own, not
    this process: a call's arguments are the student's (``causal_mask(10**9)``), and a
    reference run on them here could take the grader's memory or time, and with it the
    class; there it runs under the regrade's own limits, as an unprivileged uid with no
    network, and can only die. The references' library holds ``solutions`` whole and no
    student code, so nothing there can read it out; the student's run holds no reference,
    so nothing there can either.

    Bounds, so that a cell calling a stand-in a million times costs only its own grade:
    at most :data:`MAX_CALLS` frames and :data:`MAX_BYTES` bytes each way per run, each
    frame at most :data:`MAX_FRAME_BYTES` (JSON at most :data:`MAX_JSON_BYTES`,
    :data:`MAX_ARRAYS` arrays), calls nested at most :data:`MAX_NESTING` deep, and plain
    data only (:func:`autograder.wire.check_encoded`: no object factory, whose building
    would run code in the references' sandbox); a call past a bound is answered with a
    refusal, in the grader's words, which the stand-in raises. What comes back from the
    references' sandbox is checked against its call before it enters the student's
    process (:meth:`_Call.check_answer`): the keys that call can have, plain data, a generator
    state of the size sent, gradients of the shape and dtype of the tensors asked about,
    a refusal of a known exception class with a bounded message.

    Time: :meth:`wait_ready` waits (at most :data:`START_SECONDS`) until the references'
    sandbox has imported the references, so the student's run starts after it and its
    clock is not charged with that start; the references' sandbox gets the regrade's
    limits plus that start.

    Args:
        names: the exercises whose references may be called (each a ``solutions`` name).
        lib_dir: the references' library (:func:`build_library` with nothing withheld,
            plus ``oracle.py``: :func:`reference_library`).
        job_dir: an empty folder for the references' run.
        limits: the regrade's limits.
        sandbox, isolation: as in :func:`run_job`.

    Use as a context manager around the student's run::

        with ReferenceCalls({"softmax"}, lib, job, limits) as calls:
            calls.wait_ready()
            run_job(..., reference_fds=calls.hand_over())
    """

    MAX_CALLS = 20_000
    MAX_BYTES = 512 * MiB
    MAX_FRAME_BYTES = 64 * MiB
    MAX_JSON_BYTES = 1 * MiB
    MAX_ARRAYS = 64
    MAX_NESTING = 16
    START_SECONDS = 120.0

    def __init__(self, names: set[str], lib_dir: Path, job_dir: Path, limits: Limits, sandbox: bool = True,
                 isolation: str | None = None):
        self.names = frozenset(names)
        self.lib_dir, self.job_dir, self.limits = Path(lib_dir), Path(job_dir), limits
        self.sandbox, self.isolation = sandbox, isolation
        self.calls = self.bytes_in = self.bytes_out = 0
        self.refused: str | None = None  # the first refusal, for the grader's log
        self.worker_outcome: RunOutcome | None = None
        self.worker_alive = True

    def __enter__(self) -> "ReferenceCalls":
        calls_read, calls_write = os.pipe()  # student -> here
        answers_read, answers_write = os.pipe()  # here -> student
        #: The student's run's ends, ``(out, in)``: :func:`run_job` closes them, whatever happens.
        self.child_fds = (calls_write, answers_read)
        self.from_student = os.fdopen(calls_read, "rb")
        self.to_student = os.fdopen(answers_write, "wb")
        to_worker_read, to_worker_write = os.pipe()
        from_worker_read, from_worker_write = os.pipe()
        self.to_worker = os.fdopen(to_worker_write, "wb")
        self.from_worker = os.fdopen(from_worker_read, "rb")
        self.job_dir.mkdir(parents=True, exist_ok=True)
        self.ready = threading.Event()
        self.worker = threading.Thread(target=self._run_worker, args=((from_worker_write, to_worker_read),),
                                       daemon=True)
        self.worker.start()
        self.relay = threading.Thread(target=self._relay, daemon=True)
        self.relay.start()
        return self

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait until the references' sandbox has started (its ``ready`` frame, read by the
        relay before anything else), at most ``timeout`` seconds (default
        :data:`START_SECONDS`). Whether it started: if not, every call is refused."""
        self.ready.wait(self.START_SECONDS if timeout is None else timeout)
        return self.ready.is_set() and self.worker_alive

    def hand_over(self) -> tuple[int, int]:
        """The student's run's ends, given to :func:`run_job`, which owns them from then
        on: it closes them when the run starts or fails to (so :meth:`__exit__` never does:
        closing a descriptor twice can close a file another thread has opened under the same
        number since, and a class graded with ``--jobs`` runs in threads)."""
        fds, self.child_fds = self.child_fds, ()
        return fds

    def __exit__(self, *exc_info) -> None:
        for fd in self.child_fds:  # not handed over: the student's run never got them, they are ours
            try:
                os.close(fd)
            except OSError:
                pass
        self.relay.join(timeout=self.limits.wall_seconds + 30)
        for stream in (self.to_worker, self.from_student, self.to_student, self.from_worker):
            try:
                stream.close()  # the references' sandbox reads the end of its calls and exits
            except OSError:
                pass
        self.worker.join(timeout=self.limits.wall_seconds + self.START_SECONDS + 30)
        if self.refused:
            log.info("a regrade's reference calls were refused: %s", self.refused)

    def _run_worker(self, fds: tuple[int, int]) -> None:
        limits = dataclasses.replace(self.limits, wall_seconds=self.limits.wall_seconds + self.START_SECONDS,
                                     cpu_seconds=self.limits.cpu_seconds + math.ceil(self.START_SECONDS))
        try:
            self.worker_outcome = run_job(self.job_dir, self.lib_dir, limits, sandbox=self.sandbox,
                                          result_pipe=False, isolation=self.isolation, script="oracle.py",
                                          reference_fds=fds)
        except Exception as exc:  # noqa: BLE001 - no references: every call is refused, the first grade stands
            # run_job owns fds (it closes them whether or not the run starts).
            log.warning("the references' sandbox of a regrade did not start: %s", exc)

    # ------------------------------------------------------------------ frames

    def _write(self, stream, kind: str, name: str, data, arrays: dict) -> None:
        buf = io.BytesIO()
        wire.write_frame(buf, name, data, arrays, kind=kind)
        stream.write(buf.getvalue())
        stream.flush()

    def _refusal(self, name: str, why: str) -> dict:
        self.refused = self.refused or why
        return {"raised": {"type": "RuntimeError", "message": f"the reference {name} was not called: {why}"}}

    def _refuse(self, name: str, why: str) -> None:
        """Answer a call with a refusal in the grader's words (the stand-in raises it)."""
        self._write(self.to_student, "answer", name, self._refusal(name, why), {})

    def _count(self, frame: tuple, inward: bool) -> str | None:
        """Count a frame against the run's bounds; why it is one too many, or ``None``."""
        self.calls += 1  # every frame counts, refused or not
        if inward:
            self.bytes_in += len(frame[2]) + len(frame[3])
        else:
            self.bytes_out += len(frame[2]) + len(frame[3])
        if self.calls > self.MAX_CALLS:
            return f"more than {self.MAX_CALLS} calls in one run"
        if self.bytes_in > self.MAX_BYTES:
            return f"more than {self.MAX_BYTES // MiB} MB of arguments in one run"
        if self.bytes_out > self.MAX_BYTES:
            return f"more than {self.MAX_BYTES // MiB} MB of results in one run"
        return None

    def _load(self, frame: tuple) -> tuple:
        data, arrays = wire.load_body(frame[2], frame[3], self.MAX_FRAME_BYTES)
        if len(arrays) > self.MAX_ARRAYS:
            raise wire.WireError(f"more than {self.MAX_ARRAYS} arrays in one frame")
        if any(a.size > wire.MAX_RESULT_ELEMENTS for a in arrays.values()):
            raise wire.WireError("an array larger than any exercise's")
        if not isinstance(data, dict):
            raise wire.WireError("a frame that is not the protocol's")
        return data, arrays

    def _admit(self, frame: tuple) -> tuple[str | None, "_Call | None"]:
        """``(why the call is refused, None)`` or ``(None, the call)``: a call of one of
        :attr:`names` with plain data within every bound, as a stand-in writes it."""
        kind, name, body, npz = frame
        too_many = self._count(frame, inward=True)
        if too_many:
            return too_many, None
        if kind != "call" or name not in self.names:
            return "not one of this regrade's references", None
        try:
            data, arrays = self._load(frame)
            return None, _Call(name, data, arrays)
        except wire.WireError as exc:
            return str(exc), None

    def _relay(self) -> None:
        try:
            frame, _ = _read_with_timeout(self.from_worker, self.START_SECONDS)
        except (OSError, ValueError):
            frame = None
        self.worker_alive = frame is not None and frame[0] == "ready"
        if not self.worker_alive:
            self.refused = self.refused or "the references' sandbox did not start"
        self.ready.set()
        try:
            while True:
                frame, _ = wire.read_frame(self.from_student, self.MAX_FRAME_BYTES, self.MAX_JSON_BYTES)
                if frame is None:
                    return  # the run ended (or broke the framing: it then waits for nothing)
                if frame[0] != "call":
                    self._count(frame, inward=True)
                    continue  # a return nothing waits for: dropped
                self._serve(frame, 0)
        except (OSError, ValueError, _Gone):
            return  # the student's run is gone: nothing waits for an answer

    def _serve(self, frame: tuple, depth: int) -> None:
        """Relay one call and everything until its answer (callbacks, nested calls)."""
        name = frame[1]
        refusal, call = self._admit(frame)
        if refusal is None and depth >= self.MAX_NESTING:
            refusal = f"calls nested more than {self.MAX_NESTING} deep"
        if refusal is None and not self.worker_alive:
            refusal = "the reference's sandbox stopped"
        if refusal is not None:
            self._refuse(name, refusal)
            return
        try:
            self.to_worker.write(_frame_bytes("call", name, frame[2], frame[3]))
            self.to_worker.flush()
        except (OSError, ValueError):
            self._stopped(name)
            return
        while True:
            try:
                reply, _ = wire.read_frame(self.from_worker, self.MAX_FRAME_BYTES, self.MAX_JSON_BYTES)
            except (OSError, ValueError):
                reply = None
            if reply is None or reply[1] != name or reply[0] not in ("answer", "callback"):
                self._stopped(name)
                return
            too_many = self._count(reply, inward=False)
            try:
                data, arrays = self._load(reply)
                if reply[0] == "answer":
                    call.check_answer(data, arrays)
                else:
                    call.check_callback(data, arrays)
            except wire.WireError as exc:
                self._stopped(name, f"its sandbox sent {exc}")
                return
            if reply[0] == "answer":
                if too_many:
                    self._refuse(name, too_many)
                else:
                    self.to_student.write(_frame_bytes("answer", name, reply[2], reply[3]))
                    self.to_student.flush()
                return
            self.to_student.write(_frame_bytes("callback", name, reply[2], reply[3]))
            self.to_student.flush()
            self._await_return(name, depth)

    def _await_return(self, name: str, depth: int) -> None:
        """Read the student's frames until the ``return`` of a callback of ``name`` (relaying
        the calls its callable makes meanwhile) and forward it, admitted, to the references."""
        while True:
            frame, _ = wire.read_frame(self.from_student, self.MAX_FRAME_BYTES, self.MAX_JSON_BYTES)
            if frame is None:
                raise _Gone
            if frame[0] == "call":
                self._serve(frame, depth + 1)
                continue
            too_many = self._count(frame, inward=True)
            if frame[0] != "return" or frame[1] != name:
                data, arrays = self._refusal(name, "the callable broke the protocol"), {}
            elif too_many:
                data, arrays = self._refusal(name, too_many), {}
            else:
                try:
                    data, arrays = self._load(frame)
                    _check_return(data, arrays)
                    self.to_worker.write(_frame_bytes("return", name, frame[2], frame[3]))
                    self.to_worker.flush()
                    return
                except wire.WireError as exc:
                    data, arrays = self._refusal(name, f"the callable returned {exc}"), {}
                except (OSError, ValueError):
                    return  # the references' sandbox is gone: the call's answer says so
            try:
                self._write(self.to_worker, "return", name, data, arrays)
            except (OSError, ValueError):
                pass
            return

    def _stopped(self, name: str, why: str = "its limits, or the arguments") -> None:
        """The references' sandbox died or broke the protocol: refuse this call and every later one."""
        self.worker_alive = False
        self._refuse(name, f"the reference's sandbox stopped ({why})")


class _Gone(Exception):
    """The student's run closed its end of the calls in the middle of a call."""


def _read_with_timeout(stream, seconds: float):
    """:func:`autograder.wire.read_frame` of a small frame that must begin within ``seconds``."""
    ready, _, _ = select.select([stream], [], [], max(0.0, seconds))
    if not ready:
        return None, "no frame in time"
    return wire.read_frame(stream, 4096, 4096)


#: The exceptions a reference's refusal may name (the stand-in raises that class).
_RAISABLE = frozenset(name for name, value in vars(builtins).items()
                      if isinstance(value, type) and issubclass(value, Exception))


def _check_raised(raised) -> None:
    if not (isinstance(raised, dict) and set(raised) == {"type", "message"} and isinstance(raised["type"], str)
            and isinstance(raised["message"], str) and len(raised["message"]) <= 2000):
        raise wire.WireError("a refusal that is not the protocol's")


def _check_return(data: dict, arrays: dict) -> None:
    """Admit the ``return`` of a student's callable: a value, gradients or what it raised, plain data."""
    if set(data) <= {"value", "call"} and "value" in data:
        if "call" in data and type(data["call"]) is not int:
            raise wire.WireError("a callback number that is not one")
        wire.check_encoded(data["value"], arrays)
    elif set(data) == {"grads"}:
        wire.check_encoded(data["grads"], arrays)
    elif set(data) == {"raised"}:
        _check_raised(data["raised"])
    else:
        raise wire.WireError("a return that is not the protocol's")


def _tensor_of(encoded, arrays: dict):
    """The array of an encoded tensor or array, or ``None``."""
    if isinstance(encoded, dict):
        key = encoded.get("__tensor__", encoded.get("__ndarray__"))
        if isinstance(key, str) and key in arrays:
            return arrays[key]
    return None


class _Call:
    """One admitted call of a stand-in: its data and arrays, and what may come back (its
    value predicted from its arguments: :func:`autograder.answer_shapes.predict`).

    Raises (on building): :class:`autograder.wire.WireError`: a call a stand-in does not write.
    """

    KEYS = {None: {"args", "kwargs", "rng", "wrt", "grads"},
            "new": {"op", "init", "rng"},
            "call": {"op", "method", "path", "init", "state", "training", "attributes", "args", "kwargs", "rng",
                     "wrt", "grads"}}

    def __init__(self, name: str, data: dict, arrays: dict):
        self.data, self.arrays = data, arrays
        self.op = data.get("op")
        if self.op not in self.KEYS or not set(data) <= self.KEYS[self.op]:
            raise wire.WireError("a call that is not the stand-in's")
        if self.op == "call" and data.get("method") != "forward":
            raise wire.WireError("a call of a method other than forward")
        path = data.get("path", "")
        if not (isinstance(path, str) and len(path) <= 200
                and (path == "" or all(part.isidentifier() or part.isdigit() for part in path.split(".")))):
            raise wire.WireError("a call of a submodule path that is not one")
        self.callbacks: list = []
        wire.check_encoded([data.get("args"), data.get("kwargs")], arrays, callbacks=self.callbacks)
        wire.check_encoded([data.get(key) for key in ("grads", "init", "state", "rng", "training", "attributes")],
                           arrays)
        self.expected = answer_shapes.predict(name, data, arrays)
        self.rng = _tensor_of(data.get("rng"), arrays)
        if data.get("rng") is not None and (self.rng is None or self.rng.dtype != np.uint8 or self.rng.ndim != 1):
            raise wire.WireError("a generator state that is not one")
        self.wrt = self._wrt(data.get("wrt"))

    def _wrt(self, wrt) -> list | None:
        """The arrays of the tensors gradients are asked for, in ``wrt`` order (shapes and dtypes to check)."""
        if wrt is None:
            return None
        if not isinstance(wrt, list) or not wrt or len(wrt) > self.MAX_WRT:
            raise wire.WireError("a call that is not the stand-in's")
        places = {"arg": dict(enumerate(self.data.get("args") or [])),
                  "kwarg": answer_shapes.entries(self.data.get("kwargs")),
                  "state": answer_shapes.entries(self.data.get("state"))}
        found = []
        for item in wrt:
            if not (isinstance(item, list) and len(item) == 2 and item[0] in places):
                raise wire.WireError("a call that is not the stand-in's")
            array = _tensor_of(places[item[0]].get(item[1]), self.arrays) if isinstance(item[1], (int, str)) else None
            if array is None or array.dtype.kind not in "fc":
                raise wire.WireError("a gradient asked for with respect to no tensor of the call")
            found.append(array)
        return found

    MAX_WRT = 256

    def check_answer(self, data: dict, arrays: dict) -> None:
        """Admit the references' answer to this call (:class:`ReferenceCalls`)."""
        keys = set(data)
        if keys == {"raised"}:
            _check_raised(data["raised"])
            if data["raised"]["type"] not in _RAISABLE:
                raise wire.WireError("a refusal of an unknown exception class")
            return
        with_rng = {"rng"} if self.rng is not None else set()
        if self.wrt is not None:
            if keys != {"grads"}:
                raise wire.WireError("an answer that is not this call's")
            grads = data["grads"]
            wire.check_encoded(grads, arrays)
            if not (isinstance(grads, list) and len(grads) == len(self.wrt)):
                raise wire.WireError("gradients that are not this call's")
            for encoded, want in zip(grads, self.wrt):
                got = _tensor_of(encoded, arrays)
                if got is None or got.shape != want.shape or got.dtype != want.dtype:
                    raise wire.WireError("gradients that are not this call's")
            return
        if self.op == "new":
            if keys != {"state", "parameters", "modules", "rng"}:
                raise wire.WireError("an answer that is not this call's")
            wire.check_encoded([data["state"], data["parameters"], data["modules"]], arrays)
            state = answer_shapes.entries(data["state"])
            if any(not isinstance(k, str) or _tensor_of(v, arrays) is None for k, v in state.items()):
                raise wire.WireError("a module state that is not one")
            if not (isinstance(data["parameters"], list)
                    and all(isinstance(p, str) and p in state for p in data["parameters"])):
                raise wire.WireError("a module state that is not one")
        elif keys != {"value"} | with_rng:
            raise wire.WireError("an answer that is not this call's")
        else:
            wire.check_encoded(data["value"], arrays)
            answer_shapes.check_value(self.expected, data["value"], arrays)
        if self.rng is not None:
            got = _tensor_of(data.get("rng"), arrays)
            if got is None or got.shape != self.rng.shape or got.dtype != self.rng.dtype:
                raise wire.WireError("a generator state that is not the one sent")

    def check_callback(self, data: dict, arrays: dict) -> None:
        """Admit the references' request to run a callable of this call."""
        index = data.get("id")
        if type(index) is not int or index not in self.callbacks:
            raise wire.WireError("a callback of no callable of this call")
        if data.get("method", MODEL_METHODS[0]) not in MODEL_METHODS:
            raise wire.WireError("a callback of a method no reference calls")
        if set(data) == {"id", "call", "grads"} and type(data["call"]) is int:
            wire.check_encoded(data["grads"], arrays)
        elif set(data) - {"method"} == {"id", "args", "kwargs", "grad"} and isinstance(data["grad"], bool):
            wire.check_encoded([data["args"], data["kwargs"]], arrays)
        else:
            raise wire.WireError("a callback that is not the protocol's")


def _frame_bytes(kind: str, name: str, body: bytes, npz: bytes) -> bytes:
    """A frame of :func:`autograder.wire.write_frame` around an admitted body, as it came."""
    header = {"grade_id": name, "kind": kind, "json": len(body), "npz": len(npz)}
    return json.dumps(header).encode("utf-8") + b"\n" + body + npz


def reference_library(dest: Path, solutions_dir: Path = SOLUTIONS_DIR) -> Path:
    """The library of the references' sandbox (:class:`ReferenceCalls`): ``solutions``
    whole (no student code runs there), the wire format, ``oracle.py`` and, beside the
    wire format in the stub package, the runner it borrows its autograd function from."""
    build_library(dest, set(), solutions_dir)
    for source, target in (("oracle.py", "oracle.py"), ("runner.py", "autograder/runner.py")):
        shutil.copyfile(AUTOGRADER_DIR / source, dest / target)
        (dest / target).chmod(0o644)
    return dest
