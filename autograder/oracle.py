"""Run a failing earlier exercise's reference for a regrade: the program inside its own sandbox.

When an answer lost points and uses an earlier exercise of its chapter that fell short,
the grader grades it again with the reference in place of that earlier answer ("one
mistake charged once", EXERCISES.md). The reference never enters the student's process:
there the name is bound to a stand-in (:class:`autograder.runner.Reference` for a
function, :func:`autograder.runner.module_stand_in` for a class) that sends each call as
data, and this program, in a sandbox of its own that holds no student code, runs the
reference on it and sends the result back. The trusted grader relays the frames between
the two and admits only plain data either way, each answer checked against its call
(:class:`autograder.reference_calls.ReferenceCalls`).

Frames (:mod:`autograder.wire`, ``grade_id`` = the exercise's name)::

    ready    (once, when the references are imported: the regrade's clock may start)
    call     {"args", "kwargs"[, "rng"]}                         -> answer {"value"[, "rng"]}
    call     {"args", "kwargs", "rng", "wrt", "grads"}           -> answer {"grads": [...]}
    call     {"op": "new", "init", "rng"}                        -> answer {"state", "parameters", "modules", "rng"}
    call     {"op": "call", "method", "path", "init", "state", "training", "attributes",
              "args", "kwargs", "rng"[, "wrt", "grads"]}         -> answer {"value", "rng"} or {"grads"}
    any      something the reference raised                       -> answer {"raised": {"type", "message"}}

``rng`` is the caller's torch generator state: the reference runs from it, and the
answer's ``rng`` is where it left it, so dropout draws as it would in one process. A
call with ``wrt`` asks for a vector-Jacobian product: the gradients of
``sum(grads[k] * outputs[k])`` with respect to the tensors ``wrt`` names (``["arg", i]``,
``["kwarg", name]``, ``["state", parameter]``), the reference run again from ``rng``.
A class reference is built afresh for every call from its constructor's arguments; the
submodule at ``path`` (``""``: the module itself; ``"linear1"``) is loaded with the
caller's state of that submodule, its and its submodules' training flags and the plain
attributes the caller holds now (``{path: {name: value}}``, ``dropout.p`` changed after
construction), and called: this program keeps nothing between calls.

A callable the caller passes (``ResidualSublayer``'s ``sublayer``; ``greedy_decode``'s
``model``) arrives as ``{"__callback__": n}``: calling it sends a ``callback`` frame
``{"id"[, "method"], "args", "kwargs", "grad"}`` (``method``: ``model.decode``, one of
:data:`autograder.runner.MODEL_METHODS`) and waits for the ``return`` frame (meanwhile the callable may
call a stand-in: that nested ``call`` is answered first). Gradients flow back through it
with a second ``callback`` frame ``{"id", "call", "grads"}``, whose ``return`` holds the
gradients of its tensor arguments, positional then keyword.

Like :mod:`autograder.runner`, this file is standalone (the standard library, numpy,
torch lazily, ``solutions``, the wire format and the runner's :func:`~autograder.runner.delegated`),
because it runs in the sandbox's library: ``python oracle.py JOB_DIR --reference-fds OUT IN``.
"""
from __future__ import annotations

import os
import sys

# Absolute: in the sandbox this file runs as a script beside the stub `autograder` package, which holds
# wire.py and, in the references' library, runner.py (:func:`autograder.library.reference_library`).
from autograder.runner import (MAX_NESTING, MODEL_METHODS, delegated, differentiable, exit_now, plain_value,
                               reraise, weighted_backward)
from autograder.wire import WireError, check_encoded, decode, encode, load_body, read_frame, write_frame

__all__ = ["Oracle", "main"]

#: The largest call or return read (JSON and uncompressed arrays): the relay admits no more.
MAX_CALL_BYTES = 64 * 2**20


def _torch():
    """torch, imported on first use: numpy-only references run without it."""
    # torch on first use: numpy-only chapters run without it (heavy)
    import torch

    return torch


class _Callback:
    """A callable the caller kept (``{"__callback__": n}``): calling it asks the caller to
    run it; ``callback.encode(...)`` asks it to run that method of the object, one of
    :data:`~autograder.runner.MODEL_METHODS` (``greedy_decode``'s reference calls the
    model's ``encode``, ``decode`` and ``project``). Nothing else of the object is here:
    its attributes are not sent.

    Gradients flow back through it to its tensor arguments, positional and keyword."""

    def __init__(self, oracle: "Oracle", name: str, index: int, grad: bool, method: str | None = None):
        self.oracle, self.name, self.index, self.grad, self.method = oracle, name, index, grad, method

    def __getattr__(self, attribute: str) -> "_Callback":
        if self.method is not None or attribute not in MODEL_METHODS:
            what = f"{self.method}.{attribute}" if self.method else attribute
            raise AttributeError(f"the reference {self.name} reached {what!r} of an object passed to it: only its "
                                 f"methods {', '.join(MODEL_METHODS)} are called across the grading sandbox's wall, "
                                 "and its attributes are not sent")
        return _Callback(self.oracle, self.name, self.index, self.grad, attribute)

    def __call__(self, *args, **kwargs):
        torch = sys.modules.get("torch")
        tensors = [a for a in (*args, *kwargs.values()) if differentiable(a)]
        if self.grad and torch is not None and torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
            return delegated(_CallerSide(self, args, kwargs), tensors)
        return self.ask(args, kwargs)[0]

    def _frame(self, body: dict) -> dict:
        return {"id": self.index, **body} if self.method is None else {"id": self.index, "method": self.method, **body}

    def ask(self, args, kwargs, grad: bool = False):
        """``(value, call)``: the callable's result and, with ``grad``, the number the caller keeps its graph under."""
        arrays: dict = {}
        request = self._frame({"args": encode(list(args), arrays), "kwargs": encode(dict(kwargs), arrays),
                               "grad": grad})
        data, received = self.oracle.callback(self.name, request, arrays)
        if "value" not in data:
            raise RuntimeError("the callable sent no value")
        return decode(data["value"], received), data.get("call")

    def vjp(self, call: int, grads) -> list:
        arrays: dict = {}
        data, received = self.oracle.callback(self.name, {"id": self.index, "call": call,
                                                          "grads": encode(list(grads), arrays)}, arrays)
        if "grads" not in data:
            raise RuntimeError("the callable sent no gradients")
        return list(decode(data["grads"], received))


class _CallerSide:
    """A callback through which gradients flow (:func:`autograder.runner.delegated`): its
    forward and its backward both run in the caller's process, which keeps its graph."""

    def __init__(self, callback: _Callback, args, kwargs):
        self.callback, self.args, self.kwargs = callback, list(args), dict(kwargs)
        self.label = f"the callable passed to the reference {callback.name}"

    def forward(self):
        torch = _torch()

        def detached(value):
            return value.detach() if isinstance(value, torch.Tensor) else value

        value, self.call = self.callback.ask([detached(a) for a in self.args],
                                             {k: detached(v) for k, v in self.kwargs.items()}, grad=True)
        return value

    def backward(self, grads) -> list:
        return self.callback.vjp(self.call, grads)


class Oracle:
    """The references' side of the pipes: answers each ``call`` frame read from ``calls``
    on ``out`` (:meth:`serve`), and asks the caller to run its callables (:meth:`callback`).

    Args:
        out, calls: binary streams (the answers out, the calls in).
        references: the module holding the references (``solutions``).
    """

    def __init__(self, out, calls, references):
        self.out, self.calls, self.references = out, calls, references
        self.depth = 0

    def serve(self) -> int:
        """Answer calls until the end of ``calls``; the exit status (1: a broken stream)."""
        write_frame(self.out, "", kind="ready")
        while True:
            frame, problem = read_frame(self.calls, MAX_CALL_BYTES)
            if frame is None:
                return 0 if problem is None else 1
            self.handle(frame)

    def handle(self, frame: tuple) -> None:
        """Answer one ``call`` frame (anything else is answered with a refusal)."""
        kind, name, body, npz = frame
        reference = getattr(self.references, name, None) if kind == "call" else None
        if reference is None or not callable(reference):
            data, arrays = {"raised": {"type": "RuntimeError", "message": "not a reference of this regrade"}}, {}
        else:
            try:
                request, received = load_body(body, npz, MAX_CALL_BYTES)
                if not isinstance(request, dict):
                    raise WireError("a call that is not a dict")
                marks: list = []
                check_encoded([request.get(key) for key in ("args", "kwargs")], received, callbacks=marks)
                check_encoded([request.get(key) for key in ("grads", "init", "state", "rng", "training")], received)
                data, arrays = self.answer(name, reference, request, received)
            except WireError as exc:
                data, arrays = {"raised": {"type": "RuntimeError", "message": str(exc)}}, {}
        try:
            write_frame(self.out, name, data, arrays, kind="answer")
        except (TypeError, ValueError):  # a value encode refuses: an answer the stand-in can read instead
            write_frame(self.out, name, {"raised": {"type": "RuntimeError", "message": "an unencodable result"}}, {},
                        kind="answer")

    def callback(self, name: str, request: dict, arrays: dict) -> tuple[dict, dict]:
        """Ask the caller to run one of its callables; return the ``return`` frame's body.
        A ``call`` that arrives first (the callable calling a stand-in) is answered first."""
        if self.depth >= MAX_NESTING:
            raise RecursionError(f"callbacks nested more than {MAX_NESTING} deep")
        self.depth += 1
        try:
            write_frame(self.out, name, request, arrays, kind="callback")
            while True:
                frame, _ = read_frame(self.calls, MAX_CALL_BYTES)
                if frame is None:
                    raise RuntimeError("the caller is gone")
                if frame[0] == "call":
                    self.handle(frame)
                    continue
                if frame[0] != "return" or frame[1] != name:
                    raise RuntimeError("the caller broke the protocol of a callback")
                data, received = load_body(frame[2], frame[3], MAX_CALL_BYTES)
                break
        finally:
            self.depth -= 1
        if not isinstance(data, dict):
            raise RuntimeError("the callable's return is not a dict")
        check_encoded(data.get("value"), received)
        check_encoded(data.get("grads"), received)
        if isinstance(data.get("raised"), dict):
            reraise(data["raised"])
        return data, received

    def _decode_call(self, name: str, request: dict, arrays: dict) -> tuple[list, dict]:
        grad = request.get("wrt") is not None
        marker = (lambda data, _arrays: _Callback(self, name, data["__callback__"], grad)
                  if set(data) == {"__callback__"} else NotImplemented)
        args = list(decode(request.get("args", []), arrays, extension=marker))
        kwargs = decode(request.get("kwargs", {"__dict__": []}), arrays, extension=marker)
        return args, kwargs

    def answer(self, name: str, reference, request: dict, arrays: dict) -> tuple[dict, dict]:
        """Run ``reference`` as ``request`` asks; ``(data, arrays)`` of the ``answer`` frame."""
        out_arrays: dict = {}
        torch = None
        try:
            rng = decode(request["rng"], arrays) if request.get("rng") is not None else None
            if rng is not None:
                torch = _torch()
                torch.set_rng_state(rng)
            op = request.get("op")
            if op == "new":
                init = decode(request.get("init", {"__dict__": []}), arrays)
                module = reference(*init["args"], **init["kwargs"])
                state = module.state_dict()
                parameters = [n for n, _ in module.named_parameters()]
                modules = [[path, {k: v for k, v in vars(m).items()
                                   if not k.startswith("_") and k != "training" and plain_value(v)}]
                           for path, m in module.named_modules()]
                data = {"state": encode(dict(state), out_arrays), "parameters": encode(parameters, out_arrays),
                        "modules": encode(modules, out_arrays)}
            else:
                target, inputs = self._target(reference, request, arrays)
                args, kwargs = self._decode_call(name, request, arrays)
                wrt = request.get("wrt")
                if wrt is None:
                    data = {"value": encode(target(*args, **kwargs), out_arrays)}
                else:
                    data = {"grads": encode(self._grads(target, inputs, args, kwargs, wrt, request, arrays),
                                            out_arrays)}
            if torch is not None and "grads" not in data:
                data["rng"] = encode(torch.get_rng_state(), out_arrays)
            return data, out_arrays
        except Exception as exc:  # noqa: BLE001 - the reference refusing the student's arguments is an answer
            return {"raised": {"type": type(exc).__name__, "message": str(exc)[:2000]}}, {}

    @staticmethod
    def _target(reference, request: dict, arrays: dict):
        """What the call runs (the function, or the rebuilt module's method) and the
        module's parameters and buffers by name (``{}`` for a function)."""
        if request.get("op") != "call":
            return reference, {}
        torch = _torch()
        init = decode(request.get("init", {"__dict__": []}), arrays)
        with torch.random.fork_rng():  # building it draws initial weights the state then replaces
            module = reference(*init["args"], **init["kwargs"])
        path = request.get("path", "")
        try:
            module = module.get_submodule(path) if isinstance(path, str) else None
        except AttributeError:
            module = None
        if module is None:
            raise RuntimeError("a call of a submodule the reference does not have")
        module.load_state_dict(decode(request.get("state", {"__dict__": []}), arrays), strict=True)
        training = decode(request.get("training", {"__dict__": []}), arrays)
        for sub_path, sub in module.named_modules():
            sub.training = bool(training.get(sub_path, False))
        for sub_path, attributes in decode(request.get("attributes", {"__dict__": []}), arrays).items():
            Oracle._set_attributes(module, sub_path, attributes)
        method = request.get("method", "forward")
        if method != "forward":
            raise RuntimeError("only forward runs outside the student's process")
        inputs = dict(module.named_parameters())
        inputs.update(module.named_buffers())
        return module, inputs

    @staticmethod
    def _set_attributes(module, path: str, attributes: dict) -> None:
        """Give the submodule at ``path`` the caller's values of its plain attributes (those a
        stand-in mirrors: an existing number, string, flag or tuple of them, by a plain value)."""
        try:
            sub = module.get_submodule(path)
        except AttributeError:
            raise RuntimeError("attributes of a submodule the reference does not have") from None
        own = vars(sub)
        for key, value in attributes.items():
            if key.startswith("_") or key == "training" or key not in own or not plain_value(own[key]) \
                    or not plain_value(value):
                raise RuntimeError(f"{key!r} is not a plain attribute of the reference's "
                                   f"{path or 'module'}")
            setattr(sub, key, value)

    @staticmethod
    def _grads(target, inputs: dict, args: list, kwargs: dict, wrt, request: dict, arrays: dict) -> list:
        torch = _torch()
        leaves = []
        for where, key in wrt:
            if where == "arg":
                args[key] = args[key].detach().clone().requires_grad_(True)
                leaves.append(args[key])
            elif where == "kwarg":
                kwargs[key] = kwargs[key].detach().clone().requires_grad_(True)
                leaves.append(kwargs[key])
            elif where == "state":
                leaves.append(inputs[key])
            else:
                raise ValueError("a gradient asked for with respect to nothing of the call")
        for leaf in leaves:
            leaf.grad = None
        with torch.enable_grad():
            value = target(*args, **kwargs)
        weighted_backward(value, decode(request.get("grads", []), arrays))
        return [leaf.grad if leaf.grad is not None else torch.zeros_like(leaf) for leaf in leaves]


def main(argv: list[str] | None = None) -> int:
    """Sandbox entry point: ``python oracle.py JOB_DIR --reference-fds OUT IN``.

    Imports the references, says ``ready``, then reads ``call`` frames from the inherited
    pipe ``IN`` until it ends and writes one ``answer`` frame per call to ``OUT``. The job
    folder is not read: the program holds nothing but the references (the library's
    ``solutions``, whole) and what it is sent.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--reference-fds" not in argv:
        raise SystemExit("oracle.py: --reference-fds OUT IN is required")
    i = argv.index("--reference-fds")
    out = os.fdopen(int(argv[i + 1]), "wb")
    calls = os.fdopen(int(argv[i + 2]), "rb")
    import solutions  # the whole reference: no student code runs in this process

    return Oracle(out, calls, solutions).serve()


if __name__ == "__main__":  # pragma: no cover - exercised through the sandbox tests
    exit_now(main)  # without tearing torch down: see the runner's exit_now
