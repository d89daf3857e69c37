"""What every grading command decides the same way: which wall student code runs behind,
and the run's one :class:`~autograder.grading.RunSettings` from the options.

Each command imports its modules inside its function, so that ``python -m autograder``
starts light (:mod:`autograder.cli`).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["sandbox_available", "isolation_line", "record_isolation", "grading_sandbox", "run_settings"]


def sandbox_available() -> bool:
    """Whether a sandbox starts here (checked once per process): bubblewrap, or the
    container mode where bubblewrap cannot start (:mod:`autograder.isolation`)."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from ..isolation import choose_isolation

    try:
        choose_isolation()
    except (RuntimeError, OSError):
        return False
    return True


def isolation_line() -> str:
    """``isolation: …`` — how student code is kept apart, for the console."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from ..isolation import choose_isolation, describe

    return f"isolation: {describe(choose_isolation())}"


def record_isolation(out: Path, mode: str) -> None:
    """``OUT/isolation.json``: the isolation the grades were made under (``none``: --unsafe-no-sandbox)."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from ..isolation import describe

    texts = {"none": "no sandbox (--unsafe-no-sandbox)"}
    data = {"isolation": mode, "description": describe(mode) if mode in ("bubblewrap", "container")
            else texts.get(mode, f"recorded by the shards: {mode}")}
    out.mkdir(parents=True, exist_ok=True)
    (out / "isolation.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def grading_sandbox(command: str, args: argparse.Namespace) -> bool | None:
    """Whether ``grade``/``autograde`` run student code in the sandbox: True; False only with
    ``--unsafe-no-sandbox`` (with a warning); None (after saying why) when no wall starts here."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from ..isolation import choose_isolation, set_isolation

    if args.unsafe_no_sandbox:
        print("WARNING: --unsafe-no-sandbox: student code runs as a plain subprocess with your rights; "
              "the grades are NOT tamper-proof.", file=sys.stderr)
        return False
    if getattr(args, "isolation", None):
        set_isolation(args.isolation)
    try:
        choose_isolation()
    except (RuntimeError, OSError) as exc:
        print(f"{command}: no sandbox starts here ({exc}); install bubblewrap (apt-get install bubblewrap), "
              "or grade as root or on a kernel with Landlock for the container mode, or pass --unsafe-no-sandbox "
              "for untrusted-free testing only.", file=sys.stderr)
        return None
    print(isolation_line())
    return True


def run_settings(args: argparse.Namespace, sandbox: bool):
    """The run's one :class:`~autograder.grading.RunSettings`, from ``--timeout``,
    ``--budget``, ``--memory``, ``--disk``, ``--processes``, the sandbox chosen and the
    secret seed (``--seed-file``, ``AUTOGRADER_SEED``: :func:`autograder.cli.main` reads it; ``check``'s
    visible cases take none)."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from ..run_settings import RunSettings

    return RunSettings(timeout=args.timeout, budget=args.budget, memory=args.memory, disk=args.disk,
                       processes=args.processes, sandbox=sandbox,
                       seed=args.seed if hasattr(args, "seed_file") else None)
