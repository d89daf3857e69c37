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
import stat
from dataclasses import dataclass, field
from pathlib import Path

from .submissions import Submission

__all__ = ["JOURNAL_VERSION", "SUBMITTED_RECORD", "SEED_VARIABLE", "SeedError", "Graded", "grader_fingerprint",
           "submission_seed", "journal_seed", "hidden_seed",
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
    """Write ``text`` to ``path`` in UTF-8, atomically (a temporary file, then a rename).

    Never fails on content: a character UTF-8 cannot hold (a lone surrogate that
    slipped past :func:`autograder.text.safe_text`) is written as its escape
    (``\\udcff``), which is also how JSON spells it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8", errors="backslashreplace", newline="") as fh:
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


# Where a grading run finds its secret base seed when no --seed-file is given.
SEED_VARIABLE = "AUTOGRADER_SEED"


class SeedError(ValueError):
    """A seed that cannot be used: a seed file others can read, not a whole number (the message says which)."""


def hidden_seed(seed: int | None = None, seed_file: str | os.PathLike | None = None,
                environ: dict | None = None) -> tuple[int | None, str | None]:
    """The base seed of the hidden cases, from where no other process can read it.

    A process's command line is world-readable (``/proc/PID/cmdline``), so the secret
    seed comes from a file only its owner can read (``--seed-file``), or from the
    environment (:data:`SEED_VARIABLE`, readable by the same user only); ``--seed N``
    is still accepted, with a warning.

    Args:
        seed: ``--seed`` (``None``: not given).
        seed_file: ``--seed-file``: a file holding the seed, whose mode gives no access
            to group or other (``chmod 600``).
        environ: where :data:`SEED_VARIABLE` is looked up (default ``os.environ``).

    Returns:
        ``(seed, warning)``: the seed (``None``: none given, the run draws or reuses
        one) and a line to print, or ``None``.

    Raises:
        SeedError: both options given; the file is missing, readable by group or other,
            or does not hold a whole number; the variable is not a whole number.
    """
    environ = os.environ if environ is None else environ
    if seed is not None and seed_file is not None:
        raise SeedError("give --seed-file or --seed, not both")
    if seed_file is not None:
        path = Path(seed_file)
        try:
            mode = path.stat().st_mode
            if mode & 0o077:
                raise SeedError(f"--seed-file {path} has mode {stat.S_IMODE(mode):04o}: a seed file must give no "
                                f"access to group or other (chmod 600 {path})")
            text = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise SeedError(f"--seed-file {path} cannot be read ({exc.strerror or exc})") from None
        return _whole(text, f"--seed-file {path}"), None
    if seed is not None:
        return int(seed), (f"warning: --seed {seed} is visible to every process on this machine "
                           f"(/proc/PID/cmdline); give it with --seed-file (mode 600) or {SEED_VARIABLE}")
    text = environ.get(SEED_VARIABLE, "").strip()
    return (_whole(text, SEED_VARIABLE), None) if text else (None, None)


def _whole(text: str, where: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise SeedError(f"{where}: the seed must be a whole number, found {text[:20]!r}") from None


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
