"""One run judged: each cell's verdict from what its run sent back, or from how it died.

:func:`collect` reads a sandbox run's frames (:func:`~autograder.tamper.attribute`,
:func:`~autograder.tamper.decode_report`), judges each cell's results with the
exercise's checks (:func:`~autograder.checks.base.evaluate`) and settles it; a cell whose
run stopped is settled by why it stopped (the memory, time, disk or CPU limit, a crash,
the code ending its own kernel), and the cells after it are handed back to run again in a
fresh sandbox. Every reason is the grader's own words.
"""
from __future__ import annotations

import ast
import signal

from .cells import GradedCell
from .checks.cases import Result
from .checks.scoring import evaluate
from .limits import Limits
from .sandbox import RunOutcome
from .scores import Status
from .stubs import raised_by_stub
from .tamper import Tampered, Withheld, attribute, decode_report, hidden_inputs_before, load_frame
from .untrusted import SourceTooLarge, parse_untrusted
from .withhold import defined_names

__all__ = ["collect"]


def collect(pending: list[GradedCell], outcome: RunOutcome, limits: Limits) -> list[GradedCell]:
    """Judge what one run sent through its result pipe; return the cells to run
    again in a fresh sandbox: those after a cell that took the kernel down, and
    those whose cases were withheld because an earlier cell broke the protocol
    (the cases pipe answers only a runner that keeps to it)."""
    accepted, blamed = attribute(pending, outcome)
    served = {grade_id for _, grade_id in outcome.cases_sent}
    first_break = min(blamed) if blamed else len(pending)
    again: list[GradedCell] = []
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
            report, arrays = load_frame(body, npz)
            cell_error, results = decode_report(report, arrays, g.name,
                                                 withhold=hidden_inputs_before(pending, outcome, at))
        except Tampered as exc:
            g.settle(Status.CHEAT, f"the result of {g.name} was tampered with ({exc})")
            continue
        g.blank_stub = cell_error is None and raised_by_stub(g, report)
        _judge(g, cell_error, results)
    return again


def _judge(g: GradedCell, cell_error: dict | None, results: list[Result]) -> None:
    if cell_error is not None:
        kind, message = cell_error["type"], cell_error["message"]
        if kind == "SystemExit":
            g.settle(Status.CHEAT, "the cell ends the kernel (sys.exit / SystemExit) when it runs")
        elif kind == "SyntaxError" and (where := _syntax_error(g.source)):
            g.settle(Status.ERROR, f"the cell raised SyntaxError when it ran: {where}")
        elif kind == "NameError" and (message.startswith("the cell does not define") or (
                isinstance(message, Withheld) and _lacks(_top_level_names(g.source), g.name))):
            g.settle(Status.ERROR, f"the cell does not define {g.name!r} — keep the def/class line of the exercise")
        elif isinstance(message, Withheld):
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


def _syntax_error(source: str | None) -> str:
    """The grader's own account of the syntax error in ``source`` (parsed here,
    never run, within :data:`~autograder.untrusted.MAX_PARSED_SOURCE`), or ``""`` when it parses."""
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
    ``None`` when the cell is over :data:`~autograder.untrusted.MAX_PARSED_SOURCE` (not parsed here)."""
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
