"""What of ``autograder`` the student package ships follows from the chapter plan and the
import graph (:func:`autograder.student.shipped.shipped_modules`), not from a list: a
module the student side starts to import ships, one nothing there imports is withheld."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from autograder.book import chapter_ids
from autograder.fingerprint import imported_names
from autograder.student.shipped import (AUTOGRADER_DIR, RELEASE_ONLY, STUDENT_ROOTS, check_modules,
                                        shipped_modules)

#: The grader's own modules: none of them may reach a student.
GRADER_SIDE = ("grading.py", "run_settings.py", "cells.py", "reference_results.py", "jobs.py", "tamper.py", "stubs.py",
               "verdicts.py", "reference_regrade.py", "sandbox.py", "batch.py", "isolation.py", "confine.py", "journal.py",
               "release.py", "book.py", "fingerprint.py", "student/package.py", "student/plan.py", "student/partial.py",
               "student/standin_modules.py", "student/uses.py", "student/shipped.py", "student/hints.py",
               "student/plain.py")


@pytest.mark.parametrize("chapter", ["01_rnn_limitations", "08_transformer"])
def test_the_shipped_modules_are_the_student_sides_import_closure(chapter):
    checks = check_modules([chapter])
    assert [p.name for p in checks][-1].startswith("ch" + chapter[:2])
    shipped = shipped_modules(checks)
    assert set(STUDENT_ROOTS) <= set(shipped)
    assert {"runner.py", "wire.py", "text.py", "student/notebook.py", "student/unfinished.py"} <= set(shipped)
    assert not set(GRADER_SIDE) & set(shipped)
    # closed: every module of ``autograder`` a shipped module or check module imports is
    # shipped, generated (the package's __init__), a check module or release-only
    known = {f"autograder.{rel[:-3].replace('/', '.')}" for rel in shipped}
    known |= {"autograder", "autograder.checks", "autograder.student"}
    for path in [AUTOGRADER_DIR / rel for rel in shipped] + checks:
        for name in imported_names(path):
            if not name.startswith("autograder."):
                continue
            module_file = AUTOGRADER_DIR.joinpath(*name.split(".")[1:]).with_suffix(".py")
            if not module_file.is_file():
                continue  # a name taken from a module, not a module
            rel = module_file.relative_to(AUTOGRADER_DIR).as_posix()
            assert name in known or rel in RELEASE_ONLY or module_file.name.startswith("ch"), (path, name)


def test_chapter_8_ships_chapter_7s_check_module_that_its_own_imports():
    assert [p.name for p in check_modules(["08_transformer"])] == ["ch07_add_and_norm.py", "ch08_transformer.py"]


def test_every_chapter_ships_the_same_framework():
    assert len({tuple(shipped_modules(check_modules([c]))) for c in chapter_ids()}) == 1


def _copy(tmp_path: Path) -> Path:
    """A copy of the repository's ``autograder`` package under ``tmp_path``."""
    copy = tmp_path / "autograder"
    shutil.copytree(AUTOGRADER_DIR, copy, ignore=shutil.ignore_patterns("__pycache__", "deploy", "*.json"))
    return copy


def test_a_module_the_student_side_starts_to_import_ships_and_one_it_drops_is_withheld(tmp_path):
    package = _copy(tmp_path)
    checks = [package / "checks" / "ch04_self_attention.py"]
    before = shipped_modules(checks, package)
    assert before == shipped_modules(check_modules(["04_self_attention"])), "the copy ships what the repository does"

    (package / "student" / "progress.py").write_text('"""A new student-side helper."""\n', encoding="utf-8")
    (package / "unused.py").write_text('"""Imported by nobody."""\n', encoding="utf-8")
    cli = package / "student" / "cli.py"
    text = cli.read_text(encoding="utf-8")
    # the student CLI imports the new helper (beside .notebook) and stops importing ``text``
    text_import = "\nfrom ..text import check_report, wrong_chapter_notice\n"
    assert text_import in text and "\nfrom .notebook import" in text
    text = text.replace(text_import, "\n")
    text = text.replace("\nfrom .notebook import", "\nfrom .progress import __doc__ as _progress  # noqa: F401\n"
                                                  "from .notebook import", 1)
    cli.write_text(text, encoding="utf-8")

    after = shipped_modules(checks, package)
    assert set(after) - set(before) == {"student/progress.py"}
    assert "unused.py" not in after
    assert set(before) - set(after) == {"text.py"}, "nothing else imports text.py on the student side"


def test_a_check_module_that_imports_a_new_framework_module_ships_it(tmp_path):
    package = _copy(tmp_path)
    check = package / "checks" / "ch03_positional_encoding.py"
    (package / "tolerance.py").write_text('"""Shared tolerances."""\nATOL = 1e-5\n', encoding="utf-8")
    check.write_text(check.read_text(encoding="utf-8") + "\nfrom ..tolerance import ATOL  # noqa: E402,F401\n",
                     encoding="utf-8")
    assert "tolerance.py" in shipped_modules([check], package)
    assert "tolerance.py" not in shipped_modules([package / "checks" / "ch04_self_attention.py"], package)
