"""The journal of a batch: one result per submission, on disk, written as soon as it is graded.

``OUT/.journal/<student>/<chapter>.json`` holds a submission's scores (one
:class:`~autograder.scores.ExerciseScore` per graded cell, as the checks gave it, written
and read with its one codec, :meth:`~autograder.scores.ExerciseScore.to_dict`) and what
grading found about the notebook itself (``wrong_chapter``: the chapter it really holds),
under a key: the SHA-256 of the submission and of the source notebook, the grader
(:func:`autograder.fingerprint.grader_fingerprint`: the code and reference that judge),
the seed and the run's settings. One pair of functions writes and reads an
entry (:func:`entry_text`, :func:`parse_entry`), with its version
(:data:`JOURNAL_VERSION`): an entry of another version is refused with a
:class:`JournalError` that says so, and the batch grades that submission again. A re-run reuses every entry whose key is unchanged, so an interrupted
run resumes where it stopped and a regrade of unchanged work is a no-op. Every file
the batch writes from it (gradebook rows, CSVs, feedback pages) is rebuilt from the
journal, so the same results always give the same files. Entries are written
atomically (:func:`autograder.files.write_atomic`): a run stopped mid-write leaves the previous entry
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

from .files import write_atomic
from .scores import ExerciseScore, ScoreError, Status, SubmissionStatus
from .submissions import Submission

__all__ = ["JOURNAL_VERSION", "SEED_VARIABLE", "SeedError", "JournalError", "Graded", "JournalEntry",
           "submission_seed", "submission_status", "journal_seed", "stored_seed", "seed_digest", "hidden_seed",
           "entry_text", "parse_entry",
           "read_journal", "read_journal_entry", "write_journal"]

# 4: the scores are ExerciseScore records (student, chapter, status among scores.Status);
# 3: the chapter a notebook of another chapter holds (wrong_chapter), found while grading;
# 2: scores carry their parts and notes.
JOURNAL_VERSION = 4


class JournalError(ValueError):
    """A journal entry that cannot be used: not JSON, of another version, or without
    its fields (the message names the file and what was found)."""


@dataclass
class Graded:
    """The journaled result of one submission: one :class:`~autograder.scores.ExerciseScore`
    per graded cell, as the checks gave it (hand grades are the gradebook's: ``batch.with_hand_grades``)."""

    submission: Submission
    scores: list[ExerciseScore]
    key: dict = field(default_factory=dict)
    reused: bool = False
    problems: list[str] = field(default_factory=list)  # a step of this run that failed for it (journal, …)
    # The chapter the notebook really holds when it is another one (NotebookScores.wrong_chapter).
    wrong_chapter: str | None = None

    @property
    def status(self) -> SubmissionStatus:
        """What grading found for the submission as a whole (:func:`submission_status`)."""
        return submission_status(self)


def submission_status(graded: Graded) -> SubmissionStatus:
    """What grading found for a student × chapter: ``not submitted``, ``invalid`` (nothing
    could be read), ``cheat`` (a tampering attempt was caught), ``complete`` (every
    check passed) or ``incomplete``."""
    statuses = [s.status for s in graded.scores]
    if graded.submission.problem:
        return SubmissionStatus.INVALID
    if graded.submission.path is None:
        return SubmissionStatus.NOT_SUBMITTED
    if statuses and all(s == Status.INVALID for s in statuses):
        return SubmissionStatus.INVALID
    if Status.CHEAT in statuses:
        return SubmissionStatus.CHEAT
    if statuses and all(s == Status.PASSED for s in statuses):
        return SubmissionStatus.COMPLETE
    return SubmissionStatus.INCOMPLETE


@dataclass(frozen=True)
class JournalEntry:
    """What a journal entry holds: the graded cells' scores, the key they were graded
    under, and the chapter the notebook really holds when it is another one."""

    scores: list[ExerciseScore]
    key: dict
    wrong_chapter: str | None = None


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


def entry_text(graded: Graded) -> str:
    """The text of ``graded``'s journal entry (read back by :func:`parse_entry`)."""
    sub = graded.submission
    data = {
        "version": JOURNAL_VERSION,
        "student": sub.student,
        "chapter": sub.chapter,
        "key": graded.key,
        "scores": [s.to_dict() for s in graded.scores],
        "wrong_chapter": graded.wrong_chapter,
    }
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def parse_entry(text: str, where: str = "a journal entry") -> JournalEntry:
    """Read :func:`entry_text`'s text.

    Raises:
        JournalError: not JSON, of another :data:`JOURNAL_VERSION`, or a field missing
            or of the wrong type, a score among them (the message names ``where``).
    """
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise JournalError(f"{where} is not JSON ({exc})") from None
    found = data.get("version") if isinstance(data, dict) else type(data).__name__
    if found != JOURNAL_VERSION:
        raise JournalError(f"{where} is of journal version {found!r}, this grader reads version "
                           f"{JOURNAL_VERSION}: its submission is graded again")
    scores, key, wrong = data.get("scores"), data.get("key"), data.get("wrong_chapter")
    if not isinstance(scores, list) or not isinstance(key, dict) or not (wrong is None or isinstance(wrong, str)):
        raise JournalError(f"{where}: its scores, key or wrong_chapter are missing or of the wrong type")
    try:
        return JournalEntry([ExerciseScore.from_dict(s) for s in scores], key, wrong)
    except ScoreError as exc:
        raise JournalError(f"{where}: {exc}") from None


def read_journal_entry(out: Path, sub: Submission) -> JournalEntry | None:
    """``sub``'s journal entry in ``out`` whatever its key (``None``: there is none).

    Raises:
        JournalError: the entry cannot be read or is of another version (:func:`parse_entry`).
    """
    path = _journal_path(out, sub)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise JournalError(f"{path} cannot be read ({exc})") from None
    return parse_entry(text, str(path))


def read_journal(out: Path, sub: Submission, key: dict) -> JournalEntry | None:
    """``sub``'s journal entry when it was made under ``key`` (``None``: none, another
    key, or an entry that cannot be read: the submission is graded again)."""
    try:
        entry = read_journal_entry(out, sub)
    except JournalError:
        return None
    return entry if entry is not None and entry.key == key else None


def write_journal(out: Path, graded: Graded) -> None:
    """Write ``graded``'s entry, atomically."""
    write_atomic(_journal_path(out, graded.submission), entry_text(graded))


def _seed_path(out: Path) -> Path:
    # A dot name: student folders never start with a dot (hidden ones are skipped),
    # so no student (not even one called "seed.json") shares this path.
    return Path(out) / ".journal" / ".seed.json"


def stored_seed(out: Path) -> int | None:
    """The base seed the run into ``out`` used (``None``: none kept, or unreadable)."""
    try:
        return int(json.loads(_seed_path(out).read_text(encoding="utf-8"))["seed"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def journal_seed(out: Path, seed: int | None) -> int:
    """``seed`` if given, else the one this OUT folder used before, else a fresh one
    (kept in ``out`` for resuming, readable by its owner only)."""
    if seed is None:
        seed = stored_seed(out)
    if seed is None:
        seed = secrets.randbits(31)
    path = _seed_path(out)
    write_atomic(path, json.dumps({"seed": int(seed)}) + "\n")
    path.chmod(0o600)
    return int(seed)


def seed_digest(seed: int) -> str:
    """What a file others read may hold of a base seed (a shard's manifest): a digest that
    tells two seeds apart and gives neither away."""
    return hashlib.sha256(f"autograder base seed:{int(seed)}".encode()).hexdigest()


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
