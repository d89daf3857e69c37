"""The grading fork-server (:mod:`autograder.fork_server`, :mod:`autograder.zygote`): a run it
makes keeps every wall of a fresh start (``test_sandbox.py`` runs each wall both ways through
the ``probe`` fixture), nothing one run leaves reaches the next, the zygote never holds a
byte of a submission, and grading never depends on it."""
from __future__ import annotations

import json
import logging
import os
import re
import secrets
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from conftest import SAFETY_WALL, run_probe

from autograder import fork_server, sandbox
from autograder.library import shared_library
from autograder.sandbox import Limits

GRADED = ("softmax", "scaled_dot_product_attention", "self_attention")


@pytest.fixture
def forking(needs_sandbox, monkeypatch):
    """Every run on a shared library made by its fork-server (``always``)."""
    if not sandbox.forks_runs():
        pytest.skip("no fork-server here: the grader is not root under bubblewrap (runs start afresh)")
    monkeypatch.setenv(fork_server.MODE_ENV, "always")


def _server() -> fork_server.ForkServer:
    lib = str(shared_library(set(GRADED)))
    (server,) = [s for key, s in fork_server._SERVERS.items() if key[0] == lib]
    return server


def _zygote_pid(server: fork_server.ForkServer) -> int:
    """The zygote's pid (bubblewrap's grandchild) as this process sees it."""
    todo = [server.proc.pid]
    while todo:
        pid = todo.pop()
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if os.path.basename(args[0]).startswith(b"python") and any(a.endswith(b"/zygote.py") for a in args):
                return pid  # the interpreter itself, not bubblewrap, whose arguments name it too
            todo += [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        except OSError:
            continue
    raise AssertionError("no zygote process under the fork-server's bubblewrap")


_LEAVE = textwrap.dedent("""
    import ctypes, os, socket, subprocess, sys, time, torch
    for path in ["/tmp/left", "/job/out/left", "/tmp/matplotlib/left", "/dev/shm/left", "/left", "/job/left",
                 "/lib-grading/left", "/dev/left"]:
        try:
            with open(path, "w") as fh:
                fh.write("x")
            print("wrote", path)
        except OSError:
            pass
    libc = ctypes.CDLL(None, use_errno=True)
    print("shm", libc.shmget(0x5A5A, 4096, 0o1666))          # IPC_CREAT | 0666
    listener = socket.socket(socket.AF_UNIX)
    listener.bind("\\0left-behind")                           # an abstract socket: per network namespace
    listener.listen()
    torch.left_behind = True                                  # in this process's copy of the modules
    os.environ["LEFT"] = "1"
    subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); time.sleep(600)"],
                     start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    print("uid", os.getuid())
""")

_FIND = textwrap.dedent("""
    import ctypes, os, socket, torch
    found = [p for p in ["/tmp/left", "/job/out/left", "/tmp/matplotlib/left", "/dev/shm/left", "/left", "/job/left",
                         "/lib-grading/left", "/dev/left"] if os.path.exists(p)]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.shmget(0x5A5A, 0, 0) != -1:
        found.append("shm")
    try:
        socket.socket(socket.AF_UNIX).connect("\\0left-behind")
        found.append("abstract socket")
    except OSError:
        pass
    if getattr(torch, "left_behind", False):
        found.append("torch attribute")
    if "LEFT" in os.environ:
        found.append("environment")
    others = sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, os.getpid()))
    if others:
        found.append(f"processes {others}")
    print("found", found)
    print("uid", os.getuid(), "pid", os.getpid())
""")


def test_nothing_a_forked_run_leaves_reaches_the_next(forking, tmp_path):
    """Run one writes wherever it can, makes a SysV segment and an abstract socket, changes
    torch and its environment and leaves a process behind in a session of its own; the
    next run of the same zygote finds none of it, has another uid, and the first run's
    process is gone from the machine."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    left = run_probe(_LEAVE, tmp=tmp_path / "a", shared=True, limits=Limits(wall_seconds=SAFETY_WALL))
    assert left.forked and left.returncode == 0, left.stderr
    assert set(re.findall(r"wrote (\S+)", left.stdout)) == {"/tmp/left", "/job/out/left", "/tmp/matplotlib/left"}, left.stdout
    assert "shm -1" not in left.stdout
    uid = int(re.search(r"uid (\d+)", left.stdout).group(1))
    found = run_probe(_FIND, tmp=tmp_path / "b", shared=True, limits=Limits(wall_seconds=SAFETY_WALL))
    assert found.forked and found.returncode == 0, found.stderr
    assert "found []" in found.stdout, found.stdout
    assert f"uid {uid} " not in found.stdout and "pid 2" in found.stdout
    survivors = subprocess.run(["pgrep", "-u", str(uid)], capture_output=True, text=True)
    assert survivors.stdout.strip() == "", f"the first run's processes outlived it: {survivors.stdout}"


def test_the_zygote_never_holds_a_byte_of_a_submission(forking, tmp_path):
    """The run reads its job through the job folder's descriptor after it has left the
    zygote: a marker in the submission's source, in its output and in a file it writes is
    nowhere in the zygote's memory afterwards (read from ``/proc/PID/mem``)."""
    marker = f"canary-{secrets.token_hex(8)}"
    code = f"open('/job/out/x', 'w').write({marker!r} * 100)\nprint({marker!r})\n"
    out = run_probe(code, tmp=tmp_path, shared=True, limits=Limits(wall_seconds=SAFETY_WALL))
    assert out.forked and marker in out.stdout, out.stderr
    pid = _zygote_pid(_server())
    needles = {marker.encode(): False, b"/lib-grading/zygote.py": False}  # the second: the zygote's own argv
    seen = 0
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            fields = line.split()
            span, perms, path = fields[0], fields[1], (fields[5] if len(fields) > 5 else "")
            if "r" not in perms or ("w" not in perms and path not in ("", "[heap]", "[stack]")):
                continue  # only what the zygote can have written: its heap, stack and writable mappings
            start, end = (int(x, 16) for x in span.split("-"))
            for at in range(start, end, 2**20):
                try:
                    mem.seek(at)
                    chunk = mem.read(min(2**20 + 64, end - at))
                except (OSError, ValueError, OverflowError):
                    continue
                seen += len(chunk)
                for needle in needles:
                    needles[needle] = needles[needle] or needle in chunk
    assert seen > 32 * 2**20, seen  # the interpreter's and torch's heap were read
    assert needles[b"/lib-grading/zygote.py"], "the search cannot find what the zygote does hold"
    assert not needles[marker.encode()], "the submission's marker is in the zygote's memory"


def _run_on(lib: Path, where: Path, code: str = "print('ran')"):
    """One run of ``code`` as a cell, on the library ``lib``, in a fresh job folder ``where``."""
    from autograder import wire

    where.mkdir()
    where.chmod(0o755)
    (where / "job.json").write_text(json.dumps({"setup": [], "cells": [
        {"grade_id": "probe", "exercise": "probe", "source": code}]}), encoding="utf-8")
    wire.dump_bundle(str(where / "cases_probe"), [], {})
    return sandbox.run_job(where, lib, Limits(wall_seconds=SAFETY_WALL))


def test_auto_forks_from_a_shared_librarys_first_run_and_any_others_second(needs_sandbox, monkeypatch, tmp_path):
    """``auto`` (the default): a library grading shares across the process
    (``shared_library``) is served by its zygote from its first run; any other library's
    first run starts afresh and the later ones are forked; ``off``: every run starts afresh."""
    if not sandbox.forks_runs():
        pytest.skip("no fork-server here: the grader is not root under bubblewrap")
    from autograder.library import build_library

    monkeypatch.setenv(fork_server.MODE_ENV, "auto")
    tmp_path.chmod(0o755)
    own = build_library(tmp_path / "lib", {"masked_softmax"})
    runs = [_run_on(own, tmp_path / f"own{i}") for i in range(3)]
    assert [r.forked for r in runs] == [False, True, True] and all("ran" in r.stdout for r in runs)
    shared = shared_library({"masked_softmax", "softmax"})
    assert _run_on(shared, tmp_path / "shared").forked
    monkeypatch.setenv(fork_server.MODE_ENV, "off")
    off = _run_on(shared, tmp_path / "off")
    assert not off.forked and "ran" in off.stdout


def test_a_zygote_outlives_the_thread_that_first_used_it(forking, tmp_path):
    """bubblewrap's ``--die-with-parent`` follows the thread that started it: zygotes are
    started by one long-lived thread, so a run from a thread that has ended leaves a
    zygote the next run still uses."""
    results = []
    (tmp_path / "t").mkdir()
    worker = threading.Thread(target=lambda: results.append(
        run_probe("print('ran')", tmp=tmp_path / "t", shared=True)))
    worker.start()
    worker.join()
    server = _server()
    (tmp_path / "main").mkdir()
    again = run_probe("print('ran')", tmp=tmp_path / "main", shared=True)
    assert results[0].forked and again.forked and server.alive() and _server() is server


def test_a_zygote_that_cannot_start_leaves_runs_to_start_afresh(forking, monkeypatch, tmp_path, caplog):
    """A broken zygote is reported once and not tried again; the run itself is unharmed."""
    monkeypatch.setattr(sandbox, "_zygote_command", lambda lib, fonts: (["/bin/false"], {}))
    monkeypatch.setattr(fork_server, "START_SECONDS", 10.0)
    monkeypatch.setattr(fork_server, "_BROKEN", set())  # this test's broken zygote is forgotten after it
    graded = ("positional_encoding",)
    lib = str(shared_library(set(graded)))
    with caplog.at_level(logging.WARNING, logger="autograder.fork_server"):
        runs = []
        for i in range(2):
            (tmp_path / str(i)).mkdir()
            runs.append(run_probe("print('ran')", graded=graded, tmp=tmp_path / str(i), shared=True))
    assert [r.forked for r in runs] == [False, False] and all(r.returncode == 0 and "ran" in r.stdout for r in runs)
    assert sum("no fork-server" in rec.message for rec in caplog.records) == 1
    assert any(key[0] == lib for key in fork_server._BROKEN)


def test_exit_statuses_are_the_same_both_ways(probe):
    """How a run ended reads the same whether it was forked or started afresh."""
    assert probe("import os\nos._exit(5)").returncode == 5
    killed = probe("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    assert killed.returncode is None and killed.signal == 9
    assert probe("print('done')").returncode == 0


@pytest.mark.parametrize("program, status, err", [
    ("def main():\n    return 0", 0, ""),
    ("def main():\n    return 7", 7, ""),
    ("import sys\ndef main():\n    sys.exit(3)", 3, ""),
    ("import sys\ndef main():\n    sys.exit('bad input')", 1, "bad input"),
    ("def main():\n    raise ValueError('boom')", 1, "ValueError: boom"),
])
def test_exit_now_ends_a_program_as_python_would(tmp_path, program, status, err):
    """The sandbox programs end through ``runner.exit_now`` (no module teardown): the same
    status and stderr as Python's own exit, ``atexit`` callbacks run, output flushed."""
    script = tmp_path / "program.py"
    script.write_text(program + textwrap.dedent("""
        import atexit, sys
        atexit.register(lambda: print("atexit ran"))
        sys.stdout.write("unflushed")
        from autograder.runner import exit_now
        exit_now(main)
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(Path(sandbox.__file__).parent.parent)})
    assert done.returncode == status
    assert done.stdout == "unflushedatexit ran\n"
    assert err in done.stderr and (err or done.stderr == "")


def test_the_zygote_request_carries_no_job_content():
    """What the trusted side sends the zygote: the script, the limits, the uid, the sizes
    and descriptors, never the job's files (the run reads those itself)."""
    sent = {}

    class Control:
        def sendmsg(self, buffers, ancillary):
            sent["request"] = json.loads(buffers[0])
            raise OSError("stop here")

        def settimeout(self, _):
            pass

        def fileno(self):
            return 99

    server = fork_server.ForkServer.__new__(fork_server.ForkServer)
    server.lock = threading.Lock()
    server.control = Control()
    job = Path(os.environ.get("TMPDIR", "/tmp"))
    with pytest.raises(fork_server.ForkServerError):
        server.spawn(script="runner.py", args=["--result-fd", "pipe:0"], pipes={0: 0}, job_dir=job, uid=1234567,
                     rlimits={"RLIMIT_CORE": [0, 0]}, tmp_bytes=1, scratch_bytes=2, font_list=None)
    assert set(sent["request"]) == {"script", "args", "fds", "uid", "limits", "tmp_bytes", "scratch_bytes",
                                    "font_list"}
    assert sent["request"]["fds"] == ["status", "stdout", "stderr", "job", "pipe:0"]


@pytest.mark.parametrize("pidfds", [True, False], ids=["pidfd", "no-pidfd"])
def test_a_forked_run_past_its_wall_time_dies_with_its_namespace(forking, monkeypatch, tmp_path, pidfds):
    """The trusted side kills a forked run's first process (through a pidfd, or by pid on a
    kernel without pidfds): its PID namespace, the process the run started in a session of
    its own included, dies with it, and the run reads as timed out."""
    if not pidfds:
        monkeypatch.setattr(os, "pidfd_open", lambda pid: (_ for _ in ()).throw(OSError(38, "no pidfds")))
    uid = 1_000_000 + secrets.randbelow(1_000_000_000)
    monkeypatch.setattr(sandbox, "_fresh_uid", lambda: uid)  # the run's uid, known whatever it printed
    code = textwrap.dedent("""
        import os, subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); time.sleep(600)"],
                         start_new_session=True)
        while True:
            time.sleep(1)
    """)
    out = run_probe(code, tmp=tmp_path, shared=True, limits=Limits(wall_seconds=20.0))
    assert out.forked and out.timed_out and out.returncode is None
    assert subprocess.run(["pgrep", "-u", str(uid)], capture_output=True, text=True).stdout.strip() == ""


def test_what_the_wall_binds_below_tmp_stays_in_a_forked_runs_fresh_tmp(forking, monkeypatch, tmp_path):
    """An interpreter or venv below ``/tmp`` (a clean clone's ``.venv`` in ``/tmp/check``) is
    bound into the wall below ``/tmp``; a forked run's fresh ``/tmp`` keeps it, read-only, as a
    fresh start's does (it was hidden once: every import not preloaded failed)."""
    if not str(tmp_path).startswith("/tmp/"):
        pytest.skip("pytest's folders are not below /tmp here")
    from autograder.library import build_library

    tmp_path.chmod(0o755)
    extra = tmp_path / "interpreter"
    extra.mkdir(mode=0o755)
    (extra / "marker.txt").write_text("found")
    roots = sandbox._python_roots()
    monkeypatch.setattr(sandbox, "_python_roots", lambda: [*roots, extra])
    lib = build_library(tmp_path / "lib", {"softmax"})
    code = textwrap.dedent(f"""
        print(open({str(extra / 'marker.txt')!r}).read())
        open("/tmp/mine", "w").write("x")
        print("tmp writable")
        try:
            open({str(extra / 'x')!r}, "w")
            print("interpreter writable")
        except OSError:
            print("interpreter read-only")
    """)
    out = _run_on(lib, tmp_path / "job", code)
    assert out.forked, out.stderr
    assert "found\ntmp writable\ninterpreter read-only" in out.stdout, out.stdout + out.stderr
