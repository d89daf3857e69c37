"""What a Python file imports, read from its code: the one walker of the layout tests.

``tests/unit/test_package_layout.py`` (the reference's reading order) and
``tests/autograder/test_import_direction.py`` (the autograder's floors) both ask which
modules a file imports, relative or absolute, anywhere in its code (a function-level
import counts: it is still an arrow between two modules). The walker is the grader's own
(:func:`autograder.fingerprint.imported_names`, which also finds the code that judges),
so the layout tests and the grader's fingerprint read imports the same way.
"""
from __future__ import annotations

from autograder.fingerprint import imported_names

__all__ = ["imported_names"]
