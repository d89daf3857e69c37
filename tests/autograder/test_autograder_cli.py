"""``python -m autograder``: argument handling, ``check``, ``selftest`` and ``bench --quick``.

Release and grade are driven end to end in ``test_release.py`` and
``test_roundtrip.py``; here the other commands, on a generated chapter-4 notebook.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import autograder.jobs
from autograder import isolation
from autograder.bench import make_book, make_source_notebook, make_submission
from autograder.cli import build_parser, main
from autograder.commands.runs import grading_sandbox
from autograder.grading import RunSettings
from autograder.sandbox import Limits

REPO = Path(__file__).resolve().parents[2]
CHAPTER = "04_self_attention"


def _autograder(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def book(tmp_path_factory) -> Path:
    return make_book(tmp_path_factory.mktemp("cli"), [CHAPTER])


def test_the_command_reads_notebooks_without_building_jsonschemas_iri_parsers():
    """``python -m autograder`` and the ``autograder`` console script import nbformat (and so
    jsonschema) but not rfc3987-syntax, whose 38 parsers cost every command about 1.7 CPU s;
    the same imports in a plain interpreter do load it, so the test would see a command that
    paid for it."""
    probe = ("import runpy, sys\n"
             "if sys.argv[1:] == ['command']:\n"
             "    sys.argv = ['autograder', 'grade', '--help']\n"
             "    try:\n"
             "        runpy.run_module('autograder', run_name='__main__', alter_sys=True)\n"
             "    except SystemExit:\n"
             "        pass\n"
             "elif sys.argv[1:] == ['script']:\n"
             "    from autograder.cli import main\n"  # what the console script runs
             "    try:\n"
             "        main(['grade', '--help'])\n"
             "    except SystemExit:\n"
             "        pass\n"
             "else:\n"
             "    import nbformat\n"
             "print('nbformat' in sys.modules, sys.modules.get('rfc3987_syntax', 'absent') is not None)")

    def loaded(how: str) -> str:
        run = subprocess.run([sys.executable, "-c", probe, how], cwd=REPO, capture_output=True, text=True, check=True)
        return run.stdout.splitlines()[-1]

    assert loaded("plain") == "True True"  # installed here: jsonschema loads it unless told not to
    assert loaded("command") == "True False"
    assert loaded("script") == "True False"  # the ``autograder`` console script


def test_parser_knows_the_commands_and_their_options():
    parser = build_parser()
    args = parser.parse_args(["grade", "subs", "--out", "o", "--jobs", "2", "--timeout", "30", "--seed", "5",
                              "--chapters", CHAPTER, "--force"])
    assert (args.submitted, args.out, args.jobs, args.timeout, args.seed, args.chapters, args.force) == (
        "subs", "o", 2, 30.0, 5, [CHAPTER], True)
    assert parser.parse_args(["grade", "subs", "--out", "o", "--flat", CHAPTER]).flat == CHAPTER
    assert parser.parse_args(["release", "--out", "r"]).out == "r"
    assert parser.parse_args(["check", "nb.ipynb"]).notebook == "nb.ipynb"
    assert parser.parse_args(["bench", "--quick"]).quick
    with pytest.raises(SystemExit):
        parser.parse_args(["grade", "subs"])  # --out is required


@pytest.mark.parametrize("command", [["grade", "subs", "--out", "o"], ["autograde", CHAPTER]])
def test_both_class_gradings_choose_their_wall_the_same_way(command, monkeypatch, capsys):
    """``grade`` and ``autograde`` take the same ``--isolation`` (an nbgrader course in a
    container without user namespaces asks for ``container`` as ``grade`` does), and the
    wall asked for is the one the run starts (``commands.runs.grading_sandbox``)."""
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args([*command, "--isolation", "namespaces"])
    assert "invalid choice: 'namespaces'" in capsys.readouterr().err
    asked = []
    monkeypatch.setattr(isolation, "set_isolation", asked.append)
    monkeypatch.setattr(isolation, "choose_isolation", lambda: "container")
    monkeypatch.setattr(isolation, "describe", lambda mode: mode)
    assert grading_sandbox(command[0], parser.parse_args([*command, "--isolation", "container"])) is True
    assert asked == ["container"] and "isolation: container" in capsys.readouterr().out


def test_grade_rejects_bad_input_with_exit_status_2(tmp_path, book, capsys):
    assert main(["grade", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o"), "--book", str(book),
                 "--unsafe-no-sandbox"]) == 2
    assert "not a folder" in capsys.readouterr().err
    (tmp_path / "subs").mkdir()
    assert main(["grade", str(tmp_path / "subs"), "--out", str(tmp_path / "o"), "--book", str(book),
                 "--jobs", "0", "--unsafe-no-sandbox"]) == 2
    assert "jobs must be at least 1" in capsys.readouterr().err


def _record_limits(monkeypatch) -> list[Limits]:
    """Every sandbox run's :class:`~autograder.sandbox.Limits`, recorded as the run starts (it still runs)."""
    seen: list[Limits] = []
    real_run_job = autograder.jobs.run_job

    def recording_run_job(job_dir, lib_dir, limits=None, **kwargs):
        seen.append(limits)
        return real_run_job(job_dir, lib_dir, limits, **kwargs)

    monkeypatch.setattr(autograder.jobs, "run_job", recording_run_job)
    return seen


@pytest.mark.slow  # 28 s in a clean clone
def test_check_prints_a_table_and_an_exit_status(tmp_path, book, monkeypatch, capsys):
    """The blank release is checked in this process (its sandbox runs' limits recorded: the
    defaults, without options); the other two through ``python -m autograder``."""
    seen = _record_limits(monkeypatch)
    source = nbformat.read(str(book / CHAPTER / f"{CHAPTER}.ipynb"), as_version=4)
    blank = tmp_path / f"{CHAPTER}.ipynb"
    nbformat.write(make_submission(source, CHAPTER, "blank"), str(blank))
    assert main(["check", str(blank), "--book", str(book)]) == 1
    printed = capsys.readouterr().out
    default = Limits()
    assert seen and [(s.run_memory_bytes, s.scratch_bytes, s.processes) for s in seen] == [
        (default.run_memory_bytes, default.scratch_bytes, default.processes)] * len(seen)
    lines = printed.splitlines()
    # The student package's report, line for line (autograder.text.check_report): a title, the table.
    assert lines[:2] == [f"{CHAPTER}.ipynb: chapter {CHAPTER}, visible checks", ""]
    assert re.split(r"\s+", lines[2]) == ["exercise", "points", "status", "message"]
    from autograder.checks import get_exercise

    for name in ("softmax", "scaled_dot_product_attention", "self_attention"):
        row = next(ln for ln in lines if ln.startswith(name + " "))
        points = sum(type(get_exercise(name)).parts.values())  # generated notebooks: the parts' sum
        assert f"0/{points:g}" in row and "failed" in row and "not implemented yet" in row
    assert "0 of 3 exercises pass" in printed

    mine = tmp_path / f"{CHAPTER} (1).ipynb"  # a browser-renamed download: recognised by its cells
    nbformat.write(source, str(mine))
    ok = _autograder("check", str(mine), "--book", str(book))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "3 of 3 exercises pass" in ok.stdout

    stranger = tmp_path / "notes.ipynb"  # no chapter's exercise cells, no stamp: --chapter is asked for
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), str(stranger))
    refused = _autograder("check", str(stranger), "--book", str(book))
    assert refused.returncode == 2 and "--chapter" in refused.stderr


@pytest.mark.slow
def test_selftest_passes_on_a_sound_book_and_fails_on_a_broken_one(tmp_path, book, capsys):
    """Through ``cli.main`` (the command line, without a fresh interpreter for each of the
    two runs; ``python -m autograder`` itself is started by the tests above)."""
    status = main(["selftest", "--book", str(book), "--jobs", "1"])
    proc = capsys.readouterr()
    assert status == 0, proc.out + proc.err
    assert "selftest passed" in proc.out
    from autograder.checks import exercises_of

    total = sum(sum(type(ex).parts.values()) for ex in exercises_of(CHAPTER))
    assert re.search(rf"ok\s+reference\s+04_self_attention\s+{total:g}/{total:g}", proc.out)
    assert re.search(rf"ok\s+released\s+04_self_attention\s+0/{total:g}", proc.out)

    # An instructor error: a test cell whose exercise has no solution cell in the notebook.
    broken = make_book(tmp_path, [CHAPTER])
    path = broken / CHAPTER / f"{CHAPTER}.ipynb"
    nb = nbformat.read(str(path), as_version=4)
    extra = make_source_notebook(CHAPTER, ["softmax"]).cells[-1]
    extra.source = extra.source.replace("softmax", "self_attention_v2")
    extra.metadata.nbgrader["grade_id"] = "test_causal_mask"
    extra.id = "cell-extra"
    nb.cells.append(extra)
    nbformat.write(nb, str(path))
    assert main(["selftest", "--book", str(broken), "--jobs", "1"]) == 1
    bad = capsys.readouterr()
    assert "FAIL reference" in bad.out and "test_causal_mask" in bad.out


@pytest.mark.slow
def test_bench_quick_runs_both_graders(capsys):
    """Both graders grade the same two submissions and the table says so; the quick run
    makes no sharded run (``test_shard.py`` grades shards and merges them on the command
    line, and checks the bench's sharded run with its grading runs recorded). Through
    ``cli.main``: the graders it times run as processes of their own either way."""
    status = main(["bench", "--quick"])
    proc = capsys.readouterr()
    assert status == 0, proc.out + proc.err
    rows = {ln.split("  ")[0].strip(): ln for ln in proc.out.splitlines()}
    assert "nbgrader autograde" in rows and "autograder grade --jobs 1" in rows
    ratio = float(re.search(r"([\d.]+)x\s*$", rows["autograder grade --jobs 1"]).group(1))
    assert ratio > 0  # a benchmark: the figure is reported, never asserted on
    assert "totals equal to nbgrader's on 2 of 2 submissions" in proc.out
    assert "shards + merge" not in proc.out and "sharded:" not in proc.out


@pytest.mark.slow  # grades in the sandbox: 21-29 s in the clean clones
def test_limit_options_reach_the_sandbox_limits(tmp_path, book, monkeypatch, capsys):
    """``--memory``, ``--disk`` and ``--processes`` of ``grade`` and ``check`` reach
    the :class:`~autograder.sandbox.Limits` of every sandbox run; ``autograde``
    passes them (and ``--budget``) on; bad values are argparse errors that say
    what is expected. No timing: the limits are read where the run starts. (Without options,
    ``check`` runs with the defaults: ``test_check_prints_a_table_and_an_exit_status``.)"""
    import autograder.course  # here: it loads the feedback pages' stack, which only this test needs

    seen = _record_limits(monkeypatch)
    source = nbformat.read(str(book / CHAPTER / f"{CHAPTER}.ipynb"), as_version=4)
    blank = tmp_path / "subs" / "ann" / CHAPTER / f"{CHAPTER}.ipynb"
    blank.parent.mkdir(parents=True)
    nbformat.write(make_submission(source, CHAPTER, "blank"), str(blank))
    options = ["--memory", "768M", "--disk", "100M", "--processes", "20", "--timeout", "60"]
    assert main(["grade", str(tmp_path / "subs"), "--out", str(tmp_path / "out"), "--book", str(book),
                 "--unsafe-no-sandbox", "--no-progress", *options]) == 0
    assert main(["check", str(blank), "--book", str(book), *options]) == 1  # the blank release fails its checks
    assert len(seen) >= 2
    for limits in seen:
        assert (limits.run_memory_bytes, limits.scratch_bytes, limits.processes) == (768 * 2**20, 100 * 2**20, 20)
        assert limits.memory_bytes == Limits().memory_bytes  # RLIMIT_AS keeps its default: 768M is below it

    passed = {}

    def fake_autograde(assignment, **kwargs):
        passed.update(kwargs)
        raise ValueError("stopped by the test")

    monkeypatch.setattr(autograder.course, "autograde", fake_autograde)
    assert main(["autograde", CHAPTER, "--unsafe-no-sandbox", "--budget", "90", *options]) == 2
    assert passed["settings"] == RunSettings(timeout=60.0, budget=90.0, memory=768 * 2**20, disk=100 * 2**20,
                                             processes=20, sandbox=False)
    capsys.readouterr()

    parser = build_parser()
    for command in (["grade", "s", "--out", "o"], ["check", "n.ipynb"], ["autograde", CHAPTER]):
        for bad, words in ((["--memory", "lots"], "expected a size such as 512M or 2G"),
                           (["--disk", "0"], "expected a positive size"),
                           (["--processes", "many"], "expected a whole number of processes")):
            with pytest.raises(SystemExit):
                parser.parse_args(command + bad)
            assert words in capsys.readouterr().err
