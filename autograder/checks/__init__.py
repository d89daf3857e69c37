"""One module of checks per chapter (``chNN_<topic>.py``), registered by exercise name.

``load_all()`` imports every chapter module so that :data:`REGISTRY` is complete.
"""
from __future__ import annotations

import importlib
import pkgutil

from .base import REGISTRY, Case, CheckFailure, Exercise, Obj, Result, Tensor, check, get_exercise, register

__all__ = [
    "REGISTRY",
    "Case",
    "CheckFailure",
    "Exercise",
    "Obj",
    "Result",
    "Tensor",
    "check",
    "get_exercise",
    "register",
    "load_all",
    "exercises_of",
]

_loaded = False


def load_all() -> dict:
    """Import every ``autograder.checks.chNN_*`` module once; return the registry."""
    global _loaded
    if not _loaded:
        for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
            if info.name.startswith("ch"):
                importlib.import_module(f"{__name__}.{info.name}")
        _loaded = True
    return REGISTRY


def exercises_of(chapter: str) -> list:
    """The registered exercises of one chapter id, in registration order."""
    return [ex for ex in load_all().values() if ex.chapter == chapter]
