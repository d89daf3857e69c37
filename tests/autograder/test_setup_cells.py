"""Every chapter's setup cell runs in the library its grading sandbox sees.

ARCHITECTURE.md §2: the setup cell imports only what stays importable when the
chapter is graded — never this chapter's graded objects, nor anything that imports
them — because the grader runs it in front of the student's solution cells.
"""
import os
import subprocess
import sys

import nbformat
import pytest

from autograder.checks import exercises_of
from autograder.sandbox import build_library
from autograder.sync import chapter_notebooks

CHAPTERS = [p for p in chapter_notebooks() if exercises_of(p.stem)]


def test_every_chapter_is_found():
    assert [p.stem[:2] for p in CHAPTERS] == [f"{n:02d}" for n in range(1, 12)]


@pytest.mark.slow  # a sandbox run per chapter
@pytest.mark.parametrize("notebook", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_setup_cell_runs_against_the_stripped_library(notebook, tmp_path):
    nb = nbformat.read(str(notebook), as_version=4)
    setup = next(c for c in nb.cells if c.cell_type == "code")
    assert setup.metadata.get("nbgrader", {}).get("grade_id") == "setup", "first code cell must be the setup cell"
    graded = {ex.name for ex in exercises_of(notebook.stem)}
    lib = build_library(tmp_path / "lib", graded)
    script = setup.source + "\n" + "\n".join(
        f"assert not hasattr(solutions, {name!r}), 'the reference {name} leaked into the sandbox library'"
        for name in sorted(graded)
    )
    env = {**os.environ, "PYTHONPATH": str(lib), "MPLBACKEND": "Agg", "TRANSFORMER_BOOK_STATIC": "1"}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"setup cell of {notebook.stem} fails when graded:\n{result.stderr[-2000:]}"
