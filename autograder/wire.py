"""The wire format: how data crosses the grading sandbox's wall, and nothing else.

Everything that crosses the wall is *data*: a JSON document plus arrays in one
``.npz`` (read with ``allow_pickle=False``). :func:`encode` / :func:`decode` turn
values into that data and back (numbers, strings, containers, numpy arrays, torch
tensors; :class:`Tensor` and :class:`Obj` mark inputs that must arrive as a tensor or
as an object built from a trusted factory); :func:`write_frame` / :func:`read_frames`
carry it over a pipe as frames (``start``, ``cases``, ``result``; ``call`` and ``answer``
for a regrade's references, :mod:`autograder.oracle`), and :func:`dump_bundle` /
:func:`load_bundle` as files. What comes back from the sandbox is admitted by
:func:`load_body` and :func:`check_encoded` before anything decodes it.

Both sides speak it: the runner inside the sandbox (:mod:`autograder.runner`), and the
trusted grader, the checks and the student package's stored expectations outside. So
it is standalone: the standard library and numpy (torch lazily), never ``solutions``
or the rest of the autograder; the sandbox's library holds a copy of this file beside
``runner.py`` (:func:`autograder.library.build_library`).
"""
from __future__ import annotations

import importlib
import io
import json
import math
import os
import zipfile
from typing import Any

import numpy as np

__all__ = ["MAX_RESULT_ELEMENTS", "Tensor", "Obj", "encode", "decode", "dump_bundle", "load_bundle", "FRAME_KINDS",
           "write_frame", "read_frames", "read_frame", "WireError", "load_body", "check_encoded"]

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
    """torch, imported on first use: numpy-only chapters, and the grader reading results, run without it."""
    # torch on first use: numpy-only chapters run without it (heavy)
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


FRAME_KINDS = ("start", "cases", "result", "call", "answer", "callback", "return", "ready")


def write_frame(stream, grade_id: str, data: Any = None, arrays: dict[str, np.ndarray] | None = None,
                *, start: bool = False, kind: str | None = None) -> None:
    """Write one frame to a byte stream (the result pipe, or the cases pipe).

    A frame is a JSON header line ``{"grade_id", "kind", "json", "npz"}``, then
    ``json`` bytes of JSON and ``npz`` bytes of ``.npz``. The runner sends, per
    graded cell, ``start`` (about to execute that cell), ``cases`` (the cell is
    defined: send its cases; no body) and ``result`` (its bundle follows); the
    trusted side answers a ``cases`` frame with one ``cases`` frame carrying the
    case specs (:func:`autograder.sandbox.run_job`). In a regrade, a ``call`` frame
    asks for a reference's result and an ``answer`` frame carries it; before the answer,
    a ``callback`` frame asks the caller to run a callable argument of the call and a
    ``return`` frame carries its result; ``ready`` says the references' sandbox has
    started (:class:`autograder.reference_calls.ReferenceCalls`, :mod:`autograder.oracle`);
    ``grade_id`` then names the exercise.

    Args:
        stream: a binary stream.
        grade_id: the cell's grade_id.
        data, arrays: the frame's body (JSON-able data and its arrays).
        start: the same as ``kind="start"``.
        kind: one of :data:`FRAME_KINDS` (default ``"result"``, or ``"start"``
            with ``start``). A ``start`` or ``ready`` frame, or a ``cases`` request
            without ``data``, has no body.
    """
    kind = kind or ("start" if start else "result")
    if kind not in FRAME_KINDS:
        raise ValueError(f"frame kind must be one of {FRAME_KINDS}, got {kind!r}")
    if kind in ("start", "ready") or (kind == "cases" and data is None):
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


# --------------------------------------------------------------------------- admitting what comes back


class WireError(ValueError):
    """Data that :func:`encode` and :func:`write_frame` never produce: the reason is
    the reader's own words, never a quote of what it read."""


#: The deepest nesting and the most values :func:`check_encoded` admits.
MAX_DEPTH = 64
MAX_NODES = 200_000


def load_body(body: bytes, npz: bytes, max_bytes: int) -> tuple[Any, dict]:
    """Decode a frame's body: plain JSON and an ``.npz`` read without pickle, with its
    uncompressed size checked first (no zip bomb).

    Args:
        body, npz: the frame's two parts, as :func:`read_frame` returns them.
        max_bytes: the most bytes of JSON plus uncompressed arrays admitted.

    Returns:
        ``(data, arrays)``.

    Raises:
        WireError: an archive or a document :func:`write_frame` could not have written,
            or one over ``max_bytes``.
    """
    try:
        with zipfile.ZipFile(io.BytesIO(npz)) as zf:
            unpacked = sum(info.file_size for info in zf.infolist())
            if any(info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED) for info in zf.infolist()):
                raise WireError("an array file in a compression the runner never uses")
    except WireError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the archive is, it is not the runner's
        raise WireError(f"an unreadable array file ({type(exc).__name__})") from None
    if len(body) + unpacked > max_bytes:
        raise WireError(f"a result over the {max_bytes / 2**20:.0f} MB limit")
    try:
        data = json.loads(body.decode("utf-8"))
        with np.load(io.BytesIO(npz), allow_pickle=False) as arrays:
            return data, {k: arrays[k] for k in arrays.files}
    except Exception as exc:  # noqa: BLE001 - any archive the runner could not have written
        # (an unknown compression method raises NotImplementedError, for one)
        raise WireError(f"an unreadable result ({type(exc).__name__})") from None


def check_encoded(value: Any, arrays: dict, depth: int = 0, budget: list | None = None,
                  callbacks: list | None = None) -> None:
    """Admit only what :func:`encode` produces for plain data: numbers, strings, lists,
    tuples, dicts and numeric arrays; no :class:`Obj` factory (which would run code
    where it is decoded), no structured dtype, no dtype label that disagrees with its
    array, at most :data:`MAX_DEPTH` deep and :data:`MAX_NODES` values.

    Args:
        value, arrays: the encoded data and its arrays.
        callbacks: where a regrade's call may pass a callable (``ResidualSublayer``'s
            ``sublayer``, which stays in the caller's process: :mod:`autograder.oracle`),
            a list that receives the number of each ``{"__callback__": n}`` marker; by
            default such a marker is refused like any other unknown value.

    Raises:
        WireError: anything else.
    """
    budget = budget if budget is not None else [MAX_NODES]
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH:
        raise WireError("a result nested too deeply or too large")
    if value is None or isinstance(value, (bool, int, str)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise WireError("a raw non-finite float")
        return
    if isinstance(value, list):
        for v in value:
            check_encoded(v, arrays, depth + 1, budget, callbacks)
        return
    if not isinstance(value, dict):
        raise WireError(f"a value of JSON type {type(value).__name__}")
    keys = set(value)
    if callbacks is not None and keys == {"__callback__"} and type(value["__callback__"]) is int \
            and 0 <= value["__callback__"] < MAX_NODES:
        callbacks.append(value["__callback__"])
        return
    if keys == {"__float__"}:
        try:
            f = float(value["__float__"])
        except (TypeError, ValueError):
            raise WireError("a malformed float") from None
        if math.isfinite(f):
            raise WireError("a finite float in non-finite form")
        return
    if keys == {"__ndarray__"} or keys in ({"__tensor__", "dtype"}, {"__tensor__", "requires_grad"}, {"__tensor__"}):
        key = value.get("__ndarray__", value.get("__tensor__"))
        if not isinstance(key, str) or key not in arrays:
            raise WireError("a reference to a missing array")
        arr = arrays[key]
        if arr.dtype.kind not in "biufc" or arr.dtype.hasobject:
            raise WireError("an array of a dtype that is not numbers")
        if "dtype" in value:
            label = value["dtype"]
            if not isinstance(label, str) or not (label == str(arr.dtype) or (label == "bfloat16" and arr.dtype == np.float32)):
                raise WireError("a tensor whose dtype label disagrees with its data")
        return
    if keys == {"__tuple__"} and isinstance(value["__tuple__"], list):
        check_encoded(value["__tuple__"], arrays, depth + 1, budget, callbacks)
        return
    if keys == {"__dict__"} and isinstance(value["__dict__"], list):
        for item in value["__dict__"]:
            if (
                not isinstance(item, list)
                or len(item) != 2
                or not isinstance(item[0], (str, int))
                or isinstance(item[0], bool)
            ):
                raise WireError("a malformed dict entry")
            check_encoded(item[1], arrays, depth + 1, budget, callbacks)
        return
    raise WireError("an encoded value with keys the runner never writes")
