"""Grade one submission: run its solution cells in the sandbox, judge outside.

The trusted process reads the **source** notebook — setup cell, solution cells, test
cells and their points — and takes only the solution cells' source from the submission,
matched by nbgrader ``grade_id`` (:mod:`autograder.cells`). It makes every exercise's
cases (:mod:`autograder.reference_results`), ships them as data into a sandboxed
:mod:`autograder.runner` (:mod:`autograder.jobs`, :mod:`autograder.sandbox`), reads the
result bundles back as data (:mod:`autograder.tamper`: why forged ones earn nothing and
why hidden inputs do not come out) and judges them with the same
:func:`~autograder.checks.base.evaluate` as the visible check (:mod:`autograder.verdicts`);
an answer that lost points to an earlier exercise's mistake is graded again with that
reference in its place (:mod:`autograder.reference_regrade`). ARCHITECTURE.md §4.
"""
from __future__ import annotations

import dataclasses
import logging
import shutil
import tempfile
from pathlib import Path

from .cells import GradedCell, match_submission, read_source, wrong_chapter
from .checks import exercises_of
from .checks.exercise import get_exercise
from .jobs import Budget, write_job
from .library import build_library, reference_library, shared_library
from .reference_regrade import across_the_wall, regrade, regrades
from .reference_results import reference_results
# RunSettings is part of grade_submission's signature: an outside caller imports both from here.
from .run_settings import RunSettings
from .sandbox import RunOutcome, check_sandbox, shares_library
from .scores import ExerciseScore, NotebookScores, Status, single_line
from .text import safe_text
from .untrusted import NotebookError
from .verdicts import collect

__all__ = ["RunSettings", "grade_submission"]

log = logging.getLogger(__name__)


def _handed_over(score: ExerciseScore, student: str, chapter: str) -> ExerciseScore:
    """The score of one cell as :func:`grade_submission` returns it: ``student``'s, of
    ``chapter``, every message on one line with single spaces (as the journal keeps it)."""
    return dataclasses.replace(
        score, student=student, chapter=chapter, reason=single_line(score.reason),
        parts=[dataclasses.replace(p, message=single_line(p.message), hint=single_line(p.hint)) for p in score.parts],
        notes=[single_line(n) for n in score.notes])


def _make_cases(g: GradedCell, hidden: bool, seed: int | None) -> None:
    try:
        g.exercise = get_exercise(g.name)
    except ValueError as exc:
        g.settle(Status.ERROR, f"cannot grade: {exc}")
        return
    try:
        # hidden=True: the exercise's full set (its visible cases and the randomised
        # hidden ones, fresh unless seeded); hidden=False: the visible check's set.
        references = reference_results(g.exercise, hidden, seed)
    except Exception as exc:  # noqa: BLE001 - an instructor-side bug, reported per cell
        g.settle(Status.ERROR, f"cannot make the cases of {g.name}: {type(exc).__name__}: {exc}")
        return
    g.cases, g.hidden, g.wants = references.cases(), hidden, references


def grade_submission(
    source_nb: Path,
    submission_nb: Path | None,
    *,
    chapter: str | None = None,
    settings: RunSettings = RunSettings(),
    hidden: bool = True,
    seed: int | None = None,
    scratch_dir: Path | None = None,
    student: str = "",
) -> NotebookScores:
    """Grade one submission against its source notebook, without trusting it.

    Runs the submission's solution cells (only those, matched by ``grade_id``) after
    the source's setup cell in a sandbox (:mod:`autograder.sandbox`), then judges
    the returned data here with the exercises' checks. A cell that kills, hangs or
    crashes the kernel gets 0 and the cells after it are re-run in a fresh sandbox.

    Args:
        source_nb: the instructor's notebook (``book/<id>/<id>.ipynb``): setup,
            solution cells, test cells and their ``points`` come from here.
        submission_nb: the student's notebook, or ``None`` (no submission).
        chapter: the chapter id (default: the source notebook's name); decides which
            modules of ``solutions`` are hidden from the sandbox.
        settings: how it is run and limited, the run's one :class:`RunSettings`, whole:
            ``timeout`` (one sandbox run's wall clock and CPU time); ``budget`` (the
            whole submission's wall clock over all its sandbox runs, default twice the
            run limit: one endless exercise costs one run limit and the others are still
            graded, a submission full of endless exercises never costs more than its
            budget, each run's limit is cut to what is left and the cells left when it
            is spent score 0, "timeout"); ``memory``, ``disk``, ``processes`` (each run's
            limits, :meth:`RunSettings.run_limits`); ``sandbox`` (``False`` runs a plain
            subprocess — NOT tamper-proof).
        hidden: run the hidden cases too (``False``: the visible ones only).
        seed: seed of the hidden cases (default: fresh); fix it to reproduce a grade.
        scratch_dir: where to make the job folders (default: the system temp dir);
            removed afterwards.
        student: the student the scores are of (``""``: nobody's, as for ``check``).

    Returns:
        A :class:`~autograder.scores.NotebookScores`: its ``scores``, one
        :class:`~autograder.scores.ExerciseScore` per graded test cell of the source
        notebook, in notebook order, ``student``'s for ``chapter`` (the typed score every
        view reads, made here where the cell is judged), and its ``wrong_chapter``, the
        chapter the notebook really holds when none of ``chapter``'s exercises was in it
        and its cells are another chapter's. Never raises for a bad submission.

    Raises:
        ValueError: the *source* notebook is not usable (an instructor error).
    """
    source_nb = Path(source_nb)
    chapter = chapter or source_nb.stem
    if not isinstance(settings, RunSettings):
        raise TypeError(f"settings must be a RunSettings, got {type(settings).__name__}")
    budget, sandbox, limits = settings.budget, settings.sandbox, settings.run_limits()
    try:
        setup, graded = read_source(source_nb)
    except NotebookError as exc:
        raise ValueError(f"{source_nb}: the source notebook is not usable: {exc}") from None
    found = match_submission(graded, None if submission_nb is None else Path(submission_nb))
    for g in graded:
        if g.result is None:
            _make_cases(g, hidden, seed)
    pending = [g for g in graded if g.result is None]
    if pending and sandbox:
        check_sandbox()
    if pending:
        scratch = Path(tempfile.mkdtemp(prefix="autograder-", dir=scratch_dir))
        try:
            scratch.chmod(0o755)
            names = {g.name for g in graded} | {ex for ex in _chapter_exercises(chapter)}
            # a library mounted read-only serves every submission of the chapter
            shared = shares_library(sandbox)
            lib_dir = shared_library(names) if shared else build_library(scratch / "lib", names)
            clock = Budget(2.0 * limits.wall_seconds if budget is None else float(budget))
            attempt = 0
            while pending:
                run_limits = clock.limits(limits)
                if run_limits is None:
                    for g in pending:
                        g.settle(Status.TIMEOUT, clock.spent_reason())
                    break
                attempt += 1
                job_dir = scratch / f"job{attempt}"
                bundles = write_job(job_dir, setup, pending)
                outcome = clock.run(job_dir, lib_dir, run_limits, sandbox, bundles)
                if attempt == 1:
                    _warn_about_setup(source_nb, outcome)
                pending = collect(pending, outcome, run_limits)
            references_lib = None
            for g, failing in regrades(graded):
                run_limits = clock.limits(limits)
                if run_limits is None:
                    break  # the first grades stand: a regrade can only add points
                attempt += 1
                if references_lib is None and any(across_the_wall(d) for d in failing):
                    references_lib = (shared_library(set(), references=True) if shared
                                      else reference_library(scratch / "references-lib"))
                regrade(g, failing, graded, setup, scratch / f"job{attempt}", lib_dir, run_limits, sandbox,
                         clock, references_lib)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    scores = [_handed_over(g.result, student, chapter) for g in graded]
    return NotebookScores(scores, wrong_chapter=wrong_chapter(found, chapter, scores))


def _warn_about_setup(source_nb: Path, outcome: RunOutcome) -> None:
    """Log the source's setup-cell errors (the runner reports them on stderr): an
    import of something stripped for this chapter, say. The instructor should
    know; the student's cells are graded regardless."""
    problems = [line for line in outcome.stderr.splitlines() if line.startswith("setup cell ")]
    if problems:
        log.warning("%s: in the grading sandbox, %s", source_nb, safe_text("; ".join(problems[:3])))


def _chapter_exercises(chapter: str) -> list[str]:
    try:
        return [ex.name for ex in exercises_of(chapter)]
    except Exception:  # noqa: BLE001 - a broken checks module is reported per cell elsewhere
        return []
