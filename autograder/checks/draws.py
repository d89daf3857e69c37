"""Drawing an exercise's cases: the seeded generator, the visible and hidden sets.

The hidden set adds fresh draws to the visible cases, never a rule of its own: the
visible set holds every probe of the hidden one (:func:`hidden_probes`), and a case's
label is shown in a hidden set's messages only when it is fixed text
(:func:`public_labels`).
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from .cases import Case
from .exercise import PROCESS_STATE, REGISTRY, Exercise
from .precomputed import precomputed

__all__ = ["make_rng", "draw_cases", "hidden_probes", "public_labels", "visible_cases"]


def make_rng(hidden: bool, seed: int | None = None) -> np.random.Generator:
    """Visible checks use a fixed seed (reproducible feedback); hidden checks a fresh one."""
    if seed is not None:
        return np.random.default_rng(seed)
    return np.random.default_rng(None if hidden else 20171206)


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
