"""The Gradescope autograder zip, run in a simulated ``/autograder`` root.

``gradescope CHAPTER --out autograder.zip`` is unpacked into ``<tmp>/autograder/source``
as Gradescope does; ``setup.sh`` runs there with the network steps skipped
(``GRADESCOPE_OFFLINE=1``) against this environment's interpreter; then
``run_autograder`` grades a correct, a partial and a cheating submission, and each
``results.json`` is validated against the JSON schema written from Gradescope's
specification (``autograder/gradescope_results.schema.json``). The run is repeated
with the container mode forced (what Gradescope's containers get when bubblewrap
cannot start).
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import jsonschema
import nbformat
import pytest

from autograder import gradescope
from autograder.cli import main
from autograder.scores import ExerciseScore, PartScore, Status

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import fixtures  # noqa: E402
import platform_fixtures  # noqa: E402
from platform_fixtures import CHAPTER, STUB, exercise_points  # noqa: E402

pytestmark = pytest.mark.slow  # builds the autograder zip and grades in a simulated /autograder

# Sends a forged result frame for an earlier exercise through the runner's pipe.
CHEAT = '''import sys
_main = sys.modules["__main__"]
_fd = int(sys.argv[sys.argv.index("--result-fd") + 1])
_main.write_frame(open(_fd, "wb", closefd=False), "softmax", {"grade_id": "softmax", "cell_error": None, "cases": []}, {})


def self_attention(x, W_q, W_k, W_v):
    return x
'''


def _validate(data: dict) -> None:
    platform_fixtures.validate(gradescope.SCHEMA_PATH, data)


def test_the_schema_refuses_what_gradescope_would():
    good = {"score": 1.0, "tests": [{"name": "a", "score": 1.0, "max_score": 1.0, "visibility": "visible"}]}
    _validate(good)
    for bad in ({"tests": [{"name": "a"}]},  # no score anywhere
                dict(good, visibility="sometimes"),
                dict(good, stdout_visibility="public"),
                {"score": 1.0, "tests": [{"name": "a", "score": "1", "status": "ok"}]},
                dict(good, unknown_field=1)):
        with pytest.raises(jsonschema.ValidationError):
            _validate(bad)


def test_results_json_has_a_test_per_part_and_hides_stdout():
    rows = [ExerciseScore("ann", CHAPTER, "softmax", 1.0, 2.0, Status.PARTIAL, "", grade_id="test_softmax",
                          notes=["a wider dtype is fine"],
                          parts=[PartScore("values", 1.0, 1.0), PartScore("any axis", 0.0, 1.0,
                                                                          "hidden case 2 of 4: wrong axis")]),
            ExerciseScore("ann", CHAPTER, "self_attention", 0.0, 3.0, Status.MISSING,
                          "no cell with this exercise's id", grade_id="test_self_attention")]
    data = gradescope.results_json(rows, chapter=CHAPTER, isolation="bubblewrap", execution_time=3.2)
    _validate(data)
    assert data["score"] == 1.0 and data["stdout_visibility"] == "hidden" and data["execution_time"] == 3
    names = [t["name"] for t in data["tests"]]
    assert names == ["softmax: values", "softmax: any axis", "self_attention"]
    assert [t["status"] for t in data["tests"]] == ["passed", "failed", "failed"]
    assert "hidden case 2 of 4: wrong axis" in data["tests"][1]["output"]
    assert "note: a wider dtype is fine" in data["tests"][0]["output"]
    assert "no cell with this exercise's id" in data["tests"][2]["output"]
    assert {t["visibility"] for t in data["tests"]} == {"after_due_date"}
    assert "1/5 points" in data["output"] and "after the due date" in data["output"]
    assert data["extra_data"]["isolation"] == "bubblewrap"
    shown = gradescope.results_json(rows, chapter=CHAPTER, visibility="visible")
    assert {t["visibility"] for t in shown["tests"]} == {"visible"} and "due date" not in shown["output"]
    with pytest.raises(ValueError, match="visibility"):
        gradescope.build_zip(CHAPTER, Path("x.zip"), visibility="sometimes")


@pytest.fixture(scope="module")
def zipped(tmp_path_factory):
    return platform_fixtures.build("gradescope", tmp_path_factory.mktemp("gs"), "autograder.zip")


def test_the_zip_has_gradescopes_layout(zipped):
    out, book = zipped
    with zipfile.ZipFile(out) as zf:
        names = set(zf.namelist())
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in zf.infolist()}
        config = json.loads(zf.read("gradescope.json"))
        setup = zf.read("setup.sh").decode()
        source = zf.read(f"book/{CHAPTER}/{CHAPTER}.ipynb")
    assert {"setup.sh", "run_autograder", "requirements-grader.txt", "autograder/grading.py",
            "autograder/gradescope.py", "solutions/__init__.py", "autograder/checks/base.py"} <= names
    assert modes["setup.sh"] == modes["run_autograder"] == 0o755
    assert not [n for n in names if "__pycache__" in n or n.startswith("autograder/deploy")]
    assert source == (book / CHAPTER / f"{CHAPTER}.ipynb").read_bytes()
    assert not {"requirements.txt", "pyproject.toml"} & names  # the book's and the tests' stack stays out
    assert config == {"chapter": CHAPTER, "seed": 5, "timeout": 120.0, "memory": None, "isolation": "auto",
                      "visibility": "after_due_date", "points": gradescope.chapter_points(book / CHAPTER / f"{CHAPTER}.ipynb")}
    assert config["points"] > 0
    # torch's CPU build first (its index named once), then the grader's requirements
    order = [setup.index(s) for s in ('TORCH_INDEX="${TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"',
                                      '"$TORCH" --index-url "$TORCH_INDEX"', "-r requirements-grader.txt")]
    assert order == sorted(order)
    again = out.with_name("again.zip")
    assert main(["gradescope", CHAPTER, "--out", str(again), "--book", str(book), "--seed", "5"]) == 0
    assert again.read_bytes() == out.read_bytes()  # the same inputs give the same zip


def _layout(zipped, tmp_path: Path, env: dict) -> Path:
    """Unpack the zip as Gradescope does and run setup.sh's offline steps."""
    root = tmp_path / "autograder"
    source = root / "source"
    source.mkdir(parents=True)
    with zipfile.ZipFile(zipped[0]) as zf:
        zf.extractall(source)
        for info in zf.infolist():
            (source / info.filename).chmod((info.external_attr >> 16) & 0o777 or 0o644)
    setup = subprocess.run(["bash", str(source / "setup.sh")], cwd=source, env=env, capture_output=True, text=True,
                           timeout=600)
    assert setup.returncode == 0, setup.stdout + setup.stderr
    assert "package installation skipped" in setup.stdout and "system packages skipped" in setup.stdout
    assert f"setup-check: {CHAPTER} (softmax, scaled_dot_product_attention, self_attention)" in setup.stdout
    assert stat.S_IMODE(source.stat().st_mode) == 0o700
    shutil.copy2(source / "run_autograder", root / "run_autograder")
    return root


def _submit(root: Path, env: dict, notebook, student: int) -> dict:
    submission = root / "submission"
    shutil.rmtree(submission, ignore_errors=True)
    shutil.rmtree(root / "results", ignore_errors=True)
    submission.mkdir()
    fixtures.write_notebook(notebook, submission / f"{CHAPTER}.ipynb")
    (root / "submission_metadata.json").write_text(json.dumps({"users": [{"id": student, "name": "A"}]}))
    return _run_autograder(root, env, timeout=900)


def _run_autograder(root: Path, env: dict, timeout: int) -> dict:
    """Run the unpacked ``run_autograder`` as Gradescope does; its results.json, validated."""
    done = subprocess.run(["bash", str(root / "run_autograder")], cwd=root, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))
    _validate(data)
    return data


def _by_exercise(data: dict) -> dict[str, float]:
    scores: dict[str, float] = {}
    for test in data["tests"]:
        scores[test["tags"][0]] = scores.get(test["tags"][0], 0.0) + test["score"]
    return scores


@pytest.mark.parametrize("isolation", ["auto", "container"])
def test_run_autograder_grades_correct_partial_and_cheating_submissions(zipped, tmp_path, isolation, request):
    """Both walls grade the correct and the cheating submission (the isolation is in the
    results; the forged frame crosses that wall's pipe). The partial and the empty upload,
    whose results no wall changes, are graded under ``auto`` only: the container mode's
    reporting of code that raises is ``test_container_mode.py``'s attack suite
    (its NameError and TypeError reasons)."""
    if isolation == "auto":
        request.getfixturevalue("needs_sandbox")
    env = dict(os.environ, AUTOGRADER_ROOT=str(tmp_path / "autograder"), GRADESCOPE_OFFLINE="1",
               AUTOGRADER_PYTHON=sys.executable, AUTOGRADER_ISOLATION=isolation)
    env.pop("PYTHONPATH", None)  # run_autograder's own PYTHONPATH: the unpacked source
    root = _layout(zipped, tmp_path, env)
    source = nbformat.read(str(zipped[1] / CHAPTER / f"{CHAPTER}.ipynb"), as_version=4)
    want = "bubblewrap" if isolation == "auto" else "container"
    points = exercise_points(source)

    correct = _submit(root, env, fixtures.reference_submission(source), 101)
    assert correct["score"] == sum(points.values()) and correct["extra_data"]["isolation"] == want
    assert all(t["status"] == "passed" and t["visibility"] == "after_due_date" for t in correct["tests"])
    assert len(correct["tests"]) > 3  # one test per graded part, not per exercise
    assert correct["stdout_visibility"] == "hidden" and correct["visibility"] == "visible"

    cheat = _submit(root, env, fixtures.submission_with(source, self_attention=CHEAT), 103)
    assert _by_exercise(cheat) == dict(points, self_attention=0)
    flagged = [t for t in cheat["tests"] if t["tags"] == ["self_attention"]]
    assert len(flagged) == 1 and flagged[0]["output"].startswith("cheat:") and "forged" in flagged[0]["output"]
    if isolation != "auto":
        return

    partial = _submit(root, env, fixtures.submission_with(source, self_attention=STUB), 102)
    assert _by_exercise(partial) == dict(points, self_attention=0)
    assert any(t["status"] == "failed" and "NotImplementedError" in t["output"] for t in partial["tests"])

    shutil.rmtree(root / "submission")
    (root / "submission").mkdir()
    nothing = _submit_empty(root, env)
    assert nothing["score"] == 0 and "no notebook was submitted" in nothing["output"]


def _submit_empty(root: Path, env: dict) -> dict:
    shutil.rmtree(root / "results", ignore_errors=True)
    return _run_autograder(root, env, timeout=600)
