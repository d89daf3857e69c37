"""The grader on the platforms classes use: Gradescope's images first.

* ``requirements-grader.txt`` resolves, without installing anything, for every Python
  a Gradescope base image runs (3.10 on Ubuntu 22.04, 3.12 on Ubuntu 24.04) and for
  3.11 and 3.13: ``pip install --dry-run --only-binary=:all: --python-version V
  --platform manylinux_2_X_x86_64 ...`` against PyPI, with no configuration of this
  machine (its local wheel folders and caps) taking part. torch comes from PyTorch's CPU
  wheel index where that can be reached; where it cannot (this project's machines reach
  PyPI only) the same requirement is resolved from PyPI instead, ``--no-deps``, which
  proves a wheel of that version exists for the Python and the platform (the CPU index
  carries the same versions and tags). The student package's requirements are resolved
  in the same pip run (what resolves together resolves apart): one per Python. Every
  resolution of the module (these, Colab's, macOS' and Windows') runs at once, in one
  fixture: each pip mostly waits on the index. pip reads each wheel's metadata by HTTP
  range requests (``--use-feature=fast-deps``) rather than downloading the wheel whole.
* The zip's ``setup.sh`` runs for real in a fresh folder, from the unpacked zip alone:
  a new venv of the system ``python3``, torch then the grader's requirements installed
  by pip (no ``GRADESCOPE_OFFLINE`` short cut; ``GRADESCOPE_NO_APT=1`` only keeps a
  root test run off this machine's apt). Here torch's CPU index is unreachable, so the
  script takes its plain-index branch and pip finds torch in this machine's local
  wheel folder; on Gradescope it comes from the CPU index. Then ``run_autograder``
  grades the real chapter 4 notebook, whose setup cell imports matplotlib and
  ipywidgets (nothing the grader needs is missing from the set), and a blank one, at
  the same time, each in its own ``/autograder`` with the one venv.
* ``--isolation engine-only`` grades without a sandbox and says so in ``extra_data``;
  a wall that does not start fails the build, naming that choice.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import types
import urllib.request
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from packaging.requirements import Requirement

from autograder import gradescope, release
from autograder.bench import make_book
from autograder.cli import main

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))

import fixtures  # noqa: E402

CHAPTER = "04_self_attention"
PYPI = "https://pypi.org/simple"
# Gradescope's base images: Ubuntu 22.04 (glibc 2.35, python3 3.10) and 24.04 (glibc 2.39,
# python3 3.12); 3.11 and 3.13 on either (deadsnakes), the range requirements-grader.txt promises.
TARGETS = [("3.10", 35), ("3.11", 35), ("3.12", 39), ("3.13", 39)]


# A candidate's metadata read from its wheel by HTTP range requests (the zip's directory and
# its ``.dist-info/METADATA``, a few hundred kB) where the index offers no metadata file of
# its own (PEP 658): the index this project's machines reach offers none, and a dry run then
# downloads every wheel it considers in full (torch for Linux: 527 MB for each Python, five
# at once). The resolver, the candidates and the report are pip's own, unchanged; an index
# with metadata files is read as before, and a server that answers no range request gets
# the whole wheel downloaded, as before.
FAST_DEPS = ("--use-feature=fast-deps",)


def _clean_pip_env() -> dict:
    """The environment of a pip that reads no configuration of this machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _platforms(glibc_minor: int) -> list[str]:
    """``--platform`` arguments for an x86-64 Linux with that glibc (pip does not widen them)."""
    tags = ["manylinux2014_x86_64"] + [f"manylinux_2_{m}_x86_64" for m in range(17, glibc_minor + 1)]
    return [arg for tag in tags for arg in ("--platform", tag)]


@dataclass(frozen=True)
class Resolution:
    """One ``pip install --dry-run`` for another Python and platform: what to resolve, and where.

    Attributes:
        requirements: the requirement strings.
        python: the target Python (``--python-version``).
        platforms: the ``--platform`` arguments.
        index: the index to resolve from (with no configuration of this machine).
        constraints: a constraints file, or None.
        no_deps: resolve the requirements alone (``--no-deps``).
    """

    requirements: tuple[str, ...]
    python: str
    platforms: tuple[str, ...]
    index: str = PYPI
    constraints: Path | None = None
    no_deps: bool = False

    def run(self, report: Path) -> dict[str, str]:
        """Resolve without installing: ``{normalised name: version}`` from pip's ``--report``.
        Fails the test with pip's own message when they do not resolve."""
        cmd = [sys.executable, "-m", "pip", "--isolated", "install", "--dry-run", "--ignore-installed",
               "--only-binary=:all:", "--python-version", self.python, *self.platforms, "--index-url", self.index,
               "--report", str(report), "--quiet", *FAST_DEPS, *self.requirements]
        if self.constraints is not None:
            cmd += ["--constraint", str(self.constraints)]
        if self.no_deps:
            cmd.append("--no-deps")
        done = subprocess.run(cmd, capture_output=True, text=True, env=_clean_pip_env(), timeout=900)
        assert done.returncode == 0, (f"{' '.join(self.requirements)} do not resolve for Python {self.python} "
                                      f"({' '.join(self.platforms[-1:])}):\n{done.stdout}{done.stderr}")
        data = json.loads(report.read_text(encoding="utf-8"))
        return {re.sub(r"[-_.]+", "-", item["metadata"]["name"]).lower(): item["metadata"]["version"]
                for item in data["install"]}


@dataclass(frozen=True)
class Resolved:
    """What one :class:`Resolution` gave: its versions, or pip's failure."""

    got: dict[str, str] | None
    failure: str | None = None

    def versions(self) -> dict[str, str]:
        """``{normalised name: version}``; an AssertionError with pip's message where it did not resolve."""
        if self.failure is not None:
            raise AssertionError(self.failure)
        return dict(self.got)


def resolve_all(jobs: dict[str, Resolution], folder: Path) -> dict[str, Resolved]:
    """Run every resolution of ``jobs`` at once (each pip mostly waits on the index: one after
    another, they kept a worker idle for about a minute); key -> what it gave."""

    def one(key: str) -> Resolved:
        try:
            return Resolved(jobs[key].run(folder / f"{key}.json"))
        except AssertionError as failure:
            return Resolved(None, str(failure))

    keys = sorted(jobs)
    with ThreadPoolExecutor(len(keys)) as pool:
        return dict(zip(keys, pool.map(one, keys)))


def _requirements(path: Path) -> list[Requirement]:
    lines = [line.split("#", 1)[0].strip() for line in path.read_text(encoding="utf-8").splitlines()]
    return [Requirement(line) for line in lines if line]


def _reachable(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=20).close()
        return True
    except OSError:
        return False


# --------------------------------------------------------------------------- resolution


def test_grader_requirements_are_small_and_ranged():
    reqs = _requirements(ROOT / gradescope.GRADER_REQUIREMENTS)
    names = {r.name.lower() for r in reqs}
    assert {"torch", "numpy", "nbformat", "matplotlib", "ipywidgets", "ipython"} <= names
    heavy = {"jupyter-book", "sphinx", "jupyterlab", "playwright", "pytest", "nbgrader", "myst-nb", "nbval"}
    assert not names & heavy, f"the grader's image does not need the book's or the tests' stack: {names & heavy}"
    for r in reqs:
        assert r.specifier and not any(s.operator == "==" and "*" not in s.version for s in r.specifier), \
            f"{r}: a range, so that it resolves on Python 3.10 to 3.13"


# Colab runs Python 3.13 on Ubuntu 22.04 (glibc 2.35).
COLAB_PYTHON = "3.13"
# The README's one install line on Apple silicon and on Windows, and on an Intel Mac.
DESKTOPS = ["macosx_14_0_arm64", "win_amd64"]
INTEL_MAC = "macosx_10_15_x86_64"


@pytest.fixture(scope="module")
def resolutions(student_wheel, tmp_path_factory) -> dict[str, Resolved]:
    """Every resolution the tests below read, run at once (:func:`resolve_all`): key -> what it
    gave (its versions, or pip's failure, raised when a test reads it).

    * ``linux-<python>``, ``linux-torch-<python>``: the grader's requirements and the student
      package's, resolved together, once per Python, for x86-64 Linux with glibc 2.35
      (Ubuntu 22.04: Gradescope's older image and Colab's; 24.04's 2.39 accepts every wheel
      that 2.35 does). What resolves together resolves apart, so one resolution per Python
      serves the grader's test and the student package's. torch's two ranges are resolved
      together too, ``--no-deps``, from PyTorch's CPU index where it can be reached, else
      PyPI (this project's machines: PyPI only; the same versions, the same wheel tags).
    * ``colab``, ``colab-torch``: the student package against every pin of Colab's runtime
      as a constraint (torch ``--no-deps``: Colab's is the CPU build, and PyPI's torch would
      add its CUDA libraries); ``colab-old``: what the package used to require (``ipython>=8.0``),
      which must not resolve there.
    * ``<platform>``, ``<platform>-torch``: the student package on Apple silicon and Windows
      (torch ``--no-deps``: pip evaluates environment markers for the machine it runs on,
      Linux, so torch's Linux-only CUDA dependencies would be asked for).
    * ``intel-mac``: torch alone on an Intel Mac.
    """
    grader = [str(r) for r in _requirements(ROOT / gradescope.GRADER_REQUIREMENTS)]
    student = _requires(student_wheel)
    torch = [r for r in grader + student if Requirement(r).name == "torch"]
    rest = [r for r in grader + student if Requirement(r).name != "torch"]
    torch_index = gradescope.TORCH_INDEX if _reachable(gradescope.TORCH_INDEX + "/torch/") else PYPI
    student_torch = [r for r in student if Requirement(r).name == "torch"]
    student_rest = [r for r in student if Requirement(r).name != "torch"]
    glibc_2_35 = tuple(_platforms(35))
    jobs = {}
    for python, _ in TARGETS:
        jobs[f"linux-{python}"] = Resolution(tuple(rest), python, glibc_2_35)
        jobs[f"linux-torch-{python}"] = Resolution(tuple(torch), python, glibc_2_35, torch_index, no_deps=True)
    jobs["colab"] = Resolution(tuple(student_rest), COLAB_PYTHON, glibc_2_35, constraints=COLAB)
    jobs["colab-torch"] = Resolution(tuple(student_torch), COLAB_PYTHON, glibc_2_35, constraints=COLAB, no_deps=True)
    jobs["colab-old"] = Resolution(("ipython>=8.0",), COLAB_PYTHON, glibc_2_35, constraints=COLAB)
    for platform in DESKTOPS:
        jobs[platform] = Resolution(tuple(student_rest), "3.12", ("--platform", platform))
        jobs[f"{platform}-torch"] = Resolution(tuple(student_torch), "3.12", ("--platform", platform), no_deps=True)
    jobs["intel-mac"] = Resolution(tuple(student_torch), "3.11", ("--platform", INTEL_MAC), no_deps=True)
    return resolve_all(jobs, tmp_path_factory.mktemp("resolutions"))


@pytest.fixture(scope="module")
def linux_resolutions(resolutions) -> dict[str, dict[str, str]]:
    """``{python: {name: version}}``: the grader's and the student package's requirements on
    x86-64 Linux, torch included (``resolutions``' ``linux-*``)."""
    got = {}
    for python, _ in TARGETS:
        got[python] = resolutions[f"linux-{python}"].versions()
        got[python].update(resolutions[f"linux-torch-{python}"].versions())
    return got


def _within(got: dict[str, str], requirements: list[Requirement], python: str) -> None:
    for r in requirements:
        name = re.sub(r"[-_.]+", "-", r.name).lower()
        assert name in got and got[name] in r.specifier, f"Python {python}: {r} resolved to {got.get(name)}"


@pytest.mark.slow
def test_grader_requirements_resolve_for_every_gradescope_python(linux_resolutions):
    reqs = _requirements(ROOT / gradescope.GRADER_REQUIREMENTS)
    assert set(linux_resolutions) == {python for python, _ in TARGETS}
    for python, got in linux_resolutions.items():
        _within(got, reqs, python)


# --------------------------------------------------------------------------- setup.sh for real


def _unpack(zip_path: Path, root: Path) -> Path:
    source = root / "source"
    source.mkdir(parents=True)
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(source)
        for info in zf.infolist():
            (source / info.filename).chmod((info.external_attr >> 16) & 0o777 or 0o644)
    shutil.copy2(source / "run_autograder", root / "run_autograder")
    return source


def _submit(root: Path, env: dict, notebook, student: int) -> tuple[dict, str]:
    shutil.rmtree(root / "submission", ignore_errors=True)
    shutil.rmtree(root / "results", ignore_errors=True)
    (root / "submission").mkdir()
    fixtures.write_notebook(notebook, root / "submission" / f"{CHAPTER}.ipynb")
    (root / "submission_metadata.json").write_text(json.dumps({"users": [{"id": student}]}), encoding="utf-8")
    done = subprocess.run(["bash", str(root / "run_autograder")], cwd=root, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))
    gradescope.validate_results(data)
    return data, done.stdout


@pytest.mark.slow
def test_setup_sh_installs_the_grader_from_the_zip_alone_and_grades(tmp_path, needs_sandbox):
    if shutil.which("python3") is None:
        pytest.skip("no python3 on PATH: setup.sh makes its venv from the image's python3")
    out = tmp_path / "autograder.zip"
    book = ROOT / "book"
    assert main(["gradescope", CHAPTER, "--out", str(out), "--book", str(book), "--seed", "11"]) == 0
    root = tmp_path / "autograder"
    source = _unpack(out, root)
    venv = tmp_path / "grader-venv"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "GRADESCOPE_OFFLINE",
                                                           "AUTOGRADER_PYTHON", "AUTOGRADER_ISOLATION")}
    env.update(AUTOGRADER_ROOT=str(root), AUTOGRADER_VENV=str(venv), GRADESCOPE_NO_APT="1")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if not p.startswith(sys.prefix))  # the system python3, not this venv's
    setup = subprocess.run(["bash", str(source / "setup.sh")], cwd=source, env=env, capture_output=True, text=True,
                           timeout=1500)
    assert setup.returncode == 0, setup.stdout + setup.stderr
    assert "package installation skipped" not in setup.stdout
    assert f"setup-check: {CHAPTER} (softmax, scaled_dot_product_attention, self_attention)" in setup.stdout
    assert stat.S_IMODE(source.stat().st_mode) == 0o700
    python = venv / "bin" / "python"
    assert (source / ".python").read_text(encoding="utf-8").strip() == str(python)
    listed = subprocess.run([str(python), "-m", "pip", "list", "--format=json"], capture_output=True, text=True,
                            env=env, timeout=120)
    installed = {p["name"].lower(): p["version"] for p in json.loads(listed.stdout)}
    assert installed["torch"].startswith("2.13") and "+cu" not in installed["torch"], installed["torch"]
    assert not {"jupyter-book", "sphinx", "jupyterlab", "pytest", "playwright", "nbgrader"} & set(installed), \
        "the grader's venv holds only what grading needs"

    source_nb = nbformat.read(str(book / CHAPTER / f"{CHAPTER}.ipynb"), as_version=4)
    points = gradescope.chapter_points(book / CHAPTER / f"{CHAPTER}.ipynb")
    # Two submissions at once, as Gradescope grades them: each in its own /autograder (the
    # unpacked source copied, .python and all) with the one venv setup.sh installed.
    other = tmp_path / "autograder-2"
    shutil.copytree(root, other, symlinks=True)
    other_env = dict(env, AUTOGRADER_ROOT=str(other))
    with ThreadPoolExecutor(2) as pool:
        graded = pool.map(lambda job: _submit(*job), [(root, env, source_nb, 201),
                                                      (other, other_env, fixtures.blank_submission(source_nb), 202)])
        (correct, _), (blank, _) = list(graded)
    assert correct["score"] == points and correct["extra_data"]["isolation"] in ("bubblewrap", "container")
    assert f"/{points:g} points" in correct["output"] and "no score: this line is your total" in correct["output"]
    assert blank["score"] == 0 and f"0/{points:g} points" in blank["output"]


# --------------------------------------------------------------------------- isolation choices


@pytest.fixture(scope="module")
def small_book(tmp_path_factory):
    return make_book(tmp_path_factory.mktemp("platforms"), [CHAPTER])


def _offline_layout(book: Path, tmp_path: Path, *options: str, path_prefix: Path | None = None):
    out = tmp_path / "autograder.zip"
    assert main(["gradescope", CHAPTER, "--out", str(out), "--book", str(book), "--seed", "3", *options]) == 0
    root = tmp_path / "autograder"
    source = _unpack(out, root)
    env = dict(os.environ, AUTOGRADER_ROOT=str(root), GRADESCOPE_OFFLINE="1", AUTOGRADER_PYTHON=sys.executable)
    env.pop("PYTHONPATH", None)
    env.pop("AUTOGRADER_ISOLATION", None)
    if path_prefix is not None:
        env["PATH"] = f"{path_prefix}{os.pathsep}{env['PATH']}"
    setup = subprocess.run(["bash", str(source / "setup.sh")], cwd=source, env=env, capture_output=True, text=True,
                           timeout=600)
    return root, env, setup


@pytest.mark.slow  # runs setup.sh and grades
def test_engine_only_grades_without_a_sandbox_and_says_so(small_book, tmp_path, capsys):
    root, env, setup = _offline_layout(small_book, tmp_path, "--isolation", "engine-only", "--memory", "600M")
    assert "isolation engine-only" in capsys.readouterr().out
    assert setup.returncode == 0, setup.stdout + setup.stderr
    assert "will be graded with isolation engine-only (engine-only: no sandbox started" in setup.stdout
    config = json.loads((root / "source" / "gradescope.json").read_text(encoding="utf-8"))
    assert config["isolation"] == "engine-only" and config["memory"] == 600 * 2**20
    source = nbformat.read(str(small_book / CHAPTER / f"{CHAPTER}.ipynb"), as_version=4)
    data, log = _submit(root, env, fixtures.reference_submission(source), 301)
    assert data["score"] == config["points"] > 0
    assert data["extra_data"]["isolation"] == "engine-only"
    assert "Gradescope's container as the only wall" in data["extra_data"]["isolation_note"]
    assert "isolation: engine-only" in log


def test_a_wall_that_does_not_start_fails_the_build_and_names_the_way_out(small_book, tmp_path):
    broken = tmp_path / "bin"
    broken.mkdir()
    (broken / "bwrap").write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    (broken / "bwrap").chmod(0o755)
    _, _, setup = _offline_layout(small_book, tmp_path, "--isolation", "bubblewrap", path_prefix=broken)
    assert setup.returncode != 0
    assert "does not start" in setup.stderr and "--isolation engine-only" in setup.stderr, setup.stderr


@pytest.mark.parametrize("bad", [["--isolation", "none"], ["--memory", "0"], ["--timeout", "-1"]])
def test_the_gradescope_command_refuses_bad_settings(small_book, tmp_path, bad):
    try:
        code = main(["gradescope", CHAPTER, "--out", str(tmp_path / "a.zip"), "--book", str(small_book), *bad])
    except SystemExit as exc:  # argparse's refusal
        code = exc.code
    assert code == 2 and not (tmp_path / "a.zip").exists()


# --------------------------------------------------------------------------- the student package


COLAB = ROOT / "tests" / "data" / "colab-constraints.txt"


@pytest.fixture(scope="module")
def student_wheel(tmp_path_factory):
    """Chapter 4's released student package (``autograder release``)."""
    out = tmp_path_factory.mktemp("release")
    assert main(["release", "--out", str(out), CHAPTER]) == 0
    (wheel,) = out.glob("*.whl")
    return wheel


def _requires(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        lines = zf.read(meta).decode().splitlines()
    return [line.split(": ", 1)[1] for line in lines if line.startswith("Requires-Dist: ")]


@pytest.mark.slow
def test_the_student_package_resolves_against_colabs_pins_without_upgrading_them(student_wheel, resolutions):
    requires = _requires(student_wheel)
    assert any(r.startswith("ipython") for r in requires) and any(r.startswith("torch") for r in requires)
    pinned = {Requirement(line).name.lower(): line.split("==", 1)[1] for line in
              (x.split("#", 1)[0].strip() for x in COLAB.read_text(encoding="utf-8").splitlines()) if line}
    # Every pin of Colab's runtime is a constraint, so the resolution succeeds only if nothing
    # Colab pins needs another version (``resolutions``: torch --no-deps, Colab's CPU build).
    got = resolutions["colab"].versions()
    got.update(resolutions["colab-torch"].versions())
    for name in ("ipython", "ipywidgets", "numpy", "torch", "matplotlib"):
        assert got[name] == pinned[name], f"{name}: {got[name]} instead of Colab's {pinned[name]}"
    # the same resolution fails for what the package used to require: the test can see an upgrade
    with pytest.raises(AssertionError, match="do not resolve"):
        resolutions["colab-old"].versions()


@pytest.mark.slow
@pytest.mark.parametrize("python", ["3.10", "3.11", "3.12", "3.13"])
def test_the_student_package_resolves_on_every_supported_python(student_wheel, linux_resolutions, python):
    got = linux_resolutions[python]
    assert {"numpy", "ipython", "ipywidgets", "matplotlib", "torch"} <= set(got)
    _within(got, [Requirement(r) for r in _requires(student_wheel)], python)


def test_the_wheel_version_is_read_without_tomllib(monkeypatch):
    from autograder.student import wheel

    monkeypatch.setitem(sys.modules, "tomllib", None)  # as on Python 3.10: `import tomllib` fails
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert wheel.project_version() == re.search(r'^version = "(.+)"$', text, re.M).group(1)


def test_cell_output_is_utf8_whatever_the_locale(tmp_path, monkeypatch):
    """A cell that prints "✓" passes its check where the locale's encoding cannot write it
    (Windows' cp1252 cannot; here PYTHONIOENCODING=ascii stands in for it)."""
    from autograder.student.notebook import visible_checks

    nb = fixtures.reference_submission(fixtures.source_notebook(CHAPTER))
    fixtures.solution_cell(nb, "softmax").source += '\nprint("✓ softmax: done (ü)")\n'
    path = fixtures.write_notebook(nb, tmp_path / f"{CHAPTER}.ipynb")
    monkeypatch.setenv("PYTHONIOENCODING", "ascii")
    rows = {r["exercise"]: r for r in visible_checks(path)}
    assert rows["softmax"]["status"] == "passed", rows["softmax"]["message"]


@pytest.mark.slow
@pytest.mark.parametrize("platform", DESKTOPS)
def test_the_student_install_line_resolves_on_macos_and_windows(student_wheel, resolutions, platform):
    """The README's one line for Apple silicon and for Windows: the wheel's requirements
    resolve to wheels of that platform. pip evaluates environment markers for the machine
    it runs on (Linux), not for --platform, so torch's Linux-only CUDA dependencies would
    be asked for: torch is resolved --no-deps (a wheel of that platform exists), the rest
    with their dependencies."""
    torch = next(r for r in _requires(student_wheel) if r.startswith("torch"))
    assert {"numpy", "ipython", "ipywidgets", "matplotlib"} <= set(resolutions[platform].versions())
    assert Requirement(torch).specifier.contains(resolutions[f"{platform}-torch"].versions()["torch"])


@pytest.mark.slow
def test_an_intel_mac_gets_torch_2_2_at_most(resolutions):
    """What the README says of Intel Macs: PyTorch's last macOS x86-64 wheels are 2.2."""
    got = resolutions["intel-mac"].versions()
    assert got["torch"].startswith("2.2."), got["torch"]


def test_the_release_hands_out_the_wheel_beside_the_notebook(student_wheel):
    """nbgrader's release_assignment hands out the chapter's folder: the wheel is in it, the
    notebook opens with the cell that installs it on Colab, and says, right before its setup
    cell, how to install it on each platform."""
    folder = student_wheel.parent / CHAPTER
    assert (folder / student_wheel.name).read_bytes() == student_wheel.read_bytes()
    nb = nbformat.read(str(folder / f"{CHAPTER}.ipynb"), as_version=4)
    first_code = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    graded = [c for c in nb.cells if c.cell_type == "code" and "nbgrader" in c.metadata]
    assert graded[0].metadata.nbgrader["grade_id"] == "setup", "the setup cell stays nbgrader's first code cell"
    setup = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "setup")
    assert nb.cells[first_code].metadata["transformer_book"] == {release.COLAB_KEY: True}, "the Colab cell first"
    assert [c.cell_type for c in nb.cells[first_code + 1:setup]] == ["markdown"] * (setup - first_code - 1)
    note = nb.cells[setup - 1]
    assert note.cell_type == "markdown" and note.metadata["transformer_book"] == {"install_note": True}
    assert f"pip install jupyterlab {student_wheel.name}" in note.source
    assert f"%pip install {student_wheel.name}" in note.source and "Colab" in note.source


def _colab_cell(folder: Path) -> str:
    nb = nbformat.read(str(folder / f"{CHAPTER}.ipynb"), as_version=4)
    assert nb.cells[0].metadata.get("transformer_book") == {release.COLAB_KEY: True}
    assert "nbgrader" not in nb.cells[0].metadata  # not a cell nbgrader grades or locks
    return nb.cells[0].source


def _run_cell(source: str, cwd: Path, colab: bool, monkeypatch) -> list[tuple[str, str]]:
    """Run a cell as IPython does (its magics transformed), with or without a ``google.colab``
    module; returns the line magics it ran, each ``(name, line)`` with ``{var}`` expanded."""
    from IPython.core.inputtransformer2 import TransformerManager

    ran: list[tuple[str, str]] = []
    namespace: dict = {}

    class Shell:
        def run_line_magic(self, name, line, _stack_depth=1):
            ran.append((name, line.format(**namespace)))

    namespace["get_ipython"] = lambda: Shell()
    if colab:
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.chdir(cwd)
    exec(compile(TransformerManager().transform_cell(source), "<colab cell>", "exec"), namespace)
    return ran


def test_the_colab_cell_installs_the_wheel_on_colab_and_nothing_elsewhere(student_wheel, tmp_path, monkeypatch):
    """The released notebook's first cell: outside Colab (here, a laptop, a hub, the grader) a
    no-op; on Colab ``%pip install --quiet`` of the uploaded wheel, else of the one the book
    publishes on the branch ``student`` (.github/workflows/book.yml: ``book/<chapter>/``), with
    no ``--upgrade`` and no other requirement, so what pip resolves is the wheel's own
    requirements against what Colab has installed: the resolution
    test_the_student_package_resolves_against_colabs_pins_without_upgrading_them makes."""
    source = _colab_cell(student_wheel.parent / CHAPTER)
    assert _run_cell(source, tmp_path, colab=False, monkeypatch=monkeypatch) == []
    published = release.published_wheel_base(CHAPTER)
    assert published == f"https://github.com/transformer-book/transformer-book/raw/student/book/{CHAPTER}/"
    assert _run_cell(source, tmp_path, colab=True, monkeypatch=monkeypatch) == \
        [("pip", f"install --quiet {published}{student_wheel.name}")]
    shutil.copy(student_wheel, tmp_path / student_wheel.name)  # uploaded beside the notebook
    assert _run_cell(source, tmp_path, colab=True, monkeypatch=monkeypatch) == \
        [("pip", f"install --quiet {student_wheel.name}")]


def test_a_book_without_a_published_branch_still_installs_the_uploaded_wheel(small_book, tmp_path, monkeypatch):
    assert release.published_wheel_base(CHAPTER, small_book) == ""  # no _config.yml beside it
    release.release_chapter(CHAPTER, tmp_path / "out", book=small_book)
    source = _colab_cell(tmp_path / "out" / CHAPTER)
    (tmp_path / "colab").mkdir()
    (wheel,) = _run_cell(source, tmp_path / "colab", colab=True, monkeypatch=monkeypatch)
    assert wheel[1].startswith("install --quiet transformer_book_student-") and "://" not in wheel[1]
