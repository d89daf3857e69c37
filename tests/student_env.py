"""A student's environment for the release tests: a fresh venv holding only a student wheel.

Isolation, the cheapest honest kind: ``python -m venv --without-pip`` (no
``--system-site-packages``), whose ``site-packages`` gets the wheel (installed by this
venv's ``pip --python``, ``--no-deps --no-index``: no network) and a ``.pth`` line naming
the project venv's ``site-packages``, so torch, numpy, matplotlib, ipykernel ... come
from there without a copy. A folder named in a ``.pth`` line has its own ``.pth`` files
ignored, so the project's editable install (``/work/main``'s ``solutions`` and
``autograder``) is not importable; the work folder is outside the repository and
``PYTHONPATH`` is cleared. Only the wheel's ``solutions`` and ``autograder`` are there
(``tests/autograder/test_student_release.py`` asserts it).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import nbformat

import solutions
from autograder.sync import BEGIN, END, solution_cell_source

__all__ = ["make_env", "install", "kernel_spec", "nbgrader_meta", "filled"]


def make_env(root: Path, wheel: Path | None = None):
    """A venv under ``root`` (see the module docstring), with ``wheel`` installed when given.

    Returns:
        ``(python, purelib, work, env)``: the venv's interpreter, its ``site-packages``, an
        empty work folder under ``root`` and the environment to run it in.
    """
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "project_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    if wheel is not None:
        install(python, wheel)
    work = root / "work"  # outside the repository
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(OMP_NUM_THREADS="1", MPLBACKEND="Agg", TRANSFORMER_BOOK_STATIC="1")
    return python, Path(purelib), work, env


def install(python: Path, wheel: Path) -> None:
    """Install ``wheel`` into the venv of ``python``, replacing the student package there
    (a student moving to the next chapter: ``pip install`` the next wheel)."""
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                    "--no-build-isolation", "--no-index", "--force-reinstall", "--quiet", str(wheel)],
                   check=True, timeout=300, capture_output=True)


def kernel_spec(folder: Path, python: Path, env: dict, name: str = "student") -> Path:
    """A Jupyter kernel spec ``name`` under ``folder/kernels`` running ``python`` (put ``folder``
    on ``JUPYTER_PATH``)."""
    spec = folder / "kernels" / name
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({"argv": [str(python), "-m", "ipykernel_launcher", "-f",
                                                           "{connection_file}"],
                                                  "display_name": name, "language": "python", "env": env}))
    return folder


def nbgrader_meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def filled(released: Path) -> nbformat.NotebookNode:
    """The released notebook with every exercise cell written as the reference writes it
    (what a student who finished the chapter submits)."""
    nb = nbformat.read(str(released), as_version=4)
    for cell in nb.cells:
        meta = nbgrader_meta(cell)
        if meta.get("solution") and cell.cell_type == "code":
            source = solution_cell_source(getattr(solutions, meta["grade_id"]))
            cell.source = "\n".join(ln for ln in source.splitlines() if ln.strip() not in (BEGIN, END))
    return nb
