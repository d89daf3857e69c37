"""The chapter pages' launch buttons (Colab, JupyterHub) open the student's notebook.

No book build here: the book's own configuration (``_config.yml`` through Jupyter Book's
``get_final_config``, as ``make book`` reads it) goes through sphinx-book-theme's own
functions that write the buttons (``update_context_with_repository_info``,
``add_launch_buttons``), for every chapter page, in both editions (one configuration
serves both). Each URL is then followed to the file it names: the branch ``student`` is
the release of every chapter laid out exactly as ``.github/workflows/book.yml`` publishes
it (``autograder release --out <branch>/book``: ``released_chapters``, made once per run
for the group ``"releases"``), and the file must be the released student notebook: plain
Markdown, no solution, no hidden test, no nbgrader marker.
"""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from urllib.parse import parse_qs, urlsplit

import nbformat
import pytest
from jupyter_book.config import get_final_config
from sphinx_book_theme.header_buttons import update_context_with_repository_info
from sphinx_book_theme.header_buttons.launch import add_launch_buttons

from autograder.book import MARKERS, source_notebook
from autograder.release import leaked_lines
from book_helpers import ROOT

# the release of every chapter, with its wheels (``released_chapters``), on the group's worker
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("releases")]

CHAPTERS = ["04_self_attention", "10_inference"]


def _theme_options() -> dict:
    config, _ = get_final_config(user_yaml=ROOT / "_config.yml",
                                 cli_config={"globaltoc_path": str(ROOT / "_toc.yml"), "latex_individualpages": False},
                                 sourcedir=ROOT)
    return config["html_theme_options"]


def launch_urls(chapter: str) -> dict[str, str]:
    """The launch buttons sphinx-book-theme writes on ``chapter``'s page: ``{text: url}``."""
    options = _theme_options()
    pagename = f"book/{chapter}/{chapter}"
    config = _Config(html_context={}, html_theme_options=options)
    app = SimpleNamespace(
        config=config,
        builder=SimpleNamespace(theme_options=options),
        env=SimpleNamespace(doc2path=lambda name: str(ROOT / f"{name}.ipynb"), metadata={pagename: {"kernelspec": {}}}),
        outdir=str(ROOT / "_build" / "html"),
    )
    update_context_with_repository_info(app)
    context = dict(config.html_context, pagename=pagename, header_buttons=[], sourcename=f"{pagename}.ipynb",
                   page_source_suffix=".ipynb")
    add_launch_buttons(app, pagename, "page.html", context, None)
    (group,) = [b for b in context["header_buttons"] if b.get("label") == "launch-buttons"]
    return {button["text"]: button["url"] for button in group["buttons"]}


class _Config(dict):
    """Sphinx's config: read both as ``config.name`` and ``config["name"]``."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def _file_of(url: str, branches: dict[str, Path]) -> Path:
    """The file a Colab or nbgitpuller URL opens, in the local copy of its branch."""
    parts = urlsplit(url)
    if parts.netloc == "colab.research.google.com":
        _, provider, org, repo, blob, branch, *path = parts.path.split("/")
        assert (provider, blob) == ("github", "blob"), url
        return branches[branch].joinpath(*path)
    query = parse_qs(parts.query)
    assert parts.path.endswith("/hub/user-redirect/git-pull"), url
    (branch,), (urlpath,) = query["branch"], query["urlpath"]
    repo = query["repo"][0].rstrip("/").rsplit("/", 1)[1]
    prefix = f"lab/tree/{repo}/"
    assert urlpath.startswith(prefix), url
    return branches[branch] / urlpath[len(prefix):]


@pytest.fixture(scope="module")
def student_branch(released_chapters) -> Path:
    """The branch `student` as book.yml publishes it: ``<branch>/book`` is the release of every chapter."""
    out, _ = released_chapters
    return out.parent


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_launch_buttons_open_the_released_student_notebook(student_branch, chapter):
    urls = launch_urls(chapter)
    assert set(urls) == {"Colab", "JupyterHub"}, urls
    source = nbformat.read(str(source_notebook(chapter)), as_version=4)
    for name, url in urls.items():
        path = _file_of(url, {"student": student_branch})
        assert path.is_file(), f"{name}: {url} names {path}, which the branch `student` does not have"
        released = nbformat.read(str(path), as_version=4)
        assert released.metadata["transformer_book"] == {"chapter": chapter, "edition": "student"}
        text = path.read_text(encoding="utf-8")
        assert not [m for m in MARKERS if m in text], f"{name}: {path} shows an nbgrader marker"
        assert leaked_lines(source, released) == [], f"{name}: {path} holds a solution or hidden-test line"
        assert ":::{" not in text and "{cite" not in text, f"{name}: {path} has MyST that Colab shows as text"
        # the notebook's figures resolve beside it, and so does the chapter's wheel
        assert (path.parent / "figures").is_dir() and list(path.parent.glob("transformer_book_student-*.whl"))


def test_the_hub_gets_the_student_branch_only(student_branch):
    """What nbgitpuller clones into a student's home: the branch `student`, which holds
    the released notebooks and wheels and nothing of solutions/ or the checks."""
    for url in launch_urls(CHAPTERS[0]).values():
        assert "branch=student" in url or "/blob/student/" in url
    names = {p.relative_to(student_branch).parts[0] for p in student_branch.rglob("*")}
    assert names == {"book"}
    found = {p.name for p in student_branch.rglob("*")}
    assert "solutions" not in found and "checks" not in found and not [n for n in found if n.endswith(".py")]
