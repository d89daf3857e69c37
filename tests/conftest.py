"""Shared pytest set-up: seeded randomness, the GPU marker, nbval on demand, the book tests on one
worker, walls that must start under ``CI=true``, and the count of notebook executions."""
import os
import random
import re
from pathlib import Path

import numpy as np
import pytest

import notebook_runs
from walls import WALL_SKIP


NBVAL_OPTION = "--run-nbval"
#: Whether this pytest process owns the session's ledger of notebook executions (``notebook_runs``).
OWNS_LEDGER = pytest.StashKey[bool]()


def pytest_addoption(parser):
    parser.addoption(NBVAL_OPTION, action="store_true", default=False,
                     help="also execute every chapter under nbval (a second execution of each "
                          "chapter, for one-off use: make nbval); make test relies on the book "
                          "build's one execution instead")


def pytest_configure(config):
    config.addinivalue_line("markers", "nbval_execution: executes a chapter under nbval; runs only "
                                       f"with {NBVAL_OPTION} (make nbval)")
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist): a fresh count,
        config.stash[OWNS_LEDGER] = notebook_runs.start_session()  # unless a test started this pytest


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
    """Print how many times each chapter notebook executed in this run (book build and tests together)."""
    if hasattr(config, "workerinput") or not config.stash.get(OWNS_LEDGER, False):
        return
    counts = notebook_runs.executions()
    if counts:
        terminalreporter.write_sep("-", "chapter executions this run (book build + tests)")
        for chapter, count in sorted(counts.items()):
            terminalreporter.write_line(f"{chapter}: {count}")


BOOK_GROUP = "the built book"
# A module's ``pytestmark = ...`` statement (its first line and the indented lines after it),
# and the name of an ``xdist_group`` marker in it.
_PYTESTMARK = re.compile(r"^pytestmark\s*=.*(?:\n[ \t)\]].*)*", re.M)
_GROUP_MARK = re.compile(r"""pytest\.mark\.xdist_group\(\s*(?:name\s*=\s*)?["']([^"']+)["']""")
# A fixture that lives as long as its module (or the session) defined in the module itself.
_MODULE_FIXTURE = re.compile(r"""@pytest\.fixture\(\s*scope\s*=\s*["'](?:module|session)["']""")


# The units of work that take longest, sent out before all others so that none starts
# late and runs alone at the end (the last clean-clone run, 2 workers): the book build and
# the tests that read it (201 s to build, 70 s in test_every_page_offline alone), every
# chapter released (41 s) and run in a student venv (22-61 s a chapter), every wheel
# object tried against every part (247 s in one test).
LONGEST_UNITS = (BOOK_GROUP, "releases", "tests/autograder/test_wheel_answers.py::")


def _worker_groups(rootpath) -> dict[str, str]:
    """Test modules (node-id prefixes) whose tests run on one worker, and their group.

    * the modules that read the built book (they use ``built_book``): one group;
    * a module whose ``pytestmark`` holds ``pytest.mark.xdist_group(name)``: group
      ``name``, with every other module so marked (modules sharing a session fixture of a
      conftest, as ``released_chapters``);
    * a module that defines a module- or session-scoped fixture: a group of its own, so
      that fixture (a class graded, chapters released, a model trained) is built once per
      run instead of once on every worker that gets one of the module's tests.

    Every other test is a unit of its own, free to go to any worker.
    """
    groups = {}
    for path in sorted(Path(rootpath, "tests").rglob("test_*.py")):
        text = path.read_text(encoding="utf-8")
        prefix = path.relative_to(rootpath).as_posix() + "::"
        if "built_book" in text:
            groups[prefix] = BOOK_GROUP
        elif (statement := _PYTESTMARK.search(text)) and (mark := _GROUP_MARK.search(statement.group())):
            groups[prefix] = mark.group(1)
        elif _MODULE_FIXTURE.search(text):
            groups[prefix] = prefix
    return groups


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under pytest-xdist (``-n``, ``--dist load``): each group of :func:`_worker_groups` on one worker.

    The book is built once per run, under a file lock (``book_helpers.ensure_book_built``),
    and that build is each chapter's one execution. Sending every test that reads the
    build (the modules that use the ``built_book`` fixture) to one worker lets it build
    and then read the build, while the other workers run the rest of the suite instead
    of waiting on the lock. A module with a module-scoped fixture goes whole to one worker
    too: under ``load`` each worker that got one of its tests built that fixture again (the
    attack class of ``test_cheats.py``, about 100 s, was graded twice). (``--dist
    loadgroup`` with ``xdist_group`` markers should group modules, but here, with pytest
    9.2 and pytest-xdist 3.8, its groups are not formed: xdist renames ``item._nodeid``,
    which pytest 9 no longer reads; hence the markers are read from the modules' source.)

    The longest units go out first (:data:`LONGEST_UNITS`), then the other groups, those
    with the most tests first (xdist's ``--loadscope-reorder``, on by default), then the
    other tests one by one in collection order, each to the first worker that is free:
    what is left at the end is short, and both workers finish together.
    """
    if config.getvalue("dist") not in ("load", "loadgroup"):
        return None
    from xdist.scheduler import LoadScopeScheduling  # here: pytest-xdist is needed only under -n

    groups = _worker_groups(config.rootpath)
    prefixes = tuple(groups)

    class GroupsOnOneWorker(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            if nodeid.startswith(prefixes):
                return groups[nodeid.split("::", 1)[0] + "::"]
            return nodeid

        def _assign_work_unit(self, node):
            for scope in reversed(LONGEST_UNITS):  # to the front of the queue, in this order
                if scope in self.workqueue:
                    self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return GroupsOnOneWorker(config, log)


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


@pytest.fixture
def one_torch_thread():
    """One intra-op thread for a test: small ops gain nothing from more, and on a shared
    machine (or beside another xdist worker) extra threads only contend. A module opts in
    with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
