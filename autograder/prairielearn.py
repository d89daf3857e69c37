"""A PrairieLearn external grader for one chapter.

PrairieLearn grades an externally graded question in a Docker container
(https://prairielearn.readthedocs.io/en/latest/externalGrading/): it mounts ``/grade`` with
the student's files in ``/grade/student/``, the question's ``tests/`` folder in
``/grade/tests/`` (never shown to students), runs the question's entry point, and reads
``/grade/results/results.json``.

``python -m autograder prairielearn CHAPTER --out QUESTION_DIR`` writes a question folder:
``info.json`` (``externalGradingOptions``: the image, the entry point
``python3 -m autograder.prairielearn run``, the timeout), ``question.html`` (a file upload
of ``<chapter>.ipynb``) and ``tests/`` with the source notebook and ``autograder.json``
(chapter, base seed, limits). The image is one with this project installed (the
Gradescope zip's ``setup.sh`` lists what it needs: bubblewrap, Python, the pins).

``run`` grades the upload with :func:`autograder.gradescope.grade_upload` — the same core
as the Gradescope adapter and ``grade`` (hidden checks, student code isolated) — and writes
``results.json``: ``gradable`` (false, with ``format_errors``, when no notebook was
uploaded: PrairieLearn then counts no attempt), ``score`` = points / max points (0 to 1),
``message`` (the total) and one test per graded part (``name`` ``exercise: part``,
``points``, ``max_points``, the part's message). Its paths can be moved for tests:
``--root`` (default ``/grade``, or ``PRAIRIELEARN_ROOT``), ``--student``, ``--results``.

A notebook of another chapter is graded, not refused: it earns 0, as in ``grade`` and on
Gradescope, and ``message`` opens with :func:`autograder.text.wrong_chapter_notice`.
PrairieLearn's documented results format allows it: beside ``score`` and ``gradable`` a
result may carry any field, and ``<pl-external-grader-results>`` shows a gradable
result's top-level ``message`` above its tests. ``gradable: false`` is kept for what
cannot be graded at all (no notebook uploaded), since PrairieLearn then awards and
costs nothing, and a notebook of the wrong chapter is an attempt graded like any other.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import time
import uuid
from pathlib import Path

from . import gradescope
from .book import BOOK, source_notebook
from .checks import exercises_of
from .gradescope import grade_upload, load_grader_config, total_line, write_results
from .scores import ExerciseScore
from .text import wrong_chapter_notice

__all__ = ["SCHEMA_PATH", "CONFIG", "results_json", "run", "build_question", "validate_results", "main"]

SCHEMA_PATH = Path(__file__).resolve().parent / "prairielearn_results.schema.json"
CONFIG = "autograder.json"
MAX_TEXT = 20_000
DEFAULT_IMAGE = "transformer-book/autograder:latest"


def results_json(rows: list[ExerciseScore], *, chapter: str, notice: str = "", wrong_chapter: str | None = None,
                 isolation: str = "", execution_time: float | None = None) -> dict:
    """PrairieLearn's ``results.json`` for the score rows of one submission.

    Args:
        rows: the :class:`~autograder.scores.ExerciseScore` of each graded cell.
        chapter: the chapter id.
        notice: why there is nothing to grade (no notebook, several): the result is not gradable.
        wrong_chapter: the chapter the notebook really holds when it is another one
            (:attr:`autograder.scores.NotebookScores.wrong_chapter`): the result is gradable
            (0 points) and its ``message`` says so first (module docstring).
        isolation, execution_time: for the output (the instructor's view).

    Returns:
        The ``results.json`` object (:data:`SCHEMA_PATH` holds it).
    """
    if notice:  # nothing was graded: not an attempt
        return {"gradable": False, "format_errors": [notice], "message": notice}
    tests = []
    for row in rows:
        if row.parts_add_up:
            for i, part in enumerate(row.parts):
                notes = "\n".join(f"note: {n}" for n in row.notes) if i == 0 else ""
                tests.append({"name": f"{row.exercise}: {part.name}", "description": row.exercise,
                              "points": float(part.score), "max_points": float(part.points),
                              "message": (part.message or ("passed" if part.score >= part.points
                                                                  else "failed"))[:MAX_TEXT],
                              "output": notes[:MAX_TEXT]})
        else:
            tests.append({"name": row.exercise, "description": row.exercise, "points": float(row.score),
                          "max_points": float(row.max_score),
                          "message": (f"{row.status.value}: {row.reason}" if row.reason
                                      else row.status.value)[:MAX_TEXT],
                          "output": "\n".join(f"note: {n}" for n in row.notes)[:MAX_TEXT]})
    score = sum(r.score for r in rows)
    max_score = sum(r.max_score for r in rows)
    message = total_line(rows, chapter)
    if wrong_chapter:  # said first, in the words of the feedback page
        message = f"{wrong_chapter_notice(wrong_chapter, chapter)}\n{message}"
    output = "\n".join(x for x in (f"isolation: {isolation}" if isolation else "",
                                   f"graded in {execution_time:.0f} s" if execution_time is not None else "") if x)
    return {"gradable": True, "score": min(1.0, max(0.0, score / max_score)) if max_score else 0.0,
            "message": message, "output": output, "tests": tests}


def validate_results(data: dict) -> None:
    """Validate ``data`` against :data:`SCHEMA_PATH` (raises ``jsonschema.ValidationError``)."""
    gradescope.validate_results(data, SCHEMA_PATH)


def run(root: Path, *, student: Path | None = None, results: Path | None = None) -> dict:
    """Grade ``root/student`` and write ``root/results/results.json``; return it.

    Args:
        root: PrairieLearn's ``/grade``.
        student: the uploaded files (default ``root/student``).
        results: the file to write (default ``root/results/results.json``).

    Never raises for the submission's sake: a grader failure still writes a gradable
    result with every exercise at 0 and the failure named.
    """
    root = Path(root)
    grader = load_grader_config(root / "tests", CONFIG)
    start = time.monotonic()
    found, notice, isolation = grade_upload(grader.source, Path(student) if student else root / "student",
                                            grader.chapter, grader.config, student="prairielearn")
    data = results_json(found.scores, chapter=grader.chapter, notice=notice, wrong_chapter=found.wrong_chapter,
                        isolation=isolation, execution_time=time.monotonic() - start)
    write_results(Path(results) if results else root / "results" / "results.json", data, found.scores)
    return data


QUESTION_HTML = """<pl-question-panel>
  <p>Upload your notebook <code>{chapter}.ipynb</code>. It is graded with the hidden checks of the
  chapter; each graded part is listed with its points.</p>
</pl-question-panel>
<pl-file-upload file-names="{chapter}.ipynb"></pl-file-upload>
<pl-submission-panel>
  <pl-external-grader-results></pl-external-grader-results>
  <pl-file-preview></pl-file-preview>
</pl-submission-panel>
"""


def build_question(chapter: str, out: Path, *, book: Path = BOOK, image: str = DEFAULT_IMAGE,
                   timeout: float = 120.0, seed: int | None = None) -> Path:
    """Write a PrairieLearn question folder for ``chapter`` (see the module); returns ``out``.

    Raises:
        ValueError: an unknown chapter or one without registered exercises.
    """
    source = source_notebook(chapter, Path(book))
    if not exercises_of(chapter):
        raise ValueError(f"chapter {chapter!r} has no registered exercises to grade")
    out = Path(out)
    (out / "tests" / "book" / chapter).mkdir(parents=True, exist_ok=True)
    (out / "tests" / "book" / chapter / f"{chapter}.ipynb").write_bytes(source.read_bytes())
    config = {"chapter": chapter, "seed": secrets.randbits(31) if seed is None else int(seed),
              "timeout": float(timeout)}
    (out / "tests" / CONFIG).write_text(json.dumps(config, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    info = {"uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"transformer-book/{chapter}")),
            "title": f"{chapter} (notebook)", "topic": "Transformers", "type": "v3", "singleVariant": True,
            "gradingMethod": "External",
            "externalGradingOptions": {"enabled": True, "image": image,
                                       "entrypoint": "python3 -m autograder.prairielearn run",
                                       "timeout": int(timeout * 4) + 60}}
    (out / "info.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    (out / "question.html").write_text(QUESTION_HTML.format(chapter=chapter), encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m autograder.prairielearn run [--root /grade]`` (inside the grading container)."""
    parser = argparse.ArgumentParser(prog="python -m autograder.prairielearn")
    parser.add_argument("step", choices=("run",))
    parser.add_argument("--root", default=os.environ.get("PRAIRIELEARN_ROOT", "/grade"))
    parser.add_argument("--student", help="the uploaded files (default ROOT/student)")
    parser.add_argument("--results", help="the results.json to write (default ROOT/results/results.json)")
    args = parser.parse_args(argv)
    run(Path(args.root), student=Path(args.student) if args.student else None,
        results=Path(args.results) if args.results else None)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
