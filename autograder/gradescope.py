"""A Gradescope autograder for one chapter: ``python -m autograder gradescope CHAPTER --out autograder.zip``.

Gradescope runs one container per submission from an autograder zip
(https://gradescope-autograders.readthedocs.io/en/latest/specs/): it unpacks the zip into
``/autograder/source``, runs ``setup.sh`` there once when it builds the image, copies
``run_autograder`` to ``/autograder/run_autograder`` and, per submission, runs it with
the student's files in ``/autograder/submission/``; the grade is what it writes to
``/autograder/results/results.json``.

The zip holds:

* ``setup.sh``: system packages (bubblewrap, prlimit/setpriv from util-linux, Python's
  venv), then a virtual environment in ``/opt/autograder-venv`` (outside ``source/``,
  which it closes to other users: mode 0700) of the image's own ``python3`` (3.10 on
  Gradescope's Ubuntu 22.04 image, 3.12 on 24.04) with torch's CPU build first (from
  PyTorch's CPU wheel index; the plain index, with a warning, where that cannot be
  reached) and then ``requirements-grader.txt``: what grading needs and nothing of the
  book's or the tests' stack. The project itself is not installed: ``run_autograder``
  puts ``source/`` on ``PYTHONPATH``. It ends with ``python -m autograder.gradescope
  setup-check`` (imports, and the wall grading will use there: the build fails, naming
  the way out, where none starts). ``GRADESCOPE_NO_APT=1`` skips the system packages
  (a test run as root on a developer's machine), ``GRADESCOPE_OFFLINE=1`` skips every
  step that needs the network and ``AUTOGRADER_PYTHON`` names an interpreter whose
  packages are already installed instead of making a venv;
* ``run_autograder``: ``python -m autograder.gradescope run``, which grades the
  submission with the hidden checks exactly as ``grade`` does (the same
  :func:`autograder.grading.grade_submission`) and writes ``results.json``: one test per
  graded part (name ``exercise: part``, its points, ``passed``/``failed``, our feedback
  text as ``output``), ``stdout_visibility`` ``hidden`` and, by default, the tests
  ``after_due_date`` (``--visibility``; their messages come from hidden cases). As
  Gradescope's specification says, while a test is not yet visible to the student the
  student does not see the total score either; the overall ``output`` (always visible)
  states the points, so the total reaches the student at once;
* ``autograder/``, ``solutions/``, ``requirements-grader.txt`` and
  ``book/<chapter>/<chapter>.ipynb`` (the source notebook: solutions and hidden tests,
  never in a student's reach: the sandbox sees only a stripped library), and
  ``gradescope.json`` (mode 0600: chapter, a fresh random base seed of the hidden cases,
  the limits, the isolation, the visibility, the chapter's total points).

How the student's code is kept apart (``--isolation``): ``auto`` (bubblewrap where it
starts, else the container mode of :mod:`autograder.isolation`), ``bubblewrap`` or
``container`` require that wall and fail the build where it does not start.
``engine-only`` is the instructor's explicit choice, for an image where neither starts:
the student's code runs in a plain subprocess under the same limits, and Gradescope's
own per-submission container is the only wall. It can then read the grader's files in
that container (the hidden checks, this zip's seed); each ``results.json`` says so in
``extra_data``.

The root ``/autograder`` can be moved with ``AUTOGRADER_ROOT`` (tests).
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import time
import traceback
import zipfile
from dataclasses import dataclass
from pathlib import Path

import nbformat

from .batch import failed_scores
from .book import BOOK, source_notebook
from .checks import exercises_of
from .grading import grade_submission
from .isolation import choose_isolation, set_isolation
from .journal import submission_seed
from .run_settings import RunSettings
from .scores import ExerciseScore, NotebookScores, PartScore, Status
from .submissions import file_sha256
from .text import safe_text, score_text, wrong_chapter_notice

__all__ = ["VISIBILITIES", "ISOLATIONS", "ENGINE_ONLY", "GRADER_REQUIREMENTS", "build_zip", "chapter_points",
           "results_json", "run", "main", "SCHEMA_PATH", "grade_upload", "GraderConfig", "load_grader_config",
           "write_results", "total_line", "validate_results"]

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_PATH = Path(__file__).resolve().parent / "gradescope_results.schema.json"
VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")
# The wall around the student's code; ENGINE_ONLY: none of ours, the container engine's alone.
ENGINE_ONLY = "engine-only"
ISOLATIONS = ("auto", "bubblewrap", "container", ENGINE_ONLY)
CONFIG = "gradescope.json"
GRADER_REQUIREMENTS = "requirements-grader.txt"
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
# Gradescope's own cap on results.json is far larger; a test's output longer than this is cut.
MAX_OUTPUT = 20_000
ENGINE_ONLY_NOTE = ("engine-only: no sandbox started; the student's code ran as a plain subprocess under the "
                    "run's limits, with Gradescope's container as the only wall (chosen by the instructor)")

SETUP_SH = r"""#!/usr/bin/env bash
# Gradescope runs this once, in /autograder/source, when it builds the autograder image.
# GRADESCOPE_NO_APT=1 skips the system packages; GRADESCOPE_OFFLINE=1 skips every step that
# needs the network; AUTOGRADER_PYTHON=/path/python uses that interpreter (its packages
# already installed) instead of a fresh venv; TORCH_INDEX overrides torch's CPU wheel index.
set -euo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
SOURCE="$ROOT/source"
TORCH_INDEX="${TORCH_INDEX:-@TORCH_INDEX@}"
cd "$SOURCE"
online() { [ "${GRADESCOPE_OFFLINE:-0}" != 1 ]; }

if online && [ "${GRADESCOPE_NO_APT:-0}" != 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv python3-pip bubblewrap util-linux
else
    echo "setup.sh: system packages skipped (offline, GRADESCOPE_NO_APT=1 or not root)"
fi

if [ -n "${AUTOGRADER_PYTHON:-}" ]; then
    PY="$AUTOGRADER_PYTHON"
    echo "setup.sh: using $PY and the packages it has"
else
    python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' || {
        echo "setup.sh: $(python3 --version 2>&1) is too old: grading needs Python 3.10 or newer (choose Gradescope's Ubuntu 22.04 or 24.04 base image)" >&2
        exit 1
    }
    # Outside source/: source/ (the reference, the hidden tests) is closed to the student's user below.
    VENV="${AUTOGRADER_VENV:-/opt/autograder-venv}"
    python3 -m venv "$VENV"
    PY="$VENV/bin/python"
fi
if online && [ -z "${AUTOGRADER_PYTHON:-}" ]; then
    "$PY" -m pip install --quiet --upgrade pip
    # torch first, on its own, the CPU build: nothing below then pulls CUDA wheels.
    TORCH="$(grep -E '^torch([<>=!~ ]|$)' @REQUIREMENTS@)"
    if "$PY" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=20)' "$TORCH_INDEX" 2>/dev/null; then
        "$PY" -m pip install --quiet "$TORCH" --index-url "$TORCH_INDEX"
    else
        echo "setup.sh: WARNING: $TORCH_INDEX cannot be reached; torch comes from the plain index (on Linux its CUDA build: about 3 GB more)"
        "$PY" -m pip install --quiet "$TORCH"
    fi
    "$PY" -m pip install --quiet -r @REQUIREMENTS@
else
    echo "setup.sh: package installation skipped (offline or AUTOGRADER_PYTHON given)"
fi
printf '%s\n' "$PY" > "$SOURCE/.python"
chmod 0700 "$SOURCE"   # the grader's files: not readable by the student code's user
PYTHONPATH="$SOURCE" "$PY" -m autograder.gradescope setup-check --root "$ROOT"
"""

RUN_AUTOGRADER = r"""#!/usr/bin/env bash
# Gradescope runs this once per submission, in /autograder.
set -uo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
SOURCE="$ROOT/source"
PY="$(cat "$SOURCE/.python" 2>/dev/null || echo /opt/autograder-venv/bin/python)"
cd "$ROOT"
PYTHONPATH="$SOURCE" exec "$PY" -m autograder.gradescope run --root "$ROOT"
"""


# --------------------------------------------------------------------------- the zip


def _package_files(root: Path) -> list[Path]:
    """The files of ``autograder`` and ``solutions`` that grading needs (no caches; the pages'
    templates, ``autograder/templates/*.html``, included)."""
    files = []
    for package in ("autograder", "solutions"):
        for path in sorted((root / package).rglob("*")):
            rel = path.relative_to(root)
            if path.is_file() and "__pycache__" not in rel.parts and "deploy" not in rel.parts \
                    and path.suffix in (".py", ".json", ".txt", ".typed", ".npz", ".cfg", ".toml", ".html"):
                files.append(path)
    return files


def _entry(name: str, mode: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))  # fixed: the same inputs give the same zip
    info.external_attr = (0o100000 | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def chapter_points(source: Path) -> float:
    """The total points of a source notebook: the sum of its graded cells' nbgrader ``points``
    (what the assignment's "Autograder points" on Gradescope must be)."""
    nb = nbformat.read(str(source), as_version=4)
    return float(sum(float(cell.metadata.get("nbgrader", {}).get("points", 0) or 0) for cell in nb.cells
                     if cell.metadata.get("nbgrader", {}).get("grade")))


def build_zip(chapter: str, out: Path, *, book: Path = BOOK, seed: int | None = None, timeout: float = 120.0,
              memory: int | None = None, isolation: str = "auto", visibility: str = "after_due_date",
              root: Path = ROOT) -> Path:
    """Write the Gradescope autograder zip of ``chapter``.

    Args:
        chapter: the chapter id (``04_self_attention``).
        out: the zip to write.
        book: the folder of the source notebooks.
        seed: the base seed of the hidden cases (default: a fresh random one; each
            submission's own seed mixes in the student and the notebook's SHA-256).
        timeout: seconds of one sandbox run of a submission (a submission gets at most
            two runs' worth: set Gradescope's autograder timeout above that).
        memory: bytes of all the memory of one sandbox run (its memory cgroup where one
            can be made; ``None``: the sandbox's default, 2 GiB). On Gradescope's default
            768 MB container give at most about 600 MB: the grader itself holds the rest.
        isolation: one of :data:`ISOLATIONS`; :data:`ENGINE_ONLY` grades without a
            sandbox, the container being the only wall (the instructor's explicit choice).
        visibility: Gradescope visibility of the per-part tests (one of :data:`VISIBILITIES`).
        root: the repository whose ``autograder``, ``solutions`` and
            ``requirements-grader.txt`` go in.

    Returns:
        ``out``. Raises ``ValueError`` for an unknown chapter, visibility or isolation,
        or a memory or timeout that is not positive.
    """
    if visibility not in VISIBILITIES:
        raise ValueError(f"visibility {visibility!r}: expected one of {', '.join(VISIBILITIES)}")
    if isolation not in ISOLATIONS:
        raise ValueError(f"isolation {isolation!r}: expected one of {', '.join(ISOLATIONS)}")
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if memory is not None and not int(memory) > 0:
        raise ValueError(f"memory must be a positive number of bytes, got {memory!r}")
    source = source_notebook(chapter, Path(book))
    if not exercises_of(chapter):
        raise ValueError(f"chapter {chapter!r} has no registered exercises to grade")
    config = {"chapter": chapter, "seed": secrets.randbits(31) if seed is None else int(seed),
              "timeout": float(timeout), "memory": None if memory is None else int(memory),
              "isolation": isolation, "visibility": visibility, "points": chapter_points(source)}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with zipfile.ZipFile(tmp, "w") as zf:
        script = SETUP_SH.replace("@TORCH_INDEX@", TORCH_INDEX).replace("@REQUIREMENTS@", GRADER_REQUIREMENTS)
        zf.writestr(_entry("setup.sh", 0o755), script)
        zf.writestr(_entry("run_autograder", 0o755), RUN_AUTOGRADER)
        zf.writestr(_entry(CONFIG, 0o600), json.dumps(config, indent=1, sort_keys=True) + "\n")
        zf.writestr(_entry(GRADER_REQUIREMENTS, 0o644), (root / GRADER_REQUIREMENTS).read_bytes())
        zf.writestr(_entry(f"book/{chapter}/{chapter}.ipynb", 0o600), source.read_bytes())
        for path in _package_files(root):
            zf.writestr(_entry(path.relative_to(root).as_posix(), 0o644), path.read_bytes())
    os.replace(tmp, out)
    return out


# --------------------------------------------------------------------------- results.json


def _part_output(score: ExerciseScore, part: PartScore, first: bool) -> str:
    mark = "✓" if part.score >= part.points else "✗"
    lines = [f"{mark} {part.name} ({score_text(part.score)}/{score_text(part.points)})"]
    if part.message:
        lines.append(part.message)
    if first:
        lines += [f"note: {n}" for n in score.notes]
    return "\n".join(lines)[:MAX_OUTPUT]


def results_json(rows: list[ExerciseScore], *, chapter: str, visibility: str = "after_due_date", isolation: str = "",
                 execution_time: float | None = None, notice: str = "") -> dict:
    """Gradescope's ``results.json`` for the score rows of one submission.

    Args:
        rows: the :class:`~autograder.scores.ExerciseScore` of each graded cell.
        chapter: the chapter id (in the overall output).
        visibility: of each test (the parts' messages come from the hidden cases).
        isolation: how the student's code was kept apart (``extra_data``, for the instructor;
            :data:`ENGINE_ONLY` adds ``isolation_note``, saying there was no sandbox).
        execution_time: seconds the grading took.
        notice: a line to put first in the overall output (e.g. no notebook found).

    Returns:
        The JSON object: ``score`` (the sum), ``tests`` (one per graded part, or one per
        exercise that has no parts: missing, unreadable, timed out, flagged),
        ``output`` (the total, visible at once: Gradescope shows no score while any
        test is not yet visible), ``stdout_visibility`` ``hidden``.
    """
    tests = []
    for number, row in enumerate(rows, start=1):
        if row.parts_add_up:
            for i, part in enumerate(row.parts, start=1):
                tests.append({
                    "name": f"{row.exercise}: {part.name}", "number": f"{number}.{i}",
                    "score": float(part.score), "max_score": float(part.points),
                    "status": "passed" if part.score >= part.points else "failed",
                    "output": _part_output(row, part, i == 1), "output_format": "text", "name_format": "text",
                    "tags": [row.exercise], "visibility": visibility,
                })
        else:
            text = row.reason or row.status.value
            notes = [f"note: {n}" for n in row.notes]
            tests.append({
                "name": row.exercise, "number": str(number), "score": float(row.score),
                "max_score": float(row.max_score),
                "status": "passed" if row.score >= row.max_score > 0 else "failed",
                "output": "\n".join([f"{row.status.value}: {text}", *notes])[:MAX_OUTPUT],
                "output_format": "text", "name_format": "text", "tags": [row.exercise],
                "visibility": visibility,
            })
    score = sum(r.score for r in rows)
    max_score = sum(r.max_score for r in rows)
    summary = total_line(rows, chapter)
    if visibility != "visible":
        summary += (" Gradescope shows the points per part and their messages "
                    + {"after_due_date": "after the due date", "after_published": "once grades are published",
                       "hidden": "to your instructor only"}[visibility]
                    + " and, until then, no score: this line is your total. Meanwhile the visible checks in "
                      "your notebook tell you what they test.")
    result = {
        "score": float(score),
        "output": "\n".join(x for x in (notice, summary) if x),
        "output_format": "text",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
        "extra_data": {"chapter": chapter, "isolation": isolation, "max_score": float(max_score)},
    }
    if isolation == ENGINE_ONLY:
        result["extra_data"]["isolation_note"] = ENGINE_ONLY_NOTE
    if execution_time is not None:
        result["execution_time"] = int(round(execution_time))
    return result


def total_line(rows: list[ExerciseScore], chapter: str) -> str:
    """A submission's total, as both platforms' results state it first (Gradescope's
    ``output``, PrairieLearn's ``message``).

    Args:
        rows: the :class:`~autograder.scores.ExerciseScore` of each graded cell.
        chapter: the chapter id.

    Returns:
        ``"04_self_attention: 7/10 points, 2 of 3 exercises pass every check (the hidden
        checks included)."``
    """
    score = sum(r.score for r in rows)
    max_score = sum(r.max_score for r in rows)
    passed = sum(r.status == Status.PASSED for r in rows)
    return (f"{chapter}: {score_text(score)}/{score_text(max_score)} points, {passed} of {len(rows)} exercises "
            "pass every check (the hidden checks included).")


def validate_results(data: dict, schema: Path = SCHEMA_PATH) -> None:
    """Validate a platform's ``results.json`` ``data`` against the JSON schema file ``schema``
    (Gradescope's, :data:`SCHEMA_PATH`, by default; PrairieLearn's adapter passes its own).

    Raises:
        jsonschema.ValidationError: ``data`` breaks the schema.
    """
    # jsonschema only to validate (the tests and setup's check)
    import jsonschema

    jsonschema.validate(data, json.loads(Path(schema).read_text(encoding="utf-8")), cls=jsonschema.Draft7Validator)


# --------------------------------------------------------------------------- run_autograder


def _student_id(root: Path) -> str:
    """The submitter's Gradescope id (``submission_metadata.json``), else ``submission``."""
    try:
        meta = json.loads((root / "submission_metadata.json").read_text(encoding="utf-8"))
        users = meta.get("users") or []
        ids = sorted(str(u.get("id") or u.get("email") or "") for u in users if isinstance(u, dict))
        return safe_text("+".join(i for i in ids if i)) or "submission"
    except (OSError, ValueError, AttributeError):
        return "submission"


def _find_notebook(folder: Path, chapter: str) -> tuple[Path | None, str]:
    """The submitted notebook: ``<chapter>.ipynb`` (anywhere in the upload), else the only
    ``.ipynb``; with the reason when there is none or several."""
    if not folder.is_dir():
        return None, "no files were submitted"
    found = sorted(p for p in folder.rglob("*.ipynb") if not any(part.startswith((".", "_"))
                                                                   for part in p.relative_to(folder).parts))
    exact = [p for p in found if p.name == f"{chapter}.ipynb"]
    if len(exact) == 1:
        return exact[0], ""
    if len(found) == 1:
        return found[0], ""
    if not found:
        return None, f"no notebook was submitted: upload {chapter}.ipynb"
    names = safe_text(", ".join(str(p.relative_to(folder)) for p in found[:5]))
    return None, f"several notebooks were submitted ({names}): upload only {chapter}.ipynb"


@dataclass(frozen=True)
class GraderConfig:
    """What a Gradescope zip's ``source/`` or a PrairieLearn question's ``tests/`` holds.

    Attributes:
        config: the configuration (``chapter``, ``seed``, ``timeout``, ``memory``,
            ``isolation`` and the platform's own keys).
        chapter: the chapter id.
        source: the chapter's source notebook (``book/<chapter>/<chapter>.ipynb`` beside it).
    """

    config: dict
    chapter: str
    source: Path


def load_grader_config(folder: Path, name: str) -> GraderConfig:
    """Read ``folder/name`` (``gradescope.json``, ``autograder.json``) and find the notebook it grades.

    The one loading path of both adapters (:func:`run`, :func:`autograder.prairielearn.run`).

    Raises:
        ValueError: the file is missing or not a JSON object with a ``chapter`` and a
            whole-number ``seed``, or the chapter's source notebook is not beside it
            (the message names the file, for the instructor who built the zip).
    """
    path = Path(folder) / name
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read the grader's configuration ({exc})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(config).__name__}")
    chapter, seed = config.get("chapter"), config.get("seed")
    if not isinstance(chapter, str) or not chapter or "/" in chapter or chapter.startswith("."):
        raise ValueError(f"{path}: expected \"chapter\": a chapter id such as \"04_self_attention\", got {chapter!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"{path}: expected \"seed\": a whole number, got {seed!r}")
    source = Path(folder) / "book" / chapter / f"{chapter}.ipynb"
    if not source.is_file():
        raise ValueError(f"{path}: no source notebook {source} for chapter {chapter!r} beside it")
    return GraderConfig(config, chapter, source)


def write_results(path: Path, data: dict, rows: list[ExerciseScore]) -> None:
    """Write a platform's ``results.json`` atomically (text a JSON file can hold), then
    print each exercise's line for the instructor's log (students never see stdout)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8",
                   errors="backslashreplace")
    os.replace(tmp, path)
    for row in rows:
        print(f"{row.exercise}: {row.score:g}/{row.max_score:g} {row.status.value} {row.reason}")


def grade_upload(source: Path, folder: Path, chapter: str, config: dict, *,
                 student: str) -> tuple[NotebookScores, str, str]:
    """Grade the notebook a student uploaded into ``folder``, as ``grade`` does (the hidden
    checks, student code isolated): the core shared by the Gradescope and PrairieLearn adapters.

    Returns:
        ``(found, notice, isolation)``: the :class:`~autograder.scores.NotebookScores` (an
        :class:`~autograder.scores.ExerciseScore` per graded cell, every exercise at 0 with the reason
        when no notebook or the grader failed; the chapter the notebook really holds when it is
        another one), a line about what was found instead of the notebook ("" when it was), and the
        isolation used. Never raises
        for the submission's sake (a grader failure's traceback goes to stdout).

    ``config`` is the zip's (or the course's) configuration: ``seed``, ``timeout``,
    ``memory`` and ``isolation`` (:func:`_isolation`).
    """
    path, notice = _find_notebook(folder, chapter)
    isolation = ""
    try:
        isolation = _isolation(config)
        print(f"isolation: {isolation}")
        digest = file_sha256(path) if path is not None else None
        settings = RunSettings(timeout=float(config.get("timeout", 120)), memory=config.get("memory"),
                               sandbox=isolation != ENGINE_ONLY, seed=int(config["seed"]))
        found = grade_submission(source, path, chapter=chapter, settings=settings, hidden=True,
                                 seed=submission_seed(settings.seed, student, chapter, str(digest)),
                                 student=student)
    except Exception as exc:  # noqa: BLE001 - the student still gets a result
        traceback.print_exc(file=sys.stdout)
        found = NotebookScores(failed_scores(source, f"the grader failed: {type(exc).__name__}; your instructor "
                                                     "can see why", student=student, chapter=chapter))
    return found, notice, isolation


def run(root: Path) -> dict:
    """Grade ``root/submission`` and write ``root/results/results.json``; return it.

    Never raises for the submission's sake: a grader failure still writes a
    ``results.json`` (score 0, the failure named) and prints the traceback to stdout,
    which only the instructor sees.
    """
    root = Path(root)
    grader = load_grader_config(root / "source", CONFIG)
    start = time.monotonic()
    found, notice, isolation = grade_upload(grader.source, root / "submission", grader.chapter, grader.config,
                                            student=_student_id(root))
    if found.wrong_chapter:  # said first, in the words of the feedback page
        notice = wrong_chapter_notice(found.wrong_chapter, grader.chapter)
    data = results_json(found.scores, chapter=grader.chapter, isolation=isolation, notice=notice,
                        visibility=grader.config.get("visibility", "after_due_date"),
                        execution_time=time.monotonic() - start)
    write_results(root / "results" / "results.json", data, found.scores)
    return data


def _isolation(config: dict) -> str:
    """The wall this zip grades with (``gradescope.json``'s ``isolation``), checked to start.

    ``auto`` leaves the choice to ``AUTOGRADER_ISOLATION`` (default: bubblewrap where it
    starts, else the container mode). Raises ``RuntimeError`` naming the way out when
    the wall cannot start here.
    """
    wanted = config.get("isolation", "auto")
    if wanted == ENGINE_ONLY:
        return ENGINE_ONLY
    if wanted != "auto":
        set_isolation(wanted)
    try:
        return choose_isolation()
    except RuntimeError as exc:
        raise RuntimeError(f"{exc}. No wall of ours starts in this image: rebuild the zip with "
                           f"`python -m autograder gradescope {config.get('chapter', 'CHAPTER')} --isolation "
                           f"{ENGINE_ONLY}` to grade with Gradescope's container as the only wall") from None


def setup_check(root: Path) -> str:
    """What ``setup.sh`` ends with: the configuration reads, the grading imports work
    (the chapters' setup cells' too), and which isolation grading will use here (printed).

    Raises:
        SystemExit: the source notebook is missing, or no wall of the chosen kind starts.
    """
    import IPython  # noqa: F401
    import ipywidgets  # noqa: F401
    import matplotlib  # noqa: F401
    import numpy  # noqa: F401
    import torch  # noqa: F401

    import solutions  # noqa: F401

    # part of what this checks: the grading imports work on the image
    from .checks import exercises_of

    config = json.loads((Path(root) / "source" / CONFIG).read_text(encoding="utf-8"))
    chapter = config["chapter"]
    if not (Path(root) / "source" / "book" / chapter / f"{chapter}.ipynb").is_file():
        raise SystemExit(f"setup-check: the source notebook of {chapter} is missing from the zip")
    names = [ex.name for ex in exercises_of(chapter)]
    try:
        isolation = _isolation(config)
    except RuntimeError as exc:
        raise SystemExit(f"setup-check: {exc}") from None
    line = f"setup-check: {chapter} ({', '.join(names)}) will be graded with isolation {isolation}"
    if isolation == ENGINE_ONLY:
        line += f" ({ENGINE_ONLY_NOTE})"
    print(line)
    return line


# --------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    """``python -m autograder.gradescope run|setup-check --root ROOT`` (inside the container)."""
    parser = argparse.ArgumentParser(prog="python -m autograder.gradescope")
    parser.add_argument("step", choices=("run", "setup-check"))
    parser.add_argument("--root", default=os.environ.get("AUTOGRADER_ROOT", "/autograder"))
    args = parser.parse_args(argv)
    if args.step == "run":
        run(Path(args.root))
    else:
        setup_check(Path(args.root))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
