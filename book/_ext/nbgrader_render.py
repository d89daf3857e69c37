"""Render nbgrader source notebooks as book pages: the rules live here, not in cell tags.

The chapter notebooks are nbgrader *source* notebooks: their cells carry
``metadata.nbgrader`` (``solution``, ``grade``, ``grade_id``, ``points``, ``locked``).
Before myst-nb parses and executes a notebook, the Sphinx ``source-read`` event
hands us its JSON text and we rewrite it:

(a) the region between ``### BEGIN HIDDEN TESTS`` and ``### END HIDDEN TESTS`` is
    moved out of its cell into a cell of its own right after it, tagged
    ``remove-cell``: the build *executes* the hidden checks (once, in the same
    kernel, in the same order; this is the one execution of the chapter per test
    run, see ``tests/book/test_executed_chapters.py``), but a removed cell reaches
    neither the page, nor its outputs, nor the search index. The visible part of a
    test cell stays; a cell left empty is removed from the page. The notebook the
    download button offers is written separately, with the hidden regions *cut*;
(b) solution cells (``nbgrader.solution == true``) get the ``hide-input`` tag and the
    cell-level prompts "Show solution" / "Hide solution"; a markdown solution cell
    is wrapped in a collapsed "Solution" dropdown (web edition, the default);
(c) with ``BOOK_EDITION=course`` (``make book EDITION=course``) markdown solution
    cells are removed, and the code of solution cells is taken off the page after
    parsing (``doctree-read``): the cells still execute, so later cells work.
The ``### BEGIN SOLUTION`` / ``### END SOLUTION`` marker lines are dropped from the
shown code (they are comments; execution is unchanged).

Code cells are rewritten identically in both editions. jupyter-cache hashes every
code cell's source *and metadata*, so this is what lets ``make book EDITION=course``
reuse the web edition's executions instead of running every chapter again.

The chapters import the reference package and the checks (``solutions/``,
``autograder/``), which jupyter-cache cannot see. A fingerprint of those files goes
into the first code cell's metadata (``book_build.inputs``), and a change of it makes
Sphinx re-read every nbgrader notebook (``env-get-outdated``): a change to the packages
re-executes the chapters once, as a change to the notebook does.

Sphinx copies each page's *original* source into ``_build/html/_sources/`` (that is
what the page's download button offers), which would leak the hidden tests. After the
build the copies of nbgrader notebooks are overwritten: with the rendered notebook
(hidden regions cut) in the web edition, and with the student version (solutions
replaced by nbgrader's stubs, as ``nbgrader generate_assignment`` does) in the course
edition.

It also sets ``TRANSFORMER_BOOK_STATIC=1`` in the environment the notebook kernels
inherit, so ``solutions.figures.plots.show_explorer`` draws explorers as static figures.

``render_notebook`` is a pure function on the notebook dict, tested in
``tests/book/test_nbgrader_render.py``.
"""
from __future__ import annotations

import copy
import json
import os
import re

EDITIONS = ("web", "course")
STATIC_ENV_VAR = "TRANSFORMER_BOOK_STATIC"
EDITION_ENV_VAR = "BOOK_EDITION"

BEGIN_HIDDEN = "BEGIN HIDDEN TESTS"
END_HIDDEN = "END HIDDEN TESTS"
SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")

BEGIN_SOLUTION = "BEGIN SOLUTION"
END_SOLUTION = "END SOLUTION"
CODE_STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
TEXT_STUB = "YOUR ANSWER HERE"

# Folders (relative to the book's root) whose files the chapters' execution depends on.
EXECUTION_INPUTS = ("solutions", "autograder")
INPUTS_KEY = "book_build"

SHOW_PROMPT = "Show solution"
HIDE_PROMPT = "Hide solution"


class HiddenTestsError(ValueError):
    """A cell's hidden-test markers do not pair up (so nothing could be stripped safely)."""


def _source_text(cell):
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _cell_name(cell, index):
    grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    return f"cell {index}" + (f" ({grade_id!r})" if grade_id else "")


def split_hidden_tests(text, where="cell"):
    """Split a cell's source into its visible and hidden runs of lines, in order.

    Args:
        text: the cell source.
        where: a description of the cell for error messages.

    Returns:
        list[tuple[bool, str]]: ``(hidden, source)`` pairs, alternating, markers
        dropped, in the order of the source; empty runs are left out.

    Raises:
        HiddenTestsError: on a begin without end, an end without begin, nesting,
            or an indented begin marker (a hidden region inside a block cannot
            run as a cell of its own).
    """
    runs, current, hidden = [], [], False

    def close():
        source = "".join(current).rstrip("\n")
        if source.strip():
            runs.append((hidden, source))
        current.clear()

    for line in text.splitlines(keepends=True):
        if BEGIN_HIDDEN in line:
            if hidden:
                raise HiddenTestsError(f"{where}: nested '{BEGIN_HIDDEN}'")
            if line[:1].isspace():
                raise HiddenTestsError(f"{where}: '{BEGIN_HIDDEN}' is indented; hidden tests must "
                                       "start at the top level of the cell")
            close()
            hidden = True
            continue
        if END_HIDDEN in line:
            if not hidden:
                raise HiddenTestsError(f"{where}: '{END_HIDDEN}' without '{BEGIN_HIDDEN}'")
            close()
            hidden = False
            continue
        current.append(line)
    if hidden:
        raise HiddenTestsError(f"{where}: '{BEGIN_HIDDEN}' without '{END_HIDDEN}'")
    close()
    return runs


def strip_hidden_tests(text, where="cell"):
    """Remove every ``### BEGIN HIDDEN TESTS`` … ``### END HIDDEN TESTS`` region, markers included.

    Args:
        text: the cell source.
        where: a description of the cell for error messages.

    Returns:
        str: the source without the hidden regions.

    Raises:
        HiddenTestsError: on a begin without end, an end without begin, or nesting.
    """
    return _replace_regions(text, BEGIN_HIDDEN, END_HIDDEN, "", where, HiddenTestsError)


def _replace_regions(text, begin, end, stub, where, error):
    """Replace each ``begin`` … ``end`` region, marker lines included, with the lines of
    ``stub`` indented like its ``begin`` line (``""``: the region goes); trailing
    newlines stripped.

    Raises:
        error: on a begin without end, an end without begin, or nesting.
    """
    kept, inside = [], False
    for line in text.splitlines(keepends=True):
        if begin in line:
            if inside:
                raise error(f"{where}: nested '{begin}'")
            inside = True
            indent = line[: len(line) - len(line.lstrip())]
            kept.extend(indent + stub_line + "\n" for stub_line in stub.splitlines())
            continue
        if end in line:
            if not inside:
                raise error(f"{where}: '{end}' without '{begin}'")
            inside = False
            continue
        if not inside:
            kept.append(line)
    if inside:
        raise error(f"{where}: '{begin}' without '{end}'")
    return "".join(kept).rstrip("\n")


# The metadata key that marks a cell made by moving hidden tests out of a test cell.
HIDDEN_CELL_KEY = "nbgrader_render"


def _hidden_test_cells(cell, index, where):
    """The cells that replace a test cell when its hidden tests are to run: see (a).

    Returns:
        list[dict]: the cell with its visible lines (``remove-cell`` when it has none),
        then, in source order, one ``remove-cell`` cell per hidden region and one cell
        per later visible run.
    """
    runs = split_hidden_tests(_source_text(cell), where=where)
    grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or f"cell {index}"
    first = copy.deepcopy(cell)
    if runs and not runs[0][0]:
        first["source"] = runs.pop(0)[1]
    else:
        first["source"] = ""
        _add_tag(first, "remove-cell")
    cells = [first]
    for number, (hidden, source) in enumerate(runs, start=1):
        metadata = {k: v for k, v in copy.deepcopy(cell.get("metadata", {})).items() if k != "nbgrader"}
        if hidden:
            metadata = {"tags": ["remove-cell"], HIDDEN_CELL_KEY: {"hidden_tests_of": grade_id}}
        extra = {"cell_type": "code", "execution_count": None, "metadata": metadata,
                 "outputs": [], "source": source}
        if "id" in cell:
            suffix = f"-h{number}"
            extra["id"] = str(cell["id"])[: 64 - len(suffix)] + suffix
        cells.append(extra)
    return cells


def _drop_solution_markers(text):
    lines = [line for line in text.splitlines(keepends=True)
             if line.strip() not in SOLUTION_MARKERS]
    return "".join(lines).rstrip("\n")


def _add_tag(cell, tag):
    tags = cell.setdefault("metadata", {}).setdefault("tags", [])
    if tag not in tags:
        tags.append(tag)


def _wrap_in_dropdown(markdown):
    """Wrap markdown in a collapsed MyST admonition titled "Solution"."""
    longest = max((len(run) for run in re.findall(r"`+", markdown)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{{admonition}} Solution\n:class: dropdown\n\n{markdown}\n{fence}"


def inputs_fingerprint(root, folders=EXECUTION_INPUTS):
    """A SHA-256 of every file under ``root/<folder>`` (paths and bytes; caches skipped).

    Args:
        root: the book's root folder.
        folders: the folders the chapters' execution depends on.

    Returns:
        str: hex digest; the same for the same files, whatever their modification times.
    """
    import hashlib
    from pathlib import Path

    digest = hashlib.sha256()
    for folder in folders:
        base = Path(root) / folder
        files = sorted(p for p in base.rglob("*") if p.is_file()
                       and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo"))
        for path in files:
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def render_notebook(nb, edition="web", where="notebook", hidden="strip", inputs=None):
    """Apply the book's rendering rules to one nbgrader source notebook.

    Args:
        nb: the notebook as a dict (nbformat 4 JSON); it is not modified.
        edition: ``"web"`` (solutions folded) or ``"course"`` (solutions removed).
        where: the notebook's name, used in error messages.
        hidden: ``"strip"`` cuts the hidden tests out (the notebook offered for
            download); ``"run"`` moves them into ``remove-cell`` cells of their own,
            executed by the build but never shown (the notebook the build parses).
        inputs: the :func:`inputs_fingerprint` to record in the first code cell's
            metadata (so jupyter-cache re-executes when the packages change), or None.

    Returns:
        dict: a new notebook dict with hidden tests stripped or set apart and solution
        cells tagged. Code cells come out the same in both editions (see the module doc).

    Raises:
        ValueError: for an unknown edition or ``hidden`` mode, or unpaired hidden-test markers.
    """
    if edition not in EDITIONS:
        raise ValueError(f"edition must be one of {EDITIONS}, got {edition!r}")
    if hidden not in ("strip", "run"):
        raise ValueError(f"hidden must be 'strip' or 'run', got {hidden!r}")
    nb = copy.deepcopy(nb)
    cells = []
    for index, cell in enumerate(nb.get("cells", [])):
        name = f"{where}, {_cell_name(cell, index)}"
        original = _source_text(cell)
        source = original
        extra_cells = []
        if BEGIN_HIDDEN in source or END_HIDDEN in source:
            if hidden == "run" and cell.get("cell_type") == "code":
                first, *extra_cells = _hidden_test_cells(cell, index, name)
                cell["metadata"] = first["metadata"]
                source = first["source"]
            else:
                source = strip_hidden_tests(source, where=name)
                if not source.strip():
                    _add_tag(cell, "remove-cell")
        nbgrader = cell.get("metadata", {}).get("nbgrader", {})
        if nbgrader.get("solution"):
            if cell.get("cell_type") == "code":
                # The same in both editions: the course edition takes the code off the
                # page after parsing (_remove_solution_code), so the cache is shared.
                source = _drop_solution_markers(source)
                _add_tag(cell, "hide-input")
                prompts = cell["metadata"].setdefault("mystnb", {})
                prompts["code_prompt_show"] = SHOW_PROMPT
                prompts["code_prompt_hide"] = HIDE_PROMPT
            elif cell.get("cell_type") == "markdown":
                if edition == "web":
                    source = _wrap_in_dropdown(source)
                else:
                    _add_tag(cell, "remove-cell")
        if source != original:
            cell["source"] = source
        cells.append(cell)
        cells.extend(extra_cells)
    if inputs is not None:
        first_code = next((c for c in cells if c.get("cell_type") == "code"), None)
        if first_code is not None:
            first_code.setdefault("metadata", {})[INPUTS_KEY] = {"inputs": inputs}
    if "cells" in nb:
        nb["cells"] = cells
    return nb


def _replace_solution_regions(text, stub, where):
    """Replace each BEGIN/END SOLUTION region with ``stub`` (indented like its marker).

    A solution cell without markers is replaced as a whole, like nbgrader does.
    """
    if BEGIN_SOLUTION not in text and END_SOLUTION not in text:
        return stub
    return _replace_regions(text, BEGIN_SOLUTION, END_SOLUTION, stub, where, ValueError)


def student_notebook(nb, where="notebook"):
    """The student version of a source notebook: hidden tests and solutions removed.

    Solution regions become nbgrader's stubs (``raise NotImplementedError()`` in code,
    ``YOUR ANSWER HERE`` in markdown); outputs and execution counts are cleared.

    Args:
        nb: the notebook as a dict (nbformat 4 JSON); it is not modified.
        where: the notebook's name, used in error messages.

    Returns:
        dict: the student notebook.

    Raises:
        ValueError: for unpaired hidden-test or solution markers.
    """
    nb = copy.deepcopy(nb)
    for index, cell in enumerate(nb.get("cells", [])):
        name = f"{where}, {_cell_name(cell, index)}"
        source = _source_text(cell)
        if BEGIN_HIDDEN in source or END_HIDDEN in source:
            source = strip_hidden_tests(source, where=name)
        if cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            stub = CODE_STUB if cell.get("cell_type") == "code" else TEXT_STUB
            source = _replace_solution_regions(source, stub, where=name)
        cell["source"] = source
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    return nb


def current_edition():
    """The edition asked for by ``BOOK_EDITION`` (default ``"web"``).

    Raises:
        ValueError: when ``BOOK_EDITION`` names no known edition.
    """
    edition = os.environ.get(EDITION_ENV_VAR, "web").strip() or "web"
    if edition not in EDITIONS:
        raise ValueError(f"{EDITION_ENV_VAR} must be one of {EDITIONS}, got {edition!r}")
    return edition


def _on_source_read(app, docname, source):
    path = str(app.env.doc2path(docname))
    if not path.endswith(".ipynb"):
        return
    nb = json.loads(source[0])
    if not any("nbgrader" in cell.get("metadata", {}) for cell in nb.get("cells", [])):
        return
    rendered = render_notebook(nb, edition=app.config.book_edition, where=os.path.relpath(path),
                               hidden="run", inputs=_inputs(app))
    source[0] = json.dumps(rendered, ensure_ascii=False, indent=1)
    app.env.nbgrader_notebooks = getattr(app.env, "nbgrader_notebooks", set()) | {docname}


def _inputs(app):
    """The packages' fingerprint, computed once per build."""
    if getattr(app, "_book_inputs", None) is None:
        app._book_inputs = inputs_fingerprint(app.srcdir)
    return app._book_inputs


def _outdated_by_inputs(app, env, added, changed, removed):
    """Re-read every nbgrader notebook when the packages they import changed since the last build."""
    current, previous = _inputs(app), getattr(env, "nbgrader_inputs", None)
    env.nbgrader_inputs = current
    if previous is None or previous == current:
        return []
    return sorted(getattr(env, "nbgrader_notebooks", set()) - set(removed) - set(added) - set(changed))


def _replace_downloadable_sources(app, exception):
    """Overwrite ``_sources/<doc>.ipynb`` copies of nbgrader notebooks (see the module doc)."""
    if exception is not None or app.builder.format != "html":
        return
    for docname in sorted(getattr(app.env, "nbgrader_notebooks", ())):
        path = str(app.env.doc2path(docname))
        target = os.path.join(app.outdir, "_sources", docname + ".ipynb")
        if not os.path.exists(path) or not os.path.exists(target):
            continue
        with open(path, encoding="utf-8") as f:
            nb = json.load(f)
        where = os.path.relpath(path)
        if app.config.book_edition == "course":
            shown = student_notebook(nb, where=where)
        else:
            shown = render_notebook(nb, edition="web", where=where, hidden="strip")
        with open(target, "w", encoding="utf-8") as f:
            json.dump(shown, f, ensure_ascii=False, indent=1)
            f.write("\n")
    # A stamp saying which edition is in the folder, written only for a build without
    # warnings (the strict build fails on any): the tests rebuild when it is missing.
    stamp = os.path.join(app.outdir, ".book-edition")
    if getattr(app, "_warncount", 0) == 0:
        with open(stamp, "w", encoding="utf-8") as f:
            f.write(app.config.book_edition + "\n")
    elif os.path.exists(stamp):
        os.remove(stamp)


def _merge_notebook_names(app, env, docnames, other):
    env.nbgrader_notebooks = getattr(env, "nbgrader_notebooks", set()) | getattr(
        other, "nbgrader_notebooks", set())


def _forget_notebook(app, env, docname):
    env.nbgrader_notebooks = getattr(env, "nbgrader_notebooks", set()) - {docname}


def _remove_solution_code(app, doctree):
    """Course edition: take the code of solution cells off the page, keep their outputs.

    myst-nb records each code cell's metadata on its ``cell_code`` container; the
    input is the child container ``cell_code_source``. Dropping ``hide_mode`` stops
    myst-nb from wrapping a (now missing) input behind "Show solution".
    """
    if app.config.book_edition != "course":
        return
    from docutils import nodes

    for node in list(doctree.findall(nodes.container)):
        metadata = node.get("cell_metadata") or {}
        if node.get("nb_element") != "cell_code" or not metadata.get("nbgrader", {}).get("solution"):
            continue
        node.children = [child for child in node.children
                         if child.get("nb_element") != "cell_code_source"]
        node.attributes.pop("hide_mode", None)
        if not node.children:
            node.parent.remove(node)


def setup(app):
    """Sphinx entry point: register the edition and the ``source-read`` hook."""
    from sphinx.errors import ConfigError

    try:
        edition = current_edition()
    except ValueError as err:
        raise ConfigError(str(err)) from err
    # "env": switching editions re-reads every page instead of reusing the old pages.
    app.add_config_value("book_edition", edition, "env")
    # Inherited by the notebook kernels started below this process.
    os.environ[STATIC_ENV_VAR] = "1"
    app.connect("source-read", _on_source_read)
    app.connect("env-get-outdated", _outdated_by_inputs)
    app.connect("doctree-read", _remove_solution_code)
    app.connect("env-purge-doc", _forget_notebook)
    app.connect("env-merge-info", _merge_notebook_names)
    app.connect("build-finished", _replace_downloadable_sources)
    app.connect("html-page-context", _tell_pages_the_edition)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}


def _tell_pages_the_edition(app, pagename, templatename, context, doctree):
    context.setdefault("metatags", "")
    context["metatags"] += f'\n<meta name="book-edition" content="{app.config.book_edition}" />'
