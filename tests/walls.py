"""The one way a test says that a wall it checks cannot start here.

``cannot_start("bubblewrap", why)`` skips the test on a machine without that wall;
under ``CI=true`` ``tests/conftest.py`` turns the same skip into a failure naming the
wall, so a CI runner that lost bubblewrap, its cgroup, Landlock or Chromium cannot
pass by skipping the tests of what it lacks.
"""
from __future__ import annotations

from typing import NoReturn

import pytest

__all__ = ["WALL_SKIP", "cannot_start"]

#: The mark of a wall's skip in its reason (``tests/conftest.py`` looks for it).
WALL_SKIP = "wall cannot start: "


def cannot_start(wall: str, why: str) -> NoReturn:
    """Skip the running test (or fixture): the wall ``wall`` (``"bubblewrap"``, ``"memory cgroup"``,
    ``"Landlock"``, ``"Chromium"``) cannot start here, because ``why``."""
    pytest.skip(f"{WALL_SKIP}{wall}: {why}")
