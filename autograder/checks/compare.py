"""Comparing a result with the reference's: kinds, shapes, dtypes, values; and what a
message may say of them.

:func:`compare` is the structural comparison every judge uses, :func:`dtype_verdict` the
one dtype rule. Under :func:`redacting` (a hidden set is judged, :func:`redacted`) no
message quotes a value from the inputs: :func:`shown` describes a value instead.
"""
from __future__ import annotations

import contextlib
import contextvars

import numpy as np

from ..wire import Obj, Tensor
from .cases import Case, CheckFailure

__all__ = ["as_array", "close", "compare", "dtype_verdict", "input_float_bits", "redacted", "redacting", "shown"]


# Set while a hidden set is judged (:func:`~autograder.checks.scoring.evaluate` with ``hidden=True``).
_REDACT: contextvars.ContextVar[bool] = contextvars.ContextVar("autograder_redact", default=False)


def redacting() -> bool:
    """Whether the messages being made are about hidden cases, and so must not
    quote values from (or computed from) the inputs (:func:`~autograder.checks.scoring.evaluate`)."""
    return _REDACT.get()


@contextlib.contextmanager
def redacted(on: bool = True):
    """Judge the ``with`` block under :func:`redacting` when ``on`` (a hidden set), else not."""
    token = _REDACT.set(bool(on))
    try:
        yield
    finally:
        _REDACT.reset(token)


def shown(value, spec: str = "") -> str:
    """``value`` as a message may show it: formatted with ``spec`` (``repr`` when
    ``spec`` is ``""``) for the visible check; under :func:`redacting`, only its
    kind and shape ("a number", "an array of shape (2, 3)")."""
    if not redacting():
        return format(value, spec) if spec else repr(value)
    array = as_array(value)
    if array is not None:
        return f"an array of shape {tuple(array.shape)}"
    if isinstance(value, bool):
        return "a truth value"
    if isinstance(value, (int, float, np.integer, np.floating)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return f"a {_kind(value)}"


def as_array(value) -> np.ndarray | None:
    """The numpy data of a decoded value (an array or a :class:`Tensor` marker),
    or ``None`` when it is neither — for hints that recompute plausible mistakes."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, Tensor):
        return value.value
    return None


def close(a, b, rtol: float = 1e-5, atol: float = 1e-6, equal_nan: bool = False) -> bool:
    """True when ``a`` and ``b`` are arrays of one shape with equal values within
    tolerance; False for anything that is not numeric (never raises)."""
    try:
        a = np.asarray(a, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan))


def _kind(value) -> str:
    if isinstance(value, Tensor):
        return "torch.Tensor"
    if isinstance(value, np.ndarray):
        return "numpy array"
    if isinstance(value, tuple):
        return "tuple"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "dict"
    if value is None:
        return "None"
    return type(value).__name__


# Bits of precision of each float dtype, by the names numpy and torch give them.
_FLOAT_BITS = {"float16": 11, "half": 11, "bfloat16": 8, "float32": 24, "float": 24, "float64": 53, "double": 53}


def _dtype_name(value, array) -> str:
    """The dtype's name without its library prefix (``torch.float32`` -> ``float32``)."""
    return str(getattr(value, "dtype", None) or array.dtype).replace("torch.", "")


def dtype_verdict(got: str, want: str, input_bits: int | None = 53) -> tuple[bool, str | None]:
    """The one dtype rule of the book (``shared/EXERCISES.md``, "How an answer is graded").

    Where the reference returns floats, any float dtype at least as precise is
    correct (float32 in, float64 out gets a note); a less precise one is wrong
    when the inputs carried that precision (float16 for float32 input) — but not
    when they did not: built from integers alone (``one_hot``, a positional
    table), float32 is as right as the reference's float64. A non-float is
    wrong. Where the reference returns booleans or integers (masks,
    ``LongTensor`` ids), the contract fixes the dtype: it must match exactly.

    Args:
        got, want: dtype names as :func:`_dtype_name` gives them.
        input_bits: the precision (mantissa bits) of the most precise float
            input, ``None`` when no input is a float.

    Returns:
        ``(ok, message)``: the message is a note when ``ok``, the reason when not,
        ``None`` when the dtypes are equal.
    """
    if got == want:
        return True, None
    if want in _FLOAT_BITS:
        if got not in _FLOAT_BITS:
            return False, f"has dtype {got}, expected a float dtype ({want})"
        if _FLOAT_BITS[got] >= _FLOAT_BITS[want]:
            return True, (f"returned {got} where the reference returns {want}: correct (a wider float "
                          f"keeps every digit), though {want} would save memory")
        if input_bits is None or _FLOAT_BITS[got] >= min(input_bits, _FLOAT_BITS[want]):
            return True, (f"returned {got} where the reference returns {want}: correct here, as the "
                          "inputs carry no more precision (compared at the tolerance of " + got + ")")
        return False, f"has dtype {got}, less precise than the expected {want}: keep the input's precision"
    return False, f"has dtype {got}, expected {want}"


def input_float_bits(case: Case) -> int | None:
    """The precision of the most precise float among a case's inputs (arguments,
    keyword arguments, state), or ``None`` when none is a float."""
    best: list[int] = []

    def visit(value) -> None:
        if isinstance(value, Tensor):
            value = value.value
        if isinstance(value, np.ndarray):
            if value.dtype.kind == "f":
                best.append(_FLOAT_BITS.get(value.dtype.name, 53))
        elif isinstance(value, (float, np.floating)) and not isinstance(value, bool):
            best.append(53)
        elif isinstance(value, (list, tuple)):
            for v in value:
                visit(v)
        elif isinstance(value, dict):
            for v in value.values():
                visit(v)
        elif isinstance(value, Obj):
            visit(value.init)
            visit(value.state)

    visit(list(case.args))
    visit(dict(case.kwargs))
    visit(case.state or {})
    return max(best) if best else None


# Tolerance floors for a result computed in a narrower float than the reference's.
_TOLERANCE_OF = {"float32": (1e-4, 1e-5), "float": (1e-4, 1e-5), "float16": (1e-2, 1e-3), "half": (1e-2, 1e-3),
                 "bfloat16": (2e-2, 1e-2)}


def compare(got, want, what: str, case: Case, notes: list | None = None, *, values: bool = True,
            mode: str | None = None) -> None:
    """Compare decoded values structurally; raise :class:`CheckFailure` on the first
    difference with a message that says what differs (type, shape, dtype, values).

    Args:
        got, want: decoded results (the answer's and the reference's).
        what: how the message names the value ("the output", "self.attn_weights").
        case: the case (its label and tolerances).
        notes: where a correct-but-noteworthy finding goes (a wider float dtype).
        values: ``False`` is ``mode="structure"``.
        mode: ``"full"`` (default), ``"structure"`` (kinds, shapes, dtypes, and
            names and other non-float scalars; no array values) or ``"values"``
            (kinds, shapes and values; no dtype verdict, for a part about values
            whose dtype another part grades).
    """
    mode = mode or ("full" if values else "structure")
    notes = [] if notes is None else notes
    if isinstance(want, (Tensor, np.ndarray)):
        if _kind(got) != _kind(want):
            raise CheckFailure(f"{what} is a {_kind(got)}, expected a {_kind(want)}")
        g = got.value if isinstance(got, Tensor) else got
        w = want.value if isinstance(want, Tensor) else want
        if g.shape != w.shape:
            raise CheckFailure(f"{what} has shape {tuple(g.shape)}, expected {tuple(w.shape)}")
        rtol, atol = case.rtol, case.atol
        gname, wname = _dtype_name(got, g), _dtype_name(want, w)
        ok, message = dtype_verdict(gname, wname, input_float_bits(case))
        if mode != "values":
            if not ok:
                raise CheckFailure(f"{what} {message}")
            if message and message not in notes:
                notes.append(message)
        # A less precise float the dtype rule accepts (the inputs carried no more precision)
        # is compared at its own precision, in "values" mode too (bootstrap_bleu's float32).
        if ok and gname in _TOLERANCE_OF and wname in _FLOAT_BITS and _FLOAT_BITS[gname] < _FLOAT_BITS[wname]:
            rtol, atol = max(rtol, _TOLERANCE_OF[gname][0]), max(atol, _TOLERANCE_OF[gname][1])
        if mode == "structure":
            return
        if g.dtype.kind not in "biuf" or w.dtype.kind not in "biuf":
            raise CheckFailure(f"{what} has dtype {g.dtype}, expected numbers like {w.dtype}")
        if (w.dtype == bool or np.issubdtype(w.dtype, np.integer)) and mode == "full":
            if not np.array_equal(g, w):
                idx = tuple(int(i) for i in np.argwhere(g != w)[0])
                if redacting():
                    raise CheckFailure(f"{what} has the right shape but wrong values: {int(np.sum(g != w))} of "
                                       f"{g.size} entries differ (the first at index {idx})")
                raise CheckFailure(f"{what} differs at index {idx}: {g[idx].item()!r}, expected {w[idx].item()!r}")
            return
        g64 = g.astype(np.float64)
        w64 = w.astype(np.float64)
        if np.isnan(g64).any() and not np.isnan(w64).any():
            idx = tuple(int(i) for i in np.argwhere(np.isnan(g64))[0])
            raise CheckFailure(f"{what} contains NaN (first at index {idx})")
        if not np.allclose(g64, w64, rtol=rtol, atol=atol, equal_nan=True):
            err = np.abs(np.nan_to_num(g64 - w64, nan=np.inf))
            idx = tuple(int(i) for i in np.unravel_index(np.argmax(err), err.shape)) if err.ndim else ()
            if redacting():
                wrong = int(np.sum(~np.isclose(g64, w64, rtol=rtol, atol=atol, equal_nan=True)))
                raise CheckFailure(f"{what} has the right shape but wrong values: {wrong} of {g64.size} entries "
                                   f"differ, the largest error {float(err[idx]):.3g} at index {idx}")
            raise CheckFailure(
                f"{what} has the right shape but wrong values: largest error {float(err[idx]):.3g} "
                f"at index {idx} (got {float(g64[idx]):.6g}, expected {float(w64[idx]):.6g})"
            )
        return
    if isinstance(want, (tuple, list)):
        if _kind(got) != _kind(want):
            raise CheckFailure(f"{what} is a {_kind(got)}, expected a {_kind(want)} of {len(want)} items")
        if len(got) != len(want):
            raise CheckFailure(f"{what} has {len(got)} items, expected {len(want)}")
        for i, (g, w) in enumerate(zip(got, want)):
            compare(g, w, f"{what}[{i}]", case, notes, mode=mode)
        return
    if isinstance(want, dict):
        if not isinstance(got, dict):
            raise CheckFailure(f"{what} is a {_kind(got)}, expected a dict")
        if set(got) != set(want):
            missing, extra = set(want) - set(got), set(got) - set(want)
            if redacting():
                raise CheckFailure(f"{what} has the wrong keys: {len(missing)} of the {len(want)} expected "
                                   f"missing, {len(extra)} unexpected")
            missing = sorted(map(str, missing))[:5]
            extra = sorted(map(str, extra))[:5]
            raise CheckFailure(f"{what} has the wrong keys: missing {missing}, unexpected {extra}")
        for i, k in enumerate(want):
            where = f"{what}[key {i + 1} of {len(want)}]" if redacting() else f"{what}[{k!r}]"
            compare(got[k], want[k], where, case, notes, mode=mode)
        return
    if isinstance(want, float) and not isinstance(want, bool):
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            raise CheckFailure(f"{what} is a {_kind(got)}, expected a number")
        if mode != "structure" and not np.isclose(got, want, rtol=case.rtol, atol=case.atol, equal_nan=True):
            if redacting():
                # not even the error: for one number, |got - want| can give the expected value away
                raise CheckFailure(f"{what} is not the expected number (its value is not shown: hidden case)")
            raise CheckFailure(f"{what} is {got:.6g}, expected {want:.6g}")
        return
    if type(got) is not type(want) or got != want:
        if redacting():
            if type(got) is not type(want):
                raise CheckFailure(f"{what} is a {_kind(got)}, expected a {_kind(want)}")
            raise CheckFailure(f"{what} is not the expected {_kind(want)} (its value is not shown: hidden case)")
        raise CheckFailure(f"{what} is {got!r}, expected {want!r}")
