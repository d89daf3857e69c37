"""Grade a class: every submission of every chapter, in parallel, resumable.

``grade_class`` walks nbgrader's submitted layout (``<student>/<chapter>/<chapter>.ipynb``,
or a flat folder of ``<student>.ipynb`` for one chapter), grades each submission
with :func:`autograder.grading.grade_submission` (student code runs in the sandbox,
never here), and writes, from this trusted process only:

* ``OUT/.journal/<student>/<chapter>.json`` — one result per submission (an empty,
  doubled or unreadable chapter folder included), written
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
score 0 and a reason; the batch goes on. More: every per-student step — reading the
student's folder, its ``timestamp.txt`` and notebook, grading, writing the journal
entry, the gradebook rows and the feedback page — fails into a reason in that
student's rows of ``scores.csv`` (a folder that cannot be graded is ``invalid`` in
``grades.csv``), never into the batch:
what one submission holds can only change its own rows.

What a class handed in (folders, student ids, notebooks) is read by
:mod:`autograder.submissions`; the journal is :mod:`autograder.journal`.
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import nbformat
from tqdm import tqdm

from .book import BOOK, source_notebook
from .extensions import parse_duedate
from .grading import grade_submission
from .fingerprint import grader_fingerprint
from .files import write_atomic
from .journal import (Graded, JournalError, journal_seed, read_journal, read_journal_entry, submission_seed,
                      submission_status, write_journal)
from .run_settings import RunSettings
from .submissions import Submission, file_sha256, find_submissions
from .results import ClassResults, SubmissionGrade, begin_run, end_run
from .scores import ExerciseScore, NotebookScores, Status, SubmissionStatus
from .text import csv_cell, csv_text
from .untrusted import MAX_NOTEBOOK_BYTES, problem_text

__all__ = [
    "SCORE_COLUMNS",
    "GRADE_COLUMNS",
    "BatchReport",
    "GradebookTarget",
    "grade_class",
    "submission_status",
    "with_hand_grades",
]

# score: nbgrader's Grade.score (a grader's manual score if given, else the checks'
# auto_score, plus extra credit); comment: the grader's comment on the exercise.
SCORE_COLUMNS = ["student_id", "assignment", "exercise", "grade_id", "score", "max_score", "status", "reason",
                 "parts", "notes", "auto_score", "manual_score", "extra_credit", "comment"]
# score: after hand grades and the late penalty (nbgrader export's "score");
# raw_score: before the penalty; late_seconds: past the due date (0: on time or no due date).
GRADE_COLUMNS = ["student_id", "assignment", "score", "max_score", "status", "raw_score", "late_seconds",
                 "penalty"]
# Every submitted file is read through untrusted.read_untrusted with one bound,
# untrusted.MAX_NOTEBOOK_BYTES (20 MB): the digest, the grading and the feedback page.


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
    extensions: tuple | None = None  # autograder.extensions.Extension rows (--extensions)
    late_days: int | None = None  # the late-day budget per student (--late-days)


@dataclass
class BatchReport:
    """What a run did: every result, how many were graded now and how many reused.

    Its views (the console summary, the class report) read :meth:`class_results`, the
    ``results.json`` the run wrote, not ``results``.
    """

    out: Path
    results: list[Graded]
    graded: int
    reused: int

    def class_results(self) -> ClassResults:
        """This run's submissions as ``out/results.json`` holds them (hand grades, late
        penalties and every problem of the run included), in the run's order: all of them,
        or, for a shard, its own students'.

        Raises:
            autograder.results.ResultsError: the file is missing or cannot be read.
        """
        stored = ClassResults.read(self.out)
        mine = {(g.submission.student, g.submission.chapter) for g in self.results}
        return ClassResults([e for e in stored.exercises if (e.student, e.chapter) in mine],
                            [s for s in stored.submissions if (s.student, s.chapter) in mine])

    def totals(self) -> dict[tuple[str, str], tuple[float, float]]:
        """``(student, chapter) -> (score, max_score)``."""
        return {
            (g.submission.student, g.submission.chapter): (
                sum(s.score for s in g.scores),
                sum(s.max_score for s in g.scores),
            )
            for g in self.results
        }


# --------------------------------------------------------------------------- discovery


# --------------------------------------------------------------------------- journal


# --------------------------------------------------------------------------- grading


GradeFn = Callable[..., NotebookScores]
_worker_grade_fn: GradeFn | None = None


def _default_grade_fn() -> GradeFn:
    return grade_submission


def journal_key(submission_sha256: str | None, source_sha256: str, seed: int | None, grader: str,
                settings: RunSettings) -> dict:
    """The key a submission's journal entry is written and reused under.

    Args:
        submission_sha256: the notebook's digest (``None``: nothing could be run, e.g. an
            empty folder or two notebooks).
        source_sha256: the chapter's source notebook's digest.
        seed: the submission's seed of the hidden cases (``None`` with nothing run).
        grader: :func:`~autograder.fingerprint.grader_fingerprint`.
        settings: the run's :class:`~autograder.grading.RunSettings`.

    Returns:
        ``{"submission_sha256", "source_sha256", "seed", "grader", **settings.options()}``:
        all but the first three are the same for every submission of a run.
    """
    return {"submission_sha256": submission_sha256, "source_sha256": source_sha256, "seed": seed,
            "grader": grader, **settings.options()}


@dataclass(frozen=True)
class GradingTask:
    """One submission to grade: what a worker process receives (picklable).

    Attributes:
        source: the chapter's source notebook.
        path: the submitted notebook (``None``: nothing was submitted).
        student: the student id.
        chapter: the chapter id.
        seed: the submission's seed of the hidden cases (:func:`~autograder.journal.submission_seed`).
        settings: how it is run and limited, the run's one :class:`~autograder.grading.RunSettings`.
    """

    source: str
    path: str | None
    student: str
    chapter: str
    seed: int
    settings: RunSettings

    def run(self, grade_fn: GradeFn) -> NotebookScores:
        """Grade it with ``grade_fn`` (:func:`autograder.grading.grade_submission`'s signature):
        one :class:`~autograder.scores.ExerciseScore` per judged cell, the student's, and
        the chapter the notebook really holds when it is another one.

        Raises:
            TypeError: ``grade_fn`` returned something else than a
                :class:`~autograder.scores.NotebookScores`.
        """
        result = grade_fn(Path(self.source), Path(self.path) if self.path else None, chapter=self.chapter,
                        settings=self.settings, hidden=True, seed=self.seed, student=self.student)
        if not isinstance(result, NotebookScores):
            raise TypeError(f"the grading function returned a {type(result).__name__}, not NotebookScores")
        return result


def _grade_task(task: GradingTask) -> NotebookScores:
    """Worker entry: grade one submission; never raises for the submission's sake."""
    return task.run(_worker_grade_fn or _default_grade_fn())


def _init_worker(grade_fn: GradeFn | None, threads: int) -> None:
    global _worker_grade_fn
    _worker_grade_fn = grade_fn
    try:
        # torch (heavy, optional on the trusted side) only in a grading worker, to set its threads
        import torch

        torch.set_num_threads(threads)
    except Exception:  # noqa: BLE001 - torch is optional for the trusted side
        pass


def failed_scores(source: Path, reason: str, status: Status = Status.ERROR, *, student: str,
                  chapter: str) -> list[ExerciseScore]:
    """Every test cell of ``source`` at 0 with ``reason``, for ``student``'s ``chapter`` (the
    grader itself failed on a submission: ``error``; nothing in the folder could be graded:
    ``invalid``)."""
    nb = nbformat.read(str(source), as_version=4)
    scores = []
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade") and cell.cell_type == "code":
            grade_id = meta.get("grade_id", "")
            scores.append(ExerciseScore(
                student=student, chapter=chapter, exercise=grade_id[5:] if grade_id.startswith("test_") else grade_id,
                grade_id=grade_id, score=0.0, max_score=float(meta.get("points", 0)), status=Status(status),
                reason=reason))
    return scores


def grade_class(
    submitted: Path,
    out: Path,
    *,
    chapters: list[str] | None = None,
    flat: str | None = None,
    jobs: int = 1,
    settings: RunSettings = RunSettings(),
    force: bool = False,
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
        settings: how each submission is run and limited (timeout, budget, limits,
            sandbox), recorded in every journal key, and the base seed of the hidden
            checks (``settings.seed``; ``None``: the one stored in ``out``, else a fresh
            random one, stored for resuming): one :class:`~autograder.grading.RunSettings`
            for the whole run.
        force: regrade every submission, ignoring the journal.
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
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    if gradebook is not None and gradebook.duedate is not None:
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
    begin_run(out, "grade")  # cleared once every report is written: a stopped run is never read as current
    base_seed = journal_seed(out, settings.seed)
    sources = {c: source_notebook(c, book) for c in wanted}
    source_hash = {c: file_sha256(p) for c, p in sources.items()}
    fingerprint = grader_fingerprint() if grade_fn is None else "custom"

    results: dict[Submission, Graded] = {}
    todo: list[tuple[Submission, dict, GradingTask]] = []

    def finish(sub: Submission, key: dict, found: NotebookScores) -> None:
        graded = Graded(sub, found.scores, key, wrong_chapter=found.wrong_chapter)  # recorded as grading found it
        try:
            write_journal(out, graded)
        except Exception as exc:  # noqa: BLE001 - graded all the same; a rerun grades it again
            graded.problems.append(f"the journal entry could not be written ({problem_text(exc)}): "
                                   "graded again on the next run")
        results[sub] = graded
        if on_graded is not None:
            on_graded(graded)

    for sub in subs:
        if students is not None and sub.student not in students:
            try:
                kept = read_journal_entry(out, sub)
            except JournalError:
                pass  # another version's entry, or unreadable: this student is graded again, below
            else:
                if kept is not None:  # not graded now: the last grade stays in the reports
                    results[sub] = Graded(sub, kept.scores, kept.key, reused=True, wrong_chapter=kept.wrong_chapter)
                continue
        # Every submission is journaled under the run's settings, even one with nothing to run:
        # a shard's entries then differ only in what each student handed in (merge_shards).
        unrun = journal_key(None, source_hash[sub.chapter], None, fingerprint, settings)
        if sub.problem:  # nothing to run: every exercise 0, with what was found instead
            finish(sub, unrun, NotebookScores(failed_scores(sources[sub.chapter], sub.problem, Status.INVALID,
                                                            student=sub.student, chapter=sub.chapter)))
            continue
        try:
            sub_digest = file_sha256(sub.path)
        except Exception as exc:  # noqa: BLE001 - reading the notebook is this student's step
            finish(sub, unrun, NotebookScores(failed_scores(
                sources[sub.chapter], f"the notebook could not be read ({problem_text(exc)})", Status.INVALID,
                student=sub.student, chapter=sub.chapter)))
            continue
        sub_seed = submission_seed(base_seed, sub.student, sub.chapter, str(sub_digest))
        key = journal_key(sub_digest, source_hash[sub.chapter], sub_seed, fingerprint, settings)
        try:
            cached = None if force else read_journal(out, sub, key)
        except Exception:  # noqa: BLE001 - an entry that cannot be read is graded again
            cached = None
        if cached is not None:
            results[sub] = Graded(sub, cached.scores, key, reused=True, wrong_chapter=cached.wrong_chapter)
            continue
        todo.append((sub, key, GradingTask(str(sources[sub.chapter]), str(sub.path) if sub.path else None,
                                           sub.student, sub.chapter, sub_seed, settings)))

    bar = tqdm(total=len(todo), desc="grading", unit="nb", disable=(not sys.stderr.isatty()) if progress is None else not progress)
    try:
        if jobs == 1 or len(todo) <= 1:
            fn = grade_fn or _default_grade_fn()
            for sub, key, task in todo:
                try:
                    found = task.run(fn)
                except Exception as exc:  # noqa: BLE001 - one submission never stops the batch
                    found = NotebookScores(failed_scores(
                        sources[sub.chapter], f"the grader failed: {problem_text(exc)}", student=sub.student,
                        chapter=sub.chapter))
                finish(sub, key, found)
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
                            found = future.result()
                        except Exception as exc:  # noqa: BLE001
                            found = NotebookScores(failed_scores(
                                sources[sub.chapter], f"the grader failed: {problem_text(exc)}",
                                student=sub.student, chapter=sub.chapter))
                        finish(sub, key, found)
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
    end_run(out)
    graded_now = sum(1 for g in ordered if not g.reused)
    return BatchReport(out, ordered, graded_now, len(ordered) - graded_now)


# --------------------------------------------------------------------------- reports


# A text cell that no spreadsheet runs as a formula, in any locale (text.csv_cell).
_cell = csv_cell


def _write_csv(path: Path, columns: list[str], rows: list[list]) -> None:
    """Every field quoted and guarded against formulas (:func:`autograder.text.csv_text`)."""
    write_atomic(path, csv_text(columns, rows))


def with_hand_grades(graded: Graded, recorded) -> list[ExerciseScore]:
    """The scores of ``graded`` as the gradebook holds them now: ``score`` is
    nbgrader's ``Grade.score`` (manual score if a grader gave one, plus extra
    credit); ``auto_score`` is the checks', and ``manual_score``, ``extra_credit`` and
    ``comment`` (the grader's) are filled in. ``recorded`` is the submission's
    :class:`autograder.gradebook.Recorded`, or ``None`` (nothing recorded)."""
    scores = []
    for s in graded.scores:
        held = recorded.grades.get(s.grade_id) if recorded is not None else None
        s = replace(s, auto_score=s.score, manual_score=None, extra_credit=None, comment="")
        if held is not None:
            s = replace(s, manual_score=held["manual_score"], extra_credit=held["extra_credit"], score=held["score"])
        if recorded is not None:
            s = replace(s, comment=recorded.comments.get(s.exercise, ""))
        scores.append(s)
    return scores


def _problems(graded: Graded, held) -> list[str]:
    """What went wrong for one submission outside its grading: reading its folder,
    its journal entry, its gradebook rows (one line each)."""
    return [*graded.submission.notes, *graded.problems, *(held.problems if held is not None else [])]


def _with_problems(scores: list[ExerciseScore], problems: list[str]) -> list[ExerciseScore]:
    """``scores`` with ``problems`` in front of each one's reason."""
    if not problems:
        return scores
    return [replace(s, reason="; ".join([*problems, *([s.reason] if s.reason else [])])) for s in scores]


def _exercise_score(g: Graded, shown: ExerciseScore) -> ExerciseScore:
    """One score of ``shown`` (with hand grades and problems) as ``results.json`` holds it
    for ``g``'s submission: its numbers as floats, the grader's comment on one line."""
    sub = g.submission
    return replace(shown, student=sub.student, chapter=sub.chapter, score=float(shown.score),
                   max_score=float(shown.max_score), auto_score=float(shown.checks_score),
                   comment=" ".join(shown.comment.split()))


def _submission_grade(g: Graded, exercises: list[ExerciseScore], held) -> SubmissionGrade:
    """A submission's line of ``grades.csv``: its total after the late penalty, and the rest."""
    sub = g.submission
    raw = sum(e.score for e in exercises)
    penalty = held.penalty if held is not None else 0.0
    return SubmissionGrade(
        student=sub.student, chapter=sub.chapter, status=submission_status(g), score=max(0.0, raw - penalty),
        max_score=sum(e.max_score for e in exercises), raw_score=raw,
        late_seconds=held.late_seconds if held is not None else 0.0, penalty=penalty,
        submission_sha256=g.key.get("submission_sha256") if sub.path is not None else None,
        extension_seconds=getattr(held, "extension_seconds", 0.0), late_days_used=getattr(held, "late_days_used", 0),
        wrong_chapter=g.wrong_chapter)


def _write_feedback(page: Path, g: Graded, scores: list[ExerciseScore], held) -> None:
    """Write one feedback page (only when its text changed)."""
    # the feedback pages (Jinja2 templates) load when a page is written
    from .feedback import render_feedback, student_code

    sub = g.submission
    html = render_feedback(sub.student, sub.chapter, scores, student_code(sub.path, MAX_NOTEBOOK_BYTES),
                           submission_status(g), late_seconds=held.late_seconds if held is not None else 0.0,
                           penalty=held.penalty if held is not None else 0.0, wrong_chapter=g.wrong_chapter)
    if not page.is_file() or page.read_text(encoding="utf-8") != html:
        write_atomic(page, html)


def write_reports(out: Path, results: list[Graded], sources: dict[str, Path],
                  gradebook: GradebookTarget | None = None) -> None:
    """Fill the gradebook, then write the feedback pages, ``scores.csv`` and
    ``grades.csv`` from the results and what the gradebook holds (hand grades,
    late penalties). Deterministic: the same results and gradebook give the same
    files. Each submission's step that fails (its gradebook rows, its feedback
    page, its CSV rows) becomes a reason in its own rows; the others are written."""
    # nbgrader's gradebook (SQLAlchemy: heavy) loads when it is filled
    from .gradebook import write_gradebook

    target = gradebook or GradebookTarget()
    recorded = write_gradebook(out / "gradebook.db", sources, results, url=target.url, course_id=target.course_id,
                               duedate=target.duedate, config=target.config,
                               extensions=None if target.extensions is None else list(target.extensions),
                               late_days=target.late_days)

    shown: dict[int, list[ExerciseScore]] = {}  # per result: its scores with hand grades and its problems
    for i, g in enumerate(results):
        sub = g.submission
        held = recorded.get((sub.student, sub.chapter))
        try:
            shown[i] = _with_problems(with_hand_grades(g, held), _problems(g, held))
        except Exception as exc:  # noqa: BLE001 - this submission's scores only
            failed = failed_scores(sources[sub.chapter], f"the results could not be read ({problem_text(exc)})",
                                   student=sub.student, chapter=sub.chapter)
            shown[i] = _with_problems([replace(s, auto_score=0.0) for s in failed], _problems(g, None))

    feedback = out / "feedback"
    for i, g in enumerate(results):
        sub = g.submission
        page = feedback / sub.student / f"{sub.chapter}.html"
        try:
            if sub.path is None and not sub.problem:
                if page.exists():
                    page.unlink()
                continue
            _write_feedback(page, g, shown[i], recorded.get((sub.student, sub.chapter)))
        except Exception as exc:  # noqa: BLE001 - this student's page only
            shown[i] = _with_problems(shown[i], [f"the feedback page could not be written ({problem_text(exc)})"])

    class_results = ClassResults()
    for i, g in enumerate(results):
        held = recorded.get((g.submission.student, g.submission.chapter))
        try:
            exercises = [_exercise_score(g, s) for s in shown[i]]
            line = _submission_grade(g, exercises, held)
        except Exception as exc:  # noqa: BLE001 - one student's rows, written with the reason
            sub = g.submission
            reason = f"the rows could not be written ({problem_text(exc)})"
            exercises = [ExerciseScore(sub.student, sub.chapter, s.exercise, 0.0, float(s.max_score or 0),
                                       Status.ERROR, reason, auto_score=0.0, grade_id=s.grade_id) for s in shown[i]]
            line = SubmissionGrade(sub.student, sub.chapter, SubmissionStatus.INVALID,
                                   max_score=sum(e.max_score for e in exercises))
        class_results.exercises += exercises
        class_results.submissions.append(line)
    class_results.write(out)
    _write_csv(out / "scores.csv", SCORE_COLUMNS, class_results.score_rows())
    _write_csv(out / "grades.csv", GRADE_COLUMNS, class_results.grade_rows())
