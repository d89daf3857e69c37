"""Executing notebooks in the tests: never idle, every run kept with its cell timings, every run counted.

Every test that executes a notebook in a kernel goes through :func:`execute`:

* **Never idle.** nbclient waits for a cell's reply with one poll as long as the cell's
  whole timeout. A reply that has arrived can go unseen by that poll until it runs out:
  a released chapter's run once sat 15 minutes with its kernel idle and no error (the
  same 12-minute stall was seen before on chapters 6 and 10). :class:`SlicedClient`
  waits for the shell reply and for the cell's output in slices of :data:`SLICE_S`
  seconds up to the cell's deadline, so a message that is there is read within a slice.
* **Kept.** The executed notebook, with nbclient's per-cell timestamps
  (``metadata.execution``), is written under :data:`KEPT` (``_build/test-executions/``,
  or ``$TEST_EXECUTIONS_DIR``) even when the run fails or times out, and
  :func:`slowest_cells` names the cells that took the time.
* **The book build too.** The build that ``book_helpers.ensure_book_built`` runs
  (``tests/book/sliced_jupyter_book.py``) executes each chapter through
  :func:`execute_for_jupyter_cache`: the same slices, and the chapter kept under
  ``KEPT/book-build/`` with its cell timings (the cache and the pages get the notebook
  as nbclient writes it).
* **Counted.** Each execution adds a line to the run's ledger (:func:`record`); the
  book build adds one per chapter it executed (``book_helpers.ensure_book_built``), and
  the session's summary prints the executions per chapter (``tests/conftest.py``), so
  "each chapter executes once per ``make test``" is measured, not promised.
"""
from __future__ import annotations

import asyncio
import copy
import json
import os
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from queue import Empty

import nbformat
from nbclient import NotebookClient
from nbclient.client import timestamp
from nbclient.exceptions import CellExecutionComplete, CellTimeoutError
from nbclient.util import ensure_async

__all__ = ["SLICE_S", "KEPT", "LEDGER", "SESSION_ENV", "SlicedClient", "execute", "execute_for_jupyter_cache",
           "cell_seconds", "slowest_cells", "record", "executions", "executions_by_kind", "reset_ledger",
           "start_session"]

ROOT = Path(__file__).resolve().parents[1]
#: Longest single wait on a kernel channel: a reply that has arrived is read within this.
SLICE_S = 0.5
#: Where every executed notebook is kept (with its cell timings), one file per run.
KEPT = Path(os.environ.get("TEST_EXECUTIONS_DIR") or ROOT / "_build" / "test-executions")
#: One JSON line per notebook execution of this test session.
LEDGER = KEPT / "ledger.jsonl"
#: Set by the process that owns the session's ledger; its xdist workers, and any pytest a test
#: starts (``test_container_mode`` runs ``test_cheats.py`` in a pytest of its own), inherit it.
SESSION_ENV = "NOTEBOOK_RUNS_SESSION"


class SlicedClient(NotebookClient):
    """nbclient's :class:`~nbclient.NotebookClient`, waiting on the kernel in short slices.

    Overrides the two waits of ``async_execute_cell`` (the shell reply and the cell's
    output on iopub); the cell's ``timeout`` is unchanged: it is the deadline the slices
    run up to, and past it the cell fails as in nbclient (``CellTimeoutError`` naming the
    cell). Written against nbclient 0.10/0.11 (``requirements.txt`` pins it);
    ``tests/test_notebook_runs.py`` fails if the methods it replaces are renamed.
    """

    async def _async_poll_for_reply(self, msg_id, cell, timeout, task_poll_output_msg, task_poll_kernel_alive):
        deadline = None if timeout is None else time.monotonic() + timeout
        timed_out_reply = None
        while True:
            if timed_out_reply is not None:
                msg = timed_out_reply
                msg["parent_header"] = {"msg_id": msg_id}
            else:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    task_poll_kernel_alive.cancel()
                    await self._async_check_alive()
                    # raises CellTimeoutError, unless interrupt_on_timeout asks for an interrupt
                    timed_out_reply = await self._async_handle_timeout(timeout, cell)
                    deadline = None
                    continue
                wait = SLICE_S if remaining is None else min(SLICE_S, remaining)
                try:
                    msg = await ensure_async(self.kc.shell_channel.get_msg(timeout=wait))
                except Empty:
                    continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if self.record_timing:
                cell["metadata"]["execution"]["shell.execute_reply"] = timestamp(msg)
            try:
                await asyncio.wait_for(task_poll_output_msg, self.iopub_timeout)
            except (asyncio.TimeoutError, Empty):
                if self.raise_on_iopub_timeout:
                    task_poll_kernel_alive.cancel()
                    raise CellTimeoutError.error_from_timeout_and_cell(
                        "Timeout waiting for IOPub output", self.iopub_timeout, cell) from None
                self.log.warning("Timeout waiting for IOPub output")
            task_poll_kernel_alive.cancel()
            return msg

    async def _async_poll_output_msg(self, parent_msg_id, cell, cell_index):
        while True:
            try:
                msg = await ensure_async(self.kc.iopub_channel.get_msg(timeout=SLICE_S))
            except Empty:
                continue
            if msg["parent_header"].get("msg_id") == parent_msg_id:
                try:
                    self.process_message(msg, cell, cell_index)  # raises CellExecutionComplete at the end
                except CellExecutionComplete:
                    return


def cell_seconds(nb) -> list[tuple[int, float]]:
    """``(index, seconds)`` of each executed code cell of ``nb``, from nbclient's timestamps
    (``metadata.execution``: from ``iopub.execute_input`` to ``shell.execute_reply``)."""
    timed = []
    for index, cell in enumerate(nb.cells):
        stamps = cell.get("metadata", {}).get("execution", {})
        start, end = stamps.get("iopub.execute_input"), stamps.get("shell.execute_reply")
        if start and end:
            timed.append((index, (_when(end) - _when(start)).total_seconds()))
    return timed


def _when(stamp) -> datetime:
    return stamp if isinstance(stamp, datetime) else datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))


def slowest_cells(nb, count: int = 3) -> str:
    """The ``count`` slowest code cells of an executed ``nb``, one line each: ``cell 12 (41.2 s): model.fit(...)``."""
    ranked = sorted(cell_seconds(nb), key=lambda pair: -pair[1])[:count]
    return "; ".join(f"cell {i} ({s:.1f} s): {_first_line(nb.cells[i])}" for i, s in ranked) or "no timed cell"


def _first_line(cell) -> str:
    lines = [ln for ln in cell.source.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return (lines[0].strip()[:80] if lines else "(blank)")


def execute(nb, *, label: str, chapter: str | None, kernel_name: str, cwd: Path, timeout: float,
            allow_errors: bool = False):
    """Execute ``nb`` in place with :class:`SlicedClient`; keep it; count it.

    Args:
        nb: the notebook (``nbformat.NotebookNode``), executed in place.
        label: the kept file's name, ``KEPT/<label>.ipynb`` (e.g. ``release-blank/04_self_attention``).
        chapter: the chapter this execution runs (counted in the ledger), or None for a fixture notebook.
        kernel_name: the Jupyter kernel to run it in.
        cwd: the folder the kernel runs in.
        timeout: seconds each cell may take (the deadline the slices run up to).
        allow_errors: record a cell's error as its output and go on (nbclient's ``allow_errors``).

    Returns:
        The executed notebook (``nb``), every code cell carrying ``metadata.execution`` timings.

    Raises:
        nbclient's ``CellExecutionError`` / ``CellTimeoutError`` / ``DeadKernelError``, with a note
        saying where the executed notebook was kept and naming its slowest cells.
    """
    started = time.monotonic()
    client = SlicedClient(nb, kernel_name=kernel_name, timeout=timeout, allow_errors=allow_errors,
                          record_timing=True, resources={"metadata": {"path": str(cwd)}})
    kept = KEPT / f"{label}.ipynb"
    try:
        client.execute()
    except Exception as exc:
        _keep(nb, kept)
        note = f"executed notebook kept at {kept}; slowest cells: {slowest_cells(nb)}"
        if hasattr(exc, "add_note"):  # Python 3.11+: shown under the error by pytest and tracebacks
            exc.add_note(note)
        else:
            exc.args = (f"{exc.args[0] if exc.args else exc}\n{note}", *exc.args[1:])
        raise
    finally:
        record(chapter, label, time.monotonic() - started)
    _keep(nb, kept)
    return nb


def execute_for_jupyter_cache(nb, cwd: str | None = None, km=None, **kwargs):
    """``nbclient.execute`` as jupyter-cache calls it (myst-nb's cached execution), run by
    :class:`SlicedClient` and kept.

    The executed notebook is kept at ``KEPT/book-build/<folder>.ipynb`` (the folder it ran
    in: a chapter's own) with every cell's timings, even when a cell fails or times out.
    ``nb`` itself gets the timings only where ``record_timing`` asks for them, as under
    nbclient: the cache and the built pages are what they were.

    Args:
        nb: the notebook, executed in place.
        cwd: the folder the kernel runs in.
        km: a kernel manager (nbclient's ``km``).
        **kwargs: the other options of :class:`~nbclient.NotebookClient` (``timeout``,
            ``allow_errors``, ``record_timing``, ...).

    Returns:
        ``nb``, executed.
    """
    record_timing = kwargs.pop("record_timing", False)
    timed_before = {i for i, cell in enumerate(nb.cells) if "execution" in cell.get("metadata", {})}
    resources = {"metadata": {"path": cwd}} if cwd is not None else {}
    client = SlicedClient(nb, km=km, resources=resources, record_timing=True, **kwargs)
    try:
        return client.execute()
    finally:
        _keep(copy.deepcopy(nb), KEPT / "book-build" / f"{Path(cwd or os.getcwd()).name}.ipynb")
        if not record_timing:
            for i, cell in enumerate(nb.cells):
                if i not in timed_before:
                    cell.get("metadata", {}).pop("execution", None)


def _keep(nb, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))


def record(chapter: str | None, how: str, seconds: float) -> None:
    """Add one execution to the session's ledger (one JSON line; appends are atomic)."""
    LEDGER.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"chapter": chapter, "how": how, "seconds": round(seconds, 1), "pid": os.getpid()}) + "\n"
    with open(LEDGER, "a", encoding="utf-8") as fh:
        fh.write(line)


def reset_ledger() -> None:
    """Empty the session's ledger."""
    LEDGER.unlink(missing_ok=True)


def start_session() -> bool:
    """Begin the test session's ledger here, unless this process runs inside a session already.

    The outermost pytest (the xdist controller, or a run without xdist) empties the ledger
    and marks the environment (:data:`SESSION_ENV`). A pytest that a test starts inherits
    the mark and leaves the ledger as it is: what it executes is added to the outer
    session's count, which it would otherwise wipe (the container-mode attack suite's
    pytest, started late in ``make test``, emptied the ledger of the whole run, and the
    summary of executions per chapter was never printed).

    Returns:
        True when this process owns the ledger (and prints the session's summary).
    """
    if os.environ.get(SESSION_ENV):
        return False
    os.environ[SESSION_ENV] = str(os.getpid())
    reset_ledger()
    return True


def _chapter_rows() -> list[dict]:
    """The ledger's rows of chapter notebooks (fixture notebooks have no chapter)."""
    if not LEDGER.is_file():
        return []
    rows = [json.loads(line) for line in LEDGER.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [row for row in rows if row["chapter"]]


def executions() -> Counter:
    """Executions per chapter recorded in this session's ledger (fixture notebooks not counted)."""
    return Counter(row["chapter"] for row in _chapter_rows())


def executions_by_kind() -> dict[str, Counter]:
    """Per chapter, its executions by what was executed: ``"book build"`` (the chapter as
    the book runs it) or the label's first part (``"release-blank"``: the student's blank
    notebook, a different notebook, in the student's venv)."""
    kinds: dict[str, Counter] = {}
    for row in _chapter_rows():
        kinds.setdefault(row["chapter"], Counter())[row["how"].split("/", 1)[0]] += 1
    return kinds
