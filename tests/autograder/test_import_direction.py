"""The house of ``autograder``: every import points down, as ARCHITECTURE.md's table says.

ARCHITECTURE.md opens with a table, one row per module of ``autograder/`` (a package,
``checks/`` or ``student/``, is one row): its floor, what it owns, and who imports it.
The allowed direction is written there once, as the floors: a module imports only
modules on lower floors (within a package, its files import one another freely). The
one exception, declared under the table, is listed there too. This test reads the
table and holds it against the imports found in the code with :mod:`ast` (module
level and inside functions alike), so neither the code nor the page can drift:

* every module of the code has its row, and every row a module;
* every import goes to a lower floor, or is a declared exception (still needed);
* the "imported by" column names exactly the modules that import it;
* the drawing under the table stands each module on its floor.

When it fails, the message prints the rows as the code has them.
"""
from __future__ import annotations

import functools
import re
from collections import defaultdict
from pathlib import Path

from autograder.fingerprint import imported_names

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "autograder"
ARCHITECTURE = ROOT / "ARCHITECTURE.md"
#: Subpackages drawn as one room each: their files import one another freely.
ROOMS = ("checks", "student", "stub")
TABLE_START = "<!-- autograder-modules: begin -->"
TABLE_END = "<!-- autograder-modules: end -->"
DRAWING_START = "<!-- autograder-floors: begin -->"
DRAWING_END = "<!-- autograder-floors: end -->"
EXCEPTION = re.compile(r"^- `(?P<importer>[\w/]+)` → `(?P<imported>[\w/]+)`", re.MULTILINE)


def room_of(path: Path) -> str:
    """The row a file belongs to: ``grading`` for ``grading.py``, ``checks/`` for ``checks/base.py``."""
    rel = path.relative_to(PACKAGE)
    if len(rel.parts) > 1 and rel.parts[0] in ROOMS:
        return rel.parts[0] + "/"
    return rel.with_suffix("").as_posix()


def _module_room(dotted: str) -> str | None:
    """The room of a dotted module name below ``autograder`` (``autograder.checks.base`` -> ``checks/``)."""
    parts = dotted.split(".")
    if parts[0] != "autograder" or len(parts) < 2:
        return None
    if parts[1] in ROOMS:
        return parts[1] + "/"
    return parts[1] if (PACKAGE / f"{parts[1]}.py").is_file() else None


def imports_of(path: Path) -> set[str]:
    """The rooms a file imports, anywhere in its code (relative or absolute imports)."""
    rooms = (_module_room(name) for name in imported_names(path, ROOT))
    return {room for room in rooms if room is not None}


@functools.cache
def code_graph() -> dict[str, frozenset[str]]:
    """Room -> the rooms it imports (itself left out), from the code (read once per session)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for path in sorted(PACKAGE.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        room = room_of(path)
        graph[room] |= imports_of(path) - {room}
    return {room: frozenset(targets) for room, targets in graph.items()}


def read_table(text: str | None = None) -> dict[str, dict]:
    """ARCHITECTURE.md's table: room -> ``{"floor", "owns", "imported_by"}``."""
    text = text if text is not None else ARCHITECTURE.read_text(encoding="utf-8")
    body = text.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0]
    rows = {}
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].isdigit():
            continue
        floor, module, owns, imported_by = cells
        rows[module.strip("`")] = {"floor": int(floor), "owns": owns,
                                   "imported_by": set(re.findall(r"`([\w/]+)`", imported_by))}
    return rows


def declared_exceptions(text: str | None = None) -> set[tuple[str, str]]:
    """The imports against the direction that ARCHITECTURE.md declares, as ``(importer, imported)``."""
    text = text if text is not None else ARCHITECTURE.read_text(encoding="utf-8")
    if TABLE_END not in text:
        return set()
    body = text.split(TABLE_END, 1)[1].split(DRAWING_START, 1)[0]
    return {(m["importer"], m["imported"]) for m in EXCEPTION.finditer(body)}


def read_drawing(text: str | None = None) -> dict[str, int]:
    """The drawing's floors: room -> the floor whose line names it."""
    text = text if text is not None else ARCHITECTURE.read_text(encoding="utf-8")
    body = text.split(DRAWING_START, 1)[1].split(DRAWING_END, 1)[0]
    floors = {}
    for line in body.splitlines():
        match = re.match(r"\s*floor\s+(\d+)\s+(.*)$", line)
        if match:
            for room in match.group(2).split():
                floors[room] = int(match.group(1))
    return floors


def suggested_floors(graph: dict[str, set[str]], exceptions: set[tuple[str, str]]) -> dict[str, int]:
    """The lowest floor of each room that keeps every import (bar the exceptions) pointing down."""
    floors: dict[str, int] = {}

    def floor(room, trail=()):
        if room in floors:
            return floors[room]
        if room in trail:
            raise AssertionError(f"a circle of imports: {' -> '.join((*trail, room))}")
        below = [floor(t, (*trail, room)) for t in graph.get(room, ()) if (room, t) not in exceptions]
        floors[room] = 1 + max(below, default=0)
        return floors[room]

    for room in graph:
        floor(room)
    return floors


def importers(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = defaultdict(set)
    for room, targets in graph.items():
        for target in targets:
            found[target].add(room)
    return found


def table_as_code_has_it(rows: dict[str, dict] | None = None, exceptions: set[tuple[str, str]] | None = None) -> str:
    """The table's rows as the code has them (floors suggested, "owns" kept from the page)."""
    rows = rows if rows is not None else read_table()
    graph = code_graph()
    floors = suggested_floors(graph, declared_exceptions() if exceptions is None else exceptions)
    by = importers(graph)
    lines = []
    for room in sorted(graph, key=lambda r: (-floors[r], r)):
        who = ", ".join(f"`{r}`" for r in sorted(by.get(room, ()))) or "—"
        lines.append(f"| {floors[room]} | `{room}` | {rows.get(room, {}).get('owns', '?')} | {who} |")
    return "\n".join(lines)


def test_every_module_has_its_row_and_every_row_a_module():
    graph, rows = code_graph(), read_table()
    assert set(rows) == set(graph), (
        f"ARCHITECTURE.md's table and autograder/ differ: rows without a module {sorted(set(rows) - set(graph))}, "
        f"modules without a row {sorted(set(graph) - set(rows))}. The rows as the code has them:\n"
        + table_as_code_has_it(rows))


def test_every_import_points_down_or_is_declared():
    graph, rows, exceptions = code_graph(), read_table(), declared_exceptions()
    upward = [f"{room} (floor {rows[room]['floor']}) imports {target} (floor {rows[target]['floor']})"
              for room, targets in graph.items() if room in rows
              for target in sorted(targets) if target in rows
              and rows[target]["floor"] >= rows[room]["floor"] and (room, target) not in exceptions]
    assert not upward, ("imports against the direction of ARCHITECTURE.md's table (a module imports only lower "
                        "floors):\n" + "\n".join(upward) + "\nThe rows as the code has them:\n" + table_as_code_has_it(rows))


def test_each_declared_exception_is_still_needed():
    graph = code_graph()
    assert declared_exceptions(), "ARCHITECTURE.md declares no exception: is the list's format broken?"
    for importer, imported in declared_exceptions():
        assert imported in graph.get(importer, set()), (
            f"ARCHITECTURE.md declares `{importer}` → `{imported}`, which the code no longer has: drop the line")


def test_the_imported_by_column_is_the_code():
    graph, rows = code_graph(), read_table()
    by = importers(graph)
    wrong = [f"`{room}`: the table says {sorted(row['imported_by'])}, the code {sorted(by.get(room, set()))}"
             for room, row in rows.items() if room in graph and row["imported_by"] != by.get(room, set())]
    assert not wrong, ("ARCHITECTURE.md's 'imported by' column drifted:\n" + "\n".join(wrong)
                       + "\nThe rows as the code has them:\n" + table_as_code_has_it(rows))


def test_the_drawing_stands_each_module_on_its_floor():
    rows, drawn = read_table(), read_drawing()
    assert drawn == {room: row["floor"] for room, row in rows.items()}, (
        "ARCHITECTURE.md's drawing and table disagree: "
        + "; ".join(f"{r}: drawn {drawn.get(r)}, table {rows[r]['floor'] if r in rows else None}"
                    for r in sorted(set(drawn) | set(rows))
                    if drawn.get(r) != (rows[r]["floor"] if r in rows else None)))


def test_the_check_fails_on_an_import_against_the_direction():
    """The check itself: a table claiming ``untrusted`` sits above ``grading`` is refused."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    rows = read_table(text)
    low, high = "untrusted", "grading"
    assert rows[low]["floor"] < rows[high]["floor"] and low in code_graph()[high]
    swapped = {**rows, low: {**rows[low], "floor": rows[high]["floor"] + 1}}
    upward = [t for t in code_graph()[high] if t in swapped and swapped[t]["floor"] >= swapped[high]["floor"]]
    assert upward == [low]
