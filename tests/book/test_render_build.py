"""Build a one-page book from the fixture notebook in both editions and read the HTML.

This runs the real chain (jupyter-book → Sphinx source-read → myst-nb parse and
execute) that the chapters go through, on a tiny notebook with known markers. The
two editions share one jupyter-cache, as ``make book`` and ``make book EDITION=course``
do: the notebook executes once, hidden checks included, and the course edition reuses
that execution. Each edition's book holds the same ``solutions/`` (whose fingerprint the
cache records), so a change to it is tested on the same books: the web edition built
again executes the notebook again, once.
"""
import os
import shutil
import subprocess

import pytest

from book_helpers import EXT_DIR, FIXTURES, executed_notebook, jupyter_book, load_extension

pytestmark = pytest.mark.slow

CONFIG = """\
title: fixture
only_build_toc_files: true
execute:
  execute_notebooks: cache
  cache: "{cache}"
  timeout: 120
  allow_errors: false
sphinx:
  local_extensions:
    nbgrader_render: {ext}
  config:
    nb_execution_show_tb: true
"""


def _build(tmp_path, edition):
    """Write the one-page book of ``edition`` under ``tmp_path`` (its ``solutions/``: ``VERSION = 1``)
    and build it; returns the page and its download."""
    src = tmp_path / edition
    (src / "solutions").mkdir(parents=True)
    (src / "solutions" / "reference.py").write_text("VERSION = 1\n")
    (src / "_config.yml").write_text(CONFIG.format(ext=EXT_DIR, cache=tmp_path / "jupyter_cache"))
    (src / "_toc.yml").write_text("format: jb-article\nroot: chapter\n")
    shutil.copy(FIXTURES / "nbgrader_chapter.ipynb", src / "chapter.ipynb")
    _jupyter_book(tmp_path, edition)
    html = (src / "_build" / "html" / "chapter.html").read_text(encoding="utf-8")
    download = (src / "_build" / "html" / "_sources" / "chapter.ipynb").read_text(encoding="utf-8")
    return html, download


def _jupyter_book(tmp_path, edition):
    """Build the book ``tmp_path/<edition>`` strictly; each execution of its notebook adds a line to
    ``tmp_path/executions.log``."""
    src = tmp_path / edition
    env = dict(os.environ, BOOK_EDITION=edition, FIXTURE_EXECUTIONS_LOG=str(tmp_path / "executions.log"))
    env.pop("TRANSFORMER_BOOK_STATIC", None)  # the extension must set it itself
    result = subprocess.run([jupyter_book(), "build", str(src), "-W", "-n", "--keep-going"],
                            cwd=src, env=env, capture_output=True, text=True)
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("render_build")


@pytest.fixture(scope="module")
def editions(build_dir):
    return {edition: _build(build_dir, edition) for edition in ("web", "course")}


def test_both_editions_share_one_execution(editions, build_dir):
    """The course edition finds the web edition's execution in the shared cache."""
    assert (build_dir / "executions.log").read_text().splitlines() == ["executed"]


def test_the_build_ran_the_hidden_checks(editions, build_dir):
    executed = executed_notebook(FIXTURES / "nbgrader_chapter.ipynb", build_dir / "jupyter_cache",
                                 load_extension("nbgrader_render"), root=build_dir / "web")
    assert executed is not None, "the cache holds no execution of the fixture notebook"
    printed = "".join(out.get("text", "") for cell in executed.cells if cell.cell_type == "code"
                      for out in cell.outputs)
    assert "\u2713 double HIDDEN-RAN" in printed  # the hidden check's own line
    assert printed.count("\u2713 double") == 2  # and the visible one


@pytest.mark.parametrize("edition", ["web", "course"])
def test_hidden_tests_reach_neither_the_page_nor_the_download(editions, edition):
    html, download = editions[edition]
    for text in (html, download):
        assert "HIDDEN-TEST-MARKER" not in text
        assert "ONLY-HIDDEN-MARKER" not in text
        assert "HIDDEN TESTS" not in text
    assert "check" in html and "\u2713 double" in html  # the visible check ran and shows
    assert "HIDDEN-RAN" not in html  # the hidden check ran (see above) but its output is not shown


@pytest.mark.parametrize("edition", ["web", "course"])
def test_notebook_executed_with_static_explorers(editions, edition):
    html, _ = editions[edition]
    assert "static explorers: 1" in html
    assert "double(21) = 42" in html  # the solution cell executed in both editions


def test_web_edition_folds_the_solution(editions):
    html, download = editions["web"]
    assert "SOLUTION-CODE-MARKER" in html
    assert "Show solution" in html
    assert "BEGIN SOLUTION" not in html
    assert "SOLUTION-PROSE-MARKER" in html and "dropdown" in html
    assert "SOLUTION-CODE-MARKER" in download


def test_course_edition_removes_the_solution(editions):
    html, download = editions["course"]
    assert "SOLUTION-CODE-MARKER" not in html
    assert "SOLUTION-PROSE-MARKER" not in html
    assert "Show solution" not in html
    assert "Write <code" in html  # the prompts stay
    # The download button offers the student notebook.
    assert "SOLUTION-CODE-MARKER" not in download and "SOLUTION-PROSE-MARKER" not in download
    assert "raise NotImplementedError()" in download


def test_a_failing_cell_fails_the_strict_build_naming_notebook_and_cell(tmp_path):
    import json

    nb = json.loads((FIXTURES / "nbgrader_chapter.ipynb").read_text(encoding="utf-8"))
    nb["cells"].append({"cell_type": "code", "execution_count": None, "id": "broken", "metadata": {},
                        "outputs": [], "source": "raise RuntimeError('BROKEN-CELL-MARKER')"})
    src = tmp_path / "broken"
    src.mkdir()
    (src / "_config.yml").write_text(CONFIG.format(ext=EXT_DIR, cache=tmp_path / "jupyter_cache"))
    (src / "_toc.yml").write_text("format: jb-article\nroot: chapter\n")
    (src / "chapter.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    result = subprocess.run([jupyter_book(), "build", str(src), "-W", "-n", "--keep-going"],
                            cwd=src, capture_output=True, text=True)
    log = result.stdout + result.stderr
    assert result.returncode != 0
    assert "chapter.ipynb: WARNING: Executing notebook failed" in log
    assert "raise RuntimeError('BROKEN-CELL-MARKER')" in log  # the failing cell's source


def test_a_change_to_the_packages_executes_the_notebook_again(editions, build_dir):
    """The chapters import solutions/ and autograder/: changing them re-executes, once. (The same
    packages executed nothing again: the course edition's build, test_both_editions_share_one_execution.)
    Last in the file: it changes the web edition's book, which the tests above read as built."""
    log = build_dir / "executions.log"
    before = log.read_text().count("executed")
    (build_dir / "web" / "solutions" / "reference.py").write_text("VERSION = 2\n")
    _jupyter_book(build_dir, "web")
    assert log.read_text().count("executed") == before + 1
