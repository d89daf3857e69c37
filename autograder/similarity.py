"""Similarity of a chapter's answers: pairs of students whose solution cells share code.

``python -m autograder similarity SUBMITTED --chapter CH`` reads every student's solution
cells of the chapter (nbgrader's ``SUBMITTED/<student>/<CH>/``), compares them pair by
pair, exercise by exercise, with copydetect (the winnowing fingerprints MOSS uses:
identifiers, strings and comments do not count, so renaming variables hides nothing), and
writes an HTML page of the pairs above the threshold with the matching code side by side.

What never counts:

* **the released stub**: each exercise's cell as students received it (the ``def``
  line, the docstring, ``# YOUR CODE HERE``), made here from the source notebook by the
  release's own preprocessors, is copydetect's boilerplate;
* **what much of the class wrote**: a fingerprint found in more than ``max_share`` of the
  answers to an exercise (and at least 3) is boilerplate too, as MOSS's ``-m`` option
  does: the canonical one-line softmax is everyone's;
* **short answers**: the score of a pair weighs each exercise by the amount of code the
  students wrote in it (tokens left once the stub is removed); an exercise with fewer
  than ``min_tokens`` written tokens on either side is left out ("too short to tell").

The score of a pair is, for each side, the matched tokens over the written tokens,
summed over the exercises compared, and the pair's score is the larger side's; a pair is
flagged when it reaches ``threshold`` with at least ``min_total`` tokens compared. The
page states these numbers. A flag is a reason to read the two notebooks, not a verdict.
"""
from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

import nbformat
import numpy as np

from .book import source_notebook
from .release import student_version
from .submissions import chapter_notebook, student_folders
from .untrusted import MAX_NOTEBOOK_BYTES, read_untrusted

__all__ = ["Settings", "Pair", "Match", "SimilarityReport", "solution_cells", "stub_cells", "compare_class",
           "render_html"]


@dataclass(frozen=True)
class Settings:
    """How pairs are compared and flagged (see the module).

    Attributes:
        noise: copydetect's noise threshold: matches shorter than this (filtered
            characters) are ignored.
        guarantee: copydetect's guarantee threshold: matches this long are always found.
        threshold: the pair score (0-1) from which a pair is flagged.
        min_tokens: an exercise with fewer written tokens on either side is left out.
        min_total: a pair compared on fewer written tokens in all is never flagged.
        max_share: fingerprints in more than this share of an exercise's answers are ignored.
    """

    noise: int = 20
    guarantee: int = 25
    threshold: float = 0.6
    min_tokens: int = 64
    min_total: int = 120
    max_share: float = 0.5


@dataclass
class Match:
    """One exercise of one pair: both answers, their matched character ranges, the counts."""

    exercise: str
    code_a: str
    code_b: str
    slices_a: list[tuple[int, int]]
    slices_b: list[tuple[int, int]]
    matched_a: int
    matched_b: int
    written_a: int
    written_b: int
    counted: bool  # False: too short to tell (left out of the score)


@dataclass
class Pair:
    """Two students and how much of their written code matched."""

    a: str
    b: str
    score: float
    score_a: float
    score_b: float
    compared: int  # written tokens of the exercises counted (both sides)
    flagged: bool
    matches: list[Match] = field(default_factory=list)


@dataclass
class SimilarityReport:
    chapter: str
    settings: Settings
    pairs: list[Pair]
    students: list[str]
    skipped: dict[str, str]  # student -> why their notebook was not compared

    @property
    def flagged(self) -> list[Pair]:
        return [p for p in self.pairs if p.flagged]


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def solution_cells(notebook: Path, exercises: list[str]) -> dict[str, str]:
    """The solution cells of ``exercises`` in a submitted notebook (read as untrusted data).

    Raises:
        ValueError: the file is not a notebook (too large, not JSON, no cells).
    """
    data = json.loads(read_untrusted(Path(notebook), MAX_NOTEBOOK_BYTES).decode("utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise ValueError("not a notebook: no list of cells")
    found = {}
    for cell in data["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {}) if isinstance(cell, dict) else {}
        name = meta.get("grade_id") if isinstance(meta, dict) else None
        if name in exercises and meta.get("solution") and name not in found:
            found[name] = _source(cell)
    return found


def stub_cells(chapter: str, book: Path) -> dict[str, str]:
    """Each exercise's solution cell as released to students (nbgrader's ClearSolutions)."""
    source = nbformat.read(str(source_notebook(chapter, book)), as_version=4)
    released = student_version(source, chapter, book=book)
    return {c.metadata.nbgrader["grade_id"]: c.source for c in released.cells
            if c.get("metadata", {}).get("nbgrader", {}).get("solution")}


def _stable_kgram_hashes(string: str, k: int):
    """The hash of every ``k``-character window of ``string``, the same in every process.

    copydetect hashes its k-grams with Python's ``hash``, which is salted per process
    (``PYTHONHASHSEED``): the winnowed fingerprints, and so the matched and written token
    counts, changed from one run to the next, and an exercise near ``min_tokens`` was
    counted in one run and left out in the next. BLAKE2b's first 8 bytes, as a signed
    64-bit integer (copydetect's hashes are int64), are the same everywhere.
    """
    return np.array([int.from_bytes(hashlib.blake2b(string[i:i + k].encode("utf-8", "surrogatepass"),
                                                    digest_size=8).digest(), "little", signed=True)
                     for i in range(len(string) - k + 1)], dtype=np.int64)


def _copydetect():
    """copydetect (the optional similarity dependency, only for this command), hashing
    with :func:`_stable_kgram_hashes` (its fingerprints read ``utils.hashed_kgrams``)."""
    # copydetect: this command's optional dependency, loaded when it runs
    import copydetect
    from copydetect import utils

    utils.hashed_kgrams = _stable_kgram_hashes
    return copydetect


def _fingerprint(code: str, settings: Settings, boilerplate):
    CodeFingerprint = _copydetect().CodeFingerprint

    return CodeFingerprint("answer.py", settings.noise, settings.guarantee - settings.noise + 1,
                           boilerplate=boilerplate, fp=io.StringIO(code))


def _all_hashes(code: str, settings: Settings):
    """Every k-gram hash of ``code`` (window 1: nothing winnowed away), as copydetect
    computes the hashes of a boilerplate file."""
    fp = _copydetect().CodeFingerprint("stub.py", settings.noise, 1, fp=io.StringIO(code))
    return np.array(sorted(fp.hashes), dtype=np.int64)


def _ranges(slices) -> list[tuple[int, int]]:
    """copydetect's slices (a 2 x N array of starts and ends; an empty array: none) as pairs."""
    if getattr(slices, "size", len(slices)) == 0:
        return []
    return [(int(start), int(end)) for start, end in zip(slices[0], slices[1])]


def compare_class(answers: dict[str, dict[str, str]], stubs: dict[str, str], chapter: str,
                  settings: Settings = Settings(), skipped: dict[str, str] | None = None) -> SimilarityReport:
    """Compare every pair of students on every exercise.

    Args:
        answers: student -> exercise -> their solution cell's source.
        stubs: exercise -> the released cell (boilerplate).
        chapter: for the report.
        settings: thresholds.
        skipped: students whose notebook could not be read, with why.

    Returns:
        A :class:`SimilarityReport`, pairs by descending score.
    """
    compare_files = _copydetect().compare_files

    students = sorted(answers)
    prints: dict[str, dict[str, object]] = {s: {} for s in students}
    for exercise, stub in stubs.items():
        base = _all_hashes(stub, settings)
        holders = [s for s in students if exercise in answers[s]]
        first = {s: _fingerprint(answers[s][exercise], settings, base) for s in holders}
        counts: dict[int, int] = {}
        for fp in first.values():
            for h in fp.hashes:
                counts[h] = counts.get(h, 0) + 1
        limit = max(3, settings.max_share * len(holders))
        common = [h for h, n in counts.items() if n > limit]
        boiler = np.unique(np.concatenate([base, np.array(common, dtype=np.int64)])) if common else base
        for s in holders:
            prints[s][exercise] = _fingerprint(answers[s][exercise], settings, boiler) if common else first[s]
    pairs = []
    for a, b in combinations(students, 2):
        matches, ma, mb, wa, wb = [], 0, 0, 0, 0
        for exercise in stubs:
            fa, fb = prints[a].get(exercise), prints[b].get(exercise)
            if fa is None or fb is None:
                continue
            _, (sa, sb), (slices_a, slices_b) = compare_files(fa, fb)
            ta, tb = int(fa.token_coverage), int(fb.token_coverage)
            counted = min(ta, tb) >= settings.min_tokens
            oa, ob = int(round(sa * ta)), int(round(sb * tb))
            if counted:
                ma, mb, wa, wb = ma + oa, mb + ob, wa + ta, wb + tb
            matches.append(Match(exercise, fa.raw_code, fb.raw_code,
                                 _ranges(slices_a), _ranges(slices_b),
                                 oa, ob, ta, tb, counted))
        score_a, score_b = (ma / wa if wa else 0.0), (mb / wb if wb else 0.0)
        score = max(score_a, score_b)
        flagged = score >= settings.threshold and min(wa, wb) >= settings.min_total
        pairs.append(Pair(a, b, score, score_a, score_b, wa + wb, flagged, matches))
    pairs.sort(key=lambda p: (-p.flagged, -p.score, p.a, p.b))
    return SimilarityReport(chapter, settings, pairs, students, dict(skipped or {}))


def read_class(submitted: Path, chapter: str, exercises: list[str]) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """Every student's solution cells of ``chapter`` under nbgrader's ``submitted/``;
    and the students whose notebook could not be read, with why."""
    answers, skipped = {}, {}
    for student, folder in student_folders(Path(submitted)).items():
        if not (folder / chapter).is_dir():
            continue
        notebook = chapter_notebook(folder / chapter, chapter)
        if notebook is None:
            skipped[student] = "no notebook of this chapter"
            continue
        try:
            answers[student] = solution_cells(notebook, exercises)
        except (ValueError, OSError, UnicodeDecodeError) as exc:
            skipped[student] = f"not readable ({type(exc).__name__})"
    return answers, skipped


def _segments(code: str, slices: list[tuple[int, int]]) -> list[tuple[str, bool]]:
    """``code`` cut into ``(text, matched)`` pieces along the matched character ranges."""
    out, at = [], 0
    for start, end in sorted(slices):
        start, end = max(start, at), min(end, len(code))
        if start >= end:
            continue
        if start > at:
            out.append((code[at:start], False))
        out.append((code[start:end], True))
        at = end
    if at < len(code):
        out.append((code[at:], False))
    return out


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Similarity · {{ r.chapter }}</title>
<style>
body{font-family:system-ui,sans-serif;max-width:90rem;margin:2rem auto;padding:0 1rem;color:#222}
table{border-collapse:collapse}td,th{border-bottom:1px solid #ddd;padding:.3rem .6rem;text-align:left;vertical-align:top}
.side{display:grid;grid-template-columns:1fr 1fr;gap:1rem}pre{background:#f7f7f7;padding:.6rem;overflow:auto;font-size:.85rem}
mark{background:#fde7c4}.flag{color:#b00;font-weight:bold}.muted{color:#666}
</style></head><body>
<h1>Similarity of {{ r.chapter }}</h1>
<p>{{ r.students|length }} students compared pair by pair with copydetect (winnowing, as MOSS;
names, strings and comments do not count). A pair is <span class="flag">flagged</span> from a score of
<b>{{ "%.0f"|format(100 * r.settings.threshold) }} %</b>: the share of a student's written code that matches the
other's, summed over the exercises, weighted by how much each student wrote in each exercise (the larger of the two
sides), on at least {{ r.settings.min_total }} written tokens.</p>
<p>Never counted: the released stub of each exercise (the <code>def</code> line, the docstring,
<code># YOUR CODE HERE</code>); code found in more than {{ "%.0f"|format(100 * r.settings.max_share) }} % of the class's
answers to an exercise (the canonical answer, such as a one-line softmax); exercises where either student wrote fewer than
{{ r.settings.min_tokens }} tokens (too short to tell apart). Matches shorter than {{ r.settings.noise }} filtered
characters are ignored; those of {{ r.settings.guarantee }} or more are always found.
A flag is a reason to read both notebooks, not a verdict.</p>
{% if r.skipped %}<p>Not compared: {% for s, why in r.skipped.items() %}{{ s }} ({{ why }}){% if not loop.last %}, {% endif %}{% endfor %}</p>{% endif %}
<h2>Top pairs</h2>
<table><tr><th>pair</th><th>score</th><th>each side</th><th>tokens compared</th><th></th></tr>
{% for p in top %}<tr><td>{% if p.flagged or loop.index <= shown %}<a href="#pair-{{ loop.index }}">{{ p.a }} · {{ p.b }}</a>{% else %}{{ p.a }} · {{ p.b }}{% endif %}</td>
<td>{{ "%.0f"|format(100 * p.score) }} %</td><td>{{ "%.0f"|format(100 * p.score_a) }} % · {{ "%.0f"|format(100 * p.score_b) }} %</td>
<td>{{ p.compared }}</td><td>{% if p.flagged %}<span class="flag">flagged</span>{% endif %}</td></tr>
{% endfor %}</table>
{% for p in top %}{% if p.flagged or loop.index <= shown %}
<h2 id="pair-{{ loop.index }}">{{ p.a }} · {{ p.b }}: {{ "%.0f"|format(100 * p.score) }} %{% if p.flagged %} <span class="flag">flagged</span>{% endif %}</h2>
{% for m in p.matches %}<h3>{{ m.exercise }} <span class="muted">— {{ m.matched_a }}/{{ m.written_a }} and
{{ m.matched_b }}/{{ m.written_b }} written tokens match{% if not m.counted %}; too short to tell, not counted{% endif %}</span></h3>
<div class="side"><div><b>{{ p.a }}</b><pre>{% for text, hit in seg(m.code_a, m.slices_a) %}{% if hit %}<mark>{{ text }}</mark>{% else %}{{ text }}{% endif %}{% endfor %}</pre></div>
<div><b>{{ p.b }}</b><pre>{% for text, hit in seg(m.code_b, m.slices_b) %}{% if hit %}<mark>{{ text }}</mark>{% else %}{{ text }}{% endif %}{% endfor %}</pre></div></div>
{% endfor %}{% endif %}{% endfor %}
</body></html>
"""


def render_html(report: SimilarityReport, top: int = 20, shown: int = 3) -> str:
    """The page: the settings stated, the ``top`` pairs, the matching code side by side for
    every flagged pair and the ``shown`` best (Jinja2 with autoescape: code is text)."""
    # Jinja2 only for the HTML page
    from jinja2 import Environment

    env = Environment(autoescape=True)
    return env.from_string(PAGE).render(r=report, top=report.pairs[:top], shown=shown, seg=_segments)
