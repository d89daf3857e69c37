"""A class roster: who the students are, by the folder id the grader knows them by.

The grader names a student by the folder of their submission (``submitted/<id>/``,
:mod:`autograder.submissions`). An LMS names them otherwise (Canvas: a user id, an SIS
id, a login; Moodle: an email or an id number; Gradescope: an SID). The roster joins
the two, once, for every output: the LMS gradebook files (:mod:`autograder.lms`), the
submissions collected from a download (:mod:`autograder.collect`) and the class report.

The file is a CSV with a header row; the column names are matched without regard to
case, spaces or underscores, and the aliases below are accepted:

============  =====================================================  ========
column        what                                                   required
============  =====================================================  ========
``id``        the folder id (``student``, ``folder``, ``student_id``) yes
``name``      the student's full name, as the LMS shows it           no
``email``     their email address                                    no
``lms_id``    the LMS's user id (Canvas ``ID``; ``canvas_id``)       no
``sis_id``    the SIS user id (Canvas ``SIS User ID``, Gradescope SID) no
``login``     the SIS login id (Canvas ``SIS Login ID``, a username) no
``section``   the section                                            no
============  =====================================================  ========

Rows are checked as they are read: an empty or duplicated folder id, or an LMS id,
SIS id or email that two students share, is a :class:`RosterError` naming the file and
line. Nothing is dropped: a student of the roster without grades, or graded without a
roster row, is reported by whoever joins them (:meth:`Roster.join`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .text import read_csv

__all__ = ["Student", "Roster", "RosterError", "read_roster"]

# canonical column -> the header names accepted for it (normalised: lower case, no spaces or _)
COLUMNS = {
    "id": ("id", "student", "folder", "studentid", "folderid"),
    "name": ("name", "fullname", "studentname"),
    "email": ("email", "emailaddress", "mail"),
    "lms_id": ("lmsid", "canvasid", "userid", "lmsuserid"),
    "sis_id": ("sisid", "sisuserid", "sid", "idnumber"),
    "login": ("login", "sisloginid", "loginid", "username"),
    "section": ("section", "sections"),
}


class RosterError(ValueError):
    """A roster file that cannot be used (the message names the file and line)."""


@dataclass(frozen=True)
class Student:
    """One row of the roster.

    Attributes:
        id: the folder id the grader knows the student by.
        name, email, lms_id, sis_id, login, section: as the roster gives them ("" when absent).
    """

    id: str
    name: str = ""
    email: str = ""
    lms_id: str = ""
    sis_id: str = ""
    login: str = ""
    section: str = ""

    @property
    def sortable_name(self) -> str:
        """``Last, First`` (Canvas's ``Student`` column), from ``name``; the id without a name."""
        parts = self.name.split()
        if len(parts) < 2:
            return self.name or self.id
        return f"{parts[-1]}, {' '.join(parts[:-1])}"


def _norm(header: str) -> str:
    return re.sub(r"[\s_\-]+", "", header.strip().lower())


@dataclass
class Roster:
    """The students of a class, by folder id, with look-ups by the LMS's ids."""

    students: list[Student] = field(default_factory=list)
    source: str = ""

    def __post_init__(self) -> None:
        self._by_id = {s.id: s for s in self.students}

    def __contains__(self, student_id: str) -> bool:
        return student_id in self._by_id

    def __len__(self) -> int:
        return len(self.students)

    def get(self, student_id: str) -> Student | None:
        """The row of a folder id, or ``None``."""
        return self._by_id.get(student_id)

    def find(self, *, lms_id: str = "", sis_id: str = "", email: str = "", login: str = "",
             name: str = "") -> Student | None:
        """The student an LMS's download names, by the first id given that matches:
        LMS id, SIS id, email (case-insensitive), login, then name (case- and
        space-insensitive, and only when exactly one student has it)."""
        for attr, value in (("lms_id", lms_id), ("sis_id", sis_id), ("login", login)):
            if value:
                hits = [s for s in self.students if getattr(s, attr) == str(value)]
                if len(hits) == 1:
                    return hits[0]
        if email:
            hits = [s for s in self.students if s.email and s.email.lower() == email.strip().lower()]
            if len(hits) == 1:
                return hits[0]
        if name:
            def key(text: str) -> str:
                return "".join(ch for ch in text.lower() if ch.isalnum())

            hits = [s for s in self.students if s.name and key(s.name) == key(name)]
            if len(hits) == 1:
                return hits[0]
        return None

    def join(self, graded: list[str]) -> tuple[list[Student], list[str], list[Student]]:
        """Match the folder ids that have grades with the roster.

        Args:
            graded: the folder ids found in the results.

        Returns:
            ``(rows, unknown, missing)``: the roster's students in its order followed by
            nothing else; the graded ids the roster does not know (sorted); the roster's
            students with no grade at all.
        """
        seen = set(graded)
        unknown = sorted(seen - set(self._by_id))
        missing = [s for s in self.students if s.id not in seen]
        return list(self.students), unknown, missing


def read_roster(path: Path | str) -> Roster:
    """Read a roster CSV (see the module's table of columns).

    Raises:
        RosterError: the file cannot be read, has no ``id`` column, or a row has an
            empty or duplicated id, or shares an LMS id, SIS id or email with another.
    """
    header, rows = read_csv(path, "roster", RosterError, header="a header row with an 'id' column")
    where: dict[str, int] = {}
    for i, name in enumerate(header):
        for canonical, aliases in COLUMNS.items():
            if _norm(name) in aliases and canonical not in where:
                where[canonical] = i
    if "id" not in where:
        raise RosterError(f"roster {path}: no 'id' column (the student's folder id) in the header "
                          f"{', '.join(header)!s}")
    students: list[Student] = []
    owners: dict[tuple[str, str], int] = {}
    for line, row in rows:
        values = {c: (row[i].strip() if i < len(row) else "") for c, i in where.items()}
        if not values["id"]:
            raise RosterError(f"roster {path}, line {line}: the id (folder) is empty")
        for attr in ("id", "lms_id", "sis_id", "email"):
            value = values.get(attr, "")
            if not value:
                continue
            key = (attr, value.lower() if attr == "email" else value)
            if key in owners:
                raise RosterError(f"roster {path}, line {line}: {attr} {value!r} is already on line {owners[key]}")
            owners[key] = line
        students.append(Student(**values))
    return Roster(students, str(path))
