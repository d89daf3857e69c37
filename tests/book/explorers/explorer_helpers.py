"""The explorer logic of a chapter, loaded from its notebook for the tests.

An explorer's logic lives in the chapter notebook itself, in the one code cell that
starts with ``# explorer-logic`` (ARCHITECTURE.md §2). :func:`explorer_namespace`
runs the chapter's setup cell and that cell in a fresh namespace, as the notebook
does, so ``tests/book/explorers/test_chNN_explorers.py`` can call the functions it defines.
"""
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import nbformat  # noqa: E402

BOOK = Path(__file__).resolve().parents[3] / "book"
MARKER = "# explorer-logic"


def explorer_namespace(chapter: str) -> dict:
    """Run ``book/<chapter>/<chapter>.ipynb``'s setup cell and its ``# explorer-logic``
    cell; return the namespace they defined.

    Raises:
        AssertionError: the notebook has no setup cell, or not exactly one
            explorer-logic cell.
    """
    notebook = BOOK / chapter / f"{chapter}.ipynb"
    nb = nbformat.read(str(notebook), as_version=4)
    setup = [c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "setup"]
    assert len(setup) == 1, f"{notebook.name}: expected one setup cell, found {len(setup)}"
    logic = [c for c in nb.cells if c.cell_type == "code" and c.source.lstrip().startswith(MARKER)]
    assert len(logic) == 1, f"{notebook.name}: expected one cell starting with {MARKER!r}, found {len(logic)}"
    namespace = {"__name__": f"ch{chapter[:2]}_explorer"}
    exec(compile(setup[0].source, f"<{chapter} setup cell>", "exec"), namespace)
    exec(compile(logic[0].source, f"<{chapter} explorer-logic cell>", "exec"), namespace)
    return namespace
