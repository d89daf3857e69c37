"""One memory cgroup per sandbox run: a hard bound on everything a submission holds.

``RLIMIT_AS`` bounds each process's *mapped* memory, but memory held in
``memfd_create`` files, ``/dev/shm`` or any tmpfs is never mapped and escapes it.
The kernel's memory controller charges those pages to the cgroup of the process
that touched them, so a cgroup per run bounds the run's anonymous, file-backed
and shared memory together, for all its processes at once; past the limit the
kernel's OOM killer ends the run, and the grader reads that it did.

The cgroup also holds every process of the run, so killing its members at the end
leaves nothing behind, whatever sessions or namespaces the processes made.

Both hierarchies are supported: cgroup v1 (``memory.limit_in_bytes``) and v2
(``memory.max``). The run's cgroup is made *inside* the grader's own cgroup, never
beside it, so the grader's own limits still hold. Where neither can be written
(an unprivileged grader on a machine without delegation), :func:`available`
says why once, and grading falls back to ``RLIMIT_AS`` alone.
"""
from __future__ import annotations

import logging
import os
import secrets
import signal
import time
from pathlib import Path

__all__ = ["RunCgroup", "available", "ROOT"]

log = logging.getLogger(__name__)

ROOT = Path("/sys/fs/cgroup")

_PROBE: dict[str, object] = {}


def _own_paths() -> dict[str, str]:
    """The grader's cgroup path per hierarchy: ``{"memory": "/a/b"}`` (v1), ``{"": "/a"}`` (v2)."""
    paths = {}
    try:
        text = Path("/proc/self/cgroup").read_text()
    except OSError:
        return paths
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    return paths


def _parent() -> tuple[str, Path] | tuple[None, str]:
    """``(version, folder)`` where a run's cgroup can be made, or ``(None, why not)``."""
    paths = _own_paths()
    v1 = ROOT / "memory"
    if "memory" in paths and (v1 / "memory.limit_in_bytes").exists():
        return "v1", v1 / paths["memory"].lstrip("/")
    if "" in paths and (ROOT / "cgroup.controllers").exists():
        folder = ROOT / paths[""].lstrip("/")
        try:
            if "memory" in (folder / "cgroup.subtree_control").read_text().split():
                return "v2", folder
        except OSError:
            pass
        return None, "the cgroup v2 memory controller is not delegated to the grader's cgroup"
    return None, "no cgroup memory controller is mounted"


def available() -> tuple[bool, str]:
    """Whether per-run memory cgroups work here (probed once per process), and why not."""
    if "result" not in _PROBE:
        version, where = _parent()
        if version is None:
            _PROBE["result"] = (False, str(where))
        else:
            try:
                probe = RunCgroup.create(64 * 2**20)
                probe.remove()
                _PROBE["result"] = (True, f"cgroup {version} memory controller")
            except OSError as exc:
                _PROBE["result"] = (False, f"cannot make a memory cgroup under {where}: {exc.strerror or exc}")
        ok, why = _PROBE["result"]
        if not ok:
            log.warning("grading sandbox: no memory cgroup (%s); each process is bounded by RLIMIT_AS only, "
                        "which does not count memory held in memfd or tmpfs files", why)
    return _PROBE["result"]  # type: ignore[return-value]


class RunCgroup:
    """The memory cgroup of one run.

    Args:
        version: ``"v1"`` or ``"v2"``.
        path: the cgroup's folder.
    """

    def __init__(self, version: str, path: Path):
        self.version = version
        self.path = path

    @classmethod
    def create(cls, limit_bytes: int) -> "RunCgroup":
        """Make a fresh cgroup limited to ``limit_bytes`` (no swap beyond it).

        Raises:
            OSError: the cgroup cannot be made or limited here.
        """
        version, parent = _parent()
        if version is None:
            raise OSError(str(parent))
        path = Path(parent) / f"autograder-{os.getpid()}-{secrets.token_hex(4)}"
        path.mkdir()
        group = cls(version, path)
        try:
            if version == "v1":
                (path / "memory.limit_in_bytes").write_text(str(int(limit_bytes)))
                swap = path / "memory.memsw.limit_in_bytes"
                if swap.exists():  # memory + swap: the same bound, so nothing spills to swap
                    swap.write_text(str(int(limit_bytes)))
            else:
                (path / "memory.max").write_text(str(int(limit_bytes)))
                swap = path / "memory.swap.max"
                if swap.exists():
                    swap.write_text("0")
        except OSError:
            group.remove()
            raise
        return group

    @property
    def procs_file(self) -> Path:
        return self.path / "cgroup.procs"

    def wrap(self, command: list[str]) -> list[str]:
        """``command`` started inside this cgroup: a shell joins it, then ``exec``s, so
        no process of the run ever exists outside it."""
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.procs_file), *command]

    def _read(self, name: str) -> str:
        try:
            return (self.path / name).read_text()
        except OSError:
            return ""

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of the run for exceeding the limit."""
        text = self._read("memory.oom_control" if self.version == "v1" else "memory.events")
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value) > 0
        if self.version == "v1":  # older kernels: no oom_kill line; the limit was hit and the run died
            return self._read("memory.failcnt").strip() not in ("", "0")
        return False

    def peak_bytes(self) -> int | None:
        """The run's peak memory (v1 and kernels with ``memory.peak``), or ``None``."""
        text = self._read("memory.max_usage_in_bytes" if self.version == "v1" else "memory.peak").strip()
        return int(text) if text.isdigit() else None

    def pids(self) -> list[int]:
        return [int(p) for p in self._read("cgroup.procs").split() if p.isdigit()]

    def kill_all(self, timeout: float = 5.0) -> None:
        """SIGKILL every process of the run, until none is left (or ``timeout``)."""
        deadline = time.monotonic() + timeout
        if self.version == "v2" and (self.path / "cgroup.kill").exists():
            try:
                (self.path / "cgroup.kill").write_text("1")
            except OSError:
                pass
        while True:
            pids = self.pids()
            if not pids or time.monotonic() > deadline:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.02)

    def remove(self) -> None:
        """Kill what is left and remove the cgroup (best effort: never raises)."""
        self.kill_all()
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)
        log.warning("could not remove the run's cgroup %s", self.path)
