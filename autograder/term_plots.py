"""The class report's figures of a term: lateness and resubmissions per chapter, and the
trends across chapters (each student's score, each graded part's success).

Drawn with matplotlib into inline SVG by :mod:`autograder.report`'s own helpers (text as
paths, no script, no link), so the pages stay self-contained:

* :func:`late_svg`: per chapter, how the students handed in — on time, on time thanks to
  an extension or late days, or late by under a day, one to three days, more — and how
  many times each one's notebook changed between ``grade`` runs (the ``new submission``
  entries of ``OUT/regrades.jsonl``, :mod:`autograder.regrades`);
* :func:`student_trend_svg`: each student's final score (% of the chapter's points) across
  the chapters, one thin line each, the class median bold;
* :func:`part_trend_svg`: the share of students who earned each graded part, for every
  part name that recurs across chapters ("values on random inputs", "shapes"...), one
  line per part;
* :func:`term_page`: ``report/term.html`` with the two trends and a student × chapter table
  (score, late days spent).
"""
from __future__ import annotations

# Each ``summary`` below is an :class:`autograder.report.ChapterSummary`; this module is
# imported by the report, so it names the class without importing it.

import statistics
from collections import defaultdict

from .pagestyle import BLUE, CSS, INK, Markup, inline_svg, new_figure, render_page, style_axes
from .results import SubmissionGrade

__all__ = ["late_buckets", "resubmissions", "late_svg", "student_trend_svg", "part_trend_svg", "term_page",
           "chapter_section"]

DAY = 86400.0
LATE_LABELS = ["on time", "extension or\nlate days", "< 1 day\nlate", "1-3 days\nlate", "> 3 days\nlate"]
_ORANGE, _GREY = "#e69f00", "#bbbbbb"
# The term's page and a chapter page's section (autograder/templates/; autograder.pagestyle.render_page).
TERM_TEMPLATE = "term.html"
LATE_TEMPLATE = "report_late.html"


def late_buckets(summary, grades: dict[tuple[str, str], SubmissionGrade]) -> list[int]:
    """How many of the chapter's submitters fall in each of :data:`LATE_LABELS`."""
    counts = [0] * len(LATE_LABELS)
    for student in summary.students:
        g = grades.get((student, summary.chapter))
        late = g.late_seconds if g else 0.0
        helped = bool(g and (g.extension_seconds > 0 or g.late_days_used > 0))
        if late <= 0:
            counts[1 if helped else 0] += 1
        elif late < DAY:
            counts[2] += 1
        elif late <= 3 * DAY:
            counts[3] += 1
        else:
            counts[4] += 1
    return counts


def resubmissions(log: list[dict], chapter: str) -> dict[str, int]:
    """Student -> how many ``grade`` runs found a new notebook of ``chapter`` (regrade log)."""
    counts: dict[str, int] = defaultdict(int)
    for record in log:
        seen = set()
        for change in record.get("changes", []):
            if change.chapter == chapter and "new submission" in change.reasons and change.student not in seen:
                seen.add(change.student)
                counts[change.student] += 1
    return dict(counts)


def late_svg(summary, grades: dict[tuple[str, str], SubmissionGrade], log: list[dict]) -> str:
    """Two bar charts side by side: lateness buckets, and resubmissions per student (0, 1, 2, 3+)."""
    fig = new_figure(7.2, 2.5)
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [5, 3]})
    counts = late_buckets(summary, grades)
    bars = left.bar(range(len(counts)), counts, color=[BLUE, "#56b4e9", _ORANGE, "#d55e00", "#a11"])
    left.set_xticks(range(len(counts)))
    left.set_xticklabels(LATE_LABELS, fontsize=8)
    left.set_ylabel("students", fontsize=9, color=INK)
    left.set_title("handed in", fontsize=9, color=INK)
    again = resubmissions(log, summary.chapter)
    per = [0, 0, 0, 0]
    for student in summary.students:
        per[min(3, again.get(student, 0))] += 1
    bars2 = right.bar(range(4), per, color=_GREY)
    right.set_xticks(range(4))
    right.set_xticklabels(["0", "1", "2", "3+"], fontsize=8)
    right.set_xlabel("new notebooks after the first grading", fontsize=8, color=INK)
    right.set_title("resubmissions", fontsize=9, color=INK)
    for ax, bs, ns in ((left, bars, counts), (right, bars2, per)):
        for bar, n in zip(bs, ns):
            if n:
                ax.annotate(str(n), (bar.get_x() + bar.get_width() / 2, n), xytext=(0, 2),
                            textcoords="offset points", ha="center", va="bottom", fontsize=8, color=INK)
        ax.set_ylim(0, max(1, max(ns)) * 1.25)
        ax.yaxis.get_major_locator().set_params(integer=True)
        style_axes(ax)
    fig.tight_layout()
    return inline_svg(fig, f"Lateness and resubmissions of {summary.chapter}: " + ", ".join(
        f"{label.replace(chr(10), ' ')} {n}" for label, n in zip(LATE_LABELS, counts)))


def chapter_section(summary, grades: dict[tuple[str, str], SubmissionGrade], log: list[dict]) -> str:
    """The chapter page's section on lateness and resubmissions (HTML): the figure, or one
    line when everyone was on time and nobody resubmitted."""
    if not summary.students:
        return ""
    counts = late_buckets(summary, grades)
    again = resubmissions(log, summary.chapter)
    if counts[0] == len(summary.students) and not any(again.get(s) for s in summary.students):
        return render_page(LATE_TEMPLATE, figure=None, on_time=counts[0])
    helped = []
    for s in summary.students:
        g = grades.get((s, summary.chapter))
        if g is not None and (g.extension_seconds > 0 or g.late_days_used > 0):
            how = [f"extension {g.extension_seconds / DAY:g} d"] if g.extension_seconds else []
            how += [f"{g.late_days_used} late day(s)"] if g.late_days_used else []
            helped.append({"student": s, "how": how})
    return render_page(LATE_TEMPLATE, figure=Markup(late_svg(summary, grades, log)), on_time=counts[0],
                       helped_count=counts[1], helped=helped, late=sum(counts[2:]))


def student_trend_svg(summaries: list) -> str:
    """Each student's % of the chapter's points across chapters; the median bold."""
    fig = new_figure(7.2, 2.8)
    ax = fig.add_subplot()
    xs = list(range(len(summaries)))
    students = sorted({s for summary in summaries for s in summary.totals})
    for student in students:
        pts = [(x, 100 * t / m) for x, summary in zip(xs, summaries)
               if (tm := summary.totals.get(student)) and (t := tm[0]) is not None and (m := tm[1]) > 0]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], color=_GREY, linewidth=0.8, marker="o", markersize=2)
    medians = [statistics.median([100 * t / m for t, m in s.totals.values() if m > 0]) if s.totals else float("nan")
               for s in summaries]
    ax.plot(xs, medians, color=BLUE, linewidth=2.2, marker="o", label="median")
    ax.set_xticks(xs)
    ax.set_xticklabels([s.chapter for s in summaries], fontsize=8, rotation=15)
    ax.set_ylim(-3, 103)
    ax.set_ylabel("% of the chapter's points", fontsize=9, color=INK)
    ax.legend(fontsize=8, frameon=False, loc="lower left")
    style_axes(ax)
    fig.tight_layout()
    return inline_svg(fig, f"Each of {len(students)} students' scores across {len(summaries)} chapters, with the median")


def part_trends(summaries: list) -> dict[str, list[float | None]]:
    """Part name -> the share of submitters who earned it in each chapter (``None``: no such
    part there), for the names that appear in at least two chapters (every part of an
    exercise with that name counts)."""
    shares: dict[str, list[float | None]] = {}
    for i, summary in enumerate(summaries):
        by_name: dict[str, list[float]] = defaultdict(list)
        for p in summary.parts:
            if p.of:
                by_name[p.name].append(p.earned / p.of)
        for name, values in by_name.items():
            shares.setdefault(name, [None] * len(summaries))[i] = sum(values) / len(values)
    return {n: v for n, v in shares.items() if sum(x is not None for x in v) >= 2}


def part_trend_svg(summaries: list) -> str:
    """One line per recurring part name: the share of students who earned it, chapter by chapter."""
    trends = part_trends(summaries)
    fig = new_figure(7.2, 2.8)
    ax = fig.add_subplot()
    xs = list(range(len(summaries)))
    palette = [BLUE, _ORANGE, "#009e73", "#cc79a7", "#d55e00", "#56b4e9", "#000000", "#f0e442"]
    for k, (name, values) in enumerate(sorted(trends.items())):
        pts = [(x, 100 * v) for x, v in zip(xs, values) if v is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, linewidth=1.4,
                color=palette[k % len(palette)], label=name if len(name) <= 32 else name[:31] + "…")
    ax.set_xticks(xs)
    ax.set_xticklabels([s.chapter for s in summaries], fontsize=8, rotation=15)
    ax.set_ylim(-3, 103)
    ax.set_ylabel("students who earned it (%)", fontsize=9, color=INK)
    if trends:
        ax.legend(fontsize=7, frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
    style_axes(ax)
    fig.tight_layout(rect=(0, 0, 0.72, 1))
    return inline_svg(fig, "Share of students who earned each recurring graded part, chapter by chapter: "
                + ", ".join(sorted(trends)) if trends else "no part recurs across chapters")


def term_page(summaries: list, grades: dict[tuple[str, str], SubmissionGrade],
              roster=None) -> str:
    """``report/term.html``: the trends and the student × chapter table; with a roster
    (:class:`autograder.roster.Roster`) the students' names and sections, the roster's
    students who handed nothing in and the graded students it does not know."""
    graded = sorted({s for summary in summaries for s in summary.totals} | {
        s for summary in summaries for s in summary.not_submitted})
    students = graded
    notes = []
    if roster is not None:
        _, unknown, absent = roster.join(sorted({s for summary in summaries for s in summary.totals}))
        students = [s.id for s in roster.students] + unknown
        if absent:
            notes.append(f"In the roster, nothing handed in: {', '.join(s.id for s in absent)}.")
        if unknown:
            notes.append(f"Graded but not in the roster (no LMS can take their grades): {', '.join(unknown)}.")
    rows = []
    for student in students:
        cells = []
        for summary in summaries:
            tm = summary.totals.get(student)
            g = grades.get((student, summary.chapter))
            if tm is None:
                cells.append(None)
                continue
            days = f" · {g.late_days_used} late day(s)" if g and g.late_days_used else ""
            ext = " · extension" if g and g.extension_seconds else ""
            cells.append({"score": f"{tm[0]:g}/{tm[1]:g}", "note": days + ext})
        row = roster.get(student) if roster is not None else None
        rows.append({"id": student, "known": row is not None, "name": row.name if row else "",
                     "section": row.section if row else "", "cells": cells,
                     "late_days": sum(g.late_days_used for (s, _), g in grades.items() if s == student)})
    return render_page(TERM_TEMPLATE, css=Markup(CSS), chapters=[s.chapter for s in summaries], students=rows,
                       roster=roster is not None, student_trend=Markup(student_trend_svg(summaries)),
                       part_trend=Markup(part_trend_svg(summaries)) if len(summaries) >= 2 else "", notes=notes)
