"""Where a test run's time went: every test's phases on the worker that ran them.

The controller of a run (the xdist controller, or the one pytest of a run without
``-n``) hands each report it receives to :meth:`Timeline.add`; at the end of the session
:meth:`Timeline.summary` says, per worker, how long it was busy and when it ran out of
work, and which modules took the most seconds. Every phase is also appended, as it
arrives, to a JSON-lines file (``_build/test-timeline.jsonl``, or ``$TEST_TIMELINE``), so
a run that was stopped or hangs still shows what each worker last finished, and a slow
run can be drawn and compared afterwards (:func:`read`; ``python tests/timeline.py [FILE]``
prints the summary of a kept file, up to its last phase). Nothing here decides a verdict: it only reads the
reports' own clocks (``report.start`` and ``report.stop``).

A worker that finished long before the others shows the schedule's tail; the sum of the
busy seconds over the wall, against the CPU seconds the run used (``time make test``),
shows how much of a test's time is spent waiting on subprocesses rather than computing.
"""
from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["Phase", "Timeline", "TIMELINE", "read"]

ROOT = Path(__file__).resolve().parents[1]
#: Where a session's phases are kept: a first line ``{"started": ...}``, then one line per phase.
TIMELINE = Path(os.environ.get("TEST_TIMELINE") or ROOT / "_build" / "test-timeline.jsonl")


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
        path: the JSON-lines file each phase is appended to (written afresh); None keeps
            the phases in memory only.
    """

    def __init__(self, started: float | None = None, path: Path | None = None):
        self.started = time.time() if started is None else started
        self.phases: list[Phase] = []
        self.path = path
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"started": self.started}) + "\n", encoding="utf-8")

    def add(self, report) -> None:
        """Record one :class:`~_pytest.reports.TestReport` (from any worker)."""
        start, stop = getattr(report, "start", None), getattr(report, "stop", None)
        if start is None or stop is None:
            return
        worker = getattr(report, "worker_id", None) or "main"
        phase = Phase(report.nodeid, report.when, worker, float(start), float(stop) - float(start))
        self.phases.append(phase)
        if self.path is not None:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(asdict(phase)) + "\n")

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


def read(path: Path = TIMELINE) -> Timeline:
    """The :class:`Timeline` a session kept at ``path`` (a finished run's, or one stopped midway)."""
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not lines or "started" not in lines[0]:
        raise ValueError(f"{path}: not a test timeline (its first line should hold \"started\")")
    timeline = Timeline(started=lines[0]["started"])
    timeline.phases = [Phase(**row) for row in lines[1:]]
    return timeline


if __name__ == "__main__":
    kept = read(Path(sys.argv[1]) if len(sys.argv) > 1 else TIMELINE)
    last = max((p.start + p.seconds for p in kept.phases), default=kept.started)
    print("\n".join(kept.summary(ended=last)))
