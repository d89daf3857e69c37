"""Scores and tables as plain text, for every console and CSV the autograder writes or reads.

One module for the repository's commands (``grade``, ``autograde``, ``check``, the
CSV files and feedback pages) and the student package's ``check``, which ships it
unchanged, so a score reads the same everywhere: ``2`` not ``2.0``, ``1.5``, ``0.3333``.
"""
from __future__ import annotations

import csv
import io
import re
from pathlib import Path

__all__ = ["read_csv", "safe_text", "score_text", "table", "check_table", "check_verdict", "check_report", "csv_cell", "csv_uncell", "csv_text",
           "wrong_chapter_text", "wrong_chapter_notice", "FORMULA_STARTS", "CSV_SEPARATORS"]

# The last column of a table (a message) is cut to this width when the columns are padded.
MESSAGE_WIDTH = 200

# Characters that must not reach a terminal, a log or a page as themselves: C0/C1
# controls (escape sequences), and the bidirectional overrides that reorder text.
_UNSAFE_CHARS = {c: f"\\x{c:02x}" for c in [*range(0x00, 0x20), *range(0x7F, 0xA0)]}
_UNSAFE_CHARS.update({c: f"\\u{c:04x}" for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F]})
_UNSAFE_CHARS[0x09] = " "  # a tab is only white space
# A lone surrogate: no UTF-8 file, JSON text or database can hold it.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _surrogate(match: re.Match) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte (Python's surrogate escape): read as Latin-1
        return chr(code - 0xDC00)
    return f"\\u{code:04x}"


def safe_text(text) -> str:
    """``text`` made fit for every file, page and terminal the autograder writes.

    The one door for text a student controls (a message raised in a cell, a file or
    folder name, ``timestamp.txt``): applied where it enters, what follows can
    encode, store and show it. Every control and bidi-override character is
    written as an escape (``\\x1b``; a tab becomes a space), so it reaches a
    terminal, a log or a CSV as text only; a lone surrogate (``"caf" + chr(0xDCFF)``
    raised in a cell, an undecodable byte of a file name) becomes the Latin-1
    character of its byte (``ÿ``) or an escape (``\\ud800``), so UTF-8 can hold it.
    Plain text is returned unchanged.

    Args:
        text: anything (``str()`` is taken).

    Returns:
        The same text, every character encodable in UTF-8 and none a control.
    """
    text = str(text)
    if _SURROGATE.search(text):  # first: a byte read as Latin-1 may be a C1 control, escaped below
        text = _SURROGATE.sub(_surrogate, text)
    return text.translate(_UNSAFE_CHARS)


def score_text(x: float) -> str:
    """A score as text: an integer without ``.0``, otherwise at most 4 decimals.

    Args:
        x: a number of points.

    Returns:
        ``"2"`` for 2.0, ``"1.5"`` for 1.5, ``"0.3333"`` for 1/3.
    """
    x = round(float(x), 4)
    return str(int(x)) if x == int(x) else f"{x:g}"


def table(rows: list[list[str]], header: list[str]) -> str:
    """``rows`` under ``header`` in left-aligned columns, a dashed rule between.

    Args:
        rows: one list of cells per row, as many as ``header`` has.
        header: the column titles.

    Returns:
        The lines joined by newlines, trailing spaces stripped; the last column is
        padded to at most :data:`MESSAGE_WIDTH` characters (longer cells stay whole).
    """
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    widths[-1] = min(widths[-1], MESSAGE_WIDTH)

    def line(cells):
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def check_table(rows: list[dict], messages: list[str]) -> str:
    """The table ``check`` prints: one line per exercise (``exercise``, ``score``,
    ``max_score``, ``status`` of each row) with its message."""
    cells = [[r["exercise"], f"{score_text(r['score'])}/{score_text(r['max_score'])}", r["status"], message]
             for r, message in zip(rows, messages)]
    return table(cells, ["exercise", "points", "status", "message"])


def check_verdict(rows: list[dict]) -> tuple[str, int]:
    """The closing line of ``check`` and its exit status: 0 when every exercise passes
    the visible checks, 1 otherwise (and when there is none)."""
    passed = sum(r["status"] == "passed" for r in rows)
    line = (f"{passed} of {len(rows)} exercises pass the visible checks "
            "(the hidden checks, run when grading, test more cases).")
    return line, 0 if rows and passed == len(rows) else 1


def check_report(rows: list[dict]) -> tuple[str, int]:
    """All that ``check`` prints after its first line, and its exit status: the table
    (:func:`check_table`, each exercise's first diagnosis line), then, for each exercise
    that is not passed, its parts and the diagnosis of every missed part, its notes and
    its advice, then the verdict (:func:`check_verdict`).

    The one report of both ``check`` commands: the repository's (grading in the
    sandbox) and the student package's (precomputed visible checks).

    Args:
        rows: one dict per exercise: ``exercise``, ``score``, ``max_score``, ``status``,
            ``message`` (the diagnosis, a line per missed part; ``""`` when passed),
            ``parts_line`` (``"values 2/2 · any axis 0/1"``: a line of text, never the
            graded parts themselves), ``notes`` and ``advice`` (lists of text).

    Returns:
        ``(text, status)``: status 0 when every exercise passes, 1 otherwise.
    """
    lines = [check_table(rows, [(r["message"].splitlines() or ["ok"])[0] for r in rows])]
    for r in rows:
        if r["status"] != "passed" and r["parts_line"]:
            lines.append(f"\n{r['exercise']}: {r['parts_line']}")
            lines += [f"  {line}" for line in r["message"].splitlines()[1:]]
        lines += [f"  note on {r['exercise']}: {note}" for note in r.get("notes") or []]
        lines += [f"  advice on {r['exercise']} (no points): {advice.splitlines()[0]}"
                  for advice in r.get("advice") or [] if advice.strip()]
    verdict, status = check_verdict(rows)
    lines.append(f"\n{verdict}")
    return "\n".join(lines), status


# --------------------------------------------------------------------------- a notebook of another chapter


def wrong_chapter_text(real: str, submitted: str) -> str:
    """The words that name a notebook handed in for the wrong chapter, in every view that
    says so (the console summary after grading, the feedback page, ``check``, Gradescope).

    Args:
        real: the chapter whose cells the notebook holds.
        submitted: the chapter it was handed in (or is being checked) as.
    """
    return f"this is a {real} notebook, submitted as {submitted}"


def wrong_chapter_notice(real: str, submitted: str) -> str:
    """What the student is told about a notebook of chapter ``real`` handed in as
    ``submitted`` (:func:`wrong_chapter_text`, what it earns and what to do instead)."""
    return (f"wrong chapter: {wrong_chapter_text(real, submitted)} (0 points: none of {submitted}'s exercises is "
            f"in it). Hand in your {submitted} notebook ({submitted}.ipynb) to be graded for {submitted}; "
            f"this one is graded only as {real}.")


# --------------------------------------------------------------------------- CSV cells a spreadsheet cannot run

# What makes a spreadsheet read a cell as a formula (OWASP's CSV injection list):
# = + - @ and a leading tab or carriage return.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
# Where a spreadsheet may split a line into cells, whatever the file's own
# separator: the comma, the semicolon of many European locales, the tab, a line break.
CSV_SEPARATORS = (",", ";", "\t", "\r", "\n")
# A formula start at the beginning of a cell, or after a separator (and any spaces or
# quotes a reader may strip): the places a cell can begin when the line is split.
_FORMULA_AT = re.compile(r"""(^|[,;\t\r\n])([ "]*)(?=[=+\-@\t\r])""")
_GUARDED_AT = re.compile(r"""(^|[,;\t\r\n])([ "]*)'(?=[=+\-@\t\r])""")


def csv_cell(text) -> str:
    """``text`` as a CSV cell that no spreadsheet runs as a formula, in any locale.

    A ``'`` goes before every formula start (``= + - @``, tab, CR) that opens the
    cell or follows a character a spreadsheet may split a line on (``,``, ``;``,
    tab, a line break; spaces and quotes between are skipped), so the cell stays
    text however the line is split. Write it with ``csv.QUOTE_ALL`` (:func:`csv_text`).

    Args:
        text: the cell's text (anything: ``str()`` is taken).

    Returns:
        The guarded text; :func:`csv_uncell` gives the original back.
    """
    return _FORMULA_AT.sub(lambda m: m.group(1) + m.group(2) + "'", str(text))


def csv_uncell(text: str) -> str:
    """Undo :func:`csv_cell` (for a program reading the CSVs back)."""
    return _GUARDED_AT.sub(lambda m: m.group(1) + m.group(2), text)


def csv_text(columns: list[str], rows: list[list]) -> str:
    """A CSV file's text: every field quoted (``csv.QUOTE_ALL``) and guarded by
    :func:`csv_cell`, header included, lines ending in ``\\n``."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_ALL)
    writer.writerow([csv_cell(c) for c in columns])
    writer.writerows([[csv_cell(c) for c in row] for row in rows])
    return buf.getvalue()


def read_csv(path: Path | str, what: str, error: type[Exception], header: str = "a header row"
             ) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Read an instructor's CSV file (a roster, extensions): its header and its rows.

    Spreadsheets write a byte-order mark and quote fields holding line breaks; both are read,
    and each row keeps the line of the file where it starts, for messages that name it.

    Args:
        path: the file.
        what: how messages name it ("roster", "extensions file").
        error: the exception raised, with a message naming the file (and the line).
        header: what the first row should be, for the message about an empty file.

    Returns:
        The header's cells, and ``(line, cells)`` for every row that is not blank.
    """
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{what} {path} cannot be read ({exc})") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    rows: list[tuple[int, list[str]]] = []
    try:
        first = next(reader, None)
        if first is None:
            raise error(f"{what} {path} is empty: expected {header}")
        line = reader.line_num + 1
        for row in reader:
            if any(cell.strip() for cell in row):
                rows.append((line, row))
            line = reader.line_num + 1
    except csv.Error as exc:
        raise error(f"{what} {path}, line {reader.line_num}: not CSV ({exc})") from None
    return first, rows
