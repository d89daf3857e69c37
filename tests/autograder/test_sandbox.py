"""The sandbox itself: what student code can see, reach and use.

Each test runs a probe cell with :func:`conftest.run_probe` and reads what it
printed; the limits are shrunk so the tests stay fast.
"""
from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from autograder.sandbox import Limits, build_library
from autograder.withhold import graded_modules, import_target, module_names
from conftest import NETWORK_PROBE, REPO, SAFETY_WALL, read_probe, run_piped_job, write_probe
from walls import cannot_start

CH04 = {"softmax", "scaled_dot_product_attention", "self_attention"}


# --------------------------------------------------------------------------- the stripped library


def test_graded_modules_chapter4_strips_attention_and_what_computes_a_softmax():
    stripped = graded_modules(CH04)
    assert "solutions.attention" in stripped
    # masked_softmax(torch.from_numpy(x), None) is a softmax: chapter 6's module
    # (and every module that imports it) is withheld while chapter 4 is graded.
    assert {"solutions.masking", "solutions.multihead", "solutions.kv_cache"} <= stripped
    assert "solutions" not in stripped
    assert "solutions.positional" not in stripped and "solutions.embeddings" not in stripped


def test_a_softmax_that_delegates_to_a_later_chapter_has_nothing_to_call(tmp_path):
    lib = build_library(tmp_path / "lib", CH04)
    kept = {p.stem for p in (lib / "solutions").glob("*.py")}
    assert "masking" not in kept
    init = (lib / "solutions" / "__init__.py").read_text()
    assert "masked_softmax" not in init.replace("# ", "")


# Per chapter: the exercises graded, and what else in `solutions` computes one of them.
_CHAPTERS = {
    "01": {"rnn_forward", "hidden_state_jacobian_norms"},
    "02": {"build_vocab", "encode", "learn_bpe", "bpe_tokenize", "one_hot", "cosine_similarity", "TokenEmbedding"},
    "03": {"sinusoidal_positional_encoding", "PositionalEncoding", "relative_position_matrix"},
    "04": CH04,
    "05": {"split_heads", "merge_heads", "MultiHeadAttention"},
    "06": {"padding_mask", "causal_mask", "decoder_mask", "masked_softmax"},
    "07": {"layer_norm", "PositionwiseFeedForward", "ResidualSublayer", "EncoderLayer"},
    "08": {"DecoderLayer", "Transformer", "count_parameters"},
    "09": {"make_decoder_io", "noam_lr", "label_smoothed_cross_entropy", "label_smoothing_floor"},
    "10": {"greedy_decode", "beam_search"},
}


@pytest.mark.parametrize("chapter", sorted(_CHAPTERS))
def test_no_kept_module_defines_or_computes_a_graded_exercise(chapter, tmp_path):
    """What each chapter's stripped library holds (printed on failure): no graded
    name and no object known to compute one (``COMPUTES_EXERCISES``)."""
    from autograder.withhold import COMPUTES_EXERCISES, withheld_names

    graded = _CHAPTERS[chapter]
    lib = build_library(tmp_path / "lib", graded)
    withheld = withheld_names(graded)
    assert {o for o, computes in COMPUTES_EXERCISES.items() if set(computes) & graded} <= withheld
    kept = sorted(p.relative_to(lib).as_posix() for p in (lib / "solutions").rglob("*.py"))
    for path in (lib / "solutions").rglob("*.py"):
        if path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text())
        defined = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        assert not defined & withheld, f"chapter {chapter}: {path.name} defines {defined & withheld}; kept {kept}"


def test_graded_modules_are_closed_under_importers():
    """Stripping masking (chapter 6) takes every module that imports it, directly or not."""
    stripped = graded_modules({"masked_softmax"})
    assert "solutions.masking" in stripped
    assert "solutions.multihead" in stripped  # from .masking import masked_softmax
    assert "solutions.layers" in stripped  # from .multihead import ...
    assert "solutions.model" in stripped  # from .layers import ...
    assert "solutions.app.trainer" in stripped  # from ..masking import ..., in the application's subpackage
    files = module_names(REPO / "solutions", "solutions")
    for name in stripped - {"solutions.masking"}:
        imported = {
            import_target(node, name, files[name].name == "__init__.py")
            for node in ast.walk(ast.parse(files[name].read_text())) if isinstance(node, ast.ImportFrom) and node.level
        }
        assert imported & stripped, name
    assert "solutions.embeddings" not in stripped
    assert "solutions.positional" not in stripped
    assert "solutions.app" not in stripped  # the subpackage's __init__ imports nothing


def test_import_target_reads_relative_imports_in_subpackages():
    def target(source, module, is_package=False):
        return import_target(ast.parse(source).body[0], module, is_package)

    assert target("from .masking import x", "solutions.multihead") == "solutions.masking"
    assert target("from ..training import x", "solutions.app.trainer") == "solutions.training"
    assert target("from .data import x", "solutions.app.trainer") == "solutions.app.data"
    assert target("from . import data", "solutions.app", is_package=True) == "solutions.app"
    assert target("from ..model import x", "solutions.app", is_package=True) == "solutions.model"
    assert target("from solutions.app.data import x", "tests") == "solutions.app.data"


def test_build_library_leaves_no_definition_of_the_graded_names(tmp_path):
    lib = build_library(tmp_path / "lib", CH04)
    assert (lib / "runner.py").is_file() and (lib / "autograder" / "wire.py").is_file()  # the runner imports the wire format
    assert "def check" in (lib / "autograder" / "__init__.py").read_text()
    assert not (lib / "solutions" / "attention.py").exists()
    for path in (lib / "solutions").rglob("*.py"):
        tree = ast.parse(path.read_text())
        defined = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        assert not defined & {"scaled_dot_product_attention", "self_attention"}, path
        top = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        assert "softmax" not in top, path
    assert not list(lib.rglob("__pycache__"))


# --------------------------------------------------------------------------- what the code sees


def test_runs_unprivileged_without_capabilities(probe):
    out = probe("import os\nprint('uid', os.getuid())\nprint(open('/proc/self/status').read())")
    uid = int(out.stdout.split()[1])
    assert uid != 0
    status = dict(line.split(":", 1) for line in out.stdout.splitlines()[1:] if ":" in line)
    assert status["CapEff"].strip() == "0000000000000000"
    assert status["CapPrm"].strip() == "0000000000000000"
    assert status["NoNewPrivs"].strip() == "1"


def test_reference_and_repository_are_invisible(probe):
    code = textwrap.dedent(f"""
        import os
        import solutions
        print("softmax" , hasattr(solutions, "softmax"))
        print("masked_softmax", hasattr(solutions, "masked_softmax"))
        print("PositionalEncoding", hasattr(solutions, "PositionalEncoding"))
        try:
            import solutions.attention
            print("attention module", "importable")
        except ImportError:
            print("attention module", "missing")
        try:
            import autograder.checks
            print("checks", "importable")
        except ImportError:
            print("checks", "missing")
    """) + read_probe(f"""["{REPO}/solutions/attention.py", "{REPO}/autograder/checks/base.py", "{REPO}/book",
                           "{REPO}/.git"]""")
    out = probe(code).stdout
    assert "softmax False" in out
    assert "masked_softmax False" in out  # it computes a softmax: withheld from chapter 4
    assert "PositionalEncoding True" in out  # other chapters' building blocks stay usable
    assert "attention module missing" in out
    assert "checks missing" in out
    assert "read " not in out
    assert out.count("unreadable") == 4


def test_filesystem_is_read_only_except_out_and_tmp(probe, tmp_path):
    code = write_probe(f"""["/usr/lib/x", "/job/job.json", "/job/x", "/lib-grading/runner.py", "/x",
                            "{REPO}/x", "/etc/x", "/dev/shm/x", "/job/out/x", "/tmp/x"]""")
    out = probe(code).stdout
    assert "writable /job/out/x" in out
    assert "writable /tmp/x" in out
    assert out.count("writable") == 2, out
    assert not (REPO / "x").exists()


def test_matplotlib_reads_the_font_list_built_once_and_cannot_change_it(probe, monkeypatch):
    """Every run mounts, read-only in its matplotlib folder, the font list built once in
    a sandbox of its own (``sandbox._font_list``): matplotlib reads it instead of
    searching the fonts (about 0.3 CPU s of each start), the run cannot change it, and
    it is, byte for byte, the list a run without it builds for itself."""
    import json

    from autograder import sandbox

    fonts = sandbox._font_list()
    assert fonts is not None and fonts.is_file()  # matplotlib is installed: the book's figures use it
    mounted = f"/tmp/matplotlib/{fonts.name}"
    code = textwrap.dedent(f"""
        import os, matplotlib.font_manager as fm
        print("fonts", len(fm.fontManager.ttflist), sorted(os.listdir("/tmp/matplotlib")))
        print("list", open({mounted!r}).read().strip())
    """) + write_probe(f"[{mounted!r}]")
    out = probe(code)
    assert f"refused {mounted}" in out.stdout and out.stderr == "", out.stderr  # read, not rebuilt and saved
    assert f"fonts {len(json.loads(fonts.read_text())['ttflist'])} {[fonts.name]!r}" in out.stdout
    monkeypatch.setattr(sandbox, "_font_list", lambda: None)  # as before: the run searches the fonts itself
    own = probe(code)
    assert f"writable {mounted}" in own.stdout
    assert own.stdout.split("list ", 1)[1].split(f"\nwritable {mounted}")[0] == fonts.read_text().strip()


def test_no_network(probe):
    out = probe(NETWORK_PROBE).stdout
    assert "connected" not in out
    assert out.count("refused") == 3
    assert "['lo']" in out  # a fresh network namespace: loopback only


# --------------------------------------------------------------------------- limits


@pytest.mark.slow
def test_fork_bomb_is_bounded_by_the_process_limit(probe):
    code = textwrap.dedent("""
        import os, time
        children = 0
        for _ in range(10_000):
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            children += 1
        print("children", children)
    """)
    out = probe(code, limits=Limits(wall_seconds=SAFETY_WALL, processes=32))
    children = int(out.stdout.split()[-1])
    assert 0 < children < 32
    assert not out.timed_out


def test_fork_bomb_in_a_nested_user_namespace_is_still_bounded(probe):
    code = textwrap.dedent("""
        import os, subprocess, sys
        bomb = "import os\\nn = 0\\nwhile True:\\n    try:\\n        pid = os.fork()\\n    except OSError:\\n        break\\n    if pid == 0:\\n        os.closerange(0, 3); import time; time.sleep(20); os._exit(0)\\n    n += 1\\nprint('nested', n)"
        try:
            r = subprocess.run(["unshare", "-U", "-r", sys.executable, "-c", bomb], capture_output=True, text=True, timeout=20)
            print(r.stdout.strip() or "nested 0", r.returncode)
        except Exception as exc:
            print("nested 0", type(exc).__name__)
    """)
    out = probe(code, limits=Limits(wall_seconds=SAFETY_WALL, processes=32))
    nested = int(out.stdout.split()[1])
    assert 0 < nested < 32, out.stdout


def test_memory_hog_gets_memory_error(probe):
    code = textwrap.dedent("""
        try:
            block = bytearray(16 * 2**30)
            print("allocated")
        except MemoryError:
            print("MemoryError")
    """)
    out = probe(code, limits=Limits(wall_seconds=SAFETY_WALL, memory_bytes=2 * 2**30))
    assert "MemoryError" in out.stdout


_MEMFD_HOG = """
import os
chunk = b"x" * 2**20
holders, held = [], 0
for i in range(6):  # six files of 128 MiB (each under RLIMIT_FSIZE): 1.5 x the run's 512 MiB
    fd = os.memfd_create(f"hog{i}")
    holders.append(fd)
    for _ in range(128):
        os.write(fd, chunk)
        held += 1
print("held", held, "MiB outside any mapping")
"""


def test_memory_in_files_is_bounded_by_the_run_cgroup(probe):
    """memfd and /dev/shm pages are never mapped, so RLIMIT_AS cannot see them; the
    run's memory cgroup does: 1.5 x its limit and the kernel stops the run."""
    from autograder import cgroup

    ok, why = cgroup.available()
    if not ok:
        cannot_start("memory cgroup", f"no memory cgroup here ({why}); RLIMIT_AS alone bounds each process")
    out = probe(_MEMFD_HOG, limits=Limits(wall_seconds=SAFETY_WALL, run_memory_bytes=512 * 2**20))
    assert "held 768 MiB" not in out.stdout, out.stdout
    assert out.memory_exceeded, out
    assert out.memory_peak_bytes is None or out.memory_peak_bytes <= 512 * 2**20


def test_the_run_cgroup_leaves_no_process_behind(probe):
    """Processes that leave the runner's session are still members of the run's
    cgroup: when the run ends they are killed, and the cgroup (which cannot be
    removed while it has a member) is gone."""
    from autograder import cgroup

    if not cgroup.available()[0]:
        cannot_start("memory cgroup", "no memory cgroup here")
    code = textwrap.dedent("""
        import subprocess, sys
        for _ in range(5):
            subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); time.sleep(600)"],
                             start_new_session=True)
        print("spawned")
    """)
    out = probe(code, limits=Limits(wall_seconds=SAFETY_WALL))
    assert "spawned" in out.stdout
    assert out.cgroup_path and not Path(out.cgroup_path).exists()


def test_torch_works_under_the_default_memory_limit(probe):
    out = probe("import torch\nx = torch.randn(256, 256)\nprint('ok', float((x @ x).abs().sum()) > 0)")
    assert "ok True" in out.stdout, out.stderr


@pytest.mark.slow
def test_endless_loop_hits_the_wall_time_and_the_namespace_dies(probe):
    code = textwrap.dedent("""
        import os, time
        import sys
        if os.fork() == 0:
            os.setsid()
            time.sleep(4)
            os.write(int(sys.argv[sys.argv.index("--result-fd") + 1]), b"a survivor\\n")
            os._exit(0)
        while True:
            pass
    """)
    out = probe(code, limits=Limits(wall_seconds=2.0))
    assert out.timed_out
    # A survivor would still hold the result pipe open and write to it 4 s in; the
    # reader waits for the pipe's end (up to 10 s), so it would see the garbage.
    assert out.frame_problem is None, out.frame_problem


def test_output_flood_is_capped(probe):
    code = "import sys\nfor _ in range(20_000):\n    print('x' * 1000)\nsys.stderr.write('e' * 10**7)\nprint('done')"
    out = probe(code, limits=Limits(wall_seconds=SAFETY_WALL, output_bytes=10_000))
    assert out.output_truncated
    assert len(out.stdout) <= 10_000 and len(out.stderr) <= 10_000
    assert out.returncode == 0


@pytest.mark.parametrize("unlink", [False, True], ids=["kept", "unlinked-while-open"])
def test_writing_too_much_to_the_scratch_dir_is_refused(probe, unlink):
    """The job folder is a tmpfs of scratch_bytes inside the sandbox: files kept, or
    unlinked while held open (invisible to any polling), stop at the same bound,
    and none of it is on the host's disk."""
    code = textwrap.dedent(f"""
        import errno, os
        chunk = b"x" * 2**20
        held, written = [], 0
        try:
            for i in range(400):
                fh = open(f"/job/out/junk{{i}}", "wb")
                held.append(fh)
                if {unlink!r}:
                    os.unlink(f"/job/out/junk{{i}}")
                fh.write(chunk)
                fh.flush()
                written += 1
            print("wrote", written)
        except OSError as exc:
            print("refused after", written, "MiB:", errno.errorcode.get(exc.errno))
    """)
    out = probe(code, limits=Limits(wall_seconds=SAFETY_WALL, scratch_bytes=50 * 2**20))
    assert "refused after" in out.stdout and "ENOSPC" in out.stdout, out.stdout + out.stderr
    assert int(out.stdout.split("refused after")[1].split()[0]) <= 50


def test_file_size_limit(probe):
    code = textwrap.dedent("""
        try:
            with open("/job/out/big", "wb") as fh:
                fh.write(b"x" * (8 * 2**20))
            print("wrote")
        except OSError as exc:
            print("refused", exc.errno)
    """)
    out = probe("import signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n" + code,
                limits=Limits(wall_seconds=SAFETY_WALL, file_bytes=2**20))
    assert "refused 27" in out.stdout  # EFBIG


def test_limits_reject_nonsense():
    with pytest.raises(ValueError, match="wall_seconds"):
        Limits(wall_seconds=0)


def test_cpu_time_limit(probe):
    out = probe("while True:\n    pass", limits=Limits(wall_seconds=SAFETY_WALL, cpu_seconds=1))
    import signal

    assert not out.timed_out
    assert out.signal in (signal.SIGXCPU, signal.SIGKILL)


def test_open_files_limit(probe):
    code = textwrap.dedent("""
        handles = []
        try:
            for _ in range(10_000):
                handles.append(open("/dev/null"))
        except OSError as exc:
            print("refused after", len(handles), exc.errno)
    """)
    out = probe(code, limits=Limits(wall_seconds=SAFETY_WALL, open_files=64))
    words = out.stdout.split()
    assert words[:2] == ["refused", "after"] and int(words[2]) < 64 and words[3] == "24"  # EMFILE


# --------------------------------------------------------------------------- the cases pipe


def test_cases_arrive_through_the_pipe_when_asked_for(tmp_path, needs_sandbox):
    from autograder import tamper
    from autograder.checks.base import Result

    outcome, job = run_piped_job(tmp_path, "import os\nprint(sorted(os.listdir('/job')))\n"
                                        "def probe(x):\n    return 2 * x\n")
    assert [(kind, grade_id) for kind, grade_id, _, _ in outcome.frames] == [
        ("start", "probe"), ("cases", "probe"), ("result", "probe")]
    assert outcome.cases_sent == [(1, "probe")]  # in answer to the request, frame 1
    assert "cases" not in outcome.stdout and sorted(p.name for p in job.iterdir()) == ["job.json", "out"]
    report, arrays = tamper.load_frame(*outcome.frames[2][2:])
    result = Result.from_encoded(report["cases"][0]["result"], arrays)
    assert result.value.tolist() == [2.0, 4.0]


def test_a_broken_protocol_closes_the_cases_pipe(tmp_path, needs_sandbox):
    """Garbage on the result pipe before the request: no case is sent, and the
    runner, which then asks and waits, reads the pipe's end at once (no wait for
    the wall-time limit)."""
    outcome, _ = run_piped_job(tmp_path, "import os, sys\n"
                                      "os.write(int(sys.argv[sys.argv.index('--result-fd') + 1]), b'junk\\n')\n"
                                      "def probe(x):\n    return 2 * x\n")
    assert outcome.cases_sent == [] and outcome.frame_problem == "a malformed result frame"
    assert not outcome.timed_out and outcome.returncode == 0


def test_limit_options_make_the_limits_of_a_run():
    """``limits_for``: each option sets its own limit and nothing else; sizes read
    like ``512M``/``2G``; bad sizes say what is expected."""
    from autograder.sandbox import limits_for, parse_size

    assert [parse_size(t) for t in ("512M", "2G", "1.5G", "300K", "4096", "2GiB", "512MB", "1g")] == [
        512 * 2**20, 2 * 2**30, 3 * 2**29, 300 * 2**10, 4096, 2 * 2**30, 512 * 2**20, 2**30]
    for bad in ("lots", "0", "-1G", "G", "", "nan", "infG"):
        with pytest.raises(ValueError, match="expected a (positive )?size such as 512M or 2G"):
            parse_size(bad)
    default = Limits()
    plain = limits_for(60)
    assert (plain.wall_seconds, plain.cpu_seconds) == (60.0, 60)
    assert plain == Limits(wall_seconds=60.0, cpu_seconds=60)
    small = limits_for(60, memory=512 * 2**20, disk=64 * 2**20, processes=16)
    assert (small.run_memory_bytes, small.scratch_bytes, small.processes) == (512 * 2**20, 64 * 2**20, 16)
    assert small.memory_bytes == default.memory_bytes and small.tmp_bytes == default.tmp_bytes
    big = limits_for(60, memory=8 * 2**30)
    assert big.run_memory_bytes == big.memory_bytes == 8 * 2**30  # RLIMIT_AS never below the run's memory
    with pytest.raises(ValueError, match="processes must be positive"):
        limits_for(60, processes=0)
