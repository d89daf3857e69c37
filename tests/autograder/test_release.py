"""``autograder release``: student notebooks without solutions or hidden tests."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder.bench import make_book
from autograder.book import MARKERS, chapter_ids, secret_lines
from autograder.release import ReleaseError, leaked_lines, release, student_version

pytestmark = pytest.mark.slow  # releases chapters (notebooks and student packages)
REPO = Path(__file__).resolve().parents[2]
GENERATED = ["04_self_attention", "05_multi_head_attention"]


@pytest.fixture(scope="module")
def generated_book(tmp_path_factory) -> Path:
    return make_book(tmp_path_factory.mktemp("gen"), GENERATED)


def _books(generated_book: Path) -> list[tuple[Path, str]]:
    """Every real chapter on disk plus the generated ones."""
    real = [(REPO / "book", c) for c in chapter_ids(REPO / "book")]
    return real + [(generated_book, c) for c in GENERATED]


def _nbgrader(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def test_released_notebooks_hide_solutions_and_hidden_tests(tmp_path, generated_book):
    for book, chapter in _books(generated_book):
        out = tmp_path / book.parent.name
        (item,) = release(out, [chapter], book=book)
        assert item.path == out / chapter / f"{chapter}.ipynb"
        source = nbformat.read(str(book / chapter / f"{chapter}.ipynb"), as_version=4)
        released = nbformat.read(str(item.path), as_version=4)
        assert released.metadata["transformer_book"] == {"chapter": chapter, "edition": "student"}
        secret = secret_lines(source)
        assert secret, f"{chapter}: no solution or hidden test lines found to protect"
        text = "\n".join(c.source for c in released.cells)
        assert not any(marker in text for marker in MARKERS), chapter
        assert not [ln for ln in text.splitlines() if ln.strip() in secret], chapter
        assert leaked_lines(source, released) == []
        solutions = [c for c in released.cells if _nbgrader(c).get("solution") and c.cell_type == "code"]
        tests = [c for c in released.cells if _nbgrader(c).get("grade")]
        assert solutions and tests
        assert all("raise NotImplementedError()" in c.source for c in solutions)
        for cell in tests:  # the visible check stays, the hidden one goes
            name = _nbgrader(cell)["grade_id"][len("test_"):]
            assert f'check("{name}", {name})' in cell.source and "hidden=True" not in cell.source
            assert _nbgrader(cell)["locked"] and "checksum" in _nbgrader(cell)
        assert all(not c.get("outputs") for c in released.cells if c.cell_type == "code")


def test_leaked_lines_finds_a_reference_line_and_a_marker(generated_book):
    source = nbformat.read(str(generated_book / "04_self_attention" / "04_self_attention.ipynb"), as_version=4)
    released = student_version(source, "04_self_attention")
    assert leaked_lines(source, released) == []
    body = next(ln for ln in sorted(secret_lines(source)) if "BEGIN" not in ln and "END" not in ln)
    released.cells[-1].source += "\n" + body
    assert any("reference line" in leak for leak in leaked_lines(source, released))
    released.cells[-1].source += "\n### BEGIN HIDDEN TESTS"
    assert any("marker" in leak for leak in leaked_lines(source, released))


def test_release_refuses_solution_cells_out_of_sync(tmp_path):
    book = make_book(tmp_path, ["04_self_attention"])
    path = book / "04_self_attention" / "04_self_attention.ipynb"
    nb = nbformat.read(str(path), as_version=4)
    cell = next(c for c in nb.cells if _nbgrader(c).get("grade_id") == "softmax")
    cell.source = cell.source.replace("### END SOLUTION", "    pass  # hand-edited\n    ### END SOLUTION", 1)
    nbformat.write(nb, str(path))
    with pytest.raises(ReleaseError, match="not in sync"):
        release(tmp_path / "out", book=book)
    assert not (tmp_path / "out" / "04_self_attention").exists()


def test_release_command(tmp_path):
    generated_book = make_book(tmp_path, GENERATED)
    out = tmp_path / "release"
    proc = subprocess.run(
        [sys.executable, "-m", "autograder", "release", "--out", str(out), "--book", str(generated_book)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    for chapter in GENERATED:
        assert f"released {chapter}" in proc.stdout
        assert (out / chapter / f"{chapter}.ipynb").is_file()
    bad = subprocess.run(
        [sys.executable, "-m", "autograder", "release", "--out", str(out), "--book", str(generated_book),
         "--chapters", "99_missing"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert bad.returncode == 2 and "99_missing" in bad.stderr


def test_release_copies_the_chapter_figures(tmp_path):
    """A chapter's ``figures/*.svg`` lie beside the student notebook, so the notebook's
    ``figures/<name>.svg`` references resolve in Jupyter as they do in the book."""
    from solutions.figures.diagram import registry

    DIAGRAMS = registry()

    chapters = sorted({Path(p).parts[1] for p in DIAGRAMS})
    book = make_book(tmp_path / "src", chapters)
    for chapter in chapters:
        shutil.copytree(REPO / "book" / chapter / "figures", book / chapter / "figures")
        (book / chapter / "figures" / ".ipynb_checkpoints").mkdir()
    out = tmp_path / "release"
    release(out, chapters, book=book)
    for path in DIAGRAMS:
        _, chapter, folder, name = Path(path).parts
        released = out / chapter / folder / name
        assert released.is_file(), f"{path} was not released"
        assert released.read_bytes() == (REPO / path).read_bytes()
    for chapter in chapters:
        assert not (out / chapter / "figures" / ".ipynb_checkpoints").exists()
