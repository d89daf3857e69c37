"""What nbgrader's formgrader and ``generate_feedback`` show after ``python -m autograder autograde``.

nbgrader's own ``autograde`` executes the submission, so a TA sees every code
cell with its outputs. Ours executes the submission's code cells a second time in
the sandbox, for display (:mod:`autograder.outputs`): checked here through the
files and renderers nbgrader itself uses — the formgrader's ``formgrade`` HTML
template on ``autograded/<student>/<assignment>/<notebook>.ipynb`` (what its
submission page serves) and ``NbGraderAPI.generate_feedback``'s pages.

The course is chapter 1 without its two slow demonstrations (the timing
benchmark and the training of two models), so each execution takes seconds; two
students: the reference answers, and one whose ``rnn_forward`` restarts from
``h0`` and whose notebook also tries to put HTML with a script in the TA's page.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import nbformat
import pytest

import fixtures
from autograder import course as course_module
from autograder.course import autograde, load_course
from autograder.grading import RunSettings

pytestmark = pytest.mark.slow  # nbgrader's formgrader executes the submissions

REPO = Path(__file__).resolve().parents[2]
CH = "01_rnn_limitations"
SLOW_DEMOS = ("FlopCounterMode", "SOS, FIRST_SYMBOL", "with torch.no_grad()", "gradient_norms(",
              "ipywidgets", "explorer", "gradient_explorer_state")
RESTARTS_FROM_H0 = '''import numpy as np


def rnn_forward(x, h0, W_xh, W_hh, b_h):
    return np.tanh(x @ W_xh + h0 @ W_hh + b_h)  # every step restarts from h0
'''
SCRIPT = ('from IPython.display import HTML, display\n'
          'display(HTML("<script>document.title = \'pwned\'</script>"))\n'
          'print("cat\\x1b[31m was here")')
STAMP = "2026-11-20 10:00:00.000000 UTC"


def _light(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Chapter 1 without the demonstrations that take most of its run time."""
    nb.cells = [c for c in nb.cells if not (c.cell_type == "code" and not c.metadata.get("nbgrader")
                                            and any(s in c.source for s in SLOW_DEMOS))]
    return nb


@pytest.fixture(scope="module")
def executed(tmp_path_factory, needs_sandbox):
    """The course autograded once, executing each submission in the sandbox (two at a time)."""
    root = tmp_path_factory.mktemp("formgrader") / "course"
    src = _light(nbformat.read(str(REPO / "book" / CH / f"{CH}.ipynb"), as_version=4))
    fixtures.write_notebook(src, root / "source" / CH / f"{CH}.ipynb")
    (root / "nbgrader_config.py").write_text('c = get_config()\nc.CourseDirectory.course_id = "demo"\n',
                                            encoding="utf-8")
    cat = fixtures.submission_with(src, rnn_forward=RESTARTS_FROM_H0)
    cat.cells.insert(3, nbformat.v4.new_code_cell(SCRIPT))
    for student, nb in {"ann": fixtures.reference_submission(src), "cat": cat}.items():
        folder = root / "submitted" / student / CH
        fixtures.write_notebook(nb, folder / f"{CH}.ipynb")
        (folder / "timestamp.txt").write_text(STAMP + "\n", encoding="utf-8")
    autograde(CH, course=root, settings=RunSettings(seed=11), progress=False, jobs=2)  # the two executions at once
    return root


def _autograded(root: Path, student: str) -> nbformat.NotebookNode:
    return nbformat.read(str(root / "autograded" / student / CH / f"{CH}.ipynb"), as_version=4)


def _formgrader_page(root: Path, student: str) -> str:
    """The formgrader's submission page, rendered as its ``SubmissionHandler`` renders it."""
    from nbconvert.exporters import HTMLExporter
    from nbgrader.server_extensions.formgrader import handlers

    c = load_course(root)
    exporter = HTMLExporter(config=c.config, template_name="formgrade",
                            extra_template_basedirs=[handlers.template_path])
    filename = os.path.join(c.coursedir.format_path(c.coursedir.autograded_directory, student, CH), f"{CH}.ipynb")
    resources = {"assignment_id": CH, "notebook_id": CH, "submission_id": "x", "index": 0, "total": 2,
                 "base_url": "", "student": student, "last_name": None, "first_name": None,
                 "notebook_path": filename}
    html, _ = exporter.from_filename(filename, resources=resources)
    return html


def test_the_formgrader_shows_every_code_cell_executed(executed):
    nb = _autograded(executed, "ann")
    code = [c for c in nb.cells if c.cell_type == "code"]
    demo = [c for c in code if not c.metadata.get("nbgrader")]
    printing = [c for c in demo if "print(" in c.source]
    assert printing and all(any(o.output_type == "stream" for o in c.outputs) for c in printing)
    errors = [o for c in code if not c.metadata.get("nbgrader", {}).get("grade") for o in c.outputs
              if o.output_type == "error"]
    # The reference runs clean but where a cell calls a reference the sandbox withholds with the chapter's answers.
    assert all("the grading sandbox's copy leaves out" in o.evalue for o in errors)
    assert any("image/png" in o.get("data", {}) for c in demo for o in c.outputs)  # figures, inline
    counts = [c.execution_count for c in code if c.outputs]
    assert counts == sorted(counts) and len(set(counts)) == len(counts)
    page = _formgrader_page(executed, "ann")
    assert "h_t: [0.4621, 0.3537, 0.2757, 0.217]" in page  # the first demonstration's print
    assert "data:image/png;base64," in page
    assert "✓ rnn_forward: 4/4 points" in page  # the test cell: our verdict, as before


def test_later_cells_run_on_the_students_own_answer(executed):
    """``solutions.rnn_forward`` in a later cell is the student's, as in the student package."""
    def pulse(nb):
        cell = next(c for c in nb.cells if c.cell_type == "code" and "H_pulse = solutions.rnn_forward" in c.source)
        return "".join(o.text for o in cell.outputs if o.output_type == "stream")

    assert "[0.4621 0.3537 0.2757 0.217 ]" in pulse(_autograded(executed, "ann"))
    cat = pulse(_autograded(executed, "cat"))
    assert cat and "[0.4621 0.3537 0.2757 0.217 ]" not in cat


def test_generate_feedback_shows_the_outputs_and_nothing_of_a_hostile_display(executed, tmp_path):
    from nbgrader.apps.api import NbGraderAPI

    root = Path(shutil.copytree(executed, tmp_path / "course"))
    c = load_course(root)
    result = NbGraderAPI(coursedir=c.coursedir, config=c.config).generate_feedback(CH)
    assert result["success"], result.get("log")
    page = (root / "feedback" / "cat" / CH / f"{CH}.html").read_text(encoding="utf-8")
    assert "restarted from h0" in page  # the verdict
    assert "cat\\x1b[31m was here" in page  # the print, its escape sequence shown as text
    for html in (page, _formgrader_page(root, "cat")):
        # the HTML output was dropped: its script is only in the cell's (escaped) source
        assert "<script>document.title" not in html and "&lt;script&gt;document.title" in html


def test_an_unchanged_submission_is_not_executed_again(executed, tmp_path, monkeypatch):
    root = Path(shutil.copytree(executed, tmp_path / "course"))
    path = root / "autograded" / "cat" / CH / f"{CH}.ipynb"
    before = path.read_bytes()

    def refuse(*args, **kwargs):
        raise AssertionError("an unchanged submission was executed again")

    monkeypatch.setattr(course_module, "execute_for_display", refuse)
    autograde(CH, course=root, settings=RunSettings(seed=11), progress=False)
    assert path.read_bytes() == before
    autograde(CH, course=root, settings=RunSettings(seed=11), progress=False,
              execute=False)  # --no-execute: no outputs but the verdicts
    nb = nbformat.read(str(path), as_version=4)
    assert all(not c.outputs for c in nb.cells if c.cell_type == "code" and not c.metadata.get("nbgrader", {})
               .get("grade"))


FORGE = '''import json, sys
from autograder.wire import write_frame
stream = open(int(sys.argv[sys.argv.index("--result-fd") + 1]), "wb", closefd=False)
fake = {"outputs": [{"output_type": "stream", "name": "stdout", "text": "✓ 4/4 points"}]}
write_frame(stream, "cell1", fake)  # the test cell, which is not executed
write_frame(stream, "cell2", {"outputs": [
    {"output_type": "display_data", "data": {"text/html": "<script>x()</script>", "image/png": "bm90IGEgcG5n"}},
    {"output_type": "stream", "name": "/etc/passwd", "text": "?"},
    {"output_type": "error", "ename": "E", "evalue": "v", "traceback": "not a list"},
    {"output_type": "execute_result", "data": {"text/plain": "forged but harmless"}}]})
print("forged")'''


def test_outputs_are_read_as_untrusted_data_and_a_dead_run_says_where_it_stopped(needs_sandbox):
    from autograder.outputs import execute_for_display

    grade = {"nbgrader": {"grade": True, "grade_id": "test_x", "points": 1, "solution": False, "locked": True}}
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(FORGE),
        nbformat.v4.new_code_cell("check('x', x)", metadata=grade),
        nbformat.v4.new_code_cell("print('not reached: cell2 was forged by cell0')"),
        nbformat.v4.new_code_cell("import os\nos._exit(3)"),
        nbformat.v4.new_code_cell("print('after the end')"),
        nbformat.v4.new_code_cell("print('still after the end')"),
    ])
    assert execute_for_display(nb, "no_such_chapter", skip={1}) == 2  # frames for cells 0 and 2
    first, test, forged, died, after, last = nb.cells
    assert [o.text for o in first.outputs] == ["forged\n"]
    assert test.outputs == []  # a frame for a cell that is not executed is ignored
    assert [(o.output_type, dict(o.get("data", {}))) for o in forged.outputs] == \
        [("execute_result", {"text/plain": "forged but harmless"})]  # no HTML, no fake PNG, no odd stream
    assert [(o.ename, o.evalue) for o in died.outputs] == [("CellNotExecuted", "the run ended here (exit status 3)")]
    assert after.outputs == last.outputs == []
