"""Regrades with a record: what each ``grade`` run changed, and why.

Every ``grade`` run compares the ``results.json`` it replaced with the one it wrote
(:func:`diff`) and appends one line to ``OUT/regrades.jsonl``: when, the command, the
reason given (``grade --reason "regrade request #12"``) and every changed score. A
change is one student × chapter × exercise whose score or status moved (``old → new``),
or a chapter total that moved without any exercise moving (a late penalty, an
extension), each with what explains it, read from the two results:

* a new notebook (its SHA-256 changed): ``new submission``;
* a grader's hand grade or extra credit entered or changed in the formgrader;
* the checks' verdict per part (``values on random inputs 0/2 → 2/2``), for a changed
  check or grading code;
* the late penalty or the extension (``extension +2 days``, ``late days 1``).

``python -m autograder regrades OUT`` writes ``OUT/report/regrades.html``, every run
with its changes, so a TA answers a regrade request from one page; ``regrades --diff
OLD NEW`` prints the changes between any two outputs (folders or ``results.json``
files).
"""
from __future__ import annotations

import datetime
import html
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .results import RESULTS_FILE, ClassResults, ExerciseScore, SubmissionGrade, parts_line
from .text import score_text

__all__ = ["Change", "diff", "append_log", "read_log", "render_html", "LOG_FILE", "load_results"]

LOG_FILE = "regrades.jsonl"


@dataclass
class Change:
    """One changed score: ``exercise`` is ``""`` for a chapter total."""

    student: str
    chapter: str
    exercise: str
    old: float | None  # None: not graded before
    new: float | None  # None: gone from the new results
    max_score: float
    old_status: str = ""
    new_status: str = ""
    reasons: list[str] = field(default_factory=list)

    def line(self) -> str:
        def show(x):
            return "—" if x is None else score_text(x)

        what = self.exercise or "chapter total"
        return (f"{self.student} · {self.chapter} · {what}: {show(self.old)} → {show(self.new)}"
                f" / {score_text(self.max_score)}  ({'; '.join(self.reasons) or 'no reason recorded'})")


def load_results(path: Path | str) -> ClassResults:
    """An output folder's ``results.json``, or a ``results.json`` file itself."""
    path = Path(path)
    if path.is_dir():
        return ClassResults.read(path)
    return ClassResults.from_json(path.read_text(encoding="utf-8"), str(path))


def _exercise_reasons(old: ExerciseScore, new: ExerciseScore, sub_changed: bool) -> list[str]:
    reasons = []
    if sub_changed:
        reasons.append("new submission")
    if (old.manual_score, old.extra_credit) != (new.manual_score, new.extra_credit):
        if new.manual_score is not None and new.manual_score != old.manual_score:
            reasons.append(f"hand grade {score_text(new.manual_score)}")
        elif new.manual_score is None and old.manual_score is not None:
            reasons.append("hand grade removed")
        if new.extra_credit != old.extra_credit:
            reasons.append(f"extra credit {score_text(new.extra_credit or 0)}")
    old_parts, new_parts = parts_line(old.parts), parts_line(new.parts)
    if old_parts != new_parts:
        before = {p.name: p for p in old.parts}
        moved = [f"{p.name} {score_text(before[p.name].score)}/{score_text(p.points)} → "
                 f"{score_text(p.score)}/{score_text(p.points)}"
                 for p in new.parts if p.name in before and before[p.name].score != p.score]
        reasons.append("checks: " + ("; ".join(moved) if moved else f"{old_parts or 'no parts'} → {new_parts}"))
    elif old.status != new.status or old.reason != new.reason:
        reasons.append(f"{new.status}: {new.reason}" if new.reason else new.status)
    if new.comment and new.comment != old.comment:
        reasons.append(f"grader's comment: {new.comment}")
    return reasons


def _total_reasons(old: SubmissionGrade, new: SubmissionGrade) -> list[str]:
    reasons = []
    if old.penalty != new.penalty:
        reasons.append(f"late penalty {score_text(old.penalty)} → {score_text(new.penalty)}")
    if old.extension_seconds != new.extension_seconds:
        reasons.append(f"extension {old.extension_seconds / 86400:g} → {new.extension_seconds / 86400:g} days")
    if old.late_days_used != new.late_days_used:
        reasons.append(f"late days used {old.late_days_used} → {new.late_days_used}")
    return reasons


def diff(old: ClassResults, new: ClassResults) -> list[Change]:
    """Every score that differs between two results, with what explains it (see the module).

    Only the chapters in both are compared: a run that grades one chapter (``--chapters``)
    neither removes the others' scores nor regrades them, and a chapter's first grading is
    not a regrade.
    """
    both = {e.chapter for e in old.exercises} & {e.chapter for e in new.exercises}
    old_ex = {(e.student, e.chapter, e.exercise): e for e in old.exercises if e.chapter in both}
    new_ex = {(e.student, e.chapter, e.exercise): e for e in new.exercises if e.chapter in both}
    old_sub = {(s.student, s.chapter): s for s in old.submissions if s.chapter in both}
    new_sub = {(s.student, s.chapter): s for s in new.submissions if s.chapter in both}
    changes = []
    for key in sorted(set(old_ex) | set(new_ex)):
        a, b = old_ex.get(key), new_ex.get(key)
        if a is not None and b is not None and a.score == b.score and a.status == b.status:
            continue
        sa, sb = old_sub.get(key[:2]), new_sub.get(key[:2])
        sub_changed = bool(sa and sb and sa.submission_sha256 != sb.submission_sha256)
        if a is None or b is None:
            reasons = ["first graded" if a is None else "no longer in the results"]
        else:
            reasons = _exercise_reasons(a, b, sub_changed)
        changes.append(Change(*key, a.score if a else None, b.score if b else None,
                              (b or a).max_score, a.status if a else "", b.status if b else "", reasons))
    moved = {(c.student, c.chapter) for c in changes}
    for key in sorted(set(old_sub) & set(new_sub)):
        a, b = old_sub[key], new_sub[key]
        if a.score != b.score and key not in moved:
            changes.append(Change(*key, "", a.score, b.score, b.max_score, a.status, b.status,
                                  _total_reasons(a, b) or ["hand grades or penalties"]))
        elif key in moved and _total_reasons(a, b):
            for c in changes:
                if (c.student, c.chapter) == key:
                    c.reasons += _total_reasons(a, b)
                    break
    return changes


def append_log(out: Path, changes: list[Change], *, reason: str = "", command: str = "",
               when: datetime.datetime | None = None) -> Path:
    """Append one run's record to ``OUT/regrades.jsonl`` (also when nothing changed)."""
    when = when or datetime.datetime.now(datetime.timezone.utc)
    record = {"time": when.isoformat(timespec="seconds"), "command": command, "reason": reason,
              "changes": [asdict(c) for c in changes]}
    path = Path(out) / LOG_FILE
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


def read_log(out: Path) -> list[dict]:
    """Every run's record, oldest first (a line that is not JSON is skipped)."""
    path = Path(out) / LOG_FILE
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        record["changes"] = [Change(**c) for c in record.get("changes", [])]
        records.append(record)
    return records


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def render_html(records: list[dict], title: str = "Regrades") -> str:
    """The regrades page: every run (newest first), its reason and its changed scores."""
    rows = []
    for record in reversed(records):
        changes = record["changes"]
        head = (f"<h2>{_e(record.get('time', ''))} — {len(changes)} change{'s' if len(changes) != 1 else ''}</h2>"
                f"<p>reason: {_e(record.get('reason') or 'none given')}</p>"
                f"<p><code>{_e(record.get('command', ''))}</code></p>")
        if not changes:
            rows.append(head + "<p>no score changed</p>")
            continue
        body = "".join(
            f"<tr><td>{_e(c.student)}</td><td>{_e(c.chapter)}</td><td>{_e(c.exercise or 'chapter total')}</td>"
            f"<td>{_e('—' if c.old is None else score_text(c.old))} → {_e('—' if c.new is None else score_text(c.new))}"
            f" / {_e(score_text(c.max_score))}</td><td>{_e('; '.join(c.reasons))}</td></tr>" for c in changes)
        rows.append(head + "<table><tr><th>student</th><th>chapter</th><th>exercise</th><th>old → new</th>"
                           f"<th>why</th></tr>{body}</table>")
    css = ("body{font-family:system-ui,sans-serif;max-width:72rem;margin:2rem auto;padding:0 1rem}"
           "table{border-collapse:collapse}td,th{border-bottom:1px solid #ddd;padding:.3rem .6rem;text-align:left}")
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{_e(title)}</title>"
            f"<style>{css}</style></head><body><h1>{_e(title)}</h1>"
            + ("".join(rows) or "<p>no grade run recorded yet</p>") + "</body></html>\n")


def snapshot(out: Path) -> ClassResults | None:
    """The results a run is about to replace (``None``: the first run, or unreadable)."""
    try:
        return ClassResults.read(Path(out)) if (Path(out) / RESULTS_FILE).is_file() else None
    except ValueError:
        return None
