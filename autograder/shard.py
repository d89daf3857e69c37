"""Grade a class in N shards on N machines, then merge them into one result.

A class too large for one machine is split by student: ``grade SUBMITTED --out OUT_I
--shard I/N`` grades the students whose :func:`shard_of` is ``I`` (a stable hash of
the student id, so a late student moves no one else), with the ordinary batch
machinery (:func:`autograder.batch.grade_class`: sandbox, journal, resume), and
writes ``OUT_I/shard.json`` last, once every one of its submissions is journaled:

* ``shard``: ``{"index": I, "count": N}``;
* ``class``: every student found under ``SUBMITTED`` when the shard ran (the roster),
  the graded chapters, ``flat``, and the absolute ``submitted`` folder;
* ``settings``: the base seed's digest (:func:`autograder.journal.seed_digest`: the seed
  itself stays in the shard's journal, readable by its owner only) and the options that
  reach a grade (timeout, budget, limits, sandbox, isolation, due date);
* ``code``: the grader's fingerprint (:func:`autograder.fingerprint.grader_fingerprint`,
  the checks, the reference and the code that judges: the ``grader`` of every journal
  key) and the SHA-256 of each chapter's source notebook;
* ``graded``: one entry per submission of its students (an empty, doubled or
  unreadable folder included): student, chapter, the submission's SHA-256, the text
  of its ``timestamp.txt`` and the journal key it was graded under.

``merge OUT_1 … OUT_N --out OUT`` (:func:`merge_shards`) refuses, with the reason, shards
that are not all of one split (different N, an index twice, an index missing), that
were graded by different code, checks, seed or settings, or whose rosters show a
student that the owning shard did not grade (a late submission: rerun that shard).
It then reads each submission's journal entry from its shard, checks that the file
under ``SUBMITTED`` still has the graded SHA-256 and its ``timestamp.txt`` the graded
text (it decides the late penalty), writes the entries into
``OUT/.journal`` and calls the batch's own report writer
(:func:`autograder.batch.write_reports`): ``gradebook.db``, ``scores.csv``,
``grades.csv`` and ``feedback/`` are what one ``grade`` run over the whole class
writes, and ``report OUT`` works on the result. A shard that failed is simply run
again (it resumes from its journal) and the merge repeated.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from . import batch, journal, submissions
from .batch import BatchReport, grade_class
from .book import BOOK
from .files import write_atomic
from .fingerprint import ROOT, grader_fingerprint
from .journal import seed_digest
from .results import begin_run, end_run
from .run_settings import RunSettings
from .submissions import find_submissions

__all__ = [
    "SHARD_FILE",
    "ShardError",
    "parse_shard",
    "shard_of",
    "code_digests",
    "grade_shard",
    "read_shard",
    "isolation_of",
    "merge_shards",
]

SHARD_FILE = "shard.json"
# 4: the seed's digest, not the seed; 3: the grader is the journal's fingerprint; 2: every submission journaled,
# its timestamp.txt
SHARD_FORMAT = 4
# Where an engine puts a job's index (``--shard auto/N``), first found wins.
INDEX_VARIABLES = ("JOB_COMPLETION_INDEX", "SLURM_ARRAY_TASK_ID", "AUTOGRADER_SHARD_INDEX")


class ShardError(ValueError):
    """Shards that cannot be merged, or a shard option that cannot be used (the message says why)."""


@dataclass(frozen=True)
class Shard:
    """One part of a split: ``index`` in ``0 … count-1``."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str, environ: dict | None = None) -> Shard:
    """``"I/N"`` (0 ≤ I < N), or ``"auto/N"``: I from the engine's environment.

    Args:
        text: the ``--shard`` value.
        environ: where ``auto`` looks (default ``os.environ``): the first set of
            ``JOB_COMPLETION_INDEX`` (a Kubernetes Indexed Job), ``SLURM_ARRAY_TASK_ID``
            (a Slurm job array submitted with ``--array=0-<N-1>``), ``AUTOGRADER_SHARD_INDEX``.

    Returns:
        The :class:`Shard`. Raises :class:`ShardError` naming what was wrong.
    """
    environ = os.environ if environ is None else environ
    head, sep, tail = str(text).partition("/")
    try:
        count = int(tail)
    except ValueError:
        raise ShardError(f"--shard {text!r}: expected I/N (e.g. 0/4) or auto/N") from None
    if not sep or count < 1:
        raise ShardError(f"--shard {text!r}: expected I/N with N ≥ 1 shards, e.g. 0/4")
    if head.strip() == "auto":
        found = [(name, environ[name]) for name in INDEX_VARIABLES if environ.get(name, "").strip()]
        if not found:
            raise ShardError(f"--shard {text}: none of {', '.join(INDEX_VARIABLES)} is set; give the index, "
                             "e.g. --shard 0/4")
        name, value = found[0]
        source = f"{name}={value!r}"
    else:
        value, source = head, f"--shard {text}"
    try:
        index = int(value)
    except ValueError:
        raise ShardError(f"{source}: the shard index must be a whole number") from None
    if not 0 <= index < count:
        raise ShardError(f"{source}: the shard index must be in 0…{count - 1} (shards are numbered from 0; "
                         "a Slurm array for N shards is --array=0-<N-1>)")
    return Shard(index, count)


def shard_of(student: str, count: int) -> int:
    """The shard of a student among ``count``: the first 8 bytes of the SHA-256 of its
    id, modulo ``count``. It depends on the student alone, never on the list."""
    raw = str(student).encode("utf-8", errors="surrogateescape")
    return int.from_bytes(hashlib.sha256(raw).digest()[:8], "big") % int(count)


def code_digests(sources: dict[str, Path], root: Path = ROOT) -> dict:
    """What decides a grade, besides the submissions and the settings.

    Args:
        sources: chapter → source notebook.
        root: the repository (its ``autograder`` and ``solutions`` folders).

    Returns:
        ``{"grader": …, "sources": {chapter: …}}``: the grader's fingerprint
        (:func:`autograder.fingerprint.grader_fingerprint`, the same as every journal
        key's ``grader``) and each source notebook's SHA-256 (its setup, points and
        test cells).
    """
    return {
        "grader": grader_fingerprint(root),
        "sources": {c: hashlib.sha256(Path(p).read_bytes()).hexdigest() for c, p in sorted(sources.items())},
    }


def _write_json(path: Path, data: dict) -> None:
    write_atomic(path, json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n")


def grade_shard(submitted: Path, out: Path, shard: Shard, *, settings: RunSettings,
                chapters: list[str] | None = None, flat: str | None = None, book: Path = BOOK,
                isolation: str | None = None, **options):
    """Grade shard ``shard`` of the class under ``submitted`` into ``out``.

    Args:
        submitted, out, chapters, flat, book: as :func:`autograder.batch.grade_class`.
        shard: which part (:func:`parse_shard`).
        settings: the run's :class:`~autograder.grading.RunSettings`, the same for every
            shard; its ``seed`` is required (shards graded with different seeds would draw
            different hidden cases).
        isolation: how student code was kept apart (recorded; ``None``: from ``settings``).
        options: the other keyword arguments of ``grade_class`` (jobs, force, progress,
            gradebook, grade_fn).

    Returns:
        The shard's :class:`autograder.batch.BatchReport` (its own students only).
    """
    if settings.seed is None:
        raise ShardError("--shard needs the base seed, the same for every shard (--seed-file PATH, mode 600, or "
                         "AUTOGRADER_SEED): each shard must draw the same hidden cases as one run over the whole "
                         "class")
    out = Path(out)
    (out / SHARD_FILE).unlink(missing_ok=True)  # written again only when this shard is complete
    wanted, subs = find_submissions(submitted, chapters, flat, book)
    if not subs:
        raise ValueError(f"no submissions found under {submitted}")
    roster = sorted({s.student for s in subs})
    mine = [s for s in roster if shard_of(s, shard.count) == shard.index]
    report = grade_class(submitted, out, chapters=wanted if flat is None else None, flat=flat, book=book,
                         settings=settings, students=mine, **options)
    own = set(mine)
    results = [g for g in report.results if g.submission.student in own]
    sources = {c: (Path(book) / c / f"{c}.ipynb") for c in wanted}
    gradebook = options.get("gradebook")
    duedate = getattr(gradebook, "duedate", None)
    manifest = {
        "format": SHARD_FORMAT,
        "shard": {"index": shard.index, "count": shard.count},
        "class": {"submitted": str(Path(submitted).resolve()), "chapters": wanted, "flat": flat,
                  "roster": roster},
        "settings": {
            "seed_sha256": seed_digest(settings.seed),
            "isolation": isolation or ("bubblewrap" if settings.sandbox else "none"),
            "duedate": None if duedate is None else str(duedate),
        },
        "code": code_digests(sources),
        "graded": [{"student": g.submission.student, "chapter": g.submission.chapter,
                    "submission_sha256": g.key.get("submission_sha256"), "timestamp": g.submission.timestamp,
                    "key": g.key} for g in results],
    }
    _write_json(out / SHARD_FILE, manifest)
    return BatchReport(out, results, sum(1 for g in results if not g.reused),
                       sum(1 for g in results if g.reused))


def read_shard(out: Path) -> dict:
    """The manifest of a finished shard, or :class:`ShardError` saying why there is none."""
    path = Path(out) / SHARD_FILE
    if not Path(out).is_dir():
        raise ShardError(f"{out}: no such folder")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ShardError(f"{out} has no {SHARD_FILE}: it is not the output of `grade --shard I/N`, or that shard "
                         "did not finish (run it again: it resumes from its journal)") from None
    except (OSError, ValueError) as exc:
        raise ShardError(f"{path} cannot be read: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != SHARD_FORMAT:
        raise ShardError(f"{path}: not a shard manifest of format {SHARD_FORMAT} (written by another version?)")
    try:
        index, count = int(data["shard"]["index"]), int(data["shard"]["count"])
        data["class"]["roster"], data["class"]["chapters"], data["settings"]["seed_sha256"], data["code"]["grader"]
        list(data["graded"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ShardError(f"{path}: incomplete shard manifest ({type(exc).__name__}: {exc})") from None
    data["shard"] = {"index": index, "count": count}
    return data


def _same(manifests: list[tuple[Path, dict]], what: str, get, advice: str) -> None:
    first_out, first = manifests[0]
    for out, m in manifests[1:]:
        if get(m) != get(first):
            raise ShardError(f"cannot merge: {first_out} and {out} differ in {what} "
                             f"({_short(get(first))} vs {_short(get(m))}); {advice}")


def _short(value) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "…"


def check_compatible(manifests: list[tuple[Path, dict]], current_code: dict | None = None) -> int:
    """Refuse (:class:`ShardError`) shards that are not one complete split of one class,
    graded by the same code, checks and settings; return N.

    The checks, in order: the same N; no index twice (overlap); no index missing; the
    same grading code, hidden checks and source notebooks (and the merging code's,
    ``current_code``); the same seed, chapters, layout and settings (the isolation may
    differ: it walls student code off, it does not change a grade); every journal key
    equal but for the submission's own digest and seed; every student of every roster
    graded by its own shard, and no shard grading another's student.
    """
    if not manifests:
        raise ShardError("cannot merge: no shard given")
    counts = {m["shard"]["count"] for _, m in manifests}
    if len(counts) > 1:
        listing = ", ".join(f"{out} is {m['shard']['index']}/{m['shard']['count']}" for out, m in manifests)
        raise ShardError(f"cannot merge shards of different splits: {listing}; grade every shard with the same N")
    count = counts.pop()
    seen: dict[int, Path] = {}
    for out, m in manifests:
        index = m["shard"]["index"]
        if index in seen:
            raise ShardError(f"cannot merge: overlapping shards, {seen[index]} and {out} are both shard "
                             f"{index}/{count}; give each shard once")
        seen[index] = out
    missing = [i for i in range(count) if i not in seen]
    if missing:
        raise ShardError(f"cannot merge: missing shard(s) {', '.join(f'{i}/{count}' for i in missing)} "
                         f"(given {len(seen)} of {count}); grade them, or rerun the failed ones, then merge all {count}")
    regrade = "grade every shard again with one version of the repository"
    _same(manifests, "grader (the checks, the reference and the code that judges: autograder.fingerprint)",
          lambda m: m["code"]["grader"], regrade)
    _same(manifests, "source notebooks", lambda m: m["code"]["sources"], regrade)
    if current_code is not None and current_code["grader"] != manifests[0][1]["code"]["grader"]:
        raise ShardError(f"cannot merge: the shards were graded by another grader (fingerprint "
                         f"{manifests[0][1]['code']['grader'][:12]}…) than this merge's "
                         f"({current_code['grader'][:12]}…); merge with the repository version that graded them")
    same_settings = "grade every shard with the same options (--seed, --timeout, limits, isolation, --duedate)"
    _same(manifests, "seed", lambda m: m["settings"]["seed_sha256"], same_settings)
    # The isolation may differ from node to node (it decides how student code is walled off, not
    # the grade); the merged output records every mode used.
    _same(manifests, "settings", lambda m: {k: v for k, v in m["settings"].items() if k != "isolation"},
          same_settings)
    _same(manifests, "chapters or layout", lambda m: (m["class"]["chapters"], m["class"].get("flat")),
          "grade every shard with the same --chapters / --flat")
    _same(manifests, "grading options", lambda m: _common_key(m), same_settings)
    owner = {i: out for i, out in seen.items()}
    graded = {m["shard"]["index"]: {e["student"] for e in m["graded"]} for _, m in manifests}
    for out, m in manifests:
        index = m["shard"]["index"]
        for student in graded[index]:
            if shard_of(student, count) != index:
                raise ShardError(f"cannot merge: {out} (shard {index}/{count}) graded {student!r}, who belongs to "
                                 f"shard {shard_of(student, count)}/{count}")
    for out, m in manifests:
        for student in m["class"]["roster"]:
            k = shard_of(student, count)
            if student not in graded[k]:
                raise ShardError(f"cannot merge: {student!r} was under SUBMITTED when {out} ran, but its shard "
                                 f"{k}/{count} ({owner[k]}) did not grade it (submitted late?); rerun shard {k}/{count}")
    return count


# What a journal key holds of one submission (batch.journal_key): the rest is the run's settings.
_PER_SUBMISSION = ("submission_sha256", "seed", "source_sha256")


def _common_key(manifest: dict):
    """The journal keys' settings shared by every submission (limits, timeout, sandbox, grader):
    one entry when the shard was graded with one set of settings. Every submission is
    journaled with them, even an empty or unreadable one (``grade_class``)."""
    keys = {json.dumps({k: v for k, v in e["key"].items() if k not in _PER_SUBMISSION}, sort_keys=True)
            for e in manifest["graded"]}
    return sorted(keys)


def isolation_of(shards: list[Path]) -> str:
    """The isolation the shards recorded: one mode, or ``mixed: a, b`` when nodes differed."""
    modes = sorted({read_shard(Path(s))["settings"].get("isolation") or "unknown" for s in shards})
    return modes[0] if len(modes) == 1 else "mixed: " + ", ".join(modes)


def merge_shards(shards: list[Path], out: Path, *, submitted: Path | None = None, book: Path = BOOK,
                 gradebook=None, check_code: bool = True):
    """Merge finished shards into ``out`` as one ``grade`` run over the class would write it.

    Args:
        shards: the shards' output folders, in any order.
        out: the merged output folder (not one of the shards).
        submitted: the class's submissions (default: the folder the shards recorded).
        book: the folder of the source notebooks.
        gradebook: an :class:`autograder.batch.GradebookTarget` (default: ``OUT/gradebook.db``
            with the shards' due date).
        check_code: also refuse when this process's grading code differs from the shards'.

    Returns:
        A :class:`autograder.batch.BatchReport` of the whole class. Raises
        :class:`ShardError` with the reason when the shards cannot be merged.
    """
    out = Path(out).resolve()
    folders = [Path(s) for s in shards]
    if any(f.resolve() == out for f in folders):
        raise ShardError(f"--out {out} is one of the shards; merge into a new folder")
    manifests = [(f, read_shard(f)) for f in folders]
    first = manifests[0][1]
    chapters, flat = first["class"]["chapters"], first["class"].get("flat")
    sources = {c: Path(book) / c / f"{c}.ipynb" for c in chapters}
    missing_sources = [str(p) for p in sources.values() if not p.is_file()]
    if missing_sources:
        raise ShardError(f"cannot merge: no source notebook {', '.join(missing_sources)} (pass --book)")
    check_compatible(manifests, code_digests(sources) if check_code else None)
    count = first["shard"]["count"]
    submitted = Path(submitted) if submitted is not None else Path(first["class"]["submitted"])
    wanted, subs = submissions.find_submissions(submitted, chapters if flat is None else None, flat, book)
    if wanted != chapters:
        raise ShardError(f"cannot merge: {submitted} now has chapters {wanted}, the shards graded {chapters}")
    roster = sorted(set().union(*(m["class"]["roster"] for _, m in manifests)))
    now = sorted({s.student for s in subs})
    if now != roster:
        extra = sorted(set(now) - set(roster))
        gone = sorted(set(roster) - set(now))
        if extra:
            k = shard_of(extra[0], count)
            raise ShardError(f"cannot merge: {extra[0]!r} is under {submitted} but no shard saw it (submitted after "
                             f"the shards ran?); rerun shard {k}/{count}")
        raise ShardError(f"cannot merge: {gone[0]!r} was graded but is no longer under {submitted}")
    entries = {}
    by_index = {m["shard"]["index"]: (f, m) for f, m in manifests}
    for f, m in manifests:
        for e in m["graded"]:
            entries[(e["student"], e["chapter"])] = (f, e)
    results = []
    for sub in subs:
        folder, entry = entries.get((sub.student, sub.chapter), (None, None))
        k = shard_of(sub.student, count)
        if entry is None:
            raise ShardError(f"cannot merge: shard {k}/{count} ({by_index[k][0]}) has no grade for "
                             f"{sub.student}/{sub.chapter}; rerun it")
        try:
            kept = journal.read_journal_entry(folder, sub)
        except journal.JournalError as exc:
            raise ShardError(f"cannot merge: {exc}; rerun shard {k}/{count} with this grader") from None
        if kept is None or kept.key != entry["key"]:
            raise ShardError(f"cannot merge: {folder}'s journal entry of {sub.student}/{sub.chapter} is missing or "
                             f"not the one its {SHARD_FILE} lists; rerun shard {k}/{count}")
        try:
            digest = submissions.file_sha256(sub.path)
        except Exception:  # noqa: BLE001 - as grade_class: a notebook it could not read is journaled with None
            digest = None
        if digest != entry["submission_sha256"]:
            raise ShardError(f"cannot merge: {sub.student}/{sub.chapter} under {submitted} changed after shard "
                             f"{k}/{count} graded it; rerun shard {k}/{count}")
        if sub.timestamp != entry.get("timestamp"):
            raise ShardError(f"cannot merge: the timestamp.txt of {sub.student}/{sub.chapter} under {submitted} "
                             f"changed after shard {k}/{count} graded it ({_short(entry.get('timestamp'))} then, "
                             f"{_short(sub.timestamp)} now: it decides the late penalty); rerun shard {k}/{count}")
        results.append(journal.Graded(sub, kept.scores, kept.key, wrong_chapter=kept.wrong_chapter))
    seed = journal.stored_seed(manifests[0][0])
    if seed is None or journal.seed_digest(seed) != first["settings"]["seed_sha256"]:
        raise ShardError(f"cannot merge: {manifests[0][0]}'s journal does not keep the seed its {SHARD_FILE} names; "
                         "rerun that shard")
    out.mkdir(parents=True, exist_ok=True)
    (out / SHARD_FILE).unlink(missing_ok=True)
    begin_run(out, "merge")
    for graded in results:
        journal.write_journal(out, graded)
    journal.journal_seed(out, seed)
    duedate = first["settings"].get("duedate")
    target = gradebook or batch.GradebookTarget(duedate=duedate)
    batch.write_reports(out, results, sources, target)
    end_run(out)
    return batch.BatchReport(out, results, len(results), 0)
