"""The house of ``autograder``: every import points down, as ARCHITECTURE.md's table says.

ARCHITECTURE.md opens with a table, one row per module of ``autograder/`` (a package,
``checks/`` or ``student/``, is one row): its floor, what it owns, and who imports it.
The allowed direction is written there once, as the floors: a module imports only
modules on lower floors (within a package, its files import one another freely). The
one exception, declared under the table, is listed there too. This test reads the
table and holds it against the imports found in the code with :mod:`ast` (module
level and inside functions alike), so neither the code nor the page can drift:

* every module of the code has its row (saying what it owns), and every row a module;
* every import goes to a lower floor, or is a declared exception (still needed);
* the "imported by" column names exactly the modules that import it;
* the drawing under the table stands each module on its floor.

When it fails, the message prints the rows as the code has them. The checks themselves
are shown failing on a copy of the package with a new module and an import up the floors.
"""
from __future__ import annotations

import functools
import re
import shutil
from collections import defaultdict
from pathlib import Path

from autograder.fingerprint import imported_names

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "autograder"
ARCHITECTURE = ROOT / "ARCHITECTURE.md"
#: Subpackages drawn as one room each: their files import one another freely.
ROOMS = ("checks", "commands", "student", "stub")
TABLE_START = "<!-- autograder-modules: begin -->"
TABLE_END = "<!-- autograder-modules: end -->"
DRAWING_START = "<!-- autograder-floors: begin -->"
DRAWING_END = "<!-- autograder-floors: end -->"
EXCEPTION = re.compile(r"^- `(?P<importer>[\w/]+)` → `(?P<imported>[\w/]+)`", re.MULTILINE)


def room_of(path: Path, package: Path = PACKAGE) -> str:
    """The row a file belongs to: ``grading`` for ``grading.py``, ``checks/`` for ``checks/base.py``."""
    rel = path.relative_to(package)
    if len(rel.parts) > 1 and rel.parts[0] in ROOMS:
        return rel.parts[0] + "/"
    return rel.with_suffix("").as_posix()


def _module_room(dotted: str, package: Path = PACKAGE) -> str | None:
    """The room of a dotted module name below ``autograder`` (``autograder.checks.base`` -> ``checks/``)."""
    parts = dotted.split(".")
    if parts[0] != "autograder" or len(parts) < 2:
        return None
    if parts[1] in ROOMS:
        return parts[1] + "/"
    return parts[1] if (package / f"{parts[1]}.py").is_file() else None


def imports_of(path: Path, package: Path = PACKAGE) -> set[str]:
    """The rooms a file imports, anywhere in its code (relative or absolute imports)."""
    rooms = (_module_room(name, package) for name in imported_names(path, package.parent))
    return {room for room in rooms if room is not None}


def graph_of(package: Path) -> dict[str, frozenset[str]]:
    """Room -> the rooms it imports (itself left out), from the files of ``package``."""
    graph: dict[str, set[str]] = defaultdict(set)
    for path in sorted(package.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        room = room_of(path, package)
        graph[room] |= imports_of(path, package) - {room}
    return {room: frozenset(targets) for room, targets in graph.items()}


@functools.cache
def code_graph() -> dict[str, frozenset[str]]:
    """:func:`graph_of` the repository's ``autograder`` (read once per session)."""
    return graph_of(PACKAGE)


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


def table_as_code_has_it(rows: dict[str, dict] | None = None, exceptions: set[tuple[str, str]] | None = None,
                         graph: dict[str, frozenset[str]] | None = None) -> str:
    """The table's rows as the code has them (floors suggested, "owns" kept from the page)."""
    rows = rows if rows is not None else read_table()
    graph = graph if graph is not None else code_graph()
    floors = suggested_floors(graph, declared_exceptions() if exceptions is None else exceptions)
    by = importers(graph)
    lines = []
    for room in sorted(graph, key=lambda r: (-floors[r], r)):
        who = ", ".join(f"`{r}`" for r in sorted(by.get(room, ()))) or "—"
        lines.append(f"| {floors[room]} | `{room}` | {rows.get(room, {}).get('owns', '?')} | {who} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- what drifted


def rows_missing(graph, rows) -> list[str]:
    """A module of the code without a row, a row without a module (one line each)."""
    return ([f"module without a row: {room}" for room in sorted(set(graph) - set(rows))]
            + [f"row without a module: {room}" for room in sorted(set(rows) - set(graph))])


def rows_without_owner(rows) -> list[str]:
    """A row that does not say what its module owns."""
    return [f"`{room}` owns nothing the table says" for room, row in sorted(rows.items())
            if row["owns"] in ("", "?", "—")]


def imports_upward(graph, rows, exceptions) -> list[str]:
    """Each import to the same or a higher floor that is not declared."""
    return [f"{room} (floor {rows[room]['floor']}) imports {target} (floor {rows[target]['floor']})"
            for room, targets in sorted(graph.items()) if room in rows
            for target in sorted(targets) if target in rows
            and rows[target]["floor"] >= rows[room]["floor"] and (room, target) not in exceptions]


def exceptions_unused(graph, exceptions) -> list[str]:
    """Each declared exception the code no longer has."""
    return [f"`{importer}` → `{imported}` is declared, the code no longer has it: drop the line"
            for importer, imported in sorted(exceptions) if imported not in graph.get(importer, set())]


def importers_drifted(graph, rows) -> list[str]:
    """Each row whose "imported by" is not the code's."""
    by = importers(graph)
    return [f"`{room}`: the table says {sorted(row['imported_by'])}, the code {sorted(by.get(room, set()))}"
            for room, row in sorted(rows.items()) if room in graph and row["imported_by"] != by.get(room, set())]


def drawing_drifted(rows, drawn) -> list[str]:
    """Each module the drawing stands elsewhere than the table (or not at all)."""
    return [f"{r}: drawn {drawn.get(r)}, table {rows[r]['floor'] if r in rows else None}"
            for r in sorted(set(drawn) | set(rows)) if drawn.get(r) != (rows[r]["floor"] if r in rows else None)]


def test_every_module_has_its_row_and_every_row_a_module():
    graph, rows = code_graph(), read_table()
    missing = rows_missing(graph, rows) + rows_without_owner(rows)
    assert not missing, ("ARCHITECTURE.md's table and autograder/ differ:\n" + "\n".join(missing)
                         + "\nThe rows as the code has them:\n" + table_as_code_has_it(rows))


def test_every_import_points_down_or_is_declared():
    graph, rows = code_graph(), read_table()
    upward = imports_upward(graph, rows, declared_exceptions())
    assert not upward, ("imports against the direction of ARCHITECTURE.md's table (a module imports only lower "
                        "floors):\n" + "\n".join(upward) + "\nThe rows as the code has them:\n" + table_as_code_has_it(rows))


def test_each_declared_exception_is_still_needed():
    assert declared_exceptions(), "ARCHITECTURE.md declares no exception: is the list's format broken?"
    unused = exceptions_unused(code_graph(), declared_exceptions())
    assert not unused, "ARCHITECTURE.md's declared exceptions:\n" + "\n".join(unused)


def test_the_imported_by_column_is_the_code():
    rows = read_table()
    wrong = importers_drifted(code_graph(), rows)
    assert not wrong, ("ARCHITECTURE.md's 'imported by' column drifted:\n" + "\n".join(wrong)
                       + "\nThe rows as the code has them:\n" + table_as_code_has_it(rows))


def test_the_drawing_stands_each_module_on_its_floor():
    wrong = drawing_drifted(read_table(), read_drawing())
    assert not wrong, "ARCHITECTURE.md's drawing and table disagree: " + "; ".join(wrong)


def test_a_new_module_or_import_in_the_code_fails_the_page(tmp_path):
    """The checks themselves, on a copy of the package edited as a contributor would: a new
    module without its row, an import up the floors (which also changes an "imported by"),
    an exception the code dropped, a drawing left behind; each is named, and the rows the
    failure prints give the new module its floor."""
    package = tmp_path / "autograder"
    shutil.copytree(PACKAGE, package, ignore=lambda folder, names: [
        n for n in names if n == "__pycache__" or (not n.endswith(".py") and not (Path(folder) / n).is_dir())])
    rows, exceptions, drawn = read_table(), declared_exceptions(), read_drawing()
    (package / "ledger.py").write_text('"""A new module."""\nfrom .text import csv_cell\n', encoding="utf-8")
    with open(package / "text.py", "a", encoding="utf-8") as fh:
        fh.write("\n\ndef _late():\n    from .report import class_report  # against the direction\n    return class_report\n")
    graph = graph_of(package)
    assert rows_missing(graph, rows) == ["module without a row: ledger"]
    # the rows the failure prints stand it one floor above `text`, owning what its writer will say
    # (printed once the import against the direction is gone: a circle has no floors)
    downward = {**graph, "text": graph["text"] - {"report"}}
    assert f"| {rows['text']['floor'] + 1} | `ledger` | ? | — |" in table_as_code_has_it(rows, exceptions, downward)
    assert rows_without_owner({**rows, "ledger": {"floor": 2, "owns": "?", "imported_by": set()}}) == [
        "`ledger` owns nothing the table says"]
    assert imports_upward(graph, rows, exceptions) == [
        f"text (floor {rows['text']['floor']}) imports report (floor {rows['report']['floor']})"]
    assert [line.split(":")[0] for line in importers_drifted(graph, rows)] == ["`report`", "`text`"]
    assert exceptions_unused(graph, exceptions | {("text", "wire")}) == [
        "`text` → `wire` is declared, the code no longer has it: drop the line"]
    assert drawing_drifted(rows, {**drawn, "text": drawn["text"] + 1}) == [
        f"text: drawn {drawn['text'] + 1}, table {rows['text']['floor']}"]


def test_the_check_fails_on_an_import_against_the_direction():
    """The check itself: a table claiming ``untrusted`` sits above ``grading`` is refused."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    rows = read_table(text)
    low, high = "untrusted", "grading"
    assert rows[low]["floor"] < rows[high]["floor"] and low in code_graph()[high]
    swapped = {**rows, low: {**rows[low], "floor": rows[high]["floor"] + 1}}
    upward = [t for t in code_graph()[high] if t in swapped and swapped[t]["floor"] >= swapped[high]["floor"]]
    assert upward == [low]
