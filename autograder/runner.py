"""Run exercise cases against a student's object: the program inside the grading sandbox.

This module and the wire format it speaks (:mod:`autograder.wire`) are the only
pieces of the autograder that execute inside the grading sandbox, so both are
deliberately standalone: the standard library and numpy (torch lazily), never
``solutions`` or the rest of ``autograder`` (the sandbox's library holds the two
files and a stub ``autograder`` package). The same functions run the visible checks
in the student's own kernel, so both paths see identical values.

Everything that crosses the wall is *data* (:mod:`autograder.wire`). Case specs
travel in; results travel out. Expected answers never enter the sandbox.

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

import atexit
import builtins
import importlib.abc
import io
import json
import os
import sys
import traceback
import types
from typing import Any

import numpy as np

# Absolute: in the sandbox this file runs as a script beside the stub `autograder` package, which holds wire.py.
from autograder.wire import decode, dump_bundle, encode, load_body, load_bundle, read_frame, write_frame

__all__ = ["run_case", "load_state", "Reference", "module_stand_in", "plain_value", "delegated", "differentiable",
           "weighted_backward", "reraise", "MODEL_METHODS", "DEFERRED_IMPORTS", "defer_imports", "exit_now", "main"]


def _torch():
    """torch, imported on first use: numpy-only chapters run without it."""
    # torch on first use: numpy-only chapters run without it (heavy)
    import torch

    return torch


# --------------------------------------------------------------------------- deferred imports

#: Modules a chapter's setup cell imports for the book's figures and explorers, which the
#: graded cells do not need: in the sandbox each is bound at once and executed on its first
#: use (:class:`_DeferredModule`). ``matplotlib`` (its core: colours, rc parameters, the
#: colour maps), ``matplotlib.pyplot`` (figures, backend, text) and ``ipywidgets`` (IPython,
#: traitlets) were about 0.5 of a chapter-4 start's 2.5 CPU s; a cell that plots pays for
#: matplotlib when it plots.
DEFERRED_IMPORTS = frozenset({"matplotlib", "matplotlib.pyplot", "ipywidgets"})


#: What a deferred module answers without running: the attributes the import system set on
#: it (inspect.getmodule, which torch's import calls, reads every module's ``__file__``;
#: importing a submodule reads its package's ``__path__``).
_MODULE_METADATA = frozenset({"__class__", "__name__", "__file__", "__spec__", "__loader__", "__package__",
                              "__cached__", "__path__"})


def _bound_submodule(package, attr: str, value=None):
    """The submodule ``attr`` of ``package`` that the import system bound (or is binding:
    ``value``) on it, or ``None``: ``import a.b`` sets ``a.b`` and ``import a.b as c`` reads it
    back, and neither is a use of ``a``."""
    name = f"{object.__getattribute__(package, '__name__')}.{attr}"
    module = sys.modules.get(name)
    if module is None or (value is not None and value is not module):
        return None
    if value is None and object.__getattribute__(package, "__dict__").get(attr) is not module:
        return None
    return module


class _DeferredModule(types.ModuleType):
    """A module of :data:`DEFERRED_IMPORTS` not run yet: reading any attribute but its
    :data:`_MODULE_METADATA` and its bound submodules, or setting or deleting any, runs it,
    and it becomes a plain module."""

    def __getattribute__(self, attr):
        if attr in _MODULE_METADATA:
            return object.__getattribute__(self, attr)
        submodule = _bound_submodule(self, attr)
        if submodule is not None:
            return submodule
        _run_deferred(self)
        return getattr(self, attr)

    def __setattr__(self, attr, value):
        if _bound_submodule(self, attr, value) is not None:
            object.__setattr__(self, attr, value)  # the import system binding a submodule
            return
        _run_deferred(self)
        setattr(self, attr, value)

    def __delattr__(self, attr):
        _run_deferred(self)
        delattr(self, attr)


def _run_deferred(module) -> None:
    """Run a :class:`_DeferredModule` now, with the loader that found it, its package first
    when that is deferred too (as an ordinary import runs a package before its submodules).
    A module that raises leaves ``sys.modules``, as a failed import does, and the error goes
    up."""
    if object.__getattribute__(module, "__class__") is not _DeferredModule:
        return
    spec = object.__getattribute__(module, "__spec__")
    if spec.parent and spec.parent != spec.name and spec.parent in sys.modules:
        _run_deferred(sys.modules[spec.parent])
        if object.__getattribute__(module, "__class__") is not _DeferredModule:
            return  # the package's own code used the submodule: it ran then
    object.__setattr__(module, "__class__", types.ModuleType)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        if sys.modules.get(spec.name) is module:
            del sys.modules[spec.name]
        raise


class _DeferredLoader(importlib.abc.Loader):
    """Wrap a module's own loader: create the module as it would, run it on first use."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__spec__.loader = module.__loader__ = self.loader
        module.__class__ = _DeferredModule


class _DeferredImports(importlib.abc.MetaPathFinder):
    """A finder that hands out the specs of :data:`DEFERRED_IMPORTS` with a deferring loader.

    It asks the finders after it for the module's spec, so the module found is the one
    an ordinary import would find; only its execution waits for the first use
    (:class:`_DeferredModule`). A module that is not installed raises ``ImportError`` at
    the import as before. A submodule it does not defer, of a package it deferred, runs the
    package first, as an ordinary import does.
    """

    def __init__(self, names=DEFERRED_IMPORTS):
        self.names = frozenset(names)

    def find_spec(self, name, path, target=None):
        if name not in self.names:
            package = sys.modules.get(name.rpartition(".")[0])
            if package is not None:  # a submodule not deferred needs its package run first
                _run_deferred(package)
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _DeferredLoader(spec.loader)
        return spec


def defer_imports(names=DEFERRED_IMPORTS) -> None:
    """Import ``names`` lazily from now on in this process (:class:`_DeferredImports`).

    Args:
        names: full module names (``"matplotlib.pyplot"``). ``import a.b`` runs package
            ``a`` at once unless ``a`` is deferred too; then both are bound, and ``a.b``'s
            first use runs ``a`` first.
    """
    sys.meta_path.insert(0, _DeferredImports(names))


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
                load_state(target, sd, strict=bool(spec.get("strict_state", False)),
                           by_shape=bool(spec.get("state_by_shape", False)))
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


def load_state(module, state: dict, strict: bool = False, by_shape: bool = False) -> None:
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
        by_shape: a key the module lacks is loaded into a parameter of the same
            shape that ``state`` does not name, the first in the module's order
            (:func:`_renamed_by_shape`): a case grading what the module computes,
            where the names are another part's rule.

    Raises:
        RuntimeError: a key of ``state`` that the module does not have; the message
            starts with :data:`MISSING_STATE` and names each such key.
        RuntimeError: a parameter ``state`` does not name; from ``load_state_dict``
            (a shape that differs, or with ``strict`` a buffer the contract does not name).
    """
    own = set(module.state_dict().keys())
    missing = [str(k) for k in state if k not in own]
    if missing and by_shape:
        state = _renamed_by_shape(module, state, missing)
        missing = [str(k) for k in state if k not in own]
    if missing:
        raise RuntimeError(f"{MISSING_STATE} {', '.join(repr(k) for k in missing)}")
    extra = [str(name) for name, _ in module.named_parameters() if name not in state]
    if extra:  # a trainable tensor the contract does not name changes the model; a buffer does not
        raise RuntimeError(f"unexpected parameter(s) {', '.join(repr(k) for k in extra)} beside those the "
                           "contract names (a buffer of your own is fine, a parameter is not)")
    module.load_state_dict(state, strict=bool(strict))


def _renamed_by_shape(module, state: dict, missing: list[str]) -> dict:
    """``state`` with each key of ``missing``, in ``state``'s order, renamed to the first
    parameter of the module (in the order it registers them) of its shape that ``state``
    does not name and no earlier key took: ``embedding.weight`` to a table named ``emb``;
    ``w_q.*, w_k.*, w_v.*, w_o.*`` to ``linears.0.* … linears.3.*``. A key with no such
    parameter is kept, and refused by :func:`load_state`."""
    free = {name: tuple(p.shape) for name, p in module.named_parameters() if name not in state}
    renamed = {}
    for key, value in state.items():
        if key in missing:
            same = next((name for name, shape in free.items() if shape == tuple(value.shape)), None)
            if same is not None:
                del free[same]
                key = same
        renamed[key] = value
    return renamed


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


# --------------------------------------------------------------------------- a regrade's references

#: The methods a reference may call on an object passed to it (``greedy_decode``'s model:
#: "uses only the Transformer's encode, decode and project", EXERCISES.md); no other
#: method and no attribute of such an object crosses the wall.
MODEL_METHODS = ("encode", "decode", "project")

#: How deeply calls of stand-ins and callbacks of their callables may nest in one run
#: (a ``ResidualSublayer`` stand-in calling back a sub-layer that calls a stand-in ...).
MAX_NESTING = 16


def differentiable(value) -> bool:
    """Whether ``value`` is a tensor gradients can flow through (floating or complex)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor) and (value.is_floating_point() or value.is_complex())


def weighted_backward(value, weights: list) -> None:
    """Accumulate the gradients of ``sum(weights[k] * outputs[k])``, where ``value`` is one
    output or a tuple or list of them (a weight of ``None``, or an output no gradient
    reaches, is left out)."""
    outputs = list(value) if isinstance(value, (tuple, list)) else [value]
    pairs = [(o, w) for o, w in zip(outputs, weights) if w is not None and differentiable(o) and o.requires_grad]
    if pairs:
        _torch().autograd.backward([o for o, _ in pairs], [w.to(o.dtype) for o, w in pairs])


def reraise(raised: dict, limit: int = 2000):
    """Raise what the other side of the wall reported (``{"type", "message"}``): the
    built-in exception class of that name, else ``RuntimeError``."""
    cls = getattr(builtins, str(raised.get("type")), None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        cls = RuntimeError
    raise cls(str(raised.get("message", ""))[:limit])


def _raised(exc: BaseException) -> dict:
    return {"raised": {"type": type(exc).__name__, "message": _safe_str(exc)[:2000]}}


class _Callbacks:
    """The callables passed in one call of a stand-in (``ResidualSublayer``'s ``sublayer``).
    They stay here, in the student's process: the reference, outside it, calls them back
    with ``callback`` frames, and each runs here on what the reference passes it.

    A callback may name a ``method`` of the object passed, one of :data:`MODEL_METHODS`
    (``greedy_decode``'s reference calls ``model.encode``, ``model.decode`` and
    ``model.project``): the object stays here and only that method runs, on what the
    reference sends.

    A callback asked for with ``grad`` keeps its graph (its tensor inputs, positional then
    keyword, become leaves that require gradients), so that a later ``callback`` frame
    naming that ``call`` gets the vector-Jacobian product back: the gradients of
    ``sum(grads[k] * outputs[k])`` with respect to those inputs, in that order. The
    student's own parameters used by the callable get their gradients on the way, as
    they would in one process.
    """

    def __init__(self):
        self.functions: list = []
        self.graphs: list = []

    def marker(self, value, arrays):
        """The :func:`autograder.wire.encode` extension of a call: a callable becomes
        ``{"__callback__": n}``; every other value is left to ``encode``."""
        if not callable(value) or isinstance(value, (np.ndarray, np.generic)) or differentiable(value):
            return NotImplemented
        self.functions.append(value)
        return {"__callback__": len(self.functions) - 1}

    def serve(self, request, arrays) -> tuple[dict, dict]:
        """Run one callback (or its vector-Jacobian product); returns the ``return`` frame's body."""
        out_arrays: dict = {}
        try:
            index = request.get("id") if isinstance(request, dict) else None
            if type(index) is not int or not 0 <= index < len(self.functions):
                raise RuntimeError("a callback of no callable passed in this call")
            if "call" in request:
                return {"grads": encode(self._vjp(request, arrays), out_arrays)}, out_arrays
            function = self._function(index, request.get("method"))
            args = list(decode(request.get("args", []), arrays))
            kwargs = decode(request.get("kwargs", {"__dict__": []}), arrays)
            if request.get("grad"):
                torch = _torch()
                args = [a.detach().requires_grad_(True) if differentiable(a) else a for a in args]
                kwargs = {k: v.detach().requires_grad_(True) if differentiable(v) else v for k, v in kwargs.items()}
                with torch.enable_grad():
                    value = function(*args, **kwargs)
                self.graphs.append(([*args, *kwargs.values()], value))
                return {"value": encode(value, out_arrays), "call": len(self.graphs) - 1}, out_arrays
            return {"value": encode(function(*args, **kwargs), out_arrays)}, out_arrays
        except Exception as exc:  # noqa: BLE001 - the student's callable raising is the reference's problem to report
            return _raised(exc), {}

    def _function(self, index: int, method):
        """The callable passed as number ``index``, or its public ``method``."""
        target = self.functions[index]
        if method is None:
            return target
        if method not in MODEL_METHODS:
            raise RuntimeError(f"a callback of a method other than {', '.join(MODEL_METHODS)}")
        function = getattr(target, method, None)
        if not callable(function):
            raise TypeError(f"the {type(target).__name__} passed to the reference has no method {method!r}")
        return function

    def _vjp(self, request, arrays) -> list:
        torch = _torch()
        call = request.get("call")
        if type(call) is not int or not 0 <= call < len(self.graphs):
            raise RuntimeError("a gradient of no callback of this call")
        inputs, value = self.graphs[call]
        weighted_backward(value, decode(request.get("grads", []), arrays))
        return [a.grad if a.grad is not None else torch.zeros_like(a) for a in inputs if differentiable(a)]


class _Channel:
    """The runner's ends of the reference pipes (``--reference-fds OUT IN``).

    A call goes out as a ``call`` frame and its ``answer`` comes back. Meanwhile the
    reference may call a callable of the call back (``callback`` frames, answered with
    ``return`` frames by :class:`_Callbacks`), and that callable may itself call a
    stand-in (a nested ``call``), at most :data:`MAX_NESTING` deep."""

    # The largest answer read back (the trusted relay admits no more).
    MAX_ANSWER_BYTES = 64 * 2**20

    def __init__(self, out, answers):
        self.out, self.answers = out, answers
        self.depth = 0

    def ask(self, name: str, request: dict, arrays: dict, callbacks: _Callbacks | None = None) -> tuple[dict, dict]:
        """Send one call; return the answer's ``(data, arrays)``, or raise what the reference raised."""
        if self.out is None:
            raise RuntimeError(f"the reference {name} cannot be reached in this run")
        if self.depth >= MAX_NESTING:
            raise RecursionError(f"the reference {name} was called more than {MAX_NESTING} calls deep")
        self.depth += 1
        try:
            write_frame(self.out, name, request, arrays, kind="call")
            while True:
                frame, _ = read_frame(self.answers, self.MAX_ANSWER_BYTES)
                if frame is None or frame[1] != name or frame[0] not in ("answer", "callback"):
                    raise RuntimeError(f"the reference {name} is no longer reachable in this run")
                data, received = load_body(frame[2], frame[3], self.MAX_ANSWER_BYTES)
                if frame[0] == "answer":
                    break
                reply, reply_arrays = (callbacks or _Callbacks()).serve(data, received)
                write_frame(self.out, name, reply, reply_arrays, kind="return")
        finally:
            self.depth -= 1
        raised = data.get("raised") if isinstance(data, dict) else None
        if isinstance(raised, dict):
            reraise(raised)
        if not isinstance(data, dict):
            raise RuntimeError(f"the reference {name} sent no answer")
        return data, received


class _RemoteCall:
    """One call of a reference outside this process: its name, what the call is (a
    function's arguments; a module's constructor arguments, state and method) and the
    callables it passes. :meth:`value` asks for the result, :meth:`grads` for the
    vector-Jacobian product with respect to the tensors at ``wrt``."""

    def __init__(self, channel: _Channel, name: str, base: dict, args, kwargs, state: dict | None = None):
        self.channel, self.name, self.base = channel, name, base
        self.args, self.kwargs, self.state = list(args), dict(kwargs), state
        self.callbacks = _Callbacks()
        self.wrt: list = []
        self.label = f"the reference {name}"

    def differentiable(self) -> list:
        """The tensors gradients may flow back to (``self.wrt`` names them): positional and
        keyword tensor arguments and the module's parameters that require gradients."""
        tensors = []
        for where, items in (("arg", enumerate(self.args)), ("kwarg", self.kwargs.items()),
                             ("state", (self.state or {}).items())):
            for key, value in items:
                if differentiable(value) and value.requires_grad:
                    self.wrt.append([where, key])
                    tensors.append(value)
        return tensors

    def _request(self, arrays: dict, rng=None, grads=None) -> dict:
        request = dict(self.base)
        request["args"] = encode(self.args, arrays, extension=self.callbacks.marker)
        request["kwargs"] = encode(self.kwargs, arrays, extension=self.callbacks.marker)
        if self.state is not None:
            request["state"] = encode(self.state, arrays)
        if rng is not None:
            request["rng"] = encode(rng, arrays)
        if grads is not None:
            request.update(wrt=self.wrt, grads=encode(list(grads), arrays))
        return request

    def value(self):
        """The reference's result; the torch generator continues where the reference left it."""
        torch = sys.modules.get("torch")
        arrays: dict = {}
        rng = torch.get_rng_state() if torch is not None else None
        self.callbacks = _Callbacks()
        data, received = self.channel.ask(self.name, self._request(arrays, rng), arrays, self.callbacks)
        if "value" not in data:
            raise RuntimeError(f"the reference {self.name} sent no value")
        if rng is not None and "rng" in data:
            torch.set_rng_state(decode(data["rng"], received))
        return decode(data["value"], received)

    def grads(self, grads, rng) -> list:
        """The gradients for the tensors at ``wrt``: the reference runs again from the
        generator state ``rng`` its forward started from, then backward."""
        arrays: dict = {}
        self.callbacks = _Callbacks()
        data, received = self.channel.ask(self.name, self._request(arrays, rng, grads), arrays, self.callbacks)
        if "grads" not in data:
            raise RuntimeError(f"the reference {self.name} sent no gradients")
        return list(decode(data["grads"], received))

    def forward(self):
        """:func:`delegated`'s forward: the value, from the generator state kept for the backward."""
        self.rng = _torch().get_rng_state()
        return self.value()

    def backward(self, grads) -> list:
        """:func:`delegated`'s backward."""
        return self.grads(grads, self.rng)


def _remote(call: _RemoteCall):
    """The result of ``call``: through an autograd function when gradients may flow back
    to one of its tensors (a student's module training through the reference), else a
    plain call."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.is_grad_enabled():
        return call.value()
    tensors = call.differentiable()
    if not tensors:
        return call.value()
    return delegated(call, tensors)


class Reference:
    """What a regrade's cells see in place of a failing earlier *function* exercise: a
    callable that holds only its name and the pipes to the trusted side, never the
    reference. Each call sends its arguments (data: numbers, strings, containers,
    arrays, tensors; a callable stays here and is called back) in a ``call`` frame; the
    reference runs in a sandbox of its own (:mod:`autograder.oracle`) and its result
    comes back. Gradients flow back through it to every tensor argument, positional or
    keyword, that requires them.

    Args:
        name: the exercise (``softmax``).
        channel: the pipes (:class:`_Channel`).
    """

    def __init__(self, name: str, channel: _Channel):
        self.__name__ = self.__qualname__ = name
        self._channel = channel

    def __repr__(self) -> str:
        return f"<the reference {self.__name__}, run outside this process>"

    def __deepcopy__(self, memo):
        return self

    def __call__(self, *args, **kwargs):
        return _remote(_RemoteCall(self._channel, self.__name__, {}, args, kwargs))


class _Remote:
    """What a module stand-in holds of its reference: the name, the pipes, its
    constructor's arguments and, per submodule path, the names of the plain attributes it
    mirrors; one object shared by the stand-in, its parts and their copies
    (``copy.deepcopy`` of a layer)."""

    def __init__(self, name: str, channel: _Channel, args: list, kwargs: dict):
        self.name, self.channel, self.args, self.kwargs = name, channel, args, kwargs
        self.attributes: dict[str, tuple[str, ...]] = {}

    def __deepcopy__(self, memo):
        return self

    def __repr__(self) -> str:
        return f"<the reference {self.name}, run outside this process>"


def plain_value(value) -> bool:
    """A value a module stand-in mirrors and sends as an attribute: a number, string, flag,
    or a short tuple of them."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    return isinstance(value, tuple) and len(value) <= 16 and all(isinstance(v, (bool, int, float, str)) for v in value)


def _module_call(module, path: str, args, kwargs):
    """Call the part of a module stand-in at ``path`` (``""``: the stand-in itself) outside
    this process: its arguments, its parameters and buffers, its and its submodules'
    training flags and their plain attributes as they are now go with the call."""
    remote = module._reference

    def absolute(sub_path: str) -> str:
        return ".".join(p for p in (path, sub_path) if p)

    modules = dict(module.named_modules())
    below = {p for p in remote.attributes if not path or p == path or p.startswith(path + ".")}
    if {absolute(p) for p in modules} != below or not all(isinstance(m, _StandInPart) for m in modules.values()):
        raise RuntimeError(f"the submodules of the reference {remote.name} were replaced or added to: a regrade "
                           "runs the reference as it was built (read and call its submodules, do not swap them)")
    attributes: dict = {}
    for sub_path, sub in modules.items():
        own = vars(sub)
        for key in remote.attributes[absolute(sub_path)]:
            if not plain_value(own.get(key)):
                raise RuntimeError(f"the attribute {key!r} of the reference {remote.name} holds a "
                                   f"{type(own.get(key)).__name__}: only numbers, strings and flags are sent")
            attributes.setdefault(sub_path, {})[key] = own[key]
    base = {"op": "call", "method": "forward", "path": path,
            "training": encode({p: m.training for p, m in modules.items()}, {}),
            "attributes": encode(attributes, {})}
    state = dict(module.named_parameters())
    state.update(module.named_buffers())
    return _remote(_ModuleCall(remote, base, args, kwargs, state))


_PART = None


def _part_class() -> type:
    """The class of a module stand-in's submodules (built once, with torch): each holds its
    parameters and buffers as tensors, and calling it runs the reference's submodule at its
    path outside this process (``self.ffn.linear1(x)``)."""
    global _PART
    if _PART is not None:
        return _PART
    torch = _torch()

    class ReferencePart(_StandInPart, torch.nn.Module):
        def __init__(self, remote: _Remote, path: str):
            super().__init__()
            self._reference, self._path = remote, path

        def forward(self, *args, **kwargs):
            return _module_call(self, self._path, args, kwargs)

        def __repr__(self) -> str:
            return f"{type(self).__name__}(<the reference's {self._path}, run outside this process>)"

    _PART = ReferencePart
    return _PART


class _StandInPart:
    """Marks a module stand-in and its parts (:func:`module_stand_in`)."""


def module_stand_in(name: str, channel: _Channel) -> type:
    """What a regrade's cells see in place of a failing earlier *class* exercise: a
    ``torch.nn.Module`` class named ``name`` whose instances hold the reference's
    parameters and buffers (data: the student's module loads, trains and reads them as
    tensors) and its submodules' names, never its code.

    Building one asks the references' sandbox to build the reference from the same
    arguments and the same torch generator state, and takes its state, structure and
    plain attributes (numbers, strings, flags) from it. Each call, of the stand-in or of
    one of its submodules (``self.ffn.linear1(x)``, ``self.residual.norm(x)``), sends the
    arguments, that module's current parameters and buffers, its and its submodules'
    training flags and plain attributes (changed after construction too:
    ``layer.dropout.p = 0.0``) and the generator state; the reference's module at that
    path runs there and its result comes back, with the generator where it left it, so
    dropout draws as it would in one process. Gradients flow back to the arguments and
    to the parameters that require them (the reference runs again from the same
    generator state, then backward); a callable argument (``ResidualSublayer``'s
    ``sublayer``) stays here and is called back. A submodule swapped for another (or
    one added) is refused with a clear error: the contract never asks for it.
    """
    torch = _torch()
    Part = _part_class()

    class StandIn(_StandInPart, torch.nn.Module):
        def __init__(self, *args, **kwargs):
            super().__init__()
            self._reference = _Remote(name, channel, list(args), dict(kwargs))
            arrays: dict = {}
            rng = torch.get_rng_state()
            request = {"op": "new", "init": encode({"args": list(args), "kwargs": dict(kwargs)}, arrays),
                       "rng": encode(rng, arrays)}
            data, received = channel.ask(name, request, arrays)
            try:
                modules = decode(data["modules"], received)
                state = decode(data["state"], received)
                parameters = set(decode(data["parameters"], received))
                for path, attributes in modules:
                    if path:
                        parent, _, child = path.rpartition(".")
                        self.get_submodule(parent).add_module(child, Part(self._reference, path))
                    target = self.get_submodule(path)
                    mirrored = []
                    for key, value in attributes.items():
                        if not hasattr(type(target), key) and plain_value(value):
                            setattr(target, key, value)
                            mirrored.append(key)
                    self._reference.attributes[path] = tuple(mirrored)
                for key, tensor in state.items():
                    owner, _, attr = key.rpartition(".")
                    module = self.get_submodule(owner)
                    if key in parameters:
                        module.register_parameter(attr, torch.nn.Parameter(tensor))
                    else:
                        module.register_buffer(attr, tensor)
                torch.set_rng_state(decode(data["rng"], received))
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise RuntimeError(f"the reference {name} sent a module this stand-in cannot hold") from exc

        def forward(self, *args, **kwargs):
            return _module_call(self, "", args, kwargs)

        def __repr__(self) -> str:
            return f"{name}(<the reference, run outside this process>)"

    StandIn.__name__ = StandIn.__qualname__ = name
    StandIn.__module__ = "__main__"
    return StandIn


class _ModuleCall(_RemoteCall):
    """A module stand-in's call: its constructor's arguments travel with it (encoded with
    the call's arrays), so the references' sandbox can build the reference again."""

    def __init__(self, remote: _Remote, base: dict, args, kwargs, state: dict):
        super().__init__(remote.channel, remote.name, base, args, kwargs, state)
        self.remote = remote
        if base.get("path"):
            self.label = f"the reference {remote.name}'s {base['path']}"

    def _request(self, arrays: dict, rng=None, grads=None) -> dict:
        request = super()._request(arrays, rng, grads)
        request["init"] = encode({"args": self.remote.args, "kwargs": self.remote.kwargs}, arrays)
        return request


def delegated(job, tensors: list):
    """``job``'s result through an autograd function whose forward and backward run
    elsewhere: ``job.forward()`` gives the value (a tensor, or a tuple or list of values),
    ``job.backward(grads)`` the gradients of ``tensors`` (one per tensor) from the
    gradients of the outputs. The stand-ins here send both outside the student's process;
    the references' sandbox sends a callback's back to it (:mod:`autograder.oracle`).
    Differentiating it twice (``create_graph=True``) raises, naming ``job.label``: no
    exercise needs it (EXERCISES.md)."""
    return _delegated_function().apply(job, *tensors)


_DELEGATED = None


def _delegated_function():
    global _DELEGATED
    if _DELEGATED is not None:
        return _DELEGATED
    torch = _torch()

    class Delegated(torch.autograd.Function):
        @staticmethod
        def forward(ctx, job, *tensors):
            ctx.job = job
            value = job.forward()
            outputs = list(value) if isinstance(value, (tuple, list)) else [value]
            ctx.mark_non_differentiable(*[o for o in outputs if isinstance(o, torch.Tensor) and not differentiable(o)])
            return tuple(outputs) if isinstance(value, (tuple, list)) else value

        @staticmethod
        def backward(ctx, *grads):
            if torch.is_grad_enabled():
                raise RuntimeError(f"{ctx.job.label} runs on the other side of the grading sandbox's wall in a "
                                   "regrade: its gradient cannot be differentiated again (create_graph=True); "
                                   "no exercise needs it")
            return (None, *ctx.job.backward(grads))

    _DELEGATED = Delegated
    return _DELEGATED


# --------------------------------------------------------------------------- sandbox entry


def main(argv: list[str] | None = None) -> int:
    """Sandbox entry point: ``python runner.py JOB_DIR [--result-fd N [--cases-fd M]]``.

    ``JOB_DIR/job.json`` holds ``{"setup": [source, ...], "cells": [{"grade_id",
    "exercise", "source"}, ...]}`` (a cell with ``"context": true`` is only
    executed: it defines what later cells call, and is not graded; one with
    ``"reference": "function"`` or ``"class"`` too binds its exercise to a
    :class:`Reference` or a :func:`module_stand_in`, whose calls go out on
    ``--reference-fds OUT IN``). Runs the setup cells, then each solution
    cell followed at once by its cases. Run as the sandbox's program, the
    :data:`DEFERRED_IMPORTS` load on first use (:func:`defer_imports`).

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
    channel = _Channel(None, None)
    if "--reference-fds" in argv:
        i = argv.index("--reference-fds")
        channel = _Channel(os.fdopen(int(argv[i + 1]), "wb"), os.fdopen(int(argv[i + 2]), "rb"))
        del argv[i : i + 3]
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
        if cell.get("context") and cell.get("reference"):
            # A failing earlier exercise in a regrade: its name calls the reference, which
            # runs outside this process (:class:`Reference`, :func:`module_stand_in`).
            name = cell["exercise"]
            if cell["reference"] == "class":
                try:
                    namespace[name] = module_stand_in(name, channel)
                except ImportError:  # no torch: no module could be built either
                    pass
            else:
                namespace[name] = Reference(name, channel)
            continue
        if cell.get("context"):
            # A cell that only defines what a graded cell calls (an earlier answer of the
            # student's own): it is not graded here, sends no frame, and its errors are
            # not reported.
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


def exit_now(program) -> None:
    """Run a sandbox program (``program()``, its ``main``) and end the process as Python
    would, without tearing its modules down.

    Python's own exit destroys every module object one by one: with torch loaded that is
    about 0.4 CPU s, a fifth of a fresh start, and none of it matters to the grader, which
    has every result once its frame is flushed. Everything the run can observe stays as
    Python does it: the exit status (``SystemExit``'s code, a message on stderr and 1 for a
    non-integer one, a traceback and 1 for an uncaught exception), the ``atexit``
    callbacks, and stdout and stderr flushed.
    """
    try:
        code = program()
    except SystemExit as exc:
        code = exc.code
    except BaseException:  # noqa: BLE001 - reported as Python reports it
        sys.excepthook(*sys.exc_info())
        code = 1
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - whatever the program left there, the exit goes on
            pass
    os._exit(status & 0xFF)


if __name__ == "__main__":  # pragma: no cover - exercised through the sandbox tests
    defer_imports()  # the setup's figure modules load when a cell uses them, not at every start
    exit_now(main)
