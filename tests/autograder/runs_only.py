"""A pytest plugin (``-p runs_only``) that keeps only the tests that start a grading run.

``test_container_mode.py`` reruns whole attack modules with the container mode forced
(``AUTOGRADER_ISOLATION=container``). Only the tests that start a run can answer
differently there: a test that builds a stripped library, parses limits or reads the
withheld modules never reaches the isolation, and runs once, in the suite itself.

A test starts a run exactly when it needs the sandbox, which every such test says by
requesting ``needs_sandbox`` (directly, or through ``probe`` or a graded-class fixture):
that fixture is what skips it, or fails it under ``CI=true``, where no sandbox starts.
"""
from __future__ import annotations

RUN_FIXTURE = "needs_sandbox"


def pytest_collection_modifyitems(config, items):
    """Deselect every collected test whose fixtures do not include :data:`RUN_FIXTURE`."""
    kept = [item for item in items if RUN_FIXTURE in item.fixturenames]
    dropped = [item for item in items if RUN_FIXTURE not in item.fixturenames]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
