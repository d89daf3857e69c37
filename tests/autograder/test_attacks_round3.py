"""No text a student controls stops a class, every folder is journaled, the seed stays
secret and the timestamp is proven (issue 36, attacks 2, 3 and 5).

The class corpus (:func:`attacked`) puts, beside honest students, a submission in every
field a student reaches: a lone surrogate raised by a cell (``"caf" + chr(0xDCFF)``) and
by a case, control and bidi characters in the folder name, in ``timestamp.txt`` and in
the message, a Latin-1 folder name and a Latin-1 notebook name, two notebooks (one
Latin-1) in one folder; and the folders honest students leave: a chapter folder with
``04_self_attention-Copy1.ipynb`` and ``final.ipynb``, an empty chapter folder. It runs
through the real sandboxed ``grade``, through ``grade --shard I/3`` + ``merge`` and
through Gradescope's ``run``; an honest student graded alone is the baseline whose
marks and feedback page must not move.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import nbformat
import pytest

import fixtures
from autograder import batch, files, gradescope, grading, journal, report, shard
from autograder.cli import main
from autograder.results import RUN_MARKER, ClassResults, ResultsError
from autograder.text import safe_text
from test_attacks_class import CH, _book, _put, _quick_grade, _rows, _source
from test_shard import _merged_tree

pytestmark = pytest.mark.slow  # its module fixture grades a class in the sandbox (23-35 s)

SURROGATE = "caf" + chr(0xDCFF)
CONTROLS = "\x1b[2J\x07\u202e"
CELL_RAISES = f"raise ValueError({SURROGATE + CONTROLS!r})\ndef softmax(x, axis=-1):\n    return x"
CASE_RAISES = f"def softmax(x, axis=-1):\n    raise ValueError({SURROGATE + CONTROLS!r})"
STAMP = "2026-11-20 10:00:00 UTC"
DUE = "2026-11-20 12:00:00 UTC"


def test_safe_text_makes_any_text_encodable_once():
    assert safe_text(SURROGATE) == "cafÿ"  # a surrogate escape is its byte, read as Latin-1
    assert safe_text("a" + chr(0xD800) + "b") == "a\\ud800b"  # any other lone surrogate: an escape
    assert safe_text(chr(0xDC85)) == "\\x85"  # a byte that is a C1 control once read: escaped too
    assert safe_text(CONTROLS) == "\\x1b[2J\\x07\\u202e"
    assert safe_text("plain text, café, 日本") == "plain text, café, 日本"
    for text in (SURROGATE + CONTROLS, "".join(map(chr, range(0xD7F0, 0xE010)))):
        safe_text(text).encode("utf-8")  # never raises
        assert safe_text(safe_text(text)) == safe_text(text)


def test_writers_cannot_fail_on_content(tmp_path):
    files.write_atomic(tmp_path / "x.json", json.dumps({"r": SURROGATE}, ensure_ascii=False))
    assert json.loads((tmp_path / "x.json").read_text(encoding="utf-8")) == {"r": SURROGATE}


def _students(root: Path, source, sub: str, attackers: bool) -> None:
    _put(root / sub, "honest", source, stamp=STAMP)
    if not attackers:
        return
    _put(root / sub, "cell", fixtures.submission_with(source, softmax=CELL_RAISES), stamp=STAMP)
    case = _put(root / sub, "case" + CONTROLS, fixtures.submission_with(source, softmax=CASE_RAISES))
    (case / "timestamp.txt").write_bytes(STAMP.encode() + CONTROLS.encode() + b"caf\xff")  # not UTF-8
    _put(root / sub, b"caf\xe9", fixtures.submission_with(source, softmax=CASE_RAISES), stamp=STAMP,
         filename=os.fsdecode(b"caf\xe9 \x1b.ipynb"))
    twice = _put(root / sub, "twice", source, filename=os.fsdecode(b"r\xe9sum\xe9.ipynb"))
    fixtures.write_notebook(source, twice / "other.ipynb")
    copy = _put(root / sub, "copy", source, filename=f"{CH}-Copy1.ipynb", stamp=STAMP)
    fixtures.write_notebook(source, copy / "final.ipynb")
    (root / sub / "empty" / CH).mkdir(parents=True)


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    """The corpus graded by ``grade``, by three shards and a merge, and the honest student alone."""
    from autograder.sandbox import check_sandbox

    try:
        check_sandbox()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    root = tmp_path_factory.mktemp("round3")
    book = _book(root)
    source = _source(book)
    _students(root, source, "alone", attackers=False)
    _students(root, source, "all", attackers=True)
    target = batch.GradebookTarget(duedate=DUE)
    settings = grading.RunSettings(timeout=60.0, seed=3)
    runs = {sub: batch.grade_class(root / sub, root / f"out_{sub}", book=book, progress=False,
                                   settings=settings, gradebook=target) for sub in ("alone", "all")}
    outs = [root / f"shard{i}" for i in range(3)]
    for i, out in enumerate(outs):
        shard.grade_shard(root / "all", out, shard.Shard(i, 3), book=book, progress=False,
                          settings=settings, gradebook=target)
    runs["merged"] = shard.merge_shards(outs, root / "out_merged", book=book)
    return root, book, runs, outs


def test_every_run_finishes_and_the_honest_student_keeps_marks_and_page(attacked):
    root, _, runs, _ = attacked
    alone = root / "out_alone" / "feedback" / "honest" / f"{CH}.html"
    for run in ("all", "merged"):
        out = root / f"out_{run}"
        grades = {r["student_id"]: r for r in _rows(out / "grades.csv")}
        assert grades["honest"]["score"] == grades["honest"]["max_score"] != "0"
        assert grades["honest"]["status"] == "complete"
        assert (out / "feedback" / "honest" / f"{CH}.html").read_bytes() == alone.read_bytes()
        assert len(grades) == 7 and not (out / RUN_MARKER).exists()
        ClassResults.read(out)  # readable, and current
        report.class_report(out)
        for path in (out / "results.json", out / "scores.csv", out / "grades.csv", *out.glob("report/*")):
            text = path.read_text(encoding="utf-8")  # valid UTF-8 throughout
            assert "\x1b" not in text and "\u202e" not in text, path


def test_the_surrogate_and_the_controls_reach_the_rows_as_text(attacked):
    root, _, runs, _ = attacked
    scores = {r["student_id"]: r for r in _rows(root / "out_all" / "scores.csv")}
    assert "cafÿ\\x1b[2J\\x07\\u202e" in scores["cell"]["reason"]
    assert scores["cell"]["status"] == "error" and scores["cell"]["score"] == "0"
    evil = [sid for sid in scores if sid.startswith("case")]
    assert len(evil) == 1 and "\x1b" not in evil[0] and "\\x1b" in evil[0]
    assert scores[evil[0]]["score"] == "0"
    latin = [sid for sid in scores if sid.startswith("café~")]
    assert len(latin) == 1 and scores[latin[0]]["score"] == "0"  # its own (raising) code was graded
    assert "résumé.ipynb" in scores["twice"]["reason"] and "other.ipynb" in scores["twice"]["reason"]


def test_doubled_and_empty_folders_are_journaled_and_merge(attacked):
    root, _, runs, outs = attacked
    scores = {r["student_id"]: r for r in _rows(root / "out_all" / "scores.csv")}
    assert "holds 2 notebooks" in scores["copy"]["reason"] and "final.ipynb" in scores["copy"]["reason"]
    assert "holds no notebook" in scores["empty"]["reason"]
    keys = []
    for out in outs:
        manifest = shard.read_shard(out)
        for entry in manifest["graded"]:
            assert journal.read_journal_entry(out, batch.Submission(entry["student"], CH, None)).key == entry["key"]
            keys.append({k: v for k, v in entry["key"].items()
                         if k not in ("submission_sha256", "seed", "source_sha256")})
    assert len(keys) == 7 and all(k == keys[0] for k in keys)  # the settings, the same for every folder
    assert {s for o in outs for s in (e["student"] for e in shard.read_shard(o)["graded"])} >= {"copy", "empty"}
    single, merged = _merged_tree(root / "out_all"), _merged_tree(root / "out_merged")
    for name in ("scores.csv", "grades.csv", "results.json"):
        assert merged[name] == single[name], name


def test_gradescope_runs_with_a_surrogate_and_latin1_names(attacked, tmp_path):
    root, book, _, _ = attacked
    gs = tmp_path / "autograder"
    (gs / "source" / "book" / CH).mkdir(parents=True)
    shutil.copy(book / CH / f"{CH}.ipynb", gs / "source" / "book" / CH / f"{CH}.ipynb")
    (gs / "source" / gradescope.CONFIG).write_text(json.dumps({"chapter": CH, "seed": 5, "timeout": 60}))
    (gs / "submission_metadata.json").write_text(json.dumps({"users": [{"id": "x" + chr(0xDCFF)}]}),
                                                 encoding="utf-8")
    source = _source(book)

    def submit(files: dict) -> dict:
        shutil.rmtree(gs / "submission", ignore_errors=True)
        (gs / "submission").mkdir()
        for name, nb in files.items():
            fixtures.write_notebook(nb, Path(os.fsdecode(os.path.join(os.fsencode(gs / "submission"), name))))
        data = gradescope.run(gs)
        written = json.loads((gs / "results" / "results.json").read_text(encoding="utf-8"))
        gradescope.validate_results(written)
        return written

    raising = submit({b"caf\xe9.ipynb": fixtures.submission_with(source, softmax=CELL_RAISES)})
    assert raising["score"] == 0 and any("cafÿ" in t["output"] for t in raising["tests"])
    two = submit({b"caf\xe9.ipynb": source, b"other.ipynb": source})
    assert two["score"] == 0 and "café.ipynb" in two["output"]
    honest = submit({f"{CH}.ipynb".encode(): source})
    assert honest["score"] == honest["extra_data"]["max_score"] > 0


# --------------------------------------------------------------------------- a run that stops


def test_a_run_that_stops_leaves_no_result_shown_as_current(tmp_path, monkeypatch):
    book = _book(tmp_path)
    _put(tmp_path / "submitted", "ann", _source(book), stamp=STAMP)
    out = tmp_path / "out"
    batch.grade_class(tmp_path / "submitted", out, book=book, settings=grading.RunSettings(seed=1), progress=False,
                      grade_fn=_quick_grade)
    assert report.load_rows(out)[0]  # a finished run: read as current

    def crash(*args, **kwargs):
        raise RuntimeError("disk full (injected)")

    monkeypatch.setattr(batch, "write_reports", crash)
    with pytest.raises(RuntimeError, match="injected"):
        batch.grade_class(tmp_path / "submitted", out, book=book, settings=grading.RunSettings(seed=1),
                          progress=False, grade_fn=_quick_grade,
                          force=True)
    assert (out / "results.json").is_file()  # the earlier run's, still there ...
    with pytest.raises(report.ReportError, match=r"\(grade, started .*\) did not finish"):
        report.load_rows(out)  # ... and never presented as this run's
    monkeypatch.undo()
    batch.grade_class(tmp_path / "submitted", out, book=book, settings=grading.RunSettings(seed=1), progress=False,
                      grade_fn=_quick_grade)
    assert report.load_rows(out)[0] and not (out / RUN_MARKER).exists()


# --------------------------------------------------------------------------- the seed, off the command line


def test_the_seed_comes_from_a_private_file_or_the_environment(tmp_path):
    path = tmp_path / "seed.txt"
    path.write_text("81234\n")
    path.chmod(0o600)
    assert journal.hidden_seed(None, path, {}) == (81234, None)
    assert journal.hidden_seed(None, None, {journal.SEED_VARIABLE: " 77 "}) == (77, None)
    assert journal.hidden_seed(None, None, {}) == (None, None)
    seed, warning = journal.hidden_seed(5, None, {})
    assert seed == 5 and "/proc/PID/cmdline" in warning
    path.chmod(0o640)
    with pytest.raises(journal.SeedError, match=rf"--seed-file {path} has mode 0640.*chmod 600"):
        journal.hidden_seed(None, path, {})
    path.chmod(0o600)
    path.write_text("eighty")
    with pytest.raises(journal.SeedError, match="whole number"):
        journal.hidden_seed(None, path, {})
    with pytest.raises(journal.SeedError, match="not both"):
        journal.hidden_seed(5, path, {})
    with pytest.raises(journal.SeedError, match="cannot be read"):
        journal.hidden_seed(None, tmp_path / "none", {})


def test_grade_takes_the_seed_file_and_refuses_one_others_can_read(tmp_path, capsys, monkeypatch):
    book = _book(tmp_path)
    _put(tmp_path / "submitted", "ann", _source(book), stamp=STAMP)
    path = tmp_path / "seed.txt"
    path.write_text("4242")
    path.chmod(0o644)
    args = ["grade", str(tmp_path / "submitted"), "--out", str(tmp_path / "out"), "--book", str(book),
            "--seed-file", str(path), "--unsafe-no-sandbox", "--no-progress"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"grade: --seed-file {path} has mode 0644" in err and not (tmp_path / "out").exists()
    monkeypatch.setattr(batch, "_default_grade_fn", lambda: _quick_grade)
    path.chmod(0o600)
    assert main(args) == 0
    assert json.loads((tmp_path / "out" / ".journal" / ".seed.json").read_text())["seed"] == 4242
    monkeypatch.setenv(journal.SEED_VARIABLE, "99")
    assert main(args[:-4] + ["--unsafe-no-sandbox", "--no-progress", "--force"]) == 0
    assert json.loads((tmp_path / "out" / ".journal" / ".seed.json").read_text())["seed"] == 99
    assert main(args[:-4] + ["--seed", "7", "--unsafe-no-sandbox", "--no-progress"]) == 0
    assert "visible to every process" in capsys.readouterr().err


# --------------------------------------------------------------------------- provenance at merge


def test_a_timestamp_changed_between_shard_and_merge_is_refused(tmp_path):
    book = _book(tmp_path)
    source = _source(book)
    for name in ("ann", "bob", "cyd", "dee"):
        _put(tmp_path / "submitted", name, source, stamp="2026-11-24 10:00:00 UTC")
    outs = [tmp_path / f"shard{i}" for i in range(2)]
    for i, out in enumerate(outs):
        shard.grade_shard(tmp_path / "submitted", out, shard.Shard(i, 2), settings=grading.RunSettings(seed=3),
                          book=book, progress=False,
                          grade_fn=_quick_grade, gradebook=batch.GradebookTarget(duedate=DUE))
    entries = {e["student"]: e for o in outs for e in shard.read_shard(o)["graded"]}
    assert entries["bob"]["timestamp"] == "2026-11-24 10:00:00 UTC"
    (tmp_path / "submitted" / "bob" / CH / "timestamp.txt").write_text("2026-11-20 10:00:00 UTC")  # "on time"
    with pytest.raises(shard.ShardError, match=r"timestamp.txt of bob/04_self_attention .* changed after shard"):
        shard.merge_shards(outs, tmp_path / "merged", book=book)
    (tmp_path / "submitted" / "bob" / CH / "timestamp.txt").write_text("2026-11-24 10:00:00 UTC")
    merged = shard.merge_shards(outs, tmp_path / "merged", book=book)
    late = {r["student_id"]: float(r["late_seconds"]) for r in _rows(tmp_path / "merged" / "grades.csv")}
    assert late["bob"] > 3 * 86400 and len(merged.results) == 4
