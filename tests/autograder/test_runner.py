"""The runner's wall: only plain data crosses, in both directions.

``encode`` / ``decode`` / ``run_case`` run in the student's process; the frame
protocol carries results to the trusted process, which validates them
(``tamper._check_encoded`` / ``_load_frame``) before judging.
"""
from __future__ import annotations

import builtins
import inspect
import io
import json
import os
import subprocess
import sys
import types
import zipfile

import numpy as np
import pytest
import torch

from autograder import runner, tamper, wire
from autograder.checks.base import Result
from autograder.library import build_library
from conftest import DISGUISED_TENSOR


def _roundtrip(value):
    arrays: dict = {}
    data = wire.encode(value, arrays)
    json.dumps(data)  # must be plain JSON
    return wire.decode(data, arrays, as_torch=False)


# --------------------------------------------------------------------------- encode


def test_plain_values_roundtrip():
    value = {"a": [1, 2.5, None, True, "s"], "b": (np.float32(1.5), np.int64(3)), 3: float("inf")}
    back = _roundtrip(value)
    assert back == {"a": [1, 2.5, None, True, "s"], "b": (1.5, 3), 3: float("inf")}


def test_object_lying_about_equality_is_rejected():
    class Liar:
        def __eq__(self, other):
            return True

    with pytest.raises(TypeError, match="Liar"):
        wire.encode(Liar(), {})


def test_ndarray_subclass_is_dropped_to_a_plain_array():
    class Liar(np.ndarray):
        def __eq__(self, other):
            return np.ones(self.shape, dtype=bool)

    lying = np.arange(4.0).view(Liar)
    back = _roundtrip(lying)
    assert type(back) is np.ndarray
    assert not np.array_equal(back, np.zeros(4))  # its real data, compared honestly
    assert np.array_equal(back, np.arange(4.0))


def test_tensor_subclass_is_rejected():
    class Liar(torch.Tensor):
        pass

    with pytest.raises(TypeError, match="Liar"):
        wire.encode(torch.zeros(3).as_subclass(Liar), {})


def test_tensor_subclass_disguised_as_torch_tensor_crosses_as_its_data():
    disguise: dict = {}
    exec(DISGUISED_TENSOR, disguise)  # noqa: S102 - the test's own code
    Tensor = disguise["Tensor"]
    back = _roundtrip(torch.arange(3.0).as_subclass(Tensor))
    assert isinstance(back, wire.Tensor)
    assert type(back.value) is np.ndarray and back.dtype == "float32"
    assert np.array_equal(back.value, np.arange(3.0, dtype=np.float32))


def test_oversized_result_is_rejected():
    with pytest.raises(ValueError, match="larger than any expected answer"):
        wire.encode(np.zeros(wire.MAX_RESULT_ELEMENTS + 1, dtype=np.int8), {})


def test_dict_with_object_keys_is_rejected():
    with pytest.raises(TypeError, match="keys"):
        wire.encode({(1, 2): 3}, {})


# --------------------------------------------------------------------------- run_case


def test_run_case_records_system_exit_but_lets_keyboard_interrupt_through():
    spec = {"kind": "function", "args": [], "kwargs": {"__dict__": []}, "seed": 0}

    def exits():
        raise SystemExit(3)

    result = runner.run_case(exits, spec, {})
    assert result["raised"]["type"] == "SystemExit"

    def interrupts():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        runner.run_case(interrupts, spec, {})


def test_run_case_encodes_a_lying_return_value_as_an_error():
    class Liar:
        def __eq__(self, other):
            return True

    spec = {"kind": "function", "args": [], "kwargs": {"__dict__": []}, "seed": 0}
    result = runner.run_case(lambda: Liar(), spec, {})
    assert result["raised"]["type"] == "TypeError" and result["raised"]["phase"] == "encode"


def test_bundles_never_unpickle(tmp_path):
    stem = str(tmp_path / "result_x")
    (tmp_path / "result_x.json").write_text("{}")
    np.save(tmp_path / "obj.npy", np.array([object()]), allow_pickle=True)
    with zipfile.ZipFile(tmp_path / "result_x.npz", "w") as zf:
        zf.write(tmp_path / "obj.npy", "a0.npy")
    with pytest.raises(ValueError, match="pickle"):
        wire.load_bundle(stem)


# --------------------------------------------------------------------------- frames


def test_frames_roundtrip():
    stream = io.BytesIO()
    wire.write_frame(stream, "softmax", start=True)
    wire.write_frame(stream, "softmax", {"grade_id": "softmax", "cases": []}, {"a0": np.arange(3)})
    stream.seek(0)
    frames, problem = wire.read_frames(stream, 2**20, 2**20)
    assert problem is None
    assert [(k, g) for k, g, _, _ in frames] == [("start", "softmax"), ("result", "softmax")]
    data, arrays = tamper.load_frame(frames[1][2], frames[1][3])
    assert data == {"grade_id": "softmax", "cases": []} and np.array_equal(arrays["a0"], np.arange(3))


@pytest.mark.parametrize("garbage", [b"not json\n", b'{"kind": "result"}\n', b'{"grade_id": "x", "kind": "other", "json": 0, "npz": 0}\n',
                                     b'{"grade_id": "x", "kind": "result", "json": 100, "npz": 0}\n{}'])
def test_malformed_frames_stop_the_reader(garbage):
    stream = io.BytesIO()
    wire.write_frame(stream, "a", start=True)
    stream.write(garbage)
    wire.write_frame(stream, "a", {"x": 1}, {})
    stream.seek(0)
    frames, problem = wire.read_frames(stream, 2**20, 2**20)
    assert problem is not None
    assert [(k, g) for k, g, _, _ in frames] == [("start", "a")]


def test_oversized_frame_is_refused():
    stream = io.BytesIO()
    wire.write_frame(stream, "a", {"x": "y" * 5000}, {})
    stream.seek(0)
    frames, problem = wire.read_frames(stream, 1000, 10_000)
    assert frames == [] and "over the 1000-byte limit" in problem


def test_zip_bomb_is_refused(monkeypatch):
    buf = io.BytesIO()
    np.savez_compressed(buf, a0=np.zeros(2_000_000))  # 16 MB of zeros, a few kB compressed
    monkeypatch.setattr(tamper, "MAX_RESULT_BYTES", 4 * 2**20)
    assert len(buf.getvalue()) < 2**20
    with pytest.raises(tamper.Tampered, match="over the"):
        tamper.load_frame(b"{}", buf.getvalue())


# --------------------------------------------------------------------------- what the judge admits


def _nested(depth: int):
    value: list = [0]
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("value, arrays, message", [
    ({"__obj__": "torch.nn.Identity", "init": {"__dict__": []}, "state": {}}, {}, "keys"),
    ({"__obj__": "solutions.softmax", "init": {"__dict__": []}, "state": {}}, {}, "keys"),
    ({"__ndarray__": "a9"}, {}, "missing array"),
    ({"__ndarray__": "a0"}, {"a0": np.zeros(2, dtype=[("x", "f8")])}, "dtype"),
    ({"__tensor__": "a0", "dtype": "float32"}, {"a0": np.zeros(2)}, "dtype label"),
    ({"__float__": "1.5"}, {}, "finite float"),
    ({"__float__": "abc"}, {}, "malformed float"),
    ({"__dict__": [[[1], 2]]}, {}, "dict entry"),
    ({"plain": "dict"}, {}, "keys"),
    (_nested(80), {}, "deeply"),
])
def test_forged_result_values_are_rejected(value, arrays, message):
    with pytest.raises(tamper.Tampered, match=message):
        tamper._check_encoded(value, arrays)


def test_genuine_results_are_admitted():
    arrays: dict = {}
    value = wire.encode((torch.ones(2, 3), np.arange(4), {"k": [1.0, float("nan")]}, torch.zeros(1, dtype=torch.bfloat16)), arrays)
    tamper._check_encoded(value, arrays)


def test_report_for_another_exercise_is_rejected():
    with pytest.raises(tamper.Tampered, match="another exercise"):
        tamper.decode_report({"grade_id": "causal_mask", "cell_error": None, "cases": []}, {}, "padding_mask")


# --------------------------------------------------------------------------- the runner's entry point


def _job(tmp_path, source):
    job = tmp_path / "job"
    job.mkdir()
    (job / "job.json").write_text(json.dumps({
        "setup": ["import numpy as np"],
        "cells": [{"grade_id": "double", "exercise": "double", "source": source}],
    }))
    arrays: dict = {}
    specs = [{"kind": "function", "args": wire.encode([np.arange(3.0)], arrays), "kwargs": {"__dict__": []}, "seed": 0}]
    wire.dump_bundle(str(job / "cases_double"), specs, arrays)
    return job


def test_main_writes_result_files_by_default(tmp_path):
    job = _job(tmp_path, "def double(x):\n    return 2 * x")
    assert runner.main([str(job)]) == 0
    data, arrays = wire.load_bundle(str(job / "out" / "result_double"))
    result = Result.from_encoded(data["cases"][0]["result"], arrays)
    assert np.array_equal(result.value, np.arange(3.0) * 2)


def test_main_sends_start_and_result_frames_to_the_result_fd(tmp_path):
    job = _job(tmp_path, "def double(x):\n    return 2 * x")
    read_fd, write_fd = os.pipe()
    assert runner.main([str(job), "--result-fd", str(write_fd)]) == 0
    try:
        os.close(write_fd)
    except OSError:
        pass
    with os.fdopen(read_fd, "rb") as stream:
        frames, problem = wire.read_frames(stream, 2**20, 2**20)
    assert problem is None
    assert [(k, g) for k, g, _, _ in frames] == [("start", "double"), ("result", "double")]
    assert not (job / "out" / "result_double.json").exists()


# --------------------------------------------------------------------------- deferred imports


def test_a_deferred_import_runs_the_module_on_first_use_only(tmp_path, monkeypatch):
    """The sandbox's program defers :data:`runner.DEFERRED_IMPORTS` (``matplotlib.pyplot``,
    ``ipywidgets``): the import binds the module without running it; reading its metadata
    (``inspect.getmodule`` reads every module's ``__file__``, as torch's import does) does
    not run it; the first real use does, once, and it is then a plain module; importing a
    submodule runs the package first, unless the submodule is deferred too (then its first use
    does); a module that is not installed still fails at the import;
    one that raises does so at its first use and leaves ``sys.modules``."""
    package = tmp_path / "deferred_probe"
    package.mkdir()
    (package / "__init__.py").write_text("import builtins\nbuiltins.DEFERRED_RAN.append('package')\nVALUE = 42\n")
    (package / "part.py").write_text("import builtins\nbuiltins.DEFERRED_RAN.append('part')\nPART = 'p'\n")
    (package / "lazy.py").write_text("import builtins\nbuiltins.DEFERRED_RAN.append('lazy')\nLAZY = 'l'\n")
    (tmp_path / "deferred_other.py").write_text("import builtins\nbuiltins.DEFERRED_RAN.append('other')\n")
    (tmp_path / "deferred_broken.py").write_text("VALUE = 1\nraise RuntimeError('broken at its import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))  # the finder leaves with the test
    monkeypatch.setattr(builtins, "DEFERRED_RAN", [], raising=False)
    names = ("deferred_probe", "deferred_probe.part", "deferred_probe.lazy", "deferred_other", "deferred_absent",
             "deferred_broken")
    try:
        runner.defer_imports({"deferred_probe", "deferred_probe.lazy", "deferred_other", "deferred_absent",
                              "deferred_broken"})
        import deferred_other
        import deferred_probe as probe

        assert builtins.DEFERRED_RAN == []
        assert probe.__name__ == "deferred_probe" and probe.__file__.endswith("__init__.py")
        inspect.getmodule(inspect.currentframe())
        assert builtins.DEFERRED_RAN == []
        assert probe.VALUE == 42 and builtins.DEFERRED_RAN == ["package"]
        assert type(probe) is types.ModuleType and probe.VALUE == 42 and builtins.DEFERRED_RAN == ["package"]
        import deferred_probe as again

        assert again is probe
        with pytest.raises(ImportError):
            import deferred_absent  # noqa: F401
        assert builtins.DEFERRED_RAN == ["package"]  # deferred_other, imported, not used: never run
        import deferred_broken

        with pytest.raises(RuntimeError, match="broken at its import"):  # raised at its first use
            deferred_broken.VALUE
        assert "deferred_broken" not in sys.modules  # gone, as after a failed import
        del sys.modules["deferred_probe"], sys.modules["deferred_other"]
        import deferred_probe.part  # noqa: F401 - a submodule runs its deferred package first

        assert builtins.DEFERRED_RAN == ["package", "package", "part"]
        assert sys.modules["deferred_probe"].part.PART == "p"
        # a deferred submodule of a deferred package: both bound, neither run; its first
        # use runs the package, then it
        del sys.modules["deferred_probe"], sys.modules["deferred_probe.part"]
        import deferred_probe.lazy as lazy

        assert builtins.DEFERRED_RAN == ["package", "package", "part"]
        assert type(sys.modules["deferred_probe"]).__name__ == type(lazy).__name__ == "_DeferredModule"
        assert lazy.LAZY == "l" and builtins.DEFERRED_RAN[3:] == ["package", "lazy"]
        assert sys.modules["deferred_probe"].lazy is lazy and type(lazy) is types.ModuleType
        assert isinstance(deferred_other, types.ModuleType)
    finally:
        for name in names:
            sys.modules.pop(name, None)


def test_the_sandbox_program_defers_pyplot_and_a_cell_that_plots_still_plots(tmp_path):
    """``runner.py`` run as the sandbox's program (here a plain subprocess on a built library):
    the setup's ``import matplotlib.pyplot`` binds a module not yet run, a cell that plots
    runs it and draws, and the graded cell is graded as before. ``main`` called in the
    grader's own process (the tests above) defers nothing."""
    assert runner.DEFERRED_IMPORTS == {"matplotlib", "matplotlib.pyplot", "ipywidgets"}
    lib = build_library(tmp_path / "lib", set())
    job = _job(tmp_path, "def double(x):\n    return 2 * x")
    spec = json.loads((job / "job.json").read_text())
    spec["setup"] = ["import sys\nimport matplotlib.pyplot as plt\n"
                     "print('setup', type(sys.modules['matplotlib.pyplot']).__name__, "
                     "type(sys.modules['matplotlib']).__name__, file=sys.stderr)"]
    spec["cells"].insert(0, {"context": True, "exercise": "figure",
                             "source": "figure = plt.figure()\nplt.plot([1, 2])\n"
                                       "print('plotted', type(plt).__name__, len(figure.axes), file=sys.stderr)"})
    (job / "job.json").write_text(json.dumps(spec))
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(lib), "MPLBACKEND": "Agg",
           "MPLCONFIGDIR": str(tmp_path / "mpl"), "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-s", "-B", str(lib / "runner.py"), str(job)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "setup _DeferredModule _DeferredModule" in done.stderr and "plotted module 1" in done.stderr, done.stderr
    data, arrays = wire.load_bundle(str(job / "out" / "result_double"))
    assert np.array_equal(Result.from_encoded(data["cases"][0]["result"], arrays).value, np.arange(3.0) * 2)


def test_a_deferred_package_that_uses_its_deferred_submodule_runs_it_once(tmp_path, monkeypatch):
    """Both deferred, the package's own code imports and uses the submodule: the first use
    of the submodule runs the package, which runs the submodule; it is not run again."""
    package = tmp_path / "deferred_pair"
    package.mkdir()
    (package / "__init__.py").write_text("import builtins\nbuiltins.DEFERRED_RAN.append('package')\n"
                                         "import deferred_pair.inner\nX = deferred_pair.inner.Y\n")
    (package / "inner.py").write_text("import builtins\nbuiltins.DEFERRED_RAN.append('inner')\nY = 5\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.setattr(builtins, "DEFERRED_RAN", [], raising=False)
    try:
        runner.defer_imports({"deferred_pair", "deferred_pair.inner"})
        import deferred_pair.inner as inner

        assert builtins.DEFERRED_RAN == []
        assert inner.Y == 5 and builtins.DEFERRED_RAN == ["package", "inner"]
        assert sys.modules["deferred_pair"].X == 5 and builtins.DEFERRED_RAN == ["package", "inner"]
    finally:
        for name in ("deferred_pair", "deferred_pair.inner"):
            sys.modules.pop(name, None)
