"""What a class handed in: the student folders, the student ids, and each submission's notebook.

The batch grader (:mod:`autograder.batch`) and the class report read a submitted
folder only through this module. The layout is nbgrader's submitted layout
(``<student>/<chapter>/<chapter>.ipynb``, with ``timestamp.txt`` beside it), or a
flat folder of ``<student>.ipynb`` for one chapter. Nothing here runs student code:
every file is read through :func:`autograder.untrusted.read_untrusted` with one bound,
``untrusted.MAX_NOTEBOOK_BYTES`` (20 MB).

Student ids (:func:`student_ids`). A student is a folder name as *bytes* on disk,
and every file of the batch is keyed by one id derived from them: the journal entry,
the feedback path, the gradebook's student and the CSV rows. The id is the name
itself when it is plain text: valid UTF-8, no control or bidi character, no space at
either end, at most :data:`MAX_ID_CHARS` characters (nbgrader's gradebook holds 128),
not ending like a hashed id, and not a variant of a classmate's name (the same text
after Unicode NFC normalisation). Otherwise the id is a readable form (undecodable
bytes read as Latin-1, controls escaped, cut to fit) followed by ``~`` and the
first 12 hex digits of the SHA-256 of the raw name: ``caf\\xe9`` (Latin-1) beside
``café`` (UTF-8) is graded as ``café~<hash>`` and the UTF-8 ``café`` keeps its
name. The id depends only on the folder's own bytes (and, for a normalisation
variant, on the canonical name being there too), so it is stable across runs; two
folders never share one.
"""
from __future__ import annotations

import hashlib
import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from .book import BOOK, chapter_ids
from .text import safe_text
from .untrusted import MAX_NOTEBOOK_BYTES, NotebookError, problem_text, read_untrusted

__all__ = ["MAX_ID_CHARS", "Submission", "find_submissions", "student_ids", "student_folders", "chapter_notebook",
           "display_name", "is_visible", "is_dir", "file_sha256"]

# The longest student id (characters): nbgrader's gradebook holds 128; the journal and the
# feedback folders are named by it too.
MAX_ID_CHARS = 100


@dataclass(frozen=True)
class Submission:
    """One student's notebook for one chapter (``path`` is ``None``: not submitted).

    Attributes:
        student: the student id (:func:`student_ids`).
        chapter: the chapter (assignment) id.
        path: the notebook to grade, ``None`` when there is none.
        timestamp: the text of ``timestamp.txt`` (bounded, made safe), if any.
        problem: why the folder cannot be graded (two notebooks, an unreadable
            folder): every exercise scores 0 with this reason, nothing is run.
        notes: what went wrong reading the folder that does not stop grading
            (an unreadable timestamp); added to the rows' reasons.
    """

    student: str
    chapter: str
    path: Path | None
    timestamp: str | None = None
    problem: str = ""
    notes: tuple[str, ...] = ()


def is_visible(path: Path) -> bool:
    return not path.name.startswith((".", "_"))


def is_dir(path: Path) -> bool:
    """``path.is_dir()``, ``False`` for a name the system refuses (too long, …)."""
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def _timestamp(folder: Path) -> str | None:
    """The text of ``folder/timestamp.txt`` (written by ``nbgrader submit``, so the
    student's): at most 4 kB read, the first 64 characters kept, made safe."""

    stamp = folder / "timestamp.txt"  # written by `nbgrader collect`
    try:
        text = read_untrusted(stamp, 4096).decode("utf-8", errors="replace").strip()
    except NotebookError:
        return None
    return safe_text(text[:64]) or None


def _names(paths: list[Path], limit: int = 5) -> str:

    shown = [safe_text(display_name(p.name))[:60] for p in paths[:limit]]
    return ", ".join(shown) + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


def _locate_notebook(folder: Path, chapter: str) -> tuple[Path | None, str]:
    """``(notebook, problem)`` of a chapter folder: ``folder/<chapter>.ipynb``, or the
    folder's only notebook if it was renamed; else ``None`` and what was found
    instead ("2 notebooks (a.ipynb, b.ipynb), none named …", "no notebook").

    What is returned may still be a link, a pipe or a device: it is read later
    only through :func:`autograder.untrusted.read_untrusted`, which refuses those.
    A folder that is itself a link is returned as it is, for the same refusal
    (its notebook would be someone else's).
    """
    if folder.is_symlink():
        return folder, ""
    exact = folder / f"{chapter}.ipynb"
    if exact.is_file() or exact.is_symlink():
        return exact, ""
    found = sorted(p for p in folder.glob("*.ipynb") if is_visible(p))
    if len(found) == 1:
        return found[0], ""
    if not found:
        return None, f"the folder {chapter}/ holds no notebook: expected {chapter}.ipynb"
    return None, (f"the folder {chapter}/ holds {len(found)} notebooks ({_names(found)}) and none is named "
                  f"{chapter}.ipynb: which one to grade is not known (keep one, or name it {chapter}.ipynb)")


def chapter_notebook(folder: Path, chapter: str) -> Path | None:
    """``folder/<chapter>.ipynb``, or the folder's only notebook if it was renamed
    (:func:`_locate_notebook`)."""
    return _locate_notebook(folder, chapter)[0]


def display_name(name: str) -> str:
    """A folder name as readable text: undecodable bytes (a Latin-1 name from an
    LMS export, seen by Python as surrogate escapes) are read as Latin-1. Not an
    id: two folders may share a display name (:func:`student_ids`)."""
    raw = os.fsencode(name)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _readable(raw: bytes) -> str:
    """The bytes of a name as safe text: UTF-8 where it decodes, every other byte
    read as Latin-1, control and bidi characters escaped (``text.safe_text``)."""

    text = raw.decode("utf-8", "surrogateescape")
    text = "".join(chr(ord(c) - 0xDC00) if "\udc80" <= c <= "\udcff" else c for c in text)
    return safe_text(text)


_HASHED = re.compile(r"~[0-9a-f]{12}$")


def _hashed_id(raw: bytes) -> str:
    """``<readable form, cut>~<12 hex digits of sha256(raw)>``: at most
    :data:`MAX_ID_CHARS` characters and 200 bytes of UTF-8 (a file name holds 255)."""
    readable = _readable(raw)[: MAX_ID_CHARS - 13]
    while len(readable.encode("utf-8")) > 186:
        readable = readable[:-1]
    return f"{readable}~{hashlib.sha256(raw).hexdigest()[:12]}"


def student_ids(names: list[bytes]) -> dict[bytes, str]:
    """The student id of each folder name, given as bytes (``os.fsencode``).

    The rule (the module docstring): a plain UTF-8 name is its own id unless it is
    a normalisation variant of a classmate's; any other name, and every variant,
    gets ``<readable>~<hash>`` (:func:`_hashed_id`). Ids never coincide.

    Args:
        names: the folder names (or flat files' stems) of one class, as bytes.

    Returns:
        ``name -> id`` for every name.
    """
    readable = {raw: _readable(raw) for raw in names}

    def plain(raw: bytes) -> bool:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return (readable[raw] == text and text == text.strip() and 0 < len(text) <= MAX_ID_CHARS
                and not _HASHED.search(text))

    def key(raw: bytes) -> str:
        return unicodedata.normalize("NFC", readable[raw]).strip()

    groups: dict[str, list[bytes]] = {}
    for raw in names:
        groups.setdefault(key(raw), []).append(raw)
    ids = {}
    for raw in names:
        canonical = plain(raw) and readable[raw] == key(raw)
        ids[raw] = readable[raw] if plain(raw) and (canonical or len(groups[key(raw)]) == 1) else _hashed_id(raw)
    if len(set(ids.values())) != len(ids):  # pragma: no cover - only a 48-bit hash collision gets here
        raise ValueError("two student folders map to one id: " + ", ".join(sorted(map(repr, names))))
    return ids


def student_folders(submitted: Path) -> dict[str, Path]:
    """``id -> folder`` of every visible student folder under ``submitted``
    (nbgrader's ``<student>/<chapter>/`` layout), sorted by id."""
    folders = []
    for p in Path(submitted).iterdir():
        try:
            if is_visible(p) and p.is_dir():
                folders.append(p)
        except (OSError, ValueError):
            continue
    ids = student_ids([os.fsencode(p.name) for p in folders])
    return dict(sorted((ids[os.fsencode(p.name)], p) for p in folders))


def _read_folder(student: str, root: Path, chapter: str) -> Submission:
    """One student's submission of one chapter, from their folder ``root``."""
    if root.is_symlink():
        return Submission(student, chapter, root, None)  # refused when read: never someone else's work
    folder = root / chapter
    if not is_dir(folder):
        return Submission(student, chapter, None)
    path, problem = _locate_notebook(folder, chapter)
    stamp, notes = None, ()
    if not folder.is_symlink():
        try:
            stamp = _timestamp(folder)
        except Exception as exc:  # noqa: BLE001 - the student's folder: never the batch's failure
            notes = (f"timestamp.txt could not be read ({problem_text(exc)}): treated as on time",)
    return Submission(student, chapter, path, stamp, problem, notes)


def find_submissions(
    submitted: Path,
    chapters: list[str] | None = None,
    flat: str | None = None,
    book: Path = BOOK,
) -> tuple[list[str], list[Submission]]:
    """The chapters to grade and one :class:`Submission` per student × chapter.

    Args:
        submitted: nbgrader's submitted folder (``<student>/<chapter>/<chapter>.ipynb``)
            or, with ``flat``, a folder of ``<student>.ipynb`` files.
        chapters: chapter ids to grade; default: every chapter with a source
            notebook that at least one student submitted.
        flat: the chapter id of a flat folder.
        book: the folder of the source notebooks.

    Returns:
        ``(chapters, submissions)`` sorted by student id (:func:`student_ids`), then
        chapter. A student who did not submit a chapter appears with ``path=None``;
        a folder that cannot be read or graded with a ``problem``.
    """
    submitted = Path(submitted)
    if not submitted.is_dir():
        raise ValueError(f"{submitted} is not a folder of submissions")
    known = chapter_ids(book)
    if flat is not None:
        if flat not in known:
            raise ValueError(f"--flat {flat!r}: no source notebook book/{flat}/{flat}.ipynb")
        files = [p for p in sorted(submitted.glob("*.ipynb")) if is_visible(p)]
        ids = student_ids([os.fsencode(p.stem) for p in files])
        subs = sorted((Submission(ids[os.fsencode(p.stem)], flat, p) for p in files), key=lambda s: s.student)
        return [flat], subs
    folders = student_folders(submitted)
    if chapters:
        unknown = [c for c in chapters if c not in known]
        if unknown:
            raise ValueError(f"no source notebook for chapter(s) {', '.join(unknown)}; known: {', '.join(known)}")
        wanted = list(chapters)
    else:
        wanted = [c for c in known if any(is_dir(folder / c) for folder in folders.values())]
    subs = []
    for student, root in folders.items():
        for chapter in wanted:
            try:
                subs.append(_read_folder(student, root, chapter))
            except Exception as exc:  # noqa: BLE001 - one folder never stops the batch
                subs.append(Submission(student, chapter, None,
                                       problem=f"the folder could not be read ({problem_text(exc)})"))
    return wanted, subs


def file_sha256(path: Path | None) -> str | None:
    """The SHA-256 of a notebook's bytes (a submission's or a source notebook's, read as
    untrusted, at most :data:`MAX_NOTEBOOK_BYTES`): what a journal entry is keyed on and a
    submission's seed drawn from. ``None`` for no file; ``"unreadable: <why>"`` when it cannot
    be read (still a key that changes with the file's state)."""
    if path is None:
        return None
    try:
        return hashlib.sha256(read_untrusted(Path(path), MAX_NOTEBOOK_BYTES)).hexdigest()
    except NotebookError as exc:
        return f"unreadable: {exc}"
