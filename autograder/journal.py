"""The journal of a batch: one result per submission, on disk, written as soon as it is graded.

``OUT/.journal/<student>/<chapter>.json`` holds a submission's rows (one dict per
graded cell, the fields of :class:`autograder.grading.CellScore`) under a key: the
SHA-256 of the submission, of the source notebook and of the grading code, the seed
and the limits. A re-run reuses every entry whose key is unchanged, so an interrupted
run resumes where it stopped and a regrade of unchanged work is a no-op. Every file
the batch writes from it (gradebook rows, CSVs, feedback pages) is rebuilt from the
journal, so the same results always give the same files. Entries are written
atomically (:func:`write_atomic`): a run stopped mid-write leaves the previous entry
or none, never half of one.
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from .submissions import Submission

__all__ = ["JOURNAL_VERSION", "SUBMITTED_RECORD", "Graded", "grader_fingerprint", "submission_seed", "journal_seed",
           "read_journal", "read_journal_entry", "write_journal", "write_atomic", "record_submitted",
           "recorded_submitted"]

JOURNAL_VERSION = 2  # 2: scores carry their parts and notes


@dataclass
class Graded:
    """The journaled result of one submission: one dict per graded cell
    (the fields of :class:`autograder.grading.CellScore`)."""

    submission: Submission
    scores: list[dict]
    key: dict = field(default_factory=dict)
    reused: bool = False
    problems: list[str] = field(default_factory=list)  # a step of this run that failed for it (journal, …)


def grader_fingerprint() -> str:
    """SHA-256 of the code that decides a grade: the checks, the grading pipeline and
    the reference package. A journal entry made by other code is not reused."""
    here = Path(__file__).resolve().parent
    files = sorted((here / "checks").glob("*.py")) + [here / n for n in ("grading.py", "runner.py", "sandbox.py")]
    files += sorted((here.parent / "solutions").rglob("*.py"))
    h = hashlib.sha256()
    for path in files:
        if path.is_file():
            h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def submission_seed(base_seed: int, student: str, chapter: str, content: str = "") -> int:
    """The hidden checks' seed of one submission: fresh per class run (``base_seed``),
    different for every student and chapter, and for every version of the
    submission (``content``: its digest) — an unchanged submission regrades
    identically, a changed one meets fresh hidden inputs, so inputs that leaked
    once (through an error message, say) are worth nothing in a resubmission."""
    digest = hashlib.sha256(f"{base_seed}:{student}:{chapter}:{content}".encode()).hexdigest()
    return int(digest[:8], 16)


def _journal_path(out: Path, sub: Submission) -> Path:
    return out / ".journal" / sub.student / f"{sub.chapter}.json"


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def read_journal(out: Path, sub: Submission, key: dict) -> list[dict] | None:
    path = _journal_path(out, sub)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if data.get("version") != JOURNAL_VERSION or data.get("key") != key:
        return None
    return data.get("scores")


def read_journal_entry(out: Path, sub: Submission) -> tuple[list[dict], dict] | None:
    """A journal entry whatever its key (the last grade of a student not graded now)."""
    try:
        data = json.loads(_journal_path(out, sub).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("version") != JOURNAL_VERSION or not isinstance(data.get("scores"), list):
        return None
    return data["scores"], data.get("key") or {}


def write_journal(out: Path, graded: Graded) -> None:
    sub = graded.submission
    data = {
        "version": JOURNAL_VERSION,
        "student": sub.student,
        "chapter": sub.chapter,
        "key": graded.key,
        "scores": graded.scores,
    }
    write_atomic(_journal_path(out, sub), json.dumps(data, indent=1, sort_keys=True) + "\n")


def journal_seed(out: Path, seed: int | None) -> int:
    """``seed`` if given, else the one this OUT folder used before, else a fresh one."""
    # A dot name: student folders never start with a dot (hidden ones are skipped),
    # so no student (not even one called "seed.json") shares this path.
    path = out / ".journal" / ".seed.json"
    if seed is None:
        try:
            return int(json.loads(path.read_text(encoding="utf-8"))["seed"])
        except (OSError, ValueError, KeyError, TypeError):
            seed = secrets.randbits(31)
    write_atomic(path, json.dumps({"seed": int(seed)}) + "\n")
    return int(seed)


def record_submitted(out: Path, submitted: Path) -> None:
    """Note in ``OUT/.journal`` which folder was graded, so that ``report OUT`` can
    read a notebook of the wrong chapter there without being told (``--submitted``)."""
    write_atomic(out / ".journal" / SUBMITTED_RECORD,
                  json.dumps({"submitted": str(Path(submitted).resolve())}) + "\n")


def recorded_submitted(out: Path) -> Path | None:
    """The folder the last ``grade`` into ``out`` read, if it is still a folder."""
    try:
        data = json.loads((Path(out) / ".journal" / SUBMITTED_RECORD).read_text(encoding="utf-8"))
        folder = Path(data["submitted"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return folder if folder.is_dir() else None


SUBMITTED_RECORD = ".submitted.json"
