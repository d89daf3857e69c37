"""Render nbgrader source notebooks as book pages: the rules live here, not in cell tags.

The chapter notebooks are nbgrader *source* notebooks: their cells carry
``metadata.nbgrader`` (``solution``, ``grade``, ``grade_id``, ``points``, ``locked``).
Before myst-nb parses and executes a notebook, the Sphinx ``source-read`` event
hands us its JSON text and we rewrite it:

(a) the region between ``### BEGIN HIDDEN TESTS`` and ``### END HIDDEN TESTS`` is
    cut out of every cell, so hidden checks never reach the HTML (nor the executed
    notebook the book offers for download); the visible part of a test cell stays.
    A cell left empty by the cut is removed from the page;
(b) solution cells (``nbgrader.solution == true``) get the ``hide-input`` tag and the
    cell-level prompts "Show solution" / "Hide solution" (web edition, the default);
    a markdown solution cell is wrapped in a collapsed "Solution" dropdown;
(c) with ``BOOK_EDITION=course`` (``make book EDITION=course``) solution code cells
    get ``remove-input`` instead: they still execute, so later cells work, but their
    code is not on the page; markdown solution cells are removed.
The ``### BEGIN SOLUTION`` / ``### END SOLUTION`` marker lines are dropped from the
shown code (they are comments; execution is unchanged).

Sphinx copies each page's *original* source into ``_build/html/_sources/`` (that is
what the page's download button offers), which would leak the hidden tests. After the
build the copies of nbgrader notebooks are overwritten: with the rendered notebook in
the web edition, and with the student version (solutions replaced by nbgrader's
stubs, as ``nbgrader generate_assignment`` does) in the course edition.

It also sets ``TRANSFORMER_BOOK_STATIC=1`` in the environment the notebook kernels
inherit, so ``solutions.viz.show_explorer`` draws explorers as static figures.

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
    kept, hidden = [], False
    for line in text.splitlines(keepends=True):
        if BEGIN_HIDDEN in line:
            if hidden:
                raise HiddenTestsError(f"{where}: nested '{BEGIN_HIDDEN}'")
            hidden = True
            continue
        if END_HIDDEN in line:
            if not hidden:
                raise HiddenTestsError(f"{where}: '{END_HIDDEN}' without '{BEGIN_HIDDEN}'")
            hidden = False
            continue
        if not hidden:
            kept.append(line)
    if hidden:
        raise HiddenTestsError(f"{where}: '{BEGIN_HIDDEN}' without '{END_HIDDEN}'")
    return "".join(kept).rstrip("\n")


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


def render_notebook(nb, edition="web", where="notebook"):
    """Apply the book's rendering rules to one nbgrader source notebook.

    Args:
        nb: the notebook as a dict (nbformat 4 JSON); it is not modified.
        edition: ``"web"`` (solutions folded) or ``"course"`` (solutions removed).
        where: the notebook's name, used in error messages.

    Returns:
        dict: a new notebook dict with hidden tests stripped and solution cells
        tagged for the edition.

    Raises:
        ValueError: for an unknown edition or unpaired hidden-test markers.
    """
    if edition not in EDITIONS:
        raise ValueError(f"edition must be one of {EDITIONS}, got {edition!r}")
    nb = copy.deepcopy(nb)
    for index, cell in enumerate(nb.get("cells", [])):
        name = f"{where}, {_cell_name(cell, index)}"
        original = _source_text(cell)
        source = original
        if BEGIN_HIDDEN in source or END_HIDDEN in source:
            source = strip_hidden_tests(source, where=name)
            if not source.strip():
                _add_tag(cell, "remove-cell")
        nbgrader = cell.get("metadata", {}).get("nbgrader", {})
        if nbgrader.get("solution"):
            if cell.get("cell_type") == "code":
                source = _drop_solution_markers(source)
                if edition == "web":
                    _add_tag(cell, "hide-input")
                    prompts = cell["metadata"].setdefault("mystnb", {})
                    prompts["code_prompt_show"] = SHOW_PROMPT
                    prompts["code_prompt_hide"] = HIDE_PROMPT
                else:
                    _add_tag(cell, "remove-input")
            elif cell.get("cell_type") == "markdown":
                if edition == "web":
                    source = _wrap_in_dropdown(source)
                else:
                    _add_tag(cell, "remove-cell")
        if source != original:
            cell["source"] = source
    return nb


def _replace_solution_regions(text, stub, where):
    """Replace each BEGIN/END SOLUTION region with ``stub`` (indented like its marker).

    A solution cell without markers is replaced as a whole, like nbgrader does.
    """
    if BEGIN_SOLUTION not in text and END_SOLUTION not in text:
        return stub
    kept, inside = [], False
    for line in text.splitlines(keepends=True):
        if BEGIN_SOLUTION in line:
            if inside:
                raise ValueError(f"{where}: nested '{BEGIN_SOLUTION}'")
            inside = True
            indent = line[: len(line) - len(line.lstrip())]
            kept.extend(indent + stub_line + "\n" for stub_line in stub.splitlines())
            continue
        if END_SOLUTION in line:
            if not inside:
                raise ValueError(f"{where}: '{END_SOLUTION}' without '{BEGIN_SOLUTION}'")
            inside = False
            continue
        if not inside:
            kept.append(line)
    if inside:
        raise ValueError(f"{where}: '{BEGIN_SOLUTION}' without '{END_SOLUTION}'")
    return "".join(kept).rstrip("\n")


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
    rendered = render_notebook(nb, edition=app.config.book_edition, where=os.path.relpath(path))
    source[0] = json.dumps(rendered, ensure_ascii=False, indent=1)
    app.env.nbgrader_notebooks = getattr(app.env, "nbgrader_notebooks", set()) | {docname}


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
            shown = render_notebook(nb, edition="web", where=where)
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
    app.connect("env-purge-doc", _forget_notebook)
    app.connect("env-merge-info", _merge_notebook_names)
    app.connect("build-finished", _replace_downloadable_sources)
    app.connect("html-page-context", _tell_pages_the_edition)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}


def _tell_pages_the_edition(app, pagename, templatename, context, doctree):
    context.setdefault("metatags", "")
    context["metatags"] += f'\n<meta name="book-edition" content="{app.config.book_edition}" />'
