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
* matplotlib's font list, read-only in its config folder ``/tmp/matplotlib``: the
  list a run would build, built once in a sandbox of its own (:func:`_font_list`);
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

import hashlib
import importlib.metadata
import io
import json
import logging
import os
import queue
import secrets
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

from . import cgroup, fork_server, wire, zygote
from .isolation import container_plan, current_isolation
# Limits, limits_for, parse_size and build_library live in their own modules; this module
# enforces the limits and mounts the library, and they stay importable from here too.
from .library import AUTOGRADER_DIR, build_library
from .limits import Limits, limits_for, parse_size

__all__ = [
    "Limits",
    "RunOutcome",
    "limits_for",
    "parse_size",
    "bwrap_path",
    "build_library",
    "run_job",
    "check_sandbox",
    "shares_library",
    "case_frame",
    "forks_runs",
    "SANDBOX_JOB_DIR",
    "SANDBOX_LIB_DIR",
]

log = logging.getLogger(__name__)

# Where the job and the library appear inside the sandbox.
SANDBOX_JOB_DIR = "/job"
SANDBOX_LIB_DIR = "/lib-grading"



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
        forked: the library's fork-server made the run (:mod:`autograder.fork_server`)
            instead of a fresh interpreter.
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
    forked: bool = False


# --------------------------------------------------------------------------- matplotlib's font list

# Every chapter's setup cell imports matplotlib, whose first import in a fresh config
# folder (the run's private /tmp/matplotlib) searches the system's fonts and writes
# their list there: about 0.3 CPU s of every sandbox start. The list is built once, in a
# sandbox of its own (so it is exactly the list a run would build), kept in the
# grader's cache folder, keyed by the interpreter, matplotlib's version and the font
# folders' modification times, and mounted read-only in every run, where matplotlib
# reads it instead. Nothing of a submission is in it; where it cannot be built, runs
# build their own as before.
_FONT_LIST_SCRIPT = "build_font_list.py"
_FONT_DIRS = ("/usr/share/fonts", "/usr/local/share/fonts", "/usr/X11R6/lib/X11/fonts", "/usr/X11/lib/X11/fonts",
              "/etc/fonts")
_SANDBOX_MPLCONFIGDIR = "/tmp/matplotlib"  # _environment's MPLCONFIGDIR
_font_lists: dict[str, Path | None] = {}  # key -> the built list (None: it could not be built)
_font_lock = threading.Lock()


def _font_list_key() -> str | None:
    """What a built font list depends on, hashed; ``None`` without matplotlib."""
    try:
        version = importlib.metadata.version("matplotlib")
    except importlib.metadata.PackageNotFoundError:
        return None
    stamps = []
    for root in _FONT_DIRS:
        for folder, _, _ in os.walk(root):
            try:
                stamps.append((folder, os.stat(folder).st_mtime_ns))
            except OSError:
                continue
    identity = [os.path.realpath(sys.executable), sys.prefix, version, os.geteuid(), stamps]
    return hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:24]


def _font_list_folder() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "transformer-book-autograder" / "matplotlib-fonts"


def _build_font_list(dest: Path) -> Path:
    """Run matplotlib's font search in a sandbox (the runs' view of the fonts, their
    environment) and keep the list it writes as ``dest/<its name>``."""
    with tempfile.TemporaryDirectory(prefix="autograder-fonts-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        lib, job = root / "lib", root / "job"
        lib.mkdir()
        job.mkdir()
        # The run's own writable /job/out (the file-result mode) instead of /tmp/matplotlib.
        (lib / _FONT_LIST_SCRIPT).write_text(
            "import os\nos.environ['MPLCONFIGDIR'] = '/job/out'\nimport matplotlib.font_manager\n", encoding="utf-8")
        outcome = run_job(job, lib, Limits(wall_seconds=120.0), result_pipe=False, script=_FONT_LIST_SCRIPT,
                          isolation="bubblewrap")
        built = sorted((job / "out").glob("fontlist-*.json"))
        if outcome.returncode != 0 or len(built) != 1:
            raise RuntimeError(f"matplotlib wrote no font list (exit {outcome.returncode}): "
                               + (outcome.stderr.strip().splitlines() or [""])[-1])
        dest.mkdir(parents=True, exist_ok=True)
        temporary = dest / f".{built[0].name}.{os.getpid()}"
        shutil.copyfile(built[0], temporary)
        temporary.chmod(0o644)
        os.replace(temporary, dest / built[0].name)  # whole, whoever else builds it at once
        return dest / built[0].name


def _font_list() -> Path | None:
    """The font list every bubblewrap run mounts (built on first use), or ``None``."""
    key = _font_list_key()
    if key is None:
        return None
    with _font_lock:
        if key in _font_lists and (_font_lists[key] is None or _font_lists[key].is_file()):
            return _font_lists[key]
        dest = _font_list_folder() / key
        found = sorted(dest.glob("fontlist-*.json")) if dest.is_dir() else []
        try:
            _font_lists[key] = found[0] if len(found) == 1 else _build_font_list(dest)
        except (OSError, RuntimeError) as exc:
            log.info("grading sandbox: each run searches the fonts itself (%s)", exc)
            _font_lists[key] = None
        return _font_lists[key]


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


def _bwrap_args(job_dir: Path | None, lib_dir: Path, limits: Limits, out_on_host: bool = False,
                font_list: Path | None = None) -> list[str]:
    """bubblewrap's arguments. The run's writable ``/job/out`` is a tmpfs of
    ``scratch_bytes`` inside the sandbox (results travel through the result pipe),
    so nothing the run writes — unlinked open files included — reaches the host's
    disk, and its pages count against the run's memory cgroup; only the
    file-result mode (``out_on_host``) binds the host's ``job_dir/out`` instead.
    ``font_list`` (:func:`_font_list`) is mounted read-only in the run's matplotlib
    config folder, a world-writable folder of its private ``/tmp``. Without ``job_dir``:
    the fork-server's wall (:mod:`autograder.fork_server`), empty ``/tmp`` and ``/job``
    folders that each run covers with its own mounts, and the font list staged read-only."""
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
    if job_dir is None:
        # The fork-server's wall (autograder.zygote): each run mounts its own /tmp and /job
        # on these empty folders, and its font list from the read-only stage.
        args += ["--perms", "0755", "--dir", "/tmp", "--perms", "0755", "--dir", zygote.TMP_STAGE]
        if font_list is not None:
            args += ["--ro-bind", str(font_list), f"{zygote.FONT_STAGE}/{font_list.name}"]
    else:
        args += ["--perms", "1777", "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp"]
        if font_list is not None:
            args += ["--perms", "1777", "--dir", _SANDBOX_MPLCONFIGDIR,
                     "--ro-bind", str(font_list), f"{_SANDBOX_MPLCONFIGDIR}/{font_list.name}"]
    made: set[Path] = {Path("/usr"), Path("/etc")}
    for root in _python_roots():
        if root == Path("/usr") or Path("/usr") in root.parents:
            continue
        args += _parents_dirs(root, made) + ["--ro-bind", str(root), str(root)]
    for hook in _editable_hooks():
        args += ["--ro-bind", "/dev/null", str(hook)]
    args += ["--ro-bind", str(lib_dir), SANDBOX_LIB_DIR]
    if job_dir is None:
        return args + ["--perms", "0755", "--dir", SANDBOX_JOB_DIR, "--chdir", "/"]
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
        "MPLCONFIGDIR": _SANDBOX_MPLCONFIGDIR,
        "OMP_NUM_THREADS": "1",  # threads count against RLIMIT_NPROC
        "MKL_NUM_THREADS": "1",
        "TRANSFORMER_BOOK_STATIC": "1",
    }


def _rlimits(limits: Limits) -> dict[str, list[int]]:
    """A run's per-process limits, ``{name: [soft, hard]}`` by ``resource``'s names: what
    ``prlimit`` sets for a fresh start (:func:`_prlimit_args`) and a forked run sets on
    itself (:mod:`autograder.zygote`)."""
    return {"RLIMIT_CPU": [limits.cpu_seconds, limits.cpu_seconds + 2], "RLIMIT_AS": [limits.memory_bytes] * 2,
            "RLIMIT_NPROC": [limits.processes] * 2, "RLIMIT_NOFILE": [limits.open_files] * 2,
            "RLIMIT_FSIZE": [limits.file_bytes] * 2, "RLIMIT_CORE": [0, 0]}


def _prlimit_args(limits: Limits) -> list[str]:
    flags = [f"--{name[len('RLIMIT_'):].lower()}={soft}:{hard}" for name, (soft, hard) in _rlimits(limits).items()]
    return [shutil.which("prlimit") or "/usr/bin/prlimit", *flags, "--"]


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
        forked = _start_forked(job_dir, lib_dir, limits, script, mode, result_pipe, pipe_args, child_fds)
        if forked is not None:
            started = True
            return _Started(forked[0], forked[1], forked[2], None, mode, read_fd, cases_write)
        if mode == "container":
            command, env, cwd, run_uid = _container_command(job_dir, lib_dir, limits, python, pipe_args, script)
        elif sandbox:
            bwrap = bwrap_path()
            if bwrap is None:
                raise RuntimeError("bubblewrap (bwrap) is not installed: install it, or grade with sandbox=False "
                                   "(unsafe)")
            inner = [python, "-s", "-B", f"{SANDBOX_LIB_DIR}/{script}", SANDBOX_JOB_DIR, *pipe_args]
            fonts = None if script == _FONT_LIST_SCRIPT else _font_list()
            command = [bwrap, *_bwrap_args(job_dir, lib_dir, limits, out_on_host=not result_pipe, font_list=fonts)]
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
        group = _run_cgroup(limits)
        if group is not None:
            command = group.wrap(command)
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


def _zygote_command(lib_dir: Path, fonts: Path | None) -> tuple[list[str], dict[str, str]]:
    """bubblewrap's command for a fork-server (:mod:`autograder.fork_server`): the run's wall
    without a job, and the zygote program of the library."""
    command = [bwrap_path(), *_bwrap_args(None, lib_dir, Limits(), font_list=fonts)]
    for key, value in _environment(SANDBOX_LIB_DIR).items():
        command += ["--setenv", key, value]
    command += ["--", os.path.abspath(sys.executable), "-s", "-B", f"{SANDBOX_LIB_DIR}/{fork_server.SCRIPT}"]
    return command, {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def forks_runs(isolation: str | None = None) -> bool:
    """Whether runs here can be made by a fork-server (:mod:`autograder.fork_server`): the
    grader is root and the isolation is bubblewrap (the mode decides whether one is used)."""
    return os.geteuid() == 0 and (isolation or current_isolation()) == "bubblewrap" and bwrap_path() is not None


def _run_cgroup(limits: Limits):
    """The run's memory cgroup (:class:`autograder.cgroup.RunCgroup`) of ``run_memory_bytes``,
    or ``None`` where none can be made (a warning: ``RLIMIT_AS`` alone bounds the run)."""
    if not cgroup.available()[0]:
        return None
    try:
        return cgroup.RunCgroup.create(limits.run_memory_bytes)
    except OSError as exc:
        log.warning("grading sandbox: no memory cgroup for this run (%s)", exc)
        return None


def _start_forked(job_dir: Path, lib_dir: Path, limits: Limits, script: str, mode: str | None, result_pipe: bool,
                  pipe_args: list[str], child_fds: tuple) -> tuple | None:
    """Start the run through the library's fork-server when one serves it
    (:func:`autograder.fork_server.server_for`): ``(run, cgroup, start time)``, or ``None``
    to start it afresh. Runs as root under bubblewrap with the result pipe only (see
    :mod:`autograder.fork_server`); a zygote that fails is not used again. ``pipe_args``
    name the run's ends ``child_fds`` by this process's numbers; the run gets each as
    ``pipe:N`` (N, that number), which the zygote puts at a number of the run's own."""
    if mode != "bubblewrap" or not forks_runs(mode) or not result_pipe or script == _FONT_LIST_SCRIPT:
        return None
    if not (lib_dir / fork_server.SCRIPT).is_file():
        return None
    fonts = _font_list()
    key = (str(lib_dir), str(fonts), os.path.abspath(sys.executable))
    server = fork_server.server_for(key, lambda: _zygote_command(lib_dir, fonts))
    if server is None or limits.memory_bytes < server.vm_bytes + fork_server.HEADROOM_BYTES:
        return None
    pipes = {fd: fd for fd in child_fds}
    args = [f"pipe:{arg}" if arg.isdigit() and int(arg) in pipes else arg for arg in pipe_args]
    group = _run_cgroup(limits)
    start = time.monotonic()
    try:
        run = server.spawn(script=script, args=args, pipes=pipes, job_dir=job_dir, uid=_fresh_uid(),
                           rlimits=_rlimits(limits), tmp_bytes=limits.tmp_bytes, scratch_bytes=limits.scratch_bytes,
                           font_list=fonts.name if fonts is not None else None, group=group)
    except fork_server.ForkServerError as exc:
        fork_server.mark_broken(key, str(exc))
        if group is not None:
            group.remove()
        return None
    return run, group, start


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
        forked=isinstance(proc, fork_server.ZygoteRun),
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


def shares_library(sandbox: bool = True, isolation: str | None = None) -> bool:
    """Whether a run may be given a library folder other runs use too
    (:func:`autograder.library.shared_library`): under bubblewrap, which mounts it
    read-only. A plain subprocess (``sandbox=False``) could write in it, and a
    container-mode run writes ``confine.py`` into its library and gives the folder to its
    own uid (:func:`_container_command`): those get a library of their own."""
    return bool(sandbox) and (isolation or current_isolation()) == "bubblewrap"


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
    sandbox's PID namespace — every process the student started — with it (a forked run:
    its PID namespace's first process, the same)."""
    if isinstance(proc, fork_server.ZygoteRun):
        proc.kill()
        proc.wait()
        return
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
