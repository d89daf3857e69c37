"""The visible checks as data: cases and expected results, written at release, read by the package.

At release (in the repository, with ``solutions``), :func:`write_chapter` makes each
exercise's visible cases exactly as the visible check does (``Exercise.cases`` with
the fixed visible seed), runs them on the reference (``Exercise.expected``) and
writes both as data: ``<chapter>.json`` (the encoded values: the runner's codec,
:func:`autograder.wire.encode`, extended with markers for
:class:`~autograder.wire.Obj` inputs, tensor dtypes and torch results) and ``<chapter>.npz`` (every array; read with ``allow_pickle=False``).

In the student package, :class:`ExpectedStore` reads those files and is installed
with :func:`autograder.checks.base.use_precomputed`: ``check(name, obj)`` then judges
the student's results against the stored ones, with the same ``judge`` and the same
hints (``diagnose`` recomputes the plausible mistakes from the case's inputs), and no
reference code of the chapter is needed. A stored result is found by the case's
fingerprint (:func:`fingerprint`: a digest of what the runner receives), so a case
that is not exactly a stored one is refused instead of being compared with the
wrong data.

A few hints need code that computes an answer (chapter 10's ``beam_variant`` re-runs
the beam search with one mistake). The package ships such a helper without its body
(:func:`autograder.student.hints.withhold_helpers`); instead, the release runs every
visible case's ``diagnose`` with the helper recording its calls, and :func:`replay`
returns the recorded result for the same arguments (:func:`call_key`), so those hints
are still given on the visible cases. The recordings are ``replay.json`` + ``.npz``.

Beside them, ``contents.json`` (:func:`write_contents`) is the book's table of contents:
every chapter id and its exercises' names, nothing else, so that ``check`` can say that a
notebook is another chapter's even when this package does not check that chapter.
"""
from __future__ import annotations

import builtins
import hashlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from .. import wire
from ..checks.base import Case, Exercise, Precomputed, Result, draw_cases, make_rng, precomputed
from ..wire import Obj, Tensor

__all__ = ["FORMAT", "encode_value", "decode_value", "encode_case", "decode_case", "encode_result",
           "decode_result", "fingerprint", "chapter_data", "write_chapter", "ExpectedStore", "call_key",
           "replay", "REPLAY", "CONTENTS", "write_contents"]

#: The file (``.json`` + ``.npz``) of the helpers' recorded results.
REPLAY = "replay"
#: The file (``.json`` only) of the book's table of contents (:func:`write_contents`).
CONTENTS = "contents"

#: Bumped when the file layout changes; a package refuses files of another format.
FORMAT = 1


# --------------------------------------------------------------------------- values


def encode_value(value: Any, arrays: dict[str, np.ndarray]) -> Any:
    """A case input or a decoded result as JSON-able data, arrays stored in ``arrays``.

    :func:`autograder.wire.encode` with the stored format's three extensions
    (:func:`_stored`): an :class:`Obj` stays a marker (the runner builds it when the
    case runs), a :class:`Tensor` keeps its ``dtype`` and ``requires_grad``, and a torch
    tensor (a hint helper's result) comes back as a torch tensor.
    """
    return wire.encode(value, arrays, extension=_stored)


def decode_value(data: Any, arrays) -> Any:
    """Inverse of :func:`encode_value` (tensors come back as :class:`Tensor` markers)."""
    return wire.decode(data, arrays, as_torch=False, extension=_read_stored)


def _stored(value: Any, arrays: dict[str, np.ndarray]) -> Any:
    """The stored format's own tags (``NotImplemented`` for every other value)."""
    if isinstance(value, Tensor):
        key = f"a{len(arrays)}"
        arrays[key] = np.array(value.value, order="C", copy=True)  # keeps a 0-d tensor 0-d
        out = {"__tensor__": key, "requires_grad": bool(value.requires_grad)}
        if hasattr(value, "dtype"):
            out["dtype"] = str(value.dtype)
        return out
    if isinstance(value, Obj):
        return {"__objmarker__": value.factory, "init": encode_value(value.init, arrays),
                "state": encode_value(dict(value.state), arrays), "tie": [list(t) for t in value.tie]}
    if _is_torch_tensor(value):  # a helper's result: comes back as a torch tensor
        key = f"a{len(arrays)}"
        dtype = str(value.dtype).replace("torch.", "")
        data = value.detach().cpu()
        arrays[key] = np.array((data.float() if dtype == "bfloat16" else data).numpy(), order="C", copy=True)
        return {"__torch__": key, "dtype": dtype}
    return NotImplemented


def _read_stored(data: dict, arrays) -> Any:
    """Inverse of :func:`_stored` (``NotImplemented`` for the runner's own tags)."""
    if "__tensor__" in data:
        marker = Tensor(np.array(arrays[data["__tensor__"]], copy=True), data.get("requires_grad", False))
        if "dtype" in data:
            marker.dtype = data["dtype"]
        return marker
    if "__torch__" in data:
        # torch on first use: numpy-only chapters run without it (heavy)
        import torch

        return torch.from_numpy(np.array(arrays[data["__torch__"]], copy=True)).to(getattr(torch, data["dtype"]))
    if "__objmarker__" in data:
        return Obj(data["__objmarker__"], decode_value(data["init"], arrays), decode_value(data["state"], arrays),
                   [tuple(t) for t in data["tie"]])
    return NotImplemented


# --------------------------------------------------------------------------- cases and results

_CASE_FIELDS = ("args", "kwargs", "label", "init", "state", "method", "train", "attrs", "probes", "backward",
                "return_args", "rtol", "atol", "seed", "part", "compare", "state_by_shape")


def _exception_type(name: str) -> type[BaseException]:
    for namespace in (builtins, np.exceptions):
        cls = getattr(namespace, name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            return cls
    raise ValueError(f"unknown exception type {name!r} in a stored case")


def encode_case(case: Case, arrays: dict[str, np.ndarray]) -> dict:
    """Every field of ``case`` as data (``expect_error`` by exception name)."""
    data = {name: encode_value(getattr(case, name), arrays) for name in _CASE_FIELDS}
    data["expect_error"] = [e.__name__ for e in case.expect_error] if case.expect_error else None
    return data


def decode_case(data: dict, arrays) -> Case:
    """Inverse of :func:`encode_case`."""
    fields = {name: decode_value(data[name], arrays) for name in _CASE_FIELDS}
    errors = data.get("expect_error")
    fields["expect_error"] = tuple(_exception_type(n) for n in errors) if errors else None
    return Case(**fields)


def encode_result(result: Result, arrays: dict[str, np.ndarray]) -> dict:
    """A reference :class:`Result` as data.

    An error the reference raised is kept by type, message and phase, without its
    traceback: the traceback quotes the reference's source lines and the absolute path
    of the checkout that made the release, and no judgment reads it (the student's own
    traceback is what :func:`autograder.checks.base` inspects)."""
    raised = result.raised
    if raised:
        raised = {key: value for key, value in raised.items() if key != "traceback"}
    return {"value": encode_value(result.value, arrays),
            "attrs": encode_value(dict(result.attrs), arrays),
            "probes": encode_value(dict(result.probes), arrays),
            "grads": encode_value(dict(result.grads), arrays),
            "args_after": encode_value(dict(result.args_after), arrays),
            "raised": encode_value(raised, arrays)}


def decode_result(data: dict, arrays) -> Result:
    """Inverse of :func:`encode_result`."""
    return Result(value=decode_value(data["value"], arrays), attrs=decode_value(data["attrs"], arrays),
                  probes=decode_value(data["probes"], arrays), grads=decode_value(data["grads"], arrays),
                  args_after=decode_value(data["args_after"], arrays), raised=decode_value(data["raised"], arrays))


def fingerprint(case: Case, kind: str) -> str:
    """A digest of what the runner receives for ``case`` (its spec and arrays)."""
    arrays: dict[str, np.ndarray] = {}
    spec = case.to_spec(kind, arrays)
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode())
    for key in sorted(arrays, key=lambda k: int(k[1:])):
        arr = np.ascontiguousarray(arrays[key])
        digest.update(f"{key}:{arr.dtype.str}:{arr.shape}".encode())
        digest.update(arr.tobytes())
    return digest.hexdigest()


def _is_torch_tensor(value) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "detach") and hasattr(value, "dtype")


def _digest(value, digest) -> None:
    """Feed ``value`` into ``digest``: arrays and tensors by dtype, shape and bytes, a
    torch module by its class and ``state_dict``, a :class:`Case` by its fingerprint."""
    def raw(kind: str, arr: np.ndarray) -> None:
        arr = np.ascontiguousarray(arr)
        digest.update(f"{kind}:{arr.dtype.str}:{arr.shape}:".encode())
        digest.update(arr.tobytes())

    if isinstance(value, Case):
        digest.update(f"case:{fingerprint(value, 'any')};".encode())
    elif isinstance(value, Tensor):
        raw(f"marker:{getattr(value, 'dtype', '')}", value.value)
    elif isinstance(value, Obj):
        digest.update(f"obj:{value.factory};".encode())
        _digest([value.init, value.state, value.tie], digest)
    elif isinstance(value, np.ndarray):
        raw("ndarray", value)
    elif _is_torch_tensor(value):
        data = value.detach().cpu()
        raw(f"torch:{value.dtype}", (data.float() if str(value.dtype) == "torch.bfloat16" else data).numpy())
    elif hasattr(value, "state_dict") and callable(value.state_dict):  # a torch module
        digest.update(f"module:{type(value).__qualname__};".encode())
        _digest(dict(value.state_dict()), digest)
    elif isinstance(value, (list, tuple)):
        digest.update(f"{type(value).__name__}[{len(value)}]".encode())
        for item in value:
            _digest(item, digest)
    elif isinstance(value, dict):
        digest.update(f"dict[{len(value)}]".encode())
        for key in sorted(value, key=repr):
            digest.update(f"{key!r}=".encode())
            _digest(value[key], digest)
    else:
        digest.update(f"{type(value).__name__}:{value!r};".encode())


def call_key(helper: str, arguments: dict) -> str:
    """The key of one call of a hint helper: its name and its bound arguments
    (parameter name -> value, defaults applied)."""
    digest = hashlib.sha256(helper.encode())
    _digest(arguments, digest)
    return digest.hexdigest()


def replay(helper: str, arguments: dict):
    """The result that hint helper ``helper`` (``"ch10_inference.beam_variant"``) gave
    for ``arguments`` when the release recorded it; ``LookupError`` when it did not
    (a hint for another input: the grader gives it)."""
    store = precomputed()
    table = getattr(store, "replays", None) or {}
    entry = table.get(call_key(helper, arguments))
    if entry is None:
        raise LookupError(f"{helper}: no recorded result for these arguments")
    data, arrays = entry
    return decode_value(data, arrays)


# --------------------------------------------------------------------------- files


def chapter_data(exercises: list[Exercise]) -> tuple[dict, dict[str, np.ndarray]]:
    """The visible cases of ``exercises`` and their reference results (repository only).

    Returns:
        ``(document, arrays)``: the JSON document and the arrays it refers to.

    Raises:
        ValueError: when a stored case would not decode to the same case (a value
            the format cannot carry), so a package never ships a check it cannot run.
    """
    arrays: dict[str, np.ndarray] = {}
    document = {"format": FORMAT, "exercises": {}}
    for exercise in exercises:
        cases = draw_cases(exercise, make_rng(False), False)  # the visible set, the hidden set's probes included
        entries = []
        for case in cases:
            entry = {"fingerprint": fingerprint(case, exercise.kind), "case": encode_case(case, arrays),
                     "expected": encode_result(exercise.expected(case), arrays)}
            if fingerprint(decode_case(entry["case"], arrays), exercise.kind) != entry["fingerprint"]:
                raise ValueError(f"{exercise.name}: case {case.label!r} does not survive storing as data")
            entries.append(entry)
        document["exercises"][exercise.name] = {"chapter": exercise.chapter, "kind": exercise.kind,
                                                "cases": entries}
    return document, arrays


def locked_cells(chapter: str) -> dict | None:
    """The locked cells of the chapter's released notebook, as grading restores them
    (nbgrader's locked cells): the setup cell's source (``grade_id`` ``setup``, else the
    first code cell) and each test cell's points, by exercise. ``None`` when the chapter
    has no source notebook here (a test's own chapter)."""
    # repository only: the student package ships no book module
    from ..book import source_notebook
    from .notebook import cell_source, read_notebook

    try:
        nb = read_notebook(source_notebook(chapter))
    except ValueError:
        return None
    code = [c for c in nb["cells"] if c.get("cell_type") == "code"]
    meta = [(c.get("metadata") or {}).get("nbgrader") or {} for c in code]
    setup = next((c for c, m in zip(code, meta) if m.get("grade_id") == "setup"), code[0] if code else None)
    tests = {str(m["grade_id"])[len("test_"):]: float(m.get("points", 0) or 0)
             for m in meta if m.get("grade") and str(m.get("grade_id", "")).startswith("test_")}
    return {"setup": cell_source(setup) if setup is not None else "", "tests": tests}


def write_chapter(folder: Path, chapter: str, exercises: list[Exercise]) -> list[Path]:
    """Write ``folder/<chapter>.json`` and ``folder/<chapter>.npz``; return both paths.
    The JSON also holds the chapter notebook's locked cells (:func:`locked_cells`), which
    ``check`` runs in place of a notebook's own copies, as grading does."""
    document, arrays = chapter_data(exercises)
    document["chapter"] = chapter
    locked = locked_cells(chapter)
    if locked is not None:
        document["locked"] = locked
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    json_path, npz_path = folder / f"{chapter}.json", folder / f"{chapter}.npz"
    json_path.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    npz_path.write_bytes(buffer.getvalue())
    return [json_path, npz_path]


def write_contents(folder: Path, chapters: dict[str, list[str]]) -> Path:
    """Write ``folder/contents.json``: the book's table of contents, every chapter id and its
    exercises' names (:attr:`ExpectedStore.contents` reads it back); return its path.

    Args:
        folder: the package's ``autograder/expected``.
        chapters: chapter id -> the names of its exercises, for every chapter of the book.
    """
    path = Path(folder) / f"{CONTENTS}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": FORMAT, "chapters": chapters}, sort_keys=True) + "\n", encoding="utf-8")
    return path


class ExpectedStore(Precomputed):
    """The stored visible checks of every chapter file in a folder.

    Args:
        folder: where ``<chapter>.json`` and ``<chapter>.npz`` lie (the package's
            ``autograder/expected``).
    """

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self._entries: dict[str, dict] = {}
        self._arrays: dict[str, Any] = {}
        self.chapters: dict[str, list[str]] = {}
        #: chapter -> the released notebook's locked cells (:func:`locked_cells`)
        self.locked: dict[str, dict] = {}
        #: every chapter of the book -> its exercises' names (:func:`write_contents`); the
        #: released chapters' alone when the package holds no table of contents
        self.contents: dict[str, list[str]] = {}
        self.replays: dict[str, tuple[Any, dict]] = {}  # call_key -> (encoded result, arrays)
        for json_path in sorted(self.folder.glob("*.json")):
            document = json.loads(json_path.read_text(encoding="utf-8"))
            if json_path.stem == CONTENTS:
                self.contents = {str(c): list(names) for c, names in document["chapters"].items()}
                continue
            if json_path.stem == REPLAY:
                with np.load(json_path.with_suffix(".npz"), allow_pickle=False) as npz:
                    arrays = {key: npz[key] for key in npz.files}
                self.replays.update({key: (data, arrays) for key, data in document["calls"].items()})
                continue
            if document.get("format") != FORMAT:
                raise ValueError(f"{json_path}: stored checks of format {document.get('format')!r}, "
                                 f"this package reads format {FORMAT}")
            with np.load(json_path.with_suffix(".npz"), allow_pickle=False) as npz:
                arrays = {key: npz[key] for key in npz.files}
            chapter = document["chapter"]
            self.chapters[chapter] = list(document["exercises"])
            if isinstance(document.get("locked"), dict):
                self.locked[chapter] = document["locked"]
            for name, entry in document["exercises"].items():
                self._entries[name] = entry
                self._arrays[name] = arrays
        self.contents = {**self.contents, **self.chapters}
        self._cases: dict[str, list[Case]] = {}
        self._expected: dict[str, dict[str, Result]] = {}

    def has(self, name: str) -> bool:
        return name in self._entries

    def cases(self, name: str) -> list[Case]:
        if name not in self._cases:
            arrays = self._arrays[name]
            self._cases[name] = [decode_case(e["case"], arrays) for e in self._entries[name]["cases"]]
        return list(self._cases[name])

    def expected(self, name: str, case: Case) -> Result:
        entry = self._entries[name]
        if name not in self._expected:
            arrays = self._arrays[name]
            self._expected[name] = {e["fingerprint"]: decode_result(e["expected"], arrays) for e in entry["cases"]}
        result = self._expected[name].get(fingerprint(case, entry["kind"]))
        if result is None:
            raise ValueError(f"{name}: case {case.label!r} is not one of the stored visible cases; the student "
                             "package checks only those")
        return result
