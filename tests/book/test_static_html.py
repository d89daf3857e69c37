"""Static checks of the built HTML: self-contained, no hidden tests, every chapter built."""
import html
import json
import re
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from book_helpers import ROOT, built_pages, load_extension, toc_chapters

pytestmark = pytest.mark.book

EXTERNAL = re.compile(r"^\s*(?:[a-z][a-z0-9+.-]*:)?//", re.IGNORECASE)  # http://, https://, //host


class _Resources(HTMLParser):
    """Collect what a page loads: scripts, stylesheets, images, frames, preloads, inline CSS URLs."""

    def __init__(self):
        super().__init__()
        self.loads = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "script" and attrs.get("src"):
            self.loads.append(("script", attrs["src"]))
        elif tag == "link":
            rel = (attrs.get("rel") or "").lower().split()
            if {"stylesheet", "preload", "modulepreload", "prefetch", "preconnect", "icon"} & set(rel):
                self.loads.append(("link " + " ".join(rel), attrs.get("href") or ""))
        elif tag in ("img", "iframe", "source", "audio", "video", "embed") and attrs.get("src"):
            self.loads.append((tag, attrs["src"]))
        elif tag == "object" and attrs.get("data"):
            self.loads.append((tag, attrs["data"]))
        style = attrs.get("style") or ""
        for url in re.findall(r"url\(\s*['\"]?([^'\")]+)", style):
            self.loads.append(("inline style", url))


def test_no_page_loads_anything_from_outside(built_book):
    offenders = []
    for page in built_pages(built_book):
        parser = _Resources()
        parser.feed(page.read_text(encoding="utf-8"))
        for kind, url in parser.loads:
            if EXTERNAL.match(url):
                offenders.append(f"{page.relative_to(built_book)}: {kind} {url}")
    assert not offenders, "external resources:\n" + "\n".join(offenders)


def test_stylesheets_import_nothing_from_outside(built_book):
    offenders = []
    for css in (built_book / "_static").rglob("*.css"):
        text = css.read_text(encoding="utf-8", errors="replace")
        for url in re.findall(r"(?:url\(\s*['\"]?|@import\s+['\"])([^'\")\s]+)", text):
            if EXTERNAL.match(url):
                offenders.append(f"{css.relative_to(built_book)}: {url}")
    assert not offenders, "stylesheets loading external resources:\n" + "\n".join(offenders)


def test_offline_libraries_are_served_by_the_book(built_book):
    vendor = built_book / "_static" / "vendor"
    for name in ("mathjax/tex-mml-chtml.js", "require.js", "html-manager/embed-amd.js"):
        assert (vendor / name).is_file(), f"{name} missing from _static/vendor"
    fonts = list((vendor / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff"))
    assert fonts, "MathJax's CHTML fonts were not copied"
    notation = (built_book / "book" / "notation.html").read_text(encoding="utf-8")
    assert "_static/vendor/mathjax/tex-mml-chtml.js" in notation


def test_hidden_tests_are_nowhere_in_the_build(built_book):
    leaks = []
    for path in built_book.rglob("*"):
        if path.suffix in (".html", ".ipynb", ".js", ".txt", ".md") and "_static" not in path.parts:
            if "HIDDEN TESTS" in path.read_text(encoding="utf-8", errors="replace"):
                leaks.append(str(path.relative_to(built_book)))
    assert not leaks, f"hidden tests leaked into: {leaks}"


def _hidden_lines():
    """Each chapter's hidden-check lines that appear nowhere in its visible cells."""
    render = load_extension("nbgrader_render")
    lines = {}
    for notebook in toc_chapters():
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        visible, hidden = set(), set()
        for cell in cells:
            text = render._source_text(cell)
            for is_hidden, run in (render.split_hidden_tests(text) if render.BEGIN_HIDDEN in text
                                   else [(False, text)]):
                (hidden if is_hidden else visible).update(
                    line.strip() for line in run.splitlines() if len(line.strip()) >= 12)
        lines[notebook.relative_to(ROOT).as_posix()] = hidden - visible
    return lines


def test_hidden_check_code_is_nowhere_in_the_build(built_book):
    """The build runs the hidden checks (in removed cells): their code must not be published.

    Pages are compared as text (tags stripped, entities decoded), so highlighted code
    split into ``<span>``s is still found.
    """
    secrets = {line: name for name, lines in _hidden_lines().items() for line in lines}
    if any("BEGIN HIDDEN TESTS" in p.read_text(encoding="utf-8") for p in toc_chapters()):
        assert secrets, "the chapters have hidden checks, but no line of them to look for"
    leaks = []
    for path in built_book.rglob("*"):
        if path.suffix not in (".html", ".ipynb", ".js", ".txt", ".md", ".json") or "_static" in path.parts:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if path.suffix == ".html":
            text = html.unescape(re.sub(r"<[^>]+>", "", text))
        leaks += [f"{path.relative_to(built_book)}: {line!r} (from {secrets[line]})"
                  for line in secrets if line in text]
    assert not leaks, "hidden check code published:\n" + "\n".join(leaks)


def _committed_chapters():
    """Chapter notebooks tracked by git (all on disk when this is not a git checkout)."""
    on_disk = sorted((ROOT / "book").glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb"))
    try:
        tracked = set(subprocess.run(["git", "ls-files", "book/*.ipynb"], cwd=ROOT, check=True,
                                     capture_output=True, text=True).stdout.split())
    except (OSError, subprocess.CalledProcessError):
        return on_disk
    return [p for p in on_disk if p.relative_to(ROOT).as_posix() in tracked]


def test_every_committed_chapter_is_in_the_book(built_book):
    chapters = [p.relative_to(ROOT).with_suffix("").as_posix() for p in _committed_chapters()]
    toc = (ROOT / "_toc.yml").read_text(encoding="utf-8")
    missing_from_toc = [c for c in chapters if f"file: {c}" not in toc]
    assert not missing_from_toc, f"committed chapters not listed in _toc.yml: {missing_from_toc}"
    for chapter in chapters:
        page = built_book / (chapter + ".html")
        assert page.is_file(), f"{chapter} was not built"
        assert "Show solution" in page.read_text(encoding="utf-8"), f"{chapter}: no folded solution"


def test_only_toc_pages_are_built(built_book):
    stray = [p.relative_to(built_book).as_posix() for p in built_pages(built_book)
             if p.relative_to(built_book).parts[0] not in ("book", "index.html", "genindex.html", "search.html")]
    assert not stray, f"pages built from outside the toc: {stray}"
    assert not (built_book / "README.html").exists()
    assert not list(Path(built_book).glob("tests/**/*.html"))
