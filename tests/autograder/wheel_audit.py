"""Does any code a student wheel ships earn a point? The behavioural audit of issue 36.

Every function and class that a chapter's student package defines (its ``solutions``
modules, stand-ins and check modules, as the wheel holds them) is put in the place of
every exercise of that chapter and of every later one, as a student would with a
one-line wrapper (``def softmax(*a, **k): return _softmax(*a, **k)``: the object
itself, called with the exercise's arguments), and graded with the hidden checks. A
wheel holds no answer when no such object earns a part that a cell computing nothing
does not (the blank cell, or one raising ``ValueError``, which earns a named-error part).
The grading framework the wheel ships unchanged (``autograder.checks.base``, the runner)
and the figure helpers are not tried.

The wheel's files are imported under a package of their own (``wheel_<chapter>``:
``autograder`` and ``solutions`` beneath it, relative imports intact), never as the
repository's; the hidden cases come from the repository's checks.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import os
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autograder.book import chapter_ids
from autograder.checks import exercises_of
from autograder.checks.base import ADVICE, draw_cases, get_exercise, make_rng, public_labels, run_cases
from autograder.wire import Tensor
from autograder.student.package import package_files
from autograder.student.shipped import check_modules, shipped_modules

# Seconds one object may spend on one exercise's hidden cases (a training loop given
# random arguments is stopped, not waited for): a guard, not a measurement.
GUARD_SECONDS = 5
# The grading framework a wheel ships unchanged from this repository (the repository's own
# checks run on it; it computes no exercise) and the figure helpers (they draw): not tried.
FRAMEWORK = tuple(f"autograder.{rel[:-3].replace('/', '.')}."
                  for rel in shipped_modules(check_modules(chapter_ids()))) + ("solutions.figures.",)
FRAMEWORK_NAMES = {"autograder.check", "autograder.require_chapter"}  # the package's own entry points


@dataclass(frozen=True)
class Earned:
    """An object of a wheel that earned a part a blank answer does not."""

    chapter: str  # the wheel's
    source: str  # module.qualname in the wheel
    exercise: str
    parts: tuple[str, ...]


def load_wheel(chapter: str, book: Path, root: Path, files: dict[str, bytes] | None = None) -> list[tuple[str, object]]:
    """Import the student package of ``chapter`` (``files``, as :func:`package_files`
    builds them, or built here) under ``wheel_<chapter>`` in ``root``; return
    ``(module.name, object)`` for every function and class its modules define."""
    if files is None:
        files, _ = package_files([chapter], book)
    package = "wheel_" + chapter.replace("-", "_")
    base = root / package
    for name, data in files.items():
        path = base / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (base / "__init__.py").write_text("")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    found = []
    for path in sorted(base.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] in ("__main__", "cli"):
            continue
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        try:
            with contextlib.redirect_stdout(None):
                module = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module that does not import outside a notebook holds nothing usable
            continue
        for attr, obj in vars(module).items():
            source = f"{name[len(package) + 1:]}.{attr}"
            if (inspect.isfunction(obj) or inspect.isclass(obj)) and getattr(obj, "__module__", "") == name \
                    and not source.startswith(FRAMEWORK) and source not in FRAMEWORK_NAMES:
                found.append((source, obj))
    return found


class _Guard(Exception):
    """Raised into the running case when the guard's time is up (the runner records it as
    the case's error, so the case fails); :data:`_GUARD` then stops the object's other cases."""


_GUARD = {"fired": False}


def _alarm(signum, frame):
    _GUARD["fired"] = True
    raise _Guard()


def _fits(obj, exercise) -> bool:
    """Whether ``obj`` can stand where ``exercise``'s answer stands (a class for a
    class, a function taking the reference's required arguments for a function)."""
    import solutions

    reference = getattr(solutions, exercise.name)
    if inspect.isclass(reference) != inspect.isclass(obj):
        return False
    try:
        wanted = [p for p in inspect.signature(reference).parameters.values()
                  if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        inspect.signature(obj).bind(*[None] * len(wanted))
    except (TypeError, ValueError):
        return False
    return True


def _size(value) -> int:
    """How many numbers ``value`` (a case argument) holds: what running it costs, roughly."""
    if isinstance(value, Tensor):
        return int(value.value.size)
    if isinstance(value, np.ndarray):
        return int(value.size)
    if isinstance(value, (list, tuple)):
        return sum(_size(v) for v in value) + len(value)
    if isinstance(value, dict):
        return sum(_size(v) for v in value.values()) + len(value)
    return 1


def cost(case) -> int:
    """A case's rough cost: the numbers in its arguments, its constructor's and its state."""
    return _size(case.args) + _size(case.kwargs or {}) + _size(case.init or {}) + _size(case.state or {})


def part_cases(exercise, cases) -> dict[str, list]:
    """``cases`` grouped by the part each counts for, the cheapest first in each part;
    advice cases (they earn nothing) are left out."""
    grouped: dict[str, list] = {}
    for case in cases:
        part = exercise.part_of(case)
        if part != ADVICE:
            grouped.setdefault(part, []).append(case)
    return {part: sorted(group, key=cost) for part, group in grouped.items()}


def earned_parts(exercise, obj, cases, skip: frozenset[str] | set[str] = frozenset()) -> set[str]:
    """The parts ``obj`` earns on ``cases``, but those in ``skip`` (not tried).

    A part is earned when every one of its cases passes (:func:`autograder.checks.base.evaluate`),
    so each part's cases run one at a time, the cheapest first, and the part is given up at
    its first failing case: the verdict is the one all the cases together give. The parts
    whose cases all passed before ``obj`` ran past the guard count as earned."""
    earned: set[str] = set()
    _GUARD["fired"] = False
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(GUARD_SECONDS)
    try:
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
            for part, group in part_cases(exercise, cases).items():
                if part in skip:
                    continue
                for case in group:
                    try:
                        report = run_cases(exercise, obj, [case], hidden=True)
                    except _Guard:
                        raise
                    except Exception:  # noqa: BLE001 - an object that breaks the check earns nothing
                        break
                    if _GUARD["fired"] or part not in {p.name for p in report.parts if p.earned}:
                        break
                else:
                    earned.add(part)
                if _GUARD["fired"]:
                    break
    except _Guard:
        pass
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return earned


def _blank(exercise, error: type = NotImplementedError):
    """The cell a student starts from (``raise NotImplementedError``), or with ``error``
    one that raises that for every input."""
    import solutions

    if inspect.isclass(getattr(solutions, exercise.name)):
        import torch

        class Blank(torch.nn.Module):
            def __init__(self, *args, **kwargs):
                super().__init__()
                raise error("blank")

        return Blank

    def blank(*args, **kwargs):
        raise error("blank")

    return blank


def trivial_parts(exercise, cases) -> set[str]:
    """What a cell that computes nothing earns: the blank one, and one that raises
    ``ValueError`` for every input (it earns a part about a named error, no more)."""
    return earned_parts(exercise, _blank(exercise), cases) | earned_parts(exercise, _blank(exercise, ValueError), cases)


@functools.lru_cache(maxsize=None)
def hidden_cases(name: str, seed: int = 36) -> tuple:
    """The hidden cases of the registered exercise ``name`` drawn with ``seed`` (drawn once).

    The labels a hidden report may quote (:func:`public_labels`, three more draws, cached
    by the checks) are drawn here too, outside any object's guard: drawn inside it, a
    slow draw (chapter 10's models) would run into the guard, stay uncached, and stop every
    object in turn."""
    exercise = get_exercise(name)
    public_labels(exercise)
    return tuple(draw_cases(exercise, make_rng(True, seed), True))


def audit(chapters: list[str], book: Path, root: Path, seed: int = 36, report=None,
          wheels: Mapping[str, list[tuple[str, object]]] | None = None) -> list[Earned]:
    """Every part that an object of a chapter's wheel earns on the hidden checks of that
    chapter or a later one, beyond what a blank answer earns (``report``: called with
    each as it is found; ``wheels``: the chapters' objects as :func:`load_wheel` returns
    them, where already loaded). The parts a blank answer earns are not tried."""
    exercises = {c: list(exercises_of(c)) for c in chapters}
    cases = {e.name: list(hidden_cases(e.name, seed)) for c in chapters for e in exercises[c]}
    blank = {e.name: trivial_parts(e, cases[e.name]) for c in chapters for e in exercises[c]}
    found = []
    for i, chapter in enumerate(chapters):
        objects = wheels[chapter] if wheels is not None else load_wheel(chapter, book, root)
        for exercise in [e for c in chapters[i:] for e in exercises[c]]:
            for source, obj in objects:
                if not _fits(obj, exercise):
                    continue
                extra = earned_parts(exercise, obj, cases[exercise.name], skip=blank[exercise.name])
                if extra:
                    found.append(Earned(chapter, source, exercise.name, tuple(sorted(extra))))
                    if report is not None:
                        report(found[-1])
    return found
