"""Submissions in: an LMS's download turned into nbgrader's ``submitted/<student>/<chapter>/``.

``python -m autograder collect --from canvas submissions.zip --chapter CH --submitted DIR``
and ``collect --from gradescope EXPORT`` (the zip of "Export Submissions", or its folder)
write, per student, ``DIR/<id>/<CH>/<CH>.ipynb`` and ``timestamp.txt`` (the submission
time, in the format ``nbgrader submit`` writes: ``2026-11-20 16:59:00.000000 UTC``), so
``grade DIR`` and ``autograde`` see what ``nbgrader collect`` would have made.

What each download holds:

* **Canvas** ("Download Submissions"): one zip of files named
  ``<name>_<user id>_<submission id>_<file name>``, with ``late_`` before the user id
  when Canvas marked the submission late, and ``-1``, ``-2``… added to the file name
  when a student uploaded a file of the same name again. Canvas writes no submission
  time in it but the zip entry's date, which is taken as the time (in ``zip_timezone``,
  UTC by default). The student is the roster's row whose ``lms_id`` is the user id.
* **Gradescope** ("Export Submissions"): ``submission_metadata.yml`` beside one folder
  ``submission_<id>/`` per active submission; the metadata gives the submitters (name,
  SID, email), ``:created_at:`` and the earlier attempts (``:history:``). The student is
  found in the roster by SID, then email, then name; a group submission goes to every
  member.

Every file of the download gets one line in the log (``DIR/.collect/<source>_<chapter>.csv``,
and :class:`Collected`): ``collected``, or why not — not a notebook, a name that is not
the LMS's pattern, a student the roster does not know, an older attempt, several
notebooks of which none is ``<chapter>.ipynb``, or a notebook already in place. Nothing
is overwritten: an identical notebook already there is ``unchanged``; a different one is
kept and the new one is refused, with the reason (collect into an empty folder, or move
the old one away, to take it).
"""
from __future__ import annotations

import csv
import datetime
import hashlib
import io
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from .roster import Roster

__all__ = ["SOURCES", "Collected", "FileOutcome", "CollectError", "collect", "nbgrader_timestamp",
           "parse_canvas_name", "LOG_COLUMNS"]

SOURCES = ("canvas", "gradescope")
LOG_COLUMNS = ["file", "student", "outcome", "reason", "submitted_at", "late"]
# Canvas: <name>_[late_]<user id>_<submission id>_<file name> (the name part has no "_<digits>_")
_CANVAS = re.compile(r"^(?P<name>.+?)_(?:(?P<late>late)_)?(?P<user>\d+)_(?P<sub>\d+)_(?P<file>.+)$")
_CANVAS_COPY = re.compile(r"^(?P<stem>.+?)-(?P<n>\d+)(?P<ext>\.ipynb)$")
MAX_NOTEBOOK_BYTES = 20_000_000  # as grading.MAX_NOTEBOOK_BYTES: a bigger file is not a notebook we grade


class CollectError(ValueError):
    """A download that cannot be read at all (not a zip, no metadata...)."""


@dataclass
class FileOutcome:
    """What happened to one file of the download."""

    file: str
    student: str = ""
    outcome: str = "skipped"  # collected, unchanged, skipped, refused
    reason: str = ""
    submitted_at: str = ""
    late: bool = False


@dataclass
class Collected:
    """Everything ``collect`` did, one :class:`FileOutcome` per file of the download."""

    chapter: str
    files: list[FileOutcome] = field(default_factory=list)
    log: Path | None = None

    def by_outcome(self, outcome: str) -> list[FileOutcome]:
        return [f for f in self.files if f.outcome == outcome]

    def summary(self) -> str:
        counts = {k: len(self.by_outcome(k)) for k in ("collected", "unchanged", "skipped", "refused")}
        return (f"{self.chapter}: {counts['collected']} collected, {counts['unchanged']} already there, "
                f"{counts['skipped']} skipped, {counts['refused']} refused (not overwritten)")


def nbgrader_timestamp(when: datetime.datetime) -> str:
    """``when`` as ``nbgrader submit`` writes ``timestamp.txt``: ``%Y-%m-%d %H:%M:%S.%f %Z`` in UTC."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def parse_canvas_name(name: str) -> dict | None:
    """The parts of a Canvas download's file name (``None``: not Canvas's pattern).

    Returns:
        ``{"name", "late", "user", "submission", "file", "copy"}``: ``copy`` is the ``-N``
        Canvas added to a re-uploaded file's name (0 when none), ``file`` without it.
    """
    m = _CANVAS.match(name)
    if not m:
        return None
    original, copy = m["file"], 0
    c = _CANVAS_COPY.match(original)
    if c:
        original, copy = c["stem"] + c["ext"], int(c["n"])
    return {"name": m["name"], "late": bool(m["late"]), "user": m["user"], "submission": int(m["sub"]),
            "file": original, "copy": copy}


@dataclass
class _Candidate:
    """One notebook of one student, before the choice of which to keep."""

    file: str
    student: str
    data: bytes
    when: datetime.datetime | None
    late: bool
    original: str  # the file name the student uploaded
    rank: tuple  # larger = newer attempt
    outcome: FileOutcome  # the file's line in the log, filled in as it is decided
    note: str = ""


def _choose(chapter: str, candidates: list[_Candidate]) -> _Candidate | None:
    """The notebook to keep among one student's: the newest attempt; within it the file
    named ``<chapter>.ipynb``, else the only notebook. The others get their reason."""
    newest = max(c.rank[0] for c in candidates)
    for c in candidates:
        if c.rank[0] != newest:
            c.outcome.reason = "an older attempt of this student (a newer one is in the download)"
    current = [c for c in candidates if c.rank[0] == newest]
    named = [c for c in current if c.original == f"{chapter}.ipynb"]
    pool = named or current
    if len(pool) > 1 and len({c.original for c in pool}) > 1:
        for c in pool:
            c.outcome.reason = (f"{len(pool)} notebooks in this student's submission and none is named "
                                f"{chapter}.ipynb: which one to grade is not known")
        return None
    chosen = max(pool, key=lambda c: c.rank)
    for c in current:
        if c is not chosen and not c.outcome.reason:
            c.outcome.reason = (f"a re-upload of {c.original} replaced it (Canvas numbered the copies)"
                                if c.original == chosen.original else f"not {chapter}.ipynb; "
                                f"{chosen.original} was taken")
    return chosen


def _place(submitted: Path, chapter: str, chosen: _Candidate) -> None:
    """Write the chosen notebook and its timestamp, never over a different one."""
    folder = submitted / chosen.student / chapter
    target = folder / f"{chapter}.ipynb"
    out = chosen.outcome
    if target.exists() or target.is_symlink():
        try:
            same = target.is_file() and hashlib.sha256(target.read_bytes()).digest() == \
                hashlib.sha256(chosen.data).digest()
        except OSError:
            same = False
        if same:
            out.outcome, out.reason = "unchanged", f"the same notebook is already at {target}"
        else:
            out.outcome = "refused"
            out.reason = (f"a different notebook is already at {target}: not overwritten (move it away, "
                          "or collect into an empty folder, to take this one)")
        return
    folder.mkdir(parents=True, exist_ok=True)
    target.write_bytes(chosen.data)
    if chosen.when is not None:
        (folder / "timestamp.txt").write_text(nbgrader_timestamp(chosen.when) + "\n", encoding="utf-8")
    out.outcome = "collected"
    out.reason = chosen.note


def _zip_time(info: zipfile.ZipInfo, zone: datetime.tzinfo) -> datetime.datetime:
    return datetime.datetime(*info.date_time, tzinfo=zone)


def _canvas(zip_path: Path, chapter: str, roster: Roster | None, zone: datetime.tzinfo
            ) -> tuple[list[FileOutcome], list[_Candidate]]:
    try:
        archive = zipfile.ZipFile(zip_path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise CollectError(f"{zip_path} is not a zip file ({exc}): expected Canvas's 'Download Submissions' zip") \
            from None
    outcomes, candidates = [], []
    with archive:
        for info in archive.infolist():
            if info.is_dir():
                continue
            name = PurePosixPath(info.filename).name
            out = FileOutcome(info.filename)
            outcomes.append(out)
            parts = parse_canvas_name(name)
            if parts is None:
                out.reason = "not Canvas's <name>_<user id>_<submission id>_<file> pattern"
                continue
            out.late = parts["late"]
            out.submitted_at = nbgrader_timestamp(_zip_time(info, zone))
            if not parts["file"].endswith(".ipynb"):
                out.reason = "not a notebook (.ipynb)"
                continue
            if info.file_size > MAX_NOTEBOOK_BYTES:
                out.reason = f"{info.file_size} bytes: larger than a notebook the grader reads"
                continue
            if roster is None:
                student, note = parts["user"], "no roster: the folder is the Canvas user id"
            else:
                row = roster.find(lms_id=parts["user"])
                if row is None:
                    out.reason = f"Canvas user {parts['user']} ({parts['name']}) is not in the roster (lms_id)"
                    continue
                student, note = row.id, ""
            out.student = student
            if parts["late"]:
                note = "; ".join(x for x in (note, "Canvas marked it late") if x)
            candidates.append(_Candidate(info.filename, student, archive.read(info), _zip_time(info, zone),
                                         parts["late"], parts["file"], (parts["submission"], parts["copy"]),
                                         out, note))
    return outcomes, candidates


def _yaml_time(value) -> datetime.datetime | None:
    if isinstance(value, datetime.datetime):
        return value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)
    if isinstance(value, str):
        # nbgrader (SQLAlchemy: heavy) only where a YAML time needs its parser
        from nbgrader.utils import parse_utc

        try:
            return parse_utc(value).replace(tzinfo=datetime.timezone.utc)
        except (ValueError, OverflowError):
            return None
    return None


def _key(data: dict, name: str):
    """A Gradescope metadata field, whether written ``:name:`` (Ruby symbols) or ``name``."""
    return data.get(f":{name}", data.get(name)) if isinstance(data, dict) else None


class _Tree:
    """A Gradescope export, zipped or unpacked: its metadata and each submission's files."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.files: dict[str, bytes | Path] = {}
        if self.path.is_dir():
            for p in sorted(self.path.rglob("*")):
                if p.is_file():
                    self.files[p.relative_to(self.path).as_posix()] = p
        else:
            try:
                with zipfile.ZipFile(self.path) as z:
                    for info in z.infolist():
                        if not info.is_dir() and info.file_size <= MAX_NOTEBOOK_BYTES:
                            self.files[info.filename] = z.read(info)
            except (OSError, zipfile.BadZipFile) as exc:
                raise CollectError(f"{self.path} is neither a folder nor a zip ({exc}): expected Gradescope's "
                                   "'Export Submissions'") from None
        metas = [k for k in self.files if PurePosixPath(k).name == "submission_metadata.yml"]
        if len(metas) != 1:
            raise CollectError(f"{self.path}: expected one submission_metadata.yml, found {len(metas)}")
        self.root = str(PurePosixPath(metas[0]).parent)

    def read(self, key: str) -> bytes:
        value = self.files[key]
        return value.read_bytes() if isinstance(value, Path) else value

    def under(self, folder: str) -> list[str]:
        prefix = (folder if self.root == "." else f"{self.root}/{folder}") + "/"
        return [k for k in self.files if k.startswith(prefix)]


def _gradescope(export: Path, chapter: str, roster: Roster | None) -> tuple[list[FileOutcome], list[_Candidate]]:
    import yaml  # PyYAML, installed with jupyter-book; imported here as only this reader needs it

    tree = _Tree(export)
    meta_key = "submission_metadata.yml" if tree.root == "." else f"{tree.root}/submission_metadata.yml"
    try:
        metadata = yaml.safe_load(tree.read(meta_key).decode("utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise CollectError(f"{meta_key} cannot be read ({exc})") from None
    if not isinstance(metadata, dict):
        raise CollectError(f"{meta_key}: expected a mapping of submission folders")
    outcomes, candidates = [], []
    listed = set()
    for folder, info in sorted(metadata.items(), key=lambda kv: str(kv[0])):
        folder = str(folder)
        listed.add(folder)
        files = tree.under(folder)
        when = _yaml_time(_key(info, "created_at"))
        submitters = _key(info, "submitters") or []
        notebooks = [k for k in files if k.endswith(".ipynb")]
        for k in files:
            if not k.endswith(".ipynb"):
                outcomes.append(FileOutcome(k, reason="not a notebook (.ipynb)"))
        if not notebooks:
            outcomes.append(FileOutcome(f"{folder}/", reason="no notebook in this submission"))
            continue
        history = _key(info, "history") or []
        attempt = (len(history) if isinstance(history, list) else 0,)
        for member in submitters:
            sid, email, name = (str(_key(member, k) or "") for k in ("sid", "email", "name"))
            if roster is None:
                student, note = sid or email, "no roster: the folder is the Gradescope SID"
            else:
                row = roster.find(sis_id=sid, email=email, name=name)
                student, note = (row.id, "") if row is not None else ("", "")
            for k in notebooks:
                out = FileOutcome(k, submitted_at=nbgrader_timestamp(when) if when else "")
                outcomes.append(out)
                if not student:
                    out.reason = f"submitter {name or '?'} (SID {sid or '?'}, {email or 'no email'}) is not in the roster"
                    continue
                out.student = student
                group = f"group submission of {len(submitters)}" if len(submitters) > 1 else ""
                extra = "; ".join(x for x in (note, group, f"attempt {attempt[0] + 1}" if attempt[0] else "") if x)
                candidates.append(_Candidate(k, student, tree.read(k), when, False, PurePosixPath(k).name,
                                             attempt + (0,), out, extra))
    for k in tree.files:
        inside = tree.root == "." or k.startswith(tree.root + "/")
        top = PurePosixPath(k[len(tree.root) + 1:] if tree.root != "." and inside else k).parts[0]
        if top != "submission_metadata.yml" and top not in listed:
            outcomes.append(FileOutcome(k, reason=f"{top} is not listed in submission_metadata.yml"))
    return outcomes, candidates


def collect(source: str, download: Path, submitted: Path, chapter: str, roster: Roster | None = None, *,
            zip_timezone: datetime.tzinfo = datetime.timezone.utc) -> Collected:
    """Turn an LMS download into ``submitted/<student>/<chapter>/``.

    Args:
        source: ``canvas`` or ``gradescope``.
        download: Canvas's zip; Gradescope's export (zip or folder).
        submitted: nbgrader's submitted folder (created).
        chapter: the chapter the download is of.
        roster: maps the LMS's ids to folder ids (without one: the LMS's id is the folder).
        zip_timezone: the zone of a Canvas zip's entry dates.

    Returns:
        A :class:`Collected`; its log is also written to ``submitted/.collect/<source>_<chapter>.csv``.

    Raises:
        CollectError: an unknown source, or a download that cannot be read at all.
    """
    if source not in SOURCES:
        raise CollectError(f"--from {source!r}: expected one of {', '.join(SOURCES)}")
    download, submitted = Path(download), Path(submitted)
    if source == "canvas":
        outcomes, candidates = _canvas(download, chapter, roster, zip_timezone)
    else:
        outcomes, candidates = _gradescope(download, chapter, roster)
    by_student: dict[str, list[_Candidate]] = {}
    for c in candidates:
        by_student.setdefault(c.student, []).append(c)
    for student in sorted(by_student):
        chosen = _choose(chapter, by_student[student])
        if chosen is not None:
            _place(submitted, chapter, chosen)
    result = Collected(chapter, outcomes)
    log = submitted / ".collect" / f"{source}_{chapter}.csv"
    log.parent.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(LOG_COLUMNS)
    for f in outcomes:
        writer.writerow([f.file, f.student, f.outcome, f.reason, f.submitted_at, "yes" if f.late else ""])
    log.write_text(buf.getvalue(), encoding="utf-8")
    result.log = log
    return result
