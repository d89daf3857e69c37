"""A sandbox run of a submission's cells: the job folder, its cases, the time budget.

:func:`write_job` writes what the sandbox may read (the setup and the cells' source)
and returns each cell's cases for the cases pipe, never the job folder; :class:`Budget`
runs the jobs of one submission within its wall-clock budget over all of them.
"""
from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path

from .cells import GradedCell
from .limits import Limits
from .sandbox import RunOutcome, case_frame, run_job

__all__ = ["write_job", "Budget"]


def write_job(job_dir: Path, setup: list[str], pending: list[GradedCell],
               context: list[dict] = ()) -> list[tuple[str, bytes]]:
    """Write a job: the setup, then ``context`` cells (``{"exercise", "source"}``: only
    executed; ``{"exercise", "reference": "function" | "class"}``: the name bound to the
    reference's stand-in, :class:`autograder.runner.Reference` or
    :func:`autograder.runner.module_stand_in`), then the ``pending`` cells, each
    followed by its cases.

    Returns the cases as ``(grade_id, frame bytes)`` per pending cell, for the
    cases pipe (:func:`autograder.sandbox.run_job`): they are never written to
    the job folder, which the sandbox can read.
    """
    job_dir.mkdir(parents=True)
    (job_dir / "out").mkdir()
    job = {
        "setup": setup,
        "cells": [{"context": True, **cell} for cell in context]
        + [{"grade_id": g.name, "exercise": g.name, "source": g.source} for g in pending],
    }
    (job_dir / "job.json").write_text(json.dumps(job), encoding="utf-8")
    bundles = []
    for g in pending:
        arrays: dict = {}
        specs = [case.to_spec(g.exercise.kind, arrays) for case in g.cases]
        bundles.append((g.name, case_frame(g.name, specs, arrays)))
    return bundles


class Budget:
    """The wall-clock budget of one submission over all its sandbox runs."""

    # A run shorter than this cannot even start Python and torch: not worth starting.
    MIN_RUN_SECONDS = 1.0
    #: The clock the budget is measured with (a test gives it a fake one).
    clock = staticmethod(time.monotonic)

    def __init__(self, seconds: float):
        if not seconds > 0:
            raise ValueError(f"budget must be a positive number of seconds, got {seconds!r}")
        self.total = float(seconds)
        self.used = 0.0

    def limits(self, limits: Limits) -> Limits | None:
        """``limits`` with the wall time cut to what is left, or ``None`` when spent."""
        left = self.total - self.used
        if left < self.MIN_RUN_SECONDS:
            return None
        if left >= limits.wall_seconds:
            return limits
        return dataclasses.replace(limits, wall_seconds=left, cpu_seconds=max(1, math.ceil(left)))

    def run(self, job_dir: Path, lib_dir: Path, limits: Limits, sandbox: bool,
            cases: list[tuple[str, bytes]], reference_fds: tuple[int, int] | None = None) -> RunOutcome:
        start = self.clock()
        try:
            return run_job(job_dir, lib_dir, limits, sandbox=sandbox, cases=cases, reference_fds=reference_fds)
        finally:
            self.used += self.clock() - start

    def spent_reason(self) -> str:
        return (f"not run: the submission used up its time budget of {self.total:g} s in earlier cells "
                "(endless loops?)")
