"""The student package of a release: the visible checks offline, and no answer inside.

A release of chapter 4 is installed into a fresh virtual environment that sees
neither this repository nor its editable install (only the third-party packages of
the project's venv, through a ``.pth`` file); from a folder outside the repository
``python -m autograder check`` grades renamed copies of the released notebook (every
chapter's notebook runs in a kernel of its own student environment in
``test_release_runs.py``). Another test scans every file of the
release, inside the wheel too, for the body of every exercise of chapter 4 and later.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch

import solutions
from autograder.checks import exercises_of, load_all
from autograder.checks.base import check, check_report, use_precomputed
from autograder.book import BOOK, chapter_ids, distinctive
from autograder.release import release, scan_release
from autograder.student import standins
from autograder.student.expected import ExpectedStore
from autograder.student.notebook import chapter_of
from autograder.student.hints import withhold_helpers
from autograder.sync import BEGIN, END, solution_cell_source
from autograder.text import wrong_chapter_notice
from student_env import make_env

# builds student wheels and venvs; shares ``released_chapters`` with test_release_runs.py, on one worker
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("releases")]
REPO = Path(__file__).resolve().parents[2]
CHAPTER = "04_self_attention"


@pytest.fixture(scope="module")
def chapter_release(released_chapters):
    """Chapter 4 of the release of every chapter (``released_chapters``, made once per run on
    this group's worker): the release folder and chapter 4's student package. The chapter's
    folder holds its notebook and its wheel, all that its students get."""
    out, done = released_chapters
    return out, done.packages[CHAPTER]


# --------------------------------------------------------------------------- no answers inside


def _answer_bodies(first: str) -> dict[str, set[str]]:
    """Exercise -> the distinctive lines of its reference body (``autograder.sync``'s
    solution regions), for the exercises of chapter ``first`` and later, less the lines
    an earlier chapter's reference also has (those belong to the released package)."""
    bodies: dict[str, set[str]] = {}
    earlier: set[str] = set()
    for name, exercise in sorted(load_all().items()):
        lines, inside = set(), False
        for line in solution_cell_source(getattr(solutions, name)).splitlines():
            if line.strip() in (BEGIN, END):
                inside = line.strip() == BEGIN
            elif inside:
                lines.add(line.strip())
        if exercise.chapter >= first:
            bodies[name] = lines
        else:
            earlier |= lines
    return {name: {ln for ln in lines - earlier if distinctive(ln)} for name, lines in bodies.items()}


def _texts(out: Path):
    for path in sorted(out.rglob("*")):
        if path.suffix == ".whl":
            with zipfile.ZipFile(path) as zf:
                for member in zf.namelist():
                    yield f"{path.name}!{member}", zf.read(member).decode("utf-8", errors="replace")
        elif path.is_file():
            yield str(path), path.read_text(encoding="utf-8", errors="replace")


def test_the_release_holds_no_answer_of_this_or_a_later_chapter(chapter_release):
    out, package = chapter_release
    bodies = _answer_bodies(CHAPTER)
    assert set(bodies) >= {"softmax", "scaled_dot_product_attention", "self_attention", "MultiHeadAttention",
                           "masked_softmax", "Transformer", "beam_search"}
    assert all(bodies.values()), [name for name, lines in bodies.items() if not lines]
    found = []
    names = []
    for name, text in _texts(out / CHAPTER):
        names.append(name)
        if name.endswith(".ipynb"):  # a notebook's cells, as JSON strings: one line each
            text = "\n".join("".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                             for c in json.loads(text)["cells"])
        lines = {ln.strip() for ln in text.splitlines()}
        found += [(name, exercise, ln) for exercise, body in bodies.items() for ln in body & lines]
    assert not found, found[:10]
    assert scan_release(out, [CHAPTER], only=[out / CHAPTER]) == []
    wheel = [n for n in names if "!" in n]
    assert any(n.endswith("!solutions/figures/plots.py") for n in wheel)
    for module in ("attention", "multihead", "masking", "layers", "model", "decoding", "training"):
        assert not any(n.endswith(f"!solutions/{module}.py") for n in wheel), module
    assert package.wheel.name == "transformer_book_student-0.1.0+ch04-py3-none-any.whl"
    assert (out / CHAPTER / package.wheel.name).is_file()  # handed out in the chapter's folder


def test_the_scan_finds_an_answer_line_hidden_in_an_archive(chapter_release, tmp_path):
    out, _ = chapter_release
    copy = tmp_path / "copy"
    shutil.copytree(out / CHAPTER, copy / CHAPTER)
    line = sorted(_answer_bodies(CHAPTER)["scaled_dot_product_attention"])[0]
    with zipfile.ZipFile(copy / CHAPTER / "extra.zip", "w") as zf:
        zf.writestr("notes/answer.py", f"# a student's leak\n    {line}\n")
    found = scan_release(copy, [CHAPTER])
    assert found and all(entry.startswith("extra.zip!notes/answer.py") for entry in found), found


def test_a_check_helper_that_recomputes_an_answer_is_withheld():
    text = ("def _ok(x):\n    return x + 1\n\n\nclass Ex:\n    def diagnose(self, case):\n"
            "        weights = softmax(scores, axis=-1)\n        return weights\n")
    out, withheld = withhold_helpers(text, {"weights = softmax(scores, axis=-1)"})
    assert withheld == ["Ex.diagnose", "_ok"]  # _ok: outside any verdict, so replayed whatever its lines
    assert "softmax(scores" not in out and "return x + 1" not in out
    assert "return _replay('._ok', {'x': x})" in out and "return _replay('.Ex.diagnose', {'case': case})" in out
    compile(out, "<withheld>", "exec")


# --------------------------------------------------------------------------- the visible checks as data


def _shipped_checks(released_packages, chapters, folder: Path) -> None:
    """Write the stored visible checks the wheels of ``chapters`` ship into ``folder``."""
    for chapter in chapters:
        files, _ = released_packages[chapter]
        for suffix in (".json", ".npz"):
            (folder / f"{chapter}{suffix}").write_bytes(files[f"autograder/expected/{chapter}{suffix}"])


def test_stored_checks_equal_the_reference_checks(released_packages, tmp_path):
    """For every chapter, the stored visible cases its wheel ships (``write_chapter``'s
    files, as the release put them in the package) are the visible check's own, and a
    reference answer judged against the stored results gets full marks. The stored
    files quote no traceback of the reference (its source lines) and no path of the
    checkout that wrote them, so a wheel is the same from any checkout."""
    registry = load_all()
    _shipped_checks(released_packages, chapter_ids(), tmp_path)
    root = str(Path(solutions.__file__).resolve().parent.parent)
    for stored in sorted(tmp_path.glob("*.json")):
        text = stored.read_text(encoding="utf-8")
        assert "Traceback" not in text and root not in text, stored.name
    store = ExpectedStore(tmp_path)
    assert set(store.chapters) == set(chapter_ids())
    try:
        use_precomputed(store)
        for name, exercise in registry.items():
            assert store.has(name)
            report = check_report(name, getattr(solutions, name))
            assert report.passed, (name, report.reason())
    finally:
        use_precomputed(None)


def test_stored_checks_still_name_the_mistake(released_packages, tmp_path):
    _shipped_checks(released_packages, [CHAPTER], tmp_path)
    store = ExpectedStore(tmp_path)

    def softmax(x, axis=-1):  # normalised over the wrong axis
        e = np.exp(x - x.max(axis=0, keepdims=True))
        return e / e.sum(axis=0, keepdims=True)

    def scaled_dot_product_attention(q, k, v):
        weights = softmax(q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]))
        return weights @ v, weights

    scaled_dot_product_attention.__globals__["softmax"] = softmax  # the notebook's namespace
    try:
        use_precomputed(store)
        report = check_report("softmax", softmax)
        assert not report.passed and "axis" in report.reason()
        with pytest.raises(ValueError, match="only the visible check"):
            check("softmax", softmax, hidden=True)
        sdpa = check_report("scaled_dot_product_attention", scaled_dot_product_attention)
        assert "fix `softmax` first" in sdpa.notes[0]
    finally:
        use_precomputed(None)
        del scaled_dot_product_attention.__globals__["softmax"]


def test_standins_agree_with_the_references_they_replace():
    rng = np.random.default_rng(3)
    table = standins.sinusoidal_positional_encoding(40, 12)
    assert np.allclose(table, solutions.sinusoidal_positional_encoding(40, 12))
    x, weights = rng.normal(size=(2, 5, 8)), [rng.normal(size=(8, 4)) for _ in range(3)]
    output, weights_out = standins.self_attention(x, *weights)
    assert np.allclose(output, solutions.self_attention(x, *weights)[0]) and weights_out is None  # chapter 3 reads the output
    ids = torch.tensor([[5, 6, 0], [7, 0, 0]])
    assert torch.equal(standins.padding_mask(ids), solutions.padding_mask(ids))
    assert torch.equal(standins.causal_mask(5), solutions.causal_mask(5))
    scores, mask = torch.randn(2, 1, 3, 3), solutions.padding_mask(torch.tensor([[5, 6, 0], [0, 0, 0]]))
    assert torch.allclose(standins.masked_softmax(scores, mask), solutions.masked_softmax(scores, mask))
    assert torch.equal(standins.masked_softmax(scores, None), solutions.masked_softmax(scores, None))
    with pytest.raises(ValueError, match=r"MultiHeadAttention's scores \(B, h, T_q, T_k\)"):
        standins.masked_softmax(scores[0, 0], mask[0, 0, 0])  # chapter 6's own cases, 2-D: not served
    for name, calls in standins.RECORDED.items():  # the recorded stand-ins: the reference's values
        for args in calls:
            got, want = getattr(standins, name)(*args), getattr(solutions, name)(*args)
            assert np.allclose(np.asarray(got), np.asarray(want)) and type(got) is type(want), (name, args)


@pytest.mark.parametrize("eos_bias", [2.0, 2.5])
def test_the_greedy_decoding_stand_in_gives_the_reference_tokens(eos_bias):
    """Chapter 9's translations run on a stand-in of chapter 10's ``greedy_decode``: the
    same tokens as the reference (with and without its cache), padding after ``<eos>``
    and the early stop included, on the calls ``translate`` makes (``max_len`` = the
    source length + 50 within the positional table). With an ``<eos>`` bias of 2.0 two
    sentences end at different steps and two run to ``max_len``; with 2.5 all end and
    decoding stops early. Any other call, as chapter 10's check makes, is refused."""
    torch.manual_seed(0)
    model = solutions.Transformer(11, 13, d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                                  d_ff=32, dropout=0.0, max_len=32).eval()
    with torch.no_grad():
        model.generator.bias[2] += eos_bias
    src = torch.tensor([[4, 5, 6, 7, 0], [8, 9, 0, 0, 0], [10, 4, 4, 5, 6], [3, 0, 0, 0, 0]])
    src_mask = solutions.padding_mask(src)
    steps = standins.translation_steps(model, src)
    assert steps == 31  # min(5 + 50, 32 - 1): the positional table caps it
    got = standins.greedy_decode(model, src, src_mask, steps)
    for use_cache in (False, True):
        assert torch.equal(got, solutions.greedy_decode(model, src, src_mask, steps, use_cache=use_cache))
    ended = (got == 2).any(dim=1)
    if eos_bias == 2.0:  # the case decides the padding rule and the length
        assert ended.tolist() == [False, True, False, True] and got.shape == (4, steps + 1), got
    else:
        assert bool(ended.all()) and got.shape[1] < steps + 1, got
    for call in (dict(max_len=9), dict(max_len=steps, sos_id=3, eos_id=4, pad_id=5)):
        with pytest.raises(ValueError, match="chapter 9's stand-in"):
            standins.greedy_decode(model, src, src_mask, **call)


def test_the_setup_cell_names_the_wheel_of_its_chapter(monkeypatch):
    """A release makes one package per chapter: the setup cell of chapter 8 under chapter
    6's package stops with one line naming chapter 8's wheel; the full install passes."""
    import autograder
    from autograder.student import WrongPackage, require_chapter, wheel_name

    require_chapter("08_transformer")  # this repository: no RELEASED, every chapter is here
    monkeypatch.setattr(autograder, "RELEASED", ["06_masking"], raising=False)
    require_chapter("06_masking")
    with pytest.raises(WrongPackage) as caught:
        require_chapter("08_transformer")
    (line,) = caught.value._render_traceback_()
    assert "transformer_book_student-" in line and "+ch08-py3-none-any.whl" in line and "06_masking" in line
    assert wheel_name("08_transformer", "0.1.0") == "transformer_book_student-0.1.0+ch08-py3-none-any.whl"
    for notebook in sorted(BOOK.glob("[0-9]*/[0-9]*.ipynb")):
        setup = next(c for c in nbformat.read(str(notebook), as_version=4).cells if c.cell_type == "code")
        lines = setup.source.splitlines()
        guard = lines.index(f'require_chapter("{notebook.stem}")')
        assert lines[guard - 1] == "# the student package installed must be this chapter's", notebook.stem
        assert guard < lines.index("import solutions"), f"{notebook.stem}: the guard must come before solutions"


def test_what_a_notebook_takes_from_a_subpackage_is_read_to_its_module():
    """``solutions.app.data.X`` and ``from solutions.app.trainer import Y`` name their modules,
    and a stand-in module inside the subpackage imports the stand-ins from the package's top."""
    from autograder.student.standin_modules import standin_module
    from autograder.student.uses import notebook_uses

    names, modules, imports = notebook_uses([
        "import solutions\nfrom solutions.app.trainer import Trainer\n"
        "pairs = solutions.app.data.make_synthetic_splits(3)\nsolutions.masked_softmax"])
    assert {("solutions.app.trainer", "Trainer"), ("solutions.app.data", "make_synthetic_splits"),
            ("solutions.app", "data"), ("solutions", "masked_softmax")} <= names
    assert modules == {"solutions.app.trainer"} and imports == {"solutions"}
    assert "from .._standins import greedy_decode" in standin_module(
        "solutions.app.decoding", {"greedy_decode"}, {"greedy_decode"}, {})
    assert "from ._standins import greedy_decode" in standin_module(
        "solutions.decoding", {"greedy_decode"}, {"greedy_decode"}, {})


def test_package_data_ships_with_its_package(tmp_path):
    """A frozen corpus under ``solutions/`` ships when its package does; caches never."""
    from autograder.student.plan import package_data

    root = tmp_path / "solutions"
    for name in ("__init__.py", "tokens.py", "corpora/book.txt", "kit/__init__.py", "kit/table.csv",
                 "__pycache__/tokens.cpython-311.pyc", "corpora/.ipynb_checkpoints/book.txt"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x\n")
    assert list(package_data(root, {"solutions.tokens"})) == ["solutions/corpora/book.txt"]
    assert list(package_data(root, {"solutions.kit"})) == ["solutions/corpora/book.txt", "solutions/kit/table.csv"]


def test_a_notebook_is_recognised_by_its_metadata_whatever_its_name(chapter_release, tmp_path):
    out, _ = chapter_release
    known = {c: [ex.name for ex in exercises_of(c)] for c in chapter_ids()}
    released = json.loads((out / CHAPTER / f"{CHAPTER}.ipynb").read_text())
    assert released["metadata"]["transformer_book"] == {"chapter": CHAPTER, "edition": "student"}
    assert chapter_of(released, Path("homework (3).ipynb"), known) == CHAPTER
    del released["metadata"]["transformer_book"]  # an editor dropped it: the exercise cells still tell
    assert chapter_of(released, Path("homework.ipynb"), known) == CHAPTER
    for cell in released["cells"]:
        cell.get("metadata", {}).pop("nbgrader", None)
    assert chapter_of(released, Path(f"{CHAPTER} (1).ipynb"), known) == CHAPTER
    assert chapter_of(released, Path("homework.ipynb"), known) is None


# --------------------------------------------------------------------------- a fresh environment


def _make_env(wheel: Path, root: Path):
    """A fresh venv under ``root`` holding ``wheel`` (:func:`student_env.make_env`)."""
    return make_env(root, wheel)


@pytest.fixture(scope="module")
def student_env(chapter_release, tmp_path_factory):
    """The chapter-4 release installed in a fresh venv (:func:`_make_env`)."""
    _, package = chapter_release
    return _make_env(package.wheel, tmp_path_factory.mktemp("student"))


def _run(python, args, work, env, timeout=300):
    return subprocess.run([str(python), *args], cwd=work, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_installed_package_is_the_release_not_this_repository(student_env):
    python, purelib, work, env = student_env
    proc = _run(python, ["-c", "import solutions, autograder, autograder.checks.base as b; "
                               "print(solutions.__file__); print(autograder.__file__); "
                               "print(type(b.precomputed()).__name__)"], work, env)
    assert proc.returncode == 0, proc.stderr
    paths = proc.stdout.split()
    assert all(Path(p).is_relative_to(purelib) for p in paths[:2]), paths
    assert paths[2] == "ExpectedStore"
    proc = _run(python, ["-c", "import solutions; solutions.softmax"], work, env)
    assert proc.returncode != 0 and "exercise of chapter 04_self_attention" in proc.stderr
    assert "Write `softmax` in its exercise cell" in proc.stderr
    proc = _run(python, ["-c", "import solutions; solutions.masked_softmax"], work, env)
    assert proc.returncode != 0 and "not released yet" in proc.stderr


def test_check_grades_renamed_notebooks_offline(chapter_release, student_env):
    """A renamed blank notebook and a stranger, in the student venv. (A renamed answered notebook,
    every chapter's, gets full marks in test_release_runs.py's answered check.)"""
    out, _ = chapter_release
    python, _, work, env = student_env
    released = out / CHAPTER / f"{CHAPTER}.ipynb"
    shutil.copy(released, work / f"{CHAPTER} (2).ipynb")
    blank = _run(python, ["-m", "autograder", "check", f"{CHAPTER} (2).ipynb"], work, env)
    assert blank.returncode == 1, blank.stdout + blank.stderr
    assert "not implemented yet" in blank.stdout and "0 of 3 exercises pass" in blank.stdout
    other = work / "notes.ipynb"
    other.write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    unknown = _run(python, ["-m", "autograder", "check", "notes.ipynb"], work, env)
    assert unknown.returncode == 2 and "not a notebook of the chapters this package checks" in unknown.stderr


def test_check_names_a_notebook_of_another_chapter(chapter_release, student_env):
    """Chapter 4's package says, before the table and in the words of the instructor's ``check``
    and Gradescope (:func:`autograder.text.wrong_chapter_notice`), that a notebook would earn
    nothing where it is handed in: chapter 4's under chapter 5's file name; chapter 5's checked
    as ``--chapter 04_self_attention``; chapter 5's under chapter 4's name, which this package
    cannot check (it names the package to install instead)."""
    out, _ = chapter_release
    python, _, work, env = student_env
    other = "05_multi_head_attention"
    shutil.copy(out / CHAPTER / f"{CHAPTER}.ipynb", work / f"{other}.ipynb")
    named = _run(python, ["-m", "autograder", "check", f"{other}.ipynb"], work, env)
    assert named.returncode == 1, named.stdout + named.stderr
    assert named.stdout.splitlines()[:4] == [f"{other}.ipynb: chapter {CHAPTER}, visible checks", "",
                                             wrong_chapter_notice(CHAPTER, other), ""]
    assert "0 of 3 exercises pass" in named.stdout
    shutil.copy(out / other / f"{other}.ipynb", work / "mine.ipynb")
    wrong = _run(python, ["-m", "autograder", "check", "mine.ipynb", "--chapter", CHAPTER], work, env)
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    assert wrong.stdout.splitlines()[:4] == [f"mine.ipynb: chapter {CHAPTER}, visible checks", "",
                                             wrong_chapter_notice(other, CHAPTER), ""]
    assert "0 of 3 exercises pass" in wrong.stdout and "`softmax` is not defined" in wrong.stdout
    shutil.copy(out / other / f"{other}.ipynb", work / f"{CHAPTER}.ipynb")
    elsewhere = _run(python, ["-m", "autograder", "check", f"{CHAPTER}.ipynb"], work, env)
    assert elsewhere.returncode == 2, elsewhere.stdout + elsewhere.stderr
    assert elsewhere.stdout.splitlines() == [wrong_chapter_notice(other, CHAPTER)]
    assert f"is a {other} notebook, and this package checks {CHAPTER} only" in elsewhere.stderr
    mine = _run(python, ["-m", "autograder", "check", "mine.ipynb"], work, env)  # named nothing: no notice
    assert mine.returncode == 2 and not mine.stdout, mine.stdout + mine.stderr
    assert f"mine.ipynb is a {other} notebook, and this package checks {CHAPTER} only" in mine.stderr
    asked = _run(python, ["-m", "autograder", "check", "mine.ipynb", "--chapter", other], work, env)
    assert asked.returncode == 2 and not asked.stdout, asked.stdout + asked.stderr
    assert f"this package checks {CHAPTER} only, not {other}" in asked.stderr


def test_the_repository_check_recognises_a_renamed_release(chapter_release, tmp_path, capsys):
    """``python -m autograder check`` of the repository reads the chapter from the
    notebook too: no ``--chapter`` for a browser-renamed download."""
    from autograder.cli import main

    out, _ = chapter_release
    renamed = tmp_path / f"{CHAPTER} (1).ipynb"
    shutil.copy(out / CHAPTER / f"{CHAPTER}.ipynb", renamed)
    assert main(["check", str(renamed)]) == 1
    captured = capsys.readouterr()
    assert "not implemented yet" in captured.out and "0 of 3 exercises pass" in captured.out
    stranger = tmp_path / "notes.ipynb"
    stranger.write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    assert main(["check", str(stranger)]) == 2
    assert "none of the chapter notebooks" in capsys.readouterr().err


def test_a_used_part_of_a_withheld_module_ships_and_released_answers_are_the_students(released_packages):
    """Chapter 1 uses ``additive_attention``, which lives beside the ``rnn_forward``
    answer: only it ships. Chapter 6's demo cells use chapter 5's MultiHeadAttention,
    whose module imports chapter 6's ``masked_softmax``: it ships with a shim in place
    of ``solutions.masking`` that calls the student's own ``masked_softmax``."""
    files, info = released_packages["01_rnn_limitations"]
    rnn = files["solutions/rnn.py"].decode()
    assert info.partial_modules == {"solutions.rnn": ["additive_attention"]}
    assert "def additive_attention" in rnn and "def rnn_forward" not in rnn and "def hidden_state" not in rnn
    assert "from .rnn import additive_attention" in files["solutions/__init__.py"].decode()

    files, info = released_packages["06_masking"]
    masking = files["solutions/masking.py"].decode()
    assert info.shims == ["solutions.masking"] and "masked_softmax = _yours('masked_softmax')" in masking
    assert "def padding_mask" not in masking and "torch.finfo" not in masking
    assert "class MultiHeadAttention" in files["solutions/multihead.py"].decode()
    namespace = {}
    exec(compile(masking, "masking", "exec"), namespace)
    main = sys.modules["__main__"]
    had = hasattr(main, "masked_softmax")
    saved = getattr(main, "masked_softmax", None)
    try:
        main.masked_softmax = lambda scores, mask: ("yours", scores, mask)
        assert namespace["masked_softmax"](1, 2) == ("yours", 1, 2)
        del main.masked_softmax
        with pytest.raises(NameError, match="write it in its exercise cell"):
            namespace["masked_softmax"](1, 2)
    finally:
        if had:
            main.masked_softmax = saved


WRONG_NORMS = """
import numpy as np
from autograder.checks.base import check_report

def hidden_state_jacobian_norms(H, W_hh):  # the Frobenius norm instead of the spectral norm
    T = H.shape[0]
    norms, product = np.ones(T), np.eye(H.shape[1])
    for t in range(T - 2, -1, -1):
        product = product @ ((1 - H[t + 1] ** 2)[:, None] * W_hh.T)
        norms[t] = np.linalg.norm(product)
    return norms

report = check_report("hidden_state_jacobian_norms", hidden_state_jacobian_norms)
print(report.score, report.reason())
"""


def test_a_hint_that_needs_an_answer_is_replayed_from_the_release(released_chapters, tmp_path):
    """Chapter 1's Jacobian hints compare the answer with the norms computed several wrong
    ways by a helper that computes the answer too: the package holds that helper's
    results on the visible cases, not its code, and the hint still names the mistake."""
    package = released_chapters[1].packages["01_rnn_limitations"]
    assert "_jacobian_norms" in package.withheld_helpers["ch01_rnn_limitations"]
    assert package.replayed_calls > 0
    with zipfile.ZipFile(package.wheel) as zf:
        module = zf.read("autograder/checks/ch01_rnn_limitations.py").decode()
    assert "return _replay('ch01_rnn_limitations._jacobian_norms'" in module
    python, _, work, env = _make_env(package.wheel, tmp_path)
    proc = _run(python, ["-c", WRONG_NORMS], work, env)
    assert proc.returncode == 0, proc.stderr
    assert "Frobenius norm" in proc.stdout and "ord=2" in proc.stdout, proc.stdout


def test_every_chapter_gets_its_own_package_and_an_unservable_chapter_fails(released_chapters, tmp_path):
    """Every chapter in one release: one wheel each, none warns (chapter 9's trainer and
    translations ship as parts, with shims and a greedy stand-in). A chapter whose cells
    use a module that cannot ship is a ReleaseError naming it."""
    from autograder.release import ReleaseError

    done = released_chapters[1]
    assert list(done.packages) == chapter_ids()
    for chapter, pkg in done.packages.items():
        assert pkg.chapters == [chapter] and pkg.warnings == []
        assert pkg.wheel.name == f"transformer_book_student-0.1.0+ch{chapter[:2]}-py3-none-any.whl"
    ch9, ch10 = done.packages["09_training"], done.packages["10_inference"]
    assert {"solutions.app.trainer", "solutions.translation", "solutions.app.batching"} <= set(ch9.partial_modules)
    assert ch9.standins == ["greedy_decode"] and ch9.shims == ["solutions.training"]
    assert "solutions.app.trainer" in ch10.partial_modules and ch10.shims == ["solutions.decoding"]
    with zipfile.ZipFile(ch10.wheel) as zf:  # a part keeps its decorators: TrainConfig stays a dataclass
        assert "@dataclass\nclass TrainConfig" in zf.read("solutions/app/config.py").decode()
    with zipfile.ZipFile(ch9.wheel) as zf:
        decoding = zf.read("solutions/decoding.py").decode()
        assert "from ._standins import greedy_decode" in decoding and "def beam_search" in decoding
        assert "chapter 10" in decoding and "def greedy_decode" not in decoding
    with pytest.raises(ValueError, match="one student package per chapter"):
        done.package  # noqa: B018 - several chapters: no single package

    book = tmp_path / "book"  # the real book, but chapter 4 imports chapter 10's beam search
    book.mkdir()
    for item in BOOK.iterdir():
        if item.name != CHAPTER:
            (book / item.name).symlink_to(item)
    (book / CHAPTER).mkdir()
    for item in (BOOK / CHAPTER).iterdir():
        (book / CHAPTER / item.name).symlink_to(item)
    notebook = book / CHAPTER / f"{CHAPTER}.ipynb"
    nb = nbformat.read(str(notebook), as_version=4)
    notebook.unlink()
    nb.cells.append(nbformat.v4.new_code_cell("from solutions.decoding import beam_search"))
    nbformat.write(nb, str(notebook))
    with pytest.raises(ReleaseError, match=r"04_self_attention: the student package cannot serve the chapter "
                                           r"fully: solutions.decoding \(beam_search\)"):
        release(tmp_path / "bad", [CHAPTER, "01_rnn_limitations"], book=book, check_sync=False, package=True)
    assert not list((tmp_path / "bad").glob("*.whl"))  # chapter 1's wheel, built after the refusal, is gone too
