"""The data of a check: a :class:`Case` (one input, pure data), the :class:`Result` an
answer gave on it, and :class:`CheckFailure`, the mistake a check found."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import wire

__all__ = ["ADVICE", "Case", "CheckFailure", "Result"]


class CheckFailure(AssertionError):
    """A check found a mistake; the message says what and, where it can, why.

    ``hint`` is the check's own diagnosis of the mistake (the text after
    ``Hint:``), kept apart from the message so that a report can tell the
    grader's words from text the answer wrote (an exception message may say
    "Hint: …" too). ``None``: taken from a message that is all the check's own
    text (``"…\n  Hint: …"``, as the chapter modules write it); a message that
    quotes the answer (its exception, its output) passes ``hint`` explicitly,
    ``""`` for none, so nothing the answer wrote is ever read as a hint."""

    def __init__(self, message: str = "", hint: str | None = None):
        super().__init__(message)
        if hint is None:
            head, sep, tail = str(message).partition("\n  Hint: ")
            hint = tail.strip() if sep else ""
        self.hint = hint


#: The part of a case that is advice, worth no points: behaviour on bad input that
#: ``shared/EXERCISES.md`` does not grade for this exercise.
ADVICE = "advice"


@dataclass
class Case:
    """One input to an exercise, as pure data.

    Args:
        args, kwargs: positional and keyword arguments (numpy arrays, python values,
            :class:`~autograder.wire.Tensor` for torch tensors,
            :class:`~autograder.wire.Obj` for trusted objects such as a Linear).
        label: what this case probes, in words ("a 2x3 batch with one fully masked
            row"); every failure message quotes it.
        init: for class exercises, the constructor's keyword arguments.
        state: for class exercises, the reference's ``state_dict`` (the parameters
            and buffers the contract names), loaded by
            :func:`autograder.runner.load_state`: a key the module lacks fails the
            case, state of the module's own beside them is accepted.
        strict_state: the contract fixes the whole state dict (``PositionalEncoding``'s
            ``pe``): the module may hold no other parameter or buffer.
        state_by_shape: a key of ``state`` the module lacks goes to a parameter of the
            module of the same shape that ``state`` does not name, the first in the
            module's order (:func:`autograder.runner.load_state`): for a part that
            grades what a module computes, when the names are the rule of another
            part (``TokenEmbedding``'s ``embedding``, ``MultiHeadAttention``'s
            ``w_q``, ``w_k``, ``w_v``, ``w_o``).
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
        part: the graded part this case belongs to (a key of
            :attr:`Exercise.parts`; ``""`` = the first part), or :data:`ADVICE`: a
            case about behaviour the contract does not grade (an error it does not
            name), whose failure is reported as advice worth no points.
        compare: ``"full"`` (type, shape, dtype and values), ``"structure"``
            (type, shape, dtype and probes, no array values: a part such as "shape
            and bool dtype") or ``"values"`` (type, shape and values, any numeric
            dtype: so a dtype mistake costs only the part that grades dtypes).
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
    part: str = ""
    compare: str = "full"
    strict_state: bool = False
    state_by_shape: bool = False

    def to_spec(self, kind: str, arrays: dict) -> dict:
        """Encode this case for :func:`autograder.runner.run_case`."""
        spec = {
            "kind": kind,
            "args": wire.encode(list(self.args), arrays),
            "kwargs": wire.encode(dict(self.kwargs), arrays),
            "init": wire.encode(dict(self.init), arrays) if self.init is not None else None,
            "state": None,
            "strict_state": bool(self.strict_state),
            "method": self.method,
            "train": self.train,
            "attrs": list(self.attrs),
            "probes": list(self.probes),
            "backward": wire.encode(self.backward, arrays) if self.backward is not None else None,
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
            if self.state_by_shape:  # only when set: every other case's spec (and fingerprint) is unchanged
                spec["state_by_shape"] = True
        return spec


@dataclass
class Result:
    """A decoded result: what the object under test returned, as plain data.

    Tensors appear as :class:`~autograder.wire.Tensor` markers (``.value`` the
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
        dec = lambda v: wire.decode(v, arrays, as_torch=False)  # noqa: E731
        return cls(
            value=dec(data.get("value")),
            attrs={k: dec(v) for k, v in (data.get("attrs") or {}).items()},
            probes={k: dec(v) for k, v in (data.get("probes") or {}).items()},
            grads={k: dec(v) for k, v in (data.get("grads") or {}).items()},
            args_after={k: dec(v) for k, v in (data.get("args_after") or {}).items()},
            raised=data.get("raised"),
        )
