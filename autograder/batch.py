"""Grade a class: every submission of every chapter, in parallel, resumable.

``grade_class`` walks nbgrader's submitted layout (``<student>/<chapter>/<chapter>.ipynb``,
or a flat folder of ``<student>.ipynb`` for one chapter), grades each submission
with :func:`autograder.grading.grade_submission` (student code runs in the sandbox,
never here), and writes, from this trusted process only:

* ``OUT/.journal/<student>/<chapter>.json`` — one result per submission, written
  atomically as soon as it is graded, keyed by the SHA-256 of the submission, of
  the source notebook and of the grading code, the seed and the limits. A re-run reuses every entry whose
  key is unchanged, so an interrupted run resumes where it stopped and a regrade
  of unchanged work is a no-op; ``force=True`` regrades everything;
* nbgrader's gradebook (``OUT/gradebook.db``, or an nbgrader course's own ``db_url``),
  then ``OUT/scores.csv``, ``OUT/grades.csv`` and ``OUT/feedback/<student>/<chapter>.html``,
  all rebuilt from the journal at the end, so the same results always give the same
  files and the gradebook rows are updated in place, never duplicated. The CSVs and
  the feedback are written from what the gradebook holds after the update: a hand
  grade, extra credit or comment a grader entered (the formgrader) wins over the
  checks' score, and the late penalty is nbgrader's (:mod:`autograder.gradebook`).

A broken submission (unreadable, invalid JSON, endless loop) gets its rows with
score 0 and a reason; the batch goes on.
"""
from __future__ import annotations

import concurrent.futures as cf
import csv
import hashlib
import json
import multiprocessing
import os
import secrets
import shutil
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from .release import BOOK, chapter_ids, source_notebook
from .text import score_text

__all__ = [
    "SCORE_COLUMNS",
    "GRADE_COLUMNS",
    "Submission",
    "Graded",
    "BatchReport",
    "GradebookTarget",
    "find_submissions",
    "grade_class",
    "submission_status",
    "with_hand_grades",
]

JOURNAL_VERSION = 2  # 2: scores carry their parts and notes
# score: nbgrader's Grade.score (a grader's manual score if given, else the checks'
# auto_score, plus extra credit); comment: the grader's comment on the exercise.
SCORE_COLUMNS = ["student_id", "assignment", "exercise", "grade_id", "score", "max_score", "status", "reason",
                 "parts", "notes", "auto_score", "manual_score", "extra_credit", "comment"]
# score: after hand grades and the late penalty (nbgrader export's "score");
# raw_score: before the penalty; late_seconds: past the due date (0: on time or no due date).
GRADE_COLUMNS = ["student_id", "assignment", "score", "max_score", "status", "raw_score", "late_seconds",
                 "penalty"]
# The feedback page does not read a submission larger than this (grading refuses it too).
MAX_NOTEBOOK_BYTES = 50 * 2**20


@dataclass(frozen=True)
class Submission:
    """One student's notebook for one chapter (``path`` is ``None``: not submitted)."""

    student: str
    chapter: str
    path: Path | None
    timestamp: str | None = None


@dataclass
class Graded:
    """The journaled result of one submission: one dict per graded cell
    (the fields of :class:`autograder.grading.CellScore`)."""

    submission: Submission
    scores: list[dict]
    key: dict = field(default_factory=dict)
    reused: bool = False


@dataclass(frozen=True)
class GradebookTarget:
    """Where and how the batch records its grades in nbgrader's gradebook.

    Attributes:
        url: the SQLAlchemy URL (``None``: ``OUT/gradebook.db``).
        course_id: the course id of new assignments (an nbgrader course's ``course_id``).
        duedate: sets the assignment's due date (text or ``datetime``; ``None``
            keeps the one in the gradebook).
        config: traitlets ``Config`` for nbgrader's late-penalty plugin
            (``AssignLatePenalties.plugin_class``, ``LateSubmissionPlugin.penalty_method``).
    """

    url: str | None = None
    course_id: str = "default_course"
    duedate: object = None
    config: object = None


@dataclass
class BatchReport:
    """What a run did: every result, how many were graded now and how many reused."""

    out: Path
    results: list[Graded]
    graded: int
    reused: int

    def totals(self) -> dict[tuple[str, str], tuple[float, float]]:
        """``(student, chapter) -> (score, max_score)``."""
        return {
            (g.submission.student, g.submission.chapter): (
                sum(s["score"] for s in g.scores),
                sum(s["max_score"] for s in g.scores),
            )
            for g in self.results
        }


# --------------------------------------------------------------------------- discovery


def _is_visible(path: Path) -> bool:
    return not path.name.startswith((".", "_"))


def _timestamp(folder: Path) -> str | None:
    from .grading import NotebookError, read_untrusted, safe_text

    stamp = folder / "timestamp.txt"  # written by `nbgrader collect`
    try:
        text = read_untrusted(stamp, 4096).decode("utf-8", errors="replace").strip()
    except NotebookError:
        return None
    return safe_text(text[:64]) or None


def _chapter_notebook(folder: Path, chapter: str) -> Path | None:
    """``folder/<chapter>.ipynb``, or the folder's only notebook if it was renamed.

    What is returned may still be a link, a pipe or a device: it is read later
    only through :func:`autograder.grading.read_untrusted`, which refuses those.
    A folder that is itself a link is returned as it is, for the same refusal
    (its notebook would be someone else's).
    """
    if folder.is_symlink():
        return folder
    exact = folder / f"{chapter}.ipynb"
    if exact.is_file() or exact.is_symlink():
        return exact
    found = sorted(p for p in folder.glob("*.ipynb") if _is_visible(p))
    return found[0] if len(found) == 1 else None


def display_name(name: str) -> str:
    """A folder name as text for the reports: undecodable bytes (a Latin-1 name
    from an LMS export, seen by Python as surrogate escapes) are read as Latin-1,
    so the name can be written to CSV, HTML and the gradebook."""
    raw = os.fsencode(name)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


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
        ``(chapters, submissions)`` sorted by student, then chapter. A student who
        did not submit a chapter appears with ``path=None``.
    """
    submitted = Path(submitted)
    if not submitted.is_dir():
        raise ValueError(f"{submitted} is not a folder of submissions")
    known = chapter_ids(book)
    if flat is not None:
        if flat not in known:
            raise ValueError(f"--flat {flat!r}: no source notebook book/{flat}/{flat}.ipynb")
        subs = [
            Submission(display_name(p.stem), flat, p)
            for p in sorted(submitted.glob("*.ipynb"))
            if _is_visible(p)
        ]
        return [flat], subs
    students = sorted(p.name for p in submitted.iterdir() if p.is_dir() and _is_visible(p))
    if chapters:
        unknown = [c for c in chapters if c not in known]
        if unknown:
            raise ValueError(f"no source notebook for chapter(s) {', '.join(unknown)}; known: {', '.join(known)}")
        wanted = list(chapters)
    else:
        wanted = [c for c in known if any((submitted / s / c).is_dir() for s in students)]
    subs = []
    for student in students:
        for chapter in wanted:
            folder = submitted / student / chapter
            if (submitted / student).is_symlink():
                path, stamp = submitted / student, None  # refused when read: never someone else's work
            else:
                path = _chapter_notebook(folder, chapter) if folder.is_dir() else None
                stamp = _timestamp(folder) if folder.is_dir() and not folder.is_symlink() else None
            subs.append(Submission(display_name(student), chapter, path, stamp))
    return wanted, subs


# --------------------------------------------------------------------------- journal


def _sha256(path: Path | None) -> str | None:
    if path is None:
        return None
    from .grading import NotebookError, read_untrusted

    try:
        return hashlib.sha256(read_untrusted(Path(path), MAX_NOTEBOOK_BYTES)).hexdigest()
    except NotebookError as exc:
        return f"unreadable: {exc}"


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


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _read_journal(out: Path, sub: Submission, key: dict) -> list[dict] | None:
    path = _journal_path(out, sub)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if data.get("version") != JOURNAL_VERSION or data.get("key") != key:
        return None
    return data.get("scores")


def _read_journal_entry(out: Path, sub: Submission) -> tuple[list[dict], dict] | None:
    """A journal entry whatever its key (the last grade of a student not graded now)."""
    try:
        data = json.loads(_journal_path(out, sub).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("version") != JOURNAL_VERSION or not isinstance(data.get("scores"), list):
        return None
    return data["scores"], data.get("key") or {}


def _write_journal(out: Path, graded: Graded) -> None:
    sub = graded.submission
    data = {
        "version": JOURNAL_VERSION,
        "student": sub.student,
        "chapter": sub.chapter,
        "key": graded.key,
        "scores": graded.scores,
    }
    _write_atomic(_journal_path(out, sub), json.dumps(data, indent=1, sort_keys=True) + "\n")


def _base_seed(out: Path, seed: int | None) -> int:
    """``seed`` if given, else the one this OUT folder used before, else a fresh one."""
    # A dot name: student folders never start with a dot (hidden ones are skipped),
    # so no student (not even one called "seed.json") shares this path.
    path = out / ".journal" / ".seed.json"
    if seed is None:
        try:
            return int(json.loads(path.read_text(encoding="utf-8"))["seed"])
        except (OSError, ValueError, KeyError, TypeError):
            seed = secrets.randbits(31)
    _write_atomic(path, json.dumps({"seed": int(seed)}) + "\n")
    return int(seed)


SUBMITTED_RECORD = ".submitted.json"


def _record_submitted(out: Path, submitted: Path) -> None:
    """Note in ``OUT/.journal`` which folder was graded, so that ``report OUT`` can
    read a notebook of the wrong chapter there without being told (``--submitted``)."""
    _write_atomic(out / ".journal" / SUBMITTED_RECORD,
                  json.dumps({"submitted": str(Path(submitted).resolve())}) + "\n")


def recorded_submitted(out: Path) -> Path | None:
    """The folder the last ``grade`` into ``out`` read, if it is still a folder."""
    try:
        data = json.loads((Path(out) / ".journal" / SUBMITTED_RECORD).read_text(encoding="utf-8"))
        folder = Path(data["submitted"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return folder if folder.is_dir() else None


# --------------------------------------------------------------------------- grading


GradeFn = Callable[..., list]
_worker_grade_fn: GradeFn | None = None


def _default_grade_fn() -> GradeFn:
    from .grading import grade_submission

    return grade_submission


def _as_dicts(scores) -> list[dict]:
    rows = []
    for s in scores:
        d = asdict(s) if not isinstance(s, dict) else dict(s)
        rows.append({
            "exercise": str(d["exercise"]),
            "grade_id": str(d["grade_id"]),
            "score": float(d["score"]),
            "max_score": float(d["max_score"]),
            "status": str(d["status"]),
            "reason": " ".join(str(d.get("reason") or "").split()),
            "parts": [{"name": str(p["name"]), "points": float(p["points"]), "score": float(p["score"]),
                       "message": " ".join(str(p.get("message") or "").split())}
                      for p in (d.get("parts") or [])],
            "notes": [" ".join(str(n).split()) for n in (d.get("notes") or [])],
        })
    return rows


def parts_text(row: dict) -> str:
    """``name score/points · ...`` of a score row's parts (for ``scores.csv``)."""
    return " · ".join(f"{p['name']} {score_text(p['score'])}/{score_text(p['points'])}" for p in row.get("parts") or [])


def _grade_task(task: tuple) -> list[dict]:
    """Worker entry: grade one submission; never raises for the submission's sake."""
    source, path, chapter, timeout, seed, sandbox, budget, limit_options = task
    fn = _worker_grade_fn or _default_grade_fn()
    return _as_dicts(fn(Path(source), Path(path) if path else None, chapter=chapter,
                        timeout=timeout, hidden=True, seed=seed, sandbox=sandbox, **_budget_kw(budget),
                        **limit_options))


def _budget_kw(budget: float | None) -> dict:
    """``budget=`` for the grade function only when one was set (a ``grade_fn``
    of the tests need not know the argument)."""
    return {} if budget is None else {"budget": float(budget)}


def _limit_kw(memory: int | None, disk: int | None, processes: int | None) -> dict:
    """The limit options that were set (``--memory``, ``--disk``, ``--processes``),
    as keyword arguments of the grade function and entries of the journal key:
    only those set, so that a journal written without them stays valid."""
    given = {"memory": memory, "disk": disk, "processes": processes}
    for name, value in given.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise ValueError(f"{name} must be a positive whole number ({'bytes' if name != 'processes' else 'processes'}), "
                             f"got {value!r}")
    return {name: int(value) for name, value in given.items() if value is not None}


def _init_worker(grade_fn: GradeFn | None, threads: int) -> None:
    global _worker_grade_fn
    _worker_grade_fn = grade_fn
    try:
        import torch

        torch.set_num_threads(threads)
    except Exception:  # noqa: BLE001 - torch is optional for the trusted side
        pass


def _failed_rows(source: Path, reason: str) -> list[dict]:
    """Every test cell of ``source`` at 0 (the grader itself failed on a submission)."""
    import nbformat

    nb = nbformat.read(str(source), as_version=4)
    rows = []
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade") and cell.cell_type == "code":
            grade_id = meta.get("grade_id", "")
            rows.append({
                "exercise": grade_id[5:] if grade_id.startswith("test_") else grade_id,
                "grade_id": grade_id,
                "score": 0.0,
                "max_score": float(meta.get("points", 0)),
                "status": "error",
                "reason": reason,
            })
    return rows


def grade_class(
    submitted: Path,
    out: Path,
    *,
    chapters: list[str] | None = None,
    flat: str | None = None,
    jobs: int = 1,
    timeout: float = 120.0,
    budget: float | None = None,
    memory: int | None = None,
    disk: int | None = None,
    processes: int | None = None,
    seed: int | None = None,
    force: bool = False,
    sandbox: bool = True,
    book: Path = BOOK,
    progress: bool | None = None,
    grade_fn: GradeFn | None = None,
    on_graded: Callable[[Graded], None] | None = None,
    students: list[str] | None = None,
    gradebook: GradebookTarget | None = None,
) -> BatchReport:
    """Grade every submission under ``submitted`` and write the reports under ``out``.

    Args:
        submitted: nbgrader's submitted layout, or a flat folder with ``flat``.
        out: the output folder (created; a previous run's journal there is reused).
        chapters: chapter ids to grade (default: the ones submitted).
        flat: the chapter of a flat folder of ``<student>.ipynb``.
        jobs: submissions graded at the same time (worker processes).
        timeout: wall-clock seconds for one submission's sandbox run.
        budget: wall-clock seconds for one submission over all its sandbox runs
            (default: twice ``timeout``; :func:`autograder.grading.grade_submission`).
        memory, disk, processes: limits of each sandbox run (bytes of all its
            memory, bytes of its scratch tmpfs, its processes and threads); ``None``
            keeps the defaults of :func:`autograder.sandbox.limits_for`.
        seed: base seed of the hidden checks (default: the one stored in ``out``,
            else a fresh random one, stored for resuming).
        force: regrade every submission, ignoring the journal.
        sandbox: ``False`` runs student code in a plain subprocess (NOT tamper-proof).
        book: the folder of the source notebooks.
        progress: show a tqdm bar (default: when stderr is a terminal).
        grade_fn: replaces :func:`autograder.grading.grade_submission` (tests).
        on_graded: called in this process after each submission is journaled.
        students: grade only these students (as ``nbgrader autograde --student``);
            the others keep their last journaled grade in the reports.
        gradebook: the gradebook to fill and its late-penalty settings
            (default: ``OUT/gradebook.db``, nbgrader's defaults).

    Returns:
        A :class:`BatchReport`. Raises ``KeyboardInterrupt`` after journaling what
        was finished when interrupted; a re-run resumes.
    """
    from tqdm import tqdm

    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, got {timeout}")
    if budget is not None and not budget > 0:
        raise ValueError(f"budget must be positive, got {budget}")
    limit_options = _limit_kw(memory, disk, processes)
    if gradebook is not None and gradebook.duedate is not None:
        from .gradebook import parse_duedate

        parse_duedate(gradebook.duedate)  # a bad date fails before any grading
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    wanted, subs = find_submissions(submitted, chapters, flat, book)
    if not subs:
        raise ValueError(f"no submissions found under {submitted}")
    if students is not None:
        unknown = sorted(set(students) - {s.student for s in subs})
        if unknown:
            raise ValueError(f"no submission of student(s) {', '.join(unknown)} under {submitted}")
    base_seed = _base_seed(out, seed)
    _record_submitted(out, submitted)
    sources = {c: source_notebook(c, book) for c in wanted}
    source_hash = {c: _sha256(p) for c, p in sources.items()}
    fingerprint = grader_fingerprint() if grade_fn is None else "custom"

    results: dict[Submission, Graded] = {}
    todo: list[tuple[Submission, dict, tuple]] = []
    for sub in subs:
        if students is not None and sub.student not in students:
            kept = _read_journal_entry(out, sub)
            if kept is not None:  # not graded now: the last grade stays in the reports
                results[sub] = Graded(sub, kept[0], kept[1], reused=True)
            continue
        sub_digest = _sha256(sub.path)
        sub_seed = submission_seed(base_seed, sub.student, sub.chapter, str(sub_digest))
        key = {
            "submission_sha256": sub_digest,
            "source_sha256": source_hash[sub.chapter],
            "seed": sub_seed,
            "timeout": float(timeout),
            "sandbox": bool(sandbox),
            "grader": fingerprint,
            **_budget_kw(budget),
            **limit_options,
        }
        cached = None if force else _read_journal(out, sub, key)
        if cached is not None:
            results[sub] = Graded(sub, cached, key, reused=True)
            continue
        path = sub.path
        todo.append((sub, key, (str(sources[sub.chapter]), str(path) if path else None,
                                sub.chapter, float(timeout), sub_seed, bool(sandbox), budget, limit_options)))

    def finish(sub: Submission, key: dict, rows: list[dict]) -> None:
        graded = Graded(sub, rows, key)
        _write_journal(out, graded)
        results[sub] = graded
        if on_graded is not None:
            on_graded(graded)

    bar = tqdm(total=len(todo), desc="grading", unit="nb", disable=(not sys.stderr.isatty()) if progress is None else not progress)
    try:
        if jobs == 1 or len(todo) <= 1:
            fn = grade_fn or _default_grade_fn()
            for sub, key, task in todo:
                source, path, chapter, t, s, sb, bud, lim = task
                try:
                    rows = _as_dicts(fn(Path(source), Path(path) if path else None, chapter=chapter,
                                        timeout=t, hidden=True, seed=s, sandbox=sb, **_budget_kw(bud), **lim))
                except Exception as exc:  # noqa: BLE001 - one submission never stops the batch
                    rows = _failed_rows(sources[sub.chapter], f"the grader failed: {type(exc).__name__}: {exc}")
                finish(sub, key, rows)
                bar.update(1)
        else:
            threads = max(1, (os.cpu_count() or 1) // jobs)
            ctx = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
            pool = cf.ProcessPoolExecutor(max_workers=jobs, mp_context=ctx,
                                          initializer=_init_worker, initargs=(grade_fn, threads))
            try:
                futures = {pool.submit(_grade_task, task): (sub, key) for sub, key, task in todo}
                pending = set(futures)
                while pending:
                    # A wait with a timeout, not as_completed: Ctrl-C may be delivered to one of the
                    # pool's helper threads, and then only a main thread that wakes up by itself
                    # runs the KeyboardInterrupt (a wait without one would block until a submission
                    # finishes, which may be never).
                    done, pending = cf.wait(pending, timeout=0.5, return_when=cf.FIRST_COMPLETED)
                    for future in done:
                        sub, key = futures[future]
                        try:
                            rows = future.result()
                        except Exception as exc:  # noqa: BLE001
                            rows = _failed_rows(sources[sub.chapter],
                                                f"the grader failed: {type(exc).__name__}: {exc}")
                        finish(sub, key, rows)
                        bar.update(1)
            except BaseException:
                # Interrupted (Ctrl-C, or a signal to this process alone): stop now. What finished is
                # journaled; the submissions in flight are graded again on resume, so their workers are
                # ended rather than waited for (up to a whole budget each).
                workers = list((getattr(pool, "_processes", None) or {}).values())  # shutdown forgets them
                pool.shutdown(wait=False, cancel_futures=True)
                for worker in workers:
                    worker.terminate()
                raise
            pool.shutdown(wait=True)
    finally:
        bar.close()

    ordered = [results[s] for s in subs if s in results]
    write_reports(out, ordered, sources, gradebook)
    graded_now = sum(1 for g in ordered if not g.reused)
    return BatchReport(out, ordered, graded_now, len(ordered) - graded_now)


# --------------------------------------------------------------------------- reports


def submission_status(graded: Graded) -> str:
    """One word for a student × chapter: ``not submitted``, ``invalid`` (nothing
    could be read), ``cheat`` (a tampering attempt was caught), ``complete`` (every
    check passed) or ``incomplete``."""
    statuses = [s["status"] for s in graded.scores]
    if graded.submission.path is None:
        return "not submitted"
    if statuses and all(s == "invalid" for s in statuses):
        return "invalid"
    if "cheat" in statuses:
        return "cheat"
    if statuses and all(s == "passed" for s in statuses):
        return "complete"
    return "incomplete"


def _cell(text: str) -> str:
    """A text cell that a spreadsheet will not run as a formula (a student's exception
    message can reach ``reason``): a leading ``= + - @`` gets a quote in front."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _write_csv(path: Path, columns: list[str], rows: list[list]) -> None:
    import io

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(rows)
    _write_atomic(path, buf.getvalue())


def _optional(x) -> str:
    """A number that may be unset (a gradebook field): ``""`` when ``None``."""
    return "" if x is None else score_text(x)


def with_hand_grades(graded: Graded, recorded) -> list[dict]:
    """The score rows of ``graded`` as the gradebook holds them now: ``score`` is
    nbgrader's ``Grade.score`` (manual score if a grader gave one, plus extra
    credit); ``auto_score``, ``manual_score``, ``extra_credit`` and ``comment``
    (the grader's) are added. ``recorded`` is the submission's
    :class:`autograder.gradebook.Recorded`, or ``None`` (nothing recorded)."""
    rows = []
    for s in graded.scores:
        row = dict(s, auto_score=s["score"], manual_score=None, extra_credit=None, comment="")
        held = recorded.grades.get(s["grade_id"]) if recorded is not None else None
        if held is not None:
            row.update(manual_score=held["manual_score"], extra_credit=held["extra_credit"], score=held["score"])
        if recorded is not None:
            row["comment"] = recorded.comments.get(s["exercise"], "")
        rows.append(row)
    return rows


def write_reports(out: Path, results: list[Graded], sources: dict[str, Path],
                  gradebook: GradebookTarget | None = None) -> None:
    """Fill the gradebook, then write ``scores.csv``, ``grades.csv`` and the feedback
    pages from the results and what the gradebook holds (hand grades, late
    penalties). Deterministic: the same results and gradebook give the same files."""
    from .feedback import render_feedback, student_code
    from .gradebook import write_gradebook

    target = gradebook or GradebookTarget()
    recorded = write_gradebook(out / "gradebook.db", sources, results, url=target.url, course_id=target.course_id,
                               duedate=target.duedate, config=target.config)

    score_rows, grade_rows = [], []
    for g in results:
        sub = g.submission
        held = recorded.get((sub.student, sub.chapter))
        rows = with_hand_grades(g, held)
        for s in rows:
            score_rows.append([_cell(sub.student), sub.chapter, s["exercise"], s["grade_id"], score_text(s["score"]),
                               score_text(s["max_score"]), s["status"], _cell(s["reason"]), _cell(parts_text(s)),
                               _cell(" | ".join(s.get("notes") or [])), score_text(s["auto_score"]),
                               _optional(s["manual_score"]), _optional(s["extra_credit"]),
                               _cell(" ".join(s["comment"].split()))])
        raw = sum(s["score"] for s in rows)
        penalty = held.penalty if held is not None else 0.0
        late = held.late_seconds if held is not None else 0.0
        grade_rows.append([_cell(sub.student), sub.chapter, score_text(max(0.0, raw - penalty)),
                           score_text(sum(s["max_score"] for s in rows)), submission_status(g), score_text(raw),
                           score_text(late), score_text(penalty)])
    _write_csv(out / "scores.csv", SCORE_COLUMNS, score_rows)
    _write_csv(out / "grades.csv", GRADE_COLUMNS, grade_rows)

    feedback = out / "feedback"
    for g in results:
        sub = g.submission
        page = feedback / sub.student / f"{sub.chapter}.html"
        if sub.path is None:
            if page.exists():
                page.unlink()
            continue
        held = recorded.get((sub.student, sub.chapter))
        html = render_feedback(sub.student, sub.chapter, with_hand_grades(g, held),
                               student_code(sub.path, MAX_NOTEBOOK_BYTES), submission_status(g),
                               late_seconds=held.late_seconds if held is not None else 0.0,
                               penalty=held.penalty if held is not None else 0.0)
        if not page.is_file() or page.read_text(encoding="utf-8") != html:
            _write_atomic(page, html)


def clean_outputs(out: Path) -> None:
    """Remove a previous run's reports and journal from ``out`` (``--force`` keeps them)."""
    for name in ("scores.csv", "grades.csv", "gradebook.db"):
        (out / name).unlink(missing_ok=True)
    for name in ("feedback", ".journal"):
        shutil.rmtree(out / name, ignore_errors=True)
