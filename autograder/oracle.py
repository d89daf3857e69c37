"""Run a failing earlier exercise's reference for a regrade: the program inside its own sandbox.

When an answer lost points and calls an earlier *function* exercise of its chapter that
fell short, the grader grades it again with the reference in place of that earlier
answer ("one mistake charged once", EXERCISES.md). The reference never enters the
student's process: there the name is bound to a stand-in (:class:`autograder.runner.Reference`)
that sends each call's arguments as data, and this program, in a sandbox of its own that
holds no student code, calls the reference on them and sends the result back. The
trusted grader relays the frames between the two and admits only plain data either way
(:class:`autograder.sandbox.ReferenceCalls`).

Frames (:mod:`autograder.wire`, ``grade_id`` = the exercise's name)::

    call    {"args": [...], "kwargs": {...}}                       -> answer {"value": ...}
    call    {"args", "kwargs", "wrt": [i, ...], "grads": [...]}    -> answer {"grads": [...]}
    any     something the reference raised                          -> answer {"raised": {"type", "message"}}

A call with ``wrt`` asks for a vector-Jacobian product: the gradients, with respect to
the positional tensor arguments at ``wrt``, of ``sum(grads[k] * outputs[k])``, which is
what the stand-in's ``backward`` needs when a student's module trains through the
reference (a tensor output, or a tuple of them).

Like :mod:`autograder.runner`, this file is standalone (the standard library, numpy,
torch lazily, ``solutions`` and the wire format), because it runs in the sandbox's
library: ``python oracle.py JOB_DIR --reference-fds OUT IN``.
"""
from __future__ import annotations

import os
import sys
from typing import Any

# Absolute: in the sandbox this file runs as a script beside the stub `autograder` package, which holds wire.py.
from autograder.wire import WireError, check_encoded, decode, encode, load_body, read_frame, write_frame

__all__ = ["answer", "main"]

#: The largest call read (JSON and uncompressed arrays): the relay admits no more.
MAX_CALL_BYTES = 64 * 2**20


def _torch():
    """torch, imported on first use: numpy-only references run without it."""
    # torch on first use: numpy-only chapters run without it (heavy)
    import torch

    return torch


def _outputs(value) -> list:
    """The tensors of a reference's result, in order: one tensor, or a tuple/list of them."""
    return list(value) if isinstance(value, (tuple, list)) else [value]


def answer(reference, request: dict, arrays: dict) -> tuple[dict, dict]:
    """Call ``reference`` as ``request`` asks and encode what it gives.

    Args:
        reference: the reference function (``solutions.<name>``).
        request: a ``call`` frame's data (see the module docstring), already admitted by
            :func:`autograder.wire.check_encoded`.
        arrays: the frame's arrays.

    Returns:
        ``(data, arrays)`` of the ``answer`` frame: ``{"value"}``, ``{"grads"}`` or ``{"raised"}``.
    """
    out_arrays: dict = {}
    try:
        args = list(decode(request.get("args", []), arrays))
        kwargs = decode(request.get("kwargs", {"__dict__": []}), arrays)
        wrt = request.get("wrt")
        if wrt is None:
            return {"value": encode(reference(*args, **kwargs), out_arrays)}, out_arrays
        torch = _torch()
        for i in wrt:
            args[i] = args[i].detach().clone().requires_grad_(True)
        outputs = _outputs(reference(*args, **kwargs))
        weights = decode(request.get("grads", []), arrays)
        pairs = [(o, w) for o, w in zip(outputs, weights)
                 if w is not None and isinstance(o, torch.Tensor) and o.requires_grad]
        if pairs:
            torch.autograd.backward([o for o, _ in pairs], [w.to(o.dtype) for o, w in pairs])
        grads = [args[i].grad if args[i].grad is not None else torch.zeros_like(args[i]) for i in wrt]
        return {"grads": encode(grads, out_arrays)}, out_arrays
    except Exception as exc:  # noqa: BLE001 - the reference refusing the student's arguments is an answer
        return {"raised": {"type": type(exc).__name__, "message": str(exc)[:2000]}}, {}


def main(argv: list[str] | None = None) -> int:
    """Sandbox entry point: ``python oracle.py JOB_DIR --reference-fds OUT IN``.

    Reads ``call`` frames from the inherited pipe ``IN`` until it ends and writes one
    ``answer`` frame per call to ``OUT``. The job folder is not read: the program holds
    nothing but the references (the library's ``solutions``, whole) and what it is sent.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--reference-fds" not in argv:
        raise SystemExit("oracle.py: --reference-fds OUT IN is required")
    i = argv.index("--reference-fds")
    out = os.fdopen(int(argv[i + 1]), "wb")
    calls = os.fdopen(int(argv[i + 2]), "rb")
    import solutions  # the whole reference: no student code runs in this process

    while True:
        frame, problem = read_frame(calls, MAX_CALL_BYTES)
        if frame is None:
            return 0 if problem is None else 1
        kind, name, body, npz = frame
        reference = getattr(solutions, name, None) if kind == "call" else None
        if not callable(reference):
            data, arrays = {"raised": {"type": "RuntimeError", "message": "not a reference of this regrade"}}, {}
        else:
            try:
                request, received = load_body(body, npz, MAX_CALL_BYTES)
                if not isinstance(request, dict):
                    raise WireError("a call that is not a dict")
                check_encoded([request.get(key) for key in ("args", "kwargs", "grads")], received)
                data, arrays = answer(reference, request, received)
            except WireError as exc:
                data, arrays = {"raised": {"type": "RuntimeError", "message": str(exc)}}, {}
        try:
            write_frame(out, name, data, arrays, kind="answer")
        except (TypeError, ValueError):  # a value encode refuses: an answer the stand-in can read instead
            write_frame(out, name, {"raised": {"type": "RuntimeError", "message": "an unencodable result"}}, {},
                        kind="answer")


if __name__ == "__main__":  # pragma: no cover - exercised through the sandbox tests
    sys.exit(main())
