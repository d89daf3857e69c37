"""Cheating submissions earn nothing, harm no one, and leave the other exercises alone.

One submission per attack class. Most attacks sit in the middle exercise
(``padding_mask``) of a small chapter-6 notebook whose three exercises are
independent (``masked_softmax`` 3 pts before it, ``causal_mask`` 2 pts after it),
so a kernel killed by the attack also shows that the exercises after it are
re-run in a fresh sandbox. Numpy-specific lying objects use the chapter-4
notebook (attack in ``self_attention``, after ``softmax`` 1 pt and
``scaled_dot_product_attention`` 2 pts).

Every submission is graded once, in parallel, by the module fixture; each test
then asserts: the attacked exercise scores 0, the others keep their full scores,
and no file outside the scratch directory changed. A few attacks are also graded
*without* the sandbox (``sandbox=False``) to show that they are real: there they
do earn the points the sandbox denies.
"""
from __future__ import annotations

import dataclasses
import http.server
import socket
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import fixtures
import solutions
from autograder.grading import RunSettings, grade_submission
from autograder.sandbox import Limits
from autograder.sync import solution_cell_source
from conftest import DISGUISED_TENSOR, REPO, file_digest

pytestmark = pytest.mark.slow

CH06 = ["masked_softmax", "padding_mask", "causal_mask"]
CH06_POINTS = {"masked_softmax": 3, "padding_mask": 1, "causal_mask": 2}
CH04_POINTS = {"softmax": 1, "scaled_dot_product_attention": 2, "self_attention": 3}
SEED = 1234
# No verdict may depend on the machine's load (the suite runs beside other work):
# the wall-time limit is only a safety net, far above any run here even on a
# crowded machine, and the endless loop is stopped by its CPU time, which load
# does not stretch (6 s of CPU: more than twice what a whole run of this notebook uses,
# import torch, setup and every check included, 2.5 CPU s measured on a loaded machine;
# every CPU second above what the run needs is burnt by the loop, in each isolation mode).
# 2 GiB of address space is plenty for torch and the checks.
LIMITS = Limits(wall_seconds=300.0, cpu_seconds=120, memory_bytes=2 * 2**30)
ATTACK_LIMITS = {"endless_loop": dataclasses.replace(LIMITS, cpu_seconds=6)}

# Wrong in every graded part (inverted polarity AND a float mask), so an attack
# that earns any point has beaten the judge: honestly, this answer earns 0.
WRONG_PADDING_MASK = """
def padding_mask(ids, pad_id=0):
    return (ids == pad_id)[:, None, None, :].float()  # inverted, and not a bool mask
"""


# What code in the sandbox can find of the grading cases: every file of the
# filesystem by name (the cases once were ``/job/cases_<exercise>.json``), the
# content of every file outside the Python installation and of every descriptor
# open in any process it can see (a pipe reopened through /proc and read without
# waiting), looking for the keys every case spec has. ``reached`` proves the
# search reads the job folder. The keys are built at run time, so the submitted
# source, which is in /job/job.json, does not hold them; the result pipe is left
# alone (reading it would steal the runner's own frames).
SEARCH_FOR_CASES = """
import os as _os
import stat as _stat
import sys as _sys

def _search_for_cases():
    keys = (b'"se' + b'ed": ', b'"kw' + b'args": ')
    found, reached = [], False
    installed = tuple(_os.path.realpath(p) + "/" for p in {_sys.prefix, _sys.base_prefix, "/usr"})
    for root, dirs, files in _os.walk("/"):
        if root.startswith(("/proc", "/sys", "/dev")) and not root.startswith("/dev/shm"):
            dirs[:] = []
            continue
        for name in files:
            path = _os.path.join(root, name)
            if name.startswith("cases_"):
                found.append(path)
            if path.startswith(installed) or name.endswith(".py"):
                continue
            try:
                with open(path, "rb") as fh:
                    data = fh.read(50_000_000)
            except OSError:
                continue
            reached = reached or (path == "/job/job.json" and b"masked_softmax" in data)
            if all(k in data for k in keys):
                found.append(path)
    result_fd = int(_sys.argv[_sys.argv.index("--result-fd") + 1])
    result_pipe = _os.fstat(result_fd).st_ino
    for pid in [p for p in _os.listdir("/proc") if p.isdigit()]:
        try:
            fds = _os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            path = f"/proc/{pid}/fd/{fd}"
            try:
                if _os.stat(path).st_ino == result_pipe:
                    continue
                handle = _os.open(path, _os.O_RDONLY | _os.O_NONBLOCK)
            except OSError:
                continue
            try:
                if _stat.S_ISFIFO(_os.fstat(handle).st_mode) or _stat.S_ISREG(_os.fstat(handle).st_mode):
                    data = _os.read(handle, 1 << 20)
                    if all(k in data for k in keys):
                        found.append(path)
            except OSError:
                pass
            finally:
                _os.close(handle)
    return found, reached
"""


def _sentinels(root: Path) -> dict[str, Path]:
    """Files an attacker would like to change: the reference, the checks, a
    gradebook, another student's submission, a file in the host's /tmp."""
    root.mkdir(parents=True, exist_ok=True)
    gradebook = root / "gradebook.db"
    gradebook.write_bytes(b"SQLite format 3\x00 grades of the whole class")
    other = root / "submitted" / "bob" / "06_masking" / "06_masking.ipynb"
    other.parent.mkdir(parents=True)
    other.write_text('{"cells": [], "bob": "his own work"}')
    host_tmp = root / "host_tmp_file.txt"
    host_tmp.write_text("the grader's temporary file")
    return {"gradebook": gradebook, "other": other, "host_tmp": host_tmp}


# Repository files the attack also goes for. Other work changes them while the
# tests run, so instead of their digests we check that the attack's marker is
# not in them and that they still exist.
REPO_TARGETS = [REPO / "solutions" / "masking.py", REPO / "autograder" / "checks" / "ch06_masking.py"]
MARKER = "hacked-by-a-student-7f3a"


class _Server:
    """An HTTP server on the grading host that hands out the reference answer."""

    def __init__(self, body: str):
        payload = body.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                self.send_response(200)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("0.0.0.0", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def urls(self) -> list[str]:
        hosts = ["127.0.0.1"]
        try:
            hosts.append(socket.gethostbyname(socket.gethostname()))
        except OSError:
            pass
        return [f"http://{h}:{self.port}/answer.py" for h in hosts]

    def close(self):
        self.httpd.shutdown()


def _attacks(sentinels: dict[str, Path], urls: list[str]) -> dict[str, tuple[str, str, str]]:
    """attack id -> (chapter, attacked exercise, the attacked cell's source)."""
    targets = [str(p) for p in [*sentinels.values(), *REPO_TARGETS]]
    a: dict[str, tuple[str, str, str]] = {}

    def pm(code: str, wrong: bool = True):
        a_src = textwrap.dedent(code).strip() + "\n"
        return ("06_masking", "padding_mask", a_src + (WRONG_PADDING_MASK if wrong else ""))

    # -- patched comparisons ------------------------------------------------------
    a["patch_np_allclose"] = pm("""
        import numpy as np
        np.allclose = lambda *a, **k: True
        np.array_equal = lambda *a, **k: True
        np.isclose = lambda a, b, *r, **k: np.ones(np.broadcast(a, b).shape, dtype=bool)
    """)
    a["patch_np_testing"] = pm("""
        import numpy as np
        np.testing.assert_allclose = lambda *a, **k: None
        np.testing.assert_array_equal = lambda *a, **k: None
        np.testing.assert_equal = lambda *a, **k: None
    """)
    a["patch_torch_allclose"] = pm("""
        import torch
        torch.allclose = lambda *a, **k: True
        torch.equal = lambda *a, **k: True
        torch.testing.assert_close = lambda *a, **k: None
    """)
    a["patch_tensor_eq"] = pm("""
        import torch
        torch.Tensor.__eq__ = lambda self, other: torch.ones_like(self, dtype=torch.bool)
        torch.Tensor.__ne__ = lambda self, other: torch.zeros_like(self, dtype=torch.bool)
    """)
    # -- replaced random generators -------------------------------------------------
    a["replace_rngs"] = pm("""
        import random
        import numpy as np
        import torch
        np.random.default_rng = lambda *a, **k: np.random.Generator(np.random.PCG64(0))
        np.random.seed = lambda *a, **k: None
        np.random.rand = lambda *shape: np.zeros(shape)
        torch.manual_seed = lambda *a, **k: torch.default_generator
        torch.randn = lambda *a, **k: torch.zeros(*a)
        random.seed = lambda *a, **k: None
    """)
    # -- IPython hooks and tracers that rewrite or empty later cells --------------
    a["ipython_input_transformers"] = pm("""
        ip = get_ipython()
        ip.input_transformers_cleanup.append(lambda lines: [])
        ip.input_transformers_post.append(lambda lines: ["pass\\n"])
    """)
    a["ipython_run_cell_replaced"] = pm("""
        try:
            from IPython.core.interactiveshell import InteractiveShell
            InteractiveShell.run_cell = lambda self, *a, **k: None
        except Exception:
            pass
        import IPython
        shell = IPython.get_ipython()
        if shell is not None:
            shell.run_cell = lambda *a, **k: None
    """)
    a["settrace_setprofile_hooks"] = pm("""
        import sys
        import threading

        def _hook(frame, event, arg):
            g = frame.f_globals
            if "check" in g:
                g["check"] = lambda *a, **k: None  # empty every later check
            if frame.f_code.co_name in ("judge", "evaluate", "compare", "check"):
                g["CheckFailure"] = type("Never", (Exception,), {})
            return None

        sys.settrace(_hook)
        sys.setprofile(_hook)
        threading.settrace(_hook)
    """)
    # -- objects that lie about equality -----------------------------------------------
    a["lying_eq_object"] = pm("""
        class Liar:
            shape = (2, 1, 1, 5)
            dtype = "bool"
            def __eq__(self, other):
                return True
            def __ne__(self, other):
                return False
            __hash__ = object.__hash__

        def padding_mask(ids, pad_id=0):
            return Liar()
    """, wrong=False)
    a["ndarray_subclass_liar"] = ("04_self_attention", "self_attention", textwrap.dedent("""
        import numpy as np

        class Liar(np.ndarray):
            def __eq__(self, other):
                return np.ones(np.shape(self), dtype=bool)
            def __array_function__(self, func, types, args, kwargs):
                if func.__name__ in ("allclose", "array_equal", "isclose", "testing"):
                    return True
                return super().__array_function__(func, types, args, kwargs)

        def self_attention(x, W_q, W_k, W_v):
            x = np.asarray(x)
            out = np.zeros(x.shape[:-1] + (np.shape(W_v)[-1],)).view(Liar)
            weights = np.zeros(x.shape[:-1] + (x.shape[-2],)).view(Liar)
            return out, weights
    """))
    a["tensor_subclass_torch_function"] = pm("""
        import torch

        class Liar(torch.Tensor):
            @classmethod
            def __torch_function__(cls, func, types, args=(), kwargs=None):
                if func in (torch.equal, torch.allclose):
                    return True
                if getattr(func, "__name__", "") in ("eq", "__eq__", "isclose"):
                    return torch.ones((), dtype=torch.bool)
                return super().__torch_function__(func, types, args, kwargs or {})

        def padding_mask(ids, pad_id=0):
            return torch.zeros(ids.shape[0], 1, 1, ids.shape[1], dtype=torch.bool).as_subclass(Liar)
    """, wrong=False)
    a["tensor_subclass_disguised_as_torch_tensor"] = pm(DISGUISED_TENSOR + textwrap.dedent("""
        def padding_mask(ids, pad_id=0):  # wrong in every part: not a bool mask, all zero
            return torch.zeros(ids.shape[0], 1, 1, ids.shape[1], dtype=torch.float32).as_subclass(Tensor)
    """), wrong=False)
    # -- delegating to the reference ------------------------------------------------------
    a["import_reference"] = pm("""
        import solutions
        padding_mask = solutions.padding_mask
    """, wrong=False)
    a["import_reference_module"] = pm("""
        from solutions.masking import padding_mask
    """, wrong=False)
    a["read_reference_file"] = pm(f"""
        exec(open("{REPO}/solutions/masking.py").read().replace("from __future__ import annotations", ""))
    """, wrong=False)
    a["importlib_tricks"] = pm(f"""
        import importlib
        import importlib.util
        import sys
        found = None
        for name in [n for n in sys.modules if n.startswith("solutions")]:
            del sys.modules[name]
        sys.path.insert(0, "{REPO}")
        try:
            import __editable___transformer_book_0_1_0_finder as finder
            finder.install()
        except Exception:
            pass
        try:
            found = importlib.import_module("solutions.masking").padding_mask
        except Exception:
            pass
        if found is None:
            try:
                spec = importlib.util.spec_from_file_location("m", "{REPO}/solutions/masking.py")
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                found = module.padding_mask
            except Exception:
                pass
        padding_mask = found
    """, wrong=False)
    a["search_filesystem_for_reference"] = pm("""
        import os
        found = None
        for root, dirs, files in os.walk("/"):
            if root.startswith(("/proc", "/sys", "/dev")):
                dirs[:] = []
                continue
            for name in files:
                if not name.endswith(".py"):
                    continue
                path = os.path.join(root, name)
                try:
                    if os.path.getsize(path) < 300_000 and "def padding_mask(" in open(path, errors="ignore").read():
                        found = path
                except OSError:
                    pass
        namespace = {}
        exec(open(found).read().replace("from __future__ import annotations", ""), namespace)
        padding_mask = namespace["padding_mask"]
    """, wrong=False)
    # -- the cases of an exercise, before its check and from files -------------------------
    a["search_for_cases_before_their_check"] = ("06_masking", "masked_softmax", SEARCH_FOR_CASES + """
_found, _reached = _search_for_cases()
assert _reached and not _found, _found  # a cell error: 0 points, unless nothing is found
""" + solution_cell_source(solutions.masked_softmax))
    a["search_for_own_cases_when_called"] = ("06_masking", "padding_mask", SEARCH_FOR_CASES + """
_found, _reached = _search_for_cases()
assert _reached and not _found, _found
""" + solution_cell_source(solutions.padding_mask) + """
_reference_padding_mask = padding_mask
_searched = []

def padding_mask(ids, pad_id=0):
    if not _searched:  # while its own check runs: its hidden inputs in a file?
        _searched.append(_search_for_cases())
    found, reached = _searched[0]
    if found or not reached:
        raise RuntimeError(f"found {found}")
    return _reference_padding_mask(ids, pad_id)
""")
    # -- files outside the scratch directory -------------------------------------------
    a["touch_files_outside"] = pm(f"""
        import os
        import shutil
        import subprocess
        for path in {targets!r}:
            for attempt in (lambda: open(path, "w").write("{MARKER}"), lambda: os.remove(path),
                            lambda: open(path, "a").write("{MARKER}"), lambda: os.truncate(path, 0),
                            lambda: shutil.rmtree(os.path.dirname(path))):
                try:
                    attempt()
                except Exception:
                    pass
        subprocess.run("rm -rf {REPO}/solutions /tmp/*", shell=True)
    """)
    # -- network ------------------------------------------------------------------------
    a["network_fetch_reference"] = pm(f"""
        import urllib.request
        source = None
        for url in {urls!r}:
            try:
                source = urllib.request.urlopen(url, timeout=3).read().decode()
                break
            except Exception:
                pass
        exec(source)
    """, wrong=False)
    # -- exiting or killing the kernel ---------------------------------------------------
    a["sys_exit"] = pm("import sys\nsys.exit(0)", wrong=False)
    a["sys_exit_when_called"] = pm("""
        def padding_mask(ids, pad_id=0):
            raise SystemExit(0)
    """, wrong=False)
    a["os__exit"] = pm("import os\nos._exit(0)", wrong=False)
    a["kill_parent"] = pm("import os\nos.kill(os.getppid(), 9)")
    a["kill_all"] = pm("""
        import os
        try:
            os.kill(-1, 9)  # every process this uid may signal (Linux spares the caller)
        except ProcessLookupError:
            pass
        os.kill(0, 9)  # the whole process group, the caller included
    """)
    a["kill_self"] = pm("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)")
    a["keyboard_interrupt"] = pm("raise KeyboardInterrupt")
    # -- resources ------------------------------------------------------------------------
    a["fork_bomb"] = pm("""
        import os
        import time
        while True:
            if os.fork() == 0:
                time.sleep(60)
                os._exit(0)
    """)
    a["memory_hog"] = pm("""
        import numpy as np

        def _hog():
            blocks = [np.ones(2**24)]  # 128 MB, touched
            while True:
                blocks.append(np.empty(2**26))  # 512 MB more each time, until the limit

        _hog()
    """)
    a["endless_loop"] = pm("""
        def padding_mask(ids, pad_id=0):
            while True:
                pass
    """, wrong=False)
    a["output_flood"] = pm("""
        import sys
        for _ in range(100_000):
            print("spam" * 100)
            sys.stderr.write("eggs" * 100 + "\\n")
    """)
    # -- forged results ------------------------------------------------------------------
    a["forge_own_result_with_factory"] = pm("""
        import sys
        main = sys.modules["__main__"]
        real_write = main.write_frame

        def forged(stream, grade_id, data=None, arrays=None, **kw):
            if grade_id == "padding_mask" and data is not None:
                for case in data["cases"]:
                    case["result"] = {"value": {"__obj__": "torch.nn.Identity", "init": {"__dict__": []}, "state": {}},
                                      "raised": None}
            return real_write(stream, grade_id, data, arrays, **kw)

        main.write_frame = forged
    """)
    a["forge_frame_for_other_exercise"] = pm("""
        import sys
        import numpy as np
        main = sys.modules["__main__"]
        fd = int(sys.argv[sys.argv.index("--result-fd") + 1])
        stream = open(fd, "wb", closefd=False)
        fake = {"grade_id": "masked_softmax", "cell_error": None, "cases": []}
        main.write_frame(stream, "masked_softmax", fake, {})
        main.write_frame(stream, "causal_mask", fake, {})
    """)
    a["forge_result_files"] = pm("""
        import json
        import numpy as np
        for gid in ("masked_softmax", "padding_mask", "causal_mask"):
            fake = {"grade_id": gid, "cell_error": None, "cases": []}
            json.dump(fake, open(f"/job/out/result_{gid}.json", "w"))
            np.savez(f"/job/out/result_{gid}.npz")
    """)
    a["garbage_in_result_pipe"] = pm("""
        import os
        import sys
        fd = int(sys.argv[sys.argv.index("--result-fd") + 1])
        os.write(fd, b"this is not a frame\\n" * 10)
    """)
    a["close_result_pipe"] = pm("""
        import os
        import sys
        os.close(int(sys.argv[sys.argv.index("--result-fd") + 1]))
    """)
    return a


# attacks graded without the sandbox too: there they succeed, which shows they are real
UNSAFE_CONTROLS = ["read_reference_file", "importlib_tricks", "network_fetch_reference"]


def _notebooks(root: Path):
    ch06 = fixtures.source_notebook("06_masking", CH06, points=CH06_POINTS)
    ch04 = fixtures.source_notebook("04_self_attention", points=CH04_POINTS)
    return {
        "06_masking": (ch06, fixtures.write_notebook(ch06, root / "06_masking" / "06_masking.ipynb")),
        "04_self_attention": (ch04, fixtures.write_notebook(ch04, root / "04_self_attention" / "04_self_attention.ipynb")),
    }


# The attack each test of ``graded`` reads, for the tests that name theirs in the body
# (the others take it as their ``attack`` parameter).
ATTACKS_READ = {
    "test_ipython_input_transformers_earn_nothing": "ipython_input_transformers",
    "test_tensor_subclass_disguised_as_torch_tensor_is_judged_on_its_data": "tensor_subclass_disguised_as_torch_tensor",
    "test_ndarray_subclass_with_lying_comparisons": "ndarray_subclass_liar",
    "test_files_outside_the_scratch_dir_are_untouched": "touch_files_outside",
    "test_network_is_unreachable": "network_fetch_reference",
    "test_killing_the_sandbox_parent_is_refused": "kill_parent",
    "test_forged_result_with_a_factory_is_rejected": "forge_own_result_with_factory",
    "test_forged_frames_for_other_exercises_are_detected": "forge_frame_for_other_exercise",
}


def _attacks_to_grade(items, module) -> set[str]:
    """The submissions the run's tests of ``module`` read: ``attack`` for a sandboxed
    grading, ``unsafe:attack`` for an unsafe control. Only those are graded: a run that
    deselects tests (``-k``, or the container-mode run of this module, which leaves out
    the attacks written for bubblewrap's mounts) grades no attack nobody asserts on."""
    wanted = set()
    for item in items:
        if getattr(item, "module", None) is not module or "graded" not in getattr(item, "fixturenames", ()):
            continue
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.originalname == "test_the_same_attacks_work_without_the_sandbox":
            wanted.add("unsafe:" + params["attack"])
        elif "attack" in params:
            wanted.add(params["attack"])
        elif item.originalname in ATTACKS_READ:
            wanted.add(ATTACKS_READ[item.originalname])
        else:
            raise LookupError(f"{item.nodeid} reads the graded attacks: name the one it reads in ATTACKS_READ")
    return wanted


@pytest.fixture(scope="module")
def graded(tmp_path_factory, needs_sandbox, request):
    """Grade each attack submission the run's tests read once (two at a time); return
    ``{attack: (scores by exercise, attacked exercise)}``, the sentinels' digests
    before and after, and the unsafe controls' scores (graded only where their test
    runs: the container-mode run of this module deselects it, since without the
    sandbox both modes run the same plain subprocess)."""
    wanted = _attacks_to_grade(request.session.items, request.module)
    root = tmp_path_factory.mktemp("cheats")
    sentinels = _sentinels(root / "host")
    before = {k: file_digest(p) for k, p in sentinels.items()}
    server = _Server(solution_cell_source(solutions.padding_mask))
    try:
        attacks = _attacks(sentinels, server.urls())
        # in the order of a full run (the attacks as written, then the controls), so that
        # the same two submissions are graded side by side whatever the selection
        order = [*attacks, *("unsafe:" + name for name in UNSAFE_CONTROLS)]
        unknown = wanted - set(order)
        if unknown:
            raise LookupError(f"the tests read submissions that _attacks() and UNSAFE_CONTROLS do not make: "
                              f"{sorted(unknown)}")
        books = _notebooks(root / "source")
        jobs = {}
        for name in [name for name in order if name in wanted]:
            chapter, target, source = attacks[name.removeprefix("unsafe:")]
            nb, src_path = books[chapter]
            sub = fixtures.write_notebook(fixtures.submission_with(nb, **{target: source}),
                                          root / "submitted" / name.replace(":", "_") / f"{chapter}.ipynb")
            jobs[name] = (src_path, sub, target, not name.startswith("unsafe:"))

        def run(item):
            name, (src_path, sub, target, sandbox) = item
            start = time.monotonic()
            limits = ATTACK_LIMITS.get(name.removeprefix("unsafe:"), LIMITS)
            scores = grade_submission(src_path, sub, seed=SEED,
                                      settings=RunSettings(sandbox=sandbox, limits=limits)).scores
            durations[name] = time.monotonic() - start
            return name, ({s.exercise: s for s in scores}, target)

        durations: dict[str, float] = {}

        with ThreadPoolExecutor(max_workers=2) as pool:
            results = dict(pool.map(run, jobs.items()))
    finally:
        server.close()
    after = {k: file_digest(p) for k, p in sentinels.items()}
    for path in REPO_TARGETS:
        after[str(path)] = path.exists() and MARKER not in path.read_text(errors="replace")
        before[str(path)] = True
    print("\ngrading time per attack submission (s):",
          ", ".join(f"{k} {v:.1f}" for k, v in sorted(durations.items(), key=lambda kv: -kv[1])))
    return {"results": results, "before": before, "after": after, "sentinels": sentinels, "durations": durations}


def _assert_contained(graded, attack, statuses=None):
    scores, target = graded["results"][attack]
    points = CH04_POINTS if target == "self_attention" else CH06_POINTS
    hit = scores[target]
    assert hit.score == 0, f"{attack}: {hit}"
    if statuses:
        assert hit.status in statuses, f"{attack}: {hit}"
    assert hit.reason
    for name, s in scores.items():
        if name != target:
            assert s.score == points[name] and s.status == "passed", f"{attack}: {name} lost its points: {s}"
    assert graded["after"] == graded["before"], "a file outside the scratch directory changed"
    return hit


@pytest.mark.parametrize("attack", [
    "patch_np_allclose", "patch_np_testing", "patch_torch_allclose", "patch_tensor_eq", "replace_rngs",
    "ipython_run_cell_replaced", "settrace_setprofile_hooks", "output_flood", "forge_result_files",
])
def test_patching_and_hooks_earn_nothing(graded, attack):
    hit = _assert_contained(graded, attack, {"failed"})
    assert "padding_mask" not in hit.reason or "wrong" in hit.reason or "differs" in hit.reason or hit.reason


def test_ipython_input_transformers_earn_nothing(graded):
    hit = _assert_contained(graded, "ipython_input_transformers", {"error"})
    # (a NameError for get_ipython; its message is withheld: hidden inputs were in the sandbox)
    assert "NameError" in hit.reason


@pytest.mark.parametrize("attack", ["lying_eq_object", "tensor_subclass_torch_function"])
def test_objects_lying_about_equality_cannot_cross(graded, attack):
    hit = _assert_contained(graded, attack, {"failed"})
    assert "TypeError" in hit.reason and "expected numbers" in hit.reason


def test_tensor_subclass_disguised_as_torch_tensor_is_judged_on_its_data(graded):
    _assert_contained(graded, "tensor_subclass_disguised_as_torch_tensor", {"failed"})


def test_ndarray_subclass_with_lying_comparisons(graded):
    hit = _assert_contained(graded, "ndarray_subclass_liar", {"failed"})
    assert "wrong values" in hit.reason


@pytest.mark.parametrize("attack", ["import_reference", "import_reference_module", "read_reference_file",
                                    "importlib_tricks", "search_filesystem_for_reference"])
def test_the_reference_is_out_of_reach(graded, attack):
    # Even the walk over the whole filesystem ends well within the limits (see
    # LIMITS), loaded machine or not: it finds nothing and the cell fails.
    _assert_contained(graded, attack, {"error", "failed"})


@pytest.mark.parametrize("attack", ["search_for_cases_before_their_check", "search_for_own_cases_when_called"])
def test_cases_are_out_of_reach_before_and_outside_their_check(graded, attack):
    """An exercise's cases reach the runner through a pipe, and only when its check
    starts: code in an earlier cell searching every file and every descriptor in
    the sandbox finds none, and an exercise finds none of its own in a file while
    it is being checked. Each answer is the reference's, spoiled only if the
    search finds anything: every exercise keeps full marks."""
    scores, _ = graded["results"][attack]
    for name, s in scores.items():
        assert s.status == "passed" and s.score == CH06_POINTS[name], f"{attack}: {s}"


def test_the_case_search_finds_case_files_where_there_are_some(tmp_path, needs_sandbox, monkeypatch):
    """The control of the test above: with the cases in the job folder, as they once
    were, the same search finds them and the searching cell loses its points."""
    from autograder import grading, reference_regrade, wire

    write_job = grading.write_job

    def job_with_case_files(job_dir, setup, pending, context=()):
        write_job(job_dir, setup, pending, context)
        for g in pending:
            arrays: dict = {}
            wire.dump_bundle(str(job_dir / f"cases_{g.name}"), [c.to_spec(g.exercise.kind, arrays) for c in g.cases],
                               arrays)
        return None  # no cases pipe: the runner reads the files

    monkeypatch.setattr(grading, "write_job", job_with_case_files)
    monkeypatch.setattr(reference_regrade, "write_job", job_with_case_files)
    chapter, target, source = _attacks({}, [])["search_for_cases_before_their_check"]
    nb, src_path = _notebooks(tmp_path / "source")[chapter]
    sub = fixtures.write_notebook(fixtures.submission_with(nb, **{target: source}), tmp_path / "s.ipynb")
    scores = {s.exercise: s for s in grade_submission(src_path, sub, seed=SEED,
                                                      settings=RunSettings(limits=LIMITS)).scores}
    assert scores[target].score == 0 and "cases_masked_softmax" in scores[target].reason, scores[target]


@pytest.mark.parametrize("attack", UNSAFE_CONTROLS)
def test_the_same_attacks_work_without_the_sandbox(graded, attack):
    """The control: graded as a plain subprocess, these attacks do reach the
    reference and earn the points — the sandbox is what stops them."""
    scores, target = graded["results"]["unsafe:" + attack]
    assert scores[target].status == "passed", scores[target]


def test_files_outside_the_scratch_dir_are_untouched(graded):
    _assert_contained(graded, "touch_files_outside", {"failed"})
    assert all(digest is not None for digest in graded["after"].values())


def test_network_is_unreachable(graded):
    hit = _assert_contained(graded, "network_fetch_reference", {"error"})
    assert "TypeError" in hit.reason  # exec(None): every fetch failed


@pytest.mark.parametrize("attack", ["sys_exit", "sys_exit_when_called", "os__exit", "kill_all", "kill_self",
                                    "keyboard_interrupt"])
def test_ending_the_kernel_is_flagged_and_the_rest_is_graded(graded, attack):
    _assert_contained(graded, attack, {"cheat"})


def test_killing_the_sandbox_parent_is_refused(graded):
    hit = _assert_contained(graded, "kill_parent", {"error", "cheat"})
    assert "PermissionError" in hit.reason or "killed" in hit.reason


@pytest.mark.parametrize("attack, status, words", [
    ("fork_bomb", "error", []),
    ("memory_hog", "error", ["MemoryError"]),
    ("endless_loop", "timeout", ["more than 6 s of CPU time"]),
])
def test_resource_hogs_are_bounded_and_the_rest_is_graded(graded, attack, status, words):
    hit = _assert_contained(graded, attack, {status})
    assert all(word in hit.reason for word in words), hit.reason


def test_forged_result_with_a_factory_is_rejected(graded):
    hit = _assert_contained(graded, "forge_own_result_with_factory", {"cheat"})
    assert "tampered" in hit.reason


def test_forged_frames_for_other_exercises_are_detected(graded):
    """The forger sends extra result frames for an earlier and a later exercise
    through the result pipe: they arrive while the forger's cell runs, so they are
    dropped and the forger is flagged; the genuine results of both others stand."""
    hit = _assert_contained(graded, "forge_frame_for_other_exercise", {"cheat"})
    assert "forged result frame for 'masked_softmax'" in hit.reason


@pytest.mark.parametrize("attack", ["garbage_in_result_pipe", "close_result_pipe"])
def test_tampering_with_the_result_pipe(graded, attack):
    _assert_contained(graded, attack, {"cheat", "error"})
