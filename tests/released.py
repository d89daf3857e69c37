"""The release of every chapter, made once per run and shared: a pytest plugin (``tests/conftest.py``
loads it), so the tests of ``tests/autograder/`` and of ``tests/book/`` read the same release.

``released_chapters`` is the release ``.github/workflows/book.yml`` publishes as the branch
``student``; ``released_packages`` is each chapter's student package read back from its wheel.
Every module that uses them is in the xdist group ``"releases"`` (``tests/scheduling.py``;
``tests/test_scheduling.py`` fails for one that is not), so one worker builds the release
once per run: the eleven packages (each chapter's stand-ins and check helpers recorded,
about 40 CPU s) are built nowhere else in a run.
"""
from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
import torch

from autograder.book import chapter_ids
from autograder.release import release

__all__ = ["released_chapters", "released_packages", "wheel_files"]


@pytest.fixture(scope="session")
def released_chapters(tmp_path_factory):
    """Every chapter of the book released once, with one student wheel per chapter:
    ``(out, Release)`` of ``release(out, chapter_ids(), package=True)``, what ``autograder
    release --out <branch>/book`` (book.yml) writes: ``out`` is ``<branch>/book``, and
    ``<branch>`` holds nothing else. Read it, never change it.

    Built on one torch thread: recording the packages' stand-ins and check helpers is
    thousands of tiny torch calls, which a second thread only slows (chapter 5's package:
    16.6 CPU s on two threads, 6.3 on one, on a loaded machine)."""
    out = tmp_path_factory.mktemp("student") / "book"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return out, release(out, chapter_ids(), package=True)
    finally:
        torch.set_num_threads(threads)


def wheel_files(wheel: Path) -> dict[str, bytes]:
    """The files of a student wheel (path inside it -> bytes) without its ``.dist-info``: the
    package's own files, as :func:`autograder.student.package.package_files` made them."""
    with zipfile.ZipFile(wheel) as zf:
        return {name: zf.read(name) for name in zf.namelist() if not name.split("/", 1)[0].endswith(".dist-info")}


@pytest.fixture(scope="session")
def released_packages(released_chapters):
    """Every chapter's student package as ``released_chapters`` shipped it: chapter -> ``(files,
    info)``, the files read back from its wheel, ``info`` the release's
    :class:`~autograder.student.package.StudentPackage`. A test that reads a package reads
    the shipped one, and no package is built twice in a run."""
    _, done = released_chapters
    return {chapter: (wheel_files(info.wheel), info) for chapter, info in done.packages.items()}
