"""What a graded class did: the class report (the console summary after a batch, another
view of the same results, is :mod:`autograder.summary`).

* :func:`class_report` — ``python -m autograder report OUT``: from a ``grade``
  output folder or an nbgrader course's ``<course>/grades/<assignment>``
  (``autograde``'s; ``report --course COURSE ASSIGNMENT``), from its
  ``results.json`` (:mod:`autograder.results`, the run's typed results, of which
  ``scores.csv`` and ``grades.csv`` are views), one self-contained HTML page and
  one CSV per chapter: the distribution of the final scores (hand grades and late
  penalties included), each exercise's parts with the share of students whose
  answer earned them, and the most frequent diagnoses across the class ("40% —
  softmax: you normalised over axis 0, not axis=-1 …"), from the checks' verdicts.
  A notebook of another chapter is one diagnosis, "submitted the wrong chapter's
  notebook (05_multi_head_attention)": grading found the chapter it holds and the
  results record it (``SubmissionGrade.wrong_chapter``); no submission is read here.

Diagnoses. A check's failure message names the case it failed on and its
numbers ("largest error 0.641 at index (0, 0) … (2x3 scores)"), then, when the
check recognised the mistake, a hint after ``Hint:`` that names it. Messages
are grouped by :func:`diagnosis_key`: the hint (else the message's head before
the first colon), with every parenthesised aside and every number taken out,
so "you normalised over axis 0, not axis=-1" and "… axis 1, not axis=0" are one
diagnosis. The hint is the one the check produced, kept apart from the message
(``CheckFailure.hint``, a part's ``hint`` in the results): a message may quote
the student's own exception, and a "Hint: …" the student wrote there is never
taken as the grader's diagnosis. Every part's message is read whole.

Everything that came from a submission (student names, messages that quote a
student's exception) is HTML-escaped on the page and written to the terminal
through :func:`autograder.text.safe_text`. The page has no script and no
external reference: the figures are inline SVG (matplotlib, text as paths), the
style is inline, the fonts are the system's; it opens from the file system.
"""
from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from .feedback import STATUS_WORDS, duration_text
from .files import write_atomic
from .pagestyle import BLUE, CSS, INK, Markup, escape, inline_svg, new_figure, render_page, style_axes
from .regrades import read_log
from .results import RESULTS_FILE, ClassResults, ResultsError, SubmissionGrade
from .scores import ExerciseScore, Status, SubmissionStatus
from .term_plots import chapter_section, term_page
from .text import csv_text

__all__ = [
    "ReportError",
    "diagnosis_key",
    "load_rows",
    "chapter_summary",
    "class_report",
]

# The report's pages (autograder/templates/; rendered by autograder.pagestyle.render_page).
CHAPTER_TEMPLATE = "report_chapter.html"
INDEX_TEMPLATE = "report_index.html"
# How many diagnoses the class report lists per chapter.
TOP_DIAGNOSES = 12
NOT_IMPLEMENTED_HEAD = "not implemented yet"


class ReportError(ValueError):
    """The folder is not a ``grade`` output; the message says what was expected."""


# --------------------------------------------------------------------------- reading a grade output


def load_rows(out: Path) -> tuple[list[ExerciseScore], dict[tuple[str, str], SubmissionGrade]]:
    """The results of a ``grade`` (or ``autograde``) output folder, from its ``results.json``.

    Args:
        out: the folder ``python -m autograder grade … --out OUT`` wrote, or the
            ``<course>/grades/<assignment>`` folder of ``autograde``.

    Returns:
        ``(rows, grades)``: one :class:`~autograder.results.ExerciseScore` per student ×
        exercise (a row of ``scores.csv``, its parts' messages whole), and each
        ``(student, chapter)``'s :class:`~autograder.results.SubmissionGrade` (its
        status, late penalty and the digest of the notebook graded).

    Raises:
        ReportError: ``out`` is not a folder, or has no ``results.json`` this grader reads.
    """
    out = Path(out)
    expected = (f"expected the output folder of `python -m autograder grade … --out {out}` or of "
                "`autograde` (COURSE/grades/ASSIGNMENT), with the results.json they write")
    if not out.is_dir():
        raise ReportError(f"{out} is not a folder: {expected}")
    try:
        results = ClassResults.read(out)
    except ResultsError as exc:
        raise ReportError(f"{exc}: {expected} (grade again: unchanged work comes from the journal)") from None
    return results.exercises, {(s.student, s.chapter): s for s in results.submissions}


# --------------------------------------------------------------------------- diagnoses


def _strip_asides(text: str) -> str:
    """``text`` without its parenthesised asides (innermost first, so nested ones go too)."""
    previous = None
    while previous != text:
        previous, text = text, re.sub(r"\s*\([^()]*\)", "", text)
    return text


_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _hint_or_head(message: str, hint: str = "") -> tuple[str, bool]:
    """The check's hint (what it recognised), or the message's head: the words
    before the first colon, which say what differs without the case's numbers.
    Only ``hint`` — the check's own, kept apart — counts as recognised: a
    "Hint:" inside ``message`` may be the student's text."""
    hint = " ".join(str(hint or "").split())
    if hint:
        return hint, True
    text = " ".join(str(message).split())
    text = text.split(" Hint: ", 1)[0]  # never a hint here: only cut off, so the head is what differs
    text = re.sub(r"^(?:'[^']+'(?:, )?)+: ", "", text)  # a reason's "'part': " prefix (a part without its own message)
    head = text.split(": ", 1)[0].strip()
    return (head or text), False


def diagnosis_key(message: str, hint: str = "") -> str:
    """The group of a failure: the check's hint (else the message's head), lower
    case, with parenthesised asides and numbers taken out. Two messages about the
    same mistake on different inputs get the same key.

    Args:
        message: a part's message as the checks write it.
        hint: the check's own hint of that failure (a part's ``hint``; ``""``: none).

    Returns:
        The key, e.g. ``"you normalised over axis #, not axis=#: pass `axis` to
        both np.max and np.sum."``.
    """
    core, _ = _hint_or_head(message, hint)
    key = _NUMBER.sub("#", _strip_asides(core)).lower()
    return " ".join(key.split())


@dataclass
class Diagnosis:
    """One mistake found in several students' answers to one exercise."""

    exercise: str
    key: str
    text: str  # the most frequent wording, as a student's feedback shows it
    recognised: bool  # a check's hint named it (else only what differs is known)
    students: list[str]
    not_judged: str = ""  # the status when no check judged the answer (error, timeout, cheat, …)

    @property
    def not_attempted(self) -> bool:
        """The answer was still the released stub (``raise NotImplementedError()``)."""
        return self.key.startswith(NOT_IMPLEMENTED_HEAD)


def _diagnoses(rows: list[ExerciseScore]) -> list[Diagnosis]:
    """Every diagnosis of the missed parts of ``rows``, each student counted once per
    exercise and mistake, most frequent first; answers left as the released stub
    ("not implemented yet") after every mistake."""
    who: dict[tuple[str, str], set[str]] = defaultdict(set)
    wording: dict[tuple[str, str], Counter] = defaultdict(Counter)
    hinted: dict[tuple[str, str], bool] = {}
    unjudged: dict[tuple[str, str], str] = {}
    for row in rows:
        messages = [(p.message or row.reason, p.hint) for p in row.parts if not p.earned]
        if not row.parts and row.status != Status.PASSED and row.reason:
            messages = [(row.reason, "")]  # a cell-level reason: the grader's words around the answer's
            if row.status not in (Status.FAILED, Status.PARTIAL):
                unjudged[(row.exercise, diagnosis_key(row.reason))] = row.status
        for message, hint in messages:
            if not message:
                continue
            key = (row.exercise, diagnosis_key(message, hint))
            text, recognised = _hint_or_head(message, hint)
            who[key].add(row.student)
            wording[key][text] += 1
            hinted[key] = hinted.get(key, False) or recognised
    found = [Diagnosis(ex, key, min(wording[(ex, key)].items(), key=lambda kv: (-kv[1], kv[0]))[0],
                       hinted[(ex, key)], sorted(who[(ex, key)]), unjudged.get((ex, key), "")) for ex, key in who]
    return sorted(found, key=lambda d: (d.not_attempted, -len(d.students), not d.recognised, d.exercise, d.key))


# --------------------------------------------------------------------------- one chapter


@dataclass
class PartShare:
    exercise: str
    name: str
    points: float
    earned: int
    of: int


@dataclass
class ChapterSummary:
    """What the report says about one chapter (:func:`chapter_summary`)."""

    chapter: str
    students: list[str]  # who submitted
    not_submitted: list[str]
    totals: dict[str, tuple[float, float]]  # student -> (final score, max): hand grades and late penalty in
    max_score: float
    parts: list[PartShare]
    diagnoses: list[Diagnosis]
    status: dict[str, str]
    missed: dict[str, list[str]]  # student -> "exercise: part" the checks marked missed
    adjusted: dict[str, list[str]] = field(default_factory=dict)  # student -> hand grades, late penalty

    def share(self, count: int) -> float:
        return count / len(self.students) if self.students else 0.0


def nothing_found(rows: list[ExerciseScore]) -> bool:
    """Every exercise of a submitted notebook is ``missing``: not one of the chapter's
    solution cells was in it (another chapter's notebook, or every cell deleted)."""
    return bool(rows) and all(r.status == Status.MISSING for r in rows)


WRONG_CHAPTER = "submitted the wrong chapter's notebook ({real})"
NOTHING_FOUND = "no solution cell of this chapter was found (another chapter's notebook, or the cells were deleted)"


def _missed(row: ExerciseScore) -> list[str]:
    """What the checks marked missed in one answer, as the students' table lists it."""
    lost = [p for p in row.parts if not p.earned]
    if not row.parts:
        return [] if row.status == Status.PASSED else [f"{row.exercise} ({row.status})"]
    if lost and len(lost) == len(row.parts):
        if all(diagnosis_key(p.message or row.reason, p.hint).startswith(NOT_IMPLEMENTED_HEAD) for p in lost):
            return [f"{row.exercise}: {NOT_IMPLEMENTED_HEAD}"]
        return [f"{row.exercise}: every part"]
    return [f"{row.exercise}: {p.name}" for p in lost]


def chapter_summary(chapter: str, rows: list[ExerciseScore],
                    grades: dict[tuple[str, str], SubmissionGrade]) -> ChapterSummary:
    """Score totals, parts' shares and diagnoses of one chapter's rows.

    Args:
        chapter: the chapter id.
        rows: the chapter's rows of ``scores.csv`` (:func:`load_rows`).
        grades: each ``(student, chapter)``'s :class:`~autograder.results.SubmissionGrade`
            (status, late penalty, the chapter a notebook of another one holds).

    Returns:
        The :class:`ChapterSummary`. The totals are final scores, as ``nbgrader
        export`` gives them: ``max(0, score - late penalty)``, the score with any hand
        grade; the parts' shares, the missed parts and the diagnoses are the checks'
        own verdicts. Shares are of the students who submitted.
    """
    by_student: dict[str, list[ExerciseScore]] = defaultdict(list)
    for r in rows:
        by_student[r.student].append(r)
    line = {s: grades.get((s, chapter)) for s in by_student}
    students = sorted(s for s in by_student if line[s] is None or line[s].status != SubmissionStatus.NOT_SUBMITTED)
    wrong = {s: line[s].wrong_chapter for s in students if line[s] is not None and line[s].wrong_chapter}
    absent = sorted(set(by_student) - set(students))
    kept = [r for r in rows if r.student in students]
    exercises = list(dict.fromkeys(r.exercise for r in rows))
    part_names: dict[str, dict[str, float]] = {ex: {} for ex in exercises}
    for r in rows:
        for p in r.parts:
            part_names[r.exercise].setdefault(p.name, p.points)
    parts = []
    for ex in exercises:
        for name, points in part_names[ex].items():
            earned = sum(1 for r in kept if r.exercise == ex and any(p.name == name and p.earned for p in r.parts))
            parts.append(PartShare(ex, name, points, earned, len(students)))
    totals, adjusted, missed, status = {}, {}, {}, {}
    for s in students:
        penalty = line[s].penalty if line[s] else 0.0
        raw = sum(r.score for r in by_student[s])
        totals[s] = (max(0.0, raw - penalty), sum(r.max_score for r in by_student[s]))
        adjusted[s] = [f"{r.exercise}: {r.score:g}/{r.max_score:g} by hand (the checks gave {r.auto_score:g})"
                       for r in by_student[s] if r.auto_score is not None and abs(r.score - r.auto_score) > 1e-9]
        if line[s] and line[s].late_seconds > 0:
            adjusted[s].append(f"{duration_text(line[s].late_seconds)} late: {penalty:g} point(s) off")
        status[s] = line[s].status if line[s] else ""
        if s in wrong:
            missed[s] = [WRONG_CHAPTER.format(real=wrong[s])]
            status[s] = "wrong chapter"
        elif nothing_found(by_student[s]):
            missed[s] = [NOTHING_FOUND]
        else:
            missed[s] = [m for r in by_student[s] for m in _missed(r)]
    max_score = max((m for _, m in totals.values()), default=sum(
        max((r.max_score for r in rows if r.exercise == ex), default=0.0) for ex in exercises))
    # A notebook none of whose exercises was found is one diagnosis of the whole notebook,
    # not one "no solution cell" per exercise.
    whole: dict[tuple[str, str], list[str]] = defaultdict(list)
    for s in students:
        if s in wrong:
            whole[(f"wrong chapter {wrong[s]}", WRONG_CHAPTER.format(real=wrong[s]))].append(s)
        elif nothing_found(by_student[s]):
            whole[("no solution cell found", NOTHING_FOUND)].append(s)
    counted = {s for who in whole.values() for s in who}
    diagnoses = _diagnoses([r for r in kept if r.student not in counted])
    diagnoses += [Diagnosis("", key, text, True, sorted(who)) for (key, text), who in whole.items()]
    # Most frequent first; at equal counts an answer's mistake before a whole notebook's, stubs last.
    diagnoses.sort(key=lambda d: (d.not_attempted, -len(d.students), not d.exercise, not d.recognised,
                                  d.exercise, d.key))
    return ChapterSummary(chapter, students, absent, totals, max_score, parts, diagnoses, status, missed, adjusted)


# --------------------------------------------------------------------------- figures




def histogram_svg(summary: ChapterSummary) -> str:
    """The distribution of the chapter's final totals: one bar per score (per half
    point when a hand grade or a penalty gave halves; per range of scores when that
    makes more than 25 bars), the count above each bar."""
    # numpy only for the histogram
    import numpy as np

    scores = np.array([s for s, _ in summary.totals.values()], dtype=float)
    top = max(summary.max_score, float(scores.max()) if scores.size else 0.0, 1.0)
    fig = new_figure(7.2, 2.6)
    ax = fig.add_subplot()
    step = next((st for st in (1.0, 0.5) if np.allclose(scores / st, np.round(scores / st))
                 and float(top / st).is_integer()), None)
    if step is not None and top / step <= 25:
        centers = np.arange(0, top + step / 2, step)
        edges = np.append(centers - step / 2, top + step / 2)
        counts = np.array([int(np.sum(np.isclose(scores, c))) for c in centers])
        width = 0.8 * step
    else:
        edges = np.linspace(0, top, 11)
        counts, _ = np.histogram(scores, bins=edges)
        centers = (edges[:-1] + edges[1:]) / 2
        width = (edges[1] - edges[0]) * 0.9
    bars = ax.bar(centers, counts, width=width, color=BLUE)
    for bar, n in zip(bars, counts):
        if n:
            ax.annotate(str(int(n)), (bar.get_x() + bar.get_width() / 2, n), xytext=(0, 2),
                        textcoords="offset points", ha="center", va="bottom", fontsize=9, color=INK)
    ax.set_xlim(edges[0] - 0.2, edges[-1] + 0.2)
    ax.set_ylim(0, max(1, int(counts.max()) if counts.size else 1) * 1.2)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel(f"final points (of {summary.max_score:g}): hand grades and late penalties included",
                  fontsize=9, color=INK)
    ax.set_ylabel("students", fontsize=9, color=INK)
    style_axes(ax)
    fig.tight_layout()
    return inline_svg(fig, f"Histogram of the {len(summary.students)} final totals of {summary.chapter}")


def parts_svg(summary: ChapterSummary) -> str:
    """One horizontal bar per graded part: the share of students who earned it,
    the parts grouped under their exercise's name (a bold row without a bar)."""
    rows: list[tuple[str, PartShare | None]] = []  # (label, part); None: an exercise's heading
    for p in summary.parts:
        if not rows or rows[-1][1].exercise != p.exercise:
            rows.append((p.exercise, None))
        rows.append((p.name, p))
    fig = new_figure(7.2, 0.8 + 0.27 * max(1, len(rows)))
    ax = fig.add_subplot()
    ys = list(range(len(rows)))[::-1]
    for y, (_, p) in zip(ys, rows):
        if p is None:
            continue
        share = 100.0 * summary.share(p.earned)
        ax.barh(y, 100.0, color="#e6e6e6", height=0.7)
        ax.barh(y, share, color=BLUE, height=0.7)
        ax.text(102, y, f"{share:.0f}% ({p.earned}/{p.of})", va="center", fontsize=8.5, color=INK,
                clip_on=False)
    ax.set_yticks(ys)
    ax.set_yticklabels([label if len(label) <= 45 else label[:44] + "…" for label, _ in rows], fontsize=8.5)
    for tick, (_, p) in zip(ax.get_yticklabels(), rows):
        if p is None:
            tick.set_fontweight("bold")
    ax.tick_params(axis="y", length=0)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlim(0, 100)
    ax.set_xticks([0, 25, 50, 75, 100])
    ax.set_xlabel("students who earned the part (%)", fontsize=9, color=INK)
    style_axes(ax)
    fig.tight_layout(rect=(0, 0, 0.88, 1))  # room on the right for the shares
    return inline_svg(fig, f"Share of students who earned each graded part of {summary.chapter}")


# --------------------------------------------------------------------------- HTML and CSV


def _code_spans(text: str) -> Markup:
    """Escaped text whose `backquoted` names are shown as code."""
    return Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", escape(text)))


def _pct(share: float) -> str:
    return f"{100 * share:.0f}%"


def _bar(share: float) -> Markup:
    """A share as a bar in a grey track of fixed width, so that bars line up and compare."""
    return Markup(f'<span class="track"><span class="bar" style="width:{100 * share:.1f}%"></span></span>')


# ``grades.csv``'s status words as the students' table shows them.
STATUS_SHOWN = {SubmissionStatus.CHEAT: "flagged (tampering caught)", SubmissionStatus.INVALID: "invalid (unreadable)"}


def _where(d: Diagnosis) -> Markup:
    """A diagnosis's exercise as a page shows it (a whole-notebook diagnosis has none)."""
    return Markup(f"<code>{escape(d.exercise)}</code>" if d.exercise else '<span class="muted">whole notebook</span>')


def render_html(summary: ChapterSummary, source: str, extra: str = "") -> str:
    """The class report page of one chapter (self-contained: no script, no link), the template
    :data:`CHAPTER_TEMPLATE`; ``extra`` (HTML) goes before the students' table
    (:func:`autograder.term_plots.chapter_section`)."""
    s = summary
    n = len(s.students)
    scores = [t for t, _ in s.totals.values()]
    mean = statistics.fmean(scores) if scores else 0.0
    median = statistics.median(scores) if scores else 0.0
    by_hand = sum(1 for st in s.students if any("by hand" in a for a in s.adjusted.get(st, [])))
    late = sum(1 for st in s.students if any(a.endswith("point(s) off") for a in s.adjusted.get(st, [])))
    adjustments = ", ".join(a for a in (f"{by_hand} graded by hand" if by_hand else "",
                                        f"{late} late" if late else "") if a)
    top = s.diagnoses[:TOP_DIAGNOSES]

    def diagnosis(d: Diagnosis) -> dict:
        share = s.share(len(d.students))
        if d.not_attempted:
            kind = Markup(' <span class="muted">(the released stub, left as it was)</span>')
        elif d.not_judged:
            kind = Markup(f' <span class="muted">(no check judged the answer: '
                          f"{escape(STATUS_WORDS.get(d.not_judged, d.not_judged))})</span>")
        elif not d.recognised:
            kind = Markup(' <span class="muted">(what differs; no known mistake matched)</span>')
        else:
            kind = ""
        return {"pct": _pct(share), "bar": _bar(share), "count": len(d.students), "where": _where(d),
                "text": _code_spans(d.text), "kind": kind, "students": ", ".join(d.students)}

    any_adjusted = any(s.adjusted.get(st) for st in s.students)
    students = []
    for student in sorted(s.students, key=lambda st: (s.totals[st][0], st)):
        score, max_score = s.totals[student]
        status = s.status.get(student) or ""
        students.append({"name": student, "points": f"{score:g}/{max_score:g}",
                         "status": STATUS_SHOWN.get(status, status),
                         "missed": "; ".join(s.missed[student]) if s.missed[student]
                         else Markup('<span class="earned">none</span>'),
                         "adjusted": "; ".join(s.adjusted.get(student, []))})
    return render_page(
        CHAPTER_TEMPLATE, css=Markup(CSS), chapter=s.chapter, n=n, not_submitted=s.not_submitted,
        mean=f"{mean:.3g}", max_score=f"{s.max_score:g}", median=f"{median:.3g}",
        full=sum(1 for t, m in s.totals.values() if m > 0 and t >= m - 1e-9), adjustments=adjustments,
        top=[diagnosis(d) for d in top], headlines=[diagnosis(d) for d in top if not d.not_attempted][:3],
        rarer=len(s.diagnoses) - len(top),
        histogram=Markup(histogram_svg(s) if n else "<p>No submission.</p>"),
        parts_figure=Markup(parts_svg(s)) if s.parts else "",
        parts=[{"exercise": p.exercise, "name": p.name, "points": f"{p.points:g}", "bar": _bar(s.share(p.earned)),
                "pct": _pct(s.share(p.earned)), "earned": p.earned, "of": p.of} for p in s.parts],
        extra=Markup(extra), any_adjusted=any_adjusted, students=students, source=source)


CSV_COLUMNS = ["section", "exercise", "item", "points", "students", "of", "share", "key"]


def render_csv(summary: ChapterSummary) -> str:
    """The report's numbers: ``score`` rows (how many students got each total),
    ``part`` rows (who earned each part) and ``diagnosis`` rows (every mistake)."""
    s = summary
    n = len(s.students)
    rows: list[list] = []
    for total, count in sorted(Counter(t for t, _ in s.totals.values()).items()):
        rows.append(["score", "", f"{total:g}", f"{s.max_score:g}", count, n, f"{s.share(count):.4f}", ""])
    for p in s.parts:
        rows.append(["part", p.exercise, p.name, f"{p.points:g}", p.earned, p.of, f"{s.share(p.earned):.4f}", ""])
    for d in s.diagnoses:
        rows.append(["diagnosis", d.exercise, d.text, "", len(d.students), n, f"{s.share(len(d.students)):.4f}",
                     d.key])
    return csv_text(CSV_COLUMNS, rows)  # every field quoted and guarded against formulas


def _index_html(summaries: list[ChapterSummary]) -> str:
    """The report's index page (:data:`INDEX_TEMPLATE`): each chapter, its mean and most frequent mistake."""
    rows = []
    for s in summaries:
        scores = [t for t, _ in s.totals.values()]
        mean = statistics.fmean(scores) if scores else 0.0
        top = next((d for d in s.diagnoses if not d.not_attempted), None)
        mistake = (Markup(f"{_pct(s.share(len(top.students)))} · {_where(top)}: {_code_spans(top.text)}")
                   if top else "none")
        rows.append({"chapter": s.chapter, "submitted": len(s.students), "mean": f"{mean:.3g}/{s.max_score:g}",
                     "mistake": mistake})
    return render_page(INDEX_TEMPLATE, css=Markup(CSS), rows=rows)


def class_report(out: Path, dest: Path | None = None, roster=None) -> list[Path]:
    """Write the class report of a ``grade`` or ``autograde`` output folder.

    Args:
        out: the folder ``python -m autograder grade … --out OUT`` wrote, or an
            nbgrader course's ``<course>/grades/<assignment>`` (``autograde``'s).
        dest: where the pages go (default ``OUT/report``).
        roster: an :class:`autograder.roster.Roster`: the term page names the students,
            their sections, who in it never handed anything in, who graded is not in it.

    Returns:
        The files written: ``<chapter>.html`` and ``<chapter>.csv`` per chapter,
        then ``index.html`` and ``term.html`` (the trends across chapters).

    Raises:
        ReportError: ``out`` is not a grade output (the message says what was expected).
    """
    out = Path(out)
    rows, grades = load_rows(out)
    if not rows:
        raise ReportError(f"{out / RESULTS_FILE} has no rows: grade a class first")
    dest = Path(dest) if dest is not None else out / "report"
    dest.mkdir(parents=True, exist_ok=True)
    by_chapter: dict[str, list[ExerciseScore]] = defaultdict(list)
    for r in rows:
        by_chapter[r.chapter].append(r)
    log = read_log(out)
    written, summaries = [], []
    for chapter in sorted(by_chapter):
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", chapter) or chapter.startswith("."):
            raise ReportError(f"{out / RESULTS_FILE}: {chapter!r} is not a chapter id")
        summary = chapter_summary(chapter, by_chapter[chapter], grades)
        summaries.append(summary)
        page, table = dest / f"{chapter}.html", dest / f"{chapter}.csv"
        write_atomic(page, render_html(summary, RESULTS_FILE, chapter_section(summary, grades, log)))
        write_atomic(table, render_csv(summary))
        written += [page, table]
    index = dest / "index.html"
    write_atomic(index, _index_html(summaries))
    term = dest / "term.html"
    write_atomic(term, term_page(summaries, grades, roster))
    written += [index, term]
    return written
