"""A regrade's calls of failing earlier exercises, relayed to their references in a
sandbox of their own (:class:`ReferenceCalls`): the student's run holds no reference.

The relay admits each frame against the protocol (:mod:`autograder.wire`) and each answer
against what its call can return (:mod:`autograder.answer_shapes`); the references run
under :mod:`autograder.oracle` in a run of :func:`autograder.sandbox.run_job`.
"""
from __future__ import annotations

import builtins
import dataclasses
import io
import json
import logging
import math
import os
import select
import threading
from pathlib import Path

import numpy as np

from . import answer_shapes, wire
from .limits import Limits, MiB
from .runner import MODEL_METHODS
from .sandbox import RunOutcome, run_job

__all__ = ["ReferenceCalls"]

log = logging.getLogger(__name__)


class ReferenceCalls:
    """Relay a regrade's calls of failing earlier exercises to their references, which run
    in a sandbox of their own (:mod:`autograder.oracle`), never in the student's process
    (issue 36: a reference the graded cell can read, it can send out through its feedback,
    a file or shared memory).

    The student's run gets the ends ``child_fds`` (``--reference-fds``): the names of the
    failing exercises are bound there to stand-ins (:class:`autograder.runner.Reference`
    for a function, :func:`autograder.runner.module_stand_in` for a class), which write a
    ``call`` frame and read an ``answer``; meanwhile the reference may call back a callable
    the call passed (``callback`` and ``return`` frames), which may call a stand-in in turn.
    A thread here reads each frame, admits it and forwards it. Why a sandbox of its own, not
    this process: a call's arguments are the student's (``causal_mask(10**9)``), and a
    reference run on them here could take the grader's memory or time, and with it the
    class; there it runs under the regrade's own limits, as an unprivileged uid with no
    network, and can only die. The references' library holds ``solutions`` whole and no
    student code, so nothing there can read it out; the student's run holds no reference,
    so nothing there can either.

    Bounds, so that a cell calling a stand-in a million times costs only its own grade:
    at most :data:`MAX_CALLS` frames and :data:`MAX_BYTES` bytes each way per run, each
    frame at most :data:`MAX_FRAME_BYTES` (JSON at most :data:`MAX_JSON_BYTES`,
    :data:`MAX_ARRAYS` arrays), calls nested at most :data:`MAX_NESTING` deep, and plain
    data only (:func:`autograder.wire.check_encoded`: no object factory, whose building
    would run code in the references' sandbox); a call past a bound is answered with a
    refusal, in the grader's words, which the stand-in raises. What comes back from the
    references' sandbox is checked against its call before it enters the student's
    process (:meth:`_Call.check_answer`): the keys that call can have, plain data, a generator
    state of the size sent, gradients of the shape and dtype of the tensors asked about,
    a refusal of a known exception class with a bounded message.

    Time: :meth:`wait_ready` waits (at most :data:`START_SECONDS`) until the references'
    sandbox has imported the references, so the student's run starts after it and its
    clock is not charged with that start; the references' sandbox gets the regrade's
    limits plus that start.

    Args:
        names: the exercises whose references may be called (each a ``solutions`` name).
        lib_dir: the references' library (:func:`~autograder.library.build_library` with nothing withheld,
            plus ``oracle.py``: :func:`~autograder.library.reference_library`).
        job_dir: an empty folder for the references' run.
        limits: the regrade's limits.
        sandbox, isolation: as in :func:`~autograder.sandbox.run_job`.

    Use as a context manager around the student's run::

        with ReferenceCalls({"softmax"}, lib, job, limits) as calls:
            calls.wait_ready()
            run_job(..., reference_fds=calls.hand_over())
    """

    MAX_CALLS = 20_000
    MAX_BYTES = 512 * MiB
    MAX_FRAME_BYTES = 64 * MiB
    MAX_JSON_BYTES = 1 * MiB
    MAX_ARRAYS = 64
    MAX_NESTING = 16
    START_SECONDS = 120.0

    def __init__(self, names: set[str], lib_dir: Path, job_dir: Path, limits: Limits, sandbox: bool = True,
                 isolation: str | None = None):
        self.names = frozenset(names)
        self.lib_dir, self.job_dir, self.limits = Path(lib_dir), Path(job_dir), limits
        self.sandbox, self.isolation = sandbox, isolation
        self.calls = self.bytes_in = self.bytes_out = 0
        self.refused: str | None = None  # the first refusal, for the grader's log
        self.worker_outcome: RunOutcome | None = None
        self.worker_alive = True

    def __enter__(self) -> "ReferenceCalls":
        calls_read, calls_write = os.pipe()  # student -> here
        answers_read, answers_write = os.pipe()  # here -> student
        #: The student's run's ends, ``(out, in)``: :func:`~autograder.sandbox.run_job` closes them, whatever happens.
        self.child_fds = (calls_write, answers_read)
        self.from_student = os.fdopen(calls_read, "rb")
        self.to_student = os.fdopen(answers_write, "wb")
        to_worker_read, to_worker_write = os.pipe()
        from_worker_read, from_worker_write = os.pipe()
        self.to_worker = os.fdopen(to_worker_write, "wb")
        self.from_worker = os.fdopen(from_worker_read, "rb")
        self.job_dir.mkdir(parents=True, exist_ok=True)
        self.ready = threading.Event()
        self.worker = threading.Thread(target=self._run_worker, args=((from_worker_write, to_worker_read),),
                                       daemon=True)
        self.worker.start()
        self.relay = threading.Thread(target=self._relay, daemon=True)
        self.relay.start()
        return self

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait until the references' sandbox has started (its ``ready`` frame, read by the
        relay before anything else), at most ``timeout`` seconds (default
        :data:`START_SECONDS`). Whether it started: if not, every call is refused."""
        self.ready.wait(self.START_SECONDS if timeout is None else timeout)
        return self.ready.is_set() and self.worker_alive

    def hand_over(self) -> tuple[int, int]:
        """The student's run's ends, given to :func:`~autograder.sandbox.run_job`, which owns them from then
        on: it closes them when the run starts or fails to (so :meth:`__exit__` never does:
        closing a descriptor twice can close a file another thread has opened under the same
        number since, and a class graded with ``--jobs`` runs in threads)."""
        fds, self.child_fds = self.child_fds, ()
        return fds

    def __exit__(self, *exc_info) -> None:
        for fd in self.child_fds:  # not handed over: the student's run never got them, they are ours
            try:
                os.close(fd)
            except OSError:
                pass
        self.relay.join(timeout=self.limits.wall_seconds + 30)
        for stream in (self.to_worker, self.from_student, self.to_student, self.from_worker):
            try:
                stream.close()  # the references' sandbox reads the end of its calls and exits
            except OSError:
                pass
        self.worker.join(timeout=self.limits.wall_seconds + self.START_SECONDS + 30)
        if self.refused:
            log.info("a regrade's reference calls were refused: %s", self.refused)

    def _run_worker(self, fds: tuple[int, int]) -> None:
        limits = dataclasses.replace(self.limits, wall_seconds=self.limits.wall_seconds + self.START_SECONDS,
                                     cpu_seconds=self.limits.cpu_seconds + math.ceil(self.START_SECONDS))
        try:
            self.worker_outcome = run_job(self.job_dir, self.lib_dir, limits, sandbox=self.sandbox,
                                          result_pipe=False, isolation=self.isolation, script="oracle.py",
                                          reference_fds=fds)
        except Exception as exc:  # noqa: BLE001 - no references: every call is refused, the first grade stands
            # run_job owns fds (it closes them whether or not the run starts).
            log.warning("the references' sandbox of a regrade did not start: %s", exc)

    # ------------------------------------------------------------------ frames

    def _write(self, stream, kind: str, name: str, data, arrays: dict) -> None:
        buf = io.BytesIO()
        wire.write_frame(buf, name, data, arrays, kind=kind)
        stream.write(buf.getvalue())
        stream.flush()

    def _refusal(self, name: str, why: str) -> dict:
        self.refused = self.refused or why
        return {"raised": {"type": "RuntimeError", "message": f"the reference {name} was not called: {why}"}}

    def _refuse(self, name: str, why: str) -> None:
        """Answer a call with a refusal in the grader's words (the stand-in raises it)."""
        self._write(self.to_student, "answer", name, self._refusal(name, why), {})

    def _count(self, frame: tuple, inward: bool) -> str | None:
        """Count a frame against the run's bounds; why it is one too many, or ``None``."""
        self.calls += 1  # every frame counts, refused or not
        if inward:
            self.bytes_in += len(frame[2]) + len(frame[3])
        else:
            self.bytes_out += len(frame[2]) + len(frame[3])
        if self.calls > self.MAX_CALLS:
            return f"more than {self.MAX_CALLS} calls in one run"
        if self.bytes_in > self.MAX_BYTES:
            return f"more than {self.MAX_BYTES // MiB} MB of arguments in one run"
        if self.bytes_out > self.MAX_BYTES:
            return f"more than {self.MAX_BYTES // MiB} MB of results in one run"
        return None

    def _load(self, frame: tuple) -> tuple:
        data, arrays = wire.load_body(frame[2], frame[3], self.MAX_FRAME_BYTES)
        if len(arrays) > self.MAX_ARRAYS:
            raise wire.WireError(f"more than {self.MAX_ARRAYS} arrays in one frame")
        if any(a.size > wire.MAX_RESULT_ELEMENTS for a in arrays.values()):
            raise wire.WireError("an array larger than any exercise's")
        if not isinstance(data, dict):
            raise wire.WireError("a frame that is not the protocol's")
        return data, arrays

    def _admit(self, frame: tuple) -> tuple[str | None, "_Call | None"]:
        """``(why the call is refused, None)`` or ``(None, the call)``: a call of one of
        :attr:`names` with plain data within every bound, as a stand-in writes it."""
        kind, name, body, npz = frame
        too_many = self._count(frame, inward=True)
        if too_many:
            return too_many, None
        if kind != "call" or name not in self.names:
            return "not one of this regrade's references", None
        try:
            data, arrays = self._load(frame)
            return None, _Call(name, data, arrays)
        except wire.WireError as exc:
            return str(exc), None

    def _relay(self) -> None:
        try:
            frame, _ = _read_with_timeout(self.from_worker, self.START_SECONDS)
        except (OSError, ValueError):
            frame = None
        self.worker_alive = frame is not None and frame[0] == "ready"
        if not self.worker_alive:
            self.refused = self.refused or "the references' sandbox did not start"
        self.ready.set()
        try:
            while True:
                frame, _ = wire.read_frame(self.from_student, self.MAX_FRAME_BYTES, self.MAX_JSON_BYTES)
                if frame is None:
                    return  # the run ended (or broke the framing: it then waits for nothing)
                if frame[0] != "call":
                    self._count(frame, inward=True)
                    continue  # a return nothing waits for: dropped
                self._serve(frame, 0)
        except (OSError, ValueError, _Gone):
            return  # the student's run is gone: nothing waits for an answer

    def _serve(self, frame: tuple, depth: int) -> None:
        """Relay one call and everything until its answer (callbacks, nested calls)."""
        name = frame[1]
        refusal, call = self._admit(frame)
        if refusal is None and depth >= self.MAX_NESTING:
            refusal = f"calls nested more than {self.MAX_NESTING} deep"
        if refusal is None and not self.worker_alive:
            refusal = "the reference's sandbox stopped"
        if refusal is not None:
            self._refuse(name, refusal)
            return
        try:
            self.to_worker.write(_frame_bytes("call", name, frame[2], frame[3]))
            self.to_worker.flush()
        except (OSError, ValueError):
            self._stopped(name)
            return
        while True:
            try:
                reply, _ = wire.read_frame(self.from_worker, self.MAX_FRAME_BYTES, self.MAX_JSON_BYTES)
            except (OSError, ValueError):
                reply = None
            if reply is None or reply[1] != name or reply[0] not in ("answer", "callback"):
                self._stopped(name)
                return
            too_many = self._count(reply, inward=False)
            try:
                data, arrays = self._load(reply)
                if reply[0] == "answer":
                    call.check_answer(data, arrays)
                else:
                    call.check_callback(data, arrays)
            except wire.WireError as exc:
                self._stopped(name, f"its sandbox sent {exc}")
                return
            if reply[0] == "answer":
                if too_many:
                    self._refuse(name, too_many)
                else:
                    self.to_student.write(_frame_bytes("answer", name, reply[2], reply[3]))
                    self.to_student.flush()
                return
            self.to_student.write(_frame_bytes("callback", name, reply[2], reply[3]))
            self.to_student.flush()
            self._await_return(name, depth)

    def _await_return(self, name: str, depth: int) -> None:
        """Read the student's frames until the ``return`` of a callback of ``name`` (relaying
        the calls its callable makes meanwhile) and forward it, admitted, to the references."""
        while True:
            frame, _ = wire.read_frame(self.from_student, self.MAX_FRAME_BYTES, self.MAX_JSON_BYTES)
            if frame is None:
                raise _Gone
            if frame[0] == "call":
                self._serve(frame, depth + 1)
                continue
            too_many = self._count(frame, inward=True)
            if frame[0] != "return" or frame[1] != name:
                data, arrays = self._refusal(name, "the callable broke the protocol"), {}
            elif too_many:
                data, arrays = self._refusal(name, too_many), {}
            else:
                try:
                    data, arrays = self._load(frame)
                    _check_return(data, arrays)
                    self.to_worker.write(_frame_bytes("return", name, frame[2], frame[3]))
                    self.to_worker.flush()
                    return
                except wire.WireError as exc:
                    data, arrays = self._refusal(name, f"the callable returned {exc}"), {}
                except (OSError, ValueError):
                    return  # the references' sandbox is gone: the call's answer says so
            try:
                self._write(self.to_worker, "return", name, data, arrays)
            except (OSError, ValueError):
                pass
            return

    def _stopped(self, name: str, why: str = "its limits, or the arguments") -> None:
        """The references' sandbox died or broke the protocol: refuse this call and every later one."""
        self.worker_alive = False
        self._refuse(name, f"the reference's sandbox stopped ({why})")


class _Gone(Exception):
    """The student's run closed its end of the calls in the middle of a call."""


def _read_with_timeout(stream, seconds: float):
    """:func:`autograder.wire.read_frame` of a small frame that must begin within ``seconds``."""
    ready, _, _ = select.select([stream], [], [], max(0.0, seconds))
    if not ready:
        return None, "no frame in time"
    return wire.read_frame(stream, 4096, 4096)


#: The exceptions a reference's refusal may name (the stand-in raises that class).
_RAISABLE = frozenset(name for name, value in vars(builtins).items()
                      if isinstance(value, type) and issubclass(value, Exception))


def _check_raised(raised) -> None:
    if not (isinstance(raised, dict) and set(raised) == {"type", "message"} and isinstance(raised["type"], str)
            and isinstance(raised["message"], str) and len(raised["message"]) <= 2000):
        raise wire.WireError("a refusal that is not the protocol's")


def _check_return(data: dict, arrays: dict) -> None:
    """Admit the ``return`` of a student's callable: a value, gradients or what it raised, plain data."""
    if set(data) <= {"value", "call"} and "value" in data:
        if "call" in data and type(data["call"]) is not int:
            raise wire.WireError("a callback number that is not one")
        wire.check_encoded(data["value"], arrays)
    elif set(data) == {"grads"}:
        wire.check_encoded(data["grads"], arrays)
    elif set(data) == {"raised"}:
        _check_raised(data["raised"])
    else:
        raise wire.WireError("a return that is not the protocol's")


def _tensor_of(encoded, arrays: dict):
    """The array of an encoded tensor or array, or ``None``."""
    if isinstance(encoded, dict):
        key = encoded.get("__tensor__", encoded.get("__ndarray__"))
        if isinstance(key, str) and key in arrays:
            return arrays[key]
    return None


class _Call:
    """One admitted call of a stand-in: its data and arrays, and what may come back (its
    value predicted from its arguments: :func:`autograder.answer_shapes.predict`).

    Raises (on building): :class:`autograder.wire.WireError`: a call a stand-in does not write.
    """

    KEYS = {None: {"args", "kwargs", "rng", "wrt", "grads"},
            "new": {"op", "init", "rng"},
            "call": {"op", "method", "path", "init", "state", "training", "attributes", "args", "kwargs", "rng",
                     "wrt", "grads"}}

    def __init__(self, name: str, data: dict, arrays: dict):
        self.data, self.arrays = data, arrays
        self.op = data.get("op")
        if self.op not in self.KEYS or not set(data) <= self.KEYS[self.op]:
            raise wire.WireError("a call that is not the stand-in's")
        if self.op == "call" and data.get("method") != "forward":
            raise wire.WireError("a call of a method other than forward")
        path = data.get("path", "")
        if not (isinstance(path, str) and len(path) <= 200
                and (path == "" or all(part.isidentifier() or part.isdigit() for part in path.split(".")))):
            raise wire.WireError("a call of a submodule path that is not one")
        self.callbacks: list = []
        wire.check_encoded([data.get("args"), data.get("kwargs")], arrays, callbacks=self.callbacks)
        wire.check_encoded([data.get(key) for key in ("grads", "init", "state", "rng", "training", "attributes")],
                           arrays)
        self.expected = answer_shapes.predict(name, data, arrays)
        self.rng = _tensor_of(data.get("rng"), arrays)
        if data.get("rng") is not None and (self.rng is None or self.rng.dtype != np.uint8 or self.rng.ndim != 1):
            raise wire.WireError("a generator state that is not one")
        self.wrt = self._wrt(data.get("wrt"))

    def _wrt(self, wrt) -> list | None:
        """The arrays of the tensors gradients are asked for, in ``wrt`` order (shapes and dtypes to check)."""
        if wrt is None:
            return None
        if not isinstance(wrt, list) or not wrt or len(wrt) > self.MAX_WRT:
            raise wire.WireError("a call that is not the stand-in's")
        places = {"arg": dict(enumerate(self.data.get("args") or [])),
                  "kwarg": answer_shapes.entries(self.data.get("kwargs")),
                  "state": answer_shapes.entries(self.data.get("state"))}
        found = []
        for item in wrt:
            if not (isinstance(item, list) and len(item) == 2 and item[0] in places):
                raise wire.WireError("a call that is not the stand-in's")
            array = _tensor_of(places[item[0]].get(item[1]), self.arrays) if isinstance(item[1], (int, str)) else None
            if array is None or array.dtype.kind not in "fc":
                raise wire.WireError("a gradient asked for with respect to no tensor of the call")
            found.append(array)
        return found

    MAX_WRT = 256

    def check_answer(self, data: dict, arrays: dict) -> None:
        """Admit the references' answer to this call (:class:`ReferenceCalls`)."""
        keys = set(data)
        if keys == {"raised"}:
            _check_raised(data["raised"])
            if data["raised"]["type"] not in _RAISABLE:
                raise wire.WireError("a refusal of an unknown exception class")
            return
        with_rng = {"rng"} if self.rng is not None else set()
        if self.wrt is not None:
            if keys != {"grads"}:
                raise wire.WireError("an answer that is not this call's")
            grads = data["grads"]
            wire.check_encoded(grads, arrays)
            if not (isinstance(grads, list) and len(grads) == len(self.wrt)):
                raise wire.WireError("gradients that are not this call's")
            for encoded, want in zip(grads, self.wrt):
                got = _tensor_of(encoded, arrays)
                if got is None or got.shape != want.shape or got.dtype != want.dtype:
                    raise wire.WireError("gradients that are not this call's")
            return
        if self.op == "new":
            if keys != {"state", "parameters", "modules", "rng"}:
                raise wire.WireError("an answer that is not this call's")
            wire.check_encoded([data["state"], data["parameters"], data["modules"]], arrays)
            state = answer_shapes.entries(data["state"])
            if any(not isinstance(k, str) or _tensor_of(v, arrays) is None for k, v in state.items()):
                raise wire.WireError("a module state that is not one")
            if not (isinstance(data["parameters"], list)
                    and all(isinstance(p, str) and p in state for p in data["parameters"])):
                raise wire.WireError("a module state that is not one")
        elif keys != {"value"} | with_rng:
            raise wire.WireError("an answer that is not this call's")
        else:
            wire.check_encoded(data["value"], arrays)
            answer_shapes.check_value(self.expected, data["value"], arrays)
        if self.rng is not None:
            got = _tensor_of(data.get("rng"), arrays)
            if got is None or got.shape != self.rng.shape or got.dtype != self.rng.dtype:
                raise wire.WireError("a generator state that is not the one sent")

    def check_callback(self, data: dict, arrays: dict) -> None:
        """Admit the references' request to run a callable of this call."""
        index = data.get("id")
        if type(index) is not int or index not in self.callbacks:
            raise wire.WireError("a callback of no callable of this call")
        if data.get("method", MODEL_METHODS[0]) not in MODEL_METHODS:
            raise wire.WireError("a callback of a method no reference calls")
        if set(data) == {"id", "call", "grads"} and type(data["call"]) is int:
            wire.check_encoded(data["grads"], arrays)
        elif set(data) - {"method"} == {"id", "args", "kwargs", "grad"} and isinstance(data["grad"], bool):
            wire.check_encoded([data["args"], data["kwargs"]], arrays)
        else:
            raise wire.WireError("a callback that is not the protocol's")


def _frame_bytes(kind: str, name: str, body: bytes, npz: bytes) -> bytes:
    """A frame of :func:`autograder.wire.write_frame` around an admitted body, as it came."""
    header = {"grade_id": name, "kind": kind, "json": len(body), "npz": len(npz)}
    return json.dumps(header).encode("utf-8") + b"\n" + body + npz
