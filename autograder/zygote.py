"""The fork-server inside the grading sandbox: import torch once, fork a walled run per request.

A fresh sandbox run starts an interpreter that imports torch (about 1.0 of its 1.1 CPU
s). This program runs once per grading process and library,
inside the same bubblewrap wall as a run (:func:`autograder.sandbox._bwrap_args`, without
a job), imports what every run imports, and then forks one run per request of the trusted
side (:mod:`autograder.fork_server`). It never runs student code and never reads a byte
of a submission: a request carries a script name, the run's limits and uid, and open
file descriptors (``SCM_RIGHTS``); the job's files are read by the run itself, after it
has left the zygote, through the job folder's descriptor.

Each run is three processes, made by the zygote's child *A*:

* *A* unshares the mount, PID, IPC, network, UTS and cgroup namespaces and forks *B*;
  it exits at once (threads cannot be made by a process that unshared a PID namespace,
  so nothing of the run is *A*).
* *B*, still root (the zygote's uid) but in namespaces of its own, the first process of
  the new PID namespace, tells the trusted side its pid (``SCM_CREDENTIALS``: the kernel writes it
  as the trusted side sees it), waits until it has been put in the run's memory cgroup,
  mounts a fresh ``/proc``, a fresh ``/tmp`` (keeping what the wall binds below it: an
  interpreter there; with matplotlib's font list, read-only), a fresh ``/job`` holding a
  copy of the job's files (read-only) and its ``/job/out`` tmpfs, makes ``/`` and ``/dev``
  read-only in its own view, says it is ready, and forks *C*. Then it only reaps:
  when *C* ends it sends *C*'s wait status and exits, and the kernel kills whatever else
  is left in the PID namespace.
* *C*, process 2 of the namespace, takes the run's rlimits, the descriptors at fixed
  numbers (stdin ``/dev/null``, stdout, stderr, then the run's pipes), a new session,
  the run's own uid with no groups, no capabilities (bounding and inheritable sets
  emptied) and ``no_new_privs``, closes every other descriptor, and runs the script as
  ``python -s -B /lib-grading/SCRIPT /job ARGS`` would.

So a run shares nothing writable with the zygote or with another run: every writable
mount is its own, its network, IPC and PID namespaces are new, its uid is fresh (its
own ``RLIMIT_NPROC`` budget), and what it changes in memory is its own copy
(copy-on-write pages never flow back). What every run shares with the zygote is what
it reads: the modules imported here, the address-space layout (ASLR once per zygote,
as Android's zygote) and the RNG states, which the runner seeds per case anyway.

Standalone: the standard library only (this file runs from the sandbox's library);
it imports the preloaded modules by name.

Protocol (``SOCK_SEQPACKET``, one message each):

* zygote -> trusted, once: ``{"ready": true, "preloaded": [...], "vm_bytes": N}`` (its
  address space, which every run starts with) or ``{"error": ...}``.
* trusted -> zygote: a JSON request with its descriptors, ``{"script", "args", "fds",
  "uid", "limits", "tmp_bytes", "scratch_bytes", "font_list"}``: ``fds`` names each
  descriptor in arrival order (``status``, ``stdout``, ``stderr``, ``job``, then the
  run's pipes as ``pipe:N``, N being how ``args`` refers to it).
* zygote -> trusted: ``{"forked": pid}`` or ``{"error": ...}``.
* run *B* -> trusted, on the run's own ``status`` socket: ``b"pid"`` (with the kernel's
  credentials); after the trusted side's ``b"go"``, ``{"ready": true}`` once its wall is
  up (or ``{"error": ...}``: then no code of the run has run), and at the end
  ``{"status": N, "cpu": [B's, C's and its children's CPU s]}`` (a raw wait status).
"""
from __future__ import annotations

import array
import ctypes
import fcntl
import json
import os
import re
import resource
import runpy
import socket
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 32, 4096, 8192, 16384, 1 << 18
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 24, 38
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

# Where the zygote's wall puts the job and the font lists (mount points the run covers).
JOB_DIR = "/job"
FONT_STAGE = "/font-lists"
TMP_STAGE = "/tmp-stage"
MPLCONFIGDIR = "/tmp/matplotlib"
# What every run imports before it reads its job: loaded here once.
PRELOAD = ("numpy", "torch")
# The most bytes of job files a run copies into its /job (the trusted side writes them).
MAX_JOB_BYTES = 256 * 2**20

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = (lambda s: None if s is None else s.encode())
    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
           f"mount {target}")


def _read_only(target: str, extra: int = 0) -> None:
    """Make the mount at ``target`` read-only in this mount namespace only (a bind remount)."""
    _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | extra)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_privileges(uid: int) -> None:
    """Become ``uid`` with no groups, no capabilities in any set and ``no_new_privs``
    (what ``setpriv --reuid --regid --clear-groups --inh-caps=-all --bounding-set=-all
    --no-new-privs`` does for a fresh start)."""
    last = int(open("/proc/sys/kernel/cap_last_cap").read())
    for cap in range(last + 1):
        _check(_libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap}")
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)  # empties the permitted and effective sets (no keep-caps)
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")  # and the inheritable one (glibc's wrapper)
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    if os.getuid() != uid or os.geteuid() != uid:
        raise OSError("the run's uid did not take")


def _copy_job(job_fd: int, dest: str) -> None:
    """Copy the job folder's files (below ``job_fd``, an open directory of the trusted
    side's) into ``dest``, skipping ``out``: at most :data:`MAX_JOB_BYTES`."""
    total = 0

    def walk(dir_fd: int, where: str) -> None:
        nonlocal total
        for entry in sorted(os.listdir(dir_fd)):
            if where == dest and entry == "out":
                continue
            st = os.stat(entry, dir_fd=dir_fd, follow_symlinks=False)
            target = os.path.join(where, entry)
            if (st.st_mode & 0o170000) == 0o040000:
                sub = os.open(entry, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
                try:
                    os.mkdir(target, 0o755)
                    walk(sub, target)
                finally:
                    os.close(sub)
            elif (st.st_mode & 0o170000) == 0o100000:
                total += st.st_size
                if total > MAX_JOB_BYTES:
                    raise OSError(f"the job's files exceed {MAX_JOB_BYTES} bytes")
                src = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
                try:
                    with open(target, "wb") as out:
                        while chunk := os.read(src, 1 << 20):
                            out.write(chunk)
                finally:
                    os.close(src)
                os.chmod(target, 0o644)

    walk(job_fd, dest)


def _mount_points() -> list[str]:
    """This mount namespace's mount points (``/proc/self/mountinfo``'s fifth field, unescaped)."""
    points = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as fh:
        for line in fh:
            field = line.split()[4]
            points.append(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field))
    return points


def _fresh_tmp(size: int) -> None:
    """Put a fresh tmpfs of ``size`` bytes on ``/tmp``, keeping what the wall bound below
    ``/tmp`` (an interpreter or a venv that lives there, as a fresh start's bubblewrap binds
    it inside its tmpfs): the tmpfs is made at :data:`TMP_STAGE`, each topmost mount below
    ``/tmp`` is moved into it at the same path (its parent folders root's, 0755, as
    bubblewrap makes them), and then the tmpfs is moved onto ``/tmp``."""
    _mount("tmpfs", TMP_STAGE, "tmpfs", MS_NOSUID | MS_NODEV, f"size={int(size)},mode=1777")
    below = sorted(p for p in _mount_points() if p.startswith("/tmp/"))
    topmost = [p for p in below if not any(p.startswith(q + "/") for q in below if q != p)]
    for point in topmost:
        target = TMP_STAGE + point[len("/tmp"):]
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        if os.path.isdir(point):
            os.makedirs(target, mode=0o755, exist_ok=True)
        else:
            open(target, "wb").close()
        _mount(point, target, None, MS_MOVE)
    _mount(TMP_STAGE, "/tmp", None, MS_MOVE)


def _wall(request: dict, job_fd: int) -> None:
    """*B*'s mounts, in its own mount namespace (see the module docstring)."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _fresh_tmp(int(request["tmp_bytes"]))
    font = request.get("font_list")
    if font:
        os.mkdir(MPLCONFIGDIR, 0o777)
        os.chmod(MPLCONFIGDIR, 0o1777)
        target = os.path.join(MPLCONFIGDIR, os.path.basename(font))
        open(target, "wb").close()
        _mount(os.path.join(FONT_STAGE, os.path.basename(font)), target, None, MS_BIND)
        _read_only(target, MS_NOSUID | MS_NODEV)
    _mount("tmpfs", JOB_DIR, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    _copy_job(job_fd, JOB_DIR)
    out = os.path.join(JOB_DIR, "out")
    os.mkdir(out, 0o755)
    _mount("tmpfs", out, "tmpfs", MS_NOSUID | MS_NODEV, f"size={int(request['scratch_bytes'])},mode=1777")
    _read_only(JOB_DIR, MS_NOSUID | MS_NODEV)
    _read_only("/")
    _read_only("/dev", MS_NOSUID)


def _set_limits(limits: dict) -> None:
    for name, value in limits.items():
        soft, hard = value if isinstance(value, list) else (value, value)
        resource.setrlimit(getattr(resource, name), (int(soft), int(hard)))


def _send(sock: socket.socket, message: dict) -> None:
    try:
        sock.send(json.dumps(message).encode())
    except OSError:
        pass


def _run_b(request: dict, fds: dict) -> int:
    """The run's first process in its PID namespace: set up the wall, fork *C*, reap."""
    status_sock = socket.socket(fileno=fds["status"])
    try:
        status_sock.send(b"pid")  # the trusted side reads our pid from the kernel's credentials
        if status_sock.recv(16) != b"go":
            return 1
        socket.sethostname("sandbox")
        _wall(request, fds["job"])
        status_sock.send(json.dumps({"ready": True}).encode())
    except OSError as exc:
        _send(status_sock, {"error": f"the run's wall: {exc}"})
        return 1
    os.close(fds["job"])
    pid = os.fork()
    if pid == 0:
        try:
            status_sock.close()
            _become_c(request, fds)
        except BaseException as exc:  # noqa: BLE001 - nothing may escape into the zygote's code
            try:
                os.write(2, f"the run could not start: {exc}\n".encode())
            finally:
                os._exit(126)
        return -1  # C: run the script (the caller does)
    for fd in (fds["stdout"], fds["stderr"], *fds["pipes"].values()):
        os.close(fd)
    while True:
        try:
            child, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 1
        if child == pid:
            own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
            _send(status_sock, {"status": status, "cpu": [own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime]})
            return 0


def _become_c(request: dict, fds: dict) -> None:
    """*C* before the script: descriptors, session, limits, uid."""
    os.setsid()
    null = os.open("/dev/null", os.O_RDONLY)
    keep = [("stdin", null), ("stdout", fds["stdout"]), ("stderr", fds["stderr"])]
    keep += [(f"pipe:{n}", fd) for n, fd in sorted(fds["pipes"].items())]
    # Each kept descriptor goes first above the places it and the others will take, then to its place.
    staged = [(name, fcntl.fcntl(fd, fcntl.F_DUPFD, len(keep))) for name, fd in keep]
    numbers: dict[str, int] = {}
    for place, (name, fd) in enumerate(staged):
        os.dup2(fd, place, inheritable=True)
        numbers[name] = place
    os.closerange(len(staged), 1 << 20)
    args = [str(numbers[a]) if isinstance(a, str) and a.startswith("pipe:") else a for a in request["args"]]
    os.chdir("/tmp")
    _set_limits(request["limits"])
    _drop_privileges(int(request["uid"]))
    request["argv"] = [f"{os.environ.get('PYTHONPATH', '/lib-grading')}/{request['script']}", JOB_DIR, *args]


def _run_a(request: dict, fds: dict) -> int:
    """The zygote's child: new namespaces, then *B*."""
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWUTS
                         | CLONE_NEWCGROUP), "unshare")
    pid = os.fork()
    if pid == 0:
        return _run_b(request, fds)
    os._exit(0)


def _receive(control: socket.socket) -> tuple[dict, list[int]] | None:
    fds = array.array("i")
    message, ancillary, _flags, _addr = control.recvmsg(1 << 16, socket.CMSG_SPACE(64 * fds.itemsize))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    if not message:
        for fd in fds:
            os.close(fd)
        return None
    return json.loads(message), list(fds)


def serve(control: socket.socket) -> dict | None:
    """Answer requests until the trusted side closes the socket (returns ``None``); in a
    run's *C*, return its request (the caller runs the script)."""
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:  # the A processes, each gone right after its fork
                pass
        except ChildProcessError:
            pass
        try:
            received = _receive(control)
        except OSError:
            return None  # the trusted side is gone
        except ValueError as exc:
            _send(control, {"error": f"bad request: {exc}"})
            continue
        if received is None:
            return None
        request, fd_list = received
        names = request.get("fds", [])
        if len(names) != len(fd_list):
            for fd in fd_list:
                os.close(fd)
            _send(control, {"error": "the request's descriptors do not match its names"})
            continue
        fds: dict = {"pipes": {}}
        for name, fd in zip(names, fd_list):
            if name.startswith("pipe:"):
                fds["pipes"][int(name[5:])] = fd
            else:
                fds[name] = fd
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            try:
                control.close()
                if _run_a(request, fds) == -1:
                    return request  # C
            except BaseException as exc:  # noqa: BLE001 - a failed run must not become a second zygote
                try:
                    os.write(2, f"zygote child: {exc}\n".encode())
                except OSError:
                    pass
            os._exit(1)
        for fd in fd_list:
            os.close(fd)
        _send(control, {"forked": pid})


def _run_script(request: dict) -> None:
    """Run the script as ``python -s -B SCRIPT /job ARGS`` would, in this process."""
    sys.argv = list(request["argv"])
    sys.path[0] = os.path.dirname(sys.argv[0])
    from runner import exit_now  # the library's runner.py, beside this file

    exit_now(lambda: runpy.run_path(sys.argv[0], run_name="__main__"))


def _vm_bytes() -> int:
    """This process's address space (``VmSize``): every run starts with it mapped."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def main() -> int:
    control = socket.socket(fileno=int(sys.argv[sys.argv.index("--control-fd") + 1]))
    try:
        for name in PRELOAD:
            __import__(name)
    except BaseException as exc:  # noqa: BLE001
        _send(control, {"error": f"preload: {type(exc).__name__}: {exc}"})
        return 1
    _send(control, {"ready": True, "preloaded": list(PRELOAD), "vm_bytes": _vm_bytes()})
    request = serve(control)
    if request is None:
        os._exit(0)  # the zygote held nothing to flush: no teardown of torch (0.4 CPU s)
    _run_script(request)
    return 0


if __name__ == "__main__":
    sys.exit(main())
