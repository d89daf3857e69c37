"""Sharded grading (``grade --shard I/N``) and ``merge``: one class split over processes.

The mechanics run with ``test_batch.scripted_grade`` (fast, deterministic), each shard
as its own process, in a shuffled order, one of them killed midway and run again;
the merge must equal one run over the whole class, byte for byte (CSVs, feedback,
journal) and row for row (the gradebook). One test drives the real sandboxed
grader through the command line. The deploy manifests are parsed.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import nbformat
import pytest

from autograder import batch, journal, shard, submissions
from autograder.fingerprint import grader_fingerprint
from autograder.grading import RunSettings
from autograder.bench import make_book, make_class, make_submission
from autograder.cli import main

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

from fixtures import make_course  # noqa: E402
from test_batch import _gradebook_rows, _snapshot, scripted_grade  # noqa: E402

pytestmark = pytest.mark.slow  # grades classes in separate processes, shard by shard
CHAPTERS = ["04_self_attention", "05_multi_head_attention"]
SEED = 11

@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A generated book and a class of 7 students × 2 chapters."""
    return make_course(tmp_path_factory.mktemp("course"), CHAPTERS, students=7)


class _ShardProcess:
    """Shard ``spec`` graded in a process of its own, forked from this one.

    The child has the grader and ``scripted_grade`` imported already: a fresh interpreter
    per shard paid about 6 CPU s of imports (torch through the test helpers, jsonschema's
    IRI parsers) for milliseconds of scripted grading, four times in the test below.
    ``env`` is set in the child's ``os.environ`` (``auto/N`` and the gate read it there).
    The child runs no student code and ends with ``os._exit`` (no handler of this process
    runs twice); its traceback, if any, goes to this test's captured stderr."""

    def __init__(self, course, out: Path, spec: str, env: dict | None = None):
        root, book = course
        self.returncode: int | None = None
        self.pid = os.fork()
        if self.pid == 0:  # the shard's process
            status = 1
            try:
                os.environ.update(env or {})
                shard.grade_shard(root / "submitted", out, shard.parse_shard(spec), settings=RunSettings(seed=SEED),
                                  book=book, progress=False, grade_fn=scripted_grade)
                status = 0
            except BaseException:  # reported, and the child ends with status 1
                traceback.print_exc()
            finally:
                sys.stderr.flush()  # os._exit flushes nothing
                os._exit(status)

    def poll(self) -> int | None:
        """The exit code once the process has ended, else None."""
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def kill(self) -> None:
        """SIGKILL the process (if it still runs) and reap it."""
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])

    def finish(self) -> None:
        """Wait for the process; it must end with status 0."""
        deadline = time.monotonic() + 600  # a safety net, not a measurement
        while self.poll() is None:
            if time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"shard process {self.pid} still ran after 600 s")
            time.sleep(0.05)
        assert self.returncode == 0, f"the shard process ended with {self.returncode} (its traceback above)"


def _shards(course, tmp_path: Path, n: int, name: str = "shard") -> list[Path]:
    outs = [tmp_path / f"{name}{i}" for i in range(n)]
    for i, out in enumerate(outs):
        shard.grade_shard(course[0] / "submitted", out, shard.Shard(i, n), settings=RunSettings(seed=SEED),
                          book=course[1],
                          progress=False, grade_fn=scripted_grade)
    return outs


def _merged_tree(out: Path) -> dict[str, bytes]:
    """Every file a run writes, the journal included, but the SQLite file and shard.json."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.name not in ("gradebook.db", shard.SHARD_FILE)}


@pytest.fixture(scope="module")
def single(course, tmp_path_factory):
    out = tmp_path_factory.mktemp("single") / "out"
    batch.grade_class(course[0] / "submitted", out, book=course[1], settings=RunSettings(seed=SEED), progress=False,
                      grade_fn=scripted_grade)
    return out


# --------------------------------------------------------------------------- the split


def test_parse_shard_reads_the_index_from_the_engine():
    assert shard.parse_shard("2/5") == shard.Shard(2, 5)
    assert shard.parse_shard("auto/4", {"JOB_COMPLETION_INDEX": "3"}) == shard.Shard(3, 4)
    assert shard.parse_shard("auto/4", {"SLURM_ARRAY_TASK_ID": "1"}) == shard.Shard(1, 4)
    assert shard.parse_shard("auto/4", {"JOB_COMPLETION_INDEX": "0", "SLURM_ARRAY_TASK_ID": "2"}).index == 0
    for bad, words in (("4/4", "0…3"), ("1", "I/N"), ("a/3", "whole number"), ("0/0", "N ≥ 1"),
                       ("-1/3", "0…2")):
        with pytest.raises(shard.ShardError, match=words):
            shard.parse_shard(bad, {})
    with pytest.raises(shard.ShardError, match="JOB_COMPLETION_INDEX"):
        shard.parse_shard("auto/3", {})
    with pytest.raises(shard.ShardError, match="SLURM_ARRAY_TASK_ID='7'"):
        shard.parse_shard("auto/3", {"SLURM_ARRAY_TASK_ID": "7"})


def test_a_students_shard_depends_on_the_student_not_the_list():
    students = [f"s{i:04d}" for i in range(400)]
    before = {s: shard.shard_of(s, 8) for s in students}
    after = {s: shard.shard_of(s, 8) for s in ["late-student", *reversed(students)]}
    assert all(after[s] == before[s] for s in students)
    sizes = [list(before.values()).count(i) for i in range(8)]
    assert min(sizes) > 25, sizes  # 400 students spread over every shard (50 each on average)
    assert shard.shard_of("étudiant", 3) == shard.shard_of("étudiant", 3)


def test_grade_shard_needs_a_seed(course, tmp_path):
    with pytest.raises(shard.ShardError, match="--seed"):
        shard.grade_shard(course[0] / "submitted", tmp_path / "o", shard.Shard(0, 2),
                          settings=RunSettings(seed=None), book=course[1],
                          grade_fn=scripted_grade, progress=False)


# --------------------------------------------------------------------------- shards as processes


def test_shards_as_processes_killed_and_rerun_merge_to_the_single_run(course, single, tmp_path):
    n = 3
    outs = [tmp_path / f"shard{i}" for i in range(n)]
    order = list(range(n))
    random.Random(5).shuffle(order)
    victim = order[0]
    # The victim grades one submission, then blocks (test_batch's gate) until killed.
    gate = tmp_path / "gate"
    gate.mkdir()
    proc = _ShardProcess(course, outs[victim], f"{victim}/{n}", env={"SCRIPTED_GRADE_GATE": f"{gate}:1"})
    journal = outs[victim] / ".journal"
    try:
        deadline = time.monotonic() + 300  # a safety net for a stuck run, not a measurement
        while not (journal.is_dir() and list(journal.glob("*/*.json"))):
            assert proc.poll() is None, f"the shard ended ({proc.returncode}) before it was killed (traceback above)"
            assert time.monotonic() < deadline, "the shard never journaled a submission"
            time.sleep(0.05)
    finally:
        proc.kill()
    assert not (outs[victim] / shard.SHARD_FILE).exists()
    # The others, in the shuffled order, as separate processes at the same time.
    procs = [_ShardProcess(course, outs[i], f"auto/{n}", env={"JOB_COMPLETION_INDEX": str(i)}) for i in order[1:]]
    for proc in procs:
        proc.finish()
    with pytest.raises(shard.ShardError, match=f"{outs[victim]} has no shard.json.*did not finish"):
        shard.merge_shards(outs, tmp_path / "merged", book=course[1])
    _ShardProcess(course, outs[victim], f"{victim}/{n}").finish()  # rerun: resumes from its journal
    manifest = shard.read_shard(outs[victim])
    assert manifest["shard"] == {"index": victim, "count": n}
    merged = tmp_path / "merged"
    report = shard.merge_shards(list(reversed(outs)), merged, book=course[1])
    assert len(report.results) == 7 * len(CHAPTERS)
    assert _merged_tree(merged) == _merged_tree(single)
    assert _gradebook_rows(merged / "gradebook.db") == _gradebook_rows(single / "gradebook.db")
    # Merging again (after rerunning a shard that had already finished) gives the same files.
    shard.grade_shard(course[0] / "submitted", outs[1], shard.Shard(1, n), settings=RunSettings(seed=SEED),
                      book=course[1],
                      progress=False, grade_fn=scripted_grade)
    shard.merge_shards(outs, merged, book=course[1])
    assert _merged_tree(merged) == _merged_tree(single)
    # `grade` into the merged folder with the same seed finds every submission in the journal.
    again = batch.grade_class(course[0] / "submitted", merged, book=course[1], settings=RunSettings(seed=SEED),
                              progress=False,
                              grade_fn=scripted_grade)
    assert again.graded == 0


def test_the_manifest_records_what_was_graded_and_with_what(course, tmp_path):
    outs = _shards(course, tmp_path, 2)
    manifests = [shard.read_shard(o) for o in outs]
    students = sorted(p.name for p in (course[0] / "submitted").iterdir())
    for i, m in enumerate(manifests):
        assert m["class"]["roster"] == students
        assert m["class"]["chapters"] == CHAPTERS
        assert m["settings"]["seed_sha256"] == journal.seed_digest(SEED)  # the digest: the seed is a secret
        assert str(SEED) not in json.dumps(m["settings"])
        mine = sorted({e["student"] for e in m["graded"]})
        assert mine == [s for s in students if shard.shard_of(s, 2) == i]
        for e in m["graded"]:
            path = course[0] / "submitted" / e["student"] / e["chapter"] / f"{e['chapter']}.ipynb"
            assert e["submission_sha256"] == submissions.file_sha256(path) == e["key"]["submission_sha256"]
        assert m["code"]["grader"] == grader_fingerprint()  # the journal's "same grader", not a second one
        assert set(m["code"]["sources"]) == set(CHAPTERS)
    assert manifests[0]["code"] == manifests[1]["code"]


# --------------------------------------------------------------------------- refusals


def _edit_manifest(out: Path, change) -> None:
    path = out / shard.SHARD_FILE
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data), encoding="utf-8")


def test_merge_refuses_shards_that_do_not_fit_together(course, tmp_path):
    outs = _shards(course, tmp_path, 3)
    two = _shards(course, tmp_path, 2, name="half")
    merged = tmp_path / "merged"
    with pytest.raises(shard.ShardError, match="different splits.*1/2"):
        shard.merge_shards([outs[0], outs[1], two[1]], merged, book=course[1])
    with pytest.raises(shard.ShardError, match=r"overlapping shards.*both shard 1/3"):
        shard.merge_shards([outs[0], outs[1], outs[1], outs[2]], merged, book=course[1])
    with pytest.raises(shard.ShardError, match=r"missing shard\(s\) 2/3"):
        shard.merge_shards(outs[:2], merged, book=course[1])
    with pytest.raises(shard.ShardError, match="one of the shards"):
        shard.merge_shards(outs, outs[0], book=course[1])
    assert not merged.exists()

    def code_of(name, value):
        def change(data):
            data["code"][name] = value
        return change

    for name, value, words in (("grader", "0" * 64, "differ in grader"),
                               ("sources", {c: "0" * 64 for c in CHAPTERS}, "differ in source notebooks")):
        copy = tmp_path / f"other-{name}"
        shutil.copytree(outs[2], copy)
        _edit_manifest(copy, code_of(name, value))
        with pytest.raises(shard.ShardError, match=words):
            shard.merge_shards([outs[0], outs[1], copy], merged, book=course[1])
    other_seed = tmp_path / "other-seed"
    shard.grade_shard(course[0] / "submitted", other_seed, shard.Shard(2, 3), settings=RunSettings(seed=SEED + 1),
                      book=course[1],
                      progress=False, grade_fn=scripted_grade)
    with pytest.raises(shard.ShardError, match="differ in seed"):
        shard.merge_shards([outs[0], outs[1], other_seed], merged, book=course[1])
    other_node = tmp_path / "other-node"  # another isolation on another node: merged, and recorded
    shutil.copytree(outs[2], other_node)
    _edit_manifest(other_node, lambda data: data["settings"].update(isolation="container"))
    shard.merge_shards([outs[0], outs[1], other_node], tmp_path / "mixed", book=course[1])
    assert shard.isolation_of([outs[0], other_node]) == "mixed: bubblewrap, container"
    other_timeout = tmp_path / "other-timeout"
    shard.grade_shard(course[0] / "submitted", other_timeout, shard.Shard(2, 3), book=course[1],
                      progress=False, grade_fn=scripted_grade, settings=RunSettings(timeout=30.0, seed=SEED))
    with pytest.raises(shard.ShardError, match="grading options"):
        shard.merge_shards([outs[0], outs[1], other_timeout], merged, book=course[1])
    # This merge's own code differs from the shards' (they all agree among themselves).
    for out in outs:
        _edit_manifest(out, code_of("grader", "1" * 64))
    with pytest.raises(shard.ShardError, match="another grader.*than this merge's"):
        shard.merge_shards(outs, merged, book=course[1])
    assert not merged.exists()


def test_a_late_student_is_refused_until_its_shard_is_rerun(course, tmp_path):
    root, book = course
    submitted = tmp_path / "submitted"
    shutil.copytree(root / "submitted", submitted)
    n = 3
    outs = [tmp_path / f"shard{i}" for i in range(n)]

    def run(i):
        shard.grade_shard(submitted, outs[i], shard.Shard(i, n), settings=RunSettings(seed=SEED), book=book,
                          progress=False,
                          grade_fn=scripted_grade)

    late = next(f"late{i}" for i in range(100) if shard.shard_of(f"late{i}", n) == 0)
    run(0)
    for chapter in CHAPTERS:  # the late student hands in after shard 0 ran, before the others
        folder = submitted / late / chapter
        folder.mkdir(parents=True)
        source = nbformat.read(str(book / chapter / f"{chapter}.ipynb"), as_version=4)
        nbformat.write(make_submission(source, chapter, "reference", index=3), str(folder / f"{chapter}.ipynb"))
    run(1)
    run(2)
    with pytest.raises(shard.ShardError, match=f"'{late}' was under SUBMITTED.*rerun shard 0/3"):
        shard.merge_shards(outs, tmp_path / "merged", book=book)
    run(0)
    report = shard.merge_shards(outs, tmp_path / "merged", book=book)
    assert late in {g.submission.student for g in report.results}
    single = tmp_path / "single"
    batch.grade_class(submitted, single, book=book, settings=RunSettings(seed=SEED), progress=False,
                      grade_fn=scripted_grade)
    assert _merged_tree(tmp_path / "merged") == _merged_tree(single)
    # A submission changed after its shard graded it is refused too.
    victim = next(p for p in sorted(submitted.glob("*/*/*.ipynb")))
    victim.write_text(victim.read_text(encoding="utf-8").replace("\n", "\n "), encoding="utf-8")
    with pytest.raises(shard.ShardError, match="changed after shard"):
        shard.merge_shards(outs, tmp_path / "merged2", book=book)


# --------------------------------------------------------------------------- the command line, real grading


@pytest.mark.usefixtures("needs_sandbox")
def test_grade_shard_and_merge_on_the_command_line_equal_one_run(tmp_path, capsys):
    """The real grader, in the sandbox: 3 students of chapter 4, two shards as processes
    (``python -m autograder grade --shard auto/2``). The single run, the merges and a shard
    without ``--seed`` (refused before anything is read) go through ``cli.main`` here: the
    same command line, without a fresh interpreter's imports for each (about 2 CPU s)."""
    book = make_book(tmp_path, ["04_self_attention"])
    make_class(tmp_path / "submitted", {"04_self_attention": book / "04_self_attention" / "04_self_attention.ipynb"},
               students=3)
    args = ["grade", str(tmp_path / "submitted"), "--book", str(book), "--seed", "3", "--no-progress"]
    env = dict(os.environ, PYTHONPATH=str(REPO))

    assert main([*args, "--out", str(tmp_path / "single")]) == 0
    assert main([*args[:-3], "--no-progress", "--out", str(tmp_path / "x"), "--shard", "0/2"]) == 2
    assert "--seed" in capsys.readouterr().err
    for i in (1, 0):
        done = subprocess.run([sys.executable, "-m", "autograder", *args, "--out", str(tmp_path / f"s{i}"), "--shard",
                               "auto/2"], cwd=REPO, env=dict(env, SLURM_ARRAY_TASK_ID=str(i)), capture_output=True,
                              text=True, timeout=900)
        assert done.returncode == 0, done.stderr
        assert f"shard {i}/2" in done.stdout
    assert main(["merge", str(tmp_path / "s0"), str(tmp_path / "s1"), "--out", str(tmp_path / "merged"),
                 "--book", str(book)]) == 0
    assert _snapshot(tmp_path / "merged") == _snapshot(tmp_path / "single")
    assert _gradebook_rows(tmp_path / "merged" / "gradebook.db") == _gradebook_rows(tmp_path / "single" / "gradebook.db")
    capsys.readouterr()
    assert main(["merge", str(tmp_path / "s0"), "--out", str(tmp_path / "m2"), "--book", str(book)]) == 1
    assert "missing shard(s) 1/2" in capsys.readouterr().err


# --------------------------------------------------------------------------- the benchmark's sharded run


def test_bench_reports_per_core_rates_scaling_and_the_sharding_overhead(tmp_path):
    from autograder.bench import default_jobs, format_table, same_results

    assert default_jobs(1) == [1] and default_jobs(2) == [1, 2] and default_jobs(6) == [1, 2, 4, 6]
    result = {"submissions": 12, "chapters": ["04_self_attention"], "nbgrader_s": 60.0, "cores": 2,
              "autograder_s": {1: 40.0, 2: 25.0}, "same_totals": {"agree": 12, "total": 12},
              "nbgrader_cpu_s": 48.0, "autograder_cpu_s": {1: 16.0, 2: 24.0}, "load": 3.5,
              "autograder_own_cpu_s": {1: 4.0, 2: 6.0},
              "sharded": {"shards": 2, "single_s": 25.0, "shards_s": 24.0, "merge_s": 6.0, "same": True}}
    table = format_table(result)
    rows = {line.split("  ")[0].strip(): line for line in table.splitlines()}
    assert "12 submissions (04_self_attention), 2 CPU core(s), load average 3.5 at the end" in table
    # 12 submissions in 40 s on one core: 0.300 per core-second, 1.5x nbgrader's 60 s;
    # 16 CPU seconds: 0.750 per CPU second, 3x nbgrader's 48
    assert rows["autograder grade --jobs 1"].split()[-5:] == ["0.300", "1.50x", "16.0", "0.750", "3.00x"]
    assert rows["autograder grade --jobs 2"].split()[-5:] == ["0.240", "2.40x", "24.0", "0.500", "2.00x"]
    assert rows["nbgrader autograde"].split()[-5:] == ["0.200", "1.00x", "48.0", "0.250", "1.00x"]  # 12 / 60 s
    assert rows["2 shards + merge"].split()[-5:] == ["0.200", "2.00x", "-", "-", "-"]  # 12 / (30 s × 2 cores)
    # the grader's CPU split per submission: 16 CPU s = its own processes 4 + its sandboxes 12, over 12
    assert ("grade --jobs 1 CPU s per submission: 1.33 = its own processes 0.33 + its sandboxes 1.00 "
            "(nbgrader: 4.00)") in table
    assert "grade --jobs 2 CPU s per submission: 2.00 = its own processes 0.50 + its sandboxes 1.50" in table
    del result["nbgrader_cpu_s"], result["autograder_cpu_s"]  # a result without CPU times: dashes
    assert format_table(result).splitlines()[2].split()[-3:] == ["-", "-", "-"]
    assert "per submission" not in format_table(result)  # and no split without the total
    assert "--jobs 2 1.60x (80% efficiency)" in table
    assert "= 30.0 s vs one run --jobs 2 25.0 s: overhead +20%" in table and "identical" in table
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        out.mkdir()
        (out / "scores.csv").write_text("student_id,score\ns1,1\n")
        (out / "grades.csv").write_text("student_id,score\ns1,1\n")
    assert same_results(a, b)
    (b / "grades.csv").write_text("student_id,score\ns1,2\n")
    assert not same_results(a, b)


def test_the_bench_sharded_run_reuses_its_jobs_n_run_and_compares_the_merge_with_it(tmp_path, monkeypatch):
    """``run_sharded`` against the ``grade --jobs N`` run the bench already made: the class
    is not graded once more for it; the shards and the merge run with the same options,
    and the merged files are compared with that run's. Without one, it grades the class
    with ``--jobs N`` first. The grading runs are recorded, not made (the real shards and
    merge are graded above, on the command line)."""
    from autograder import bench

    ran, started = [], []

    def fake_run(cmd, cwd, env):
        ran.append(cmd)
        out = Path(cmd[cmd.index("--out") + 1])
        out.mkdir(parents=True)
        for name in ("scores.csv", "grades.csv"):
            (out / name).write_text("student_id,score\ns1,1\n")
        return 2.0

    def fake_popen_timed(cmds, cwd, env):
        started.extend(cmds)
        return 3.0

    monkeypatch.setattr(bench, "_run", fake_run)
    monkeypatch.setattr(bench, "_popen_timed", fake_popen_timed)
    args = ["--timeout", "60", "--seed", "1", "--no-progress"]
    made = tmp_path / "out_jobs2"
    fake_run(["grade", "--out", str(made)], tmp_path, {})
    ran.clear()
    result = bench.run_sharded(tmp_path / "class", tmp_path, 2, args, {}, single=(made, 5.0))
    assert [c[c.index("--shard") + 1] for c in started] == ["0/2", "1/2"]
    assert all(c[-len(args) - 4:-4] == args for c in started)  # the shards grade as the --jobs 2 run did
    assert len(ran) == 1 and ran[0][3] == "merge"  # the merge only: no second grading of the class
    assert result == {"shards": 2, "single_s": 5.0, "shards_s": 3.0, "merge_s": 2.0, "same": True}
    (made / "grades.csv").write_text("student_id,score\ns1,0\n")  # the merge differs from the run it is held to
    assert bench.run_sharded(tmp_path / "class", tmp_path / "again", 2, args, {}, single=(made, 5.0))["same"] is False

    ran.clear()
    (tmp_path / "fresh").mkdir()
    result = bench.run_sharded(tmp_path / "class", tmp_path / "fresh", 2, args, {})
    assert [c[3] for c in ran] == ["grade", "merge"] and ran[0][-2:] == ["--jobs", "2"]
    assert result["single_s"] == 2.0 and result["same"] is True
