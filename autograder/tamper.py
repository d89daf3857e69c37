"""What comes back through the result pipe, trusted as data only; forged frames flagged.

How results come back, and why forged ones earn nothing. The runner sends its
results through an inherited pipe (``runner.py --result-fd``), never through
files the student's code could rewrite later: for each cell, in job order, a
``start`` frame before the cell's code runs and one ``result`` frame after its
cases. Once the trusted reader has a frame, nothing in the sandbox can change
it. The student's code shares the runner's process, so it *can* write to the
pipe too (or patch the runner); every frame out of that protocol — a result for
a cell that is not running, a second result, garbage — is dropped and the cell
running at that moment is marked ``cheat`` (:func:`attribute`). No secret (a
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

import builtins
from typing import Any

import numpy as np

from .cells import GradedCell
from .checks.cases import Result
from .checks.exercise import own_code_message
from .sandbox import RunOutcome
from .wire import WireError, check_encoded, load_body

__all__ = ["MAX_RESULT_BYTES", "WITHHELD", "Tampered", "Withheld", "attribute", "hidden_inputs_before",
           "load_frame", "decode_report"]

# Largest result bundle (json + npz, uncompressed) read back from the sandbox.
MAX_RESULT_BYTES = 128 * 2**20


def attribute(pending: list[GradedCell], outcome: RunOutcome
              ) -> tuple[dict[int, tuple[bytes, bytes, int]], dict[int, str]]:
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


def hidden_inputs_before(pending: list[GradedCell], outcome: RunOutcome, frame_index: int) -> bool:
    """Whether any hidden case had entered the sandbox before the frame at
    ``frame_index`` was written: then that frame's text may carry hidden inputs."""
    hidden = {g.name for g in pending if g.hidden}
    return any(at < frame_index and grade_id in hidden for at, grade_id in outcome.cases_sent)


class Tampered(ValueError):
    """A result bundle the runner could not have written."""


def load_frame(body: bytes, npz: bytes) -> tuple[Any, dict]:
    """Decode one result frame (:func:`autograder.wire.load_body` within
    :data:`MAX_RESULT_BYTES`)."""
    try:
        return load_body(body, npz, MAX_RESULT_BYTES)
    except WireError as exc:
        raise Tampered(str(exc)) from None


def _check_encoded(value: Any, arrays: dict) -> None:
    """Admit only what :func:`autograder.wire.encode` produces for results
    (:func:`autograder.wire.check_encoded`)."""
    try:
        check_encoded(value, arrays)
    except WireError as exc:
        raise Tampered(str(exc)) from None


_RESULT_KEYS = {"value", "attrs", "probes", "grads", "args_after", "raised"}


# The placeholder for a submission's own text (an exception's message) that may
# carry hidden inputs.
WITHHELD = "(its message is not shown: hidden inputs were in the sandbox)"


class Withheld(str):
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
    message = _UNREADABLE if phase == "encode" else Withheld(record["message"])
    if phase != "encode" and own_code_message(record):  # Python's words on a slip in the code: names only
        message = str(record["message"])
    return {"type": _exception_name(record["type"]), "message": message, "phase": phase}


def decode_report(report: Any, arrays: dict, grade_id: str, *, withhold: bool = False
                   ) -> tuple[dict | None, list[Result]]:
    """Validate a runner report; return ``(cell_error, results)``.

    With ``withhold`` (hidden inputs had entered the sandbox before the report was
    written), every exception record keeps only what the grader can vouch for:
    a known class name, the phase and, for the checks' hints, ``in`` tests on
    the message (:class:`Withheld`); never the submission's text, which could
    spell out the hidden inputs.
    """
    if not isinstance(report, dict) or report.get("grade_id") != grade_id:
        raise Tampered("a result bundle for another exercise")
    cell_error = report.get("cell_error")
    if cell_error is not None and not (
        isinstance(cell_error, dict) and isinstance(cell_error.get("type"), str) and isinstance(cell_error.get("message"), str)
    ):
        raise Tampered("a malformed cell error")
    if cell_error is not None:
        cell_error = _withhold(cell_error) if withhold else {"type": cell_error["type"],
                                                              "message": cell_error["message"]}
    cases = report.get("cases")
    if not isinstance(cases, list):
        raise Tampered("no list of case results")
    results = []
    for case in cases:
        data = case.get("result") if isinstance(case, dict) else None
        if not isinstance(data, dict) or not set(data) <= _RESULT_KEYS:
            raise Tampered("a malformed case result")
        raised = data.get("raised")
        if raised is not None and not (
            isinstance(raised, dict) and isinstance(raised.get("type"), str) and isinstance(raised.get("message"), str)
        ):
            raise Tampered("a malformed exception record")
        for key in ("attrs", "probes", "grads", "args_after"):
            if data.get(key) is not None and not isinstance(data[key], dict):
                raise Tampered(f"a malformed {key} record")
        _check_encoded([data.get("value"), *[v for k in ("attrs", "probes", "grads", "args_after") for v in (data.get(k) or {}).values()]], arrays)
        result = Result.from_encoded(data, arrays)
        if raised is not None and withhold:
            result.raised = _withhold(raised)
        results.append(result)
    return cell_error, results
