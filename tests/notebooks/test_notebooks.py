"""Chapter notebooks are committed without outputs; nbval runs them on demand.

``make test`` executes each chapter once: in the strict book build, hidden checks
included, and ``tests/book/test_executed_chapters.py`` asserts on that execution.
Running nbval as well would execute every chapter a second time, so
``test_notebook_runs`` (marker ``nbval_execution``) runs only with ``--run-nbval``:
``make nbval``, for one-off use (it is what a student's ``pytest --nbval-lax`` does).

Each notebook runs under ``pytest --nbval-lax`` in its own subprocess, so notebooks
spread over pytest-xdist workers. ``--nbval-lax`` runs every cell and fails on any
error; it compares outputs only in cells marked ``# NBVAL_CHECK_OUTPUT``. The source
notebooks include their hidden checks, so those run here too.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted(ROOT.glob("book/[0-9][0-9]_*/[0-9][0-9]_*.ipynb"))
CELL_TIMEOUT_S = 900  # as the book build: the training chapter trains a small model


def _params(paths):
    if not paths:
        return [pytest.param(None, marks=pytest.mark.skip(reason="no chapter notebooks yet"), id="none")]
    return [pytest.param(p, id=p.stem) for p in paths]


def _committed_notebooks():
    try:
        listed = subprocess.run(["git", "ls-files", "book/*.ipynb"], cwd=ROOT, check=True,
                                capture_output=True, text=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return []  # not a git checkout (e.g. an unpacked release): nothing to check
    return [ROOT / name for name in listed if (ROOT / name).exists()]


@pytest.mark.slow
@pytest.mark.nbval_execution
@pytest.mark.parametrize("notebook", _params(CHAPTERS))
def test_notebook_runs(notebook):
    rel = notebook.relative_to(ROOT)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--nbval-lax", f"--nbval-cell-timeout={CELL_TIMEOUT_S}",
         "-p", "no:xdist", "-p", "no:cacheprovider", "-q", "--no-header", str(rel)],
        cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, f"{rel} failed under nbval:\n{(result.stdout + result.stderr)[-6000:]}"


@pytest.mark.parametrize("notebook", _params(_committed_notebooks()))
def test_committed_notebook_has_no_outputs(notebook):
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    dirty = [i for i, cell in enumerate(nb["cells"]) if cell["cell_type"] == "code"
             and (cell.get("outputs") or cell.get("execution_count") is not None)]
    assert not dirty, (f"{notebook.relative_to(ROOT)}: cells {dirty} carry outputs or execution "
                       "counts; clear them before committing (Jupyter: Edit → Clear Outputs of All Cells)")
