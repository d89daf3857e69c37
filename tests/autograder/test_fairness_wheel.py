"""A student's unfinished or wrong notebook scores the same, part by part, in the
student package's ``check`` and in the grade (issue 38).

Two notebooks a class hands in, as students write them into the released notebook:

* chapter 9 half done: 9.1 blank, ``noam_lr`` with the warm-up exponent -0.5, 9.3
  written, 9.4 blank;
* chapter 7 with one wrong answer: ``layer_norm`` with the unbiased variance, the rest
  right.

Each is checked from the released wheel in a fresh environment (``python -m autograder
check``, and the JSON rows of the same run), and graded by ``grade_submission`` in the
sandbox. Every exercise gets the same points and the same parts earned in both.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import nbformat
import pytest

from autograder.checks import get_exercise
from autograder.grading import grade_submission
from student_env import filled, make_env, nbgrader_meta
from test_part_isolation import LAYER_NORM_UNBIASED, NOAM_WARMUP_HALF

BOOK = Path(__file__).resolve().parents[2] / "book"

# chapter -> {exercise: its cell's source, or None for the released stub left as it is}
NOTEBOOKS = {
    "09_training": {"make_decoder_io": None, "noam_lr": NOAM_WARMUP_HALF, "label_smoothing_floor": None},
    "07_add_and_norm": {"layer_norm": LAYER_NORM_UNBIASED},
}
# what the grade must give (written down before grading): exercise -> parts lost (indices)
FAIR = {
    "09_training": {"make_decoder_io": "all", "noam_lr": {0}, "label_smoothed_cross_entropy": set(),
                    "label_smoothing_floor": "all"},
    "07_add_and_norm": {"layer_norm": {0}, "PositionwiseFeedForward": set(), "ResidualSublayer": set(),
                        "EncoderLayer": set()},
}


def student_notebook(released: Path, cells: dict) -> nbformat.NotebookNode:
    """The released notebook filled as the reference writes it, except ``cells``: a source
    replaces that exercise's cell, ``None`` leaves the released stub."""
    done = filled(released)
    stubs = nbformat.read(str(released), as_version=4)
    for cell, stub in zip(done.cells, stubs.cells):
        name = nbgrader_meta(cell).get("grade_id")
        if nbgrader_meta(cell).get("solution") and name in cells:
            cell.source = stub.source if cells[name] is None else cells[name].strip("\n")
    return done


def earned_by_part(name: str, parts_line: str) -> dict[str, bool]:
    """``{part: earned}`` from the check's ``parts`` line (``name s/p · name s/p``), read
    by the registered part names (a name may hold the " · " that joins them)."""
    earned = {}
    for part, points in get_exercise(name).parts.items():
        full, none = f"{part} {_num(points)}/{_num(points)}", f"{part} 0/{_num(points)}"
        assert (full in parts_line) != (none in parts_line), (part, parts_line)
        earned[part] = full in parts_line
    return earned


def _num(x: float) -> str:
    return str(int(x)) if float(x) == int(x) else f"{x:g}"


def lost_indices(name: str, earned: dict[str, bool]) -> set[int]:
    return {i for i, part in enumerate(get_exercise(name).parts) if not earned[part]}


@pytest.mark.slow
@pytest.mark.parametrize("chapter", sorted(NOTEBOOKS))
def test_the_wheels_check_and_the_grade_agree_part_by_part(chapter, tmp_path, needs_sandbox):
    from autograder.release import release

    out = tmp_path / "release"
    done = release(out, [chapter], package=True)
    python, _, work, env = make_env(tmp_path / "student", done.package.wheel)
    path = work / f"{chapter} (1).ipynb"
    nbformat.write(student_notebook(out / chapter / f"{chapter}.ipynb", NOTEBOOKS[chapter]), str(path))
    proc = subprocess.run([str(python), "-m", "autograder", "check", path.name], cwd=work, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # not every visible check passes
    # the rows of that same run (``check`` prints them as a table)
    rows_file = work / f"{chapter}.json"
    subprocess.run([str(python), "-m", "autograder.student.notebook", path.name, str(rows_file)], cwd=work,
                   env=env, check=True, capture_output=True, timeout=600)
    local = {row["exercise"]: row for row in json.loads(rows_file.read_text(encoding="utf-8"))}
    graded = {s.exercise: s for s in grade_submission(BOOK / chapter / f"{chapter}.ipynb", path, seed=3)}
    assert set(local) == set(graded) == set(FAIR[chapter]), (sorted(local), sorted(graded))
    for name, fair in FAIR[chapter].items():
        score = graded[name]
        grade_earned = {p["name"]: p["score"] >= p["points"] for p in score.parts}
        everything = set(range(len(get_exercise(name).parts)))
        if fair == "all":  # a blank: no part, "not implemented yet" in both
            assert (score.status, score.score) == ("failed", 0.0), score
            assert local[name]["score"] == 0.0 and "not implemented yet" in local[name]["message"], local[name]
            continue
        assert lost_indices(name, grade_earned) == fair, (name, score)
        assert lost_indices(name, earned_by_part(name, local[name]["parts"])) == fair, (name, local[name])
        assert local[name]["score"] == score.score, (name, local[name], score)
        assert len(fair) < len(everything)
        if fair:  # what ``check`` prints: the same parts, earned and lost
            assert f"{name}: {local[name]['parts']}" in proc.stdout, proc.stdout
