"""An exercise: its contract, its reference, its judge; the registry of every exercise.

An :class:`Exercise` describes one contract exercise (``shared/EXERCISES.md``): its
cases, the reference's result on each (:meth:`Exercise.expected`, in the trusted
process only, or from the student package's store), and :meth:`Exercise.judge`. What an
answer's raised errors say (its own slip, a state it could not load) is read here too.
"""
from __future__ import annotations

import builtins
import contextlib
import dataclasses
import io
import re
import threading
import warnings
from typing import Callable, ClassVar

import numpy as np

from .. import runner
from .cases import ADVICE, Case, CheckFailure, Result
from .compare import compare, redacting
from .precomputed import precomputed

__all__ = ["REGISTRY", "register", "get_exercise", "Exercise", "NOT_IMPLEMENTED", "PROCESS_STATE", "run_in_process",
           "own_code_message", "accept_own_state", "load_state_hint"]


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
        package, read it from the precomputed data instead (:func:`~autograder.checks.precomputed.use_precomputed`)."""
        store = precomputed()
        if store is not None and store.has(self.name):
            return store.expected(self.name, case)
        return run_in_process(self.reference(), case, self.kind)

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
            # phase "encode": the grader's own words on a value that cannot cross (tamper._withhold)
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


def run_in_process(obj, case: Case, kind: str) -> Result:
    """Run a case in this process through the same encode/decode path as the sandbox."""
    arrays: dict = {}
    spec = case.to_spec(kind, arrays)
    with PROCESS_STATE, warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        raw = runner.run_case(obj, spec, arrays)
    out_arrays = raw.pop("__arrays__")
    return Result.from_encoded(raw, out_arrays)
