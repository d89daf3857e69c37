"""Shared fixtures of the autograder tests: chapter notebooks on disk, sandbox probes.

The notebook builders themselves live in ``fixtures.py`` (importable by any test);
this file turns them into pytest fixtures.
"""
from __future__ import annotations

import hashlib
import json
import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import fixtures  # noqa: E402
from walls import cannot_start  # noqa: E402

REPO = HERE.parent.parent

# The wall-time limit of every probe that is not about wall time: a safety net far
# above what any of them takes, so no verdict depends on the machine's load.
SAFETY_WALL = 300.0

# A probe cell that tries three connections (internet, local TCP, IPv6 loopback),
# printing ``connected``/``refused`` for each, then the network interfaces it sees.
NETWORK_PROBE = textwrap.dedent("""
    import socket
    for family, addr in [(socket.AF_INET, ("1.1.1.1", 53)), (socket.AF_INET, ("127.0.0.1", 22)),
                         (socket.AF_INET6, ("::1", 80))]:
        s = socket.socket(family)
        s.settimeout(2)
        try:
            s.connect(addr)
            print("connected", addr)
        except OSError as exc:
            print("refused", type(exc).__name__)
    print(sorted(name for _, name in socket.if_nameindex()))
""")


# A torch.Tensor subclass that says every torch.equal/allclose holds and calls itself
# torch's: the disguise an answer may try on the wire (test_runner: it crosses as its
# data; test_cheats: a sandboxed answer returning one is judged on its data).
DISGUISED_TENSOR = textwrap.dedent("""
    import torch

    class Tensor(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func in (torch.equal, torch.allclose):
                return True
            return super().__torch_function__(func, types, args, kwargs or {})

    Tensor.__module__ = "torch"
""")


def write_probe(paths: str) -> str:
    """Probe code that tries to append to each path of ``paths`` (the source of a
    Python list, evaluated in the run) and prints ``writable PATH`` or ``refused PATH``."""
    return f"for path in {paths}:\n" + textwrap.indent(textwrap.dedent("""\
        try:
            with open(path, "a") as fh:
                fh.write("x")
            print("writable", path)
        except OSError:
            print("refused", path)
    """), "    ")


def read_probe(paths: str) -> str:
    """Probe code that tries to read each path of ``paths`` (the source of a Python
    list, evaluated in the run): it lists a folder and reads a file, and prints
    ``read PATH`` or ``unreadable PATH``."""
    return f"import os\nfor path in {paths}:\n" + textwrap.indent(textwrap.dedent("""\
        try:
            if os.path.isdir(path):
                os.listdir(path)
            else:
                open(path).read()
            print("read", path)
        except OSError:
            print("unreadable", path)
    """), "    ")


def _sandbox_problem() -> str | None:
    from autograder.sandbox import bwrap_path, check_sandbox

    if bwrap_path() is None:
        return "bubblewrap (bwrap) is not installed"
    try:
        check_sandbox()
    except RuntimeError as exc:
        return str(exc)
    return None


@pytest.fixture(scope="session")
def needs_sandbox():
    """Skip when bubblewrap cannot run here; fail under ``CI=true`` (the Makefile installs it on CI)."""
    problem = _sandbox_problem()
    if problem:
        cannot_start("bubblewrap", problem)


@pytest.fixture(scope="session")
def ch04_source(tmp_path_factory) -> Path:
    """The chapter 4 source notebook (softmax 1 pt, scaled_dot_product_attention 2,
    self_attention 3), written to ``<tmp>/04_self_attention.ipynb``."""
    root = tmp_path_factory.mktemp("source")
    return fixtures.write_notebook(fixtures.source_notebook("04_self_attention"), root / "04_self_attention.ipynb")


@pytest.fixture(scope="session")
def ch04_notebook():
    """The chapter 4 source notebook as a NotebookNode (copy it before changing it)."""
    return fixtures.source_notebook("04_self_attention")


def file_digest(path: Path) -> str | None:
    """sha256 of a file's bytes, or None when it does not exist."""
    path = Path(path)
    if not path.exists():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_probe(code: str, *, graded=("softmax", "scaled_dot_product_attention", "self_attention"),
              limits=None, setup=(), tmp: Path, sandbox: bool = True, shared: bool = False):
    """Run ``code`` as a solution cell in the sandbox and return the RunOutcome.

    The cell's prints come back in ``outcome.stdout``; ``graded`` decides which
    modules of ``solutions`` are stripped. ``shared``: the process's library for these
    names (:func:`autograder.library.shared_library`, as grading uses), whose fork-server
    one probe after another reuses, instead of a library of the probe's own.
    """
    from autograder import wire
    from autograder.library import shared_library
    from autograder.sandbox import Limits, build_library, run_job

    tmp = Path(tmp)
    tmp.chmod(0o755)
    lib = shared_library(set(graded)) if shared else build_library(tmp / "lib", set(graded))
    job = tmp / "job"
    job.mkdir()
    (job / "job.json").write_text(
        json.dumps({"setup": list(setup), "cells": [{"grade_id": "probe", "exercise": "probe", "source": code}]}),
        encoding="utf-8",
    )
    wire.dump_bundle(str(job / "cases_probe"), [], {})
    return run_job(job, lib, limits or Limits(wall_seconds=60.0), sandbox=sandbox)


def run_piped_job(tmp: Path, source: str, limits=None):
    """Run one cell ``probe`` whose cases (one call with ``[1.0, 2.0]``) go through
    the cases pipe, as the grader sends them; return ``(outcome, job folder)``."""
    import numpy as np

    from autograder import wire
    from autograder.sandbox import Limits, build_library, case_frame, run_job

    tmp = Path(tmp)
    tmp.chmod(0o755)
    lib = build_library(tmp / "lib", {"softmax"})
    job = tmp / "job"
    job.mkdir()
    (job / "job.json").write_text(json.dumps({"setup": [], "cells": [
        {"grade_id": "probe", "exercise": "probe", "source": source}]}), encoding="utf-8")
    arrays: dict = {}
    specs = [{"kind": "function", "args": wire.encode([np.array([1.0, 2.0])], arrays),
              "kwargs": {"__dict__": []}, "seed": 0}]
    outcome = run_job(job, lib, limits or Limits(wall_seconds=SAFETY_WALL), cases=[("probe", case_frame("probe", specs, arrays))])
    return outcome, job


def probe_runner(tmp_path: Path, forked: bool = False):
    """``probe(code, **kw)``: each call runs code with :func:`run_probe` in a fresh
    folder under ``tmp_path`` (the sandbox, or the container mode where a test forces it).
    ``forked``: on the shared library, whose runs the fork-server makes (the caller sets
    ``AUTOGRADER_FORK_SERVER``)."""
    counter = [0]

    def _probe(code: str, **kw):
        counter[0] += 1
        where = tmp_path / f"probe{counter[0]}"
        where.mkdir()
        outcome = run_probe(code, tmp=where, shared=forked, **kw)
        if forked:
            from autograder import sandbox

            if sandbox.forks_runs():
                assert outcome.forked, "a probe meant for the fork-server started afresh"
        return outcome

    return _probe


@pytest.fixture(params=["fresh", "forked"])
def probe(request, tmp_path, needs_sandbox, monkeypatch):
    """``probe(code, **kw)`` runs code in a fresh sandbox (see :func:`run_probe`), once
    started afresh and once forked by the library's fork-server (:mod:`autograder.fork_server`;
    where this machine can have one: as root under bubblewrap): every wall holds both ways."""
    forked = request.param == "forked"
    monkeypatch.setenv("AUTOGRADER_FORK_SERVER", "always" if forked else "off")
    return probe_runner(tmp_path, forked=forked)
