"""How ``make test`` shares the suite between xdist workers (``tests/scheduling.py``).

* a module that defines a module- or session-scoped fixture is one unit of work (its
  fixture is built once per run), and so is the group of modules that read the built
  book, and each ``xdist_group(name)`` group; every other test is a unit of its own; a
  name in a string or a comment counts for nothing;
* the longest units (:data:`scheduling.LONGEST_UNITS`) go out first, then the units that
  hold a test marked ``slow`` (groups, then single tests), then the other groups, then
  the other tests.

The scheduler is driven here as pytest-xdist drives it (two workers that collected the
same node ids, then tests reported done), with stand-ins for the workers.
"""
from __future__ import annotations

import ast
import importlib.util
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import scheduling

# tests/conftest.py by its path: ``import conftest`` gets whichever conftest module Python
# imported first under that name (tests/autograder/ has one too), which depends on the order
# pytest collected the directories in.
_SPEC = importlib.util.spec_from_file_location("tests_conftest", Path(__file__).with_name("conftest.py"))
conftest = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(conftest)

BOOK_TEST = "tests/book/test_pages.py::test_page"
FIXTURE_TESTS = ["tests/autograder/test_graded.py::test_a", "tests/autograder/test_graded.py::test_b"]
GROUPED = ["tests/autograder/test_one.py::test_x", "tests/autograder/test_two.py::test_y"]
LONG = "tests/autograder/test_release_runs.py::test_long"
PLAIN = ["tests/unit/test_plain.py::test_1", "tests/unit/test_plain.py::test_2[a]",
         "tests/unit/test_plain.py::test_2[b]"]
SLOW_SINGLE = "tests/unit/test_plain.py::Plain::test_3"
WORDS = "tests/unit/test_words.py::test_says_the_names"

MODULES = {
    "tests/book/test_pages.py": """
        def test_page(built_book):
            pass
    """,
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
    "tests/autograder/test_one.py": """
        import pytest

        pytestmark = [pytest.mark.slow,
                      pytest.mark.xdist_group("pair")]

        def test_x():
            pass
    """,
    "tests/autograder/test_two.py": """
        import pytest

        pytestmark = pytest.mark.xdist_group(name="pair")

        def test_y():
            pass
    """,
    "tests/autograder/test_release_runs.py": """
        import pytest

        pytestmark = pytest.mark.xdist_group("releases")

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

        @pytest.mark.parametrize("x", ["a", "b"])
        def test_2(x):
            pass

        class Plain:
            @pytest.mark.slow
            def test_3(self):
                pass
    """,
    # the names in a string and a comment: no group, nothing slow
    "tests/unit/test_words.py": """
        # def test_in_a_comment(built_book): pass
        SOURCE = '''
        pytestmark = pytest.mark.slow
        @pytest.fixture(scope="module")
        def page(built_book):
            pass
        '''

        def test_says_the_names():
            assert "built_book" in SOURCE
    """,
}


def _tree(root):
    for name, text in MODULES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


class _Worker:
    """A stand-in for xdist's WorkerController: records the indices it is sent."""

    def __init__(self, name, sent_units):
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.sent: list[int] = []
        self.sent_units = sent_units

    def send_runtest_some(self, indices):
        self.sent.extend(indices)
        self.sent_units.append(list(indices))

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
    layout = scheduling.read_layout(tmp_path)
    assert layout.groups == {
        "tests/book/test_pages.py::": scheduling.BOOK_GROUP,
        "tests/autograder/test_graded.py::": "tests/autograder/test_graded.py::",
        "tests/autograder/test_one.py::": "pair",
        "tests/autograder/test_two.py::": "pair",
        "tests/autograder/test_release_runs.py::": "releases",
    }
    assert [layout.unit_of(n) for n in (GROUPED[1], PLAIN[1], WORDS)] == ["pair", PLAIN[1], WORDS]


def test_the_slow_mark_is_read_on_a_module_a_class_and_a_test_never_in_a_string(tmp_path):
    _tree(tmp_path)
    layout = scheduling.read_layout(tmp_path)
    assert layout.slow == {"tests/autograder/test_one.py::", SLOW_SINGLE}
    assert layout.is_slow(GROUPED[0]) and layout.is_slow(SLOW_SINGLE + "[with-a-parameter]")
    assert not any(layout.is_slow(n) for n in [GROUPED[1], *FIXTURE_TESTS, *PLAIN, WORDS, BOOK_TEST])


def test_a_module_that_does_not_parse_is_named(tmp_path):
    _tree(tmp_path)
    (tmp_path / "tests" / "unit" / "test_broken.py").write_text("def test_(:\n", encoding="utf-8")
    with pytest.raises(SyntaxError, match="test_broken.py"):
        scheduling.read_layout(tmp_path)


def test_each_unit_goes_whole_to_one_worker_the_longest_first_then_the_slow(tmp_path):
    _tree(tmp_path)
    collection = [*FIXTURE_TESTS, *GROUPED, LONG, *PLAIN, SLOW_SINGLE, WORDS, BOOK_TEST]
    scheduler = conftest.pytest_xdist_make_scheduler(_Config(tmp_path), None)
    units: list[list[int]] = []
    first, second = _Worker("gw0", units), _Worker("gw1", units)
    for worker in (first, second):
        scheduler.add_node(worker)
        scheduler.add_node_collection(worker, collection)
    scheduler.schedule()
    # the two longest units first, one each; then, as each has fewer than 3 tests waiting,
    # the group holding a slow test, and the slow single test
    assert [collection[i] for i in first.sent] == [BOOK_TEST, *GROUPED]
    assert [collection[i] for i in second.sent] == [LONG, SLOW_SINGLE]
    while scheduler.workqueue:  # each worker finishes what it has, and is sent the next unit
        for worker in (first, second):
            for index in list(worker.sent):
                if not scheduler.assigned_work[worker][scheduler._split_scope(collection[index])][collection[index]]:
                    scheduler.mark_test_complete(worker, index)
    assert sorted(first.sent + second.sent) == list(range(len(collection)))  # every test once
    # every unit whole, in this order: the longest, the slow, the other groups, the other tests
    assert [[collection[i] for i in unit] for unit in units] == [
        [BOOK_TEST], [LONG], GROUPED, [SLOW_SINGLE], FIXTURE_TESTS, [PLAIN[0]], [PLAIN[1]], [PLAIN[2]], [WORDS]]


#: The session fixtures of tests/released.py: the release of every chapter, built once per run.
RELEASE_FIXTURES = {"released_chapters", "released_packages"}


def _fixtures_taken(tree) -> set[str]:
    """The names a test module's functions take as arguments or ``usefixtures``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names |= {a.arg for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]}
        elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith("usefixtures"):
            names |= {a.value for a in node.args if isinstance(a, ast.Constant)}
    return names


def test_in_the_suite_the_build_goes_out_first_and_the_release_is_read_on_one_worker():
    """The real suite's layout: the book build (each chapter's one execution) is the first
    unit out, so it starts at t=0; each of LONGEST_UNITS is a unit of the suite; and every
    module that reads the release of every chapter is in the group "releases", so that
    release is built once per run (a module outside it would build it again on another
    worker)."""
    root = Path(__file__).resolve().parents[1]
    layout = scheduling.read_layout(root)
    assert scheduling.LONGEST_UNITS[0] == scheduling.BOOK_GROUP
    units = set(layout.groups.values())
    assert all(unit in units for unit in scheduling.LONGEST_UNITS), (scheduling.LONGEST_UNITS, sorted(units))
    readers = {path.relative_to(root).as_posix() + "::" for path in sorted((root / "tests").rglob("test_*.py"))
               if RELEASE_FIXTURES & _fixtures_taken(ast.parse(path.read_text(encoding="utf-8")))}
    assert len(readers) >= 5, readers  # release runs, student release, wheel answers, fairness wheel, JupyterLab
    assert {module: layout.groups.get(module) for module in readers} == dict.fromkeys(readers, "releases")


def test_without_xdist_load_the_default_scheduler_stays():
    config = SimpleNamespace(getvalue=lambda name: "loadfile")
    assert conftest.pytest_xdist_make_scheduler(config, None) is None


def test_each_xdist_worker_gets_its_share_of_the_cores_for_torch(monkeypatch):
    """Two workers on two cores: one torch thread each (two each spin against each other)."""
    assert [conftest.worker_threads(w, c) for w, c in [(2, 2), (2, 8), (3, 2), (1, None), (4, 6)]] == [1, 4, 1, 1, 1]
    before = torch.get_num_threads()
    monkeypatch.setattr(conftest.os, "cpu_count", lambda: 6)
    worker = SimpleNamespace(workerinput={"workercount": 2}, addinivalue_line=lambda *args: None)
    try:
        torch.set_num_threads(1)
        conftest.pytest_configure(worker)
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
