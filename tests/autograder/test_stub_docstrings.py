"""The stub a student gets states the contract of the prompt, no more (issue 38, must-exist 5).

A released exercise cell keeps the reference's ``def``/``class`` line and docstrings and
replaces each body with ``raise NotImplementedError()`` (nbgrader's ``ClearSolutions``,
run by :func:`autograder.release.student_version`). Those docstrings are what a student
reads as the specification, so, read from the released notebook of every chapter:

* a dtype is stated as the contract (``tests/data/EXERCISES.md``) states it: the
  dtypes it fixes (boolean masks, ``LongTensor`` ids, floats) are named, and a float
  dtype it leaves free (float64 or float32 in, a wider float out) is never named alone:
  its paragraph says what else is accepted ("either is correct", "accepted too");
* what the reference does beyond the contract (a fast path, an initialisation, how
  dropout or the buffer is kept) is marked as not graded, so no valid answer looks wrong;
* nothing the exercise asks the student to find is given away (the rotation block of 3.3,
  the fill value of 6.4): the listed patterns are absent.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest

from autograder.checks import get_exercise, load_all
from autograder.release import student_version

REPO = Path(__file__).resolve().parents[2]
EXERCISES_MD = REPO / "tests" / "data" / "EXERCISES.md"
CHAPTERS = sorted({get_exercise(n).chapter for n in load_all()})

# A float dtype named in a docstring.
FLOAT_DTYPE = re.compile(r"\b(float16|float32|float64|double|half-precision|bfloat16)\b")
# Words by which a paragraph says that more than the one named dtype or design is accepted.
FREEDOM = ("either is correct", "accepted too", "not graded", "every float dtype", "any float dtype")
# The dtypes a contract line fixes, and how a docstring names them.
FIXED = {r"\bbool\b": r"\bbool", r"LongTensor": r"LongTensor", r"\bfloats\b": r"\bfloat"}

# What the reference does beyond the contract: each word's paragraph must say it is not
# graded (or that the alternatives are accepted).
EXTRAS = {
    "MultiHeadAttention": ["need_weights"],
    "PositionalEncoding": ["persistent=False"],
    "PositionwiseFeedForward": ["dropout: ``nn.Dropout``"],
    "ResidualSublayer": ["dropout: ``nn.Dropout``"],
    "EncoderLayer": ["dropout1"],
    "DecoderLayer": ["dropout1"],
    "Transformer": ["Xavier"],
}

# What an exercise asks the student to find, which its stub must not give away.
GIVEAWAYS = {
    "relative_position_matrix": [r"\[\[", r"\bcos\b", r"\bsin\b", r"\bblock"],  # the 2x2 rotation block
    "masked_softmax": [r"finfo", r"-1e\d", r"\.min\b"],  # the fill value (§6.6's question)
}


def contract_lines() -> dict[str, str]:
    """Exercise name -> its line of the contract (the bullet with its continuation lines)."""
    lines, current = {}, None
    for line in EXERCISES_MD.read_text(encoding="utf-8").splitlines():
        item = re.match(r"^- `(\w+)\(", line)
        if item:
            current = item.group(1)
            lines[current] = line
        elif current and line.startswith("  ") and line.strip():
            lines[current] += " " + line.strip()
        else:
            current = None
    return lines


@pytest.fixture(scope="module")
def stubs() -> dict[str, str]:
    """Exercise name -> the docstrings of its released cell (the class's and its methods'),
    blank-line separated paragraphs, read from each chapter's released notebook."""
    found = {}
    for chapter in CHAPTERS:
        source = nbformat.read(str(REPO / "book" / chapter / f"{chapter}.ipynb"), as_version=4)
        released = student_version(source, chapter)
        for cell in released.cells:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if cell.cell_type != "code" or not meta.get("solution") or meta.get("grade_id") not in load_all():
                continue
            tree = ast.parse(cell.source)
            node = tree.body[0]
            assert "raise NotImplementedError()" in cell.source and "BEGIN SOLUTION" not in cell.source, \
                f"{chapter}: the released cell of {meta['grade_id']} is not a stub"
            docs = [ast.get_docstring(n) or "" for n in ast.walk(node)
                    if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
            found[meta["grade_id"]] = "\n\n".join(d for d in docs if d)
    return found


def paragraphs(text: str) -> list[str]:
    return [" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if p.strip()]


def lone_float_dtypes(doc: str, contract_line: str = "") -> list[tuple[list[str], str]]:
    """The paragraphs of ``doc`` that name a float dtype which ``contract_line`` does not
    name, without saying what else is accepted: ``(dtypes, paragraph)``."""
    fixed_by_contract = set(FLOAT_DTYPE.findall(contract_line))
    lone = []
    for para in paragraphs(doc):
        named = set(FLOAT_DTYPE.findall(para)) - fixed_by_contract
        if named and not any(word in para for word in FREEDOM):
            lone.append((sorted(named), para[:160]))
    return lone


def test_every_exercise_has_a_released_stub_with_a_docstring(stubs):
    assert set(stubs) == set(load_all()), sorted(set(load_all()) ^ set(stubs))
    assert all(doc.strip() for doc in stubs.values()), [n for n, d in stubs.items() if not d.strip()]


def test_a_float_dtype_the_contract_leaves_free_is_never_named_alone(stubs):
    """A paragraph naming one float dtype says what else is accepted, unless the contract
    line itself names that dtype. (3.1's "float64" while the prompt allows float32.)"""
    contract = contract_lines()
    alone = [(name, lone) for name, doc in sorted(stubs.items())
             if (lone := lone_float_dtypes(doc, contract.get(name, "")))]
    assert not alone, "\n".join(map(str, alone))


def test_the_dtypes_the_contract_fixes_are_stated(stubs):
    """Boolean masks, LongTensor ids, float one-hot vectors: the stub says so."""
    contract = contract_lines()
    missing = [(name, word) for name, line in sorted(contract.items()) if name in stubs
               for word, said in FIXED.items() if re.search(word, line) and not re.search(said, stubs[name])]
    assert not missing, missing


def test_what_the_reference_adds_to_the_contract_is_marked_not_graded(stubs):
    unmarked = [(name, word) for name, words in EXTRAS.items() for word in words
                for para in paragraphs(stubs[name]) if word in para and not any(w in para for w in FREEDOM)]
    missing = [(name, word) for name, words in EXTRAS.items() for word in words
               if not any(word in para for para in paragraphs(stubs[name]))]
    assert not unmarked and not missing, (unmarked, missing)


@pytest.mark.parametrize("name", sorted(GIVEAWAYS))
def test_a_stub_does_not_give_away_what_the_exercise_asks_for(stubs, name):
    found = [p for p in GIVEAWAYS[name] if re.search(p, stubs[name])]
    assert not found, f"the stub of {name} shows {found}:\n{stubs[name]}"


@pytest.mark.parametrize("doc, contract_line, fails", [
    ("Shape:\n    output: (n, d), float64.", "", True),
    ("Shape:\n    output: (n, d), floats (float64 or float32: either is correct).", "", False),
    ("Returns:\n    a float array.", "", False),
    ("Returns:\n    a float64 array.", "returns a float64 array", False),
])
def test_the_dtype_rule_rejects_a_lone_dtype_and_accepts_a_stated_freedom(doc, contract_line, fails):
    """The rule above on made-up stubs: a lone dtype fails it, unless the contract names it."""
    assert bool(lone_float_dtypes(doc, contract_line)) is fails
