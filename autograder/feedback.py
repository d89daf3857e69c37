"""Per-student feedback pages: ``feedback/<student>/<chapter>.html``.

One self-contained HTML page per submission (no scripts, no external assets): a
summary (with the late penalty, if any), then per exercise its status, score, the
check's diagnosis, what a grader changed by hand (score, extra credit, comment)
and the student's own code for that exercise. It is built from the grading results and
the submission only, so it can never show a hidden test or the reference answer.
Everything the student wrote is HTML-escaped. The submission is read within
grading's own bound (:data:`autograder.untrusted.MAX_NOTEBOOK_BYTES`), and the page
shows at most :data:`MAX_SHOWN_CELLS` cells of one exercise and
:data:`MAX_SHOWN_CHARS` characters of code in all, so a page stays small
whatever the notebook holds.
"""
from __future__ import annotations

import html
import json
from pathlib import Path

from .scores import ExerciseScore
from .text import score_text
from .untrusted import MAX_NOTEBOOK_BYTES, NotebookError, read_untrusted

__all__ = ["student_code", "render_feedback", "MAX_SHOWN_CHARS", "MAX_SHOWN_CELLS"]

# The code a feedback page shows: at most this many characters in all (a chapter's
# answers are a few kB) and this many cells with one exercise's id.
MAX_SHOWN_CHARS = 64 * 2**10
MAX_SHOWN_CELLS = 5

STATUS_WORDS = {
    "passed": "passed",
    "partial": "partly passed",
    "failed": "failed",
    "error": "error",
    "missing": "missing",
    "timeout": "timed out",
    "cheat": "tampering detected",
    "invalid": "not gradable",
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


def _hand_lines(s: ExerciseScore) -> list[str]:
    """What a grader changed on one exercise, as HTML paragraphs (escaped)."""
    e = html.escape
    lines = []
    if s.manual_score is not None:
        lines.append(f'<p class="hand">Graded by hand: {score_text(s.manual_score)} / {score_text(s.max_score)} points '
                     f"(the checks gave {score_text(s.checks_score)}).</p>")
    if s.extra_credit:
        lines.append(f'<p class="hand">Extra credit: {score_text(s.extra_credit)} point(s).</p>')
    if s.comment:
        lines.append(f'<p class="hand">Grader\'s comment: {e(s.comment)}</p>')
    return lines


def render_feedback(student: str, chapter: str, scores: list[ExerciseScore], code: dict[str, list[str]],
                    status: str, *, late_seconds: float = 0.0, penalty: float = 0.0) -> str:
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

    Returns:
        The HTML text (deterministic for the same inputs).
    """
    e = html.escape
    raw = sum(s.score for s in scores)
    total = max(0.0, raw - penalty)
    max_total = sum(s.max_score for s in scores)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(chapter)} feedback for {e(student)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>{e(chapter)}</h1>",
        f"<p>Student <b>{e(student)}</b>: <b>{score_text(total)} / {score_text(max_total)}</b> points ({e(status)}).</p>",
        *([f'<p class="late">Submitted {duration_text(late_seconds)} after the due date: late penalty '
           f"{score_text(penalty)} point(s), taken off the {score_text(raw)} earned.</p>"] if late_seconds > 0 else []),
        "<table><thead><tr><th>exercise</th><th>points</th><th>status</th><th>message</th></tr></thead><tbody>",
    ]
    for s in scores:
        parts.append(
            f'<tr><td><a href="#{e(s.exercise)}">{e(s.exercise)}</a></td>'
            f"<td>{score_text(s.score)} / {score_text(s.max_score)}</td>"
            f'<td class="{e(s.status)}">{e(STATUS_WORDS.get(s.status, s.status))}</td>'
            f"<td>{e(s.reason)}</td></tr>"
        )
    parts.append("</tbody></table>")
    budget = [MAX_SHOWN_CHARS]  # characters of code the page may still show
    for s in scores:
        cells = code.get(s.exercise, [])
        parts.append(f'<section id="{e(s.exercise)}"><h2>{e(s.exercise)}</h2>')
        parts.append(
            f'<p class="{e(s.status)}">{e(STATUS_WORDS.get(s.status, s.status))}, '
            f"{score_text(s.score)} / {score_text(s.max_score)} points.</p>"
        )
        graded_parts = s.parts
        if graded_parts:
            parts.append("<table><thead><tr><th>graded part</th><th>points</th><th>what the check found</th>"
                         "</tr></thead><tbody>")
            for p in graded_parts:
                earned = p.score >= p.points
                parts.append(
                    f'<tr><td>{e(p.name)}</td><td class="{"earned" if earned else "missed"}">'
                    f"{score_text(p.score)} / {score_text(p.points)}</td>"
                    f"<td>{'ok' if earned else e(p.message or 'failed')}</td></tr>"
                )
            parts.append("</tbody></table>")
        elif s.reason:
            parts.append(f"<p>{e(s.reason)}</p>")
        for note in s.notes:
            parts.append(f'<p class="note">Note: {e(note)}</p>')
        parts.extend(_hand_lines(s))
        if not cells:
            parts.append("<p><i>No cell for this exercise was found in your notebook.</i></p>")
        for i, source in enumerate(cells[:MAX_SHOWN_CELLS]):
            if len(cells) > 1:
                parts.append(f"<p>Your cell {i + 1} of {len(cells)} with this exercise's id:</p>")
            else:
                parts.append("<p>Your code:</p>")
            shown, budget[0] = source[:max(0, budget[0])], budget[0] - len(source)
            cut = f"\n… ({len(source) - len(shown):,} more characters not shown)" if len(shown) < len(source) else ""
            parts.append(f"<pre><code>{e(shown)}{cut}</code></pre>")
        if len(cells) > MAX_SHOWN_CELLS:
            parts.append(f"<p><i>{len(cells) - MAX_SHOWN_CELLS} more cells with this exercise's id are not "
                         "shown.</i></p>")
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
