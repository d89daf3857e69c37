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

Hidden cases, one rule: :func:`evaluate` with ``hidden=True`` judges under
:func:`redacting`. There every message names the mistake without quoting a value
that came from, or was computed from, the inputs: :func:`compare` says kinds,
shapes, dtypes, counts ("3 of 12 entries differ"), the largest error and where it
is, never an element, a returned string or key, or an expected value; the
checks' own hints format values through :func:`shown`, which describes a value
instead of quoting it. The whole hidden set is judged so, its visible cases too:
they ran in the same sandbox as the hidden inputs, so what they returned may carry
them. A case's label is shown only when it is fixed text (the same in every
draw of the cases, :func:`public_labels`): a label such as "random corpus [...]"
spells out its inputs. The check in the student's own kernel (:func:`check`, even with
``hidden=True``: the inputs are made in that kernel) keeps its detailed messages.
"""
from __future__ import annotations

import builtins
import contextlib
import contextvars
import dataclasses
import functools
import io
import re
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import numpy as np

from .. import runner, wire
from ..wire import Obj, Tensor

__all__ = [
    "ADVICE",
    "Case",
    "CheckFailure",
    "Exercise",
    "PartResult",
    "Points",
    "Report",
    "Result",
    "REGISTRY",
    "register",
    "get_exercise",
    "check",
    "charged_once",
    "dependency_unchanged_note",
    "check_report",
    "last_verdict",
    "dtype_verdict",
    "called_dependencies",
    "accept_own_state",
    "load_state_hint",
    "evaluate",
    "own_code_message",
    "run_cases",
    "draw_cases",
    "as_array",
    "close",
    "Precomputed",
    "use_precomputed",
    "precomputed",
    "visible_cases",
    "public_labels",
    "redacting",
    "shown",
    "Tensor",
    "Obj",
]


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


# Set while a hidden set is judged (:func:`evaluate` with ``hidden=True``).
_REDACT: contextvars.ContextVar[bool] = contextvars.ContextVar("autograder_redact", default=False)


def redacting() -> bool:
    """Whether the messages being made are about hidden cases, and so must not
    quote values from (or computed from) the inputs (:func:`evaluate`)."""
    return _REDACT.get()


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
    # checks/__init__ imports this module: a cycle at import time
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
        parts: the graded parts, in the prompt's order: name -> points. Every case
            names its part (:attr:`Case.part`); a part's points are earned when all
            its cases pass. The points sum to the test cell's ``points``.
        uses: earlier exercises of the same chapter that an answer may call
            (``scaled_dot_product_attention`` uses ``softmax``). When one of them
            fails its own check, this exercise is graded with the reference in its
            place as well, and keeps the better grade (one mistake charged once).
    """

    name: ClassVar[str] = ""
    chapter: ClassVar[str] = ""
    kind: ClassVar[str] = "function"
    what: ClassVar[str] = "shapes and values against the reference"
    parts: ClassVar[dict[str, float]] = {}
    uses: ClassVar[tuple[str, ...]] = ()

    # -- to implement -------------------------------------------------------
    def cases(self, rng: np.random.Generator, hidden: bool) -> list[Case]:
        """The cases to run. ``hidden=False``: a few quick, readable ones for the
        visible check, at least one per part; ``hidden=True``: the full
        randomised set (the visible cases and fresh ones, no new rules)."""
        raise NotImplementedError

    def diagnose(self, case: Case, got: Result, want: Result) -> str | None:
        """A hint naming the likely mistake when values differ, or ``None``."""
        return None

    def raised_hint(self, case: Case, got: Result) -> str | None:
        """A hint for a failure about raising: the call raised when it should not
        have (``got.raised`` is set), or ``case.expect_error`` was not met. ``None``
        when there is nothing to add."""
        return None

    def tolerated(self, case: Case, want: Result) -> list[Result]:
        """The results ``case`` also accepts: the reference's result computed with a
        rule of *another* part broken, one the case's own part does not grade.

        This is how a case is judged independently of the other parts' rules
        (``shared/EXERCISES.md``: "its cases hold every other part's rule fixed (or
        are judged independently of it)") where inputs alone cannot hold a rule
        fixed: ``layer_norm``'s "γ and β" cases accept the unbiased variance, whose
        rule the normalisation part states; ``noam_lr``'s factor cases accept a
        wrong warm-up exponent. A result equal to one of these passes the case, at
        the case's tolerance; the part that states the broken rule still fails.
        Default: none (every case compares with the reference alone)."""
        return []

    # -- provided -----------------------------------------------------------
    def part_points(self) -> dict[str, float]:
        """The parts and their points (one part worth 1 when none are declared)."""
        return dict(self.parts) if self.parts else {"correct on every case": 1.0}

    def part_of(self, case: Case) -> str:
        """The part ``case`` counts for: its own, or the first part when unnamed."""
        if case.part == ADVICE:
            return ADVICE
        names = list(self.part_points())
        if not case.part:
            return names[0]
        if case.part not in names:
            raise ValueError(f"{self.name}: case {case.label!r} names part {case.part!r}; parts are {names}")
        return case.part

    def reference(self) -> Callable:
        """The reference object from ``solutions`` (trusted process only)."""
        # the references when a case runs (trusted side only; they import torch)
        import solutions

        return getattr(solutions, self.name)

    def expected(self, case: Case) -> Result:
        """Run ``case`` on the reference and return its result; in the student
        package, read it from the precomputed data instead (:func:`use_precomputed`)."""
        store = precomputed()
        if store is not None and store.has(self.name):
            return store.expected(self.name, case)
        return _run_in_process(self.reference(), case, self.kind)

    def judge(self, case: Case, got: Result, want: Result) -> list[str]:
        """Raise :class:`CheckFailure` when ``got`` is wrong for ``case``, with the
        hint of :meth:`raised_hint` when the failure is about raising. Returns the
        notes of a correct result (e.g. "float64 for float32 input: correct")."""
        got = accept_own_state(case, got, want)
        try:
            try:
                return self._judge(case, got, want)
            except CheckFailure:
                if case.expect_error or got.raised is not None:
                    raise
                for other in self._tolerated(case, want):
                    try:
                        return self._judge(case, got, other)
                    except CheckFailure:
                        continue
                raise
        except CheckFailure as exc:
            message = str(exc)
            raised = got.raised or {}
            about_raising = bool(case.expect_error) or bool(raised)
            if about_raising and raised.get("type") != "NotImplementedError" and not exc.hint:
                try:
                    hint = self.raised_hint(case, got)
                except Exception:  # noqa: BLE001 - a hint must never hide the failure
                    hint = None
                if hint:
                    raise CheckFailure(f"{message}\n  Hint: {hint}", hint=hint) from None
            raise

    def _tolerated(self, case: Case, want: Result) -> list[Result]:
        """:meth:`tolerated`, where a failure to compute one (a variant that does
        not apply to this case) leaves it out: it never hides the first failure."""
        try:
            with PROCESS_STATE:
                return list(self.tolerated(case, want) or [])
        except Exception:  # noqa: BLE001 - a tolerated variant must never hide the failure
            return []

    def _judge(self, case: Case, got: Result, want: Result) -> list[str]:
        where = f" ({case.label})" if case.label else ""
        if case.expect_error:
            names = " or ".join(e.__name__ for e in case.expect_error)
            if got.raised is None:
                raise CheckFailure(f"should raise {names}{where}, but returned normally")
            if got.raised["type"] not in {e.__name__ for e in case.expect_error} and not _is_subclass_name(
                got.raised["type"], case.expect_error
            ):
                said = _HIDDEN_MESSAGE if redacting() and not own_code_message(got.raised) else f": {got.raised['message']}"
                raise CheckFailure(f"should raise {names}{where}, but raised {got.raised['type']}{said}", hint="")
            return []
        if got.raised is not None:
            r = got.raised
            if r["type"] == "NotImplementedError":
                raise CheckFailure(NOT_IMPLEMENTED)
            stage = {"init": "the constructor", "load_state_dict": "load_state_dict"}.get(r.get("phase"), "it")
            # phase "encode": the grader's own words on a value that cannot cross (grading._withhold)
            said = (_HIDDEN_MESSAGE if redacting() and r.get("phase") != "encode" and not own_code_message(r)
                    else f": {r['message']}")
            missing = _missing_state(case, r)
            if missing:  # contract names only: the same words in the visible check and a hidden one
                said = f": {runner.MISSING_STATE} {', '.join(repr(k) for k in missing)}"
            raise CheckFailure(f"{stage} raised {r['type']}{said}{where}", hint="")
        if want.raised is not None:  # pragma: no cover - a broken reference
            raise RuntimeError(f"the reference raised on {case.label!r}: {want.raised}")
        notes: list[str] = []
        mode = case.compare
        if mode not in ("full", "structure", "values"):
            raise ValueError(f"Case.compare must be 'full', 'structure' or 'values', got {mode!r}")
        try:
            for name in want.probes:  # names, types, shapes: compared fully in every mode
                compare(got.probes.get(name), want.probes[name], f"{name}", case, notes,
                        mode="full" if mode == "structure" else mode)
            compare(got.value, want.value, "the output", case, notes, mode=mode)
            for name in want.attrs:
                compare(got.attrs.get(name), want.attrs[name], f"self.{name}", case, notes, mode=mode)
            for name in want.grads:
                compare(got.grads.get(name), want.grads[name], f"the gradient of argument {name}", case, notes,
                        mode=mode)
            for name in want.args_after:
                compare(
                    got.args_after.get(name),
                    want.args_after[name],
                    f"argument {name} after the call (it must not be modified in place)",
                    case,
                    notes,
                    mode=mode,
                )
        except CheckFailure as exc:
            hint = None
            try:
                with PROCESS_STATE:
                    hint = self.diagnose(case, got, want)
            except Exception:  # noqa: BLE001 - a hint must never hide the failure
                hint = None
            message = str(exc) + where
            if hint:
                message += "\n  Hint: " + hint
            raise CheckFailure(message, hint=hint or "") from None
        return notes


NOT_IMPLEMENTED = "not implemented yet: replace `raise NotImplementedError()` with your code"

# The messages Python itself writes for a slip in the answer's own code (a misspelt
# name or attribute, a call with the wrong arguments): made of names in the code,
# never of values, so a hidden case shows them as the visible check does.
_NAME = r"[A-Za-z_][A-Za-z0-9_]{0,39}"
_DOTTED = rf"{_NAME}(?:\.{_NAME}){{0,4}}"
_DID_YOU_MEAN = rf"(?:\. Did you mean: '{_NAME}'\?)?"
_OWN_CODE_MESSAGES = {
    "NameError": [rf"name '{_NAME}' is not defined{_DID_YOU_MEAN}",
                  rf"cannot access free variable '{_NAME}' where it is not associated with a value in enclosing scope",
                  rf"cannot access local variable '{_NAME}' where it is not associated with a value"],
    "UnboundLocalError": [rf"cannot access local variable '{_NAME}' where it is not associated with a value",
                          rf"local variable '{_NAME}' referenced before assignment"],
    "AttributeError": [rf"'{_NAME}' object has no attribute '{_NAME}'{_DID_YOU_MEAN}",
                       rf"module '{_DOTTED}' has no attribute '{_NAME}'{_DID_YOU_MEAN}",
                       rf"type object '{_NAME}' has no attribute '{_NAME}'{_DID_YOU_MEAN}"],
    "TypeError": [rf"{_DOTTED}\(\) missing \d+ required (?:positional|keyword-only) arguments?: "
                  rf"'{_NAME}'(?:(?:, | and )'{_NAME}'){{0,9}}",
                  rf"{_DOTTED}\(\) takes (?:from \d+ to )?\d+ positional arguments? but \d+ (?:was|were) given",
                  rf"{_DOTTED}\(\) got an unexpected keyword argument '{_NAME}'",
                  rf"{_DOTTED}\(\) got multiple values for argument '{_NAME}'",
                  rf"'{_DOTTED}' object is not (?:callable|subscriptable|iterable)",
                  rf"unsupported operand type\(s\) for [^\s']{{1,3}}: '{_DOTTED}' and '{_DOTTED}'"],
}


def own_code_message(raised: dict) -> bool:
    """Whether an exception raised by the answer is one of Python's own messages about
    a slip in the code (``NameError: name 'nrom' is not defined``, ``'PositionalEncoding'
    object has no attribute 'dropuot'``, a call with a missing argument), which names
    only things written in the code and so may be shown for a hidden case too.

    The message must be exactly one of :data:`_OWN_CODE_MESSAGES`'s forms, each made of
    short names (a value could reach one only spelt as a name of at most 40
    letters, digits and underscores)."""
    forms = _OWN_CODE_MESSAGES.get(str(raised.get("type")))
    message = str(raised.get("message") or "")
    return bool(forms) and any(re.fullmatch(form, message) for form in forms)
# An exception's message is the answer's own text: on a hidden case it may spell out the inputs.
_HIDDEN_MESSAGE = " (its message is not shown: hidden case)"


# Probes that list a module's state: the contract names what must be there; what a
# module keeps beside it (a buffer holding √d_model) is its own business.
_STATE_PROBES = ("state_dict_keys", "buffer_names")


def accept_own_state(case: Case, got: Result, want: Result) -> Result:
    """``got`` with its state probes (:data:`_STATE_PROBES`) read as the contract
    reads them: a list holding every name of the reference's becomes the
    reference's list, so the extra state a module keeps beside the names the
    contract fixes is accepted (unless ``case.strict_state``).

    Raises:
        CheckFailure: the module lacks names the reference has; the message
            names them (names the contract fixes, shown for hidden cases too).
    """
    if case.strict_state or not want.probes:
        return got
    probes = dict(got.probes)
    for name in _STATE_PROBES:
        mine, theirs = probes.get(name), want.probes.get(name)
        if not isinstance(mine, list) or not isinstance(theirs, list):
            continue
        missing = [k for k in theirs if k not in mine]
        if missing:
            where = f" ({case.label})" if case.label else ""
            raise CheckFailure(f"the module's {name} lacks {', '.join(repr(k) for k in missing)}, which the "
                               f"contract names{where}")
        probes[name] = list(theirs)
    return dataclasses.replace(got, probes=probes)


def load_state_hint(case: Case, got: Result, hint: str) -> str | None:
    """The :meth:`Exercise.raised_hint` of a class exercise whose only hint about
    raising is for a module that could not load the case's ``state``.

    Args:
        case: the case judged.
        got: the answer's result.
        hint: what the module must hold (its submodules and ``state_dict`` keys).

    Returns:
        ``hint`` when the call raised while loading the state dict (and ``case``
        expects no error), else ``None``.
    """
    raised = got.raised
    if raised is None or case.expect_error:
        return None
    if raised.get("phase") == "load_state_dict":
        return hint
    return None


def _missing_state(case: Case, raised: dict) -> list[str]:
    """The keys of ``case.state`` that :func:`autograder.runner.load_state` said
    the module lacks, or ``[]``. Only names of the case's own state are returned
    (names the contract fixes, the same in every draw), so the message may be
    shown for a hidden case too; the answer's text is only searched (``in``)."""
    if raised.get("phase") != "load_state_dict" or not case.state:
        return []
    message = raised.get("message") or ""
    if runner.MISSING_STATE not in message:
        return []
    return [str(k) for k in case.state if repr(str(k)) in message]


def _is_subclass_name(name: str, types) -> bool:
    """Whether the exception class called ``name`` (builtin or numpy's, e.g.
    ``AxisError``) is a subclass of one of ``types``. Only the name crosses the
    sandbox wall, so the class is looked up here, among trusted modules."""
    for namespace in (builtins, np.exceptions):
        cls = getattr(namespace, name, None)
        if isinstance(cls, type) and issubclass(cls, tuple(types)):
            return True
    return False


# torch's and numpy's global random generators, the warnings filters and sys.stderr
# are one per process. A case seeds the generators and then draws from them (dropout,
# a module's initialisation); a hint replays those draws. Two gradings in threads of
# one process (a test's thread pool, a server) would interleave the draws and judge
# the reference wrong, so every trusted run and every diagnosis holds this lock.
PROCESS_STATE = threading.RLock()


def draw_cases(exercise: Exercise, rng: np.random.Generator, hidden: bool) -> list[Case]:
    """``exercise.cases(rng, hidden)`` under the process lock (a case maker may seed
    torch's global generator to build a reference module's weights).

    The visible set (``hidden=False``) also holds every probe of the hidden set
    (:func:`hidden_probes`): the hidden check adds fresh draws of the same probes,
    never a rule of its own, so the visible check and the grade decide every rule
    the same way (``shared/EXERCISES.md``)."""
    with PROCESS_STATE:
        cases = list(exercise.cases(rng, hidden))
    if not hidden:
        seen = {(c.label, exercise.part_of(c)) for c in cases}
        cases += [c for c in hidden_probes(exercise) if (c.label, exercise.part_of(c)) not in seen]
    return cases


def _hidden_probes_of(exercise: Exercise) -> tuple[Case, ...]:
    first, second = (draw_cases(exercise, np.random.default_rng(seed), True) for seed in _LABEL_DRAWS)
    fixed = {c.label for c in first} & {c.label for c in second}
    probes, seen = [], set()
    for case in first:
        key = (case.label, exercise.part_of(case))
        if case.label in fixed and key not in seen:
            seen.add(key)
            probes.append(case)
    return tuple(probes)


# Registered exercise (the object: a test may register another under a name) -> its probes.
_PROBES: dict[int, tuple[Exercise, tuple[Case, ...]]] = {}


def hidden_probes(exercise: Exercise) -> list[Case]:
    """The hidden set's probes: its cases whose label is fixed text (the same in two
    independent draws, such as "a query whose keys are all masked"), one per label and
    part, as drawn with a fixed seed. A case whose label spells out drawn values
    ("random x (3, 5)") is a fresh draw of a probe the visible set already has."""
    if REGISTRY.get(exercise.name) is not exercise:
        return list(_hidden_probes_of(exercise))
    cached = _PROBES.get(id(exercise))
    if cached is None or cached[0] is not exercise:
        cached = _PROBES[id(exercise)] = (exercise, _hidden_probes_of(exercise))
    return [dataclasses.replace(c) for c in cached[1]]


def _run_in_process(obj, case: Case, kind: str) -> Result:
    """Run a case in this process through the same encode/decode path as the sandbox."""
    arrays: dict = {}
    spec = case.to_spec(kind, arrays)
    with PROCESS_STATE, warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
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


# --------------------------------------------------------------------------- running checks


@dataclass
class PartResult:
    """The verdict on one graded part of an exercise.

    Attributes:
        name: the part's name, as the prompt prints it.
        points: what the part is worth (scaled to the test cell's points).
        earned: whether every case of the part passed.
        cases: how many cases the part has; ``failed`` how many of them failed.
        message: the first failing case's diagnosis (``None`` when earned).
        hint: the check's own hint in ``message`` (``None``: no mistake recognised).
    """

    name: str
    points: float
    earned: bool
    cases: int = 0
    failed: int = 0
    message: str | None = None
    hint: str | None = None

    @property
    def score(self) -> float:
        return self.points if self.earned else 0.0


@dataclass
class Report:
    """What a check found: the parts, their points, the notes and the advice.

    ``score`` is the sum of the earned parts' points; ``passed`` means every part
    was earned. ``notes`` are remarks about correct answers (a wider float dtype,
    an earlier exercise replaced by its reference); ``advice`` the diagnoses of
    cases worth no points (an error the contract does not grade).
    """

    exercise: str
    parts: list[PartResult]
    notes: list[str] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)
    #: Earlier exercises whose references the grade will put in place of the failing
    #: answers this one calls (the student package cannot): the missed parts are then
    #: not decided here, and :meth:`score_label` names them and the grade's range.
    regraded_when_graded: list[str] = field(default_factory=list)

    def undecided_parts(self) -> list[PartResult]:
        """The parts this check cannot decide: the missed ones, when the grade runs the
        answer again with references in place of the failing answers it calls
        (:attr:`regraded_when_graded`); otherwise none, and the score is the grade's."""
        if not self.regraded_when_graded:
            return []
        return [p for p in self.parts if not p.earned]

    def score_label(self) -> str:
        """``"2/4 points"``, the grade's points; or, where some parts cannot be decided
        here (:meth:`undecided_parts`), which parts, why, and the grade's range:
        ``"2/4 points; not decided here: 'values' (2): ..., graded 2/4 if they still
        fail, up to 4/4"``. Never a lower number alone."""
        text = f"{_num(self.score)}/{_num(self.max_score)} points"
        undecided = self.undecided_parts()
        if undecided:
            which = ", ".join(f"`{d}`" for d in self.regraded_when_graded)
            parts = ", ".join(f"{p.name!r} ({_num(p.points)})" for p in undecided)
            best = self.score + sum(p.points for p in undecided)
            text += (f"; not decided here: {parts}. Your answer calls your {which}, which fails its check; the "
                     f"grade runs it again with the reference {which} in place of yours, which this package does "
                     f"not hold, and keeps the better: {_num(self.score)}/{_num(self.max_score)} if these parts "
                     f"still fail, up to {_num(best)}/{_num(self.max_score)} if they pass then")
        return text

    @property
    def score(self) -> float:
        if self.passed:
            return self.max_score  # exactly, whatever the scaled parts sum to in floats
        return round(float(sum(p.score for p in self.parts)), 9)

    @property
    def max_score(self) -> float:
        return round(float(sum(p.points for p in self.parts)), 9)

    @property
    def passed(self) -> bool:
        return all(p.earned for p in self.parts)

    def parts_line(self) -> str:
        """One line: ``values 2/2 · any axis 0/1 · ...`` (for tables and CSV)."""
        return " · ".join(f"{p.name} {_num(p.score)}/{_num(p.points)}" for p in self.parts)

    def reason(self) -> str:
        """The diagnosis of every missed part (each distinct message once)."""
        missed = [p for p in self.parts if not p.earned]
        messages = list(dict.fromkeys(p.message or "failed" for p in missed))
        if len(messages) == 1 and len(missed) == len(self.parts):
            return messages[0]
        if len(messages) == 1 and len(missed) > 1:
            return f"{', '.join(repr(p.name) for p in missed)}: {messages[0]}"
        return " | ".join(f"{p.name!r}: {p.message or 'failed'}" for p in missed)

    def render(self, name: str) -> str:
        """The visible check's text: a verdict line, then one line per part."""
        head = "✓" if self.passed else "✗"
        lines = [f"{head} {name}: {self.score_label()}"]
        lines += [f"  note: {n}" for n in self.notes]
        missed = [p for p in self.parts if not p.earned]
        shared = len({p.message for p in missed}) == 1 and len(missed) > 1
        for i, p in enumerate(self.parts):
            mark = "✓" if p.earned else "✗"
            lines.append(f"  {mark} {p.name} ({_num(p.score)}/{_num(p.points)})")
            if not p.earned and not (shared and p is not missed[-1]):
                lines.extend("      " + line for line in str(p.message or "failed").splitlines())
        for a in self.advice:
            first, *rest = str(a).splitlines()
            lines.append(f"  advice (no points): {first}")
            lines.extend("      " + line.strip() for line in rest)
        return "\n".join(lines)


def _num(x: float) -> str:
    x = round(float(x), 4)
    return str(int(x)) if x == int(x) else f"{x:g}"


def evaluate(exercise: Exercise, results: list[Result], cases: list[Case],
             points: float | None = None, hidden: bool = False, wants=None) -> Report:
    """Judge every case (no stop at the first failure) and score the parts.

    Args:
        exercise: the exercise whose cases these are.
        results: one decoded result per case, in order.
        cases: the cases.
        points: the test cell's points; the parts' points are scaled to sum to it
            (default: the parts' own points).
        hidden: the cases are a hidden set (or ran beside one): judge under
            :func:`redacting`, so that no message quotes a value from the inputs.
        wants: the reference's result of each case, by index (``wants[i]``), where the
            caller keeps them (the grader computes them once per exercise and seed);
            default: :meth:`Exercise.expected` of each case.

    Returns:
        The :class:`Report`. A part is earned when all its cases pass; a part with
        no case in ``cases`` is not earned (every part has visible cases).
    """
    shown_cases = cases
    if hidden:  # the messages quote a label only when it is fixed text
        public = public_labels(exercise)
        shown_cases = [case if case.label in public else
                       dataclasses.replace(case, label=f"hidden case {i + 1} of {len(cases)}, its inputs not shown")
                       for i, case in enumerate(cases)]
    token = _REDACT.set(bool(hidden))
    try:
        return _evaluate(exercise, results, cases, shown_cases, points, wants)
    finally:
        _REDACT.reset(token)


# Seeds of the draws that tell a case label's fixed text from one made of drawn values.
_LABEL_DRAWS = (1, 2)


def _labels_of(exercise: Exercise) -> frozenset[str]:
    visible = {c.label for c in draw_cases(exercise, make_rng(False), False)}
    draws = [{c.label for c in draw_cases(exercise, np.random.default_rng(seed), True)} for seed in _LABEL_DRAWS]
    return frozenset(visible | set.intersection(*draws))


@functools.lru_cache(maxsize=None)
def _registered_labels(name: str) -> frozenset[str]:
    return _labels_of(REGISTRY[name])


def public_labels(exercise: Exercise) -> frozenset[str]:
    """The case labels of ``exercise`` that a hidden case's message may quote: those
    of the visible check (the student reads them in their own check) and those
    that are the same in independent draws of the hidden set (fixed text such as
    "'aaaa': pairs overlap"). A label made of drawn values ("random corpus [...]")
    is neither."""
    if REGISTRY.get(exercise.name) is exercise:
        return _registered_labels(exercise.name)
    return _labels_of(exercise)  # an unregistered exercise (a test's own): not cached


def _evaluate(exercise: Exercise, results: list[Result], cases: list[Case], shown_cases: list[Case],
              points: float | None, wants=None) -> Report:
    declared = exercise.part_points()
    total = sum(declared.values())
    scale = 1.0 if points is None or total == 0 else float(points) / total
    if len(results) != len(cases):
        message = f"expected results for {len(cases)} cases, got {len(results)}"
        return Report(exercise.name, [PartResult(n, p * scale, False, message=message) for n, p in declared.items()])
    counts = {n: [0, 0, None, None] for n in declared}  # part -> [cases, failed, first message, its hint]
    notes: list[str] = []
    advice: list[str] = []
    for i, (case, shown, got) in enumerate(zip(cases, shown_cases, results)):
        part = exercise.part_of(case)
        want = exercise.expected(case) if wants is None else wants[i]
        try:
            for note in exercise.judge(shown, got, want) or []:
                if note not in notes:
                    notes.append(note)
            ok, message, hint = True, None, None
        except CheckFailure as exc:
            ok, message, hint = False, str(exc), getattr(exc, "hint", "") or None
        if part == ADVICE:
            if not ok and message != NOT_IMPLEMENTED:
                text = _as_advice(message)
                if text not in advice:
                    advice.append(text)
            continue
        entry = counts[part]
        entry[0] += 1
        if not ok:
            entry[1] += 1
            if entry[2] is None:
                entry[2], entry[3] = message, hint
    parts = []
    for name, p in declared.items():
        n, failed, message, hint = counts[name]
        if n == 0:
            parts.append(PartResult(name, p * scale, False, 0, 0, "no case of this part was run"))
        else:
            parts.append(PartResult(name, p * scale, failed == 0, n, failed, message, hint))
    if all(p.message == NOT_IMPLEMENTED for p in parts if not p.earned) and not any(p.earned for p in parts):
        advice = []
    return Report(exercise.name, parts, notes, advice)


def _as_advice(message: str) -> str:
    """A failed expectation about bad input, reworded as advice: "should raise
    ValueError (x), but returned normally" -> "the reference raises ValueError (x);
    yours returned normally"."""
    if message.startswith("should raise "):
        head, sep, tail = message[len("should raise "):].partition(", but ")
        if sep:
            return f"the reference raises {head}; yours {tail}"
    return message


def make_rng(hidden: bool, seed: int | None = None) -> np.random.Generator:
    """Visible checks use a fixed seed (reproducible feedback); hidden checks a fresh one."""
    if seed is not None:
        return np.random.default_rng(seed)
    return np.random.default_rng(None if hidden else 20171206)


def run_cases(exercise: Exercise, obj: Any, cases: list[Case], points: float | None = None,
              hidden: bool = False) -> Report:
    """Run ``cases`` on ``obj`` in this process and judge them (the visible path;
    ``hidden``: a hidden set, judged under :func:`redacting`)."""
    results = [_run_in_process(obj, case, exercise.kind) for case in cases]
    return evaluate(exercise, results, cases, points, hidden)


class Points(float):
    """The points a check earned. ``repr`` is the bare number, which is what
    nbgrader reads from a test cell's ``execute_result`` as a partial grade;
    notebooks show the richer HTML form."""

    def __new__(cls, score: float, max_score: float):
        obj = super().__new__(cls, score)
        obj.max_score = float(max_score)
        return obj

    def __repr__(self) -> str:
        return repr(float(self))

    def _repr_html_(self) -> str:
        return f"<b>{_num(self)} / {_num(self.max_score)} points</b>"


# -- precomputed visible checks (the student package) -------------------------


class Precomputed:
    """What the student package ships instead of reference code: for each exercise
    of the released chapters, its visible cases and their expected results as data.

    Subclasses implement :meth:`has`, :meth:`cases` and :meth:`expected`
    (:class:`autograder.student.expected.ExpectedStore` reads them from files).
    """

    def has(self, name: str) -> bool:
        """Whether exercise ``name``'s visible cases are stored."""
        raise NotImplementedError

    def cases(self, name: str) -> list[Case]:
        """The stored visible cases of exercise ``name``, in order."""
        raise NotImplementedError

    def expected(self, name: str, case: Case) -> Result:
        """The stored reference result of ``case``; ``ValueError`` for a case that
        was not stored (the visible set is fixed when the chapter is released)."""
        raise NotImplementedError


_PRECOMPUTED: list[Precomputed] = []


def use_precomputed(store: Precomputed | None) -> None:
    """Make the visible checks read cases and expected results from ``store``
    (``None``: compute them with ``solutions`` again, the default)."""
    _PRECOMPUTED[:] = [store] if store is not None else []


def precomputed() -> Precomputed | None:
    """The store installed by :func:`use_precomputed`, or ``None``."""
    return _PRECOMPUTED[0] if _PRECOMPUTED else None


def visible_cases(exercise: Exercise, hidden: bool = False, seed: int | None = None) -> list[Case]:
    """The cases of a check: the stored visible ones in the student package,
    else ``exercise.cases`` on :func:`make_rng`'s generator.

    Raises:
        ValueError: for hidden checks or another seed in the student package,
            which holds only the visible cases' expected results.
    """
    store = precomputed()
    if store is not None and store.has(exercise.name):
        if hidden or seed is not None:
            raise ValueError(f"{exercise.name}: the student package runs only the visible check "
                             "(no hidden=True, no seed): the hidden checks run when your work is graded")
        return store.cases(exercise.name)
    return draw_cases(exercise, make_rng(hidden, seed), hidden)


# -- one mistake charged once ------------------------------------------------


def _namespace_of(obj: Any) -> dict | None:
    """The global namespace in which ``obj``'s code looks up names (the notebook's)."""
    func = obj
    if isinstance(obj, type):
        func = next((v for v in vars(obj).values() if hasattr(v, "__globals__")), None)
    globals_ = getattr(func, "__globals__", None)
    return globals_ if isinstance(globals_, dict) else None


def names_used(obj: Any) -> set[str]:
    """Global names the code of ``obj`` (a function, or a class's methods) refers to,
    and the names it reads from an enclosing scope (an answer defined inside a function)."""
    codes = []
    if isinstance(obj, type):
        for value in vars(obj).values():
            value = getattr(value, "__func__", value)
            if hasattr(value, "__code__"):
                codes.append(value.__code__)
            elif isinstance(value, property):
                codes += [f.__code__ for f in (value.fget, value.fset) if f is not None]
    elif hasattr(obj, "__code__"):
        codes.append(obj.__code__)
    names: set[str] = set()
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        names.update(code.co_freevars)
        codes.extend(c for c in code.co_consts if hasattr(c, "co_names"))
    return names


def dependency_note(name: str, used: list[str], failing: list[str], regraded: bool = True) -> str:
    """The note of an exercise graded with earlier references in place (``regraded``),
    or, in the student package, of one that could not be (no reference there).

    Args:
        name: the exercise graded.
        used: the global names its code refers to (:func:`names_used`).
        failing: the earlier exercises whose answers fall short.
        regraded: the grade with the references in place was better, which shows
            that the answer called one of ``failing`` (the note names those in
            ``used``, or all of ``failing`` when it reached them another way).
            Without a regrade only ``failing`` exercises in ``used`` are named;
            callers add no note when there is none (:func:`called_dependencies`).
    """
    called = [d for d in failing if d in used] or (failing if regraded else [])
    if not called:
        raise ValueError(f"`{name}` refers to none of {failing}: no dependency note without a regrade")
    which = ", ".join(f"`{d}`" for d in called)
    verb = "fails its check" if len(called) == 1 else "fail their checks"
    if not regraded:
        return (f"your `{name}` calls your {which}, which {verb}: fix {which} first (when your work "
                f"is graded, `{name}` is also graded with the reference {which} in its place)")
    return (f"your `{name}` calls your {which}, which {verb}; it was graded with the reference "
            f"{which} in its place: fix {which} first")


def dependency_unchanged_note(name: str, used: list[str], failing: list[str]) -> str | None:
    """The note of an exercise graded again with the references of ``failing`` in place
    of the answers it calls, which scored no more: the points it lost are its own. The
    prompts promise a note whenever that regrade runs; ``None`` when the answer's code
    calls none of ``failing`` (the regrade then says nothing about it)."""
    called = [d for d in failing if d in used]
    if not called:
        return None
    which = ", ".join(f"`{d}`" for d in called)
    verb = "fails its check" if len(called) == 1 else "fail their checks"
    return (f"your `{name}` calls your {which}, which {verb}; graded again with the reference {which} in its "
            "place it scored no more, so the points it lost are its own")


def charged_once(first, second, note: str, unchanged: str | None = None):
    """The grade an answer keeps after it was graded again with the reference in place of
    each failing earlier answer it calls: one mistake charged once.

    The rule of both graders, the notebook's :func:`check_report` (on :class:`Report`) and
    the sandbox's regrade (:mod:`autograder.grading`, on its cell scores): ``second``
    wins when it scored more (the points were lost only through the earlier answers),
    with ``note`` (:func:`dependency_note`) first among its notes; else ``first`` stays.
    A ``second`` whose ``status`` is ``"cheat"`` (tampering caught in the regrade) wins
    whatever it scored: no earlier grade outweighs it.

    Args:
        first: the grade of the answer as written (``.score``, ``.notes``).
        second: the grade with the references in place, or ``None`` (not run).
        note: the note that says which answers were replaced.
        unchanged: the note ``first`` gets when ``second`` scored no more
            (:func:`dependency_unchanged_note`), or ``None`` for none.

    Returns:
        ``first`` or ``second`` (with the note).
    """
    if second is None:
        return first
    if getattr(second, "status", None) == "cheat":
        return second
    if second.score <= first.score:
        if unchanged and unchanged not in first.notes:
            first.notes.append(unchanged)
        return first
    second.notes.insert(0, note)
    return second


def called_dependencies(obj: Any, failing: list[str]) -> list[str]:
    """The exercises of ``failing`` that the code of ``obj`` refers to: an answer
    that never calls an earlier one (a blank answer, one written without it) is
    never told to fix that one first."""
    used = names_used(obj)
    return [d for d in failing if d in used]


def _innermost_function(traceback_text: str, names: set[str]) -> str | None:
    """The innermost frame of a traceback whose function is one of ``names``."""
    frames = re.findall(r'File "[^"\n]*", line \d+, in ([^\s]+)', traceback_text or "")
    return next((f for f in reversed(frames) if f in names), None)


def own_failures(exercise: Exercise, obj: Any, cases: list[Case], results: list[Result],
                 dependencies: list[str]) -> bool:
    """Whether every graded case ``obj`` fails raised in the answer's own code, not in
    one of ``dependencies``: then the failing earlier answers do not explain this
    failure (a typo in ``MultiHeadAttention.forward`` is not "fix ``split_heads``
    first"), and no dependency note is made.

    A case that failed with wrong values (not an exception) could come from a
    dependency, and so does an exception whose innermost frame among the answer's
    functions and the dependencies is a dependency's (or a function of the answer
    called like one), and an exception other than a slip of the answer's own code
    (:data:`_SLIPS`): a shape error in ``self.w_o(merge_heads(...))`` comes from what
    a wrong ``merge_heads`` returned."""
    own = {getattr(obj, "__name__", "")}
    if isinstance(obj, type):
        own |= {n for n, v in vars(obj).items() if hasattr(getattr(v, "__func__", v), "__code__")}
    own -= set(dependencies) | {""}
    known = own | set(dependencies)
    failed = 0
    for case, got in zip(cases, results):
        if exercise.part_of(case) == ADVICE:
            continue
        try:
            exercise.judge(case, got, exercise.expected(case))
            continue
        except CheckFailure:
            failed += 1
        raised = got.raised or {}
        if not raised or raised.get("type") == "NotImplementedError":
            return False
        if _innermost_function(str(raised.get("traceback") or ""), known) not in own:
            return False
        if raised.get("type") not in _SLIPS:
            return False
    return failed > 0


#: The exceptions an answer's own code raises whatever its dependencies return: a
#: misspelt name or attribute (``np.linalg.nrom``, ``self.dropuot``, ``k.tranpose``).
_SLIPS = frozenset({"NameError", "UnboundLocalError", "AttributeError"})


def _visible_failures(exercise: Exercise, namespace: dict) -> list[str]:
    """The exercises of ``exercise.uses`` whose answers in ``namespace`` fail their
    own visible check (or are unfinished)."""
    # the references when a case runs (trusted side only; they import torch)
    import solutions

    failing = []
    for dep in exercise.uses:
        answer = namespace.get(dep)
        if answer is None or answer is getattr(solutions, dep, None):
            continue
        dep_ex = get_exercise(dep)
        report = run_cases(dep_ex, answer, visible_cases(dep_ex))
        if not report.passed:
            failing.append(dep)
    return failing


def check_report(name: str, obj: Any, hidden: bool = False, seed: int | None = None) -> Report:
    """The :class:`Report` of the visible (or, with ``hidden``, the full) check of
    ``obj``, without printing or raising: what :func:`check` shows.

    When the answer calls an earlier exercise of the chapter (``uses``) whose
    answer fails its own visible check, the answer is checked again with the
    reference in its place and keeps the better report, with a note saying so.
    """
    exercise = get_exercise(name)
    cases = visible_cases(exercise, hidden, seed)
    results = [_run_in_process(obj, case, exercise.kind) for case in cases]
    report = evaluate(exercise, results, cases)
    namespace = _namespace_of(obj)
    if not report.passed and exercise.uses and namespace is not None:
        failing = _visible_failures(exercise, namespace)
        if failing and precomputed() is not None:
            # The student package has no reference of this chapter's exercises to put
            # in place of the failing one: say which to fix first, when the answer's
            # code calls it (a blank answer calls nothing) and its failures may come
            # from it (not a slip in its own code); the grader regrades.
            called = called_dependencies(obj, failing)
            if called and not own_failures(exercise, obj, cases, results, called):
                report.notes.insert(0, dependency_note(name, sorted(names_used(obj)), called, regraded=False))
                report.regraded_when_graded = list(called)
        elif failing:
            # the references when a case runs (trusted side only; they import torch)
            import solutions

            saved = {d: namespace[d] for d in failing}
            try:
                namespace.update({d: getattr(solutions, d) for d in failing})
                second = run_cases(exercise, obj, cases)
            finally:
                namespace.update(saved)
            used = sorted(names_used(obj))
            report = charged_once(report, second, dependency_note(name, used, failing),
                                  dependency_unchanged_note(name, used, failing))
    return report


# The last report of each exercise's check in this process (a notebook's kernel): the
# student edition's demonstrations read it (autograder.student.unfinished).
_VERDICTS: dict[str, Report] = {}


def last_verdict(name: str) -> Report | None:
    """The report of the last :func:`check` of exercise ``name`` in this process, or
    ``None`` when it has not been checked here."""
    return _VERDICTS.get(name)


def check(name: str, obj: Any, hidden: bool = False, seed: int | None = None) -> "Points":
    """Check ``obj`` against exercise ``name``; print which parts pass.

    This is the one line in every test cell: ``check("softmax", softmax)``. It
    prints to standard output only. On full marks it returns ``None``; on partial
    credit the points earned, which nbgrader reads from the test cell's result as
    its partial grade (so a test cell's ``points`` must equal the sum of the
    exercise's parts, as a test ensures for the book's notebooks). It raises
    :class:`CheckFailure` — whose message explains every missed part — only when
    no point was earned.
    An answer that calls a failing earlier answer is also checked with the
    reference in its place (:func:`check_report`).

    Args:
        name: the contract name of the exercise.
        obj: your function or class.
        hidden: run the full randomised set (the instructors' hidden checks).
        seed: fix the random inputs (default: fixed for visible, fresh for hidden).

    Returns:
        ``None`` on full marks, else the points earned, as :class:`Points`.
    """
    get_exercise(name)
    if obj is None:
        raise CheckFailure(f"✗ {name}: nothing to check — define {name} in the cell above first")
    report = check_report(name, obj, hidden, seed)
    _VERDICTS[name] = report
    text = report.render(name)
    if report.score == 0 and report.max_score > 0:
        raise CheckFailure(text)
    print(text)
    if report.passed:
        return None  # no output: nbgrader gives the cell its full points, whatever they are
    return Points(report.score, report.max_score)
