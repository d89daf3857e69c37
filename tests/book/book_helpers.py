"""Shared helpers of the book tests: paths, the rendering extension, building the book."""
from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import notebook_runs

ROOT = Path(__file__).resolve().parents[2]
HTML = ROOT / "_build" / "html"
#: Held by the process building the book (:func:`ensure_book_built`) while it builds.
BUILD_LOCK = ROOT / "_build" / ".book-build.lock"
# myst-nb's jupyter-cache: the one execution of each chapter that the build, the
# "executes top to bottom with its hidden checks" test and the browser test share.
JUPYTER_CACHE = ROOT / "_build" / ".jupyter_cache"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
EXT_DIR = ROOT / "book" / "_ext"
VENDOR = ROOT / "book" / "_vendor"
SLICED_JUPYTER_BOOK = Path(__file__).resolve().parent / "sliced_jupyter_book.py"

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
    with open(BUILD_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if book_is_fresh():
                return HTML
            ensure_vendor()
            # One torch thread per kernel: the other pytest worker keeps a core busy, and two
            # intra-op threads on the one core left wait on each other at every barrier (chapter
            # 9 executed in 368 s with two threads beside a busy worker; the same cells take
            # about 70 s with one). `make book`, alone on the machine, keeps torch's default.
            env = dict(os.environ, BOOK_EDITION="web", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
            start = time.monotonic()
            started_at = datetime.now(timezone.utc).replace(tzinfo=None)  # jupyter-cache stores naive UTC
            # jupyter-book, its executions waited on in slices and kept with their cell timings
            result = subprocess.run(
                [sys.executable, str(SLICED_JUPYTER_BOOK), "build", str(ROOT), "-W", "-n", "--keep-going",
                 "--builder", "html"], cwd=ROOT, env=env, capture_output=True, text=True)
            if result.returncode != 0:
                (HTML / ".book-edition").unlink(missing_ok=True)  # never "fresh" after a failure
                log = (result.stdout + result.stderr)[-8000:]
                raise RuntimeError(f"the strict book build failed (exit {result.returncode}):\n{log}")
            print(f"built the book in {time.monotonic() - start:.0f}s")
            _count_executions(since=started_at)
            return HTML
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def after_any_book_build() -> bool:
    """Wait for a book build under way (another xdist worker's, holding :data:`BUILD_LOCK`) to
    end, without starting one; then say whether a fresh build is there (:func:`book_is_fresh`).

    For a test that reads what the build's executions leave beside the pages (chapter 9's
    saved run) and does without it when there is none: nothing is built here.
    """
    BUILD_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(BUILD_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)  # granted once no build holds it exclusively
        try:
            return book_is_fresh()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _count_executions(since: datetime, cache_dir=JUPYTER_CACHE) -> None:
    """Add to the session's ledger (:mod:`notebook_runs`) each notebook this build executed: the
    jupyter-cache records made since ``since``, naive UTC (the build stores each execution that
    succeeded; one that failed fails the build)."""
    from jupyter_cache import get_cache

    if not Path(cache_dir).is_dir():
        return
    for record in get_cache(str(cache_dir)).list_cache_records():
        created = record.created
        if created.tzinfo is not None:
            created = created.astimezone(timezone.utc).replace(tzinfo=None)
        if created >= since:
            notebook_runs.record(Path(record.uri).stem, "book build", (record.data or {}).get("execution_seconds") or 0.0)


def toc_chapters(root=ROOT):
    """The chapter notebooks listed in ``_toc.yml``, in book order (``book/NN_x/NN_x.ipynb``)."""
    import yaml

    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    files = []

    def walk(entries):
        for entry in entries or ():
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections"))
            for part_or_chapter in ("parts", "chapters"):
                walk(entry.get(part_or_chapter))

    walk([toc])
    notebooks = [root / (name + ".ipynb") for name in files]
    return [nb for nb in notebooks if nb.is_file() and nb.parent.name[:2].isdigit()]


def executed_notebook(source, cache_dir=JUPYTER_CACHE, render_module=None, root=ROOT):
    """The build's executed copy of a chapter notebook, as jupyter-cache stored it.

    The book build renders each source notebook (``render_notebook(..., hidden="run")``:
    hidden checks set apart in removed cells, the fingerprint of ``solutions/`` and
    ``autograder/`` recorded) and executes it through jupyter-cache, which stores only
    executions that raised no error. Rendering the *current* source the same way and
    matching it in the cache finds the execution of exactly this version of the
    notebook with exactly these packages.

    Args:
        source: path of the nbgrader source notebook.
        cache_dir: the jupyter-cache folder of the build.
        render_module: the loaded ``nbgrader_render`` extension (loaded when None).
        root: the book's root (where ``solutions/`` and ``autograder/`` are).

    Returns:
        nbformat.NotebookNode | None: the executed rendered notebook, or None when the
        cache holds no execution of this source (not built, changed since, or failed).
    """
    import nbformat
    from jupyter_cache import get_cache

    if not Path(cache_dir).is_dir():
        return None
    render = render_module or load_extension("nbgrader_render")
    nb = json.loads(Path(source).read_text(encoding="utf-8"))
    rendered = render.render_notebook(nb, edition="web", where=str(source), hidden="run",
                                      inputs=render.inputs_fingerprint(root))
    cache = get_cache(str(cache_dir))
    try:
        record = cache.match_cache_notebook(nbformat.from_dict(rendered))
    except KeyError:
        return None
    return cache.get_cache_bundle(record.pk).nb


def built_pages(html=HTML):
    """Every HTML page of the built book (not the vendored libraries' files)."""
    skip = {"_static", "_sources", "_images", "reports"}
    return sorted(p for p in html.rglob("*.html") if not skip.intersection(p.relative_to(html).parts))
