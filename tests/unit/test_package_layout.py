"""The house of ``solutions``: reference modules in chapter order, the figures
(``solutions/figures/``) and the practitioner's application (``solutions/app/``) apart,
and an ``import solutions`` that stays cheap.

Read from the code (the imports, with :mod:`ast`), not from a list kept by hand, so a new
import that breaks the direction fails here.
"""
from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

from autograder.fingerprint import imported_names

PACKAGE = Path(__file__).resolve().parents[2] / "solutions"


def _application_floors(architecture: Path) -> dict[str, int]:
    """``{module: floor}`` of the application's table in ARCHITECTURE.md (rows ``| 3 | `checkpoint` | ... |``)."""
    text = architecture.read_text(encoding="utf-8")
    table = text.split("<!-- app-modules: begin -->")[1].split("<!-- app-modules: end -->")[0]
    rows = [re.match(r"\|\s*(\d+)\s*\|\s*`(\w+)`\s*\|", line) for line in table.splitlines()]
    return {row.group(2): int(row.group(1)) for row in rows if row}


#: The chapter each reference module belongs to: the latest chapter whose material it holds.
#: ``fused`` packs chapter 5's projections and takes chapter 6's mask helpers (the check, and
#: the fully masked rows that ``F.scaled_dot_product_attention`` leaves to its caller). ``packing``
#: runs the model's layers on the real tokens of a training batch and gives the loss's logits.
CHAPTER = {
    "rnn": 1, "tokens": 2, "embeddings": 2, "positional": 3, "attention": 4, "multihead": 5, "fused": 6,
    "masking": 6, "layers": 7, "decoder": 8, "model": 8, "configuration": 8, "training": 9, "packing": 9,
    "kv_cache": 10, "decoding": 10, "translation": 10, "bleu": 11,
}
#: The practitioner's application, ``solutions/app/``: imports the reference, never imported by it.
#: ``{module: floor}``, read from ARCHITECTURE.md's table (between the ``app-modules`` markers).
APPLICATION = _application_floors(PACKAGE.parent / "ARCHITECTURE.md")
#: Top-level modules that are neither reference nor application: ``python -m solutions``'s thin entry.
ENTRY = {"__main__"}
#: The one import against the reading order, kept on purpose: chapter 5's MultiHeadAttention
#: (an exercise whose text is the notebook's solution cell) takes a mask through chapter 6's
#: masked_softmax, which chapter 5's setup cell imports ahead of its chapter.
AHEAD_OF_ORDER = {("multihead", "masking")}
#: The subpackages: the book's figures and the application.
SUBPACKAGES = {"figures", "app"}


def _imports(path: Path) -> set[str]:
    """The ``solutions`` modules a file imports (relative or absolute), as dotted names below
    ``solutions``: ``"model"``, and in a subpackage ``"app.trainer"``, ``"figures.plots"``."""
    found = set()
    for name in imported_names(path, PACKAGE.parent):
        parts = name.split(".")
        if parts[0] == "solutions" and len(parts) > 1:
            found.add(".".join(parts[1:3] if parts[1] in SUBPACKAGES else parts[1:2]))
    return found


def test_every_module_has_a_place():
    top = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    assert top == set(CHAPTER) | ENTRY, "a new module of solutions/ needs a chapter (or belongs in solutions/app/)"
    application = {p.stem for p in (PACKAGE / "app").glob("*.py")} - {"__init__"}
    assert application == set(APPLICATION), (
        f"solutions/app/ and ARCHITECTURE.md's table differ: modules without a row "
        f"{sorted(application - set(APPLICATION))}, rows without a module {sorted(set(APPLICATION) - application)}")
    subpackages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert subpackages == SUBPACKAGES, "a new subpackage of solutions/ needs a place here"


def test_the_application_imports_the_reference_and_itself_only():
    for module in APPLICATION:
        for target in _imports(PACKAGE / "app" / f"{module}.py"):
            assert not target.startswith("figures"), f"solutions.app.{module} imports the figures ({target})"
            if target.startswith("app."):
                assert target.split(".")[1] in APPLICATION, f"solutions.app.{module} imports {target}"
                assert APPLICATION[target.split(".")[1]] < APPLICATION[module], (
                    f"solutions.app.{module} (floor {APPLICATION[module]}) imports {target} (floor "
                    f"{APPLICATION[target.split('.')[1]]}): a module imports only lower floors (ARCHITECTURE.md §5)")
            else:
                assert target in CHAPTER, f"solutions.app.{module} imports solutions.{target}, which is no reference module"
    assert _imports(PACKAGE / "app" / "__init__.py") == set(), "solutions.app's __init__ imports nothing"


def test_python_m_solutions_is_a_thin_entry_into_the_application():
    assert _imports(PACKAGE / "__main__.py") == {"app.cli"}


def test_reference_modules_import_only_earlier_or_same_chapters():
    for module, chapter in CHAPTER.items():
        for target in _imports(PACKAGE / f"{module}.py"):
            assert not target.startswith("app"), f"solutions.{module} imports the application ({target})"
            assert not target.startswith("figures"), f"solutions.{module} imports the figures ({target})"
            if (module, target) in AHEAD_OF_ORDER:
                continue
            assert CHAPTER[target] <= chapter, (
                f"solutions.{module} (chapter {chapter}) imports solutions.{target} (chapter {CHAPTER[target]})")


def test_the_exception_to_reading_order_is_still_needed():
    for module, target in AHEAD_OF_ORDER:
        assert target in _imports(PACKAGE / f"{module}.py"), f"drop ({module}, {target}) from AHEAD_OF_ORDER"


def test_figures_import_nothing_of_the_reference():
    files = sorted((PACKAGE / "figures").glob("*.py"))
    assert {p.stem for p in files} >= {"__init__", "diagram", "plots"} | {f"ch{n:02d}" for n in range(1, 11)}
    for path in files:
        outside = {t for t in _imports(path) if not t.startswith("figures")}
        assert not outside, f"solutions/figures/{path.name} imports {sorted(outside)}"


def test_the_package_exports_by_name_and_never_star():
    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    stars = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)]
    assert stars == []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        assert not any(isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names) for n in ast.walk(tree)), path


def test_import_solutions_is_cheap():
    probe = ("import json, sys; import torch; before = set(sys.modules); import solutions; "
             "print(json.dumps(sorted(set(sys.modules) - before)))")
    loaded = json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                                       cwd=PACKAGE.parent).stdout)
    heavy = [m for m in loaded if m.split(".")[0] in {"sacrebleu", "tqdm", "tokenizers", "matplotlib", "ipywidgets"}]
    assert heavy == []
    application = [m for m in loaded if m.split(".")[0] == "solutions" and len(m.split(".")) > 1
                   and m.split(".")[1] in SUBPACKAGES]
    assert application == []


def test_no_private_name_is_imported_across_modules():
    """A name with a leading underscore belongs to its module: another module of the
    project (reference, application, figures or autograder) that needs it gets a public
    name. ``from .x import public as _alias`` is fine: the alias is the importer's own."""
    root = PACKAGE.parent
    found = []
    for path in sorted([*PACKAGE.rglob("*.py"), *(root / "autograder").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(
                    ("solutions", "autograder"))):
                found += [f"{path.relative_to(root)}:{node.lineno} imports {a.name} from {node.module or '.'}"
                          for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    assert not found, "\n".join(found)


def test_the_console_script_and_python_m_solutions_reach_the_same_main():
    import importlib
    import tomllib

    scripts = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    module, _, attr = scripts["transformer"].partition(":")
    from solutions.app import cli

    assert getattr(importlib.import_module(module), attr) is cli.main
    main = ast.parse((PACKAGE / "__main__.py").read_text(encoding="utf-8"))
    assert any(isinstance(n, ast.ImportFrom) and n.module == "app.cli" and n.level == 1
               and [a.name for a in n.names] == ["main"] for n in main.body)
    help_text = subprocess.run([sys.executable, "-m", "solutions", "--help"], capture_output=True, text=True,
                               check=True, cwd=PACKAGE.parent).stdout
    for command in ("train", "translate", "evaluate", "export", "bench"):
        assert command in help_text
