"""A submission's executed outputs, for the notebooks nbgrader's formgrader shows.

nbgrader's ``autograde`` executes the whole submitted notebook, so a TA in the
formgrader (and a student in ``generate_feedback``'s page) sees every code
cell with what it printed, displayed or raised. The grader proper executes only
the setup and solution cells, and sends back data, not outputs. This module
executes the submission's code cells once more, for display only: in the same
sandbox and limits as grading (:func:`autograder.sandbox.run_job` running
:mod:`autograder.executor`), never the test cells, with nothing of the checks,
their cases or the reference answers inside. What comes back is untrusted: each
cell's outputs are rebuilt here as nbformat outputs of the kinds a kernel sends
(``stream``, ``display_data``, ``execute_result``, ``error``), text made safe
(:func:`autograder.text.safe_text`), images only as valid base64 PNG/JPEG, HTML
and JavaScript dropped (the formgrader would render them in the TA's browser),
and at most :data:`MAX_CELL_BYTES` per cell. A cell the run did not reach (the
time or memory limit, a crash) says so in an ``error`` output, as nbgrader's
``Execute`` leaves a cell that timed out.
"""
from __future__ import annotations

import base64
import binascii
import json
import shutil
import tempfile
from pathlib import Path

import nbformat
from nbformat.v4 import new_output

from .checks import exercises_of
from .library import AUTOGRADER_DIR, build_library
from .limits import limits_for
from .run_settings import RunSettings
from .sandbox import run_job
from .text import safe_text

__all__ = ["execute_for_display", "MAX_CELL_BYTES", "EXECUTOR"]

EXECUTOR = "executor.py"
# What one cell's outputs may hold once rebuilt (text and images): a cell that
# prints more is cut with a note, as the formgrader's page must stay readable.
MAX_CELL_BYTES = 2 * 2**20
_IMAGES = {"image/png": b"\x89PNG\r\n\x1a\n", "image/jpeg": b"\xff\xd8\xff"}
_TEXTS = ("text/plain", "text/latex", "text/markdown")


def _joined(value) -> str:
    """Text as nbformat stores it (a string or a list of lines); ``ValueError`` otherwise."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = "".join(value)
    if not isinstance(value, str):
        raise ValueError("not text")
    return value


def _line(value) -> str:
    """One line of text, every control character escaped."""
    return safe_text(_joined(value))


def _lines(value) -> str:
    """Text of several lines: its newlines kept, every other control character escaped."""
    return "\n".join(safe_text(line) for line in _joined(value).replace("\r\n", "\n").split("\n"))


def _data(data) -> dict:
    if not isinstance(data, dict):
        raise ValueError("display data is not a mapping")
    kept = {}
    for mime, value in data.items():
        if mime in _TEXTS:
            kept[mime] = _lines(value)
        elif mime in _IMAGES and isinstance(value, str):
            try:
                raw = base64.b64decode(value.encode("ascii"), validate=True)
            except (binascii.Error, UnicodeEncodeError):
                continue
            if raw.startswith(_IMAGES[mime]):
                kept[mime] = value
    return kept


def _output(raw, execution_count: int):
    """One output sent by the executor, rebuilt; ``None`` for one that is not a known kind."""
    if not isinstance(raw, dict):
        return None
    kind = raw.get("output_type")
    try:
        if kind == "stream":
            name = raw.get("name")
            if name not in ("stdout", "stderr"):
                return None
            return new_output("stream", name=name, text=_lines(raw.get("text", "")))
        if kind in ("display_data", "execute_result"):
            data = _data(raw.get("data"))
            if not data:
                return None
            if kind == "display_data":
                return new_output("display_data", data=data, metadata={})
            return new_output("execute_result", data=data, metadata={}, execution_count=execution_count)
        if kind == "error":
            trace = raw.get("traceback", [])
            if not isinstance(trace, list):
                raise ValueError("traceback is not a list")
            return new_output("error", ename=_line(raw.get("ename", "Error"))[:200] or "Error",
                              evalue=_lines(raw.get("evalue", ""))[:2000],
                              traceback=[_lines(line) for line in trace[:200]])
    except ValueError:
        return None
    return None


def _size(output) -> int:
    return len(json.dumps(output))


def _cell_outputs(body: bytes, execution_count: int) -> list:
    """A cell's frame, read as untrusted data, as nbformat outputs within :data:`MAX_CELL_BYTES`."""
    try:
        raw = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return [_stopped("the cell's outputs could not be read")]
    items = raw.get("outputs") if isinstance(raw, dict) else None
    if not isinstance(items, list):
        return [_stopped("the cell's outputs could not be read")]
    outputs, used = [], 0
    for item in items:
        out = _output(item, execution_count)
        if out is None:
            continue
        used += _size(out)
        if used > MAX_CELL_BYTES:
            outputs.append(new_output("stream", name="stderr",
                                      text=f"[more output not shown: over {MAX_CELL_BYTES // 2**20} MB]\n"))
            break
        outputs.append(out)
    return outputs


def _stopped(reason: str):
    return new_output("error", ename="CellNotExecuted", evalue=reason, traceback=[f"CellNotExecuted: {reason}"])


def _why_stopped(outcome) -> str:
    if outcome.timed_out:
        return f"the run reached its time limit of {outcome.wall_seconds:.0f} s here"
    if outcome.memory_exceeded:
        return "the run ran out of memory here"
    if outcome.overflow:
        return "the run wrote more than its disk limit here"
    if outcome.signal is not None:
        return f"the run ended here (signal {outcome.signal})"
    if outcome.returncode not in (None, 0):
        return f"the run ended here (exit status {outcome.returncode})"
    return "the run ended here"


def _withheld(nb: nbformat.NotebookNode, chapter: str) -> set[str]:
    """The contract names whose reference answers the sandbox's library leaves out:
    the notebook's solution cells and the chapter's exercises, as when grading."""
    names = {str(c.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")) for c in nb.cells
             if c.get("metadata", {}).get("nbgrader", {}).get("solution")}
    try:
        names |= {ex.name for ex in exercises_of(chapter)}
    except Exception:  # noqa: BLE001 - not a chapter of this book: its solution cells name what it grades
        pass
    return names - {""}


def execute_for_display(nb: nbformat.NotebookNode, chapter: str, settings: RunSettings = RunSettings(), *,
                        skip: set[int] = frozenset(), isolation: str | None = None) -> int:
    """Execute ``nb``'s code cells in the sandbox and put their outputs in place.

    Args:
        nb: the notebook (the sanitised submission); changed in place.
        chapter: the chapter id (whose answers the sandbox's library withholds).
        settings: the grading run's settings (time, memory, disk, processes, sandbox).
        skip: indices of the cells not to run (the test cells: their outputs are the verdicts).
        isolation: as for :func:`~autograder.sandbox.run_job`.

    Returns:
        The number of cells executed (those with a frame back). Cells that were
        not reached get a ``CellNotExecuted`` error (the first) or no output.
    """
    wanted = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code" and i not in skip]
    for i in wanted:
        nb.cells[i].outputs = []
    if not wanted:
        return 0
    limits = limits_for(settings.timeout, memory=settings.memory, disk=settings.disk, processes=settings.processes)
    scratch = Path(tempfile.mkdtemp(prefix="autograder-display-"))
    try:
        withheld = _withheld(nb, chapter)
        lib_dir = build_library(scratch / "lib", withheld)
        shutil.copyfile(AUTOGRADER_DIR / EXECUTOR, lib_dir / EXECUTOR)
        (lib_dir / EXECUTOR).chmod(0o644)
        job_dir = scratch / "job"
        job_dir.mkdir()
        cells = [{"index": i, "source": _joined(nb.cells[i].source)} for i in wanted]
        (job_dir / "job.json").write_text(json.dumps({"cells": cells, "yours": sorted(withheld)}), encoding="utf-8")
        outcome = run_job(job_dir, lib_dir, limits, sandbox=settings.sandbox, script=EXECUTOR, isolation=isolation)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    got: dict[int, bytes] = {}
    for kind, grade_id, body, _npz in outcome.frames:
        index = grade_id[len("cell"):] if kind == "result" and grade_id.startswith("cell") else ""
        if index.isdigit() and int(index) in wanted and int(index) not in got:
            got[int(index)] = body
    reached = True
    for count, i in enumerate(wanted, start=1):
        cell = nb.cells[i]
        if i in got and reached:
            cell.outputs = _cell_outputs(got[i], count)
            cell.execution_count = count
        elif reached:
            reached = False
            cell.outputs = [_stopped(_why_stopped(outcome))]
    return len(got)
