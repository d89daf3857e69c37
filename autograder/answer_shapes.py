"""What a regrade's reference may answer: each call's value predicted from the call.

In a regrade the name of a failing earlier exercise calls its reference, which runs in a
sandbox of its own (:mod:`autograder.oracle`); the trusted relay
(:class:`autograder.reference_calls.ReferenceCalls`) lets an answer into the student's process
only as its call allows. Beside plain data and a size bound, that means the value the
contract (``shared/EXERCISES.md``) gives the call's arguments: its container, each
array's shape and kind of dtype, a tensor where the reference returns a tensor. So the
channel from the references into the student's process carries the answer to what was
asked and nothing else, whatever the references' sandbox sends.

:func:`predict` reads the prediction off the call (the encoded arguments and, for a
module, the state it sends): an :class:`Expected` value, or ``None`` where the contract
gives those arguments no value (the reference must refuse them: only a refusal may come
back). :func:`check_value` holds an encoded value against it.

Standalone but for the wire format (numpy only), like the relay that uses it.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .wire import WireError, decode

__all__ = ["Expected", "SIGNATURES", "predict", "check_value", "entries"]


@dataclasses.dataclass(frozen=True)
class Expected:
    """One predicted value: an array (``tensor``: a torch tensor, else a numpy array) of
    ``shape`` (``None`` in a place any size may take; ``rows``: the second axis's range,
    for a decoder's output that stops early) whose dtype kind is one of ``kinds``
    (numpy's letters: ``f`` float, ``c`` complex, ``b`` bool, ``i`` signed int), or a
    tuple of ``items``. ``broadcast``: the leading axes may be those of ``shape``
    broadcast against another operand (a module whose callable argument returns more);
    ``dtype``: the one dtype it must have (a reshape keeps its input's)."""

    tensor: bool = False
    shape: tuple | None = None
    kinds: str = "f"
    items: tuple | None = None
    rows: tuple[int, int] | None = None
    broadcast: bool = False
    dtype: str | None = None


#: The parameters of each function reference a regrade may call, in order (the contract's
#: signatures: a test holds them to ``solutions``).
SIGNATURES = {
    "sinusoidal_positional_encoding": ("max_len", "d_model"),
    "softmax": ("x", "axis"),
    "scaled_dot_product_attention": ("q", "k", "v"),
    "split_heads": ("x", "num_heads"),
    "merge_heads": ("x",),
    "padding_mask": ("ids", "pad_id"),
    "causal_mask": ("size",),
    "greedy_decode": ("model", "src", "src_mask", "max_len", "sos_id", "eos_id", "pad_id", "use_cache"),
}

#: The name of a module's first argument, where a cell passes it by keyword
#: (``forward(x, ...)``, ``MultiHeadAttention.forward(query, ...)``, torch's ``input``).
_FIRST_ARGUMENT = ("x", "query", "input")


def entries(encoded) -> dict:
    """The entries of an encoded dict (``{"__dict__": [[k, v], ...]}``), or ``{}``."""
    if isinstance(encoded, dict) and isinstance(encoded.get("__dict__"), list):
        return {item[0]: item[1] for item in encoded["__dict__"] if isinstance(item, list) and len(item) == 2}
    return {}


def _array(encoded, arrays: dict) -> tuple[np.ndarray, bool] | None:
    """The array an encoded argument is (and whether it is a tensor): an array, a tensor, a
    number or a nested list of numbers; ``None`` for anything else."""
    if isinstance(encoded, dict):
        key = encoded.get("__tensor__", encoded.get("__ndarray__"))
        if isinstance(key, str) and key in arrays:
            return arrays[key], "__tensor__" in encoded
    try:
        value = np.asarray(decode(encoded, arrays, as_torch=False))
    except (TypeError, ValueError, KeyError):
        return None
    return (value, False) if value.dtype.kind in "biufc" else None


def _int(encoded, bools: bool = False) -> int | None:
    if type(encoded) is int or (bools and type(encoded) is bool):
        return int(encoded)
    return None


def _bind(name: str, data: dict) -> dict | None:
    """The call's encoded arguments by parameter name, or ``None`` when they do not bind
    (the reference raises ``TypeError``)."""
    names = SIGNATURES[name]
    args = data.get("args") or []
    if not isinstance(args, list) or len(args) > len(names):
        return None
    bound = dict(zip(names, args))
    for key, value in entries(data.get("kwargs")).items():
        if key not in names or key in bound:
            return None
        bound[key] = value
    return bound


def _tensor(a, ndim: int) -> bool:
    return a is not None and a[1] and a[0].ndim == ndim


def _function(name: str, bound: dict, arrays: dict) -> Expected | None:
    get = bound.get
    if name == "sinusoidal_positional_encoding":
        max_len, d_model = _int(get("max_len")), _int(get("d_model"))
        if max_len is None or d_model is None or max_len < 1 or d_model < 2 or d_model % 2:
            return None
        return Expected(shape=(max_len, d_model))
    if name == "softmax":
        x = _array(get("x"), arrays)
        return None if x is None or x[0].ndim == 0 else Expected(shape=x[0].shape)
    if name == "scaled_dot_product_attention":
        q, k, v = (_array(get(n), arrays) for n in ("q", "k", "v"))
        if q is None or k is None or v is None:
            return None
        q, k, v = q[0].shape, k[0].shape, v[0].shape
        if min(len(q), len(k), len(v)) < 2 or q[-1] != k[-1] or k[-2] != v[-2]:
            return None
        try:
            scores = np.broadcast_shapes(q[:-2], k[:-2])
            output = np.broadcast_shapes(scores, v[:-2])
        except ValueError:
            return None
        return Expected(items=(Expected(shape=(*output, q[-2], v[-1]), kinds="fc"),
                               Expected(shape=(*scores, q[-2], k[-2]))))
    if name == "split_heads":
        x, heads = _array(get("x"), arrays), _int(get("num_heads"))
        if not _tensor(x, 3) or heads is None or heads < 1 or x[0].shape[2] % heads:
            return None
        batch, length, d_model = x[0].shape
        return Expected(tensor=True, shape=(batch, heads, length, d_model // heads), kinds=x[0].dtype.kind,
                        dtype=str(x[0].dtype))
    if name == "merge_heads":
        x = _array(get("x"), arrays)
        if not _tensor(x, 4):
            return None
        batch, heads, length, d_k = x[0].shape
        return Expected(tensor=True, shape=(batch, length, heads * d_k), kinds=x[0].dtype.kind,
                        dtype=str(x[0].dtype))
    if name == "padding_mask":
        ids = _array(get("ids"), arrays)
        if not _tensor(ids, 2) or ids[0].dtype.kind not in "iu":
            return None
        return Expected(tensor=True, shape=(ids[0].shape[0], 1, 1, ids[0].shape[1]), kinds="b")
    if name == "causal_mask":
        size = _int(get("size"))
        return None if size is None or size < 1 else Expected(tensor=True, shape=(1, 1, size, size), kinds="b")
    if name == "greedy_decode":
        src, max_len = _array(get("src"), arrays), _int(get("max_len"), bools=True)
        if src is None or not src[1] or src[0].ndim < 1 or max_len is None or max_len < 1:
            return None
        return Expected(tensor=True, shape=(src[0].shape[0], None), kinds="i", rows=(1, max_len + 1),
                        dtype="int64")
    return None


def _module(data: dict, arrays: dict) -> Expected | None:
    """A class reference's module, or one of its submodules, called on ``x``: every one of
    them (a feed-forward layer, a residual sub-layer, a decoder layer, an attention, a
    layer norm, dropout, ReLU) maps ``x (..., d)`` to one floating tensor ``(..., d')``,
    ``d' = d`` except a linear layer (a 2-D ``weight`` in the state it is sent), whose
    ``d'`` is its ``weight``'s rows."""
    args = data.get("args") or []
    kwargs = entries(data.get("kwargs"))
    first = args[0] if isinstance(args, list) and args else next(
        (kwargs[k] for k in _FIRST_ARGUMENT if k in kwargs), None)
    x = _array(first, arrays)
    if x is None or not x[1] or x[0].ndim < 1:
        return None
    width = x[0].shape[-1]
    weight = _array(entries(data.get("state")).get("weight"), arrays)
    if weight is not None and weight[0].ndim == 2:
        width = weight[0].shape[0]
    return Expected(tensor=True, shape=(*x[0].shape[:-1], width), broadcast=True)


def predict(name: str, data: dict, arrays: dict) -> Expected | None:
    """The value the reference ``name`` gives the call ``data`` (a stand-in's ``call``
    frame, decoded JSON, with its ``arrays``), or ``None`` where it must refuse.

    Args:
        name: the exercise (a key of :data:`SIGNATURES`, or a class exercise).
        data: the call: ``args``, ``kwargs`` and, for a module, ``op: "call"`` and ``state``.
        arrays: the call's arrays.
    """
    if data.get("op") == "call":
        return _module(data, arrays)
    if name not in SIGNATURES:
        return None
    bound = _bind(name, data)
    return None if bound is None else _function(name, bound, arrays)


def check_value(expected: Expected | None, encoded: Any, arrays: dict) -> None:
    """Admit the encoded value of an answer only as :func:`predict` foresaw it.

    Raises:
        WireError: no value was foreseen (``expected`` is ``None``), or this one differs in
            container, kind (tensor or array), shape or dtype.
    """
    if expected is None:
        raise WireError("a value where the call's arguments give none (the reference must refuse them)")
    if expected.items is not None:
        items = encoded.get("__tuple__") if isinstance(encoded, dict) else None
        if not (isinstance(items, list) and len(items) == len(expected.items)):
            raise WireError("a value that is not the tuple the call returns")
        for item, want in zip(items, expected.items):
            check_value(want, item, arrays)
        return
    if not isinstance(encoded, dict) or not ({"__tensor__", "__ndarray__"} & set(encoded)):
        raise WireError("a value that is not the array the call returns")
    got = _array(encoded, arrays)
    if got is None or got[1] != expected.tensor:
        raise WireError("a value that is not the array the call returns")
    array = got[0]
    if array.dtype.kind not in expected.kinds or expected.dtype not in (None, str(array.dtype)):
        raise WireError(f"a value of dtype {array.dtype}, not the call's")
    shape = array.shape
    if len(shape) != len(expected.shape):
        raise WireError(f"a value of shape {shape}, not the call's")
    if expected.broadcast:
        lead, want = shape[:-1], expected.shape[:-1]
        try:
            fits = np.broadcast_shapes(lead, want) == lead
        except ValueError:
            fits = False
        if not fits or shape[-1] != expected.shape[-1]:
            raise WireError(f"a value of shape {shape}, not the call's")
        return
    for axis, (have, want) in enumerate(zip(shape, expected.shape)):
        if want is None:
            low, high = expected.rows if expected.rows is not None else (0, have)
            if not low <= have <= high:
                raise WireError(f"a value of shape {shape}, not the call's")
        elif have != want:
            raise WireError(f"a value of shape {shape}, not the call's")
