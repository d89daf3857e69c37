"""Grades out: the gradebook-import CSV of an LMS, one column per chapter.

``python -m autograder export OUT --lms canvas --roster roster.csv --to canvas.csv`` reads
``OUT/results.json`` (:class:`autograder.results.ClassResults`: each chapter's final score,
after hand grades and the late penalty) and writes the file the LMS imports:

* **Canvas** (Grades → Import): the columns of Canvas's own gradebook export, ``Student``
  (``Last, First``), ``ID`` (the Canvas user id, which the import matches on), ``SIS User
  ID``, ``SIS Login ID``, ``Section``, then one column per chapter named
  ``<Assignment> (<assignment id>)`` — the id of the Canvas assignment (``--assignment-id
  CHAPTER=ID``); a column without an id makes Canvas create a new assignment of that
  name, as its documentation says. The row under the header is ``Points Possible``, as in
  Canvas's export. Every student row needs a Canvas ``ID``, so the roster is required.
* **Moodle** (Grades → Import → CSV file): a header row, an identifying column
  (``Email address``, mapped to the user field "Email address" in the import form; ``ID
  number`` beside it) and one column per chapter named by its title, to map to the grade
  item; values are plain numbers with a ``.`` decimal point. Students are identified by
  email, so every exported row needs one.

Nothing is dropped silently: :class:`Export` lists the graded students the roster does
not know (not written: the LMS could not match them), the roster's students without any
grade (written with blank cells, or 0 with ``missing="zero"``), and roster rows without
the id the LMS matches on. The CLI prints them all.

Pushing to Canvas through its API is optional (``export --lms canvas --push``, with
``canvasapi``): :func:`canvas_grade_data` is what one bulk update per assignment sends
(``grade_data[<user id>][posted_grade]``, Canvas's "Grade or comment on multiple
submissions"), :func:`push_canvas` sends it, or with ``dry_run`` only says what it would
send, contacting nothing.
"""
from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

from .results import ClassResults, SubmissionGrade, SubmissionStatus
from .roster import Roster, Student
from .text import csv_cell, score_text

__all__ = ["LMS_FORMATS", "CANVAS_FIXED", "Export", "ExportError", "lms_export", "parse_assignment_ids",
           "canvas_column", "MOODLE_FIXED", "canvas_grade_data", "push_canvas", "connect_canvas"]

LMS_FORMATS = ("canvas", "moodle")
CANVAS_FIXED = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
CANVAS_POINTS_ROW = "    Points Possible"  # as Canvas's export writes it (the import skips it)
MOODLE_FIXED = ["First name", "Last name", "ID number", "Email address"]
NOT_GRADED = (SubmissionStatus.NOT_SUBMITTED,)


class ExportError(ValueError):
    """An export that cannot be written (no roster for Canvas, a bad assignment id...)."""


@dataclass
class Export:
    """An LMS file's text and what the caller must be told.

    Attributes:
        text: the CSV.
        rows: student rows written.
        unknown: graded folder ids the roster does not know (not in the file).
        missing: roster students with no graded chapter (blank or zero cells).
        unmatched: roster students left out because they lack the id the LMS matches on.
        blank: ``(student, chapter)`` cells left blank (no submission).
    """

    text: str
    rows: int = 0
    unknown: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)
    blank: list[tuple[str, str]] = field(default_factory=list)

    def problems(self) -> list[str]:
        """One line per kind of student the LMS will not see graded (empty: all fine)."""
        lines = []
        if self.unknown:
            lines.append(f"{len(self.unknown)} graded student(s) not in the roster, NOT exported: "
                         + ", ".join(self.unknown))
        if self.unmatched:
            lines.append(f"{len(self.unmatched)} roster student(s) without the id this LMS matches on, NOT "
                         "exported: " + ", ".join(self.unmatched))
        if self.missing:
            lines.append(f"{len(self.missing)} roster student(s) with no graded submission: " + ", ".join(self.missing))
        return lines


_ASSIGNMENT = re.compile(r"^(?P<chapter>[^=]+)=(?P<id>\d+)$")


def parse_assignment_ids(items: list[str] | None) -> dict[str, str]:
    """``["04_self_attention=1234", ...]`` -> ``{"04_self_attention": "1234"}``.

    Raises:
        ExportError: an item is not ``CHAPTER=DIGITS``.
    """
    ids = {}
    for item in items or []:
        m = _ASSIGNMENT.match(item.strip())
        if not m:
            raise ExportError(f"--assignment-id {item!r}: expected CHAPTER=ID with the LMS's numeric "
                              "assignment id, e.g. 04_self_attention=48213")
        ids[m["chapter"].strip()] = m["id"]
    return ids


def canvas_column(title: str, assignment_id: str | None) -> str:
    """A Canvas assignment column: ``Title (id)``, or ``Title`` for a new assignment."""
    return f"{title} ({assignment_id})" if assignment_id else title


def _csv(rows: list[list[str]]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def _cell(grade: SubmissionGrade | None, missing: str) -> str | None:
    """A chapter's cell: the final score, or ``None`` (blank) / ``"0"`` when nothing was graded."""
    if grade is None or grade.status in NOT_GRADED:
        return "0" if missing == "zero" else None
    return score_text(grade.score)


def lms_export(results: ClassResults, lms: str, roster: Roster | None, *, chapters: list[str] | None = None,
               assignment_ids: dict[str, str] | None = None, titles: dict[str, str] | None = None,
               missing: str = "blank") -> Export:
    """The gradebook-import CSV of ``lms`` for ``results``.

    Args:
        results: a run's results (``OUT/results.json``).
        lms: ``canvas`` or ``moodle``.
        roster: the class roster (required: the LMS matches students by its ids).
        chapters: the chapter columns, in order (default: every chapter in ``results``).
        assignment_ids: chapter -> the LMS's assignment id (Canvas's ``(id)`` in the column name).
        titles: chapter -> the assignment's name in the LMS (default: the chapter id).
        missing: ``blank`` (a chapter not submitted leaves the LMS's cell as it is) or ``zero``.

    Raises:
        ExportError: an unknown LMS, no roster, or no chapter.
    """
    if lms not in LMS_FORMATS:
        raise ExportError(f"--lms {lms!r}: expected one of {', '.join(LMS_FORMATS)}")
    if roster is None:
        raise ExportError(f"--lms {lms} needs --roster: the LMS matches students by its own ids "
                          "(Canvas: ID; Moodle: email), which only the roster knows")
    if missing not in ("blank", "zero"):
        raise ExportError(f"missing={missing!r}: expected 'blank' or 'zero'")
    grades = {(s.student, s.chapter): s for s in results.submissions}
    chapters = list(chapters or sorted({s.chapter for s in results.submissions}))
    if not chapters:
        raise ExportError("no chapter to export: results.json holds no graded chapter")
    titles = titles or {}
    ids = assignment_ids or {}
    max_points = {c: max((s.max_score for s in results.submissions if s.chapter == c), default=0.0)
                  for c in chapters}
    graded_students = sorted({s.student for s in results.submissions if s.status not in NOT_GRADED})
    _, unknown, absent = roster.join(graded_students)
    out = Export("", unknown=unknown, missing=[s.id for s in absent])

    def cells(student: Student) -> list[str]:
        row = []
        for c in chapters:
            value = _cell(grades.get((student.id, c)), missing)
            if value is None:
                out.blank.append((student.id, c))
            row.append(value or "")
        return row

    if lms == "canvas":
        header = CANVAS_FIXED + [canvas_column(titles.get(c, c), ids.get(c)) for c in chapters]
        rows = [header, [CANVAS_POINTS_ROW, "", "", "", ""] + [score_text(max_points[c]) for c in chapters]]
        for student in roster.students:
            if not student.lms_id:
                out.unmatched.append(student.id)
                continue
            rows.append([csv_cell(student.sortable_name), student.lms_id, student.sis_id, student.login,
                         csv_cell(student.section)] + cells(student))
    else:
        header = MOODLE_FIXED + [titles.get(c, c) for c in chapters]
        rows = [header]
        for student in roster.students:
            if not student.email:
                out.unmatched.append(student.id)
                continue
            first, _, last = student.name.rpartition(" ") if " " in student.name else (student.name, "", "")
            rows.append([csv_cell(first), csv_cell(last), student.sis_id, student.email] + cells(student))
    out.text = _csv(rows)
    out.rows = len(rows) - (2 if lms == "canvas" else 1)
    return out


def write_export(export: Export, dest: Path) -> Path:
    """Write ``export.text`` to ``dest`` (UTF-8, the encoding both LMSs read)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(export.text, encoding="utf-8")
    return dest


def canvas_grade_data(results: ClassResults, roster: Roster, chapters: list[str], assignment_ids: dict[str, str],
                      missing: str = "blank") -> dict[str, dict[str, dict[str, str]]]:
    """``assignment id -> {Canvas user id: {"posted_grade": score}}``: the same cells as the
    import file (a blank cell is not sent).

    Raises:
        ExportError: a chapter without an assignment id (an update needs one).
    """
    lacking = [c for c in chapters if c not in assignment_ids]
    if lacking:
        raise ExportError(f"--push needs the Canvas assignment id of every chapter: missing for {', '.join(lacking)} "
                          "(--assignment-id CHAPTER=ID)")
    grades = {(s.student, s.chapter): s for s in results.submissions}
    data: dict[str, dict[str, dict[str, str]]] = {}
    for c in chapters:
        cells = {}
        for student in roster.students:
            value = _cell(grades.get((student.id, c)), missing)
            if student.lms_id and value is not None:
                cells[student.lms_id] = {"posted_grade": value}
        data[assignment_ids[c]] = cells
    return data


def push_canvas(grade_data: dict[str, dict[str, dict[str, str]]], course, *, dry_run: bool = True) -> list[str]:
    """Send each assignment's grades in one bulk update (``Assignment.submissions_bulk_update``).

    Args:
        grade_data: from :func:`canvas_grade_data`.
        course: a ``canvasapi`` ``Course`` (anything with ``get_assignment(id)``); unused
            with ``dry_run``.
        dry_run: only return what would be sent.

    Returns:
        One line per assignment: what was (or would be) sent, and Canvas's job id.
    """
    lines = []
    for assignment_id, cells in grade_data.items():
        shown = ", ".join(f"{uid}={v['posted_grade']}" for uid, v in sorted(cells.items()))
        if dry_run:
            lines.append(f"dry run: assignment {assignment_id} would get {len(cells)} grade(s): {shown}")
            continue
        progress = course.get_assignment(int(assignment_id)).submissions_bulk_update(grade_data=cells)
        lines.append(f"assignment {assignment_id}: {len(cells)} grade(s) sent (Canvas job "
                     f"{getattr(progress, 'id', '?')}, {getattr(progress, 'workflow_state', 'queued')})")
    return lines


def connect_canvas(url: str, token: str, course_id: int):
    """The ``canvasapi`` course object (``pip install canvasapi``).

    Raises:
        ExportError: canvasapi is not installed.
    """
    try:
        from canvasapi import Canvas  # optional: only pushing grades needs it
    except ImportError:
        raise ExportError("--push needs canvasapi (pip install canvasapi); or import the CSV by hand") from None
    return Canvas(url, token).get_course(course_id)
