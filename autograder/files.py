"""Writing a file whole or not at all: every result file the autograder writes goes through here.

A journal entry, ``results.json``, a CSV, a feedback page or a report page is written to a
temporary file beside it, flushed to disk, then renamed over the old one
(:func:`write_atomic`): a run stopped mid-write leaves the previous file or none, never half
of one.
"""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["write_atomic"]


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` in UTF-8, atomically (a temporary file, then a rename).

    Never fails on content: a character UTF-8 cannot hold (a lone surrogate that
    slipped past :func:`autograder.text.safe_text`) is written as its escape
    (``\\udcff``), which is also how JSON spells it.

    Args:
        path: the file (its folder is made when missing).
        text: the whole content.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8", errors="backslashreplace", newline="") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
