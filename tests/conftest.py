"""Shared pytest set-up: seeded randomness, the GPU marker, nbval on demand, the book tests on one
worker, torch's threads shared out between the xdist workers, walls that must start under
``CI=true``, the count of notebook executions, and where the run's time went (``tests/timeline.py``)."""
import os
import random
import time

import numpy as np
import pytest

import notebook_runs
from timeline import TIMELINE as TIMELINE_FILE, Timeline
from walls import WALL_SKIP


# The release of every chapter, shared by the tests of tests/autograder/ and tests/book/.
pytest_plugins = ["released"]

NBVAL_OPTION = "--run-nbval"
#: Whether this pytest process owns the session's ledger of notebook executions (``notebook_runs``).
OWNS_LEDGER = pytest.StashKey[bool]()
#: The controller's record of every test phase, on whichever worker ran it.
TIMELINE = pytest.StashKey[Timeline]()


def pytest_addoption(parser):
    parser.addoption(NBVAL_OPTION, action="store_true", default=False,
                     help="also execute every chapter under nbval (a second execution of each "
                          "chapter, for one-off use: make nbval); make test relies on the book "
                          "build's one execution instead")


def worker_threads(workers: int, cores: int | None) -> int:
    """torch's intra-op threads for each of ``workers`` pytest processes on ``cores`` cores: the
    cores shared out, one at least (``cores`` unknown: one)."""
    return max(1, (cores or 1) // max(1, workers))


def pytest_configure(config):
    if hasattr(config, "workerinput"):  # an xdist worker: its share of the cores, not all of them
        # Every worker runs thousands of tiny torch calls (a release records its stand-ins and
        # check helpers, a class is graded in process); with each worker on torch's default of
        # one thread a core, two workers on two cores spin against each other: chapter 5's
        # student package took 16.6 CPU s at two threads, 6.3 at one, on a loaded machine.
        # A test that needs more sets them itself (and restores them).
        import torch  # as in the hooks below: torch is imported where it is used

        torch.set_num_threads(worker_threads(int(config.workerinput["workercount"]), os.cpu_count()))
    config.addinivalue_line("markers", "nbval_execution: executes a chapter under nbval; runs only "
                                       f"with {NBVAL_OPTION} (make nbval)")
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist): a fresh count,
        config.stash[OWNS_LEDGER] = notebook_runs.start_session()  # unless a test started this pytest
        # kept on file by the session's owner only: a pytest a test starts keeps its phases in memory
        config.stash[TIMELINE] = Timeline(time.time(), TIMELINE_FILE if config.stash[OWNS_LEDGER] else None)
        config.pluginmanager.register(_TimelineFeed(config.stash[TIMELINE]), "timeline-feed")


class _TimelineFeed:
    """Registered on the controller only: hands it every test phase it is told of (its own, or an
    xdist worker's report, which carries the worker's clock and id)."""

    def __init__(self, timeline: Timeline):
        self.timeline = timeline

    def pytest_runtest_logreport(self, report):
        self.timeline.add(report)


def on_ci() -> bool:
    """True where ``CI`` says so (``CI=true``, as GitHub Actions, GitLab CI and most runners set it)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Under ``CI=true`` a test skipped because a wall it tests cannot start fails instead.

    A wall (bubblewrap, a memory cgroup, Landlock, Chromium) that cannot start on a
    developer's laptop is a skip there (``walls.cannot_start``); on CI, where the Makefile
    installs every wall, the same skip means the suite did not test what it claims to,
    so it is a failure that says which wall and why. Only skips raised through
    ``walls.cannot_start`` are turned: a ``gpu`` or ``nbval`` skip stays a skip.
    """
    report = yield
    if report.skipped and on_ci() and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2])
        if WALL_SKIP in reason:
            why = reason.split(WALL_SKIP, 1)[1]
            report.outcome = "failed"
            report.longrepr = (f"CI=true, and a wall this test checks cannot start here: {why}\n"
                               "On CI every wall must run (make sysdeps installs bubblewrap and Chromium; the "
                               "runner must allow user namespaces, a delegated cgroup v2 and Landlock). "
                               "Unset CI to let it skip on a machine without it.")
    return report


def pytest_terminal_summary(terminalreporter, config):
    """Print where the run's time went (each worker's busy seconds, the longest modules; every
    phase kept in ``_build/test-timeline.jsonl``) and how many times each chapter executed in
    this run, and which notebook: the chapter in the book build, its blank student release
    (another notebook) in the release runs."""
    if hasattr(config, "workerinput") or not config.stash.get(OWNS_LEDGER, False):
        return
    timeline = config.stash.get(TIMELINE, None)
    if timeline is not None and timeline.phases:
        terminalreporter.write_sep("-", f"where the time went (every phase: {timeline.path})")
        for line in timeline.summary():
            terminalreporter.write_line(line)
    kinds = notebook_runs.executions_by_kind()
    if kinds:
        terminalreporter.write_sep("-", "chapter executions this run (book build + tests), by notebook")
        for chapter, counted in sorted(kinds.items()):
            by_kind = ", ".join(f"{kind} {n}" for kind, n in sorted(counted.items()))
            terminalreporter.write_line(f"{chapter}: {sum(counted.values())} ({by_kind})")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under pytest-xdist (``-n``, ``--dist load``): the units and the order of ``tests/scheduling.py``.

    The book is built once per run, under a file lock (``book_helpers.ensure_book_built``),
    and that build is each chapter's one execution: every module that reads the build
    goes to one worker, which builds and then reads it while the others run the rest. A
    module with a module-scoped fixture goes whole to one worker too (under plain ``load``
    each worker that got one of its tests built that fixture again: the attack class of
    ``test_cheats.py``, about 100 s, was graded twice). The longest units go out first,
    then those holding a ``slow`` test, and the short tests last, so the workers finish
    together.
    """
    if config.getvalue("dist") not in ("load", "loadgroup"):
        return None
    import scheduling  # here: it imports pytest-xdist, which only a run under -n needs

    return scheduling.GroupsOnOneWorker(config, log)


def pytest_collection_modifyitems(config, items):
    """Skip ``gpu`` tests without CUDA and ``nbval_execution`` tests without ``--run-nbval``."""
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:  # pragma: no cover - torch is a hard requirement
        has_cuda = False
    run_nbval = config.getoption(NBVAL_OPTION)
    no_cuda = pytest.mark.skip(reason="needs CUDA (torch.cuda.is_available() is False)")
    no_nbval = pytest.mark.skip(reason=f"a second execution of the chapter: run with {NBVAL_OPTION} "
                                       "(make nbval); make test checks the book build's execution")
    for item in items:
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(no_cuda)
        if "nbval_execution" in item.keywords and not run_nbval:
            item.add_marker(no_nbval)


@pytest.fixture(autouse=True)
def _seed_everything():
    """Every test starts from the same random state."""
    random.seed(0)
    np.random.seed(0)
    try:
        import torch

        torch.manual_seed(0)
    except ImportError:  # pragma: no cover
        pass
    yield


def _one_torch_thread():
    """One intra-op torch thread while the generator is suspended, the count before restored after."""
    import torch  # as in the hooks above: torch is imported where it is used

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.fixture
def one_torch_thread():
    """One intra-op thread for a test: small ops gain nothing from more, and on a shared
    machine (or beside another xdist worker) extra threads only contend. A module opts in
    with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``; the count before the
    test is restored after it, whatever the test set."""
    yield from _one_torch_thread()


@pytest.fixture(scope="module")
def one_torch_thread_for_module():
    """One intra-op thread for a whole module, its module-scoped fixtures included (a model
    trained once, wheels imported once): such a fixture is set up before any function-scoped
    one, so it takes this fixture as an argument (the training's sums then run in one order
    on any machine); the module's tests get it with ``pytest.mark.usefixtures``."""
    yield from _one_torch_thread()
