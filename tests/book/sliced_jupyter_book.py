"""``jupyter-book`` whose notebook executions wait on the kernel in short slices and are kept.

``python tests/book/sliced_jupyter_book.py build ...`` is ``jupyter-book build ...`` with
jupyter-cache's notebook execution (myst-nb's ``execute_notebooks: cache``) done by
:func:`notebook_runs.execute_for_jupyter_cache`: a reply that has arrived is read within
a slice (nbclient's one poll as long as the cell's timeout, 1,800 s in ``_config.yml``,
could leave a build sitting idle that long), and each chapter's execution is kept with
its cell timings under ``_build/test-executions/book-build/``, so a slow build names its
cell. ``book_helpers.ensure_book_built`` builds the book the tests read this way.
"""
import importlib.util
import sys
from pathlib import Path

import jupyter_cache.executors.utils as jupyter_cache_execution
from jupyter_book.cli.main import main

TESTS = Path(__file__).resolve().parents[1]


def _notebook_runs():
    """``tests/notebook_runs.py``, loaded by its path: with ``tests/`` on ``sys.path`` the
    build's own ``import autograder`` could find the folder ``tests/autograder``."""
    spec = importlib.util.spec_from_file_location("notebook_runs", TESTS / "notebook_runs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def install() -> None:
    """Make jupyter-cache execute notebooks with :func:`notebook_runs.execute_for_jupyter_cache`
    (its ``single_nb_execution`` calls the module's ``executenb``)."""
    jupyter_cache_execution.executenb = _notebook_runs().execute_for_jupyter_cache


if __name__ == "__main__":
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
    install()
    sys.exit(main())
