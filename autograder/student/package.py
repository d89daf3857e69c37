"""Build the student package of a release: a wheel with the visible checks and no answers.

``autograder release --out DIR CHAPTER...`` calls :func:`build_package`, which writes
``DIR/transformer_book_student-<version>+chNN-py3-none-any.whl``. A student installs it
(``pip install <wheel>``: no build step, no network beyond the dependencies) and gets:

* ``autograder``: ``check(name, obj)`` for the notebooks' test cells and
  ``python -m autograder check NOTEBOOK``, running every visible check of the released
  chapters against expected results stored as data (:mod:`autograder.student.expected`);
  the chapters' check modules come along, so the hints are still computed from each
  case's inputs. No hidden check, no grading, no ``solutions`` call for an answer.
* ``solutions``: the reference modules that the released notebooks (and their visible
  cases) use, **minus** every module that defines or imports the answer to an exercise
  of a released or later chapter (the grading sandbox's rule, :func:`autograder.withhold.graded_modules`,
  applied to all of them). Its ``__init__`` is generated:

  - ``solutions.<name>`` for an exercise of a released chapter is the student's own
    definition from the notebook (``solutions.MultiHeadAttention`` in chapter 5's demo
    cells is the class written above), with a message saying what to write when it is
    not there yet;
  - a later chapter's building block that a setup cell imports (chapter 5's
    ``masked_softmax``) is a stand-in (:mod:`autograder.student.standins`), computed
    another way than the reference;
  - an object a notebook uses from a module that cannot ship whole (chapter 1's
    ``additive_attention`` beside the ``rnn_forward`` answer) ships as part of that
    module (:func:`~autograder.student.partial.partial_module`); where that part imports an exercise of a released
    chapter, the module it imports from is a shim calling the student's definition
    (chapter 6's ``MultiHeadAttention`` runs the student's ``masked_softmax``);
  - a part may import from another withheld module, which then ships its own part
    (chapter 10's ``Trainer`` imports ``solutions.translation.translate``, which runs the
    student's decoders through a shim of ``solutions.decoding``); a later chapter's
    exercise that a part calls is a stand-in (chapter 9's translations decode with a
    stand-in ``greedy_decode``; ``beam_search``, named but never called there, says it is
    not in the package);
  - anything else a notebook uses but the package leaves out raises an error that says
    why, and the build reports it (:attr:`StudentPackage.warnings`);
    :func:`autograder.release.release` refuses such a chapter (``ReleaseError``).

The data files of the packages that ship (a frozen corpus under ``solutions/``) ship
too (:func:`~autograder.student.plan.package_data`). One package serves one chapter: ``autograder release``
builds one per chapter, and a setup cell's ``require_chapter`` names the right wheel.

Check modules ship too (the verdicts and the hints), less their case makers (no hidden
case ships) and the body of every helper outside a verdict, whose results on the visible
cases ship instead (:mod:`autograder.student.hints`); a later chapter's stand-in that the
chapter calls with fixed arguments ships as recorded outputs
(:data:`~autograder.student.standins.RECORDED`). ``autograder.release.scan_release`` then
proves that no line of an answer of a released or later chapter is anywhere in the wheel,
and ``tests/autograder/test_wheel_answers.py`` that no function or class of it earns a
part of a released or later chapter's hidden checks.

The wheel is written directly (:mod:`autograder.student.wheel`), so building it needs
neither ``pip`` nor ``setuptools``.
"""
from __future__ import annotations

import ast
import io
import json
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

from ..book import chapter_ids
from ..checks import exercises_of
from .expected import REPLAY, write_chapter, write_contents
from .hints import record_helpers, replayable, withhold_helpers
# StudentPackage is what build_package returns: an outside caller reads it from here.
from .plan import Scope, StudentPackage, solutions_files, sort_uses
from .shipped import AUTOGRADER_DIR, check_modules, shipped_modules
from .standin_modules import RECORDED_FILE, recorded_outputs
from .uses import notebook_sources, notebook_uses
from .wheel import write_wheel

__all__ = ["StudentPackage", "build_package", "package_files", "REQUIREMENTS"]


#: Import name -> requirement, for every third-party module the package or a notebook imports.
REQUIREMENTS = {
    "numpy": "numpy>=1.24",
    "torch": "torch>=2.2",
    "matplotlib": "matplotlib>=3.7",
    # Colab pins ipython 7.34 and ipywidgets 7.7: the package uses only what those have
    # (tests/autograder/test_platforms.py resolves the wheel against Colab's pins)
    "ipywidgets": "ipywidgets>=7.6",
    "IPython": "ipython>=7.34",
    "sacrebleu": "sacrebleu>=2.3",
    "tqdm": "tqdm>=4.60",
    "tokenizers": "tokenizers>=0.15",
}


_AUTOGRADER_INIT = '''"""The student edition of ``autograder``: generated by `autograder release`, do not edit.

Released chapters: {chapters}. ``check(name, obj)`` runs the visible check of an
exercise against expected results stored as data in ``autograder/expected`` (no
reference answers here); ``python -m autograder check NOTEBOOK`` runs them all.
The hidden checks run when your work is graded.
"""
from __future__ import annotations

from pathlib import Path

from .checks.base import use_precomputed as _use_precomputed
from .student.expected import ExpectedStore as _ExpectedStore

from .student import require_chapter

__all__ = ["check", "require_chapter", "RELEASED"]

RELEASED = {chapters!r}
_use_precomputed(_ExpectedStore(Path(__file__).resolve().parent / "expected"))


def check(name, obj, hidden=False, seed=None):
    """Run the visible check of exercise ``name`` on ``obj``; see :func:`autograder.checks.base.check`."""
    from .checks.base import check as _check

    __tracebackhide__ = True  # noqa: F841 - keeps IPython tracebacks short
    return _check(name, obj, hidden=hidden, seed=seed)
'''


_AUTOGRADER_MAIN = '''"""``python -m autograder check NOTEBOOK`` (student edition)."""
import sys

from .student.cli import main

sys.exit(main())
'''


def _requirements(py_sources: list[str], imported: set[str], warnings: list[str]) -> list[str]:
    tops = set(imported)
    for text in py_sources:
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                tops.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                tops.add(node.module.split(".")[0])
    ours = {"solutions", "autograder", "__future__"}
    third = sorted(t for t in tops - ours if t not in sys.stdlib_module_names)
    missing = [t for t in third if t not in REQUIREMENTS]
    if missing:
        warnings.append(f"imported but not in REQUIREMENTS (add them there): {', '.join(missing)}")
    return sorted(REQUIREMENTS[t] for t in third if t in REQUIREMENTS)


def _expected_files(chapters: list[str], book: Path) -> dict[str, bytes]:
    """``autograder/expected/<chapter>.json`` and ``.npz`` of every released chapter, and
    ``contents.json``, the exercises' names of every chapter of ``book``."""
    files = {}
    with tempfile.TemporaryDirectory(prefix="student-expected-") as tmp:
        paths = [write_contents(Path(tmp), {c: [ex.name for ex in exercises_of(c)] for c in chapter_ids(book)})]
        for chapter in chapters:
            paths += write_chapter(Path(tmp), chapter, exercises_of(chapter))
        for path in paths:
            files[f"autograder/expected/{path.name}"] = path.read_bytes()
    return files


def _autograder_files(scope: Scope, check_paths: list[Path], info: StudentPackage) -> dict[str, str]:
    """The package's ``autograder``: the shipped modules, the check modules without
    their answer-computing helpers, and the generated ``__init__`` and ``__main__``."""
    files = {f"autograder/{rel}": (AUTOGRADER_DIR / rel).read_text(encoding="utf-8")
             for rel in shipped_modules(check_paths)}
    replay = replayable(check_paths, scope.chapters)
    for path in check_paths:
        text, helpers = withhold_helpers(path.read_text(encoding="utf-8"), scope.answers, path.stem,
                                         replay.get(path.stem, (set(), set())))
        if helpers:
            info.withheld_helpers[path.stem] = helpers
        files[f"autograder/checks/{path.name}"] = text
    files["autograder/__init__.py"] = _AUTOGRADER_INIT.format(chapters=list(scope.chapters))
    files["autograder/__main__.py"] = _AUTOGRADER_MAIN
    return files


def package_files(chapters: list[str], book: Path) -> tuple[dict[str, bytes], StudentPackage]:
    """Every file of the student package of ``chapters`` (path inside the wheel -> bytes).

    Returns:
        ``(files, info)``; ``info.wheel`` is not set yet.
    """
    scope = Scope.of(chapters, book)
    info = StudentPackage(wheel=Path(), chapters=list(chapters))
    files = _expected_files(scope.chapters, scope.book)
    factories = set()
    for key, data in files.items():
        if key.endswith(".json"):
            found = re.findall(r'"__objmarker__": "solutions\.(\w+)"', data.decode("utf-8"))
            factories |= {("solutions", name) for name in found}
    check_paths = check_modules(scope.chapters)
    sources = [src for c in scope.chapters for src in notebook_sources(Path(book) / c / f"{c}.ipynb")]
    names, modules, imported = notebook_uses(sources)
    check_names, _, _ = notebook_uses([p.read_text(encoding="utf-8") for p in check_paths])
    roots, standins, missing = sort_uses(scope, names, modules, factories, check_names)
    texts = {**solutions_files(scope, roots, standins, missing, info), **_autograder_files(scope, check_paths, info)}
    info.requirements = _requirements([t for n, t in texts.items() if n.endswith(".py")], imported, info.warnings)
    files.update({name: text.encode("utf-8") for name, text in texts.items()})
    recorded = recorded_outputs(info.standins)
    if recorded:
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **recorded)
        files[RECORDED_FILE] = buffer.getvalue()
    if info.withheld_helpers:
        document, arrays = record_helpers(info.withheld_helpers, scope.chapters)
        info.replayed_calls = len(document["calls"])
        files[f"autograder/expected/{REPLAY}.json"] = (json.dumps(document, sort_keys=True) + "\n").encode("utf-8")
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **arrays)
        files[f"autograder/expected/{REPLAY}.npz"] = buffer.getvalue()
    return files, info


def build_package(out: Path, chapters: list[str], book: Path) -> StudentPackage:
    """Build the student package of ``chapters`` into ``out`` (a wheel).

    Args:
        out: the release folder.
        chapters: the released chapter ids.
        book: the folder of the source notebooks (what the notebooks use is read there).

    Returns:
        The :class:`StudentPackage` (its ``warnings`` name what the package leaves out
        that a notebook uses).
    """
    chapters = sorted(chapters)
    files, info = package_files(chapters, Path(book))
    info.wheel = write_wheel(out, files, chapters, info.requirements)
    return info
