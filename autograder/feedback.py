"""Per-student feedback pages: ``feedback/<student>/<chapter>.html``.

One self-contained HTML page per submission (no scripts, no external assets): a
summary (with the late penalty, if any), then per exercise its status, score, the
check's diagnosis, what a grader changed by hand (score, extra credit, comment)
and the student's own code for that exercise. It is built from the grading results and
the submission only, so it can never show a hidden test or the reference answer.
The page is the template ``autograder/templates/feedback.html`` (:data:`TEMPLATE`), to
restyle as nbgrader's and Sphinx's users do; every value it shows is HTML-escaped
(:func:`autograder.pagestyle.render_page`), everything the student wrote included. The submission is read within
grading's own bound (:data:`autograder.untrusted.MAX_NOTEBOOK_BYTES`), and the page
shows at most :data:`MAX_SHOWN_CELLS` cells of one exercise and
:data:`MAX_SHOWN_CHARS` characters of code in all, so a page stays small
whatever the notebook holds.
"""
from __future__ import annotations

import json
from pathlib import Path

from .pagestyle import Markup, render_page
from .scores import ExerciseScore, Status, SubmissionStatus
from .text import wrong_chapter_notice
from .untrusted import MAX_NOTEBOOK_BYTES, NotebookError, read_untrusted

__all__ = ["student_code", "render_feedback", "MAX_SHOWN_CHARS", "MAX_SHOWN_CELLS", "TEMPLATE"]

# The page's template (autograder/templates/; rendered by autograder.pagestyle.render_page).
TEMPLATE = "feedback.html"

# The code a feedback page shows: at most this many characters in all (a chapter's
# answers are a few kB) and this many cells with one exercise's id.
MAX_SHOWN_CHARS = 64 * 2**10
MAX_SHOWN_CELLS = 5

STATUS_WORDS = {
    Status.PASSED: "passed",
    Status.PARTIAL: "partly passed",
    Status.FAILED: "failed",
    Status.ERROR: "error",
    Status.MISSING: "missing",
    Status.TIMEOUT: "timed out",
    Status.CHEAT: "tampering detected",
    Status.INVALID: "not gradable",
}

CSS = """
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
table { border-collapse: collapse; margin: 1rem 0; }
th, td { border: 1px solid #ccc; padding: .3rem .6rem; text-align: left; vertical-align: top; }
.hand { background: #fff8dc; padding: .3rem .6rem; border-left: 3px solid #c9a400; }
.passed, .earned { color: #176317; } .partial { color: #8a5a00; } .missed, .failed, .error, .timeout, .cheat, .invalid, .missing { color: #a11; }
pre { background: #f6f6f6; padding: .6rem; overflow-x: auto; }
section { border-top: 1px solid #ddd; margin-top: 1.5rem; }
"""


def student_code(path: Path | None, max_bytes: int | None = None) -> dict[str, list[str]]:
    """The submission's code cells by nbgrader ``grade_id`` (several when duplicated).

    Args:
        path: the submitted notebook (``None``: no submission).
        max_bytes: read nothing larger; at most (and by default) grading's
            :data:`~autograder.untrusted.MAX_NOTEBOOK_BYTES`, so the page never
            reads what grading refused.

    Returns:
        ``grade_id -> [source, …]``. Never raises: an unreadable or invalid
        notebook gives ``{}``.
    """
    if path is None:
        return {}

    max_bytes = MAX_NOTEBOOK_BYTES if max_bytes is None else min(int(max_bytes), MAX_NOTEBOOK_BYTES)
    try:
        raw = read_untrusted(Path(path), max_bytes)
        data = json.loads(raw.decode("utf-8", errors="replace"))
        cells = data.get("cells", []) if isinstance(data, dict) else []
    except (NotebookError, OSError, ValueError, RecursionError, MemoryError):
        return {}
    code: dict[str, list[str]] = {}
    for cell in cells:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        meta = cell.get("metadata")
        nbg = meta.get("nbgrader") if isinstance(meta, dict) else None
        grade_id = nbg.get("grade_id") if isinstance(nbg, dict) else None
        if not isinstance(grade_id, str):
            continue
        source = cell.get("source", "")
        if isinstance(source, list):
            source = "".join(s for s in source if isinstance(s, str))
        if isinstance(source, str):
            code.setdefault(grade_id, []).append(source)
    return code


def duration_text(seconds: float) -> str:
    """``2 h 5 min`` / ``12 min`` / ``40 s``: how late, in words."""
    seconds = int(round(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{days} d" if days else "", f"{hours} h" if hours else "", f"{minutes} min" if minutes else ""]
    text = " ".join(p for p in parts if p)
    return text or f"{secs} s"


def render_feedback(student: str, chapter: str, scores: list[ExerciseScore], code: dict[str, list[str]],
                    status: SubmissionStatus, *, late_seconds: float = 0.0, penalty: float = 0.0,
                    wrong_chapter: str | None = None) -> str:
    """The feedback page of one submission.

    Args:
        student: the student id.
        chapter: the chapter (assignment) id.
        scores: one :class:`~autograder.scores.ExerciseScore` per graded cell (``score``
            is the final one; ``auto_score``, ``manual_score``, ``extra_credit`` and
            ``comment`` say what a grader changed by hand, see
            :func:`autograder.batch.with_hand_grades`).
        code: the submission's code cells by grade_id (:func:`student_code`).
        status: the submission's overall status (``complete``, ``incomplete``, …).
        late_seconds: how late the submission was (0: on time).
        penalty: the late penalty in points, taken off the total.
        wrong_chapter: the chapter the notebook really holds when it is another one
            (:attr:`autograder.scores.NotebookScores.wrong_chapter`): the page says so
            first (:func:`autograder.text.wrong_chapter_notice`).

    Returns:
        The HTML text (deterministic for the same inputs).
    """
    raw = sum(s.score for s in scores)
    budget = MAX_SHOWN_CHARS  # characters of code the page may still show, in notebook order
    exercises = []
    for s in scores:
        cells = code.get(s.exercise, [])
        shown = []
        for source in cells[:MAX_SHOWN_CELLS]:
            text, budget = source[:max(0, budget)], budget - len(source)
            cut = f"\n… ({len(source) - len(text):,} more characters not shown)" if len(text) < len(source) else ""
            shown.append({"shown": text, "cut": cut})
        exercises.append({"score": s, "word": STATUS_WORDS.get(s.status, s.status), "cells": shown,
                          "count": len(cells)})
    return render_page(TEMPLATE, css=Markup(CSS), chapter=chapter, student=student, status=status,
                       total=max(0.0, raw - penalty), max_total=sum(s.max_score for s in scores), raw=raw,
                       late_seconds=late_seconds, late=duration_text(late_seconds), penalty=penalty,
                       exercises=exercises,
                       wrong=wrong_chapter_notice(wrong_chapter, chapter) if wrong_chapter else "")
