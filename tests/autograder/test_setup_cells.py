"""Every chapter's setup cell runs in the library its grading sandbox sees.

ARCHITECTURE.md §2: the setup cell imports only what stays importable when the
chapter is graded — never this chapter's graded objects, nor anything that imports
them — because the grader runs it in front of the student's solution cells.

One interpreter runs the eleven setup cells, one after the other (eleven interpreters
each paid for importing torch and matplotlib again: about 4 CPU s a chapter). Before
each cell it forgets every module the cells imported (``solutions`` and ``autograder``
among them, whatever imported them) and puts that chapter's stripped library where
``PYTHONPATH`` puts it, so each cell imports ``solutions`` from its own library, as in a
fresh interpreter; only the third-party libraries that no chapter's library holds stay
loaded. Each chapter is still its own test, with its own failure.
"""
import json
import os
import subprocess
import sys

import nbformat
import pytest

from autograder.checks import exercises_of
from autograder.sandbox import build_library
from autograder.sync import chapter_notebooks

CHAPTERS = [p for p in chapter_notebooks() if exercises_of(p.stem)]

# Reads [[chapter, library, setup source], ...] as JSON on stdin; prints one JSON line per
# chapter: {"chapter", "error"} (error: the traceback, or null).
RUNNER = r'''
import importlib, json, sys, traceback
import matplotlib.pyplot, numpy, torch  # the third-party weight every setup cell imports: loaded once
baseline = set(sys.modules)
position = 1  # where PYTHONPATH's first folder sits behind "-c"'s ''
for chapter, library, source in json.load(sys.stdin):
    for name in set(sys.modules) - baseline:
        del sys.modules[name]
    sys.path.insert(position, library)
    importlib.invalidate_caches()
    try:
        exec(compile(source, f"<setup cell of {chapter}>", "exec"), {"__name__": "__main__"})
        error = None
    except BaseException:
        error = traceback.format_exc()
    sys.path.remove(library)
    print(json.dumps({"chapter": chapter, "error": error}), flush=True)
'''


def _setup_script(notebook):
    """The chapter's setup cell, then the check that none of its graded references leaked."""
    nb = nbformat.read(str(notebook), as_version=4)
    setup = next(c for c in nb.cells if c.cell_type == "code")
    graded = {ex.name for ex in exercises_of(notebook.stem)}
    script = setup.source + "\n" + "\n".join(
        f"assert not hasattr(solutions, {name!r}), 'the reference {name} leaked into the sandbox library'"
        for name in sorted(graded)
    )
    return setup, graded, script


@pytest.fixture(scope="module")
def setup_runs(tmp_path_factory):
    """Each chapter's setup cell run against its stripped library: chapter -> traceback or None."""
    root = tmp_path_factory.mktemp("setup-cells")
    jobs = []
    for notebook in CHAPTERS:
        _, graded, script = _setup_script(notebook)
        lib = build_library(root / notebook.stem / "lib", graded)
        jobs.append([notebook.stem, str(lib), script])
    env = {**os.environ, "MPLBACKEND": "Agg", "TRANSFORMER_BOOK_STATIC": "1"}
    env.pop("PYTHONPATH", None)
    result = subprocess.run([sys.executable, "-c", RUNNER], cwd=root, env=env, input=json.dumps(jobs),
                            capture_output=True, text=True, timeout=600)
    runs = {}
    for line in result.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            runs[row["chapter"]] = row["error"]
    assert result.returncode == 0 and len(runs) == len(jobs), (
        f"the setup-cell runner stopped (exit {result.returncode}):\n{result.stderr[-2000:]}")
    return runs


def test_every_chapter_is_found():
    assert [p.stem[:2] for p in CHAPTERS] == [f"{n:02d}" for n in range(1, 12)]


@pytest.mark.slow  # the eleven setup cells in one interpreter
@pytest.mark.parametrize("notebook", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_setup_cell_runs_against_the_stripped_library(notebook, setup_runs):
    setup, _, _ = _setup_script(notebook)
    assert setup.metadata.get("nbgrader", {}).get("grade_id") == "setup", "first code cell must be the setup cell"
    error = setup_runs[notebook.stem]
    assert error is None, f"setup cell of {notebook.stem} fails when graded:\n{error[-2000:]}"
