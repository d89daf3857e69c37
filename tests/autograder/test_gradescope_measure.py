"""The README's Gradescope table is the output of ``gradescope-measure.sh --readme`` and covers the book.

Measuring needs root and a cgroup (minutes a chapter), so the suite checks what the script
wrote: one row per chapter of the book (a new chapter means measuring again), each graded
with full marks and judged against the 10 minutes; and the script's refusal of a bad option.
"""
import re
import subprocess
from pathlib import Path

from autograder.book import BOOK, chapter_ids

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "autograder" / "deploy" / "gradescope-measure.sh"
BEGIN, END = "<!-- gradescope-measure: begin -->", "<!-- gradescope-measure: end -->"


def _measured_rows():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    block = text.split(BEGIN)[1].split(END)[0]
    assert "by `autograder/deploy/gradescope-measure.sh --readme README.md`" in block
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in block.splitlines()
            if line.startswith("| ") and not line.startswith("| chapter")]


def test_the_readme_table_measures_every_chapter_with_full_marks_and_a_verdict():
    rows = _measured_rows()
    assert [row[0] for row in rows] == [c for c in chapter_ids(BOOK)]
    for chapter, points, score, wall, cpu, peak, fits in rows:
        assert float(points) == float(score) > 0, chapter  # the reference notebook earns every point
        assert re.fullmatch(r"\d+ s", wall) and re.fullmatch(r"[\d.]+ s", cpu) and re.fullmatch(r"[\d.]+[KMG]", peak)
        assert re.match(r"(yes|probably|no): ", fits), fits


def test_the_script_refuses_an_unknown_option_before_needing_root():
    proc = subprocess.run(["bash", str(SCRIPT), "--bogus"], capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown option --bogus" in proc.stderr
    proc = subprocess.run(["bash", str(SCRIPT), "--readme"], capture_output=True, text=True)
    assert proc.returncode != 0 and "--readme needs a file" in proc.stderr
