"""A student's notebook file: which chapter it is, and its visible checks.

:func:`chapter_of` recognises a chapter notebook whatever the file is called
(``04_self_attention (1).ipynb`` from a browser download): first by the stamp that
``autograder release`` writes into the notebook's metadata
(``metadata.transformer_book.chapter``), then by its graded cells (nbgrader's
``grade_id`` of each solution cell is an exercise name, and each exercise belongs to
one chapter), last by the file name.

:func:`visible_checks` runs the notebook's setup cell and solution cells in a fresh
Python process (``python -m autograder.student.notebook``) and, there, the visible
check of every exercise with a test cell: the student's own code on the student's
own machine, so no sandbox; a time limit guards against an endless loop.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import types
from pathlib import Path

from ..checks.base import check_report, precomputed
from . import STAMP_KEY

__all__ = ["STAMP_KEY", "read_notebook", "stamp", "chapter_of", "chapter_named", "misnamed", "holds_exercises",
           "visible_checks", "run_checks", "main"]

_COPY_SUFFIX = re.compile(r"(\s*\(\d+\)|[-_ ]copy\d*|-\d+)$", re.IGNORECASE)


def read_notebook(path: Path) -> dict:
    """The notebook at ``path`` as a dict; ``ValueError`` when it is not notebook JSON."""
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not a notebook (not JSON: {exc})") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise ValueError(f"{path} is not a notebook (no cells)")
    return nb


def stamp(nb, chapter: str) -> None:
    """Write the release stamp ``metadata.transformer_book = {"chapter", "edition"}`` into ``nb``."""
    nb["metadata"][STAMP_KEY] = {"chapter": chapter, "edition": "student"}


def cell_source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def _nbgrader(cell: dict) -> dict:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta if isinstance(meta, dict) else {}


def chapter_of(nb: dict, path: Path | None, chapters: dict[str, list[str]]) -> str | None:
    """The chapter id of notebook ``nb``, or ``None`` when it is none of ``chapters``.

    Args:
        nb: the notebook (a dict, as :func:`read_notebook` returns it).
        path: its file (the name is the last clue), or ``None``.
        chapters: chapter id -> its exercise names (the chapters this install knows).

    Returns:
        The chapter id, from the release stamp, else from the ``grade_id`` of the
        solution cells (the chapter most of them belong to), else from the file name
        without a browser's ``" (1)"``.
    """
    stamped = (nb.get("metadata") or {}).get(STAMP_KEY) or {}
    if isinstance(stamped, dict) and stamped.get("chapter") in chapters:
        return stamped["chapter"]
    owner = {name: chapter for chapter, names in chapters.items() for name in names}
    votes: dict[str, int] = {}
    for cell in nb.get("cells", []):
        meta = _nbgrader(cell)
        chapter = owner.get(str(meta.get("grade_id", ""))) if meta.get("solution") else None
        if chapter:
            votes[chapter] = votes.get(chapter, 0) + 1
    if votes:
        return max(sorted(votes), key=votes.get)
    return chapter_named(path, chapters) if path is not None else None


def chapter_named(path: Path, chapters: dict[str, list[str]] | list[str]) -> str | None:
    """The chapter id the file name ``path`` names (``04_self_attention (1).ipynb``: a
    browser's ``" (1)"`` aside), or ``None`` when it names none of ``chapters``."""
    stem = _COPY_SUFFIX.sub("", Path(path).stem)
    for chapter in chapters:
        if stem == chapter or stem.startswith(chapter):
            return chapter
    return None


def misnamed(path: Path, chapter: str | None, chapters: dict[str, list[str]] | list[str]) -> str | None:
    """The chapter the file name ``path`` names when the notebook is another one, ``chapter``
    (found by its stamp or cells): handed in under that name it would be graded as that
    chapter and earn nothing. ``None`` when the name names ``chapter`` or none of ``chapters``."""
    named = chapter_named(path, chapters)
    return named if named and chapter and named != chapter else None


def holds_exercises(nb: dict, names: list[str]) -> bool:
    """Whether notebook ``nb`` has the solution cell of one of the exercises ``names``."""
    return any(_nbgrader(cell).get("solution") and _nbgrader(cell).get("grade_id") in names
               for cell in nb.get("cells", []))


def _runnable(source: str) -> str:
    """A cell's source without IPython's magics and shell escapes (``%matplotlib``, ``!pip``)."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def run_checks(path: Path, chapter: str | None = None) -> list[dict]:
    """Run the notebook's setup and solution cells, then the visible check of every
    exercise with a test cell, in *this* process (``__main__`` becomes the notebook's
    namespace, as in Jupyter). Returns one row per exercise (see :func:`visible_checks`).

    Args:
        path: the notebook file.
        chapter: the chapter it is checked as (``check --chapter``); by default the one
            :func:`chapter_of` finds. Its released setup and test cells are the ones run.
    """
    nb = read_notebook(path)
    main_module = types.ModuleType("__main__")
    main_module.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main_module
    namespace = main_module.__dict__
    code_cells = [c for c in nb["cells"] if c.get("cell_type") == "code"]
    # As grading does (nbgrader restores locked cells), the setup cell and the test cells
    # are the released notebook's, stored in this package: a notebook of an earlier release
    # (whose setup cell imports a module since moved) scores as it will be graded.
    store = precomputed()
    chapters = dict(getattr(store, "chapters", {}) or {})
    locked = (getattr(store, "locked", {}) or {}).get(chapter or chapter_of(nb, Path(path), chapters) or "")
    errors: dict[str, str] = {}
    # the setup cell by its grade_id (a released notebook opens with the Colab install cell), else the first
    setup = next((i for i, c in enumerate(code_cells) if _nbgrader(c).get("grade_id") == "setup"), 0)
    for index, cell in enumerate(code_cells):
        meta = _nbgrader(cell)
        if index != setup and not meta.get("solution"):
            continue  # the setup cell and the solution cells only
        source = locked["setup"] if index == setup and locked else cell_source(cell)
        try:
            exec(compile(_runnable(source), f"<cell {meta.get('grade_id', index)}>", "exec"), namespace)
        except BaseException as exc:  # noqa: BLE001 - a broken cell is a finding, not a crash
            errors[str(meta.get("grade_id", "setup")) if index != setup else "setup"] = f"{type(exc).__name__}: {exc}"
    tests: list[tuple[str, float]] = []
    for cell in code_cells:
        meta = _nbgrader(cell)
        grade_id = str(meta.get("grade_id", ""))
        if meta.get("grade") and grade_id.startswith("test_"):
            tests.append((grade_id[len("test_"):], float(meta.get("points", 0) or 0)))
    if locked:
        tests = list(locked["tests"].items())
    rows = []
    for name, points in tests:
        row = {"exercise": name, "score": 0.0, "max_score": points, "status": "failed", "message": "",
               "parts_line": "", "notes": [], "advice": []}
        if "setup" in errors:
            row["message"] = f"the setup cell raised {errors['setup']}"
        elif name in errors:
            row["message"] = f"your cell raised {errors[name]}"
        elif name not in namespace:
            row["message"] = f"`{name}` is not defined: is its exercise cell still in the notebook?"
        else:
            try:
                report = check_report(name, namespace[name])
            except Exception as exc:  # noqa: BLE001
                row["message"] = f"the check could not run: {type(exc).__name__}: {exc}"
            else:
                scale = points / report.max_score if report.max_score else 0.0
                message = "" if report.passed else report.reason()
                if report.regraded_when_graded and not report.passed:
                    # the table's score is the lower bound of the grade: say so on its line
                    message = f"{report.score_label()}\n{message}"
                row.update(score=round(report.score * scale, 9), parts_line=report.parts_line(),
                           status="passed" if report.passed else ("partial" if report.score else "failed"),
                           message=message, notes=list(report.notes), advice=list(report.advice))
        rows.append(row)
    return rows


def visible_checks(path: Path, timeout: float = 120.0, chapter: str | None = None) -> list[dict]:
    """The visible checks of the notebook at ``path``, run in a fresh process
    (:func:`run_checks` there, as chapter ``chapter`` when given).

    Returns:
        One dict per exercise: ``exercise``, ``score``, ``max_score``, ``status``
        (``passed``, ``partial``, ``failed``), ``message`` (the diagnosis of every
        missed part), ``parts`` (``values 2/2 · any axis 0/1``), ``notes``, ``advice``.

    Raises:
        TimeoutError: when the cells and checks take longer than ``timeout`` seconds.
        RuntimeError: when the process dies without an answer.
    """
    path = Path(path).resolve()
    with tempfile.TemporaryDirectory(prefix="autograder-check-") as tmp:
        out = Path(tmp) / "rows.json"
        # UTF-8 both ways on every OS: the cells' output (a print of "✓") is written and
        # read as UTF-8, not in the locale's encoding (cp1252 on a Windows machine).
        env = dict(os.environ, MPLBACKEND="Agg", TRANSFORMER_BOOK_STATIC="1", PYTHONIOENCODING="utf-8",
                   PYTHONUTF8="1")
        command = [sys.executable, "-m", "autograder.student.notebook", str(path), str(out)]
        command += [chapter] if chapter else []
        try:
            proc = subprocess.run(command, cwd=path.parent, env=env, capture_output=True, text=True, encoding="utf-8",
                                  errors="replace", timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"your cells and the checks took longer than {timeout:g} s (an endless loop?); "
                               "raise the limit with --timeout") from None
        if not out.is_file():
            tail = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
            raise RuntimeError(f"running the notebook's cells stopped: {tail}")
        return json.loads(out.read_text(encoding="utf-8"))


def main(argv: list[str] | None = None) -> int:
    """``python -m autograder.student.notebook NOTEBOOK OUT_JSON [CHAPTER]`` (used by :func:`visible_checks`)."""
    notebook, out, *chapter = (argv if argv is not None else sys.argv[1:])[:3]
    rows = run_checks(Path(notebook), chapter[0] if chapter else None)
    Path(out).write_text(json.dumps(rows), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
