"""Broken submissions get a clear reason per cell, and never stop grading.

Problems found while reading the notebook (unreadable file, deleted, duplicated
or altered cells) are settled before any sandbox starts, so those tests are fast;
the ones about code (syntax error, an exception at definition time, the stub)
share one sandbox run on a chapter-6 notebook whose exercises are independent.
"""
from __future__ import annotations

import copy
import json

import pytest

import fixtures
from autograder.grading import RunSettings, grade_submission
from autograder import untrusted
from autograder.untrusted import MAX_NOTEBOOK_BYTES

CH04 = ["softmax", "scaled_dot_product_attention", "self_attention"]
CH04_POINTS = [1.0, 2.0, 3.0]
CH06 = ["masked_softmax", "padding_mask", "causal_mask", "decoder_mask"]


def _grade(source, submission, **kw):
    kw.setdefault("seed", 7)
    kw.setdefault("settings", RunSettings(timeout=60.0))
    return grade_submission(source, submission, **kw).scores


def _assert_all(scores, status, fragment):
    assert [s.exercise for s in scores] == CH04
    assert [s.max_score for s in scores] == CH04_POINTS
    for s in scores:
        assert s.score == 0 and s.status == status, s
        assert fragment in s.reason, s
        assert "\n" not in s.reason


# --------------------------------------------------------------------------- unreadable files


def test_no_submission(ch04_source):
    _assert_all(_grade(ch04_source, None), "missing", "no submission")


def test_missing_file(ch04_source, tmp_path):
    _assert_all(_grade(ch04_source, tmp_path / "nowhere.ipynb"), "invalid", "cannot read the file")


def test_empty_file(ch04_source, tmp_path):
    path = fixtures.write_notebook(b"", tmp_path / "empty.ipynb")
    _assert_all(_grade(ch04_source, path), "invalid", "the file is empty")


def test_whitespace_only_file(ch04_source, tmp_path):
    path = fixtures.write_notebook(b"  \n\n ", tmp_path / "blank.ipynb")
    _assert_all(_grade(ch04_source, path), "invalid", "the file is empty")


def test_invalid_json(ch04_source, tmp_path):
    path = fixtures.write_notebook('{"cells": [', tmp_path / "broken.ipynb")
    _assert_all(_grade(ch04_source, path), "invalid", "not valid JSON")


def test_not_utf8(ch04_source, tmp_path):
    path = fixtures.write_notebook(b'{"cells": "\xff\xfe"}', tmp_path / "latin.ipynb")
    _assert_all(_grade(ch04_source, path), "invalid", "not UTF-8")


@pytest.mark.parametrize("content", ['{"name": "not a notebook"}', "[1, 2, 3]", '"just a string"',
                                     '{"cells": {"a": 1}}', '{"cells": [1, 2]}'])
def test_json_that_is_not_a_notebook(ch04_source, tmp_path, content):
    path = fixtures.write_notebook(content, tmp_path / "other.ipynb")
    scores = _grade(ch04_source, path)
    assert all(s.status == "invalid" and s.score == 0 for s in scores)
    assert all("notebook" in s.reason for s in scores)


def test_huge_file_is_refused_unread(ch04_source, tmp_path):
    path = tmp_path / "huge.ipynb"
    with open(path, "wb") as fh:  # sparse: no need to write the bytes
        fh.truncate(MAX_NOTEBOOK_BYTES + 1)
    _assert_all(_grade(ch04_source, path), "invalid", "MB limit")


def test_deeply_nested_json(ch04_source, tmp_path):
    path = fixtures.write_notebook("[" * 100_000 + "]" * 100_000, tmp_path / "deep.ipynb")
    scores = _grade(ch04_source, path)
    assert all(s.status == "invalid" for s in scores)


# --------------------------------------------------------------------------- altered cells


def test_deleted_duplicated_and_altered_solution_cells(ch04_notebook, ch04_source, tmp_path):
    """Settled from the notebook alone: no sandbox is needed for any of them."""
    nb = copy.deepcopy(ch04_notebook)
    nb.cells.remove(fixtures.solution_cell(nb, "softmax"))  # deleted
    sdpa = fixtures.solution_cell(nb, "scaled_dot_product_attention")
    twin = copy.deepcopy(sdpa)
    twin.id = "a-copy-of-the-cell"
    nb.cells.insert(nb.cells.index(sdpa), twin)  # duplicated
    sa = fixtures.solution_cell(nb, "self_attention")
    sa.metadata["nbgrader"]["grade"] = True  # turned into an autograded answer worth 50
    sa.metadata["nbgrader"]["points"] = 50
    scores = _grade(ch04_source, fixtures.write_notebook(nb, tmp_path / "sub.ipynb"))
    by = {s.exercise: s for s in scores}
    assert by["softmax"].status == "missing" and "was it deleted" in by["softmax"].reason
    assert by["scaled_dot_product_attention"].status == "invalid"
    assert "duplicated" in by["scaled_dot_product_attention"].reason
    assert by["self_attention"].status == "invalid" and "metadata" in by["self_attention"].reason
    assert by["self_attention"].max_score == 3.0
    assert all(s.score == 0 for s in scores)


def test_solution_cell_turned_into_markdown(ch04_notebook, ch04_source, tmp_path):
    nb = copy.deepcopy(ch04_notebook)
    for name in CH04:
        fixtures.solution_cell(nb, name).cell_type = "markdown"
        fixtures.solution_cell(nb, name).pop("outputs", None)
        fixtures.solution_cell(nb, name).pop("execution_count", None)
    path = tmp_path / "sub.ipynb"
    path.write_text(json.dumps(nb))
    _assert_all(_grade(ch04_source, path), "invalid", "markdown")


def test_solution_flag_removed(ch04_notebook, ch04_source, tmp_path):
    nb = copy.deepcopy(ch04_notebook)
    for name in CH04:
        fixtures.solution_cell(nb, name).metadata["nbgrader"]["solution"] = False
    _assert_all(_grade(ch04_source, fixtures.write_notebook(nb, tmp_path / "sub.ipynb")), "invalid", "solution")


@pytest.mark.slow
def test_changed_points_rewritten_tests_and_setup_are_ignored(ch04_notebook, ch04_source, tmp_path, needs_sandbox):
    """Only the solution cells come from the submission: test cells that claim 100
    points and check nothing, a setup cell that kills the kernel and rewritten
    prose change nothing."""
    nb = copy.deepcopy(ch04_notebook)
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade"):
            meta["points"] = 100
            cell.source = "pass  # no checks here"
        elif meta.get("grade_id") == "setup":
            cell.source = "import os\nos._exit(1)"
        elif cell.cell_type == "markdown":
            cell.source = "All exercises are worth 100 points."
    scores = _grade(ch04_source, fixtures.write_notebook(nb, tmp_path / "sub.ipynb"))
    assert [(s.status, s.score, s.max_score) for s in scores] == [("passed", p, p) for p in CH04_POINTS]


# --------------------------------------------------------------------------- code that does not run


@pytest.fixture(scope="module")
def ch06_source(tmp_path_factory):
    root = tmp_path_factory.mktemp("ch06")
    nb = fixtures.source_notebook("06_masking", CH06)
    return nb, fixtures.write_notebook(nb, root / "06_masking.ipynb")


@pytest.mark.slow
def test_syntax_error_definition_error_stub_and_missing_definition(ch06_source, tmp_path, needs_sandbox):
    nb, source = ch06_source
    blank = fixtures.blank_submission(nb)
    sub = fixtures.submission_with(
        nb,
        masked_softmax="def masked_softmax(scores, mask)\n    return scores",  # missing colon
        padding_mask="import torch\nRATIO = 1 / 0\n\ndef padding_mask(ids, pad_id=0):\n    return ids != pad_id",
        causal_mask=fixtures.solution_cell(blank, "causal_mask").source,  # the released stub
        decoder_mask="def decoder_mask_v2(tgt_ids, pad_id=0):\n    return None",
    )
    scores = {s.exercise: s for s in _grade(source, fixtures.write_notebook(sub, tmp_path / "sub.ipynb"))}
    assert scores["masked_softmax"].status == "error" and "SyntaxError" in scores["masked_softmax"].reason
    assert scores["padding_mask"].status == "error" and "ZeroDivisionError" in scores["padding_mask"].reason
    assert scores["causal_mask"].status == "failed"
    assert scores["causal_mask"].reason.startswith("not implemented yet")
    assert scores["decoder_mask"].status == "error" and "does not define 'decoder_mask'" in scores["decoder_mask"].reason
    assert all(s.score == 0 and "\n" not in s.reason for s in scores.values())


@pytest.mark.slow
def test_one_broken_cell_leaves_the_others_graded(ch06_source, tmp_path, needs_sandbox):
    nb, source = ch06_source
    sub = fixtures.submission_with(nb, padding_mask="def padding_mask(ids, pad_id=0):\n    return ids !=")
    scores = {s.exercise: s for s in _grade(source, fixtures.write_notebook(sub, tmp_path / "sub.ipynb"))}
    assert scores["padding_mask"].status == "error"
    # the two independent ones pass; decoder_mask calls the broken padding_mask, so it
    # is graded with the reference padding_mask in its place (one mistake, charged once)
    assert scores["masked_softmax"].status == "passed" and scores["causal_mask"].status == "passed"
    assert scores["decoder_mask"].status == "passed" and "fix `padding_mask` first" in scores["decoder_mask"].notes[0]


def test_a_parse_disturbed_by_another_threads_parse_is_tried_again(monkeypatch):
    """CPython 3.11's AST constructor shares its recursion depth between threads; a parse
    that another thread's disturbed ("recursion depth mismatch", seen in a full run) is tried
    again under the lock, at most three times; any other SystemError goes up at once."""
    real, calls = untrusted.ast.parse, []

    def flaky(errors):
        def parse(source, filename="<unknown>"):
            calls.append(filename)
            if errors:
                raise SystemError(errors.pop(0))
            return real(source, filename)
        return parse

    race = "AST constructor recursion depth mismatch (before=36, after=39)"
    monkeypatch.setattr(untrusted.ast, "parse", flaky([race, race]))
    assert untrusted.parse_source("x = 1", "<a>").body[0].targets[0].id == "x" and len(calls) == 3
    calls.clear()
    monkeypatch.setattr(untrusted.ast, "parse", flaky([race] * 3))
    with pytest.raises(SystemError, match="recursion depth mismatch"):
        untrusted.parse_source("x = 1", "<b>")
    assert len(calls) == 3
    calls.clear()
    monkeypatch.setattr(untrusted.ast, "parse", flaky(["something else"]))
    with pytest.raises(SystemError, match="something else"):
        untrusted.parse_source("x = 1", "<c>")
    assert len(calls) == 1
