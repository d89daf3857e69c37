"""The checks API: exercises, cases, judging, and the visible ``check()``.

An :class:`Exercise` describes one contract exercise (``shared/EXERCISES.md``):

* :meth:`Exercise.cases` makes the inputs — pure data, from a random generator the
  caller seeds (fresh for hidden checks, so memorising answers does not pay);
* :meth:`Exercise.expected` computes the reference result with ``solutions``, in
  the trusted process only;
* :meth:`Exercise.judge` compares a result with the reference and, on a mismatch,
  raises :class:`CheckFailure` with a message that names the likely mistake.

The same three methods serve the visible check (``check(name, obj)`` in the
student's kernel) and the trusted grader (which ships the cases into the sandbox,
runs them with :mod:`autograder.runner`, and judges the returned data outside).
"""
from __future__ import annotations

import contextlib
import io
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import numpy as np

from .. import runner
from ..runner import Obj, Tensor

__all__ = [
    "Case",
    "CheckFailure",
    "Exercise",
    "Result",
    "REGISTRY",
    "register",
    "get_exercise",
    "check",
    "evaluate",
    "as_array",
    "close",
    "Tensor",
    "Obj",
]


class CheckFailure(AssertionError):
    """A check found a mistake; the message says what and, where it can, why."""


@dataclass
class Case:
    """One input to an exercise, as pure data.

    Args:
        args, kwargs: positional and keyword arguments (numpy arrays, python values,
            :class:`~autograder.runner.Tensor` for torch tensors,
            :class:`~autograder.runner.Obj` for trusted objects such as a Linear).
        label: what this case probes, in words ("a 2x3 batch with one fully masked
            row"); every failure message quotes it.
        init: for class exercises, the constructor's keyword arguments.
        state: for class exercises, a ``state_dict`` loaded with ``strict=True``.
        method: the method to call on the instance (class exercises).
        train: call ``.train()`` (True) or ``.eval()`` (False) first.
        attrs: attributes to read after the call (e.g. ``"attn_weights"``).
        probes: structural facts to collect (``"state_dict_keys"``,
            ``"parameter_names"``, ``"buffer_names"``, ``"parameter_shapes"``,
            ``"attr:<name>"``, ``"type:<name>"``).
        backward: weights ``w``; the runner back-propagates ``sum(w * output)`` and
            returns the gradients of the tensor arguments that require grad.
        return_args: indices of arguments sent back after the call, to catch
            in-place modification of the caller's inputs.
        expect_error: exception types the call must raise (``(ValueError,)``), or
            ``None`` when it must succeed.
        rtol, atol: tolerances for this case's values.
        seed: seed for numpy/torch set just before the call.
    """

    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    label: str = ""
    init: dict | None = None
    state: dict | None = None
    method: str = "forward"
    train: bool = False
    attrs: tuple = ()
    probes: tuple = ()
    backward: Any = None
    return_args: tuple = ()
    expect_error: tuple | None = None
    rtol: float = 1e-5
    atol: float = 1e-6
    seed: int = 0

    def to_spec(self, kind: str, arrays: dict) -> dict:
        """Encode this case for :func:`autograder.runner.run_case`."""
        spec = {
            "kind": kind,
            "args": runner.encode(list(self.args), arrays),
            "kwargs": runner.encode(dict(self.kwargs), arrays),
            "init": runner.encode(dict(self.init), arrays) if self.init is not None else None,
            "state": None,
            "method": self.method,
            "train": self.train,
            "attrs": list(self.attrs),
            "probes": list(self.probes),
            "backward": runner.encode(self.backward, arrays) if self.backward is not None else None,
            "return_args": [int(i) for i in self.return_args],
            "seed": int(self.seed),
        }
        if self.state is not None:
            state = {}
            for name, value in self.state.items():
                key = f"a{len(arrays)}"
                arrays[key] = np.ascontiguousarray(np.asarray(value))
                state[name] = key
            spec["state"] = state
        return spec


@dataclass
class Result:
    """A decoded result: what the object under test returned, as plain data.

    Tensors appear as :class:`~autograder.runner.Tensor` markers (``.value`` the
    numpy data, ``.dtype`` the torch dtype name), never as live objects.
    """

    value: Any = None
    attrs: dict = field(default_factory=dict)
    probes: dict = field(default_factory=dict)
    grads: dict = field(default_factory=dict)
    args_after: dict = field(default_factory=dict)
    raised: dict | None = None

    @classmethod
    def from_encoded(cls, data: dict, arrays) -> "Result":
        dec = lambda v: runner.decode(v, arrays, as_torch=False)  # noqa: E731
        return cls(
            value=dec(data.get("value")),
            attrs={k: dec(v) for k, v in (data.get("attrs") or {}).items()},
            probes={k: dec(v) for k, v in (data.get("probes") or {}).items()},
            grads={k: dec(v) for k, v in (data.get("grads") or {}).items()},
            args_after={k: dec(v) for k, v in (data.get("args_after") or {}).items()},
            raised=data.get("raised"),
        )


REGISTRY: dict[str, "Exercise"] = {}


def register(cls: type["Exercise"]) -> type["Exercise"]:
    """Class decorator: register one instance of an exercise under its ``name``."""
    inst = cls()
    if not inst.name or not inst.chapter:
        raise ValueError(f"{cls.__name__} needs a name and a chapter")
    if inst.name in REGISTRY:
        raise ValueError(f"exercise {inst.name!r} is registered twice")
    REGISTRY[inst.name] = inst
    return cls


def get_exercise(name: str) -> "Exercise":
    """The registered exercise called ``name`` (loads every chapter's checks)."""
    from . import load_all

    load_all()
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"no exercise called {name!r}; known: {', '.join(sorted(REGISTRY))}"
        ) from None


class Exercise:
    """Base class of a contract exercise's checks. Subclasses set the class
    attributes and implement :meth:`cases`; most override :meth:`diagnose`.

    Attributes:
        name: the contract name (``"softmax"``), also the nbgrader ``grade_id`` of
            the solution cell; the test cell's ``grade_id`` is ``"test_" + name``.
        chapter: the chapter id (``"04_self_attention"``).
        kind: ``"function"`` or ``"class"``.
        what: one line saying what the checks cover, printed on success.
    """

    name: ClassVar[str] = ""
    chapter: ClassVar[str] = ""
    kind: ClassVar[str] = "function"
    what: ClassVar[str] = "shapes and values against the reference"

    # -- to implement -------------------------------------------------------
    def cases(self, rng: np.random.Generator, hidden: bool) -> list[Case]:
        """The cases to run. ``hidden=False``: a few quick, readable ones for the
        visible check; ``hidden=True``: the full randomised set (shapes, values,
        dtypes, edge cases of the contract)."""
        raise NotImplementedError

    def diagnose(self, case: Case, got: Result, want: Result) -> str | None:
        """A hint naming the likely mistake when values differ, or ``None``."""
        return None

    def raised_hint(self, case: Case, got: Result) -> str | None:
        """A hint for a failure about raising: the call raised when it should not
        have (``got.raised`` is set), or ``case.expect_error`` was not met. ``None``
        when there is nothing to add."""
        return None

    # -- provided -----------------------------------------------------------
    def reference(self) -> Callable:
        """The reference object from ``solutions`` (trusted process only)."""
        import solutions

        return getattr(solutions, self.name)

    def expected(self, case: Case) -> Result:
        """Run ``case`` on the reference and return its result."""
        return _run_in_process(self.reference(), case, self.kind)

    def judge(self, case: Case, got: Result, want: Result) -> None:
        """Raise :class:`CheckFailure` when ``got`` is wrong for ``case``, with the
        hint of :meth:`raised_hint` when the failure is about raising."""
        try:
            self._judge(case, got, want)
        except CheckFailure as exc:
            message = str(exc)
            raised = got.raised or {}
            about_raising = bool(case.expect_error) or bool(raised)
            if about_raising and raised.get("type") != "NotImplementedError" and "Hint:" not in message:
                try:
                    hint = self.raised_hint(case, got)
                except Exception:  # noqa: BLE001 - a hint must never hide the failure
                    hint = None
                if hint:
                    raise CheckFailure(f"{message}\n  Hint: {hint}") from None
            raise

    def _judge(self, case: Case, got: Result, want: Result) -> None:
        where = f" ({case.label})" if case.label else ""
        if case.expect_error:
            names = " or ".join(e.__name__ for e in case.expect_error)
            if got.raised is None:
                raise CheckFailure(f"should raise {names}{where}, but returned normally")
            if got.raised["type"] not in {e.__name__ for e in case.expect_error} and not _is_subclass_name(
                got.raised["type"], case.expect_error
            ):
                raise CheckFailure(
                    f"should raise {names}{where}, but raised {got.raised['type']}: {got.raised['message']}"
                )
            return
        if got.raised is not None:
            r = got.raised
            if r["type"] == "NotImplementedError":
                raise CheckFailure("not implemented yet: replace `raise NotImplementedError()` with your code")
            stage = {"init": "the constructor", "load_state_dict": "load_state_dict"}.get(r.get("phase"), "it")
            raise CheckFailure(f"{stage} raised {r['type']}: {r['message']}{where}")
        if want.raised is not None:  # pragma: no cover - a broken reference
            raise RuntimeError(f"the reference raised on {case.label!r}: {want.raised}")
        try:
            for name in want.probes:
                compare(got.probes.get(name), want.probes[name], f"{name}", case)
            compare(got.value, want.value, "the output", case)
            for name in want.attrs:
                compare(got.attrs.get(name), want.attrs[name], f"self.{name}", case)
            for name in want.grads:
                compare(got.grads.get(name), want.grads[name], f"the gradient of argument {name}", case)
            for name in want.args_after:
                compare(
                    got.args_after.get(name),
                    want.args_after[name],
                    f"argument {name} after the call (it must not be modified in place)",
                    case,
                )
        except CheckFailure as exc:
            hint = None
            try:
                hint = self.diagnose(case, got, want)
            except Exception:  # noqa: BLE001 - a hint must never hide the failure
                hint = None
            message = str(exc) + where
            if hint:
                message += "\n  Hint: " + hint
            raise CheckFailure(message) from None


def _is_subclass_name(name: str, types) -> bool:
    """Whether the exception class called ``name`` (builtin or numpy's, e.g.
    ``AxisError``) is a subclass of one of ``types``. Only the name crosses the
    sandbox wall, so the class is looked up here, among trusted modules."""
    import builtins

    for namespace in (builtins, np.exceptions):
        cls = getattr(namespace, name, None)
        if isinstance(cls, type) and issubclass(cls, tuple(types)):
            return True
    return False


def _run_in_process(obj, case: Case, kind: str) -> Result:
    """Run a case in this process through the same encode/decode path as the sandbox."""
    arrays: dict = {}
    spec = case.to_spec(kind, arrays)
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        raw = runner.run_case(obj, spec, arrays)
    out_arrays = raw.pop("__arrays__")
    return Result.from_encoded(raw, out_arrays)


# --------------------------------------------------------------------------- comparing


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


def compare(got, want, what: str, case: Case) -> None:
    """Compare decoded values structurally; raise :class:`CheckFailure` on the first
    difference with a message that says what differs (type, shape, dtype, values)."""
    if isinstance(want, (Tensor, np.ndarray)):
        if _kind(got) != _kind(want):
            raise CheckFailure(f"{what} is a {_kind(got)}, expected a {_kind(want)}")
        g = got.value if isinstance(got, Tensor) else got
        w = want.value if isinstance(want, Tensor) else want
        if g.shape != w.shape:
            raise CheckFailure(f"{what} has shape {tuple(g.shape)}, expected {tuple(w.shape)}")
        gd = getattr(got, "dtype", g.dtype)
        wd = getattr(want, "dtype", w.dtype)
        if str(gd) != str(wd):
            raise CheckFailure(f"{what} has dtype {gd}, expected {wd}")
        if w.dtype == bool or np.issubdtype(w.dtype, np.integer):
            if not np.array_equal(g, w):
                idx = tuple(int(i) for i in np.argwhere(g != w)[0])
                raise CheckFailure(f"{what} differs at index {idx}: {g[idx].item()!r}, expected {w[idx].item()!r}")
            return
        g64 = g.astype(np.float64)
        w64 = w.astype(np.float64)
        if np.isnan(g64).any() and not np.isnan(w64).any():
            idx = tuple(int(i) for i in np.argwhere(np.isnan(g64))[0])
            raise CheckFailure(f"{what} contains NaN (first at index {idx})")
        if not np.allclose(g64, w64, rtol=case.rtol, atol=case.atol, equal_nan=True):
            err = np.abs(np.nan_to_num(g64 - w64, nan=np.inf))
            idx = tuple(int(i) for i in np.unravel_index(np.argmax(err), err.shape)) if err.ndim else ()
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
            compare(g, w, f"{what}[{i}]", case)
        return
    if isinstance(want, dict):
        if not isinstance(got, dict):
            raise CheckFailure(f"{what} is a {_kind(got)}, expected a dict")
        if set(got) != set(want):
            missing = sorted(map(str, set(want) - set(got)))[:5]
            extra = sorted(map(str, set(got) - set(want)))[:5]
            raise CheckFailure(f"{what} has the wrong keys: missing {missing}, unexpected {extra}")
        for k in want:
            compare(got[k], want[k], f"{what}[{k!r}]", case)
        return
    if isinstance(want, float) and not isinstance(want, bool):
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            raise CheckFailure(f"{what} is a {_kind(got)}, expected a number")
        if not np.isclose(got, want, rtol=case.rtol, atol=case.atol, equal_nan=True):
            raise CheckFailure(f"{what} is {got:.6g}, expected {want:.6g}")
        return
    if type(got) is not type(want) or got != want:
        raise CheckFailure(f"{what} is {got!r}, expected {want!r}")


# --------------------------------------------------------------------------- running checks


def evaluate(exercise: Exercise, results: list[Result], cases: list[Case]) -> tuple[bool, str]:
    """Judge results case by case; ``(passed, message)`` with the first failure."""
    if len(results) != len(cases):
        return False, f"expected results for {len(cases)} cases, got {len(results)}"
    for case, got in zip(cases, results):
        want = exercise.expected(case)
        try:
            exercise.judge(case, got, want)
        except CheckFailure as exc:
            return False, str(exc)
    return True, f"{len(cases)} checks passed: {exercise.what}"


def make_rng(hidden: bool, seed: int | None = None) -> np.random.Generator:
    """Visible checks use a fixed seed (reproducible feedback); hidden checks a fresh one."""
    if seed is not None:
        return np.random.default_rng(seed)
    return np.random.default_rng(None if hidden else 20171206)


def check(name: str, obj: Any, hidden: bool = False, seed: int | None = None) -> None:
    """Check ``obj`` against exercise ``name`` and print a one-line verdict.

    This is the one line in every test cell: ``check("softmax", softmax)``. It
    prints to standard output only; on a mistake it raises :class:`CheckFailure`
    whose message explains it.

    Args:
        name: the contract name of the exercise.
        obj: your function or class.
        hidden: run the full randomised set (the instructors' hidden checks).
        seed: fix the random inputs (default: fixed for visible, fresh for hidden).
    """
    exercise = get_exercise(name)
    if obj is None:
        raise CheckFailure(f"✗ {name}: nothing to check — define {name} in the cell above first")
    cases = exercise.cases(make_rng(hidden, seed), hidden)
    results = [_run_in_process(obj, case, exercise.kind) for case in cases]
    passed, message = evaluate(exercise, results, cases)
    if not passed:
        raise CheckFailure(f"✗ {name}: {message}")
    print(f"✓ {name}: {message}")
