"""Reading what students control, as data: files, text and source.

Everything a submission brings reaches the trusted process through here:

* a file in a folder students control is read by :func:`read_untrusted` (no
  symbolic link followed, no FIFO or device waited on, at most a bound of bytes),
  a notebook by :func:`read_notebook` (that, then JSON that must be a notebook),
  both refusing with a :class:`NotebookError` whose message says why in one line;
  every reader uses the one bound :data:`MAX_NOTEBOOK_BYTES`;
* text a submission wrote reaches a terminal, a log, a CSV or a page only through
  :func:`autograder.text.safe_text` / :func:`one_line` / :func:`problem_text` (lone
  surrogates made encodable, controls and bidi overrides escaped);
* source is parsed in the trusted process only by :func:`parse_untrusted`, never
  more than :data:`MAX_PARSED_SOURCE` bytes of it, and every parse of the
  autograder goes through :func:`parse_source` (one lock: CPython's parser is not
  thread-safe).

It imports only :mod:`autograder.text` (the one door for text): the grader, the batch, the feedback pages,
the report and the student package all read through it.
"""
from __future__ import annotations

import ast
import errno
import json
import os
import stat
import threading
from pathlib import Path

from .text import safe_text

__all__ = ["MAX_NOTEBOOK_BYTES", "MAX_PARSED_SOURCE", "NotebookError", "SourceTooLarge", "read_untrusted",
           "read_notebook", "one_line", "problem_text", "parse_source", "parse_untrusted"]

# A chapter notebook without outputs is well under 1 MB; submissions with outputs
# (plots) are larger. Anything over this is refused unread.
MAX_NOTEBOOK_BYTES = 20 * 2**20
# The most source text of one cell that the trusted process parses (to name a syntax
# error, or the names a cell binds): Python's parser takes about 900 bytes of memory
# per byte of source, so this bounds such a parse near 250 MB. A solution cell is a
# few kB; a larger one is run (and parsed) only inside the sandbox, under its limits.
MAX_PARSED_SOURCE = 256 * 2**10


class NotebookError(ValueError):
    """A file is not a usable notebook; the message says why, in one line."""


# --------------------------------------------------------------------------- files


def read_notebook(path: Path, max_bytes: int = MAX_NOTEBOOK_BYTES) -> dict:
    """Read a notebook as raw JSON, refusing what is not one.

    Args:
        path: the ``.ipynb`` file.
        max_bytes: refuse larger files unread.

    Returns:
        The notebook dict (``cells`` is a list of dicts).

    Raises:
        NotebookError: missing, empty, too large, not JSON or not a notebook.
    """
    raw = read_untrusted(Path(path), max_bytes)
    if not raw.strip():
        raise NotebookError("the file is empty")
    try:
        nb = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise NotebookError("the file is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise NotebookError(f"the file is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise NotebookError("the file's JSON is nested too deeply") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise NotebookError("the file is JSON but not a Jupyter notebook (no list of cells)")
    if not all(isinstance(cell, dict) for cell in nb["cells"]):
        raise NotebookError("the notebook's cells are not all JSON objects")
    return nb


def read_untrusted(path: Path, max_bytes: int) -> bytes:
    """The bytes of a file in a folder students control, read as data.

    Opened without following a symbolic link (a "notebook" that links to a
    classmate's or to the instructor's source is refused), without blocking (a
    FIFO or device never hangs the grader), and only when it is a regular file
    of at most ``max_bytes`` (checked on the open file, then bounded while read).

    Raises:
        NotebookError: a link, not a regular file, too large or unreadable; the
            message says which.
    """
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP or Path(path).is_symlink():
            raise NotebookError("the file is a symbolic link, not a notebook: links are not followed") from None
        raise NotebookError(f"cannot read the file: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotebookError("not a regular file (a folder, a pipe or a device): nothing to grade")
        if info.st_size > max_bytes:
            raise NotebookError(
                f"the file is {info.st_size / 2**20:.1f} MB, over the {max_bytes / 2**20:.0f} MB limit")
        os.set_blocking(fd, True)
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise NotebookError(f"the file grew over the {max_bytes / 2**20:.0f} MB limit while read")
        return b"".join(chunks)
    except OSError as exc:
        raise NotebookError(f"cannot read the file: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- text


# Characters that must not reach a terminal, a log or a page as themselves: C0/C1
# controls (escape sequences), and the bidirectional overrides that reorder text.
def one_line(text: str, limit: int = 400) -> str:
    """``text`` as one safe line (:func:`safe_text`) of at most ``limit`` characters."""
    line = " ".join(part.strip() for part in str(text).splitlines() if part.strip())
    line = safe_text(line)
    return line if len(line) <= limit else line[: limit - 1] + "…"


def problem_text(exc: BaseException) -> str:
    """An exception as one safe line of a reason: class and (cut) message."""
    return one_line(f"{type(exc).__name__}: {exc}", 160)


# --------------------------------------------------------------------------- source


# CPython 3.11's AST constructor keeps its recursion depth in shared state: two
# threads parsing at once (grading in a thread pool) fail with "SystemError: AST
# constructor recursion depth mismatch". Parsing is fast; one lock serialises ours. A
# parse outside it (the standard library's traceback formatting parses source lines to
# place its carets) can still meet ours: the state is reset at each parse, so ours is
# tried again (seen once in a full test run: two attack submissions graded in threads).
_AST_LOCK = threading.Lock()
_AST_RACE = "AST constructor recursion depth mismatch"
_AST_TRIES = 3


def parse_source(source: str, filename: str) -> ast.Module:
    """:func:`ast.parse` of ``source`` under the one lock (:data:`_AST_LOCK`), tried again when
    another thread's parse disturbed it: the parse of trusted text (the package's own
    modules); a submission's goes through :func:`parse_untrusted`."""
    with _AST_LOCK:
        for _ in range(_AST_TRIES - 1):
            try:
                return ast.parse(source, filename)
            except SystemError as exc:
                if _AST_RACE not in str(exc):
                    raise
        return ast.parse(source, filename)


class SourceTooLarge(ValueError):
    """A cell's source is over :data:`MAX_PARSED_SOURCE`: the trusted process does not parse it."""


def parse_untrusted(source: str, filename: str = "<submission>") -> ast.Module:
    """Parse a submission's source in the trusted process, never more than
    :data:`MAX_PARSED_SOURCE` bytes of it (the one bound for every such parse).

    Args:
        source: a cell's text, as the student wrote it.
        filename: the name syntax errors give.

    Returns:
        The module's syntax tree.

    Raises:
        SourceTooLarge: the source is over the bound (refused unparsed).
        SyntaxError, ValueError, RecursionError, MemoryError: as :func:`ast.parse`.
    """
    # A str holds at most 4 bytes per character: count cheaply first, encode only near the bound.
    if len(source) > MAX_PARSED_SOURCE or (
            4 * len(source) > MAX_PARSED_SOURCE
            and len(source.encode("utf-8", "surrogatepass")) > MAX_PARSED_SOURCE):
        raise SourceTooLarge(f"the cell is over the {MAX_PARSED_SOURCE // 2**10} kB the grader parses outside "
                             "the sandbox")
    return parse_source(source, filename)
