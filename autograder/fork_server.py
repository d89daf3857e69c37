"""The trusted side of the grading fork-server: one zygote per grading process and library.

A sandbox run that starts a fresh interpreter pays for ``import torch`` every time
(about 1.0 of a fresh start's 1.1 CPU s on the project's machine). :class:`ForkServer`
starts :mod:`autograder.zygote` once, inside the same bubblewrap wall as a run, and asks
it for one forked run per :func:`autograder.sandbox.run_job`; each run then builds its own
wall inside that one (new namespaces, fresh writable mounts, its own uid, limits and
memory cgroup: see the zygote's docstring) before a byte of the submission is read.

When a zygote is used (:func:`server_for`):

* ``AUTOGRADER_FORK_SERVER`` is ``auto`` (the default: from the first run on a library
  built to serve every run of the process, :func:`serves_many`, which grading's
  :func:`autograder.library.shared_library` are; from the second run on any other, so a
  library used once never pays for a zygote), ``always`` (from the first run) or ``off``;
* the grader runs as root under bubblewrap (the zygote needs the mounts and the uid
  change bubblewrap itself makes there; an unprivileged grader, the container mode and
  ``sandbox=False`` start every run afresh), with the result pipe;
* the run's address-space limit leaves room above the zygote's own mappings.

A zygote that cannot be started, or a run it cannot set up, is logged once and the run
starts afresh; grading never depends on it.

:class:`ZygoteRun` is the started run as :func:`autograder.sandbox._watch` sees a
``Popen``: ``pid``, ``stdout``, ``stderr``, ``poll``, ``wait``, ``kill`` and a
``returncode`` in bubblewrap's convention (128 + N for a signal).
"""
from __future__ import annotations

import array
import atexit
import json
import logging
import os
import queue
import select
import signal
import socket
import subprocess
import tempfile
import threading
from pathlib import Path

__all__ = ["ForkServer", "ForkServerError", "ZygoteRun", "server_for", "serves_many", "mark_broken", "close_all",
           "MODE_ENV", "SCRIPT"]

log = logging.getLogger(__name__)

MODE_ENV = "AUTOGRADER_FORK_SERVER"
SCRIPT = "zygote.py"
# How long a zygote may take to import torch, and a run to set up its wall.
START_SECONDS = 120.0
SETUP_SECONDS = 60.0
# Zygotes kept per process (each holds an interpreter with torch: ~0.3 GB, mostly shared pages).
KEPT = 4
# Room the run's address-space limit must leave above the zygote's own mappings.
HEADROOM_BYTES = 512 * 2**20


class ForkServerError(RuntimeError):
    """A zygote could not be started or could not set up a run (the run starts afresh)."""


def mode() -> str:
    value = os.environ.get(MODE_ENV, "auto").strip().lower()
    return value if value in ("auto", "always", "off") else "auto"


class _Starter:
    """One long-lived thread that starts every zygote: bubblewrap's ``--die-with-parent``
    ties the sandbox to the *thread* that forked it, and runs are started from short-lived
    threads (the references' sandbox, a class graded in threads)."""

    def __init__(self):
        self.requests: queue.Queue = queue.Queue()
        self.pid = os.getpid()
        threading.Thread(target=self._loop, name="autograder-zygote-starter", daemon=True).start()

    def _loop(self) -> None:
        while True:
            function, answer = self.requests.get()
            try:
                answer.put((True, function()))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                answer.put((False, exc))

    def call(self, function):
        answer: queue.Queue = queue.Queue()
        self.requests.put((function, answer))
        ok, value = answer.get()
        if not ok:
            raise value
        return value


_STARTER: _Starter | None = None
_STARTER_LOCK = threading.Lock()


def _starter() -> _Starter:
    global _STARTER
    with _STARTER_LOCK:
        if _STARTER is None or _STARTER.pid != os.getpid():
            _STARTER = _Starter()
        return _STARTER


class ZygoteRun:
    """A run the zygote forked, as :func:`autograder.sandbox._watch` drives a ``Popen``.

    Attributes:
        pid: the run's first process (its PID namespace's init) as this process sees it.
        stdout, stderr: the read ends of the run's output pipes.
        returncode: ``None`` while it runs; then its exit status, or 128 + N when a
            signal N ended it (bubblewrap's convention).
    """

    def __init__(self, status: socket.socket, pid: int, pidfd: int | None, stdout, stderr):
        self.status = status
        self.pid = pid
        self.pidfd = pidfd
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None

    def _finish(self, raw: int | None) -> None:
        if raw is None:
            self.returncode = 128 + signal.SIGKILL  # it died before it could say how C ended
        elif os.WIFSIGNALED(raw):
            self.returncode = 128 + os.WTERMSIG(raw)
        else:
            self.returncode = os.waitstatus_to_exitcode(raw)
        self.status.close()
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self.status], [], [], 0)[0]:
            self._read_status()
        return self.returncode

    def _read_status(self) -> None:
        try:
            message = self.status.recv(4096)
        except OSError:
            message = b""
        raw = None
        if message:
            try:
                raw = int(json.loads(message)["status"])
            except (ValueError, KeyError, TypeError):
                raw = None
        self._finish(raw)

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self.status], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired("zygote run", timeout)
            self._read_status()
        return self.returncode

    def kill(self) -> None:
        """SIGKILL the run's first process: its PID namespace, every process of the run, dies with it."""
        if self.returncode is not None:
            return
        try:
            if self.pidfd is not None:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            elif self.poll() is None:
                # A kernel without pidfds (before 5.3): by pid, once its status socket says it is
                # still running (a pid freed and reused in between would be hit: pidfds close that gap).
                os.kill(self.pid, signal.SIGKILL)
        except (ProcessLookupError, OSError):
            pass


def _peer_pid(sock: socket.socket, timeout: float) -> int:
    """Read the run's ``pid`` message and the pid the kernel attached to it."""
    sock.settimeout(timeout)
    try:
        message, ancillary, _flags, _addr = sock.recvmsg(16, socket.CMSG_SPACE(12))
    except (socket.timeout, OSError) as exc:
        raise ForkServerError(f"the run did not report its pid: {exc}") from exc
    finally:
        sock.settimeout(None)
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and message == b"pid":
            pid = array.array("i", data[:12])[0]
            if pid > 0:
                return pid
    raise ForkServerError(f"the run's first message was not its pid: {message[:32]!r}")


class ForkServer:
    """A zygote started with ``command`` (bubblewrap's arguments and the zygote's
    ``python -s -B /lib-grading/zygote.py``); the control socket's descriptor is appended."""

    def __init__(self, command: list[str], env: dict[str, str]):
        self.lock = threading.Lock()
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.log = tempfile.TemporaryFile()
        full = [*command, "--control-fd", str(theirs.fileno())]

        def start():
            return subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.log,
                                    env=env, cwd="/", start_new_session=True, pass_fds=(theirs.fileno(),))

        try:
            self.proc = _starter().call(start)
        finally:
            theirs.close()
        self.control.settimeout(START_SECONDS)
        try:
            message = self.control.recv(1 << 16)
        except (socket.timeout, OSError) as exc:
            self.close()
            raise ForkServerError(f"the zygote did not start: {exc}; {self._log_tail()}") from exc
        self.control.settimeout(None)
        ready = json.loads(message) if message else {}
        if not ready.get("ready"):
            tail = self._log_tail()
            self.close()
            raise ForkServerError(f"the zygote did not start: {ready.get('error') or tail}")
        self.vm_bytes = int(ready.get("vm_bytes", 0))

    def _log_tail(self) -> str:
        try:
            self.log.seek(0)
            return self.log.read()[-2000:].decode("utf-8", "replace").strip() or "(no output)"
        except (OSError, ValueError):
            return "(no output)"

    def alive(self) -> bool:
        return self.proc.poll() is None and self.control.fileno() != -1

    def spawn(self, *, script: str, args: list, pipes: dict[int, int], job_dir: Path, uid: int,
              rlimits: dict, tmp_bytes: int, scratch_bytes: int, font_list: str | None,
              group=None) -> ZygoteRun:
        """Start one run; ``pipes`` maps the numbers ``args`` names as ``"pipe:N"`` to this
        process's descriptors (the run's ends, which the caller closes afterwards).
        ``group``: the run's memory cgroup (:class:`autograder.cgroup.RunCgroup`), which its
        first process joins before it mounts or reads anything.

        Raises:
            ForkServerError: the zygote or the run's set-up failed (nothing of the job ran).
        """
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        job_fd = os.open(str(job_dir), os.O_RDONLY | os.O_DIRECTORY)
        names = ["status", "stdout", "stderr", "job", *(f"pipe:{n}" for n in pipes)]
        fds = [theirs.fileno(), out_w, err_w, job_fd, *pipes.values()]
        request = {"script": script, "args": args, "fds": names, "uid": uid, "limits": rlimits,
                   "tmp_bytes": tmp_bytes, "scratch_bytes": scratch_bytes, "font_list": font_list}
        pidfd = pid = None
        try:
            with self.lock:
                try:
                    self.control.sendmsg([json.dumps(request).encode()],
                                         [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
                    self.control.settimeout(SETUP_SECONDS)
                    answer = json.loads(self.control.recv(1 << 16) or b"{}")
                except (OSError, ValueError) as exc:
                    raise ForkServerError(f"the zygote did not answer: {exc}") from exc
                finally:
                    if self.control.fileno() != -1:
                        self.control.settimeout(None)
            if "forked" not in answer:
                raise ForkServerError(f"the zygote refused the run: {answer.get('error', answer)}")
            theirs.close()
            for fd in (out_w, err_w, job_fd):
                os.close(fd)
            out_w = err_w = job_fd = None
            pid = _peer_pid(ours, SETUP_SECONDS)
            try:
                pidfd = os.pidfd_open(pid)
            except (AttributeError, OSError):
                pidfd = None  # before Linux 5.3: kill() by pid (see ZygoteRun.kill)
            if group is not None:
                try:
                    group.procs_file.write_text(str(pid))
                except OSError as exc:
                    raise ForkServerError(f"the run could not join its memory cgroup: {exc}") from exc
            ours.send(b"go")
            ours.settimeout(SETUP_SECONDS)
            try:
                ready = json.loads(ours.recv(4096) or b"{}")
            except (socket.timeout, OSError, ValueError) as exc:
                raise ForkServerError(f"the run's wall was not set up: {exc}") from exc
            ours.settimeout(None)
            if not ready.get("ready"):
                raise ForkServerError(ready.get("error") or "the run's wall was not set up")
        except BaseException as exc:
            if pidfd is not None:
                try:
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                except OSError:
                    pass
                os.close(pidfd)
            elif pid is not None:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            for fd in (out_r, err_r, out_w, err_w, job_fd):
                if fd is not None:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            theirs.close()
            ours.close()
            if isinstance(exc, OSError):
                raise ForkServerError(f"the run could not be started: {exc}") from exc
            raise
        return ZygoteRun(ours, pid, pidfd, os.fdopen(out_r, "rb"), os.fdopen(err_r, "rb"))

    def close(self) -> None:
        """Stop the zygote (it exits when its control socket closes) and wait for it."""
        try:
            self.control.close()
        except OSError:
            pass
        proc = getattr(self, "proc", None)
        if proc is not None and proc.pid and proc.poll() is None:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.log.close()


_SERVERS: dict[tuple, ForkServer] = {}
_USES: dict[tuple, int] = {}
_MANY: set[str] = set()
_BROKEN: set[tuple] = set()
_LOCK = threading.Lock()
_PID = os.getpid()


def _forget_after_fork() -> None:
    """A forked process (a pool's worker) starts its own zygotes and never talks to its parent's."""
    global _PID
    for server in _SERVERS.values():
        try:
            server.control.close()
        except OSError:
            pass
    _SERVERS.clear()
    _USES.clear()
    _BROKEN.clear()
    _PID = os.getpid()


os.register_at_fork(after_in_child=_forget_after_fork)


def serves_many(lib_dir) -> None:
    """Say that the library at ``lib_dir`` serves every run of this process (a class's,
    a submission's regrades): under ``auto`` its zygote starts with its first run. A forked
    child keeps the hint."""
    with _LOCK:
        _MANY.add(str(lib_dir))


def server_for(key: tuple, make_command) -> ForkServer | None:
    """The zygote for ``key`` (the library and what its wall mounts), started by
    ``make_command()`` -> ``(command, env)`` when the mode calls for one; ``None``: start
    the run afresh."""
    chosen = mode()
    if chosen == "off":
        return None
    with _LOCK:
        if key in _BROKEN:
            return None
        server = _SERVERS.get(key)
        if server is not None and server.alive():
            _SERVERS[key] = _SERVERS.pop(key)  # most recently used last
            return server
        if server is not None:
            _SERVERS.pop(key).close()
        _USES[key] = _USES.get(key, 0) + 1
        if chosen == "auto" and _USES[key] < (1 if key[0] in _MANY else 2):
            return None
        try:
            command, env = make_command()
            server = ForkServer(command, env)
        except (ForkServerError, OSError) as exc:
            log.warning("grading sandbox: no fork-server for %s (%s); runs start afresh", key[0], exc)
            _BROKEN.add(key)
            return None
        _SERVERS[key] = server
        while len(_SERVERS) > KEPT:
            _SERVERS.pop(next(iter(_SERVERS))).close()
        return server


def mark_broken(key: tuple, why: str) -> None:
    """A run the zygote of ``key`` could not set up: stop using it in this process."""
    with _LOCK:
        log.warning("grading sandbox: the fork-server for %s failed (%s); runs start afresh", key[0], why)
        _BROKEN.add(key)
        server = _SERVERS.pop(key, None)
    if server is not None:
        server.close()


def close_all() -> None:
    with _LOCK:
        servers = list(_SERVERS.values())
        _SERVERS.clear()
    for server in servers:
        server.close()


atexit.register(close_all)
