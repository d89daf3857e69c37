"""The resource limits of one sandbox run, and the options that set them.

:class:`Limits` bounds a run (wall and CPU time, memory, processes, files, output, the
result pipe); :func:`limits_for` makes them from the grading options (``--timeout``,
``--memory``, ``--disk``, ``--processes``, :class:`autograder.grading.RunSettings`);
:func:`parse_size` reads the sizes those options take. :mod:`autograder.sandbox` enforces them.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

__all__ = ["Limits", "limits_for", "parse_size", "MiB", "GiB"]

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
