"""Release the student notebooks: nbgrader's own preprocessors on the source notebooks.

A chapter notebook ``book/<id>/<id>.ipynb`` is an nbgrader *source* notebook
(ARCHITECTURE.md §2). Its markdown cells are first turned from MyST into plain
Markdown (:mod:`autograder.student.plain`), which every notebook front-end renders.
Then its student version is made exactly as ``nbgrader generate_assignment`` makes
it, by the same preprocessors in the same order:
lock the read-only cells, replace every ``### BEGIN SOLUTION`` region with the
stub (``raise NotImplementedError()``), clear outputs, check the metadata,
compute the checksums, cut the ``### BEGIN HIDDEN TESTS`` regions and the marking
schemes, and checksum again. Given a gradebook URL, nbgrader's ``SaveCells`` also
records the assignment's grade, solution and source cells there, which is how the
batch grader fills ``gradebook.db`` for the formgrader.

Before releasing, the solution regions must equal the ``solutions`` package
(:mod:`autograder.sync`); after releasing, :func:`leaked_lines` proves that no
marker, no line of a reference solution body and no line of a hidden test region
reached a student notebook. Each released notebook carries a stamp in its metadata,
``{"transformer_book": {"chapter": ..., "edition": "student"}}``, by which
``autograder check`` recognises it whatever the file is called. It opens with a code
cell that installs the chapter's wheel on Google Colab and does nothing elsewhere
(:data:`COLAB_CELL`), and a markdown note before the setup cell says how to install the
wheel on each platform.

With ``package=True`` (the ``release`` command's default), the release also holds
one student package per chapter, a wheel that runs the chapter's visible checks
offline without any reference answer of that chapter or a later one
(:mod:`autograder.student.package`); :func:`scan_release` proves that no line of
those answers is in the chapter's notebook or inside its wheel. A chapter whose
cells use something its package cannot hold is a :class:`ReleaseError`.
"""
from __future__ import annotations

import json
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

import nbformat

from .book import BOOK, MARKERS, answer_lines, chapter_ids, secret_lines, source_notebook
from .student import wheel_name
from .student.notebook import stamp
from .student.package import build_package
from .student.plain import plain_notebook
from .student.wheel import project_version
from .sync import sync_notebook

__all__ = [
    "ReleaseError",
    "student_version",
    "leaked_lines",
    "release_chapter",
    "release",
    "scan_release",
    "Release",
]

# Files of a chapter folder that are build or editor leftovers, never released.
SKIP_NAMES = {".ipynb_checkpoints", "__pycache__", "_build", ".DS_Store"}


class ReleaseError(RuntimeError):
    """The source notebooks cannot be released (out of sync, or a leak was found)."""


def _preprocessors(with_gradebook: bool) -> list:
    """nbgrader's GenerateAssignment pipeline (header/footer and AUTOTEST instantiation
    left out: the book uses neither). ``SaveCells`` only when a gradebook is given."""
    from nbgrader.preprocessors import (  # deferred: nbgrader is slow to import
        CheckCellMetadata,
        ClearHiddenTests,
        ClearMarkScheme,
        ClearOutput,
        ClearSolutions,
        ComputeChecksums,
        LockCells,
        SaveCells,
    )

    steps = [LockCells, ClearSolutions, ClearOutput, CheckCellMetadata, ComputeChecksums]
    if with_gradebook:
        steps.append(SaveCells)
    # As in nbgrader: hidden tests go after the checksums and SaveCells, then checksum again.
    steps += [ClearHiddenTests, ClearMarkScheme, ComputeChecksums, CheckCellMetadata]
    return [step() for step in steps]


def student_version(nb: nbformat.NotebookNode, chapter: str, db_url: str | None = None,
                    *, book: Path = BOOK) -> nbformat.NotebookNode:
    """The student notebook made from source notebook ``nb`` (which is not modified).

    Its markdown cells are first turned from MyST into plain Markdown
    (:func:`autograder.student.plain.plain_notebook`: folded hints as ``<details>``,
    citations as text and a References cell, no ``(label)=`` lines), so that every
    front-end renders them; nbgrader's preprocessors then run on that text, so the
    checksums of the locked cells and the cells ``SaveCells`` records are those of the
    notebook the students get.

    Args:
        nb: the source notebook (nbformat v4).
        chapter: the chapter id; nbgrader's assignment and notebook name.
        db_url: an nbgrader gradebook (``sqlite:///…/gradebook.db``) in which
            ``SaveCells`` records the notebook's cells; ``None`` records nothing.
            The assignment must already exist there.
        book: the book whose labels and ``references.bib`` resolve ``{ref}`` and
            ``{cite}`` roles.

    Returns:
        The released notebook.

    Raises:
        ValueError: a markdown cell holds MyST that has no plain Markdown form.
    """
    out = plain_notebook(nb, chapter, book=book)  # a copy
    resources = {"nbgrader": {"notebook": chapter, "assignment": chapter, "db_url": db_url}}
    for step in _preprocessors(with_gradebook=db_url is not None):
        out, resources = step.preprocess(out, resources)
    return out


def leaked_lines(source: nbformat.NotebookNode, released: nbformat.NotebookNode) -> list[str]:
    """Markers and secret lines of ``source`` found in ``released`` (empty when clean).

    Outputs and attachments count too: a stale output could show a reference result.
    """
    secret = secret_lines(source)
    leaks: list[str] = []
    for index, cell in enumerate(released.cells):
        texts = [cell.source]
        for output in cell.get("outputs", []):
            texts.append(json.dumps(output))
        for text in texts:
            for line in text.splitlines():
                stripped = line.strip()
                if any(marker in line for marker in MARKERS):
                    leaks.append(f"cell {index}: marker {stripped!r}")
                elif stripped in secret:
                    leaks.append(f"cell {index}: reference line {stripped!r}")
    return leaks


@dataclass
class Released:
    """One released chapter: its id and the student notebook's path."""

    chapter: str
    path: Path


def check_in_sync(paths: list[Path]) -> None:
    """Raise :class:`ReleaseError` when a solution cell differs from ``solutions``."""
    stale = {p: sync_notebook(p, write=False) for p in paths}
    stale = {p: ids for p, ids in stale.items() if ids}
    if stale:
        lines = "\n".join(f"  {p}: {', '.join(ids)}" for p, ids in stale.items())
        raise ReleaseError(
            "the solution cells are not in sync with the solutions package:\n"
            f"{lines}\nrun `python -m autograder.sync`, review, commit, then release"
        )


INSTALL_NOTE = """**Before the setup cell.** This notebook needs its chapter's student package,
the file `{wheel}` handed out beside it. Install it once, in the environment the notebook
runs in (a terminal, or a new cell with `%pip`):

- your own machine: `pip install jupyterlab {wheel}` (on Linux without an NVIDIA GPU add
  `--extra-index-url https://download.pytorch.org/whl/cpu`: PyTorch's smaller CPU build);
- Google Colab: run the notebook's first cell; it runs `%pip install {wheel}` with the
  file you uploaded (the folder icon on the left), or else the one the book publishes,
  and keeps Colab's own IPython, numpy and torch;
- a JupyterHub: your instructor may have installed it already; if the next cell says
  `No module named 'autograder'`, run `%pip install {wheel}` from the folder it is in.
"""


def _add_install_note(nb: nbformat.NotebookNode, chapter: str) -> None:
    """Put a markdown cell naming the chapter's wheel and how to install it right before
    the setup cell (the first code cell, which imports the package; :func:`_add_colab_cell`
    later puts the Colab install cell above both)."""
    note = nbformat.v4.new_markdown_cell(INSTALL_NOTE.format(wheel=wheel_name(chapter, project_version())))
    note.metadata["transformer_book"] = {"install_note": True}
    first_code = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"), len(nb.cells))
    nb.cells.insert(first_code, note)


COLAB_CELL = """# Google Colab only: install this chapter's student package. Elsewhere this cell does nothing.
import sys

if "google.colab" in sys.modules:
    import importlib
    import os

    # The wheel handed out beside this notebook: uploaded (the folder icon on the left), or else
    # from where the book publishes it. pip keeps what Colab pins (IPython, numpy, torch, ...).
    _wheel = "{wheel}"
    _wheel = _wheel if os.path.exists(_wheel) else {published!r} + _wheel
    %pip install --quiet {{_wheel}}
    importlib.invalidate_caches()
"""
COLAB_KEY = "colab_install"


def published_wheel_base(chapter: str, book: Path = BOOK) -> str:
    """Where the book's publication puts ``chapter``'s wheel, as a URL prefix ("" when unknown).

    ``.github/workflows/book.yml`` publishes ``autograder release --out <branch>/book`` on
    the branch ``_config.yml`` names (``repository.branch``), so the wheel is
    ``book/<chapter>/<wheel>`` there; for a GitHub repository that file's download URL is
    ``https://github.com/OWNER/REPO/raw/BRANCH/book/<chapter>/<wheel>``.
    """
    import yaml  # deferred: only a release of the book reads its configuration

    config = Path(book).parent / "_config.yml"
    try:
        repository = (yaml.safe_load(config.read_text(encoding="utf-8")) or {}).get("repository") or {}
    except (OSError, yaml.YAMLError):
        return ""
    url, branch = str(repository.get("url") or ""), str(repository.get("branch") or "")
    prefix = "https://github.com/"
    if not url.startswith(prefix) or not branch:
        return ""
    owner_repo = url[len(prefix):].strip("/").removesuffix(".git")
    return f"{prefix}{owner_repo}/raw/{branch}/book/{chapter}/"


def _add_colab_cell(nb: nbformat.NotebookNode, chapter: str, book: Path) -> None:
    """Open the notebook with a code cell that, on Google Colab only, installs the chapter's
    wheel (:data:`COLAB_CELL`): Colab opens the notebook alone, with nothing installed.
    Not an nbgrader cell: graders and ``check`` find the setup cell by its ``grade_id``."""
    source = COLAB_CELL.format(wheel=wheel_name(chapter, project_version()),
                               published=published_wheel_base(chapter, book))
    cell = nbformat.v4.new_code_cell(source.rstrip("\n"))
    cell.metadata["transformer_book"] = {COLAB_KEY: True}
    nb.cells.insert(0, cell)


def release_chapter(chapter: str, out: Path, book: Path = BOOK) -> Released:
    """Write ``out/<chapter>/<chapter>.ipynb`` (and the chapter's other files).

    The chapter's other files and folders are copied beside the student notebook,
    so its diagrams, ``figures/*.svg`` (``solutions.figures``), resolve from the
    notebook's markdown exactly as they do in the book.

    Raises:
        ReleaseError: when the released notebook still shows a marker or a secret line.
    """
    src_path = source_notebook(chapter, book)
    source = nbformat.read(str(src_path), as_version=4)
    released = student_version(source, chapter, book=book)
    stamp(released, chapter)
    _add_install_note(released, chapter)
    _add_colab_cell(released, chapter, book)
    leaks = leaked_lines(source, released)
    if leaks:
        raise ReleaseError(f"{chapter}: the released notebook would leak:\n  " + "\n  ".join(leaks[:20]))
    dest = Path(out) / chapter
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for item in sorted(src_path.parent.iterdir()):
        if item.name in SKIP_NAMES or item.suffix == ".ipynb":
            continue
        if item.is_dir():
            shutil.copytree(item, dest / item.name, ignore=shutil.ignore_patterns(*SKIP_NAMES))
        else:
            shutil.copy2(item, dest / item.name)
    path = dest / f"{chapter}.ipynb"
    nbformat.write(released, str(path))
    return Released(chapter, path)


class Release(list):
    """The :class:`Released` chapters of one release (a list), and their student packages
    (``packages``: chapter -> :class:`autograder.student.package.StudentPackage`, one per
    chapter; empty when none was built)."""

    def __init__(self, items=()):
        super().__init__(items)
        self.packages = {}

    @property
    def package(self):
        """The student package of a one-chapter release (``None`` when none was built).

        Raises:
            ValueError: the release has several chapters, hence several packages (read ``packages``).
        """
        if len(self.packages) > 1:
            raise ValueError(f"this release has one student package per chapter ({', '.join(self.packages)}): "
                             "read Release.packages")
        return next(iter(self.packages.values()), None)


def release(out: Path, chapters: list[str] | None = None, book: Path = BOOK,
            check_sync: bool = True, package: bool = False) -> Release:
    """Release every chapter (or the given ones) under ``out``.

    Args:
        out: the release folder (``out/<chapter>/<chapter>.ipynb``).
        chapters: chapter ids; default every chapter with a source notebook.
        book: the folder holding the source notebooks.
        check_sync: refuse to release when the solution cells differ from ``solutions``.
        package: also write one student package per chapter (a wheel in ``out``,
            ``transformer_book_student-<version>+chNN-py3-none-any.whl``) and scan each
            chapter's notebook and wheel for the answers of that chapter and the later ones.
            Why one per chapter: chapter 8's package holds chapter 6's references, which
            chapter 6's students must write themselves; no one package serves both.

    Returns:
        One :class:`Released` per chapter (a :class:`Release`, whose ``packages`` maps
        each chapter to its student package when they were built).

    Raises:
        ReleaseError: out of sync, a leak in a notebook or in a package, or a chapter
            whose notebooks use something its package cannot hold (every such chapter is
            named, with what is missing; then no wheel of this release is left in ``out``).
    """
    chapters = list(chapters) if chapters else chapter_ids(book)
    if not chapters:
        raise ReleaseError(f"no chapter notebooks under {book}")
    paths = [source_notebook(c, book) for c in chapters]
    if check_sync:
        check_in_sync(paths)
    Path(out).mkdir(parents=True, exist_ok=True)
    done = Release(release_chapter(c, Path(out), book) for c in chapters)
    if package:
        problems = []
        for chapter in chapters:
            built = build_package(Path(out), [chapter], book)
            leaks = scan_release(Path(out), [chapter], book, only=[Path(out) / chapter, built.wheel])
            if built.warnings or leaks:
                built.wheel.unlink()
                problems += [f"{chapter}: the student package cannot serve the chapter fully: {w}"
                             for w in built.warnings]
                problems += [f"{chapter}: the release would hold a reference answer: {leak}" for leak in leaks[:20]]
                continue
            done.packages[chapter] = built
            # nbgrader's release_assignment hands out the chapter's folder: the wheel goes in it too
            shutil.copy2(built.wheel, Path(out) / chapter / built.wheel.name)
        if problems:
            for built in done.packages.values():
                built.wheel.unlink()
            raise ReleaseError("\n  ".join(["the release is not complete:", *problems]))
    return done


def _release_texts(out: Path, only: list[Path] | None = None):
    """``(name, text)`` for every file under ``out`` (or under the files and folders
    ``only``), and for every member of a wheel or zip."""
    roots = [Path(p) for p in only] if only is not None else [Path(out)]
    paths = sorted({q for root in roots for q in ([root] if root.is_file() else root.rglob("*"))})
    for path in paths:
        if not path.is_file():
            continue
        if path.suffix in (".whl", ".zip"):
            with zipfile.ZipFile(path) as zf:
                for member in zf.namelist():
                    yield f"{path.name}!{member}", zf.read(member).decode("utf-8", errors="replace")
        else:
            yield str(path.relative_to(out)), path.read_bytes().decode("utf-8", errors="replace")


def scan_release(out: Path, chapters: list[str], book: Path = BOOK, only: list[Path] | None = None) -> list[str]:
    """Lines of an answer (a solution body or a hidden test of a released or later
    chapter) found in any file of the release, inside archives included; empty when
    clean. Notebooks are read as their cells' sources and outputs.

    Args:
        out: the release folder.
        chapters: the released chapters.
        book: the folder of the source notebooks.
        only: scan these files and folders (under ``out``) instead of all of ``out``
            (an earlier release of an earlier chapter in the same folder may hold
            this chapter's reference: its students were allowed to).
    """
    secret = answer_lines(chapters, book)
    found = []
    for name, text in _release_texts(out, only):
        if name.endswith(".ipynb"):
            try:
                nb = nbformat.reads(text, as_version=4)
                text = "\n".join([c.source for c in nb.cells] + [json.dumps(o) for c in nb.cells
                                                                  for o in c.get("outputs", [])])
            except Exception:  # noqa: BLE001 - not a notebook after all: scan the raw text
                pass
        for line in text.splitlines():
            stripped = line.strip()
            for chapter, lines in secret.items():
                if stripped in lines:
                    found.append(f"{name}: {chapter} answer line {stripped!r}")
    return found
