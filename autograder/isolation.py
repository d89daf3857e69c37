"""Which wall keeps student code apart from the grader: bubblewrap, or the container mode.

``bubblewrap`` (:mod:`autograder.sandbox`) needs user namespaces, or root with
``CAP_SYS_ADMIN``. Inside a container that has neither (Docker's default seccomp
profile, Gradescope, many Kubernetes clusters) it cannot start; the **container mode**
then isolates each run with what a container still offers:

* **a separate user**: as root, the run's processes get a fresh uid and gid
  (``setpriv``: no supplementary groups, no capabilities, ``no_new_privs``), so they
  cannot signal, trace or read the files of the grader or of another run (each run's
  job and library folders are that uid's, mode 0700). Where the interpreter lives in a
  folder only root may enter (a ``/root/.pyenv`` Python), the uid keeps one capability,
  ``CAP_DAC_READ_SEARCH`` (read past file modes), and Landlock alone decides what it reads;
* **Landlock** (:mod:`autograder.confine`, Linux ≥ 5.13; no privilege needed): the
  run reads only the Python installation, the system libraries, its stripped
  ``solutions`` library and its job, and writes only its own output folder —
  not the repository (the reference), the source notebooks, the journal or another
  submission; with ABI ≥ 4 no TCP at all, with ABI ≥ 6 no signal or abstract Unix
  socket out of the run;
* **no network** with ``unshare --net`` where the container permits it (root with
  ``CAP_SYS_ADMIN``), else only Landlock's TCP rule: the engine's own setting must turn
  networking off (Gradescope's "no internet" option, ``docker run --network none``,
  a Kubernetes NetworkPolicy);
* **the same limits** as the sandbox: ``prlimit`` (CPU, address space, processes of
  the fresh uid, open files, file size), the wall-clock kill, a memory cgroup where one
  can be made, and, after the run, every process of its uid killed.

* **an IPC namespace** with ``unshare --ipc`` where permitted, and in every case
  **seccomp** (:func:`autograder.confine.seal`): no Unix socket (no ``connect()`` to a
  pathname socket of the host), no System V shared memory, queue or semaphore and no
  POSIX message queue, so nothing a run makes outlives it or reaches the next run.

What it does not give (listed in the README): no PID or mount namespace (the run
sees the process list and the host's filesystem layout, though it reads only what
Landlock allows; UDP is not closed without the engine), no read-only root outside
Landlock, and without Landlock (or seccomp) no wall at all: then the container mode
refuses to start.

The mode is chosen once per process: ``AUTOGRADER_ISOLATION`` = ``bubblewrap``,
``container`` or ``auto`` (default: bubblewrap where it starts, else container), or
``grade --isolation MODE`` (:func:`set_isolation`, which sets the variable so worker
processes inherit it).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from .confine import abi_version

__all__ = ["MODES", "ENV", "set_isolation", "requested", "choose_isolation", "current_isolation",
           "container_plan", "describe"]

MODES = ("bubblewrap", "container")
ENV = "AUTOGRADER_ISOLATION"
_CHOSEN: dict[str, str] = {}
_PLAN: dict = {}


def requested() -> str:
    """``bubblewrap``, ``container`` or ``auto`` (from ``AUTOGRADER_ISOLATION``)."""
    mode = os.environ.get(ENV, "auto").strip() or "auto"
    if mode not in (*MODES, "auto"):
        raise ValueError(f"{ENV}={mode!r}: expected bubblewrap, container or auto")
    return mode


def set_isolation(mode: str) -> None:
    """Fix the isolation of this process and the processes it starts."""
    if mode not in (*MODES, "auto"):
        raise ValueError(f"isolation {mode!r}: expected bubblewrap, container or auto")
    os.environ[ENV] = mode
    _CHOSEN.clear()


def _bubblewrap_works() -> tuple[bool, str]:
    # The one import against the direction (ARCHITECTURE.md): to choose a wall, start the sandbox once.
    from .sandbox import bwrap_path, check_sandbox

    if bwrap_path() is None:
        return False, "bubblewrap (bwrap) is not installed"
    try:
        check_sandbox(isolation="bubblewrap")
    except (RuntimeError, OSError) as exc:
        return False, str(exc)
    return True, ""


def choose_isolation() -> str:
    """Resolve the requested mode, checking that it starts here (cached per process).

    Returns:
        ``"bubblewrap"`` or ``"container"``. Raises ``RuntimeError`` naming what is
        missing when the requested mode (or, for ``auto``, both) cannot start.
    """
    mode = requested()
    if mode in _CHOSEN:
        return _CHOSEN[mode]
    from .sandbox import check_sandbox  # the declared upward import, as in _bubblewrap_works

    if mode in ("bubblewrap", "auto"):
        ok, why = _bubblewrap_works()
        if ok:
            _CHOSEN[mode] = "bubblewrap"
            return "bubblewrap"
        if mode == "bubblewrap":
            raise RuntimeError(f"the bubblewrap sandbox does not start: {why}")
    check_sandbox(isolation="container")
    _CHOSEN[mode] = "container"
    return "container"


def current_isolation() -> str:
    """The mode a sandboxed run uses now: the requested one, ``auto`` resolved (and checked once)."""
    mode = requested()
    if mode != "auto":
        return mode
    return choose_isolation()


def _reachable_by_others(path: Path) -> bool:
    """Whether a user other than the owner may reach and execute ``path`` (o+x on every folder)."""
    path = Path(path)
    for folder in [*reversed(path.parents)]:
        try:
            if not os.stat(folder).st_mode & 0o001:
                return False
        except OSError:
            return False
    try:
        return bool(os.stat(path).st_mode & 0o001)
    except OSError:
        return False


def _unshare_works(namespace: str) -> bool:
    """Whether ``unshare --<namespace>`` starts a process here (root with ``CAP_SYS_ADMIN``)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    try:
        done = subprocess.run([unshare, f"--{namespace}", "--", "true"], capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def container_plan() -> dict:
    """What the container mode can use on this machine (probed once per process).

    Returns:
        ``{"root", "separate_user", "read_search", "landlock_abi", "unshare_net",
        "unshare_ipc", "no_tcp"}``; ``separate_user``: runs get a fresh uid;
        ``read_search``: that uid keeps ``CAP_DAC_READ_SEARCH`` to reach the interpreter;
        ``unshare_ipc``: each run has its own IPC namespace (else seccomp alone keeps it
        from System V and POSIX queues, :func:`autograder.confine.seal`). Raises ``RuntimeError``
        when the mode would isolate nothing (no Landlock).
    """
    if _PLAN:
        return dict(_PLAN)

    root = os.geteuid() == 0
    abi = abi_version()
    if abi < 1:
        raise RuntimeError("container mode needs Landlock (Linux ≥ 5.13 with landlock among the kernel's LSMs) "
                           "to keep the run from reading the reference and other submissions; this kernel has none")
    python = Path(os.path.realpath(sys.executable))
    reachable = _reachable_by_others(python)
    plan = {
        "root": root,
        "separate_user": root and bool(shutil.which("setpriv")),
        "read_search": root and not reachable,
        "landlock_abi": abi,
        "unshare_net": root and _unshare_works("net"),
        "unshare_ipc": root and _unshare_works("ipc"),
        "no_tcp": abi >= 4,
    }
    _PLAN.update(plan)
    return dict(plan)


def describe(mode: str) -> str:
    """One line saying how student code is isolated (for the console and the results)."""
    if mode == "bubblewrap":
        return ("bubblewrap sandbox: own PID, network, IPC and mount namespaces, read-only system, "
                "a fresh uid, rlimits")
    plan = container_plan()
    user = ("a fresh uid" + (" (with CAP_DAC_READ_SEARCH: the interpreter is in a folder only root enters)"
                             if plan["read_search"] else "")) if plan["separate_user"] else \
        "the grader's own uid (not root: no separate user)"
    net = "unshare --net" if plan["unshare_net"] else (
        "no TCP (Landlock); the engine must turn the rest of networking off" if plan["no_tcp"]
        else "NOT closed here: the engine must turn networking off")
    ipc = "its own IPC namespace, " if plan.get("unshare_ipc") else ""
    return (f"container mode: {user}, Landlock ABI {plan['landlock_abi']} (reads: Python, system, its "
            f"library and job only), network: {net}, {ipc}seccomp (no Unix socket, System V IPC or POSIX "
            f"queue), rlimits")
