"""How ``make test`` shares the suite between xdist workers (``tests/conftest.py``).

* a module that defines a module- or session-scoped fixture is one unit of work (its
  fixture is built once per run), and so is the group of modules that read the built
  book, and each ``xdist_group(name)`` group; every other test is a unit of its own;
* the longest units (:data:`conftest.LONGEST_UNITS`) go out before all others.

The scheduler is driven here as pytest-xdist drives it (two workers that collected the
same node ids, then tests reported done), with stand-ins for the workers.
"""
from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path
from types import SimpleNamespace

# tests/conftest.py by its path: ``import conftest`` gets whichever conftest module Python
# imported first under that name (tests/autograder/ has one too), which depends on the order
# pytest collected the directories in.
_SPEC = importlib.util.spec_from_file_location("tests_conftest", Path(__file__).with_name("conftest.py"))
conftest = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(conftest)

BOOK_TEST = "tests/book/test_pages.py::test_page"
FIXTURE_TESTS = ["tests/autograder/test_graded.py::test_a", "tests/autograder/test_graded.py::test_b"]
GROUPED = ["tests/autograder/test_one.py::test_x", "tests/autograder/test_two.py::test_y"]
LONG = "tests/autograder/test_wheel_answers.py::test_long"
SINGLES = ["tests/unit/test_plain.py::test_1", "tests/unit/test_plain.py::test_2", "tests/unit/test_plain.py::test_3"]


def _tree(root):
    modules = {
        "tests/book/test_pages.py": "def test_page(built_book):\n    pass\n",
        "tests/autograder/test_graded.py": """
            import pytest

            @pytest.fixture(scope="module")
            def graded():
                return 1

            def test_a(graded):
                pass

            def test_b(graded):
                pass
        """,
        "tests/autograder/test_one.py": 'import pytest\n\npytestmark = [pytest.mark.slow,\n'
                                        '              pytest.mark.xdist_group("pair")]\n\ndef test_x():\n    pass\n',
        "tests/autograder/test_two.py": 'import pytest\n\npytestmark = pytest.mark.xdist_group(name="pair")\n\n'
                                        'def test_y():\n    pass\n',
        "tests/autograder/test_wheel_answers.py": """
            import pytest

            @pytest.fixture(scope="session")
            def wheels():
                return []

            def test_long(wheels):
                pass
        """,
        "tests/unit/test_plain.py": """
            import pytest

            @pytest.mark.xdist_group("ignored: not in pytestmark")
            def test_1():
                pass

            def test_2():
                pass

            def test_3():
                pass
        """,
    }
    for name, text in modules.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


class _Worker:
    """A stand-in for xdist's WorkerController: records the indices it is sent."""

    def __init__(self, name):
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.sent: list[int] = []

    def send_runtest_some(self, indices):
        self.sent.extend(indices)

    def shutdown(self):
        self.shutting_down = True


class _Config:
    def __init__(self, root):
        self.rootpath = root
        self.option = SimpleNamespace(loadscopereorder=True)

    def getvalue(self, name):
        return {"dist": "load", "tx": ["2*popen"]}[name]


def test_modules_with_a_long_lived_fixture_and_marked_groups_are_one_unit(tmp_path):
    _tree(tmp_path)
    groups = conftest._worker_groups(tmp_path)
    assert groups == {
        "tests/book/test_pages.py::": conftest.BOOK_GROUP,
        "tests/autograder/test_graded.py::": "tests/autograder/test_graded.py::",
        "tests/autograder/test_one.py::": "pair",
        "tests/autograder/test_two.py::": "pair",
        "tests/autograder/test_wheel_answers.py::": "tests/autograder/test_wheel_answers.py::",
    }


def test_each_unit_goes_whole_to_one_worker_the_longest_first(tmp_path):
    _tree(tmp_path)
    collection = [*FIXTURE_TESTS, *GROUPED, LONG, *SINGLES, BOOK_TEST]
    scheduler = conftest.pytest_xdist_make_scheduler(_Config(tmp_path), None)
    first, second = _Worker("gw0"), _Worker("gw1")
    for worker in (first, second):
        scheduler.add_node(worker)
        scheduler.add_node_collection(worker, collection)
    scheduler.schedule()
    # the two longest units first, one each; then, as each has fewer than 3 tests waiting,
    # the groups, the largest first (here both have 2: in collection order)
    assert [collection[i] for i in first.sent] == [BOOK_TEST, *FIXTURE_TESTS]
    assert [collection[i] for i in second.sent] == [LONG, *GROUPED]
    while scheduler.workqueue:  # each worker finishes what it has, and is sent the next unit
        for worker in (first, second):
            for index in list(worker.sent):
                if not scheduler.assigned_work[worker][scheduler._split_scope(collection[index])][collection[index]]:
                    scheduler.mark_test_complete(worker, index)
    ran = {worker.gateway.id: [collection[i] for i in worker.sent] for worker in (first, second)}
    assert sorted(ran["gw0"] + ran["gw1"]) == sorted(collection)  # every test once
    assert ran["gw0"][:3] == [BOOK_TEST, *FIXTURE_TESTS] and ran["gw1"][:3] == [LONG, *GROUPED]
    assert set(ran["gw0"][3:] + ran["gw1"][3:]) == set(SINGLES)  # then test by test


def test_without_xdist_load_the_default_scheduler_stays():
    config = SimpleNamespace(getvalue=lambda name: "loadfile")
    assert conftest.pytest_xdist_make_scheduler(config, None) is None
