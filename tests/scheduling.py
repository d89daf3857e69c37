"""How ``make test`` shares the suite between pytest-xdist workers: units of work, the longest first.

Two workers finish together when every unit that takes long is sent out early and what
is left at the end is short. The suite is read from its source (:func:`read_layout`,
with :mod:`ast`: a name in a string or a comment counts for nothing):

* **Units.** The modules that read the built book (a test or fixture that takes
  ``built_book``) are one unit: one worker builds the book (each chapter's one
  execution) and reads it while the other runs the rest. A module whose ``pytestmark``
  holds ``xdist_group(name)`` joins every other module of that name (modules sharing a
  conftest's session fixture, as ``released_chapters``). A module that defines a module-
  or session-scoped fixture is a unit of its own, so that fixture (a class graded, the
  chapters released, a model trained) is built once per run, not once on each worker
  that gets one of its tests. Every other test is a unit of its own.
* **Order.** :data:`LONGEST_UNITS` first, in that order; then the units holding a test
  marked ``slow`` (groups, then single tests); then the other groups; then the other
  single tests, in collection order. Within a tier, xdist's own order stays (with
  ``--loadscope-reorder``, on by default, the groups with the most tests first).

(``--dist loadgroup`` with ``xdist_group`` markers should form the groups, but with
pytest 9.2 and pytest-xdist 3.8 it does not: xdist renames ``item._nodeid``, which pytest
9 no longer reads; hence the markers are read from the source.)
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from xdist.scheduler import LoadScopeScheduling

__all__ = ["BOOK_GROUP", "LONGEST_UNITS", "SuiteLayout", "read_layout", "GroupsOnOneWorker"]

BOOK_GROUP = "the built book"
# The units of work that take longest, sent out before all others so that none starts
# late and runs alone at the end (seconds in test phases, the clean clone of c6edde1, 2
# workers): the book build and the tests that read it (307 s: 231 to build, each
# chapter's one execution, 70 in test_every_page_offline), first, so that the build
# starts at t=0 on one worker; every chapter released, run in a student venv, its wheels
# audited and checked against the grade (the group "releases": 363 s at 058e1cf, less the
# 48 s chapter 10's blank release spent training chapter 9's run, which it now reads from
# the build: tests/book/test_released_chapter_10.py, the group's last module, starts well
# after the build has ended), at t=0 on the other; the chapters graded whole
# in test_grading.py (395 s, one unit: its module fixtures), next, on whichever worker is
# free first. The rest is shorter (test_cheats.py 135 s, test_platforms.py 130 s, then
# 111 and less) and the single tests go last (13 s the longest), so the two workers end
# within seconds of each other.
LONGEST_UNITS = (BOOK_GROUP, "releases", "tests/autograder/test_grading.py::")

_LONG_LIVED = ("module", "session")


@dataclass(frozen=True)
class SuiteLayout:
    """What the scheduler knows of the suite, read from its source.

    Attributes:
        groups: module node-id prefix (``tests/x/test_y.py::``) -> the unit its tests belong to.
        slow: node ids (without parameters) marked ``slow``: a module (``path::``), a class
            (``path::Class``) or a test (``path::test``, ``path::Class::test``).
    """

    groups: dict[str, str]
    slow: frozenset[str]

    def unit_of(self, nodeid: str) -> str:
        """The unit of work ``nodeid`` belongs to: its group, or the test itself."""
        return self.groups.get(nodeid.split("::", 1)[0] + "::", nodeid)

    def is_slow(self, nodeid: str) -> bool:
        """Whether the test ``nodeid`` (parameters allowed) is marked ``slow`` in its source."""
        parts = nodeid.split("[", 1)[0].split("::")
        return any("::".join(parts[:n]) + ("::" if n == 1 else "") in self.slow for n in range(1, len(parts) + 1))


def _names_mark(node: ast.AST, mark: str) -> bool:
    """Whether ``node`` (a decorator or a ``pytestmark`` value) holds ``pytest.mark.<mark>``."""
    return any(isinstance(n, ast.Attribute) and n.attr == mark and isinstance(n.value, ast.Attribute)
               and n.value.attr == "mark" for n in ast.walk(node))


def _group_names(node: ast.AST) -> list[str]:
    """The names of the ``pytest.mark.xdist_group(name)`` markers in ``node``."""
    names = []
    for call in ast.walk(node):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "xdist_group":
            args = [*call.args, *(k.value for k in call.keywords if k.arg == "name")]
            names += [a.value for a in args[:1] if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    return names


def _long_lived_fixture(function: ast.AST) -> bool:
    """Whether ``function`` is a ``pytest.fixture(scope="module" | "session")``."""
    for decorator in function.decorator_list:
        if isinstance(decorator, ast.Call) and ast.unparse(decorator.func).split(".")[-1] == "fixture":
            for keyword in decorator.keywords:
                if keyword.arg == "scope" and isinstance(keyword.value, ast.Constant) \
                        and keyword.value.value in _LONG_LIVED:
                    return True
    return False


def _takes_built_book(function: ast.AST) -> bool:
    """Whether ``function`` takes the ``built_book`` fixture (a parameter, or ``usefixtures``)."""
    arguments = function.args
    if any(a.arg == "built_book" for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]):
        return True
    return any(isinstance(n, ast.Constant) and n.value == "built_book"
               for d in function.decorator_list if "usefixtures" in ast.unparse(d) for n in ast.walk(d))


def _read_module(tree: ast.Module, prefix: str) -> tuple[str | None, set[str]]:
    """The group of one test module (or None) and its node ids marked ``slow``."""
    group, slow = None, set()
    book = fixture = False
    functions: list[tuple[str, ast.AST]] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            if _names_mark(node.value, "slow"):
                slow.add(prefix)
            group = next(iter(_group_names(node.value)), group)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.append((prefix + node.name, node))
        elif isinstance(node, ast.ClassDef):
            if any(_names_mark(d, "slow") for d in node.decorator_list):
                slow.add(prefix + node.name)
            functions += [(f"{prefix}{node.name}::{f.name}", f) for f in node.body
                          if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for nodeid, function in functions:
        if any(_names_mark(d, "slow") for d in function.decorator_list):
            slow.add(nodeid)
        book = book or _takes_built_book(function)
        fixture = fixture or _long_lived_fixture(function)
    if book:
        return BOOK_GROUP, slow
    if group is None and fixture:
        group = prefix
    return group, slow


def read_layout(rootpath) -> SuiteLayout:
    """Read every ``tests/**/test_*.py`` under ``rootpath``: the groups and the ``slow`` tests.

    Raises:
        SyntaxError: a test module that does not parse, naming its file and line.
    """
    groups, slow = {}, set()
    for path in sorted(Path(rootpath, "tests").rglob("test_*.py")):
        prefix = path.relative_to(rootpath).as_posix() + "::"
        group, marked = _read_module(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), prefix)
        if group is not None:
            groups[prefix] = group
        slow |= marked
    return SuiteLayout(groups, frozenset(slow))


class GroupsOnOneWorker(LoadScopeScheduling):
    """xdist's ``loadscope`` scheduler with the units and the order of :func:`read_layout`.

    Args:
        config: pytest's config (``rootpath`` is read).
        log: xdist's scheduler log.
        layout: the suite's layout; read from ``config.rootpath`` when not given.
    """

    def __init__(self, config, log=None, layout: SuiteLayout | None = None):
        super().__init__(config, log)
        self.layout = layout if layout is not None else read_layout(config.rootpath)
        self._ordered = False

    def _split_scope(self, nodeid: str) -> str:
        return self.layout.unit_of(nodeid)

    def tier(self, scope: str, nodeids) -> tuple[int, int]:
        """Where a unit goes in the queue: ``(tier, rank)``, the smallest first."""
        if scope in LONGEST_UNITS:
            return 0, LONGEST_UNITS.index(scope)
        group = scope not in nodeids
        slow = any(self.layout.is_slow(nodeid) for nodeid in nodeids)
        return (1 if group else 2) if slow else (3 if group else 4), 0

    def _assign_work_unit(self, node) -> None:
        if not self._ordered:  # once, on the queue xdist built (and ordered by size)
            units = sorted(enumerate(self.workqueue.items()), key=lambda iu: (self.tier(*iu[1]), iu[0]))
            self.workqueue.clear()
            self.workqueue.update(unit for _, unit in units)
            self._ordered = True
        super()._assign_work_unit(node)
