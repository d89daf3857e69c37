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
import importlib
import inspect
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autograder.checks import exercises_of
from autograder.checks.base import draw_cases, make_rng, run_cases
from autograder.student.package import SHIPPED, package_files

# Seconds one object may spend on one exercise's hidden cases (a training loop given
# random arguments is stopped, not waited for): a guard, not a measurement.
GUARD_SECONDS = 5
# The grading framework a wheel ships unchanged from this repository (the repository's own
# checks run on it; it computes no exercise) and the figure helpers (they draw): not tried.
FRAMEWORK = tuple(f"autograder.{rel[:-3].replace('/', '.')}." for rel in SHIPPED) + ("solutions.figures.",)
FRAMEWORK_NAMES = {"autograder.check", "autograder.require_chapter"}  # the package's own entry points


@dataclass(frozen=True)
class Earned:
    """An object of a wheel that earned a part a blank answer does not."""

    chapter: str  # the wheel's
    source: str  # module.qualname in the wheel
    exercise: str
    parts: tuple[str, ...]


def load_wheel(chapter: str, book: Path, root: Path) -> list[tuple[str, object]]:
    """Import the student package of ``chapter`` under ``wheel_<chapter>`` in ``root``;
    return ``(module.name, object)`` for every function and class its modules define."""
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
    pass


def _alarm(signum, frame):
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


def earned_parts(exercise, obj, cases) -> set[str]:
    """The parts ``obj`` earns on ``cases`` (nothing when it runs past the guard)."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(GUARD_SECONDS)
    try:
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
            report = run_cases(exercise, obj, cases, hidden=True)
    except _Guard:
        return set()
    except Exception:  # noqa: BLE001 - an object that breaks the check earns nothing
        return set()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return {p.name for p in report.parts if p.earned}


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


def audit(chapters: list[str], book: Path, root: Path, seed: int = 36, report=None) -> list[Earned]:
    """Every part that an object of a chapter's wheel earns on the hidden checks of that
    chapter or a later one, beyond what a blank answer earns (``report``: called with
    each as it is found)."""
    exercises = {c: list(exercises_of(c)) for c in chapters}
    cases = {e.name: draw_cases(e, make_rng(True, seed), True) for c in chapters for e in exercises[c]}
    blank = {e.name: trivial_parts(e, cases[e.name]) for c in chapters for e in exercises[c]}
    found = []
    for i, chapter in enumerate(chapters):
        objects = load_wheel(chapter, book, root)
        for exercise in [e for c in chapters[i:] for e in exercises[c]]:
            for source, obj in objects:
                if not _fits(obj, exercise):
                    continue
                extra = earned_parts(exercise, obj, cases[exercise.name]) - blank[exercise.name]
                if extra:
                    found.append(Earned(chapter, source, exercise.name, tuple(sorted(extra))))
                    if report is not None:
                        report(found[-1])
    return found
