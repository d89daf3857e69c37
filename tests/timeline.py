"""Where a test run's time went: every test's phases on the worker that ran them.

The controller of a run (the xdist controller, or the one pytest of a run without
``-n``) hands each report it receives to :meth:`Timeline.add`; at the end of the session
:meth:`Timeline.summary` says, per worker, how long it was busy and when it ran out of
work, and which modules took the most seconds; :meth:`Timeline.write` keeps every phase
as JSON (``_build/test-timeline.json``, or ``$TEST_TIMELINE``) so a slow run can be
drawn and compared afterwards. Nothing here decides a verdict: it only reads the
reports' own clocks (``report.start`` and ``report.stop``).

A worker that finished long before the others shows the schedule's tail; the sum of the
busy seconds over the wall, against the CPU seconds the run used (``time make test``),
shows how much of a test's time is spent waiting on subprocesses rather than computing.
"""
from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["Phase", "Timeline", "TIMELINE"]

ROOT = Path(__file__).resolve().parents[1]
#: Where :meth:`Timeline.write` keeps the run's phases.
TIMELINE = Path(os.environ.get("TEST_TIMELINE") or ROOT / "_build" / "test-timeline.json")


@dataclass(frozen=True)
class Phase:
    """One phase (``setup``, ``call`` or ``teardown``) of one test, on one worker.

    Attributes:
        nodeid: the test's node id.
        when: ``"setup"``, ``"call"`` or ``"teardown"``.
        worker: the xdist worker id (``gw0``...), or ``"main"`` without xdist.
        start: when the phase began, seconds since the epoch.
        seconds: how long it took.
    """

    nodeid: str
    when: str
    worker: str
    start: float
    seconds: float

    @property
    def module(self) -> str:
        """The test module the phase belongs to (``tests/x/test_y.py``)."""
        return self.nodeid.split("::", 1)[0]


class Timeline:
    """The phases of one session's tests, as the controller receives them.

    Args:
        started: when the session began (seconds since the epoch); now when not given.
    """

    def __init__(self, started: float | None = None):
        self.started = time.time() if started is None else started
        self.phases: list[Phase] = []

    def add(self, report) -> None:
        """Record one :class:`~_pytest.reports.TestReport` (from any worker)."""
        start, stop = getattr(report, "start", None), getattr(report, "stop", None)
        if start is None or stop is None:
            return
        worker = getattr(report, "worker_id", None) or "main"
        self.phases.append(Phase(report.nodeid, report.when, worker, float(start), float(stop) - float(start)))

    def workers(self) -> dict[str, dict[str, float]]:
        """Per worker: ``busy`` (seconds inside a test phase), ``first`` and ``last`` (seconds
        from the session's start to its first phase's start and its last phase's end)."""
        out: dict[str, dict[str, float]] = {}
        for phase in self.phases:
            row = out.setdefault(phase.worker, {"busy": 0.0, "first": float("inf"), "last": 0.0})
            row["busy"] += phase.seconds
            row["first"] = min(row["first"], phase.start - self.started)
            row["last"] = max(row["last"], phase.start + phase.seconds - self.started)
        return dict(sorted(out.items()))

    def modules(self) -> list[tuple[str, float, str]]:
        """``(module, seconds, worker)`` for every test module, the most seconds first
        (``worker``: the one worker that ran it, or ``"several"``)."""
        seconds: dict[str, float] = defaultdict(float)
        workers: dict[str, set[str]] = defaultdict(set)
        for phase in self.phases:
            seconds[phase.module] += phase.seconds
            workers[phase.module].add(phase.worker)
        return sorted(((m, s, next(iter(workers[m])) if len(workers[m]) == 1 else "several")
                       for m, s in seconds.items()), key=lambda row: -row[1])

    def summary(self, ended: float | None = None, top: int = 12) -> list[str]:
        """The lines the session's summary prints: each worker, then the ``top`` modules."""
        wall = (time.time() if ended is None else ended) - self.started
        lines = [f"wall {wall:.0f} s; busy = inside a test phase, last = when the worker ran out of work"]
        for worker, row in self.workers().items():
            lines.append(f"{worker}: busy {row['busy']:.0f} s ({row['busy'] / wall:.0%} of the wall), "
                         f"first test at {row['first']:.0f} s, last done at {row['last']:.0f} s")
        for module, seconds, worker in self.modules()[:top]:
            lines.append(f"{seconds:8.1f} s  {module}  ({worker})")
        return lines

    def write(self, path: Path = TIMELINE) -> Path:
        """Keep every phase as JSON (``{"started": ..., "phases": [...]}``) at ``path``."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"started": self.started, "phases": [asdict(p) for p in self.phases]}),
                        encoding="utf-8")
        return path
