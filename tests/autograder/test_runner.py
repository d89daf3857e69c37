"""The runner's wall: only plain data crosses, in both directions.

``encode`` / ``decode`` / ``run_case`` run in the student's process; the frame
protocol carries results to the trusted process, which validates them
(``tamper._check_encoded`` / ``_load_frame``) before judging.
"""
from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest
import torch

from autograder import runner, tamper, wire
from autograder.checks.base import Result
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
    import os

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
