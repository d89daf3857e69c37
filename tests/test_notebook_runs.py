"""The tests' notebook executions (``tests/notebook_runs.py``) and the ``CI=true`` rule for walls.

* The wait on a kernel is cut in slices: no single poll asks for more than
  ``SLICE_S`` seconds, a reply is taken as soon as a slice sees it, and past the
  cell's deadline the cell fails as under nbclient (``CellTimeoutError``).
* A real execution is kept with its cell timings and counted in the session's ledger;
  a failing one says where it was kept; a pytest that a test starts adds to that ledger
  and never empties it.
* The book build's executions (jupyter-cache's, under ``tests/book/sliced_jupyter_book.py``)
  are sliced and kept with their timings too, and cached as nbclient writes them.
* Under ``CI=true`` a skip through ``walls.cannot_start`` is a failure naming the wall;
  without it, a skip.
"""
from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path
from queue import Empty

import jupyter_cache.executors.utils as jupyter_cache_execution
import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError
from nbformat.v4 import new_code_cell, new_notebook

import notebook_runs
from notebook_runs import SLICE_S, SlicedClient, cell_seconds, execute, slowest_cells

pytest_plugins = ["pytester"]


class _Channel:
    """A kernel channel whose reply arrives after ``empty_polls`` polls, recording each poll's timeout."""

    def __init__(self, reply: dict | None, empty_polls: int):
        self.reply, self.empty_polls, self.timeouts = reply, empty_polls, []

    async def get_msg(self, timeout=None):
        self.timeouts.append(timeout)
        if self.reply is None or len(self.timeouts) <= self.empty_polls:
            await asyncio.sleep(min(timeout, 0.01))  # a slice that sees nothing (shortened: time is not asserted)
            raise Empty
        return self.reply


class _Kernel:
    def __init__(self, channel):
        self.shell_channel = channel

    async def is_alive(self):
        return True


def _poll(client: SlicedClient, timeout: float):
    cell = new_code_cell("x = 1", metadata={"execution": {}})

    async def run():
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)  # the cell's output has all arrived
        alive = asyncio.ensure_future(asyncio.sleep(3600))
        try:
            return await client._async_poll_for_reply("m1", cell, timeout, done, alive)
        finally:
            alive.cancel()

    return asyncio.run(run())


def test_the_client_replaces_the_waits_nbclient_has():
    """The two methods SlicedClient overrides exist in the installed nbclient (a rename would
    otherwise silently bring back the single long poll)."""
    for name in ("_async_poll_for_reply", "_async_poll_output_msg"):
        assert callable(getattr(NotebookClient, name, None)), f"nbclient no longer has {name}: update notebook_runs"


def test_a_reply_is_read_in_short_slices_never_one_long_poll():
    reply = {"parent_header": {"msg_id": "m1"}, "header": {}, "content": {"status": "ok"}}
    channel = _Channel(reply, empty_polls=5)
    client = SlicedClient(new_notebook())
    client.kc = _Kernel(channel)
    got = _poll(client, timeout=900)
    assert got is reply
    assert len(channel.timeouts) == 6, channel.timeouts
    assert max(channel.timeouts) <= SLICE_S, f"a poll asked for {max(channel.timeouts)} s: one long poll again"


def test_a_reply_of_another_message_is_passed_over():
    other = {"parent_header": {"msg_id": "old"}, "header": {}, "content": {}}
    channel = _Channel(other, empty_polls=0)
    client = SlicedClient(new_notebook())
    client.kc = _Kernel(channel)
    with pytest.raises(CellTimeoutError):
        _poll(client, timeout=0.2)
    assert all(t <= SLICE_S for t in channel.timeouts)


def test_past_the_deadline_the_cell_times_out_as_under_nbclient():
    channel = _Channel(None, empty_polls=0)
    client = SlicedClient(new_notebook())
    client.kc = _Kernel(channel)
    with pytest.raises(CellTimeoutError, match="x = 1"):
        _poll(client, timeout=0.3)
    assert channel.timeouts and max(channel.timeouts) <= SLICE_S


@pytest.fixture
def kept(tmp_path, monkeypatch):
    """Kept notebooks and the ledger under ``tmp_path`` for this test."""
    monkeypatch.setattr(notebook_runs, "KEPT", tmp_path / "kept")
    monkeypatch.setattr(notebook_runs, "LEDGER", tmp_path / "kept" / "ledger.jsonl")
    return tmp_path / "kept"


@pytest.mark.slow
def test_an_execution_is_kept_with_its_timings_and_counted(kept, tmp_path):
    nb = new_notebook(cells=[new_code_cell("import time\ntime.sleep(0.2)\nprint('slept')"), new_code_cell("1 + 1")])
    out = execute(nb, label="fixture/two_cells", chapter="99_fixture", kernel_name="python3", cwd=tmp_path, timeout=60)
    assert out.cells[0].outputs[0]["text"] == "slept\n"
    timed = dict(cell_seconds(out))
    assert set(timed) == {0, 1} and timed[0] >= 0.2, timed
    assert slowest_cells(out, 1).startswith("cell 0 (")
    saved = nbformat.read(str(kept / "fixture" / "two_cells.ipynb"), as_version=4)
    assert "shell.execute_reply" in saved.cells[0].metadata["execution"]
    assert notebook_runs.executions() == {"99_fixture": 1}
    [row] = [json.loads(line) for line in (kept / "ledger.jsonl").read_text().splitlines()]
    assert row["how"] == "fixture/two_cells"


@pytest.mark.slow
def test_a_failing_execution_says_where_it_was_kept(kept, tmp_path):
    nb = new_notebook(cells=[new_code_cell("print('ran')"), new_code_cell("raise ValueError('boom')")])
    with pytest.raises(CellExecutionError, match="boom") as caught:
        execute(nb, label="fixture/fails", chapter=None, kernel_name="python3", cwd=tmp_path, timeout=60)
    said = str(caught.value) + "\n".join(getattr(caught.value, "__notes__", []))
    assert f"executed notebook kept at {kept / 'fixture' / 'fails.ipynb'}" in said
    assert "slowest cells: cell 1 (" in said
    assert nbformat.read(str(kept / "fixture" / "fails.ipynb"), as_version=4).cells[0].outputs[0]["text"] == "ran\n"
    assert notebook_runs.executions() == {}  # a fixture notebook is no chapter


def test_a_pytest_started_by_a_test_adds_to_the_session_ledger_and_never_empties_it(kept, monkeypatch):
    monkeypatch.setenv(notebook_runs.SESSION_ENV, "outer")
    monkeypatch.delenv(notebook_runs.SESSION_ENV)  # restored after the test, whatever this test sets
    notebook_runs.record("01_rnn_limitations", "book build", 1.0)  # left by an earlier session
    assert notebook_runs.start_session() is True  # the outermost pytest: a fresh count, and the mark
    assert notebook_runs.executions() == {}
    notebook_runs.record("01_rnn_limitations", "book build", 1.0)
    assert notebook_runs.start_session() is False  # a pytest a test starts inherits the mark
    notebook_runs.record("01_rnn_limitations", "release-blank/01_rnn_limitations", 1.0)
    assert notebook_runs.executions() == {"01_rnn_limitations": 2}
    assert notebook_runs.executions_by_kind() == {"01_rnn_limitations": {"book build": 1, "release-blank": 1}}


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:'BaseCommand' is deprecated:DeprecationWarning")  # jupyter-book's, on import
def test_the_book_builds_execution_is_kept_with_its_timings_and_cached_as_nbclient_writes_it(tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_EXECUTIONS_DIR", str(tmp_path / "kept"))
    monkeypatch.setattr(jupyter_cache_execution, "executenb", jupyter_cache_execution.executenb)  # restored after
    spec = importlib.util.spec_from_file_location(
        "sliced_jupyter_book", Path(notebook_runs.ROOT, "tests", "book", "sliced_jupyter_book.py"))
    launcher = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launcher)
    launcher.install()
    folder = tmp_path / "99_fixture"
    folder.mkdir()
    nb = new_notebook(cells=[new_code_cell("import time\ntime.sleep(0.2)\nprint('slept')"),
                             new_code_cell("raise ValueError('boom')")])
    # what myst-nb's cached execution calls
    result = jupyter_cache_execution.single_nb_execution(nb, cwd=str(folder), timeout=60, allow_errors=False)
    assert "boom" in str(result.err) and nb.cells[0].outputs[0]["text"] == "slept\n"
    assert all("execution" not in cell.metadata for cell in nb.cells)  # the cache gets what nbclient writes
    saved = nbformat.read(str(tmp_path / "kept" / "book-build" / "99_fixture.ipynb"), as_version=4)
    assert dict(cell_seconds(saved))[0] >= 0.2 and "boom" in saved.cells[1].outputs[0]["evalue"]


WALL_TEST = """
from walls import cannot_start

def test_needs_bubblewrap():
    cannot_start("bubblewrap", "no user namespaces here")

def test_needs_cuda():
    import pytest
    pytest.skip("needs CUDA")
"""


def _run_under(pytester, monkeypatch, ci: str | None):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    monkeypatch.setenv("TEST_EXECUTIONS_DIR", str(pytester.path / "kept"))
    tests = notebook_runs.ROOT / "tests"
    pytester.makeconftest(  # the suite's own hook, loaded from tests/conftest.py under another name
        f"import importlib.util, sys\nsys.path.insert(0, {str(tests)!r})\n"
        f"spec = importlib.util.spec_from_file_location('suite_conftest', {str(tests / 'conftest.py')!r})\n"
        "suite = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(suite)\n"
        "pytest_runtest_makereport = suite.pytest_runtest_makereport\n")
    pytester.makepyfile(test_walls=WALL_TEST)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rsf")


def test_a_wall_that_cannot_start_fails_under_ci(pytester, monkeypatch):
    result = _run_under(pytester, monkeypatch, "true")
    result.assert_outcomes(failed=1, skipped=1)  # the CUDA skip stays a skip
    result.stdout.fnmatch_lines(["*CI=true, and a wall this test checks cannot start here: bubblewrap: no user "
                                 "namespaces here*"])


def test_a_wall_that_cannot_start_skips_without_ci(pytester, monkeypatch):
    result = _run_under(pytester, monkeypatch, None)
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*wall cannot start: bubblewrap: no user namespaces here*"])
