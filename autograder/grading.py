"""Grade one submission: run its solution cells in the sandbox, judge outside.

The trusted process (this module) reads the **source** notebook — setup cell,
solution cells, test cells and their points — and takes only the solution cells'
source from the submission, matched by nbgrader ``grade_id``. It makes every
exercise's cases, ships them as data into a sandboxed
:mod:`autograder.runner` (:mod:`autograder.sandbox`), reads the result bundles
back as data and judges them with the same :func:`~autograder.checks.base.evaluate`
as the visible check (ARCHITECTURE.md §4).

How results come back, and why forged ones earn nothing. The runner sends its
results through an inherited pipe (``runner.py --result-fd``), never through
files the student's code could rewrite later: for each cell, in job order, a
``start`` frame before the cell's code runs and one ``result`` frame after its
cases. Once the trusted reader has a frame, nothing in the sandbox can change
it. The student's code shares the runner's process, so it *can* write to the
pipe too (or patch the runner); every frame out of that protocol — a result for
a cell that is not running, a second result, garbage — is dropped and the cell
running at that moment is marked ``cheat`` (:func:`_attribute`). No secret (a
nonce, the descriptor's number) could be hidden from code in the same process,
so we do not pretend to authenticate frames. A result is never trusted as a
*verdict*, only as *data*:

* the expected answers are computed here, from the reference, and never enter the
  sandbox; the ``solutions`` copy there is stripped of this chapter's answers, and
  nothing of the repository is mounted;
* a result is plain JSON plus an ``.npz`` read with ``allow_pickle=False``
  (uncompressed size checked first); :func:`_check_encoded` admits only numbers,
  strings, lists, tuples, dicts and numeric arrays — no objects, no ``__obj__``
  factories (which would run code here), no structured dtypes, no dtype label
  that disagrees with its array;
* the number of results must equal the number of cases, which we made and kept.

So whatever bytes the student's code writes, a case passes only when they hold
the correct output for the hidden inputs — values the student's own code
computed without the reference, which is what the exercise asks for. A result
for a cell *after* the one that was running when the kernel died cannot come
from the runner: it is dropped and that cell re-run in a fresh sandbox.

How the cases go in, and why hidden inputs do not come out. No case is written
to the job folder: each cell's cases travel through a second pipe, sent only in
answer to the runner's ``cases`` request for the cell that is running, in
protocol order (:class:`autograder.sandbox._CaseFeeder`), so code that runs
before a cell's check finds none of its cases. Once hidden cases are in the
sandbox, any text the submission writes may spell them out: every exception
record that arrives after the first hidden case was sent keeps only its class
(when it is Python's or numpy's) and phase, never its message
(:func:`_withhold`); tamper reasons quote nothing the submission sent.
"""
from __future__ import annotations

import ast
import builtins
import copy
import dataclasses
import json
import logging
import math
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .checks import exercises_of, load_all
from .checks.base import (Exercise, Report, Result, charged_once, dependency_note, dependency_unchanged_note, draw_cases,
                          evaluate, get_exercise, make_rng, own_code_message)
from .library import build_library, reference_library, shared_library
from .limits import Limits, limits_for
from .reference_calls import ReferenceCalls
from .sandbox import RunOutcome, case_frame, check_sandbox, run_job, shares_library
from .scores import ExerciseScore, NotebookScores, PartScore, Status, single_line
from .text import safe_text
from .untrusted import NotebookError, SourceTooLarge, one_line, parse_untrusted, read_notebook
from .wire import WireError, check_encoded, load_body
from .withhold import defined_names

__all__ = ["RunSettings", "grade_submission", "chapter_by_exercises"]

log = logging.getLogger(__name__)

# Largest result bundle (json + npz, uncompressed) read back from the sandbox.
MAX_RESULT_BYTES = 128 * 2**20


@dataclass(frozen=True)
class RunSettings:
    """How each submission of a grading run is run and limited: built once (the CLI builds
    it from its options) and handed, whole, to every submission and into the journal key.

    Attributes:
        timeout: wall-clock seconds of one sandbox run (``--timeout``), also its CPU time.
        budget: wall-clock seconds of one submission over all its sandbox runs
            (``--budget``); ``None``: twice ``timeout`` (:func:`grade_submission`).
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


# --------------------------------------------------------------------------- which chapter a notebook holds


def chapter_by_exercises(names: set[str]) -> str | None:
    """The chapter whose registered exercises match most of ``names`` (the exercise ids a
    notebook's cells carry, ``softmax`` for both ``softmax`` and ``test_softmax``); ties go
    to the first chapter id. ``None`` when none matches."""
    votes = Counter(ex.chapter for name, ex in load_all().items() if name in names)
    if not votes:
        return None
    best = max(votes.values())
    return sorted(c for c, n in votes.items() if n == best)[0]


def _exercise_ids(nb: dict) -> set[str]:
    """The exercise ids of a notebook's nbgrader cells (``test_`` taken off a test cell's)."""
    names = set()
    for cell in nb["cells"]:
        grade_id = _nbgrader(cell).get("grade_id")
        if isinstance(grade_id, str):
            names.add(grade_id[len("test_"):] if grade_id.startswith("test_") else grade_id)
    return names


def _wrong_chapter(found: set[str] | None, chapter: str, scores: list[ExerciseScore]) -> str | None:
    """The chapter a submission really holds, when it is another one: none of ``chapter``'s
    exercises was found in it (every score ``missing``) and the exercise ids of its cells
    (``found``, read while grading; ``None``: nothing was read) are another chapter's."""
    if not found or not scores or any(s.status != Status.MISSING for s in scores):
        return None
    real = chapter_by_exercises(found)
    return real if real and real != chapter else None


# --------------------------------------------------------------------------- notebooks


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    if isinstance(src, list) and all(isinstance(s, str) for s in src):
        return "".join(src)
    if isinstance(src, str):
        return src
    raise NotebookError("a cell's source is neither text nor a list of lines")


def _nbgrader(cell: dict) -> dict:
    meta = cell.get("metadata")
    meta = meta.get("nbgrader") if isinstance(meta, dict) else None
    return meta if isinstance(meta, dict) else {}


@dataclass
class _Graded:
    """One graded test cell of the source notebook and what grading found for it."""

    name: str
    grade_id: str
    points: float
    solution_meta: dict
    exercise: Exercise | None = None
    source: str | None = None
    cases: list = field(default_factory=list)
    hidden: bool = False  # the cases carry hidden inputs (fresh, randomised)
    wants: "ReferenceResults | None" = None  # the reference's result of each case
    # every case raised the released stub's NotImplementedError (:func:`_raised_by_stub`)
    blank_stub: bool = False
    # the judgment: student and chapter are filled in when grade_submission hands it over
    result: ExerciseScore | None = None

    def settle(self, status: Status, reason: str = "", passed: bool = False) -> None:
        self.result = ExerciseScore(student="", chapter="", exercise=self.name, grade_id=self.grade_id,
                                    score=float(self.points) if passed else 0.0, max_score=float(self.points),
                                    status=status, reason=one_line(reason))

    def settle_report(self, report: Report) -> None:
        """Settle from a judged report: partial credit by parts."""
        score = float(report.score)
        self.result = ExerciseScore(
            student="", chapter="", exercise=self.name, grade_id=self.grade_id, score=score,
            max_score=float(self.points), status=_status_of(score, report.passed),
            # every missed part's message whole (each is cut at 400 characters, as in ``parts``)
            reason="" if report.passed else one_line(report.reason(), 420 * max(1, len(report.parts))),
            parts=[PartScore(p.name, float(p.score), float(p.points),
                             one_line(p.message) if p.message and not p.earned else "",
                             # the check's own hint, apart from text the answer wrote (report.diagnosis_key)
                             one_line(p.hint) if p.hint and not p.earned else "")
                   for p in report.parts],
            notes=[one_line(n) for n in report.notes] + [one_line("advice (no points): " + a) for a in report.advice],
        )


def _status_of(score: float, passed: bool) -> Status:
    """``passed``, else ``partial`` when some points were earned, else ``failed``."""
    return Status.PASSED if passed else (Status.PARTIAL if score > 0 else Status.FAILED)


def _handed_over(score: ExerciseScore, student: str, chapter: str) -> ExerciseScore:
    """The score of one cell as :func:`grade_submission` returns it: ``student``'s, of
    ``chapter``, every message on one line with single spaces (as the journal keeps it)."""
    return dataclasses.replace(
        score, student=student, chapter=chapter, reason=single_line(score.reason),
        parts=[dataclasses.replace(p, message=single_line(p.message), hint=single_line(p.hint)) for p in score.parts],
        notes=[single_line(n) for n in score.notes])


def _read_source(source_nb: Path) -> tuple[list[str], list[_Graded]]:
    """The setup cell and the graded test cells of the trusted source notebook."""
    nb = read_notebook(source_nb)
    code = [c for c in nb["cells"] if c.get("cell_type") == "code"]
    setup: list[str] = []
    if code and not _nbgrader(code[0]).get("solution") and not _nbgrader(code[0]).get("grade"):
        setup = [_source(code[0])]
    solutions = {
        _nbgrader(c).get("grade_id"): _nbgrader(c) for c in nb["cells"] if _nbgrader(c).get("solution")
    }
    graded = []
    for cell in nb["cells"]:
        meta = _nbgrader(cell)
        grade_id = meta.get("grade_id", "")
        if not meta.get("grade") or meta.get("solution") or not str(grade_id).startswith("test_"):
            continue
        name = grade_id[len("test_"):]
        if name not in solutions:
            raise ValueError(f"{source_nb}: test cell {grade_id!r} has no solution cell {name!r}")
        graded.append(_Graded(name, grade_id, float(meta.get("points", 0) or 0), solutions[name]))
    return setup, graded


def _match_submission(graded: list[_Graded], submission_nb: Path | None) -> set[str] | None:
    """Take each exercise's solution source from the submission, or settle it.

    Returns:
        The exercise ids the submission's cells carry (:func:`_exercise_ids`), or ``None``
        when there is no submission or it cannot be read.
    """
    if submission_nb is None:
        for g in graded:
            g.settle(Status.MISSING, "no submission")
        return None
    try:
        nb = read_notebook(submission_nb)
        by_id: dict[str, list[dict]] = {}
        for cell in nb["cells"]:
            grade_id = _nbgrader(cell).get("grade_id")
            if isinstance(grade_id, str):
                by_id.setdefault(grade_id, []).append(cell)
        found = _exercise_ids(nb)
    except NotebookError as exc:
        for g in graded:
            g.settle(Status.INVALID, f"unreadable submission: {exc}")
        return None
    for g in graded:
        cells = by_id.get(g.name, [])
        if not cells:
            g.settle(Status.MISSING, f"no solution cell with grade_id {g.name!r} (was it deleted?)")
            continue
        if len(cells) > 1:
            g.settle(Status.INVALID, f"{len(cells)} cells have grade_id {g.name!r}: a solution cell was duplicated")
            continue
        cell = cells[0]
        if cell.get("cell_type") != "code":
            g.settle(Status.INVALID, f"the solution cell {g.name!r} was changed into a {cell.get('cell_type')!r} cell")
            continue
        changed = _metadata_change(g.solution_meta, _nbgrader(cell))
        if changed:
            g.settle(Status.INVALID, f"the nbgrader metadata of solution cell {g.name!r} was changed ({changed})")
            continue
        try:
            g.source = _source(cell)
        except NotebookError as exc:
            g.settle(Status.INVALID, f"solution cell {g.name!r}: {exc}")
    return found


def _metadata_change(source: dict, submitted: dict) -> str:
    """What differs in the grading-relevant nbgrader metadata, or ``""``."""
    for key in ("solution", "grade"):
        if bool(source.get(key)) != bool(submitted.get(key)):
            return f"{key}: {json.dumps(submitted.get(key))} instead of {json.dumps(source.get(key, False))}"
    if ("points" in source or "points" in submitted) and source.get("points") != submitted.get("points"):
        return f"points: {json.dumps(submitted.get('points'))} instead of {json.dumps(source.get('points'))}"
    return ""


# --------------------------------------------------------------------------- results


class _Tampered(ValueError):
    """A result bundle the runner could not have written."""


def _load_frame(body: bytes, npz: bytes) -> tuple[Any, dict]:
    """Decode one result frame (:func:`autograder.wire.load_body` within
    :data:`MAX_RESULT_BYTES`)."""
    try:
        return load_body(body, npz, MAX_RESULT_BYTES)
    except WireError as exc:
        raise _Tampered(str(exc)) from None


def _check_encoded(value: Any, arrays: dict) -> None:
    """Admit only what :func:`autograder.wire.encode` produces for results
    (:func:`autograder.wire.check_encoded`)."""
    try:
        check_encoded(value, arrays)
    except WireError as exc:
        raise _Tampered(str(exc)) from None


_RESULT_KEYS = {"value", "attrs", "probes", "grads", "args_after", "raised"}


# The placeholder for a submission's own text (an exception's message) that may
# carry hidden inputs.
WITHHELD = "(its message is not shown: hidden inputs were in the sandbox)"


class _Withheld(str):
    """An exception message that may carry hidden inputs: it prints, formats and
    concatenates as :data:`WITHHELD`, so no check can quote it into feedback by
    accident; only ``word in message`` sees the real text, for the checks' hints
    (``"matmul" in message``), which answer in their own words."""

    def __new__(cls, text: str):
        obj = super().__new__(cls, WITHHELD)
        obj._text = str(text)
        return obj

    def __contains__(self, word) -> bool:
        return str(word) in self._text


def _exception_name(name: str) -> str:
    """An exception's class name as the feedback may show it: a class of Python
    or numpy by its name (the checks compare those), any other — a class the
    submission made, whose name it chose — by a fixed phrase."""
    for namespace in (builtins, np.exceptions):
        cls = getattr(namespace, name, None) if name.isidentifier() else None
        if isinstance(cls, type) and issubclass(cls, BaseException):
            return name
    return "an exception of the answer's own class"


# What the runner says when it cannot send a returned value back (wire.encode),
# in the grader's words: the runner's own message names the value's class.
_UNREADABLE = ("the answer returned a value that cannot cross the sandbox wall: expected numbers, strings, "
               "lists/tuples/dicts, numpy arrays or torch tensors of a sensible size")


def _withhold(record: dict) -> dict:
    """An exception record (``type``, ``message``, ``phase``) with nothing of the
    submission's own text left: for what ran once hidden inputs were in the sandbox."""
    phase = record.get("phase")
    phase = phase if phase in ("decode", "init", "load_state_dict", "probe", "call", "encode", "backward") else "call"
    message = _UNREADABLE if phase == "encode" else _Withheld(record["message"])
    if phase != "encode" and own_code_message(record):  # Python's words on a slip in the code: names only
        message = str(record["message"])
    return {"type": _exception_name(record["type"]), "message": message, "phase": phase}


def _decode_report(report: Any, arrays: dict, grade_id: str, *, withhold: bool = False
                   ) -> tuple[dict | None, list[Result]]:
    """Validate a runner report; return ``(cell_error, results)``.

    With ``withhold`` (hidden inputs had entered the sandbox before the report was
    written), every exception record keeps only what the grader can vouch for:
    a known class name, the phase and, for the checks' hints, ``in`` tests on
    the message (:class:`_Withheld`); never the submission's text, which could
    spell out the hidden inputs.
    """
    if not isinstance(report, dict) or report.get("grade_id") != grade_id:
        raise _Tampered("a result bundle for another exercise")
    cell_error = report.get("cell_error")
    if cell_error is not None and not (
        isinstance(cell_error, dict) and isinstance(cell_error.get("type"), str) and isinstance(cell_error.get("message"), str)
    ):
        raise _Tampered("a malformed cell error")
    if cell_error is not None:
        cell_error = _withhold(cell_error) if withhold else {"type": cell_error["type"],
                                                              "message": cell_error["message"]}
    cases = report.get("cases")
    if not isinstance(cases, list):
        raise _Tampered("no list of case results")
    results = []
    for case in cases:
        data = case.get("result") if isinstance(case, dict) else None
        if not isinstance(data, dict) or not set(data) <= _RESULT_KEYS:
            raise _Tampered("a malformed case result")
        raised = data.get("raised")
        if raised is not None and not (
            isinstance(raised, dict) and isinstance(raised.get("type"), str) and isinstance(raised.get("message"), str)
        ):
            raise _Tampered("a malformed exception record")
        for key in ("attrs", "probes", "grads", "args_after"):
            if data.get(key) is not None and not isinstance(data[key], dict):
                raise _Tampered(f"a malformed {key} record")
        _check_encoded([data.get("value"), *[v for k in ("attrs", "probes", "grads", "args_after") for v in (data.get(k) or {}).values()]], arrays)
        result = Result.from_encoded(data, arrays)
        if raised is not None and withhold:
            result.raised = _withhold(raised)
        results.append(result)
    return cell_error, results


def _judge(g: _Graded, cell_error: dict | None, results: list[Result]) -> None:
    if cell_error is not None:
        kind, message = cell_error["type"], cell_error["message"]
        if kind == "SystemExit":
            g.settle(Status.CHEAT, "the cell ends the kernel (sys.exit / SystemExit) when it runs")
        elif kind == "SyntaxError" and (where := _syntax_error(g.source)):
            g.settle(Status.ERROR, f"the cell raised SyntaxError when it ran: {where}")
        elif kind == "NameError" and (message.startswith("the cell does not define") or (
                isinstance(message, _Withheld) and _lacks(_top_level_names(g.source), g.name))):
            g.settle(Status.ERROR, f"the cell does not define {g.name!r} — keep the def/class line of the exercise")
        elif isinstance(message, _Withheld):
            g.settle(Status.ERROR, f"the cell raised {kind} when it ran (its message is not shown: hidden inputs were in "
                              "the sandbox; run the cell in your notebook to read it)")
        else:
            g.settle(Status.ERROR, f"the cell raised {kind} when it ran: {message}")
        return
    for case, got in zip(g.cases, results):
        if got.raised is not None and got.raised.get("type") == "SystemExit":
            where = f" ({case.label})" if case.label else ""
            g.settle(Status.CHEAT, f"the code calls sys.exit() while being checked{where}")
            return
    try:
        # A hidden set is judged under the checks' one redaction rule: no message
        # quotes a value from (or computed from) the inputs (checks.base.redacting).
        report = evaluate(g.exercise, results, g.cases, g.points, hidden=g.hidden, wants=g.wants)
    except Exception as exc:  # noqa: BLE001 - odd data must not stop the batch
        said = "" if g.hidden else f": {exc}"
        g.settle(Status.FAILED, f"the results could not be judged ({type(exc).__name__}{said})")
        return
    g.settle_report(report)


# --------------------------------------------------------------------------- kernel death

_SELF_INFLICTED = {signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
                   signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM, signal.SIGPIPE}


def _death(outcome: RunOutcome, limits: Limits) -> tuple[Status, str]:
    """``(status, reason)`` for the cell that was running when the runner stopped."""
    if outcome.memory_exceeded:
        return Status.ERROR, (f"used more than {limits.run_memory_bytes / 2**30:g} GiB of memory, the --memory limit "
                         "(counting memory held in files: memfd, /dev/shm, /tmp); the kernel was stopped")
    if outcome.timed_out:
        return Status.TIMEOUT, f"did not finish within {round(limits.wall_seconds, 1):g} s (an endless loop?)"
    if outcome.overflow:
        return Status.ERROR, (f"wrote more than {limits.scratch_bytes / 2**20:.0f} MB of files, the --disk limit; the "
                         "kernel was stopped")
    if outcome.signal is not None:
        try:
            name = signal.Signals(outcome.signal).name
        except ValueError:
            name = f"signal {outcome.signal}"
        if outcome.signal == signal.SIGXCPU:
            return Status.TIMEOUT, f"used more than {limits.cpu_seconds} s of CPU time; the kernel was stopped"
        if outcome.signal == signal.SIGXFSZ:
            return Status.ERROR, f"wrote a file over {limits.file_bytes / 2**20:.0f} MB; the kernel was stopped"
        if outcome.signal == signal.SIGINT or "KeyboardInterrupt" in outcome.stderr:
            return Status.CHEAT, "the kernel was interrupted (KeyboardInterrupt) by the cell's own code"
        if outcome.signal in _SELF_INFLICTED:
            return Status.CHEAT, (f"the kernel was killed ({name}) while running this cell: the code killed its "
                                  "own kernel")
        return Status.ERROR, f"the kernel crashed ({name}) while running this cell"
    if "KeyboardInterrupt" in outcome.stderr:
        return Status.CHEAT, "the kernel was interrupted (KeyboardInterrupt) by the cell's own code"
    # The runner reports every error of a cell's code in the cell's result and never
    # exits on its own before the last cell: an exit with no result, whatever it
    # printed first (a traceback can be faked), is the cell's code ending the kernel.
    # The reason is the grader's own words: nothing the submission wrote.
    return Status.CHEAT, (f"the kernel exited (status {outcome.returncode}) while running this cell, before the "
                     "runner sent its result: the cell's code ended it (os._exit, sys.exit in a thread, a "
                     "closed result pipe)")


# --------------------------------------------------------------------------- grading


def _write_job(job_dir: Path, setup: list[str], pending: list[_Graded],
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


class ReferenceResults:
    """One exercise's cases of one draw and the reference's result of each, each computed
    at most once (on first use) and handed out as a copy: what the judge compares a
    submission's results with (``evaluate(..., wants=...)``), in its first run and in its
    regrades.

    Made here, on the trusted side, from the exercise's case maker and its reference
    alone: nothing of a submission enters it, so one made for a seed serves every
    submission graded with that seed (:func:`reference_results`).

    Args:
        exercise: the registered exercise.
        cases: its cases, as :func:`~autograder.checks.base.draw_cases` drew them.
    """

    def __init__(self, exercise: Exercise, cases: list):
        self.exercise, self._cases = exercise, cases
        self._wants: list[Result | None] = [None] * len(cases)
        self._lock = threading.Lock()
        self.computed = 0  # how many reference results were computed (a test reads it)

    def cases(self) -> list:
        """A copy of the cases (a check may keep what it is given)."""
        return copy.deepcopy(self._cases)

    def __len__(self) -> int:
        return len(self._cases)

    def __getitem__(self, i: int) -> Result:
        with self._lock:
            if self._wants[i] is None:
                self._wants[i] = self.exercise.expected(self._cases[i])
                self.computed += 1
            return copy.deepcopy(self._wants[i])


class _ReferenceCache:
    """:class:`ReferenceResults` by (exercise, reference, hidden set or not, seed), the
    :data:`SIZE` most recently used, for draws that a seed fixes (a seeded hidden set,
    the visible set): a class graded with one seed, or the suite's gradings, draw each
    exercise's cases and run its reference on them once. A fresh draw (``hidden`` without
    a seed) is never kept. The exercise and reference objects are part of the key, so a
    re-registered exercise or another reference never finds another's entry."""

    SIZE = 32

    def __init__(self):
        self._forget()
        os.register_at_fork(after_in_child=self._forget)  # a lock a thread held at the fork

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict = OrderedDict()

    def get(self, exercise: Exercise, hidden: bool, seed: int | None) -> ReferenceResults:
        try:
            reference = exercise.reference()
        except Exception:  # noqa: BLE001 - no reference to key by: judged as before, where it fails per cell
            reference = None
        if (hidden and seed is None) or reference is None:
            return ReferenceResults(exercise, draw_cases(exercise, make_rng(hidden, seed), hidden))
        key = (exercise.name, hidden, seed)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] is exercise and entry[1] is reference:
                self._entries.move_to_end(key)
                return entry[2]
        made = ReferenceResults(exercise, draw_cases(exercise, make_rng(hidden, seed), hidden))
        with self._lock:
            self._entries[key] = (exercise, reference, made)
            self._entries.move_to_end(key)
            while len(self._entries) > self.SIZE:
                self._entries.popitem(last=False)
        return made


_REFERENCES = _ReferenceCache()


def reference_results(exercise: Exercise, hidden: bool, seed: int | None) -> ReferenceResults:
    """The cases of ``exercise`` for ``hidden`` and ``seed`` (:func:`~autograder.checks.base.make_rng`)
    and the reference's result of each, computed once per process for a draw the seed
    fixes (:class:`_ReferenceCache`), afresh for a fresh one."""
    return _REFERENCES.get(exercise, hidden, seed)


def _make_cases(g: _Graded, hidden: bool, seed: int | None) -> None:
    try:
        g.exercise = get_exercise(g.name)
    except ValueError as exc:
        g.settle(Status.ERROR, f"cannot grade: {exc}")
        return
    try:
        # hidden=True: the exercise's full set (its visible cases and the randomised
        # hidden ones, fresh unless seeded); hidden=False: the visible check's set.
        references = reference_results(g.exercise, hidden, seed)
    except Exception as exc:  # noqa: BLE001 - an instructor-side bug, reported per cell
        g.settle(Status.ERROR, f"cannot make the cases of {g.name}: {type(exc).__name__}: {exc}")
        return
    g.cases, g.hidden, g.wants = references.cases(), hidden, references


def grade_submission(
    source_nb: Path,
    submission_nb: Path | None,
    *,
    chapter: str | None = None,
    settings: RunSettings = RunSettings(),
    hidden: bool = True,
    seed: int | None = None,
    scratch_dir: Path | None = None,
    student: str = "",
) -> NotebookScores:
    """Grade one submission against its source notebook, without trusting it.

    Runs the submission's solution cells (only those, matched by ``grade_id``) after
    the source's setup cell in a sandbox (:mod:`autograder.sandbox`), then judges
    the returned data here with the exercises' checks. A cell that kills, hangs or
    crashes the kernel gets 0 and the cells after it are re-run in a fresh sandbox.

    Args:
        source_nb: the instructor's notebook (``book/<id>/<id>.ipynb``): setup,
            solution cells, test cells and their ``points`` come from here.
        submission_nb: the student's notebook, or ``None`` (no submission).
        chapter: the chapter id (default: the source notebook's name); decides which
            modules of ``solutions`` are hidden from the sandbox.
        settings: how it is run and limited, the run's one :class:`RunSettings`, whole:
            ``timeout`` (one sandbox run's wall clock and CPU time); ``budget`` (the
            whole submission's wall clock over all its sandbox runs, default twice the
            run limit: one endless exercise costs one run limit and the others are still
            graded, a submission full of endless exercises never costs more than its
            budget, each run's limit is cut to what is left and the cells left when it
            is spent score 0, "timeout"); ``memory``, ``disk``, ``processes`` (each run's
            limits, :meth:`RunSettings.run_limits`); ``sandbox`` (``False`` runs a plain
            subprocess — NOT tamper-proof).
        hidden: run the hidden cases too (``False``: the visible ones only).
        seed: seed of the hidden cases (default: fresh); fix it to reproduce a grade.
        scratch_dir: where to make the job folders (default: the system temp dir);
            removed afterwards.
        student: the student the scores are of (``""``: nobody's, as for ``check``).

    Returns:
        A :class:`~autograder.scores.NotebookScores`: its ``scores``, one
        :class:`~autograder.scores.ExerciseScore` per graded test cell of the source
        notebook, in notebook order, ``student``'s for ``chapter`` (the typed score every
        view reads, made here where the cell is judged), and its ``wrong_chapter``, the
        chapter the notebook really holds when none of ``chapter``'s exercises was in it
        and its cells are another chapter's. Never raises for a bad submission.

    Raises:
        ValueError: the *source* notebook is not usable (an instructor error).
    """
    source_nb = Path(source_nb)
    chapter = chapter or source_nb.stem
    if not isinstance(settings, RunSettings):
        raise TypeError(f"settings must be a RunSettings, got {type(settings).__name__}")
    budget, sandbox, limits = settings.budget, settings.sandbox, settings.run_limits()
    try:
        setup, graded = _read_source(source_nb)
    except NotebookError as exc:
        raise ValueError(f"{source_nb}: the source notebook is not usable: {exc}") from None
    found = _match_submission(graded, None if submission_nb is None else Path(submission_nb))
    for g in graded:
        if g.result is None:
            _make_cases(g, hidden, seed)
    pending = [g for g in graded if g.result is None]
    if pending and sandbox:
        check_sandbox()
    if pending:
        scratch = Path(tempfile.mkdtemp(prefix="autograder-", dir=scratch_dir))
        try:
            scratch.chmod(0o755)
            names = {g.name for g in graded} | {ex for ex in _chapter_exercises(chapter)}
            # a library mounted read-only serves every submission of the chapter
            shared = shares_library(sandbox)
            lib_dir = shared_library(names) if shared else build_library(scratch / "lib", names)
            clock = _Budget(2.0 * limits.wall_seconds if budget is None else float(budget))
            attempt = 0
            while pending:
                run_limits = clock.limits(limits)
                if run_limits is None:
                    for g in pending:
                        g.settle(Status.TIMEOUT, clock.spent_reason())
                    break
                attempt += 1
                job_dir = scratch / f"job{attempt}"
                bundles = _write_job(job_dir, setup, pending)
                outcome = clock.run(job_dir, lib_dir, run_limits, sandbox, bundles)
                if attempt == 1:
                    _warn_about_setup(source_nb, outcome)
                pending = _collect(pending, outcome, run_limits)
            references_lib = None
            for g, failing in _regrades(graded):
                run_limits = clock.limits(limits)
                if run_limits is None:
                    break  # the first grades stand: a regrade can only add points
                attempt += 1
                if references_lib is None and any(_across_the_wall(d) for d in failing):
                    references_lib = (shared_library(set(), references=True) if shared
                                      else reference_library(scratch / "references-lib"))
                _regrade(g, failing, graded, setup, scratch / f"job{attempt}", lib_dir, run_limits, sandbox,
                         clock, references_lib)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    scores = [_handed_over(g.result, student, chapter) for g in graded]
    return NotebookScores(scores, wrong_chapter=_wrong_chapter(found, chapter, scores))


# --------------------------------------------------------------------------- one mistake charged once


def _falls_short(g: _Graded) -> bool:
    return g.result is None or g.result.score < g.result.max_score


def _regrades(graded: list[_Graded]):
    """Yield ``(cell, failing earlier exercises)`` for each cell that lost points and
    uses (``Exercise.uses``) an earlier exercise of this notebook that fell short
    of full marks. Yielded in notebook order, after the earlier cells' own
    regrades, so "falls short" is each earlier exercise's final grade."""
    for i, g in enumerate(graded):
        if g.exercise is None or g.source is None or g.result is None:
            continue
        if g.result.status not in (Status.FAILED, Status.PARTIAL) or not g.exercise.uses:
            continue
        if g.blank_stub:
            continue  # the released stub raises before it reads any name: a regrade runs it the same
        earlier = {h.name: h for h in graded[:i]}
        failing = [d for d in g.exercise.uses if d in earlier and _falls_short(earlier[d])]
        if failing:
            yield g, failing


# The released stub's raise: ``raise NotImplementedError()`` (or without the call).
def _is_stub_raise(node: ast.stmt) -> bool:
    if not isinstance(node, ast.Raise) or node.cause is not None:
        return False
    exc = node.exc
    if isinstance(exc, ast.Call) and not exc.args and not exc.keywords:
        exc = exc.func
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"


def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        return body[1:]
    return body


_LITERAL_NODES = (ast.Constant, ast.Tuple, ast.List, ast.Set, ast.Dict, ast.UnaryOp, ast.USub, ast.UAdd,
                  ast.expr_context)


def _plain_def(node: ast.FunctionDef) -> bool:
    """A ``def`` whose definition runs no code of the submission's: no decorator, every
    default a literal (``1``, ``-1e-9``, ``("<pad>", "<unk>")``, ``None``)."""
    defaults = [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]
    return not node.decorator_list and all(isinstance(n, _LITERAL_NODES) for d in defaults for n in ast.walk(d))


def _dotted(node: ast.expr) -> bool:
    """A base class written as a name or a dotted name (``nn.Module``): no call."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _stub_entry(source: str | None, name: str, kind: str) -> tuple[str, int] | None:
    """Where the cell ``source`` of exercise ``name`` raises, when it is the released
    blank stub: ``(function, line)`` of its ``raise NotImplementedError()``, else ``None``.

    The stub, as a trusted parse sees it: the cell is one ``def name`` (a function
    exercise) or one ``class name`` (a class exercise, with its ``__init__``), nothing
    else at its top level; that function's body, after its docstring, *starts* with the
    raise; its definition runs none of the submission's code (no decorator, constant
    defaults, a class's bases plain dotted names, its body only a docstring and such
    ``def``s). Called, the function raises before it reads any name: what the names of
    the earlier exercises are bound to cannot change that.
    """
    try:
        tree = parse_untrusted(source or "", "<submission>")
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # SourceTooLarge is a ValueError
        return None
    if len(tree.body) != 1 or getattr(tree.body[0], "name", None) != name:
        return None
    node = tree.body[0]
    if kind == "class":
        if not (isinstance(node, ast.ClassDef) and not node.decorator_list and not node.keywords
                and all(_dotted(b) for b in node.bases)):
            return None
        methods = _without_docstring(node.body)
        if not all(isinstance(m, ast.FunctionDef) and _plain_def(m) for m in methods):
            return None
        inits = [m for m in methods if m.name == "__init__"]
        if len(inits) != 1:
            return None
        function = inits[0]
    elif isinstance(node, ast.FunctionDef) and _plain_def(node):
        function = node
    else:
        return None
    body = _without_docstring(function.body)
    if not body or not _is_stub_raise(body[0]):
        return None
    return function.name, body[0].lineno


_FRAME = re.compile(r'^  File "(?P<file>[^"\n]*)", line (?P<line>\d+), in (?P<function>\S+)$', re.M)


def _raised_by_stub(g: _Graded, report: dict) -> bool:
    """Whether every case of ``g``'s run raised the released stub's ``NotImplementedError``
    in the stub's own frame: the cell is the stub (:func:`_stub_entry`, a trusted parse),
    and each case's traceback ends in the cell's function (``__init__`` of a class, at
    phase ``init``; the function itself, at phase ``call``) at the line of that raise,
    called by the runner itself (``run_case``), not by a dependency or through a
    wrapper. Such a cell cannot earn a point from a regrade (:func:`_regrades`): it
    raises there exactly as here. A traceback is the submission's text, read here only
    to *skip* a regrade, which can only add points: a forged one costs its own cell.
    """
    if g.exercise is None:
        return False
    entry = _stub_entry(g.source, g.name, g.exercise.kind)
    cases = report.get("cases")
    if entry is None or not cases or not isinstance(cases, list):
        return False
    function, line = entry
    phase = "init" if g.exercise.kind == "class" else "call"
    for case in cases:
        raised = case.get("result", {}).get("raised") if isinstance(case, dict) else None
        if not (isinstance(raised, dict) and raised.get("type") == "NotImplementedError"
                and raised.get("phase") == phase and isinstance(raised.get("traceback"), str)):
            return False
        frames = _FRAME.findall(raised["traceback"])
        if len(frames) < 2:
            return False
        (caller_file, _, caller), last = frames[-2], frames[-1]
        if last != (f"<cell {g.name}>", str(line), function):
            return False
        if not (caller_file.endswith("runner.py") and caller == "run_case"):
            return False
    return True


class _Budget:
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


def _across_the_wall(name: str) -> bool:
    """Whether the reference of exercise ``name`` can be called from outside the
    student's process in a regrade (:class:`~autograder.reference_calls.ReferenceCalls`): a
    function exercise whose arguments and results are data (a callable argument, or a
    model whose methods ``greedy_decode`` calls, is called back), or a class exercise,
    whose stand-in holds the reference's parameters as data and runs its modules outside."""
    try:
        exercise = get_exercise(name)
    except ValueError:
        return False
    return exercise.kind in ("function", "class")


def _regrade(g: _Graded, failing: list[str], graded: list[_Graded], setup: list[str], job_dir: Path,
             lib_dir: Path, limits: Limits, sandbox: bool, clock: "_Budget", references_lib: Path | None) -> None:
    """Grade ``g`` again with the references of ``failing`` in place of those
    answers; keep the better grade, with a note that names what was replaced.

    No reference a graded cell can read is in its process (issue 36): a failing
    function or class exercise's name is bound there to a stand-in (a function, or a
    module holding the reference's parameters as data) whose calls run the reference in
    a sandbox of its own (:class:`~autograder.reference_calls.ReferenceCalls`), started before
    the student's run so that its start is not charged to the budget; the regrade is
    judged and reported like any run. Every other earlier answer is the student's own;
    the reference of ``g`` itself is never there. A failing exercise whose reference
    cannot be called across the wall (none is: :func:`_across_the_wall`) is never put
    there as source: the first grade stands, as it does if the references' sandbox does
    not start.
    """
    context: list[dict] = []
    remote = {h for h in failing if _across_the_wall(h)}
    if remote != set(failing):
        return
    for h in graded:
        if h is g:
            break
        if h.name in remote:
            context.append({"exercise": h.name, "reference": h.exercise.kind})
        elif h.source is not None:
            context.append({"exercise": h.name, "source": h.source})
    first = g.result
    bundles = _write_job(job_dir, setup, [g], context)
    if remote:
        with ReferenceCalls(remote, references_lib, job_dir.with_name(job_dir.name + "-references"), limits,
                            sandbox) as calls:
            # The references' start is not charged to the student's budget: the run starts after it.
            if not calls.wait_ready():
                return  # no references: the first grade stands
            outcome = clock.run(job_dir, lib_dir, limits, sandbox, bundles, calls.hand_over())
    else:
        outcome = clock.run(job_dir, lib_dir, limits, sandbox, bundles)
    _collect([g], outcome, limits)
    used = sorted(_names_in(g.source))
    unchanged = dependency_unchanged_note(g.name, used, failing)  # the prompts promise a note either way
    g.result = charged_once(first, g.result, one_line(dependency_note(g.name, used, failing)),
                            one_line(unchanged) if unchanged else None)
    if g.result is not first and g.result.status not in (Status.PASSED, Status.CHEAT):
        g.result.reason = f"{g.result.notes[0]}. {g.result.reason}"  # both one line already, neither cut


def _syntax_error(source: str | None) -> str:
    """The grader's own account of the syntax error in ``source`` (parsed here,
    never run, within :data:`MAX_PARSED_SOURCE`), or ``""`` when it parses."""
    try:
        parse_untrusted(source or "", "<cell>")
    except SourceTooLarge as exc:
        return f"not located: {exc}"
    except SyntaxError as exc:
        return f"{exc.msg} (line {exc.lineno})"
    except (ValueError, RecursionError, MemoryError) as exc:
        return f"the cell cannot be parsed ({type(exc).__name__})"
    return ""


def _top_level_names(source: str | None) -> set[str] | None:
    """Names a cell binds at its top level (trusted parse of untrusted text);
    ``None`` when the cell is over :data:`MAX_PARSED_SOURCE` (not parsed here)."""
    try:
        tree = parse_untrusted(source or "", "<submission>")
    except SourceTooLarge:
        return None
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    names = defined_names(tree)
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def _lacks(names: set[str] | None, name: str) -> bool:
    """Whether a cell's top-level names (:func:`_top_level_names`) surely lack ``name``:
    not when the cell was too large to parse here (``None``)."""
    return names is not None and name not in names


def _names_in(source: str) -> set[str]:
    """Names the student's cell loads (trusted parse of untrusted text, within
    :data:`MAX_PARSED_SOURCE`; an empty set above it)."""
    try:
        tree = parse_untrusted(source, "<submission>")
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # SourceTooLarge is a ValueError
        return set()
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}


def _warn_about_setup(source_nb: Path, outcome: RunOutcome) -> None:
    """Log the source's setup-cell errors (the runner reports them on stderr): an
    import of something stripped for this chapter, say. The instructor should
    know; the student's cells are graded regardless."""
    problems = [line for line in outcome.stderr.splitlines() if line.startswith("setup cell ")]
    if problems:
        log.warning("%s: in the grading sandbox, %s", source_nb, safe_text("; ".join(problems[:3])))


def _chapter_exercises(chapter: str) -> list[str]:
    try:
        return [ex.name for ex in exercises_of(chapter)]
    except Exception:  # noqa: BLE001 - a broken checks module is reported per cell elsewhere
        return []


def _attribute(pending: list[_Graded], outcome: RunOutcome) -> tuple[dict[int, tuple[bytes, bytes, int]], dict[int, str]]:
    """Match the run's frames to cells: ``(accepted results, blamed cells)``.

    The runner sends, for each cell in job order, a ``start`` frame before running
    its code, a ``cases`` request once the cell is defined (answered on the cases
    pipe) and one ``result`` frame after its cases. Anything else — a result or
    request for a cell that is not the one running, a second one, a start out of
    order, garbage — can only come from student code, and is blamed on the cell
    that was running when it arrived (the last genuine ``start``). That cell is
    marked ``cheat``; the forged frame itself is dropped. (A background thread
    left by an earlier cell would get the running cell blamed: all cells belong
    to the same student, so no one else's grade can be touched either way.)
    An accepted result is ``(json bytes, npz bytes, its index in the frames)``.
    The reasons are the grader's words: a forged frame's own grade_id is named
    only when it is one of the job's cells.
    """
    index = {g.name: i for i, g in enumerate(pending)}
    accepted: dict[int, tuple[bytes, bytes, int]] = {}
    asked: set[int] = set()
    blamed: dict[int, str] = {}
    running, next_start = None, 0

    def blame(what: str) -> None:
        culprit = running if running is not None else 0
        blamed.setdefault(culprit, what)

    for n, (kind, grade_id, body, npz) in enumerate(outcome.frames):
        i = index.get(grade_id)
        if kind == "start" and i is not None and i == next_start:
            running, next_start = i, i + 1
        elif kind == "cases" and i is not None and i == running and i not in asked and i not in accepted:
            asked.add(i)
        elif kind == "result" and i is not None and i == running and i not in accepted:
            accepted[i] = (body, npz, n)
        else:
            named = repr(grade_id) if i is not None else "a cell not in this job"
            blame(f"a forged {kind} frame for {named} was sent while this cell ran")
    if outcome.frame_problem:
        blame(f"the result pipe was tampered with while this cell ran ({outcome.frame_problem})")
    return accepted, blamed


def _collect(pending: list[_Graded], outcome: RunOutcome, limits: Limits) -> list[_Graded]:
    """Judge what one run sent through its result pipe; return the cells to run
    again in a fresh sandbox: those after a cell that took the kernel down, and
    those whose cases were withheld because an earlier cell broke the protocol
    (the cases pipe answers only a runner that keeps to it)."""
    accepted, blamed = _attribute(pending, outcome)
    served = {grade_id for _, grade_id in outcome.cases_sent}
    first_break = min(blamed) if blamed else len(pending)
    again: list[_Graded] = []
    for i, g in enumerate(pending):
        if i in blamed:
            g.settle(Status.CHEAT, blamed[i])
            if i not in accepted:
                return again + pending[i + 1:]
            continue
        if i > first_break and g.name not in served:
            again.append(g)  # no cases after the break: graded afresh, without the culprit
            continue
        if i not in accepted:
            status, reason = _death(outcome, limits)
            g.settle(status, reason)
            # The runner stopped in this cell: the cells after it run again in a
            # fresh sandbox, without it.
            return again + pending[i + 1:]
        body, npz, at = accepted[i]
        try:
            report, arrays = _load_frame(body, npz)
            cell_error, results = _decode_report(report, arrays, g.name,
                                                 withhold=_hidden_inputs_before(pending, outcome, at))
        except _Tampered as exc:
            g.settle(Status.CHEAT, f"the result of {g.name} was tampered with ({exc})")
            continue
        g.blank_stub = cell_error is None and _raised_by_stub(g, report)
        _judge(g, cell_error, results)
    return again


def _hidden_inputs_before(pending: list[_Graded], outcome: RunOutcome, frame_index: int) -> bool:
    """Whether any hidden case had entered the sandbox before the frame at
    ``frame_index`` was written: then that frame's text may carry hidden inputs."""
    hidden = {g.name for g in pending if g.hidden}
    return any(at < frame_index and grade_id in hidden for at, grade_id in outcome.cases_sent)
