"""A real client: JupyterLab, started in a student's environment, runs a released chapter.

Chapter 4 of the release of every chapter (``released_chapters``, made once per run for
the group ``"releases"``, whose worker runs this test); its wheel goes into a fresh venv (``tests/autograder/student_env.py``:
only the wheel's ``solutions`` and ``autograder`` importable, the project venv's
third-party packages through a ``.pth``). JupyterLab runs with that venv's Python, so
its ``python3`` kernel is the student's (a kernel spec of that name, first on
``JUPYTER_PATH``, runs the venv's Python). The lab's static files and the ipywidgets
extension are the project venv's ``share/jupyter`` (on ``JUPYTER_PATH``): what
``pip install jupyterlab`` in the student's venv would have put in its own. Headless
Chromium (``test_browser``'s launch flags, every request outside the server aborted)
opens the notebook with the answers filled in, selects all cells and runs them, and
must see a check cell's part table and a rendered ipywidgets explorer, no error output.
"""
from __future__ import annotations

import shutil
import socket
import subprocess
import sysconfig
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from student_env import filled, kernel_spec, make_env
from test_browser import _offline_chromium, playwright  # noqa: F401 - the module's Playwright fixture

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("releases")]
CHAPTER = "04_self_attention"
TOKEN = "release-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(url: str, server: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"JupyterLab exited with {server.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(1)
    raise AssertionError(f"JupyterLab did not answer {url} within {timeout} s")


def test_jupyterlab_runs_a_released_chapter_with_its_checks_and_widgets(released_chapters, tmp_path,
                                                                         playwright):  # noqa: F811
    out, done = released_chapters
    python, _, work, env = make_env(tmp_path, done.packages[CHAPTER].wheel)
    folder = work / CHAPTER
    shutil.copytree(out / CHAPTER, folder)
    finished = filled(folder / f"{CHAPTER}.ipynb")
    finished.cells.append(nbformat.v4.new_code_cell(
        "import sys\nimport solutions\nprint('student kernel:', sys.executable, solutions.__file__)"))
    nbformat.write(finished, str(folder / "finished.ipynb"))
    share = Path(sysconfig.get_paths()["data"]) / "share" / "jupyter"
    settings = tmp_path / "settings"  # every cell in the page (no windowing), so every output can be read
    (settings / "@jupyterlab" / "notebook-extension").mkdir(parents=True)
    (settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings").write_text(
        '{"windowingMode": "none"}')
    env.pop("TRANSFORMER_BOOK_STATIC")  # the explorer's live widgets, as a student gets them
    kernels = kernel_spec(tmp_path / "jupyter", python, env, name="python3")  # before the project's python3
    env.update(HOME=str(tmp_path / "home"), JUPYTER_PATH=f"{kernels}:{share}", JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"), JUPYTERLAB_SETTINGS_DIR=str(settings))
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    log = (tmp_path / "jupyterlab.log").open("w")
    server = subprocess.Popen(
        [str(python), "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
         f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={folder}", f"--LabApp.app_dir={share / 'lab'}",
         "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
         "--LabApp.extension_manager=readonly", "--allow-root"],
        cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_for(f"{base}/api/status?token={TOKEN}", server)
        with _offline_chromium(playwright, base, tmp_path / "profile") as context:
            page = context.new_page()
            errors = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"{base}/lab/tree/finished.ipynb?token={TOKEN}", timeout=120_000)
            cells = sum(c.cell_type == "code" for c in finished.cells)
            page.wait_for_function(  # every cell on the page, and the kernel started and idle
                f"""() => document.querySelectorAll('.jp-Notebook .jp-CodeCell').length === {cells}
                         && /\\| Idle/.test(document.querySelector('#jp-main-statusbar')?.innerText || '')""",
                timeout=240_000)
            page.screenshot(path=str(tmp_path / "opened.png"))
            page.locator(".jp-Notebook .jp-Cell .jp-InputPrompt").first.click()  # the notebook has the focus
            page.keyboard.press("Escape")  # command mode: select every cell, run the selection
            page.keyboard.press("Control+a")
            page.keyboard.press("Control+Enter")  # run them, no new cell at the end (Shift+Enter adds one)
            try:  # every cell ran (a number in its prompt), or one failed (run all stops there)
                page.wait_for_function(
                    """() => {
                      const prompts = Array.from(document.querySelectorAll('.jp-CodeCell .jp-InputPrompt'));
                      const failed = document.querySelector('[data-mime-type="application/vnd.jupyter.stderr"]');
                      return failed || (prompts.length > 0 && prompts.every(p => /\\[\\d+\\]/.test(p.textContent)));
                    }""", timeout=600_000)
            finally:
                page.screenshot(path=str(tmp_path / "jupyterlab.png"), full_page=True)
            outputs = page.locator(".jp-OutputArea-output").all_inner_texts()
            table = [text for text in outputs if text.startswith("✓ softmax: 3/3 points")]
            assert table and "✓ no overflow at 1e4 (1/1)" in table[0], outputs[:20]
            assert page.locator(".jp-OutputArea-output .jupyter-widgets").count() > 0, "no ipywidgets rendered"
            assert page.locator(".jp-OutputArea-output .widget-slider, .jp-OutputArea-output .widget-dropdown, "
                                ".jp-OutputArea-output .widget-button").count() > 0, "the explorer has no control"
            tracebacks = page.locator("[data-mime-type='application/vnd.jupyter.stderr'] .jp-RenderedText, "
                                      ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
            assert not [t for t in tracebacks.all_inner_texts() if "Error" in t], tracebacks.all_inner_texts()
            (kernel,) = [text for text in outputs if text.startswith("student kernel:")]
            assert all(Path(p).is_relative_to(tmp_path) for p in kernel.split()[2:]), kernel  # the venv, the wheel
            assert not errors, errors
            assert not [u for u in context.outside_requests if u.startswith("http")], context.outside_requests
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
