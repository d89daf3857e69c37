"""Extensions and late days: who may hand a chapter in after its due date, and by how much.

Two sources, applied by ``grade`` and ``autograde`` through nbgrader's own per-student
extension (``SubmittedAssignment.extension``, what ``Gradebook.grant_extension`` sets),
so that ``total_seconds_late``, nbgrader's late-penalty plugin, ``grades.csv``'s
``late_seconds``/``penalty`` and the formgrader all see the student's own due date:

* ``extensions.csv`` (``--extensions``): one row per granted extension, with a header
  ``student,chapter,due`` (``due`` as ``--duedate`` takes it: ``2026-11-27 17:00:00 UTC``).
  The extension is the new due date minus the chapter's due date (none when earlier).
* a late-day budget (``--late-days N``): each student has N whole days for the whole
  term. Chapters are taken in the order of their due dates; a submission still late after
  its extension spends ``ceil(late / 24 h)`` days when that many are left, and is then
  on time; when fewer are left it spends none and is late as usual (nbgrader's policy
  decides the penalty). Spending is recomputed from the gradebook's timestamps on every
  run, over every chapter recorded in it, so a regrade never spends a day twice.

:func:`open_extensions` answers the release's question: chapter N+1's student package
carries chapter N's reference answers, so ``release`` refuses while a student may still
hand in an earlier chapter, and names them (``--allow-open-extensions`` overrides).
"""
from __future__ import annotations

import datetime
import math
import re
from dataclasses import dataclass
from pathlib import Path

from .text import read_csv

__all__ = ["parse_duedate", "Extension", "Granted", "ExtensionsError", "read_extensions", "grant", "open_extensions", "DAY"]


def parse_duedate(value: str | datetime.datetime) -> datetime.datetime:
    """A due date as nbgrader stores it (naive UTC), from text such as
    ``"2026-11-20 17:00:00 Europe/Berlin"`` or ``"2026-11-20T17:00:00+01:00"``
    (nbgrader's ``parse_utc``; no zone means UTC; the date written YYYY-MM-DD) or
    a ``datetime``.

    Raises:
        ValueError: the text is not a date.
    """
    from nbgrader.utils import parse_utc  # deferred: nbgrader is slow to import

    if isinstance(value, str) and not re.search(r"\d{4}-\d{1,2}-\d{1,2}", value):
        # dateutil would read "friday" as the next Friday: ask for the date itself
        raise ValueError(f"due date {value!r}: expected a date and time such as '2026-11-20 17:00:00 UTC'")
    try:
        parsed = parse_utc(value)
    except (ValueError, TypeError, OverflowError) as exc:
        raise ValueError(f"due date {value!r}: expected a date and time such as "
                         f"'2026-11-20 17:00:00 UTC' ({exc})") from None
    if not isinstance(parsed, datetime.datetime):
        raise ValueError(f"due date {value!r}: expected a date and time such as '2026-11-20 17:00:00 UTC'")
    return parsed


DAY = 86400.0


class ExtensionsError(ValueError):
    """An extensions file that cannot be used (the message names the file and line)."""


@dataclass(frozen=True)
class Extension:
    """One granted extension: ``student`` may hand in ``chapter`` until ``due`` (naive UTC)."""

    student: str
    chapter: str
    due: datetime.datetime
    line: int = 0


@dataclass
class Granted:
    """What a student × chapter was given (``Recorded.extension_seconds`` etc.).

    Attributes:
        extension_seconds: the whole extension recorded in the gradebook (file + late days).
        late_days_used: late days this chapter spent.
        late_days_left: the student's budget left after this chapter (``None``: no budget).
    """

    extension_seconds: float = 0.0
    late_days_used: int = 0
    late_days_left: int | None = None


def read_extensions(path: Path | str) -> list[Extension]:
    """Read ``extensions.csv`` (``student,chapter,due``).

    Raises:
        ExtensionsError: unreadable, a missing column, an empty field, a due date that is
            not a date, or the same student and chapter twice (each names the line).
    """
    header, rows = read_csv(path, "extensions file", ExtensionsError, header="the header student,chapter,due")
    fields = [f.strip().lower() for f in header]
    if not {"student", "chapter", "due"} <= set(fields):
        raise ExtensionsError(f"{path}: expected the header student,chapter,due, found {','.join(fields) or 'nothing'}")
    column = {name: fields.index(name) for name in ("student", "chapter", "due")}
    found: dict[tuple[str, str], int] = {}
    out = []
    for line, row in rows:
        student, chapter, due = (row[column[k]].strip() if column[k] < len(row) else "" for k in ("student", "chapter", "due"))
        if not (student and chapter and due):
            raise ExtensionsError(f"{path}, line {line}: student, chapter and due are all needed")
        try:
            when = parse_duedate(due)
        except ValueError as exc:
            raise ExtensionsError(f"{path}, line {line}: {exc}") from None
        if (student, chapter) in found:
            raise ExtensionsError(f"{path}, line {line}: {student} already has an extension on {chapter} "
                                  f"(line {found[student, chapter]}): keep one")
        found[student, chapter] = line
        out.append(Extension(student, chapter, when, line))
    return out


def grant(gb, extensions: list[Extension] | None, late_days: int | None) -> tuple[dict[tuple[str, str], Granted],
                                                                                 list[str]]:
    """Record every extension and the late days spent in an open nbgrader ``Gradebook``.

    Every submission in the gradebook (all chapters, all runs) gets its extension set
    anew: the file's, plus the late days it spends (see the module's rules).

    Args:
        gb: an ``nbgrader.api.Gradebook``.
        extensions: from :func:`read_extensions` (``None``: none).
        late_days: the budget per student (``None``: no budget).

    Returns:
        ``((student, chapter) -> Granted, notes)``: notes name the extensions that could
        not apply (a chapter without a due date, no such submission).
    """
    if late_days is not None and late_days < 0:
        raise ExtensionsError(f"--late-days {late_days}: expected 0 or more days")
    by_key = {(e.student, e.chapter): e for e in extensions or []}
    notes = []
    submissions = []
    for assignment in gb.assignments:
        for sub in assignment.submissions:
            submissions.append(sub)
    known = {(s.student.id, s.assignment.name) for s in submissions}
    for key, ext in sorted(by_key.items()):
        if key not in known:
            notes.append(f"extension of {ext.student} on {ext.chapter} (line {ext.line}): no such submission "
                         "graded yet (kept for when it is)")
    granted: dict[tuple[str, str], Granted] = {}
    left: dict[str, int] = {}
    far = datetime.datetime.max
    for sub in sorted(submissions, key=lambda s: (s.assignment.duedate or far, s.assignment.name, s.student.id)):
        student, chapter = sub.student.id, sub.assignment.name
        due = sub.assignment.duedate
        ext = by_key.get((student, chapter))
        seconds = 0.0
        if ext is not None:
            if due is None:
                notes.append(f"extension of {student} on {chapter} (line {ext.line}) not applied: {chapter} has no "
                             "due date (grade --duedate)")
            else:
                seconds = max(0.0, (ext.due - due).total_seconds())
        used = 0
        if late_days is not None and due is not None and sub.timestamp is not None:
            remaining = left.setdefault(student, late_days)
            late = (sub.timestamp - due).total_seconds() - seconds
            if late > 0:
                need = math.ceil(late / DAY)
                if need <= remaining:
                    used = need
                    seconds += need * DAY
                    left[student] = remaining - need
        sub.extension = datetime.timedelta(seconds=seconds) if seconds > 0 else None
        granted[(student, chapter)] = Granted(seconds, used, left.get(student, late_days)
                                              if late_days is not None else None)
    try:
        gb.db.commit()
    except Exception:
        gb.db.rollback()
        raise
    return granted, notes


def open_extensions(extensions: list[Extension], chapters: list[str], order: list[str],
                    now: datetime.datetime | None = None) -> dict[str, list[Extension]]:
    """The extensions still open on a chapter before each of ``chapters``.

    Args:
        extensions: the granted extensions.
        chapters: the chapters about to be released.
        order: every chapter id, in the book's order.
        now: the time (naive UTC; default now).

    Returns:
        ``released chapter -> the open extensions (due after now) on earlier chapters``,
        only for the chapters that have some.
    """
    now = now or datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    rank = {c: i for i, c in enumerate(order)}
    found = {}
    for chapter in chapters:
        before = [e for e in extensions if e.due > now and e.chapter in rank and chapter in rank
                  and rank[e.chapter] < rank[chapter]]
        if before:
            found[chapter] = sorted(before, key=lambda e: (e.chapter, e.student))
    return found
