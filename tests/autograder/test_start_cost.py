"""What a sandbox start costs, and how it is counted: the library a run imports is built
and byte-compiled once per process (:mod:`autograder.library`); the benchmark counts the
CPU time of the sandboxes too (:mod:`autograder.bench`). The runner's deferred imports
are tested with the runner (``test_runner.py``)."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from autograder import bench, library


def test_a_shared_library_is_byte_compiled_once_for_the_runs_to_read(tmp_path):
    """``shared_library`` compiles every module of its packages beside it, readable by the
    sandbox's uid, and a run with ``-B`` (no cache written) reads those instead of
    compiling; the scripts at the top get none (Python keeps no cache of a script)."""
    package = tmp_path / "solutions"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from .a import f\n")
    (package / "a.py").write_text("def f():\n    return 1\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "b.py").write_text("from ..a import f\n\nVALUE = f() + 1\n")
    lib = library.shared_library(set(), solutions_dir=package)
    modules = sorted(p for p in lib.rglob("*.py") if p.parent != lib)
    assert {p.relative_to(lib).as_posix() for p in modules} >= {
        "solutions/__init__.py", "solutions/a.py", "solutions/sub/b.py", "autograder/__init__.py", "autograder/wire.py"}
    for module in modules:
        compiled = importlib.util.cache_from_source(str(module))
        assert os.path.isfile(compiled), module
        assert os.stat(compiled).st_mode & 0o777 == 0o644 and os.stat(os.path.dirname(compiled)).st_mode & 0o777 == 0o755
    assert not (lib / "__pycache__").exists()
    elsewhere = tmp_path / "elsewhere"  # not beside the original package (``-c`` puts the cwd first)
    elsewhere.mkdir()
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(lib), "PYTHONVERBOSE": "1"}
    done = subprocess.run([sys.executable, "-s", "-B", "-c", "import solutions.sub.b as b; print(b.VALUE)"],
                          env=env, capture_output=True, text=True, timeout=120, cwd=elsewhere)
    assert done.returncode == 0 and done.stdout.strip() == "2", done.stderr[-2000:]
    for name in ("__init__", "a", "sub/b"):
        source = lib / "solutions" / f"{name}.py"
        assert f"{importlib.util.cache_from_source(str(source))} matches {source}" in done.stderr, name
    compiled_afresh = [line for line in done.stderr.splitlines() if line.startswith("# code object from")
                       and str(lib) in line and not line.rstrip("'").endswith(".pyc")]
    assert not compiled_afresh


def test_the_benchmark_counts_the_cpu_time_of_processes_its_command_orphans(tmp_path):
    """A sandbox's init is orphaned when its bubblewrap exits (the grader never waits for
    it); the benchmark's timed commands run under a reaper that adopts and waits for such
    orphans, so their CPU time is counted. Here a command leaves a child burning 0.3 CPU s
    behind it, unwaited."""
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3:\n    pass\n"
    orphaning = [sys.executable, "-c", f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {burn!r}])"]
    with bench._Timer() as timer:
        bench._run(orphaning, tmp_path, dict(os.environ))
    assert timer.cpu >= 0.3
    with pytest.raises(RuntimeError, match="failed \\(3\\)"):  # the command's own status comes through
        bench._run([sys.executable, "-c", "raise SystemExit(3)"], tmp_path, dict(os.environ))
