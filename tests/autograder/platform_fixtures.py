"""What the Gradescope and PrairieLearn adapters' tests share: the chapter they grade, the
wrong answer they submit, how their package is built and how a ``results.json`` is checked.

Both adapters grade through one core (:func:`autograder.gradescope.grade_upload`, loaded by
:func:`autograder.gradescope.load_grader_config`); their tests build the package with the
command an instructor runs, from a book of one chapter (:func:`autograder.bench.make_book`).
"""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from autograder.bench import make_book
from autograder.cli import main

CHAPTER = "04_self_attention"
STUB = '''def self_attention(x, W_q, W_k, W_v):
    raise NotImplementedError()
'''


def validate(schema_path: Path, data: dict) -> None:
    """Check ``data`` against the platform's schema (itself checked as a Draft 7 schema)."""
    schema = json.loads(Path(schema_path).read_text(encoding="utf-8"))
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.validate(data, schema, cls=jsonschema.Draft7Validator)


def build(command: str, root: Path, out_name: str, seed: int = 5) -> tuple[Path, Path]:
    """``python -m autograder COMMAND CHAPTER --out OUT --book BOOK --seed SEED`` on a one-chapter
    book in ``root``; returns ``(out, book)``."""
    book = make_book(root, [CHAPTER])
    out = root / out_name
    assert main([command, CHAPTER, "--out", str(out), "--book", str(book), "--seed", str(seed)]) == 0
    return out, book


def exercise_points(source) -> dict[str, float]:
    """Each graded exercise's points in a source notebook (``test_<name>`` cells)."""
    return {c.metadata.nbgrader["grade_id"][len("test_"):]: c.metadata.nbgrader["points"] for c in source.cells
            if c.metadata.get("nbgrader", {}).get("grade")}
