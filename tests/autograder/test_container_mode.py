"""The container mode: grading where bubblewrap cannot start (no user namespaces).

Simulated by forcing ``AUTOGRADER_ISOLATION=container`` on a machine where bubblewrap
would work: each run then gets a fresh uid (as root), Landlock (reads: Python, the
system, its library and job; writes: its output folder; no TCP), ``unshare --net``
where permitted, and the sandbox's rlimits. The probes below are the container-mode
forms of ``test_sandbox.py``'s (that file's paths are bubblewrap's ``/job`` and
``/lib-grading`` mounts; here the job stays at its host path, given to the runner as
its first argument). The whole attack suite, ``test_cheats.py`` and
``test_sandbox.py``, is then rerun in this mode, less the tests whose attack or
assertion is written for bubblewrap's mount layout (each has its container form here).
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autograder import isolation
from autograder.sandbox import Limits
import test_attacks_regrade  # its class-reference attack, rerun below in the container mode
from conftest import NETWORK_PROBE, REPO, SAFETY_WALL, probe_runner, read_probe, run_piped_job, write_probe
from walls import cannot_start


def _container_problem() -> str | None:
    try:
        from autograder.confine import abi_version

        if abi_version() < 1:
            return "no Landlock in this kernel: the container mode refuses to start"
    except OSError as exc:
        return str(exc)
    if not sys.platform.startswith("linux"):
        return "Linux only"
    return None


@pytest.fixture
def container(monkeypatch):
    """Force the container mode for this test (and the runs it starts)."""
    problem = _container_problem()
    if problem:
        cannot_start("container mode (Landlock)", problem)
    monkeypatch.setenv(isolation.ENV, "container")
    isolation._CHOSEN.clear()
    yield isolation.container_plan()
    isolation._CHOSEN.clear()


@pytest.fixture
def cprobe(tmp_path, container):
    """``cprobe(code, **kw)`` runs code in a fresh run of the container mode (see :func:`conftest.run_probe`)."""
    return probe_runner(tmp_path)


PATHS = "import sys\nJOB = sys.argv[1]\nOUT = JOB + '/out'\n"


def test_the_mode_is_chosen_and_described(container):
    assert isolation.choose_isolation() == "container"
    line = isolation.describe("container")
    assert f"Landlock ABI {container['landlock_abi']}" in line
    assert ("unshare --net" in line) == container["unshare_net"]
    with pytest.raises(ValueError, match="bubblewrap, container or auto"):
        isolation.set_isolation("chroot")


def test_a_separate_user_without_capabilities_that_cannot_signal_the_grader(cprobe, container):
    if not container["separate_user"]:
        pytest.skip("not root: the container mode cannot change user here")
    out = cprobe(f"import os\nprint('uid', os.getuid())\n"
                 f"try:\n    os.kill({os.getpid()}, 0)\n    print('signal sent')\n"
                 f"except OSError as exc:\n    print('signal refused', exc.errno)\n"
                 "print(open('/proc/self/status').read())")
    uid = int(out.stdout.split()[1])
    assert uid not in (0, os.getuid())
    assert "signal refused" in out.stdout
    status = dict(line.split(":", 1) for line in out.stdout.splitlines() if ":" in line)
    allowed = 1 << 2 if container["read_search"] else 0  # CAP_DAC_READ_SEARCH where Python sits under /root
    assert int(status["CapEff"], 16) & ~allowed == 0
    assert int(status["CapPrm"], 16) & ~allowed == 0
    assert status["NoNewPrivs"].strip() == "1"


def test_the_reference_the_checks_and_other_submissions_are_unreadable(cprobe, tmp_path):
    other = tmp_path / "submitted" / "bob" / "04_self_attention.ipynb"
    other.parent.mkdir(parents=True)
    other.write_text('{"bob": "his own work"}')
    other.chmod(0o644)
    gradebook = tmp_path / "gradebook.db"
    gradebook.write_bytes(b"SQLite format 3\x00 grades of the whole class")
    gradebook.chmod(0o644)
    code = PATHS + textwrap.dedent(f"""
        import solutions
        print("softmax", hasattr(solutions, "softmax"))
        for name in ("solutions.attention", "autograder.checks"):
            try:
                __import__(name)
                print("importable", name)
            except ImportError:
                print("missing", name)
    """) + read_probe(f"""["{REPO}/solutions/attention.py", "{REPO}/autograder/checks/base.py", "{REPO}/book",
                           "{other}", "{gradebook}", "/etc/shadow", "/root"]""")
    out = cprobe(code).stdout
    assert "softmax False" in out
    assert "missing solutions.attention" in out and "missing autograder.checks" in out
    assert "read " not in out and out.count("unreadable") == 7, out


def test_it_writes_only_its_output_folder(cprobe, tmp_path):
    code = PATHS + write_probe(f"""[JOB + "/job.json", JOB + "/x", JOB + "/../lib/runner.py", "{REPO}/x", "/tmp/x",
                                    "/dev/shm/x", "{tmp_path}/x", OUT + "/x"]""")
    out = cprobe(code).stdout
    assert out.count("writable") == 1 and "/out/x" in out.split("writable")[1], out
    assert not (REPO / "x").exists() and not (tmp_path / "x").exists()


def test_no_network(cprobe, container):
    out = cprobe(NETWORK_PROBE).stdout
    assert "connected" not in out and out.count("refused") == 3
    if container["unshare_net"]:
        assert "['lo']" in out  # a fresh network namespace: loopback only


def test_limits_hold(cprobe):
    bomb = cprobe("import os\nn = 0\nwhile True:\n    try:\n        pid = os.fork()\n    except OSError:\n"
                  "        break\n    if pid == 0:\n        import time; time.sleep(30); os._exit(0)\n    n += 1\n"
                  "print('forked', n)", limits=Limits(wall_seconds=SAFETY_WALL, processes=32))
    assert 0 < int(bomb.stdout.split()[1]) < 32, bomb.stdout
    big = cprobe(PATHS + "import signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
                 "try:\n    open(OUT + '/big', 'wb').write(b'x' * (8 * 2**20))\n    print('wrote')\n"
                 "except OSError as exc:\n    print('refused', exc.errno)",
                 limits=Limits(wall_seconds=SAFETY_WALL, file_bytes=2**20))
    assert "refused 27" in big.stdout  # EFBIG
    spin = cprobe("while True:\n    pass", limits=Limits(wall_seconds=SAFETY_WALL, cpu_seconds=1))
    import signal

    # SIGXCPU at the soft limit, as the grader needs to call a graded endless loop a timeout
    # ("used more than N s of CPU time"): test_cheats.py's endless loop, graded in the
    # bubblewrap run only (SAME_IN_BOTH_MODES), stands on this in the container mode.
    assert not spin.timed_out and spin.signal == signal.SIGXCPU, (spin.signal, spin.stderr[-500:])
    flood = cprobe(PATHS + "chunk = b'x' * 2**20\nfor i in range(400):\n"
                   "    open(f'{OUT}/junk{i}', 'wb').write(chunk)\nimport time\ntime.sleep(60)",
                   limits=Limits(wall_seconds=SAFETY_WALL, scratch_bytes=50 * 2**20))
    assert flood.overflow  # the output folder is on the host's disk: polled and stopped


def test_cases_arrive_through_the_pipe(tmp_path, container):
    from autograder import tamper
    from autograder.checks.base import Result

    source = PATHS + "import os\nprint(sorted(os.listdir(JOB)))\ndef probe(x):\n    return 2 * x\n"
    outcome, _ = run_piped_job(tmp_path, source)
    assert [(kind, gid) for kind, gid, _, _ in outcome.frames] == [("start", "probe"), ("cases", "probe"),
                                                                  ("result", "probe")]
    assert "['job.json', 'out']" in outcome.stdout
    report, arrays = tamper.load_frame(*outcome.frames[2][2:])
    assert Result.from_encoded(report["cases"][0]["result"], arrays).value.tolist() == [2.0, 4.0]


# The tests of the two suites written for bubblewrap's mounts (/job, /lib-grading, a
# nested user namespace, a tmpfs output folder, an empty capability set); their
# container forms are above, and the README lists what the container mode does not cover.
# And the unsafe controls, which use no isolation at all: run once, in the bubblewrap run.
BUBBLEWRAP_LAYOUT = [
    "test_sandbox.py::test_runs_unprivileged_without_capabilities",
    "test_sandbox.py::test_filesystem_is_read_only_except_out_and_tmp",
    "test_sandbox.py::test_fork_bomb_in_a_nested_user_namespace_is_still_bounded",
    "test_sandbox.py::test_writing_too_much_to_the_scratch_dir_is_refused",
    "test_sandbox.py::test_file_size_limit",
    "test_sandbox.py::test_cases_arrive_through_the_pipe_when_asked_for",
    "test_sandbox.py::test_matplotlib_reads_the_font_list_built_once_and_cannot_change_it",  # a bubblewrap mount
    "test_cheats.py::test_patching_and_hooks_earn_nothing[forge_result_files]",
    "test_cheats.py::test_cases_are_out_of_reach_before_and_outside_their_check",
    "test_cheats.py::test_the_case_search_finds_case_files_where_there_are_some",
    # the controls graded without any sandbox: the same plain subprocess in both modes
    "test_cheats.py::test_the_same_attacks_work_without_the_sandbox",
]


# The attacks of test_cheats.py whose whole path is code the two modes share, so that the
# container mode cannot change their outcome; they are graded once, in the bubblewrap run.
# What differs between the modes is only how the runner is started and walled in
# (sandbox._start_run: bwrap's namespaces and mounts, or setpriv's fresh uid, Landlock,
# seccomp and unshare; the limits as cgroup and prlimit; every process of the run's uid
# killed at the end; the exit status read through bwrap or not, sandbox._exit_status).
# The same runner.py then runs the cells and answers the same pipes, and the grader reads
# and judges the frames with the same code (sandbox._watch, _Frames, _Capped, grading).
# So an attack can answer differently only if it reaches the filesystem, the network,
# other processes or signals, the limits, or ends its process. These do not:
# * comparisons and random generators patched in the student's process (the judge runs
#   in the grader), IPython hooks and tracers (the runner is no IPython), objects lying
#   about equality (the wire encodes data whichever wall is around it): one of each kind
#   (patch_np_allclose, tensor_subclass_disguised_as_torch_tensor) stays in the rerun;
# * the cell that raises SystemExit when called (the runner's Python catches it, as it
#   does the cell-level sys_exit, which stays);
# * forged frames and a closed result pipe (the grader's frame reader decides, on the
#   same pipe in both modes): forge_frame_for_other_exercise, which writes to the pipe's
#   descriptor as handed through either wall, stays; the output flood (capped by the
#   grader's reader of the same stdout pipe);
# * the endless loop: the CPU limit is the same prlimit in both modes, and how the
#   container mode's run ends on it (not timed out, SIGXCPU, read without bwrap) is
#   test_limits_hold's spin above; the grader's reading of that end is shared.
# Every escape stays: the reference read, imported or searched for on disk, files written
# outside, the network, the parent and every process killed, the process ended by
# os._exit, SIGTERM or SIGINT, and the fork bomb (the run's uid cleared after it) and
# the memory hog (a memory cgroup, or RLIMIT_AS alone).
SAME_IN_BOTH_MODES = [
    *(f"test_cheats.py::test_patching_and_hooks_earn_nothing[{attack}]" for attack in (
        "patch_np_testing", "patch_torch_allclose", "patch_tensor_eq", "replace_rngs", "ipython_run_cell_replaced",
        "settrace_setprofile_hooks", "output_flood")),
    "test_cheats.py::test_ipython_input_transformers_earn_nothing",
    "test_cheats.py::test_objects_lying_about_equality_cannot_cross",
    "test_cheats.py::test_ndarray_subclass_with_lying_comparisons",
    "test_cheats.py::test_ending_the_kernel_is_flagged_and_the_rest_is_graded[sys_exit_when_called]",
    "test_cheats.py::test_forged_result_with_a_factory_is_rejected",
    "test_cheats.py::test_tampering_with_the_result_pipe",
    "test_cheats.py::test_resource_hogs_are_bounded_and_the_rest_is_graded[endless_loop",
]


SUITES = ["test_cheats.py", "test_sandbox.py"]


@pytest.mark.slow
def test_the_attack_suites_in_container_mode(container):
    """Every attack of ``test_cheats.py`` whose outcome the isolation can change and
    every probe of ``test_sandbox.py`` that does not name bubblewrap's mounts, graded in
    the container mode, both suites in one pytest (a pytest of its own costs about 6.7 CPU s
    to start and collect, measured; two of them, one per suite, started it twice). Only the
    tests that start a run are rerun (``runs_only``: those that need the sandbox); the
    others never reach the isolation and have run once already, as have the attacks of
    :data:`SAME_IN_BOTH_MODES`."""
    here = Path(__file__).resolve().parent
    deselect = []
    for item in [*BUBBLEWRAP_LAYOUT, *SAME_IN_BOTH_MODES]:
        assert item.split("::", 1)[0] in SUITES, item
        deselect += ["--deselect", f"{here.relative_to(REPO)}/{item}"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(here)]), **{isolation.ENV: "container"})
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "runs_only", "-x",
                           "-rA", *(str(here / suite) for suite in SUITES), *deselect], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and " failed" not in done.stdout
    passed = {line.split()[1].split("::", 1)[0].rsplit("/", 1)[-1] for line in done.stdout.splitlines()
              if line.startswith("PASSED ")}
    assert passed == set(SUITES), f"each suite runs some of its tests here, not only {passed}"


@pytest.mark.slow
def test_a_regrade_with_its_references_sandbox_in_container_mode(container, tmp_path):
    """A regrade's references run in a sandbox of their own, in the container mode too: the
    attacker of ``test_attacks_regrade.py`` whose chapter-7 ``EncoderLayer`` is regraded
    with the reference ``PositionwiseFeedForward`` (a module stand-in: its forward and
    gradients run in the references' sandbox, a separate uid under Landlock) hunts through
    its process for the reference, finds nothing and keeps full marks, and the honest
    student beside it gets the same page. That test's body, run here with the mode forced
    as every test of this file forces it (each run, the references' included, reads the
    mode as it starts): no second pytest to start and collect (6 CPU s measured)."""
    test_attacks_regrade.test_a_class_reference_runs_outside_the_graded_process(tmp_path, needs_sandbox=None)
