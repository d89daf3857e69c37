"""Run exercise cases against a student's object, and move data across the sandbox wall.

This module is the only piece of the autograder that executes inside the grading
sandbox, so it is deliberately standalone: it imports the standard library and
numpy (torch lazily), never ``autograder`` or ``solutions``. The same functions
run the visible checks in the student's own kernel, so both paths see identical
values.

Everything that crosses the wall is *data*: a JSON document plus one ``.npz``
file of arrays (read with ``allow_pickle=False``). Case specs travel in; results
travel out. Expected answers never enter the sandbox.

Case spec (a dict, built by :class:`autograder.checks.base.Case`)::

    {"kind": "call" | "class",
     "args": [...], "kwargs": {...},           # encoded values (see encode)
     "init": {...} | None,                      # class: constructor kwargs
     "state": {param_name: ndarray} | None,     # class: state_dict to load (load_state)
     "strict_state": False,                     # class: the module may hold no other state
     "method": "forward", "train": False,
     "attrs": ["attn_weights", ...],            # attributes read after the call
     "probes": ["state_dict_keys", ...],        # structural facts about the object
     "backward": ndarray | None,                # weights w: grads of sum(w * output)
     "return_args": [0, ...],                   # arguments to send back after the call
     "seed": int}                               # torch/numpy seed set before the call

Result (a dict)::

    {"value": encoded output, "attrs": {...}, "probes": {...},
     "grads": {arg_index: tensor}, "args_after": {arg_index: value},
     "raised": None | {"type", "message", "phase"}}
"""
from __future__ import annotations

import json
import math
import os
import sys
import traceback
from typing import Any

import numpy as np

__all__ = [
    "Tensor",
    "Obj",
    "encode",
    "decode",
    "run_case",
    "dump_bundle",
    "load_bundle",
    "write_frame",
    "read_frames",
    "main",
]

# Largest array the runner accepts back from a student's object (elements).
MAX_RESULT_ELEMENTS = 5_000_000


class Tensor:
    """Marks an input array that must reach the student's code as a ``torch.Tensor``.

    Args:
        value: the data (its numpy dtype fixes the torch dtype: float32, float64,
            int64, bool ...).
        requires_grad: whether the tensor tracks gradients (for ``backward`` cases).
    """

    def __init__(self, value, requires_grad: bool = False):
        self.value = np.asarray(value)
        self.requires_grad = bool(requires_grad)

    def __repr__(self) -> str:
        return f"Tensor(shape={self.value.shape}, dtype={self.value.dtype})"


class Obj:
    """Marks an input object built inside the runner from data.

    Args:
        factory: dotted path of a trusted constructor, e.g. ``"torch.nn.Linear"`` or
            ``"solutions.Transformer"`` (only earlier chapters' building blocks are
            importable in the sandbox).
        init: constructor keyword arguments (encoded values).
        state: optional ``state_dict`` (name -> ndarray) loaded with ``strict=True``.
        tie: ``[(name, source), ...]``: after loading, the parameter ``name``
            (a dotted path, e.g. ``"2.weight"``) becomes the very ``Parameter`` at
            ``source`` — a trusted model with shared weights, built from torch
            modules alone (``count_parameters`` must count it once).
    """

    def __init__(self, factory: str, init: dict | None = None, state: dict | None = None,
                 tie: list | None = None):
        self.factory = factory
        self.init = dict(init or {})
        self.state = dict(state or {})
        self.tie = [(str(a), str(b)) for a, b in (tie or [])]

    def __repr__(self) -> str:
        return f"Obj({self.factory}, {self.init})"


# --------------------------------------------------------------------------- encoding


def _torch():
    import torch

    return torch


def encode(value: Any, arrays: dict[str, np.ndarray], *, extension=None) -> Any:
    """Turn a value into JSON-able data, storing arrays in ``arrays``.

    Only plain data survives: objects that are not numbers, strings, containers,
    numpy arrays or torch tensors are rejected with ``TypeError``, so an object
    that lies about equality cannot cross the wall.

    The one codec of the project: the stored checks of the student package
    (:mod:`autograder.student.expected`) use it with an ``extension``, a function
    ``(value, arrays) -> data`` tried first on every value, at every depth, that
    returns ``NotImplemented`` for the values it leaves to this one.
    """
    if extension is not None:
        data = extension(value, arrays)
        if data is not NotImplemented:
            return data
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        if math.isfinite(f):
            return f
        return {"__float__": repr(f)}
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, Tensor):
        key = f"a{len(arrays)}"
        arrays[key] = np.ascontiguousarray(value.value)
        return {"__tensor__": key, "requires_grad": value.requires_grad}
    if isinstance(value, Obj):
        state = {}
        for name, arr in value.state.items():
            key = f"a{len(arrays)}"
            arrays[key] = np.ascontiguousarray(np.asarray(arr))
            state[name] = key
        return {"__obj__": value.factory, "init": encode(value.init, arrays, extension=extension), "state": state,
                "tie": [list(pair) for pair in value.tie]}
    if isinstance(value, np.ndarray):
        _check_size(value.size)
        key = f"a{len(arrays)}"
        # np.array(..., copy) drops any ndarray subclass and its overrides.
        arrays[key] = np.array(value, copy=True, subok=False)
        return {"__ndarray__": key}
    if type(value).__module__.startswith("torch") and type(value).__name__ in (
        "Tensor",
        "Parameter",
    ):
        torch = _torch()
        t = torch.Tensor.detach(value)
        _check_size(t.numel())
        dtype = str(t.dtype).replace("torch.", "")
        if t.dtype == torch.bfloat16:
            t = t.float()
        key = f"a{len(arrays)}"
        arrays[key] = np.array(torch.Tensor.numpy(torch.Tensor.cpu(t)), copy=True)
        return {"__tensor__": key, "dtype": dtype}
    if isinstance(value, tuple):
        return {"__tuple__": [encode(v, arrays, extension=extension) for v in value]}
    if isinstance(value, list):
        return [encode(v, arrays, extension=extension) for v in value]
    if isinstance(value, dict):
        items = []
        for k, v in value.items():
            if not isinstance(k, (str, int)) or isinstance(k, bool):
                raise TypeError(f"dictionary keys must be str or int, got {type(k).__name__}")
            items.append([k, encode(v, arrays, extension=extension)])
        return {"__dict__": items}
    raise TypeError(
        f"returned an object of type {type(value).__module__}.{type(value).__qualname__}; "
        "expected numbers, strings, lists/tuples/dicts, numpy arrays or torch tensors"
    )


def _check_size(n: int) -> None:
    if n > MAX_RESULT_ELEMENTS:
        raise ValueError(f"an array of {n} elements is larger than any expected answer")


def decode(data: Any, arrays, *, as_torch: bool = True, extension=None) -> Any:
    """Inverse of :func:`encode`. Tensors come back as ``torch.Tensor`` when
    ``as_torch`` (inputs for the student's code) or as :class:`Tensor` markers
    (results inspected by the trusted judge). ``extension``, a function
    ``(data, arrays) -> value`` tried first on every tagged dict, at every depth,
    decodes the tags of an :func:`encode` extension (``NotImplemented``: not one of
    its tags)."""
    if isinstance(data, list):
        return [decode(v, arrays, as_torch=as_torch, extension=extension) for v in data]
    if not isinstance(data, dict):
        return data
    if extension is not None:
        value = extension(data, arrays)
        if value is not NotImplemented:
            return value
    if "__float__" in data:
        return float(data["__float__"])
    if "__ndarray__" in data:
        return np.array(arrays[data["__ndarray__"]], copy=True)
    if "__tensor__" in data:
        arr = np.array(arrays[data["__tensor__"]], copy=True)
        if not as_torch:
            marker = Tensor(arr)
            marker.dtype = data.get("dtype", str(arr.dtype))
            return marker
        torch = _torch()
        t = torch.from_numpy(arr)
        if data.get("requires_grad"):
            t.requires_grad_(True)
        return t
    if "__tuple__" in data:
        return tuple(decode(v, arrays, as_torch=as_torch, extension=extension) for v in data["__tuple__"])
    if "__dict__" in data:
        return {k: decode(v, arrays, as_torch=as_torch, extension=extension) for k, v in data["__dict__"]}
    if "__obj__" in data:
        return _build_obj(data, arrays)
    raise ValueError(f"unknown encoded value {sorted(data)}")


_ALLOWED_FACTORIES = ("torch.nn.", "solutions.")


def _build_obj(data, arrays):
    path = data["__obj__"]
    if not path.startswith(_ALLOWED_FACTORIES):
        raise ValueError(f"factory {path!r} is not allowed")
    module_name, _, attr = path.rpartition(".")
    import importlib

    factory = getattr(importlib.import_module(module_name), attr)
    obj = factory(**decode(data["init"], arrays))
    if data["state"]:
        torch = _torch()
        state = {k: torch.from_numpy(np.array(arrays[v], copy=True)) for k, v in data["state"].items()}
        obj.load_state_dict(state, strict=True)
    for name, source in data.get("tie") or []:
        owner_path, _, attr = str(name).rpartition(".")
        owner = obj.get_submodule(owner_path) if owner_path else obj
        setattr(owner, attr, obj.get_parameter(str(source)))
    if hasattr(obj, "eval"):
        obj.eval()
    return obj


# --------------------------------------------------------------------------- running


def _seed(seed: int) -> None:
    np.random.seed(seed % (2**32))
    try:
        torch = _torch()
    except ImportError:  # numpy-only chapters
        return
    torch.manual_seed(seed)


def run_case(obj: Any, spec: dict, arrays) -> dict:
    """Apply one case spec to ``obj`` (the student's function or class).

    Args:
        obj: the object under test.
        spec: a case spec (see the module docstring), with values encoded.
        arrays: the arrays the spec refers to.

    Returns:
        The *encoded* result dict (``value``, ``attrs``, ``probes``, ``grads``,
        ``raised``) and, in ``result["__arrays__"]``, the arrays it refers to.
    """
    out_arrays: dict[str, np.ndarray] = {}
    result: dict[str, Any] = {
        "value": None,
        "attrs": {},
        "probes": {},
        "grads": {},
        "args_after": {},
        "raised": None,
    }
    phase = "decode"
    try:
        _seed(int(spec.get("seed", 0)))
        args = decode(spec.get("args", []), arrays)
        kwargs = decode(spec.get("kwargs", {"__dict__": []}), arrays)
        target = obj
        if spec.get("kind") == "class":
            phase = "init"
            init = decode(spec.get("init") or {"__dict__": []}, arrays)
            target = obj(**init)
            state = spec.get("state")
            if state:
                phase = "load_state_dict"
                torch = _torch()
                sd = {k: torch.from_numpy(np.array(arrays[v], copy=True)) for k, v in state.items()}
                load_state(target, sd, strict=bool(spec.get("strict_state", False)))
            if hasattr(target, "train"):
                target.train(bool(spec.get("train", False)))
            phase = "probe"
            result["probes"] = _probes(target, spec.get("probes", []), out_arrays)
            fn = getattr(target, spec.get("method") or "forward")
        else:
            fn = target
        phase = "call"
        value = fn(*args, **kwargs)
        phase = "encode"
        result["value"] = encode(value, out_arrays)
        for name in spec.get("attrs", []):
            result["attrs"][name] = encode(getattr(target, name, None), out_arrays)
        for index in spec.get("return_args", []):
            result["args_after"][str(index)] = encode(args[int(index)], out_arrays)
        if spec.get("backward") is not None:
            phase = "backward"
            result["grads"] = _backward(value, args, spec["backward"], arrays, out_arrays)
    except BaseException as exc:  # noqa: BLE001 - a student's SystemExit is a result too
        if isinstance(exc, KeyboardInterrupt):
            raise
        result["raised"] = {
            "type": type(exc).__name__,
            "message": _safe_str(exc)[:2000],
            "phase": phase,
            "traceback": _short_traceback(exc),
        }
    result["__arrays__"] = out_arrays
    return result


#: The start of the message :func:`load_state` raises when the module lacks keys of
#: the state it is given; the key names follow, each quoted with ``repr``.
MISSING_STATE = "the module has no parameter or buffer for the state_dict key(s) the contract names:"


def load_state(module, state: dict, strict: bool = False) -> None:
    """Load the reference's ``state`` (the parameters and buffers the contract
    names) into a student's ``module``.

    A module is judged by the parameters the contract names: state of its own
    beside them (a registered buffer holding √d_model, a helper's cache) is
    accepted unless ``strict`` (where the contract fixes the whole state dict,
    such as ``PositionalEncoding``'s ``pe`` buffer).

    Args:
        module: the student's ``torch.nn.Module``.
        state: name -> tensor, every name one the contract fixes.
        strict: also refuse buffers of the module that ``state`` does not hold
            (parameters it does not hold are always refused).

    Raises:
        RuntimeError: a key of ``state`` that the module does not have; the message
            starts with :data:`MISSING_STATE` and names each such key.
        RuntimeError: a parameter ``state`` does not name; from ``load_state_dict``
            (a shape that differs, or with ``strict`` a buffer the contract does not name).
    """
    own = set(module.state_dict().keys())
    missing = [str(k) for k in state if k not in own]
    if missing:
        raise RuntimeError(f"{MISSING_STATE} {', '.join(repr(k) for k in missing)}")
    extra = [str(name) for name, _ in module.named_parameters() if name not in state]
    if extra:  # a trainable tensor the contract does not name changes the model; a buffer does not
        raise RuntimeError(f"unexpected parameter(s) {', '.join(repr(k) for k in extra)} beside those the "
                           "contract names (a buffer of your own is fine, a parameter is not)")
    module.load_state_dict(state, strict=bool(strict))


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except BaseException:  # noqa: BLE001 - a hostile __str__
        return "<unprintable exception>"


def _short_traceback(exc: BaseException) -> str:
    try:
        lines = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-3)
        return "".join(lines)[-3000:]
    except BaseException:  # noqa: BLE001
        return ""


def _probes(target, names, out_arrays) -> dict:
    probes = {}
    for name in names:
        if name == "state_dict_keys":
            probes[name] = sorted(str(k) for k in target.state_dict().keys())
        elif name == "parameter_names":
            probes[name] = sorted(n for n, _ in target.named_parameters())
        elif name == "buffer_names":
            probes[name] = sorted(n for n, _ in target.named_buffers())
        elif name == "parameter_shapes":
            probes[name] = encode({n: list(p.shape) for n, p in target.named_parameters()}, out_arrays)
        elif name.startswith("attr:"):
            probes[name] = encode(getattr(target, name[5:], None), out_arrays)
        elif name.startswith("type:"):
            obj = getattr(target, name[5:], None)
            probes[name] = None if obj is None else f"{type(obj).__module__}.{type(obj).__qualname__}"
        else:
            raise ValueError(f"unknown probe {name!r}")
    return probes


def _backward(value, args, weight_data, arrays, out_arrays) -> dict:
    torch = _torch()
    out = value[0] if isinstance(value, (tuple, list)) else value
    weight = decode(weight_data, arrays)
    if not isinstance(weight, torch.Tensor):
        weight = torch.as_tensor(weight)
    (out * weight.to(out.dtype)).sum().backward()
    grads = {}
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor) and a.requires_grad:
            grads[str(i)] = encode(a.grad, out_arrays)
    return grads


# --------------------------------------------------------------------------- files


def dump_bundle(path_stem: str, data: Any, arrays: dict[str, np.ndarray]) -> None:
    """Write ``data`` as ``<stem>.json`` and ``arrays`` as ``<stem>.npz`` (atomically)."""
    tmp_npz = path_stem + ".tmp.npz"
    np.savez(tmp_npz, **arrays)
    os.replace(tmp_npz, path_stem + ".npz")
    tmp_json = path_stem + ".json.tmp"
    with open(tmp_json, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    os.replace(tmp_json, path_stem + ".json")


def load_bundle(path_stem: str, max_bytes: int = 256 * 2**20):
    """Read a bundle written by :func:`dump_bundle`; never unpickles."""
    for suffix in (".json", ".npz"):
        size = os.path.getsize(path_stem + suffix)
        if size > max_bytes:
            raise ValueError(f"{path_stem + suffix} is {size} bytes, over the {max_bytes} limit")
    with open(path_stem + ".json", encoding="utf-8") as fh:
        data = json.load(fh)
    with np.load(path_stem + ".npz", allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    return data, arrays


FRAME_KINDS = ("start", "cases", "result")


def write_frame(stream, grade_id: str, data: Any = None, arrays: dict[str, np.ndarray] | None = None,
                *, start: bool = False, kind: str | None = None) -> None:
    """Write one frame to a byte stream (the result pipe, or the cases pipe).

    A frame is a JSON header line ``{"grade_id", "kind", "json", "npz"}``, then
    ``json`` bytes of JSON and ``npz`` bytes of ``.npz``. The runner sends, per
    graded cell, ``start`` (about to execute that cell), ``cases`` (the cell is
    defined: send its cases; no body) and ``result`` (its bundle follows); the
    trusted side answers a ``cases`` frame with one ``cases`` frame carrying the
    case specs (:func:`autograder.sandbox.run_job`).

    Args:
        stream: a binary stream.
        grade_id: the cell's grade_id.
        data, arrays: the frame's body (JSON-able data and its arrays).
        start: the same as ``kind="start"``.
        kind: one of :data:`FRAME_KINDS` (default ``"result"``, or ``"start"``
            with ``start``). A ``start`` frame, or a ``cases`` request without
            ``data``, has no body.
    """
    import io

    kind = kind or ("start" if start else "result")
    if kind not in FRAME_KINDS:
        raise ValueError(f"frame kind must be one of {FRAME_KINDS}, got {kind!r}")
    if kind == "start" or (kind == "cases" and data is None):
        body = npz = b""
    else:
        buf = io.BytesIO()
        np.savez(buf, **(arrays or {}))
        npz = buf.getvalue()
        body = json.dumps(data).encode("utf-8")
    header = {"grade_id": grade_id, "kind": kind, "json": len(body), "npz": len(npz)}
    stream.write(json.dumps(header).encode("utf-8") + b"\n" + body + npz)
    stream.flush()


def read_frames(stream, max_frame_bytes: int, max_total_bytes: int, into: list | None = None,
                max_json_bytes: int | None = None, on_frame=None, drain: bool = True):
    """Read the frames of :func:`write_frame` until end of stream.

    Returns ``(frames, problem)``: ``frames`` a list of ``(kind, grade_id,
    json_bytes, npz_bytes)`` in arrival order; ``problem`` ``None`` or what was
    wrong (a malformed or oversized frame: reading stops there, and the rest of
    the stream is drained and dropped). Nothing is decoded beyond the header.
    Frames are appended to ``into`` (when given) as they arrive, so a reader that
    gives up waiting still has what came, and ``on_frame(kind, grade_id)`` (when
    given) is called after each is appended. ``max_json_bytes`` bounds a frame's
    JSON part on its own (default: ``max_frame_bytes``); an oversized frame is
    refused from its header, before a byte of its body is read. A problem never
    quotes what the stream announced (sizes, names): only the grader's limits.
    ``drain=False`` returns at the end of the frames, leaving the rest unread.
    """
    frames: list[tuple[str, str, bytes, bytes]] = [] if into is None else into
    total = 0
    problem = None
    while True:
        frame, problem = read_frame(stream, min(max_frame_bytes, max_total_bytes - total), max_json_bytes)
        if frame is None:
            break
        total += len(frame[2]) + len(frame[3])
        frames.append(frame)
        if on_frame is not None:
            on_frame(frame[0], frame[1])
    while drain and stream.read(65536):  # drain, so the writer never blocks
        pass
    return frames, problem


def read_frame(stream, max_frame_bytes: int, max_json_bytes: int | None = None):
    """Read one frame of :func:`write_frame`: ``((kind, grade_id, json_bytes,
    npz_bytes), None)``, or ``(None, problem)`` where ``problem`` is ``None`` at
    a clean end of stream and else says, in the reader's words, what was wrong."""
    header = stream.readline(4096)
    if not header:
        return None, None
    try:
        meta = json.loads(header.decode("utf-8"))
        kind, grade_id = meta["kind"], meta["grade_id"]
        n_json, n_npz = int(meta["json"]), int(meta["npz"])
        if kind not in FRAME_KINDS or not isinstance(grade_id, str) or n_json < 0 or n_npz < 0:
            raise ValueError
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None, "a malformed result frame"
    if max_json_bytes is not None and n_json > max_json_bytes:
        return None, f"a result frame announcing more JSON than the {max_json_bytes}-byte limit"
    if n_json + n_npz > max_frame_bytes:
        return None, f"a result frame over the {max_frame_bytes}-byte limit"
    body = stream.read(n_json)
    npz = stream.read(n_npz)
    if len(body) != n_json or len(npz) != n_npz:
        return None, "a truncated result frame"
    return (kind, grade_id, body, npz), None


# --------------------------------------------------------------------------- sandbox entry


def main(argv: list[str] | None = None) -> int:
    """Sandbox entry point: ``python runner.py JOB_DIR [--result-fd N [--cases-fd M]]``.

    ``JOB_DIR/job.json`` holds ``{"setup": [source, ...], "cells": [{"grade_id",
    "exercise", "source"}, ...]}`` (a cell with ``"context": true`` is only
    executed: it defines what later cells call, and is not graded). Runs the setup
    cells, then each solution cell followed at once by its cases.

    With ``--result-fd N`` each cell's bundle goes, as a :func:`write_frame`
    frame, to the inherited pipe ``N``: once the trusted reader has a frame, no
    later cell can rewrite it, and a second frame for the same exercise is
    visible. With ``--cases-fd M`` too (how the grader runs it), no case is in the
    job folder: once a cell is defined, the runner sends a ``cases`` frame and
    reads that cell's cases, and only those, from the inherited pipe ``M``, where
    the trusted side writes them in answer (:func:`autograder.sandbox.run_job`).
    So code that runs before a cell's check (the setup, an earlier cell) finds
    none of its cases anywhere: not in a file, and not in the pipe, which is
    empty until then. Without ``--cases-fd``, the cases are read from
    ``JOB_DIR/cases_<grade_id>.{json,npz}`` and, without ``--result-fd``, the
    results written to ``JOB_DIR/out/result_<grade_id>.{json,npz}`` (the
    in-process tests' mode; not for untrusted code).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    result_stream = cases_stream = None
    if "--result-fd" in argv:
        i = argv.index("--result-fd")
        result_stream = os.fdopen(int(argv[i + 1]), "wb")
        del argv[i : i + 2]
    if "--cases-fd" in argv:
        i = argv.index("--cases-fd")
        cases_stream = os.fdopen(int(argv[i + 1]), "rb")
        del argv[i : i + 2]
        if result_stream is None:
            raise SystemExit("runner.py: --cases-fd needs --result-fd (the cases are asked for on the result pipe)")
    job_dir = argv[0]
    with open(os.path.join(job_dir, "job.json"), encoding="utf-8") as fh:
        job = json.load(fh)
    out_dir = os.path.join(job_dir, "out")
    os.makedirs(out_dir, exist_ok=True)
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
    for i, source in enumerate(job.get("setup", [])):
        try:
            exec(compile(source, f"<setup cell {i}>", "exec"), namespace)
        except BaseException as exc:  # noqa: BLE001
            print(f"setup cell {i} raised {type(exc).__name__}: {_safe_str(exc)}", file=sys.stderr)
    for cell in job["cells"]:
        if cell.get("context"):
            # A cell that only defines what a graded cell calls (an earlier answer,
            # or an earlier exercise's reference in place of a failing answer): it
            # is not graded here, sends no frame, and its errors are not reported.
            try:
                exec(compile(cell["source"], f"<context cell {cell.get('exercise', '')}>", "exec"), namespace)
            except Exception:  # noqa: BLE001
                pass
            continue
        grade_id = cell["grade_id"]
        if result_stream is not None:
            write_frame(result_stream, grade_id, start=True)
        report: dict[str, Any] = {"grade_id": grade_id, "cell_error": None, "cases": []}
        out_arrays: dict[str, np.ndarray] = {}
        try:
            exec(compile(cell["source"], f"<cell {grade_id}>", "exec"), namespace)
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, KeyboardInterrupt):
                raise
            report["cell_error"] = {
                "type": type(exc).__name__,
                "message": _safe_str(exc)[:2000],
                "traceback": _short_traceback(exc),
            }
        obj = namespace.get(cell["exercise"])
        if report["cell_error"] is None and obj is None:
            report["cell_error"] = {
                "type": "NameError",
                "message": f"the cell does not define {cell['exercise']!r}",
                "traceback": "",
            }
        if report["cell_error"] is None:
            if cases_stream is not None:
                specs, arrays = _receive_cases(result_stream, cases_stream, grade_id)
            else:
                specs, arrays = load_bundle(os.path.join(job_dir, f"cases_{grade_id}"))
            for spec in specs:
                res = run_case(obj, spec, arrays)
                res_arrays = res.pop("__arrays__")
                renamed = {}
                for key, arr in res_arrays.items():
                    new_key = f"c{len(report['cases'])}_{key}"
                    out_arrays[new_key] = arr
                    renamed[key] = new_key
                report["cases"].append({"result": _rename(res, renamed)})
        if result_stream is not None:
            write_frame(result_stream, grade_id, report, out_arrays)
        else:
            dump_bundle(os.path.join(out_dir, f"result_{grade_id}"), report, out_arrays)
    return 0


# Largest case bundle the runner accepts from the cases pipe (the trusted side
# writes it; a chapter-8 Transformer's state is a few MB).
MAX_CASES_BYTES = 512 * 2**20


def _receive_cases(result_stream, cases_stream, grade_id: str) -> tuple[list, dict]:
    """Ask the trusted side for ``grade_id``'s cases and read them from the cases pipe.

    Returns ``(specs, arrays)``; no cases at all (``[]``) when the trusted side sent
    none (it answers only a request in protocol order) or sent something else.
    """
    import io

    write_frame(result_stream, grade_id, kind="cases")
    frame, _ = read_frame(cases_stream, MAX_CASES_BYTES)
    if frame is None or frame[0] != "cases" or frame[1] != grade_id:
        return [], {}
    specs = json.loads(frame[2].decode("utf-8"))
    with np.load(io.BytesIO(frame[3]), allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    return specs, arrays


def _rename(data, renamed):
    if isinstance(data, list):
        return [_rename(v, renamed) for v in data]
    if isinstance(data, dict):
        out = {}
        for k, v in data.items():
            if k in ("__ndarray__", "__tensor__") and isinstance(v, str):
                out[k] = renamed[v]
            else:
                out[k] = _rename(v, renamed)
        return out
    return data


if __name__ == "__main__":  # pragma: no cover - exercised through the sandbox tests
    sys.exit(main())
