"""Execute a submission's code cells for display: the program inside the sandbox.

nbgrader's ``autograde`` runs the whole submitted notebook in a kernel (its
``Execute`` preprocessor), so the formgrader and ``generate_feedback`` show
every cell with its outputs. The grader proper runs only the setup and solution
cells (:mod:`autograder.runner`); this second, display-only run executes the
notebook's other code cells too, in order, in the same sandbox with the same
limits (:func:`autograder.sandbox.run_job` with ``script="executor.py"``), and
sends back what each cell showed. Nothing of it is graded: the test cells are
not run here (their outputs are the grader's verdicts), and no case, hidden test
or reference answer is in the sandbox.

Each cell runs in one IPython shell (``InteractiveShell``: magics, ``display``,
the last expression's value, matplotlib's inline backend), as in a kernel. Its
outputs travel as nbformat output dicts, one ``result`` frame per cell
(:func:`autograder.wire.write_frame`, ``grade_id`` ``"cell<N>"``) on the result
pipe: once a cell's frame is out, a later cell cannot rewrite it. The trusted
side (:mod:`autograder.course`) reads them as untrusted data.

Like the runner it runs beside the stub ``autograder`` package (``wire.py``) and
imports nothing else of the grader.

Job (``JOB_DIR/job.json``)::

    {"cells": [{"index": N, "source": "..."}, ...],
     "yours": [exercise, ...]}   # solutions.<exercise> is the notebook's own <exercise>
"""
from __future__ import annotations

import base64
import json
import os
import sys
from typing import Any

# Absolute: in the sandbox this file runs as a script beside the stub `autograder` package, which holds wire.py.
from autograder.wire import write_frame

__all__ = ["main", "SHOWN_TYPES"]

# The MIME types a cell's display may send back: text and images. HTML and
# JavaScript are dropped, since the formgrader renders them in the grader's browser.
SHOWN_TYPES = ("text/plain", "image/png", "image/jpeg", "text/latex", "text/markdown")


def _shell():
    """An IPython shell without history or a terminal, its outputs captured by the caller."""
    # Deferred: IPython is heavy and only this program, never the grader, needs it.
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    class Publisher(DisplayPublisher):
        """``display(...)``: one ``display_data`` output of the current cell."""

        def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
            shell.outputs.append({"output_type": "display_data", "data": data, "metadata": metadata or {}})

        def clear_output(self, wait=False):
            shell.outputs.clear()

    class Hook(DisplayHook):
        """The last expression's value: the cell's ``execute_result``."""

        def write_output_prompt(self):
            pass

        def write_format_data(self, format_dict, md_dict=None):
            shell.outputs.append({"output_type": "execute_result", "data": format_dict,
                                  "metadata": md_dict or {}, "execution_count": self.shell.execution_count})

    config = Config()
    config.HistoryManager.enabled = False
    config.InteractiveShell.colors = "nocolor"
    config.InteractiveShell.xmode = "Plain"
    shell = InteractiveShell.instance(config=config)
    shell.outputs = []
    shell.display_pub = Publisher(shell=shell, parent=shell)
    shell.displayhook = Hook(shell=shell, cache_size=0, parent=shell)
    shell.display_trap.hook = shell.displayhook  # run_cell installs the trap's hook as sys.displayhook

    def show_traceback(etype, evalue, stb):
        """An exception: the cell's ``error`` output, as a kernel sends it."""
        shell.outputs.append({"output_type": "error", "ename": getattr(etype, "__name__", str(etype)),
                              "evalue": str(evalue)[:2000], "traceback": [str(line) for line in stb]})

    shell._showtraceback = show_traceback
    try:
        shell.enable_matplotlib("inline")  # figures shown as PNG at the end of their cell, as in a kernel
    except Exception:  # noqa: BLE001 - no matplotlib: no figures to show
        pass
    return shell


class _Stream:
    """A text stream that appends to the current cell's ``stream`` outputs."""

    def __init__(self, shell, name: str):
        self.shell, self.name = shell, name

    def write(self, text: str) -> int:
        text = str(text)
        outputs = self.shell.outputs
        if outputs and outputs[-1]["output_type"] == "stream" and outputs[-1]["name"] == self.name:
            outputs[-1]["text"] += text
        else:
            outputs.append({"output_type": "stream", "name": self.name, "text": text})
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def _answers_from_notebook(shell, yours: set[str]) -> None:
    """``solutions.<exercise>`` is the notebook's own definition, as in the student package.

    The sandbox's ``solutions`` holds no reference for this chapter's exercises
    (:func:`autograder.library.build_library`); the released package answers
    ``solutions.<name>`` with the student's ``<name>``, so the chapter's later
    cells run on the student's answers. Here too, once ``solutions`` is imported."""
    module = sys.modules.get("solutions")
    if module is None or "__getattr__" in vars(module):
        return

    def __getattr__(name):
        if name in yours and name in shell.user_ns:
            return shell.user_ns[name]
        raise AttributeError(f"module 'solutions' has no attribute {name!r} here: the grading sandbox's copy "
                             "leaves out the modules that hold this chapter's reference answers")

    module.__getattr__ = __getattr__


def _jsonable(output: dict) -> dict:
    """Keep the shown MIME types of a display output, as JSON (images as base64 text)."""
    if "data" not in output:
        return output
    data = {}
    for mime, value in output["data"].items():
        if mime not in SHOWN_TYPES:
            continue
        if isinstance(value, bytes):
            value = base64.b64encode(value).decode("ascii")
        data[mime] = value if isinstance(value, str) else str(value)
    return {**output, "data": data, "metadata": {}}


def main(argv: list[str] | None = None) -> int:
    """Sandbox entry point: ``python executor.py JOB_DIR --result-fd N``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--result-fd" not in argv:
        raise SystemExit("executor.py: the outputs travel on the result pipe: pass --result-fd N")
    i = argv.index("--result-fd")
    result_stream = os.fdopen(int(argv[i + 1]), "wb")
    del argv[i : i + 2]
    with open(os.path.join(argv[0], "job.json"), encoding="utf-8") as fh:
        job = json.load(fh)
    shell = _shell()
    sys.stdout, sys.stderr = _Stream(shell, "stdout"), _Stream(shell, "stderr")
    yours = set(job.get("yours", []))
    for cell in job["cells"]:
        shell.outputs = []
        shell.run_cell(cell["source"], store_history=True)
        _answers_from_notebook(shell, yours)
        outputs: list[Any] = [_jsonable(o) for o in shell.outputs]
        write_frame(result_stream, f"cell{cell['index']}", {"outputs": outputs})
    result_stream.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
