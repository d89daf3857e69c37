"""A Gradescope autograder for one chapter: ``python -m autograder gradescope CHAPTER --out autograder.zip``.

Gradescope runs one container per submission from an autograder zip
(https://gradescope-autograders.readthedocs.io/en/latest/specs/): it unpacks the zip into
``/autograder/source``, runs ``setup.sh`` there once when it builds the image, copies
``run_autograder`` to ``/autograder/run_autograder`` and, per submission, runs it with
the student's files in ``/autograder/submission/``; the grade is what it writes to
``/autograder/results/results.json``.

The zip holds:

* ``setup.sh``: system packages (bubblewrap, prlimit/setpriv from util-linux, Python),
  a virtual environment in ``/opt/autograder-venv`` (outside ``source/``, which it closes
  to other users: mode 0700) with ``torch==2.13.0`` (CPU) first, then the pinned
  ``requirements.txt``, then this project (``pip install --no-deps -e .``); then
  ``python -m autograder.gradescope setup-check`` (imports, and which isolation grading
  will use there). ``GRADESCOPE_OFFLINE=1`` skips every step that needs the network
  and ``AUTOGRADER_PYTHON`` names the interpreter to use instead of making a venv (the
  tests lay out ``/autograder`` in a temporary folder that way);
* ``run_autograder``: ``python -m autograder.gradescope run``, which grades the
  submission with the hidden checks exactly as ``grade`` does (the same
  :func:`autograder.grading.grade_submission`, student code isolated: bubblewrap where
  it starts, else :mod:`autograder.isolation`'s container mode) and writes
  ``results.json``: one test per graded part (name ``exercise: part``, its points,
  ``passed``/``failed``, our feedback text as ``output``), ``stdout_visibility``
  ``hidden`` and, by default, the tests ``after_due_date`` (``--visibility``): their
  messages come from hidden cases (redacted as on the feedback page, but still the
  answer to a probe), the total is shown at once;
* ``autograder/``, ``solutions/``, ``pyproject.toml``, ``requirements.txt`` and
  ``book/<chapter>/<chapter>.ipynb`` (the source notebook: solutions and hidden tests,
  never in a student's reach: the sandbox sees only a stripped library), and
  ``gradescope.json`` (chapter, a fresh random base seed of the hidden cases, the
  limits, the visibility).

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
from pathlib import Path

from .book import BOOK
from .text import safe_text

__all__ = ["VISIBILITIES", "build_zip", "results_json", "run", "main", "SCHEMA_PATH"]

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_PATH = Path(__file__).resolve().parent / "gradescope_results.schema.json"
VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")
CONFIG = "gradescope.json"
TORCH = "torch==2.13.0"
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
# Gradescope's own cap on results.json is far larger; a test's output longer than this is cut.
MAX_OUTPUT = 20_000

SETUP_SH = r"""#!/usr/bin/env bash
# Gradescope runs this once, in /autograder/source, when it builds the autograder image.
# GRADESCOPE_OFFLINE=1 skips the steps that need the network; AUTOGRADER_PYTHON=/path/python
# uses that interpreter (its packages already installed) instead of a fresh venv.
set -euo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
SOURCE="$ROOT/source"
cd "$SOURCE"
online() { [ "${GRADESCOPE_OFFLINE:-0}" != 1 ]; }

if online && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv python3-pip bubblewrap util-linux
else
    echo "setup.sh: system packages skipped (offline or not root)"
fi

if [ -n "${AUTOGRADER_PYTHON:-}" ]; then
    PY="$AUTOGRADER_PYTHON"
    echo "setup.sh: using $PY and the packages it has"
else
    # Outside source/: source/ (the reference, the hidden tests) is closed to the student's user below.
    VENV="${AUTOGRADER_VENV:-/opt/autograder-venv}"
    python3 -m venv "$VENV"
    PY="$VENV/bin/python"
fi
if online && [ -z "${AUTOGRADER_PYTHON:-}" ]; then
    "$PY" -m pip install --quiet --upgrade pip
    # torch first, on its own, the CPU build: nothing below then pulls CUDA wheels.
    "$PY" -m pip install --quiet "@TORCH@" --index-url "@TORCH_INDEX@"
    "$PY" -m pip install --quiet -r requirements.txt
    "$PY" -m pip install --quiet --no-deps --no-build-isolation -e .
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
    """The files of ``autograder`` and ``solutions`` that grading needs (no caches)."""
    files = []
    for package in ("autograder", "solutions"):
        for path in sorted((root / package).rglob("*")):
            rel = path.relative_to(root)
            if path.is_file() and "__pycache__" not in rel.parts and "deploy" not in rel.parts \
                    and path.suffix in (".py", ".json", ".txt", ".typed", ".npz", ".cfg", ".toml"):
                files.append(path)
    return files


def _entry(name: str, mode: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))  # fixed: the same inputs give the same zip
    info.external_attr = (0o100000 | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def build_zip(chapter: str, out: Path, *, book: Path = BOOK, seed: int | None = None, timeout: float = 120.0,
              visibility: str = "after_due_date", root: Path = ROOT) -> Path:
    """Write the Gradescope autograder zip of ``chapter``.

    Args:
        chapter: the chapter id (``04_self_attention``).
        out: the zip to write.
        book: the folder of the source notebooks.
        seed: the base seed of the hidden cases (default: a fresh random one; each
            submission's own seed mixes in the student and the notebook's SHA-256).
        timeout: seconds of one sandbox run of a submission.
        visibility: Gradescope visibility of the per-part tests (one of :data:`VISIBILITIES`).
        root: the repository whose ``autograder``, ``solutions``, ``requirements.txt``
            and ``pyproject.toml`` go in.

    Returns:
        ``out``. Raises ``ValueError`` for an unknown chapter or visibility.
    """
    from .checks import exercises_of
    from .book import source_notebook

    if visibility not in VISIBILITIES:
        raise ValueError(f"visibility {visibility!r}: expected one of {', '.join(VISIBILITIES)}")
    source = source_notebook(chapter, Path(book))
    if not exercises_of(chapter):
        raise ValueError(f"chapter {chapter!r} has no registered exercises to grade")
    config = {"chapter": chapter, "seed": secrets.randbits(31) if seed is None else int(seed),
              "timeout": float(timeout), "visibility": visibility}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with zipfile.ZipFile(tmp, "w") as zf:
        script = SETUP_SH.replace("@TORCH@", TORCH).replace("@TORCH_INDEX@", TORCH_INDEX)
        zf.writestr(_entry("setup.sh", 0o755), script)
        zf.writestr(_entry("run_autograder", 0o755), RUN_AUTOGRADER)
        zf.writestr(_entry(CONFIG, 0o600), json.dumps(config, indent=1, sort_keys=True) + "\n")
        for name in ("requirements.txt", "pyproject.toml"):
            zf.writestr(_entry(name, 0o644), (root / name).read_bytes())
        zf.writestr(_entry(f"book/{chapter}/{chapter}.ipynb", 0o600), source.read_bytes())
        for path in _package_files(root):
            zf.writestr(_entry(path.relative_to(root).as_posix(), 0o644), path.read_bytes())
    os.replace(tmp, out)
    return out


# --------------------------------------------------------------------------- results.json


def _part_output(row: dict, part: dict, first: bool) -> str:
    from .text import score_text

    mark = "✓" if part["score"] >= part["points"] else "✗"
    lines = [f"{mark} {part['name']} ({score_text(part['score'])}/{score_text(part['points'])})"]
    if part.get("message"):
        lines.append(part["message"])
    if first:
        lines += [f"note: {n}" for n in row.get("notes") or []]
    return "\n".join(lines)[:MAX_OUTPUT]


def results_json(rows: list[dict], *, chapter: str, visibility: str = "after_due_date", isolation: str = "",
                 execution_time: float | None = None, notice: str = "") -> dict:
    """Gradescope's ``results.json`` for the score rows of one submission.

    Args:
        rows: :func:`autograder.batch.as_dicts` of the graded cells.
        chapter: the chapter id (in the overall output).
        visibility: of each test (the parts' messages come from the hidden cases).
        isolation: how the student's code was kept apart (``extra_data``, for the instructor).
        execution_time: seconds the grading took.
        notice: a line to put first in the overall output (e.g. no notebook found).

    Returns:
        The JSON object: ``score`` (the sum), ``tests`` (one per graded part, or one per
        exercise that has no parts: missing, unreadable, timed out, flagged),
        ``output`` (the total, visible at once), ``stdout_visibility`` ``hidden``.
    """
    from .text import score_text

    tests = []
    for number, row in enumerate(rows, start=1):
        parts = row.get("parts") or []
        fits = parts and abs(sum(p["points"] for p in parts) - row["max_score"]) < 1e-9 \
            and abs(sum(p["score"] for p in parts) - row["score"]) < 1e-9
        if fits:
            for i, part in enumerate(parts, start=1):
                tests.append({
                    "name": f"{row['exercise']}: {part['name']}", "number": f"{number}.{i}",
                    "score": float(part["score"]), "max_score": float(part["points"]),
                    "status": "passed" if part["score"] >= part["points"] else "failed",
                    "output": _part_output(row, part, i == 1), "output_format": "text", "name_format": "text",
                    "tags": [row["exercise"]], "visibility": visibility,
                })
        else:
            text = row.get("reason") or ("passed" if row["status"] == "passed" else row["status"])
            notes = [f"note: {n}" for n in row.get("notes") or []]
            tests.append({
                "name": row["exercise"], "number": str(number), "score": float(row["score"]),
                "max_score": float(row["max_score"]),
                "status": "passed" if row["score"] >= row["max_score"] > 0 else "failed",
                "output": "\n".join([f"{row['status']}: {text}", *notes])[:MAX_OUTPUT],
                "output_format": "text", "name_format": "text", "tags": [row["exercise"]],
                "visibility": visibility,
            })
    score = sum(r["score"] for r in rows)
    max_score = sum(r["max_score"] for r in rows)
    passed = sum(r["status"] == "passed" for r in rows)
    summary = (f"{chapter}: {score_text(score)}/{score_text(max_score)} points, {passed} of {len(rows)} exercises "
               "pass every check (the hidden checks included).")
    if visibility != "visible":
        summary += (" The points per part and their messages are shown "
                    + {"after_due_date": "after the due date", "after_published": "once grades are published",
                       "hidden": "to your instructor"}[visibility]
                    + "; meanwhile the visible checks in your notebook tell you what they test.")
    result = {
        "score": float(score),
        "output": "\n".join(x for x in (notice, summary) if x),
        "output_format": "text",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
        "extra_data": {"chapter": chapter, "isolation": isolation, "max_score": float(max_score)},
    }
    if execution_time is not None:
        result["execution_time"] = int(round(execution_time))
    return result


def validate_results(data: dict) -> None:
    """Validate ``data`` against :data:`SCHEMA_PATH` (raises ``jsonschema.ValidationError``)."""
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    jsonschema.validate(data, schema, cls=jsonschema.Draft7Validator)


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


def run(root: Path) -> dict:
    """Grade ``root/submission`` and write ``root/results/results.json``; return it.

    Never raises for the submission's sake: a grader failure still writes a
    ``results.json`` (score 0, the failure named) and prints the traceback to stdout,
    which only the instructor sees.
    """
    from .batch import as_dicts, failed_rows
    from .journal import submission_seed
    from .submissions import file_sha256
    from .grading import grade_submission
    from .isolation import choose_isolation

    root = Path(root)
    source_dir = root / "source"
    config = json.loads((source_dir / CONFIG).read_text(encoding="utf-8"))
    chapter = config["chapter"]
    source = source_dir / "book" / chapter / f"{chapter}.ipynb"
    start = time.monotonic()
    path, notice = _find_notebook(root / "submission", chapter)
    isolation = ""
    try:
        isolation = choose_isolation()
        print(f"isolation: {isolation}")
        digest = file_sha256(path) if path is not None else None
        seed = submission_seed(int(config["seed"]), _student_id(root), chapter, str(digest))
        rows = as_dicts(grade_submission(source, path, chapter=chapter, timeout=float(config.get("timeout", 120)),
                                          hidden=True, seed=seed, sandbox=True))
    except Exception as exc:  # noqa: BLE001 - the student still gets a results.json
        traceback.print_exc(file=sys.stdout)
        rows = failed_rows(source, f"the grader failed: {type(exc).__name__}; your instructor can see why")
        for r in rows:
            r.setdefault("parts", [])
            r.setdefault("notes", [])
    data = results_json(rows, chapter=chapter, visibility=config.get("visibility", "after_due_date"),
                        isolation=isolation, execution_time=time.monotonic() - start, notice=notice)
    out = root / "results" / "results.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name("results.json.tmp")
    tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8", errors="backslashreplace")
    os.replace(tmp, out)
    for row in rows:  # the instructor's view (stdout is hidden from students)
        print(f"{row['exercise']}: {row['score']:g}/{row['max_score']:g} {row['status']} {row['reason']}")
    return data


def setup_check(root: Path) -> str:
    """What ``setup.sh`` ends with: the configuration reads, the grading imports work,
    and which isolation grading will use here (printed)."""
    import nbformat  # noqa: F401
    import numpy  # noqa: F401
    import torch  # noqa: F401

    import solutions  # noqa: F401

    from .checks import exercises_of
    from .isolation import choose_isolation

    config = json.loads((Path(root) / "source" / CONFIG).read_text(encoding="utf-8"))
    chapter = config["chapter"]
    if not (Path(root) / "source" / "book" / chapter / f"{chapter}.ipynb").is_file():
        raise SystemExit(f"setup-check: the source notebook of {chapter} is missing from the zip")
    names = [ex.name for ex in exercises_of(chapter)]
    isolation = choose_isolation()
    line = f"setup-check: {chapter} ({', '.join(names)}) will be graded with isolation {isolation}"
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
