"""How each submission of a grading run is run and limited: :class:`RunSettings`.

Built once (the CLI builds it from its options, a platform's adapter from its
configuration), handed whole to :func:`autograder.grading.grade_submission` for every
submission and recorded in each journal key (:meth:`RunSettings.options`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .limits import Limits, limits_for

__all__ = ["RunSettings"]


@dataclass(frozen=True)
class RunSettings:
    """How each submission of a grading run is run and limited: built once (the CLI builds
    it from its options) and handed, whole, to every submission and into the journal key.

    Attributes:
        timeout: wall-clock seconds of one sandbox run (``--timeout``), also its CPU time.
        budget: wall-clock seconds of one submission over all its sandbox runs
            (``--budget``); ``None``: twice ``timeout`` (:func:`~autograder.grading.grade_submission`).
        memory, disk, processes: the limits of each run (``--memory``, ``--disk``,
            ``--processes``: bytes of all its memory, bytes of its scratch tmpfs, its
            processes and threads); ``None`` keeps the default of
            :func:`~autograder.limits.limits_for`.
        sandbox: ``False`` runs student code in a plain subprocess (NOT tamper-proof).
        seed: the run's secret base seed of the hidden cases (``--seed-file`` or
            ``AUTOGRADER_SEED``; ``None``: the one kept in the output folder, else a fresh
            one). A secret: ``repr`` leaves it out and :meth:`options` too (a journal key
            holds each submission's own seed, :func:`autograder.journal.submission_seed`).
        limits: the whole :class:`~autograder.limits.Limits` of each run to start from,
            instead of :func:`~autograder.limits.limits_for` ``(timeout)``: its
            ``wall_seconds`` wins over ``timeout``, and ``memory``, ``disk`` and ``processes``
            still apply on top. No command sets it (a test does, for a CPU time or an
            address space the options cannot set); ``None`` leaves the journal key as it was.

    Raises:
        ValueError: a value that is not positive (naming the option), a seed that is not
            a whole number, ``limits`` that are not a ``Limits``.
    """

    timeout: float = 120.0
    budget: float | None = None
    memory: int | None = None
    disk: int | None = None
    processes: int | None = None
    sandbox: bool = True
    seed: int | None = field(default=None, repr=False)
    limits: Limits | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.timeout, (int, float)) and self.timeout > 0):
            raise ValueError(f"timeout must be positive, got {self.timeout!r}")
        if self.budget is not None and not (isinstance(self.budget, (int, float)) and self.budget > 0):
            raise ValueError(f"budget must be positive, got {self.budget!r}")
        for name in ("memory", "disk", "processes"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                unit = "processes" if name == "processes" else "bytes"
                raise ValueError(f"{name} must be a positive whole number ({unit}), got {value!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise ValueError(f"seed must be a whole number, got a {type(self.seed).__name__}")
        if self.limits is not None and not isinstance(self.limits, Limits):
            raise ValueError(f"limits must be a Limits, got a {type(self.limits).__name__}")

    def options(self) -> dict:
        """The settings as entries of a journal key (:func:`autograder.batch.journal_key`):
        ``timeout`` and ``sandbox``, then ``budget``, each limit and ``limits`` only when
        set, so that a journal written without them stays valid."""
        given = {"budget": None if self.budget is None else float(self.budget), "memory": self.memory,
                 "disk": self.disk, "processes": self.processes,
                 "limits": None if self.limits is None else dataclasses.asdict(self.limits)}
        return {"timeout": float(self.timeout), "sandbox": bool(self.sandbox),
                **{name: value for name, value in given.items() if value is not None}}

    def run_limits(self) -> Limits:
        """The :class:`~autograder.limits.Limits` of each sandbox run: :attr:`limits` (else
        :func:`~autograder.limits.limits_for` ``(timeout)``) with ``memory``, ``disk`` and
        ``processes`` applied on top."""
        options = limits_for(self.timeout, memory=self.memory, disk=self.disk, processes=self.processes)
        if self.limits is None:
            return options
        return dataclasses.replace(self.limits, **{
            name: getattr(options, name) for name, given in (
                ("run_memory_bytes", self.memory), ("memory_bytes", self.memory),
                ("scratch_bytes", self.disk), ("processes", self.processes)) if given is not None})
