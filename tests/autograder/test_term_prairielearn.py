"""The PrairieLearn external grader, run in a simulated ``/grade`` (like the Gradescope
adapter's test): a correct, a partial and a missing upload, each ``results.json``
validated against the schema written from PrairieLearn's documentation."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import jsonschema
import nbformat
import pytest

from autograder import gradescope, prairielearn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import fixtures  # noqa: E402
import platform_fixtures  # noqa: E402
from platform_fixtures import CHAPTER, STUB, exercise_points  # noqa: E402


def _validate(data: dict) -> None:
    platform_fixtures.validate(prairielearn.SCHEMA_PATH, data)


def test_the_schema_refuses_what_prairielearn_would():
    good = {"gradable": True, "score": 0.5, "tests": [{"name": "a", "points": 1, "max_points": 2}]}
    _validate(good)
    _validate({"gradable": False, "format_errors": ["no file"]})
    for bad in ({"score": 0.5},  # gradable is required
                {"gradable": True},  # a gradable result needs a score
                dict(good, score=1.5),  # 0 to 1
                dict(good, score=-0.1),
                dict(good, tests=[{"points": 1}]),  # a test needs a name
                dict(good, tests=[{"name": "a", "points": "1"}]),
                {"gradable": False, "score": 0.0},
                dict(good, status="ok")):
        with pytest.raises(jsonschema.ValidationError):
            _validate(bad)


@pytest.fixture(scope="module")
def question(tmp_path_factory):
    return platform_fixtures.build("prairielearn", tmp_path_factory.mktemp("pl"), "question")


def test_the_question_folder(question):
    out, _ = question
    info = json.loads((out / "info.json").read_text())
    assert info["gradingMethod"] == "External" and info["externalGradingOptions"]["enabled"] is True
    assert info["externalGradingOptions"]["entrypoint"] == "python3 -m autograder.prairielearn run"
    assert f'file-names="{CHAPTER}.ipynb"' in (out / "question.html").read_text()
    assert json.loads((out / "tests" / "autograder.json").read_text()) == {"chapter": CHAPTER, "seed": 5,
                                                                           "timeout": 120.0}
    assert (out / "tests" / "book" / CHAPTER / f"{CHAPTER}.ipynb").is_file()


def _grade_root(tmp_path: Path, question_dir: Path) -> Path:
    """``/grade`` as PrairieLearn lays it out: tests/ from the question, student/ empty."""
    root = tmp_path / "grade"
    shutil.copytree(question_dir / "tests", root / "tests")
    (root / "student").mkdir(parents=True)
    return root


def _run(root: Path, notebook=None) -> dict:
    shutil.rmtree(root / "student")
    (root / "student").mkdir()
    shutil.rmtree(root / "results", ignore_errors=True)
    if notebook is not None:
        fixtures.write_notebook(notebook, root / "student" / f"{CHAPTER}.ipynb")
    assert prairielearn.main(["run", "--root", str(root)]) == 0
    data = json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))
    _validate(data)
    return data


def test_run_grades_correct_partial_and_missing_uploads(question, tmp_path, needs_sandbox):
    out, book = question
    root = _grade_root(tmp_path, out)
    source = nbformat.read(str(book / CHAPTER / f"{CHAPTER}.ipynb"), as_version=4)
    points = exercise_points(source)

    correct = _run(root, fixtures.reference_submission(source))
    assert correct["gradable"] is True and correct["score"] == 1.0
    assert len(correct["tests"]) > len(points)  # one test per graded part
    assert sum(t["max_points"] for t in correct["tests"]) == sum(points.values())

    partial = _run(root, fixtures.submission_with(source, self_attention=STUB))
    lost = points["self_attention"] / sum(points.values())
    assert partial["score"] == pytest.approx(1 - lost)
    failed = [t for t in partial["tests"] if t["description"] == "self_attention"]
    assert sum(t["points"] for t in failed) == 0 and any("NotImplementedError" in t["message"] for t in failed)

    missing = _run(root)
    assert missing == {"gradable": False, "format_errors": [f"no notebook was submitted: upload {CHAPTER}.ipynb"],
                       "message": f"no notebook was submitted: upload {CHAPTER}.ipynb"}


def test_paths_are_configurable(question, tmp_path):
    out, _ = question
    root = _grade_root(tmp_path, out)
    elsewhere = tmp_path / "results.json"
    assert prairielearn.main(["run", "--root", str(root), "--student", str(tmp_path / "nothing"),
                              "--results", str(elsewhere)]) == 0
    data = json.loads(elsewhere.read_text())
    _validate(data)
    assert data["gradable"] is False and data["format_errors"] == ["no files were submitted"]


@pytest.mark.parametrize("config, error", [
    (None, "cannot read the grader's configuration"),
    ("[1, 2]", "expected a JSON object, got list"),
    ('{"seed": 5}', 'expected "chapter": a chapter id'),
    ('{"chapter": "../etc", "seed": 5}', 'expected "chapter": a chapter id'),
    ('{"chapter": "%s", "seed": "5"}' % CHAPTER, 'expected "seed": a whole number'),
    ('{"chapter": "05_masked_attention", "seed": 5}', "no source notebook"),
])
def test_both_adapters_load_their_package_one_way_and_name_what_is_wrong(question, tmp_path, config, error):
    """A damaged package is the instructor's to mend: both adapters refuse it alike, naming its file."""
    out, _ = question
    good = gradescope.load_grader_config(out / "tests", prairielearn.CONFIG)
    assert (good.chapter, good.config["seed"]) == (CHAPTER, 5)
    assert good.source == out / "tests" / "book" / CHAPTER / f"{CHAPTER}.ipynb"
    for folder, name in ((tmp_path / "grade" / "tests", prairielearn.CONFIG),
                         (tmp_path / "autograder" / "source", gradescope.CONFIG)):
        shutil.copytree(out / "tests" / "book", folder / "book")
        if config is not None:
            (folder / name).write_text(config, encoding="utf-8")
        with pytest.raises(ValueError, match=error) as caught:
            gradescope.load_grader_config(folder, name)
        assert str(folder / name) in str(caught.value)
    with pytest.raises(ValueError, match=error):
        prairielearn.run(tmp_path / "grade")
    with pytest.raises(ValueError, match=error):
        gradescope.run(tmp_path / "autograder")
