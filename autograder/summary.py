"""The console summary of a batch: what ``python -m autograder grade`` (and ``merge``,
``autograde``) prints when it is done, a view of the ``results.json`` the run wrote, as the
class report (:mod:`autograder.report`) is: how many submissions were graded now and reused
from the journal, and, by name, the invalid ones, the notebooks of the wrong chapter ("this
is a 05_multi_head_attention notebook, submitted as 04_self_attention",
:func:`autograder.text.wrong_chapter_text`), the ones flagged for tampering, the ones that
timed out or crashed; then where to look. Everything from a submission reaches the terminal
through :func:`autograder.text.safe_text`.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

from .results import ClassResults
from .scores import ExerciseScore, Status, SubmissionStatus
from .text import safe_text, wrong_chapter_text

__all__ = ["summarise", "NAMED_PER_CATEGORY"]

# How many submissions each category names before "… and N more".
NAMED_PER_CATEGORY = 10


def _named(lines: list[str]) -> list[str]:
    """A category's lines, indented, the first :data:`NAMED_PER_CATEGORY` of them and a count of the rest."""
    shown = ["    " + ln for ln in lines[:NAMED_PER_CATEGORY]]
    if len(lines) > NAMED_PER_CATEGORY:
        shown.append(f"    … and {len(lines) - NAMED_PER_CATEGORY} more (see scores.csv)")
    return shown


def summarise(results: ClassResults, out: Path, *, graded: int, reused: int) -> str:
    """The console summary of a batch (what ``grade`` prints when it is done): a view of
    the run's ``results.json``, as the class report is.

    Args:
        results: the run's :class:`~autograder.results.ClassResults`, as read back from
            ``out/results.json`` (:meth:`autograder.batch.BatchReport.class_results`).
        out: the output folder to point at.
        graded, reused: how many submissions the run graded now and reused from the journal.

    Returns:
        Several lines: the counts (graded now, reused from the journal, complete,
        incomplete, invalid, wrong chapter, flagged, timed out, errors, not submitted),
        each problem submission by ``student/chapter`` with its reason, and the
        files to read next.
    """
    out = Path(out)
    rows: dict[tuple[str, str], list[ExerciseScore]] = defaultdict(list)
    for e in results.exercises:
        rows[(e.student, e.chapter)].append(e)
    students = {line.student for line in results.submissions}
    invalid, wrong, flagged, timed_out, errors = [], [], [], [], []
    counts = Counter()
    for line in results.submissions:
        scores = rows[(line.student, line.chapter)]
        who = safe_text(f"{line.student}/{line.chapter}")
        status = line.status
        real = line.wrong_chapter
        if real:
            counts["wrong chapter"] += 1
            wrong.append(f"{who}: {wrong_chapter_text(real, line.chapter)} (0 points; grade it as {real})")
            continue
        if status == SubmissionStatus.INVALID:
            counts["invalid"] += 1
            invalid.append(f"{who}: {safe_text(scores[0].reason if scores else '')}")
            continue
        if status == SubmissionStatus.NOT_SUBMITTED:
            counts["not submitted"] += 1
            continue
        if status == SubmissionStatus.CHEAT:
            counts["flagged"] += 1
            cells = [s for s in scores if s.status == Status.CHEAT]
            flagged.append(f"{who} {cells[0].exercise}: {safe_text(cells[0].reason)}")
        slow = [s for s in scores if s.status == Status.TIMEOUT]
        if slow:
            counts["timed out"] += 1
            timed_out.append(f"{who} {', '.join(s.exercise for s in slow)}: {safe_text(slow[0].reason)}")
        broken = [s for s in scores if s.status == Status.ERROR]
        if broken:
            counts["errors"] += 1
            errors.append(f"{who} {', '.join(s.exercise for s in broken)}: {safe_text(broken[0].reason)}")
        if status in (SubmissionStatus.COMPLETE, SubmissionStatus.INCOMPLETE):
            counts[status.value] += 1
    lines = [
        f"graded {graded} submission(s), reused {reused} unchanged from the journal; "
        f"{len(students)} student(s).",
        "  " + " · ".join(f"{name}: {counts[name]}" for name in (
            "complete", "incomplete", "invalid", "wrong chapter", "flagged", "timed out", "errors",
            "not submitted")),
    ]
    for title, items in (
        ("invalid (0 points: the file could not be read as this chapter's notebook)", invalid),
        ("wrong chapter (0 points)", wrong),
        ("flagged: a tampering attempt was caught (0 points for that exercise; look at the code)", flagged),
        ("timed out (0 points for the exercises that did not finish)", timed_out),
        ("errors (a crash, too much memory or output, or the grader itself failed: 0 points for those "
         "exercises; read the reason, then grade again with --force)", errors),
    ):
        if items:
            lines.append(f"{title}:")
            lines.extend(_named(items))
    lines += [
        "where to look:",
        f"  {out / 'grades.csv'}  one row per student × chapter (total, status)",
        f"  {out / 'scores.csv'}  one row per exercise (parts earned, reason, notes)",
        f"  {out / 'feedback'}/<student>/<chapter>.html  what each student gets back",
        f"  {out / 'gradebook.db'}  nbgrader's gradebook",
        f"  python -m autograder report {out}  the class report: scores, parts, most frequent mistakes",
    ]
    return "\n".join(lines)
