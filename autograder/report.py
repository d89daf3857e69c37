"""What a graded class did: the console summary of a batch and the class report.

* :func:`summarise` — the lines ``python -m autograder grade`` prints after a
  batch: how many submissions were graded now and reused from the journal, and,
  by name, the invalid ones, the notebooks of the wrong chapter ("this is a
  05_multi_head_attention notebook, submitted as 04_self_attention"), the ones
  flagged for tampering and the ones that timed out; then where to look.
* :func:`class_report` — ``python -m autograder report OUT``: from a ``grade``
  output folder (its ``scores.csv``, ``grades.csv`` and journal), one
  self-contained HTML page and one CSV per chapter: the score distribution,
  each exercise's parts with the share of students who earned them, and the
  most frequent diagnoses across the class ("40% — softmax: you normalised over
  axis 0, not axis=-1 …").

Diagnoses. A check's failure message names the case it failed on and its
numbers ("largest error 0.641 at index (0, 0) … (2x3 scores)"), then, when the
check recognised the mistake, a hint after ``Hint:`` that names it. Messages
are grouped by :func:`diagnosis_key`: the hint (else the message's head before
the first colon), with every parenthesised aside and every number taken out,
so "you normalised over axis 0, not axis=-1" and "… axis 1, not axis=0" are one
diagnosis. The part messages come from the journal (``OUT/.journal``: one JSON
per submission, with every part's full message); ``scores.csv``'s ``reason``
column, cut at 400 characters, is the fallback when the journal is gone.

Everything that came from a submission (student names, messages that quote a
student's exception) is HTML-escaped on the page and written to the terminal
through :func:`autograder.grading.safe_text`. The page has no script and no
external reference: the figures are inline SVG (matplotlib, text as paths), the
style is inline, the fonts are the system's; it opens from the file system.
"""
from __future__ import annotations

import csv
import html
import io
import json
import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "ReportError",
    "Row",
    "summarise",
    "detect_chapter",
    "diagnosis_key",
    "load_rows",
    "chapter_summary",
    "class_report",
]

# How many submissions each category of the console summary names before "… and N more".
NAMED_PER_CATEGORY = 10
# How many diagnoses the class report lists per chapter.
TOP_DIAGNOSES = 12
# A journal entry larger than this is not read (the batch writes a few kB per submission).
MAX_JOURNAL_BYTES = 8 * 2**20
NOT_IMPLEMENTED_HEAD = "not implemented yet"


class ReportError(ValueError):
    """The folder is not a ``grade`` output; the message says what was expected."""


def _safe(text: str) -> str:
    from .grading import safe_text

    return safe_text(text)


# --------------------------------------------------------------------------- the console summary


def detect_chapter(path: Path | None) -> str | None:
    """The chapter a notebook belongs to, from its own cells: the chapter whose
    registered exercises match most of its nbgrader ``grade_id`` s (solution cells
    ``softmax``, test cells ``test_softmax``). ``None`` when nothing matches or the
    file cannot be read as a notebook.

    Args:
        path: the submitted notebook (read as untrusted data, never run).

    Returns:
        A chapter id such as ``"05_multi_head_attention"``, or ``None``.
    """
    if path is None:
        return None
    from .checks import load_all
    from .grading import NotebookError, read_notebook

    try:
        nb = read_notebook(Path(path))
    except NotebookError:
        return None
    names = set()
    for cell in nb["cells"]:
        meta = cell.get("metadata")
        nbg = meta.get("nbgrader") if isinstance(meta, dict) else None
        grade_id = nbg.get("grade_id") if isinstance(nbg, dict) else None
        if isinstance(grade_id, str):
            names.add(grade_id[len("test_"):] if grade_id.startswith("test_") else grade_id)
    votes = Counter(ex.chapter for name, ex in load_all().items() if name in names)
    if not votes:
        return None
    best = max(votes.values())
    return sorted(c for c, n in votes.items() if n == best)[0]


def _wrong_chapter(graded) -> str | None:
    """The real chapter of a submission none of whose exercises was found, when
    its cells are another chapter's; else ``None``."""
    scores = graded.scores
    if graded.submission.path is None or not scores or any(s["status"] != "missing" for s in scores):
        return None
    real = detect_chapter(graded.submission.path)
    return real if real and real != graded.submission.chapter else None


def _named(lines: list[str]) -> list[str]:
    shown = ["    " + ln for ln in lines[:NAMED_PER_CATEGORY]]
    if len(lines) > NAMED_PER_CATEGORY:
        shown.append(f"    … and {len(lines) - NAMED_PER_CATEGORY} more (see scores.csv)")
    return shown


def summarise(batch_report, out: Path | None = None) -> str:
    """The console summary of a batch (what ``grade`` prints when it is done).

    Args:
        batch_report: the :class:`autograder.batch.BatchReport` of the run.
        out: the output folder to point at (default: the report's own).

    Returns:
        Several lines: the counts (graded now, reused from the journal, complete,
        incomplete, invalid, wrong chapter, flagged, timed out, errors, not submitted),
        each problem submission by ``student/chapter`` with its reason, and the
        files to read next.
    """
    from .batch import submission_status

    out = Path(out if out is not None else batch_report.out)
    results = batch_report.results
    students = {g.submission.student for g in results}
    invalid, wrong, flagged, timed_out, errors = [], [], [], [], []
    counts = Counter()
    for g in results:
        sub = g.submission
        who = _safe(f"{sub.student}/{sub.chapter}")
        status = submission_status(g)
        real = _wrong_chapter(g)
        if real:
            counts["wrong chapter"] += 1
            wrong.append(f"{who}: this is a {real} notebook, submitted as {sub.chapter} (0 points; "
                         f"grade it as {real})")
            continue
        if status == "invalid":
            counts["invalid"] += 1
            invalid.append(f"{who}: {_safe(g.scores[0]['reason'])}")
            continue
        if status == "not submitted":
            counts["not submitted"] += 1
            continue
        if status == "cheat":
            counts["flagged"] += 1
            cells = [s for s in g.scores if s["status"] == "cheat"]
            flagged.append(f"{who} {cells[0]['exercise']}: {_safe(cells[0]['reason'])}")
        slow = [s for s in g.scores if s["status"] == "timeout"]
        if slow:
            counts["timed out"] += 1
            timed_out.append(f"{who} {', '.join(s['exercise'] for s in slow)}: {_safe(slow[0]['reason'])}")
        broken = [s for s in g.scores if s["status"] == "error"]
        if broken:
            counts["errors"] += 1
            errors.append(f"{who} {', '.join(s['exercise'] for s in broken)}: {_safe(broken[0]['reason'])}")
        if status in ("complete", "incomplete"):
            counts[status] += 1
    lines = [
        f"graded {batch_report.graded} submission(s), reused {batch_report.reused} unchanged from the journal; "
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


# --------------------------------------------------------------------------- reading a grade output


@dataclass
class Part:
    """One graded part of one student's exercise (``message`` empty when earned)."""

    name: str
    score: float
    points: float
    message: str = ""

    @property
    def earned(self) -> bool:
        return self.points > 0 and self.score >= self.points - 1e-9


@dataclass
class Row:
    """One row of ``scores.csv`` (one student × exercise), parts with their messages."""

    student: str
    chapter: str
    exercise: str
    score: float  # the final score: a hand grade, when there is one, wins
    max_score: float
    status: str
    reason: str
    parts: list[Part] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    auto_score: float | None = None  # what the checks gave (``None``: as ``score``)


_FORMULA_GUARD = ("=", "+", "-", "@", "\t", "\r")


def _uncell(text: str) -> str:
    """Undo the quote ``batch`` puts before a cell that a spreadsheet would run."""
    return text[1:] if text[:1] == "'" and text[1:2] in _FORMULA_GUARD else text


def _cell(text: str) -> str:
    return "'" + text if text[:1] in _FORMULA_GUARD else text


_PART = re.compile(r"^(?P<name>.+) (?P<score>[0-9.eE+-]+)/(?P<points>[0-9.eE+-]+)$")


def _parse_parts(text: str) -> list[Part]:
    """``name 1/1 · name 0/2`` (the ``parts`` column) as parts without messages."""
    parts = []
    for item in filter(None, (t.strip() for t in text.split(" · "))):
        m = _PART.match(item)
        if m:
            try:
                parts.append(Part(m["name"], float(m["score"]), float(m["points"])))
            except ValueError:
                continue
    return parts


def _messages_from_reason(reason: str, parts: list[Part]) -> None:
    """Give the missed parts their messages from a ``reason`` (the journal's fallback):
    ``'a': msg | 'b': msg``, ``'a', 'b': msg`` or one message for every missed part."""
    missed = [p for p in parts if not p.earned]
    if not missed or not reason:
        return
    by_name = {p.name: p for p in missed}
    found = False
    for segment in reason.split(" | "):
        m = re.match(r"^((?:'[^']+'(?:, )?)+): (.*)$", segment)
        if not m:
            continue
        for name in re.findall(r"'([^']+)'", m.group(1)):
            if name in by_name:
                by_name[name].message = m.group(2)
                found = True
    if not found:
        for p in missed:
            p.message = reason


def _journal_scores(out: Path, student: str, chapter: str) -> list[dict] | None:
    if student in ("", ".", "..") or "/" in student or "\x00" in student:
        return None
    path = out / ".journal" / student / f"{chapter}.json"
    try:
        if not path.is_file() or path.is_symlink() or path.stat().st_size > MAX_JOURNAL_BYTES:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    scores = data.get("scores") if isinstance(data, dict) else None
    return scores if isinstance(scores, list) else None


def _from_journal(row: Row, entry: list[dict] | None) -> bool:
    """Fill ``row``'s part messages from its journal entry when the entry is the
    one ``scores.csv`` was written from (same exercise, score and parts)."""
    for s in entry or []:
        if not isinstance(s, dict) or s.get("exercise") != row.exercise:
            continue
        jparts = s.get("parts") if isinstance(s.get("parts"), list) else []
        try:
            auto = row.score if row.auto_score is None else row.auto_score
            same = (abs(float(s.get("score", -1)) - auto) < 1e-6 and len(jparts) == len(row.parts)
                    and all(jp.get("name") == p.name and abs(float(jp.get("score", -1)) - p.score) < 1e-6
                            for jp, p in zip(jparts, row.parts)))
        except (TypeError, ValueError, AttributeError):
            return False
        if not same:
            return False
        for jp, p in zip(jparts, row.parts):
            p.message = " ".join(str(jp.get("message") or "").split())
        return True
    return False


def _read_csv(path: Path) -> tuple[list[str], list[dict]]:
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


# The columns of ``scores.csv`` (``batch.SCORE_COLUMNS``) the report reads.
READ_COLUMNS = ["student_id", "assignment", "exercise", "score", "max_score", "status", "reason", "parts", "notes"]


def load_rows(out: Path) -> tuple[list[Row], dict[tuple[str, str], str]]:
    """The rows of a ``grade`` output folder, with their parts' messages.

    Args:
        out: the folder ``python -m autograder grade … --out OUT`` wrote.

    Returns:
        ``(rows, status)``: one :class:`Row` per line of ``scores.csv``, and the
        ``grades.csv`` status of each ``(student, chapter)`` (``{}`` without it).

    Raises:
        ReportError: ``out`` has no ``scores.csv`` with the columns ``grade`` writes.
    """
    out = Path(out)
    scores = out / "scores.csv"
    expected = (f"expected the output folder of `python -m autograder grade … --out {out}` "
                f"(a scores.csv with the columns {', '.join(READ_COLUMNS)}, …)")
    if not out.is_dir():
        raise ReportError(f"{out} is not a folder: {expected}")
    if not scores.is_file():
        raise ReportError(f"{out} has no scores.csv: {expected}")
    try:
        columns, records = _read_csv(scores)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ReportError(f"{scores} cannot be read ({exc}): {expected}") from None
    missing = [c for c in READ_COLUMNS if c not in columns]
    if missing:
        raise ReportError(f"{scores} lacks the column(s) {', '.join(missing)}: {expected}")
    rows = []
    journals: dict[tuple[str, str], list[dict] | None] = {}
    for r in records:
        try:
            row = Row(student=_uncell(r["student_id"]), chapter=r["assignment"], exercise=r["exercise"],
                      score=float(r["score"]), max_score=float(r["max_score"]), status=r["status"],
                      reason=_uncell(r["reason"] or ""), parts=_parse_parts(_uncell(r["parts"] or "")),
                      notes=[n for n in _uncell(r["notes"] or "").split(" | ") if n],
                      auto_score=float(r["auto_score"]) if r.get("auto_score") else None)
        except (TypeError, ValueError) as exc:
            raise ReportError(f"{scores}: a row cannot be read ({exc}): {expected}") from None
        key = (row.student, row.chapter)
        if key not in journals:
            journals[key] = _journal_scores(out, row.student, row.chapter)
        if not _from_journal(row, journals[key]):
            _messages_from_reason(row.reason, row.parts)
        rows.append(row)
    status = {}
    if (out / "grades.csv").is_file():
        try:
            _, grades = _read_csv(out / "grades.csv")
            status = {(_uncell(g.get("student_id") or ""), g.get("assignment") or ""): g.get("status") or ""
                      for g in grades}
        except (OSError, UnicodeDecodeError, csv.Error):
            status = {}
    return rows, status


# --------------------------------------------------------------------------- diagnoses


def _strip_asides(text: str) -> str:
    """``text`` without its parenthesised asides (innermost first, so nested ones go too)."""
    previous = None
    while previous != text:
        previous, text = text, re.sub(r"\s*\([^()]*\)", "", text)
    return text


_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _hint_or_head(message: str) -> tuple[str, bool]:
    """The hint of a message (what the check recognised), or its head: the words
    before the first colon, which say what differs without the case's numbers."""
    text = " ".join(str(message).split())
    if " Hint: " in f" {text}":
        return text.split("Hint: ", 1)[1].strip(), True
    head = text.split(": ", 1)[0].strip()
    return (head or text), False


def diagnosis_key(message: str) -> str:
    """The group of a failure message: its hint (else its head), lower case, with
    parenthesised asides and numbers taken out. Two messages about the same
    mistake on different inputs get the same key.

    Args:
        message: a part's message as the checks write it.

    Returns:
        The key, e.g. ``"you normalised over axis #, not axis=#: pass `axis` to
        both np.max and np.sum."``.
    """
    core, _ = _hint_or_head(message)
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


def _diagnoses(rows: list[Row]) -> list[Diagnosis]:
    """Every diagnosis of the missed parts of ``rows``, each student counted once per
    exercise and mistake, most frequent first."""
    who: dict[tuple[str, str], set[str]] = defaultdict(set)
    wording: dict[tuple[str, str], Counter] = defaultdict(Counter)
    hinted: dict[tuple[str, str], bool] = {}
    for row in rows:
        messages = [p.message or row.reason for p in row.parts if not p.earned]
        if not row.parts and row.status not in ("passed",) and row.reason:
            messages = [row.reason]
        for message in messages:
            if not message:
                continue
            key = (row.exercise, diagnosis_key(message))
            text, recognised = _hint_or_head(message)
            who[key].add(row.student)
            wording[key][text] += 1
            hinted[key] = hinted.get(key, False) or recognised
    found = [Diagnosis(ex, key, min(wording[(ex, key)].items(), key=lambda kv: (-kv[1], kv[0]))[0],
                       hinted[(ex, key)], sorted(who[(ex, key)])) for ex, key in who]
    return sorted(found, key=lambda d: (-len(d.students), not d.recognised, d.exercise, d.key))


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
    totals: dict[str, tuple[float, float]]  # student -> (score, max)
    max_score: float
    parts: list[PartShare]
    diagnoses: list[Diagnosis]
    status: dict[str, str]
    missed: dict[str, list[str]]  # student -> "exercise: part" missed

    def share(self, count: int) -> float:
        return count / len(self.students) if self.students else 0.0


def _submitted(student_rows: list[Row], status: str | None) -> bool:
    if status:
        return status != "not submitted"
    return not all(r.status == "missing" and r.reason == "no submission" for r in student_rows)


def chapter_summary(chapter: str, rows: list[Row], status: dict[tuple[str, str], str]) -> ChapterSummary:
    """Score totals, parts' shares and diagnoses of one chapter's rows.

    Args:
        chapter: the chapter id.
        rows: the chapter's rows of ``scores.csv`` (:func:`load_rows`).
        status: ``grades.csv``'s status per ``(student, chapter)``.

    Returns:
        The :class:`ChapterSummary`; shares are of the students who submitted.
    """
    by_student: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        by_student[r.student].append(r)
    students = sorted(s for s, rs in by_student.items() if _submitted(rs, status.get((s, chapter))))
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
    totals = {s: (sum(r.score for r in by_student[s]), sum(r.max_score for r in by_student[s])) for s in students}
    max_score = max((m for _, m in totals.values()), default=sum(
        max((r.max_score for r in rows if r.exercise == ex), default=0.0) for ex in exercises))
    missed = {s: [f"{r.exercise}: {p.name}" for r in by_student[s] for p in r.parts if not p.earned]
              + [f"{r.exercise} ({r.status})" for r in by_student[s] if not r.parts and r.status != "passed"]
              for s in students}
    return ChapterSummary(chapter, students, absent, totals, max_score, parts, _diagnoses(kept),
                          {s: status.get((s, chapter), "") for s in students}, missed)


# --------------------------------------------------------------------------- figures


_BLUE, _INK, _MUTED = "#0072b2", "#222222", "#666666"


def _svg(fig, label: str) -> str:
    """A matplotlib figure as inline SVG: text drawn as paths (no font files), no
    XML prologue, DOCTYPE or metadata, an accessible label, scaled to the column."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": "class-report"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)
    text = re.sub(r'<svg\b', f'<svg role="img" aria-label="{html.escape(label)}" class="figure"', text, count=1)
    return text


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    fig.patch.set_alpha(0)
    return fig


def _style(ax) -> None:
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.tick_params(colors=_INK, labelsize=9)


def histogram_svg(summary: ChapterSummary) -> str:
    """The distribution of the chapter's totals: one bar per score (or per range of
    scores when there are more than 25 points), the count above each bar."""
    import numpy as np

    scores = np.array([s for s, _ in summary.totals.values()], dtype=float)
    top = max(summary.max_score, float(scores.max()) if scores.size else 0.0, 1.0)
    fig = _figure(7.2, 2.6)
    ax = fig.add_subplot()
    if top <= 25 and float(top).is_integer():
        edges = np.arange(-0.5, top + 1.0, 1.0)
        centers = np.arange(0, top + 1)
        counts = np.array([int(np.sum(np.isclose(np.round(scores), c))) for c in centers])
        width = 0.8
    else:
        edges = np.linspace(0, top, 11)
        counts, _ = np.histogram(scores, bins=edges)
        centers = (edges[:-1] + edges[1:]) / 2
        width = (edges[1] - edges[0]) * 0.9
    bars = ax.bar(centers, counts, width=width, color=_BLUE)
    for bar, n in zip(bars, counts):
        if n:
            ax.annotate(str(int(n)), (bar.get_x() + bar.get_width() / 2, n), xytext=(0, 2),
                        textcoords="offset points", ha="center", va="bottom", fontsize=9, color=_INK)
    ax.set_xlim(edges[0] - 0.2, edges[-1] + 0.2)
    ax.set_ylim(0, max(1, int(counts.max()) if counts.size else 1) * 1.2)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel(f"points (of {summary.max_score:g})", fontsize=9, color=_INK)
    ax.set_ylabel("students", fontsize=9, color=_INK)
    _style(ax)
    fig.tight_layout()
    return _svg(fig, f"Histogram of the {len(summary.students)} submitted totals of {summary.chapter}")


def parts_svg(summary: ChapterSummary) -> str:
    """One horizontal bar per graded part: the share of students who earned it,
    the parts grouped under their exercise's name (a bold row without a bar)."""
    rows: list[tuple[str, PartShare | None]] = []  # (label, part); None: an exercise's heading
    for p in summary.parts:
        if not rows or rows[-1][1].exercise != p.exercise:
            rows.append((p.exercise, None))
        rows.append((p.name, p))
    fig = _figure(7.2, 0.8 + 0.27 * max(1, len(rows)))
    ax = fig.add_subplot()
    ys = list(range(len(rows)))[::-1]
    for y, (_, p) in zip(ys, rows):
        if p is None:
            continue
        share = 100.0 * summary.share(p.earned)
        ax.barh(y, 100.0, color="#e6e6e6", height=0.7)
        ax.barh(y, share, color=_BLUE, height=0.7)
        ax.text(102, y, f"{share:.0f}% ({p.earned}/{p.of})", va="center", fontsize=8.5, color=_INK,
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
    ax.set_xlabel("students who earned the part (%)", fontsize=9, color=_INK)
    _style(ax)
    fig.tight_layout(rect=(0, 0, 0.88, 1))  # room on the right for the shares
    return _svg(fig, f"Share of students who earned each graded part of {summary.chapter}")


# --------------------------------------------------------------------------- HTML and CSV


CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 62rem; margin: 2rem auto;
       padding: 0 1rem; color: #222; line-height: 1.45; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { font-size: 1.2rem; margin-top: 2rem;
     border-top: 1px solid #ddd; padding-top: 1rem; }
.lead { color: #555; margin-top: 0; }
table { border-collapse: collapse; margin: .8rem 0; width: 100%; }
th, td { border-bottom: 1px solid #ddd; padding: .3rem .5rem; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
.bar { display: inline-block; height: .7rem; background: #0072b2; vertical-align: middle; margin-right: .4rem; }
.headline { font-size: 1.05rem; margin: .3rem 0; } .headline b { color: #0072b2; }
code { background: #f4f4f4; padding: 0 .2rem; border-radius: 3px; }
svg.figure { width: 100%; max-width: 46rem; height: auto; display: block; margin: .5rem 0; }
details summary { cursor: pointer; color: #555; } .muted { color: #666; } .earned { color: #176317; }
.missed { color: #a11; }
"""


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _code_spans(text: str) -> str:
    """Escaped text whose `backquoted` names are shown as code."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", _e(text))


def _pct(share: float) -> str:
    return f"{100 * share:.0f}%"


def render_html(summary: ChapterSummary, source: str) -> str:
    """The class report page of one chapter (self-contained: no script, no link)."""
    s = summary
    n = len(s.students)
    scores = [t for t, _ in s.totals.values()]
    mean = statistics.fmean(scores) if scores else 0.0
    median = statistics.median(scores) if scores else 0.0
    full = sum(1 for t, m in s.totals.values() if m > 0 and t >= m - 1e-9)
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Class report: {_e(s.chapter)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>Class report: {_e(s.chapter)}</h1>",
        f'<p class="lead">{n} student(s) submitted'
        + (f", {len(s.not_submitted)} did not" if s.not_submitted else "")
        + f". Mean {mean:.3g} of {s.max_score:g} points, median {median:.3g}; "
          f"{full} with full marks.</p>",
    ]
    out.append("<h2>Most frequent mistakes</h2>")
    top = s.diagnoses[:TOP_DIAGNOSES]
    if not top:
        out.append("<p>Every submitted answer earned every part.</p>")
    else:
        for d in top[:3]:
            out.append(f'<p class="headline"><b>{_pct(s.share(len(d.students)))}</b> · '
                       f"<code>{_e(d.exercise)}</code>: {_code_spans(d.text)}</p>")
        out.append('<table><thead><tr><th>students</th><th>exercise</th><th>diagnosis</th></tr></thead><tbody>')
        for d in top:
            share = s.share(len(d.students))
            kind = "" if d.recognised else ' <span class="muted">(what differs; no known mistake matched)</span>'
            out.append(
                f'<tr><td class="num"><span class="bar" style="width:{4 * share:.2f}rem"></span>'
                f"{_pct(share)} ({len(d.students)}/{n})</td><td><code>{_e(d.exercise)}</code></td>"
                f"<td>{_code_spans(d.text)}{kind}<details><summary>who</summary>"
                f"{_e(', '.join(d.students))}</details></td></tr>")
        out.append("</tbody></table>")
        if len(s.diagnoses) > len(top):
            out.append(f'<p class="muted">{len(s.diagnoses) - len(top)} rarer diagnoses are in the CSV.</p>')
    out.append("<h2>Score distribution</h2>")
    out.append(histogram_svg(s) if n else "<p>No submission.</p>")
    out.append("<h2>Graded parts: who earned them</h2>")
    if s.parts:
        out.append(parts_svg(s))
        out.append('<table><thead><tr><th>exercise</th><th>part</th><th>points</th><th>earned by</th>'
                   "</tr></thead><tbody>")
        for p in s.parts:
            share = s.share(p.earned)
            out.append(f"<tr><td><code>{_e(p.exercise)}</code></td><td>{_e(p.name)}</td>"
                       f'<td class="num">{p.points:g}</td><td class="num">'
                       f'<span class="bar" style="width:{4 * share:.2f}rem"></span>{_pct(share)} '
                       f"({p.earned}/{p.of})</td></tr>")
        out.append("</tbody></table>")
    else:
        out.append("<p>No answer of this chapter could be judged part by part.</p>")
    out.append("<h2>Students</h2>")
    out.append('<table><thead><tr><th>student</th><th>points</th><th>status</th><th>parts missed</th>'
               "</tr></thead><tbody>")
    for student in sorted(s.students, key=lambda st: (s.totals[st][0], st)):
        score, max_score = s.totals[student]
        missed = _e("; ".join(s.missed[student])) if s.missed[student] else '<span class="earned">none</span>'
        out.append(f'<tr><td>{_e(student)}</td><td class="num">{score:g}/{max_score:g}</td>'
                   f"<td>{_e(s.status.get(student) or '')}</td><td>{missed}</td></tr>")
    out.append("</tbody></table>")
    if s.not_submitted:
        out.append(f'<p class="muted">Not submitted: {_e(", ".join(s.not_submitted))}.</p>')
    out.append(f'<p class="muted">Made by <code>python -m autograder report</code> from {_e(source)}. '
               "Shares are of the students who submitted; each student counts once per exercise and "
               "mistake.</p>")
    out.append("</body></html>\n")
    return "\n".join(out)


CSV_COLUMNS = ["section", "exercise", "item", "points", "students", "of", "share", "key"]


def render_csv(summary: ChapterSummary) -> str:
    """The report's numbers: ``score`` rows (how many students got each total),
    ``part`` rows (who earned each part) and ``diagnosis`` rows (every mistake)."""
    s = summary
    n = len(s.students)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for total, count in sorted(Counter(t for t, _ in s.totals.values()).items()):
        writer.writerow(["score", "", f"{total:g}", f"{s.max_score:g}", count, n, f"{s.share(count):.4f}", ""])
    for p in s.parts:
        writer.writerow(["part", p.exercise, _cell(p.name), f"{p.points:g}", p.earned, p.of,
                         f"{s.share(p.earned):.4f}", ""])
    for d in s.diagnoses:
        writer.writerow(["diagnosis", d.exercise, _cell(d.text), "", len(d.students), n,
                         f"{s.share(len(d.students)):.4f}", _cell(d.key)])
    return buf.getvalue()


def _index_html(summaries: list[ChapterSummary]) -> str:
    rows = []
    for s in summaries:
        scores = [t for t, _ in s.totals.values()]
        mean = statistics.fmean(scores) if scores else 0.0
        top = s.diagnoses[0] if s.diagnoses else None
        mistake = (f"{_pct(s.share(len(top.students)))} · <code>{_e(top.exercise)}</code>: {_code_spans(top.text)}"
                   if top else "none")
        rows.append(f'<tr><td><a href="{_e(s.chapter)}.html">{_e(s.chapter)}</a></td>'
                    f'<td class="num">{len(s.students)}</td><td class="num">{mean:.3g}/{s.max_score:g}</td>'
                    f"<td>{mistake}</td></tr>")
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', "<title>Class report</title>",
        f"<style>{CSS}</style></head><body>", "<h1>Class report</h1>",
        "<table><thead><tr><th>chapter</th><th>submitted</th><th>mean</th><th>most frequent mistake</th>"
        "</tr></thead><tbody>", *rows, "</tbody></table></body></html>\n"])


def class_report(out: Path, dest: Path | None = None) -> list[Path]:
    """Write the class report of a ``grade`` output folder.

    Args:
        out: the folder ``python -m autograder grade … --out OUT`` wrote.
        dest: where the pages go (default ``OUT/report``).

    Returns:
        The files written: ``<chapter>.html`` and ``<chapter>.csv`` per chapter,
        then ``index.html``.

    Raises:
        ReportError: ``out`` is not a grade output (the message says what was expected).
    """
    from .batch import _write_atomic

    out = Path(out)
    rows, status = load_rows(out)
    if not rows:
        raise ReportError(f"{out / 'scores.csv'} has no rows: grade a class first")
    dest = Path(dest) if dest is not None else out / "report"
    dest.mkdir(parents=True, exist_ok=True)
    by_chapter: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        by_chapter[r.chapter].append(r)
    written, summaries = [], []
    journal = " and the journal" if (out / ".journal").is_dir() else ""
    for chapter in sorted(by_chapter):
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", chapter) or chapter.startswith("."):
            raise ReportError(f"{out / 'scores.csv'}: {chapter!r} is not a chapter id")
        summary = chapter_summary(chapter, by_chapter[chapter], status)
        summaries.append(summary)
        page, table = dest / f"{chapter}.html", dest / f"{chapter}.csv"
        _write_atomic(page, render_html(summary, f"scores.csv{journal}"))
        _write_atomic(table, render_csv(summary))
        written += [page, table]
    index = dest / "index.html"
    _write_atomic(index, _index_html(summaries))
    written.append(index)
    return written
