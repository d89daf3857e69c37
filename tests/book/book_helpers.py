"""Shared helpers of the book tests: paths, the rendering extension, building the book."""
from __future__ import annotations

import fcntl
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HTML = ROOT / "_build" / "html"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
EXT_DIR = ROOT / "book" / "_ext"
VENDOR = ROOT / "book" / "_vendor"

# Files whose change makes the built book out of date.
_SOURCE_GLOBS = ("_config.yml", "_toc.yml", "book/**/*", "solutions/**/*.py", "autograder/**/*.py")
_IGNORED_PARTS = {"node_modules", ".ipynb_checkpoints", "__pycache__"}


def load_extension(name):
    """Import ``book/_ext/<name>.py`` as a module (it is not a package)."""
    spec = importlib.util.spec_from_file_location(name, EXT_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def newest_source_mtime():
    """The modification time of the most recently changed file the book is built from."""
    newest = 0.0
    for pattern in _SOURCE_GLOBS:
        for path in ROOT.glob(pattern):
            if path.is_file() and not _IGNORED_PARTS.intersection(path.parts):
                newest = max(newest, path.stat().st_mtime)
    return newest


def book_is_fresh():
    """True when ``_build/html`` is a web-edition build newer than every source."""
    index, edition = HTML / "index.html", HTML / ".book-edition"
    if not index.exists() or not edition.exists():
        return False
    if edition.read_text().strip() != "web":
        return False
    return edition.stat().st_mtime >= newest_source_mtime()


def jupyter_book():
    """The ``jupyter-book`` executable of the running interpreter's environment."""
    exe = Path(sys.executable).with_name("jupyter-book")
    return str(exe) if exe.exists() else "jupyter-book"


def ensure_vendor():
    """Install the book's npm packages (``npm ci``) when they are missing."""
    stamp = VENDOR / "node_modules" / ".installed"
    if stamp.exists():
        return
    subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error"],
                   cwd=VENDOR, check=True)
    stamp.touch()


def ensure_book_built():
    """Build the web edition (strict, cached execution) unless a fresh build exists.

    Several pytest-xdist workers may ask at once: a file lock lets one build while
    the others wait, then they find the fresh build.

    Returns:
        Path: the ``_build/html`` folder.

    Raises:
        RuntimeError: with the end of the build log when the strict build fails.
    """
    HTML.parent.mkdir(parents=True, exist_ok=True)
    with open(HTML.parent / ".book-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if book_is_fresh():
                return HTML
            ensure_vendor()
            env = dict(os.environ, BOOK_EDITION="web")
            start = time.monotonic()
            result = subprocess.run(
                [jupyter_book(), "build", str(ROOT), "-W", "-n", "--keep-going", "--builder", "html"],
                cwd=ROOT, env=env, capture_output=True, text=True)
            if result.returncode != 0:
                (HTML / ".book-edition").unlink(missing_ok=True)  # never "fresh" after a failure
                log = (result.stdout + result.stderr)[-8000:]
                raise RuntimeError(f"the strict book build failed (exit {result.returncode}):\n{log}")
            print(f"built the book in {time.monotonic() - start:.0f}s")
            return HTML
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def built_pages(html=HTML):
    """Every HTML page of the built book (not the vendored libraries' files)."""
    skip = {"_static", "_sources", "_images", "reports"}
    return sorted(p for p in html.rglob("*.html") if not skip.intersection(p.relative_to(html).parts))
