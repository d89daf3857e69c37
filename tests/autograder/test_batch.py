"""Batch grading mechanics: discovery, journal, resume, idempotence, CSVs, parallelism.

These tests drive :func:`autograder.batch.grade_class` with ``scripted_grade``, a
stand-in for :func:`autograder.grading.grade_submission` that reads the submission's
solution cells and scores them by simple rules (a ``NotImplementedError`` stub fails,
``# a bug`` fails, anything else passes). It keeps these tests fast and about the
batch logic; the real sandboxed grading is exercised in ``test_roundtrip.py``.
"""
from __future__ import annotations

import csv
import hashlib
import html
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from autograder import batch, journal, submissions
from autograder.bench import make_submission
from autograder.grading import RunSettings
from autograder.sandbox import Limits, limits_for
from autograder.scores import NotebookScores, Status
from autograder.untrusted import read_untrusted
from fixtures import judged_cell, make_course

CHAPTERS = ["04_self_attention", "05_multi_head_attention"]
HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


def scripted_grade(source_nb, submission_nb, *, chapter=None, settings=None, hidden=True, seed=None, student=""):
    """Score a submission by rules on its text (see the module docstring)."""
    gate = os.environ.get("SCRIPTED_GRADE_GATE")
    if gate:  # "DIR:K": the first K calls (in any process) grade, every later one waits to be killed
        folder, allowed = gate.rsplit(":", 1)
        ticket = 0
        while True:  # take the next free ticket, atomically across worker processes
            try:
                os.close(os.open(os.path.join(folder, f"ticket-{ticket}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                break
            except FileExistsError:
                ticket += 1
        while ticket >= int(allowed):
            time.sleep(1)
    source = nbformat.read(str(source_nb), as_version=4)
    tests = [(c.metadata.nbgrader["grade_id"], float(c.metadata.nbgrader["points"])) for c in source.cells
             if c.get("metadata", {}).get("nbgrader", {}).get("grade")]
    if submission_nb is None:
        return NotebookScores([judged_cell(student, chapter, g, 0.0, p, Status.MISSING, "not submitted")
                               for g, p in tests])
    try:  # through the real grader's door for untrusted files (no links, pipes, devices)
        data = json.loads(read_untrusted(Path(submission_nb), 50 * 2**20).decode("utf-8"))
        cells = {c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"]) for c in data["cells"]
                 if c.get("metadata", {}).get("nbgrader", {}).get("solution")}
    except (ValueError, KeyError, TypeError) as exc:  # NotebookError is a ValueError
        return NotebookScores([judged_cell(student, chapter, g, 0.0, p, Status.INVALID,
                                           f"the notebook cannot be read: {type(exc).__name__}")
                               for g, p in tests])
    rows = []
    for grade_id, points in tests:
        name = grade_id[5:]
        code = cells.get(name)
        if code is None:
            rows.append(judged_cell(student, chapter, grade_id, 0.0, points, Status.MISSING, "no cell with this exercise's id"))
        elif "NotImplementedError()" in code:
            rows.append(judged_cell(student, chapter, grade_id, 0.0, points, Status.FAILED, "not implemented yet"))
        elif "# a bug" in code:
            rows.append(judged_cell(student, chapter, grade_id, 0.0, points, Status.FAILED,
                                    "the output has the wrong values <b>"))
        else:
            rows.append(judged_cell(student, chapter, grade_id, points, points, Status.PASSED, ""))
    return NotebookScores(rows)


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A generated book and a class of 4 students × 2 chapters (reference, blank, wrong, reference)."""
    return make_course(tmp_path_factory.mktemp("course"), CHAPTERS, students=4)


def _grade(submitted, out, book, **kwargs):
    kwargs.setdefault("grade_fn", scripted_grade)
    kwargs.setdefault("settings", RunSettings(seed=7))
    return batch.grade_class(submitted, out, book=book, progress=False, **kwargs)


@pytest.fixture(scope="module")
def clean_grades(tmp_path_factory, course):
    """The course graded once, uninterrupted, one job at a time: ``(its report files, its
    gradebook's rows)`` (:func:`_snapshot`, :func:`_gradebook_rows`), what the parallel and
    the interrupted runs must give."""
    root, book = course
    out = tmp_path_factory.mktemp("clean")
    _grade(root / "submitted", out, book, jobs=1)
    return _snapshot(out), _gradebook_rows(out / "gradebook.db")


def _read(path: Path) -> list[dict]:
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def _snapshot(out: Path) -> dict[str, bytes]:
    """Every report file but the SQLite database (compared by its rows instead)."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and ".journal" not in p.parts and p.name != "gradebook.db"}


def _gradebook_rows(db: Path) -> list[tuple]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{db}") as gb:
        rows = []
        for assignment in gb.assignments:
            for sub in gb.assignment_submissions(assignment.name):
                for nb in sub.notebooks:
                    for grade in nb.grades:
                        rows.append((sub.student.id, assignment.name, grade.name, grade.auto_score, grade.max_score))
        return sorted(rows)


# --------------------------------------------------------------------------- discovery


def test_find_submissions_nbgrader_layout_marks_missing_chapters(tmp_path, course):
    root, book = course
    sub = tmp_path / "submitted"
    (sub / "ann" / "04_self_attention").mkdir(parents=True)
    (sub / "ann" / "04_self_attention" / "04_self_attention.ipynb").write_text("{}", encoding="utf-8")
    (sub / "ann" / "04_self_attention" / "timestamp.txt").write_text("2026-11-20 10:00:00 UTC\n", encoding="utf-8")
    (sub / "bob" / "05_multi_head_attention").mkdir(parents=True)
    # renamed file: the folder's only notebook is taken
    (sub / "bob" / "05_multi_head_attention" / "my copy.ipynb").write_text("{}", encoding="utf-8")
    (sub / ".ipynb_checkpoints").mkdir()
    chapters, subs = submissions.find_submissions(sub, book=book)
    assert chapters == CHAPTERS
    got = {(s.student, s.chapter): s for s in subs}
    assert set(got) == {("ann", c) for c in CHAPTERS} | {("bob", c) for c in CHAPTERS}
    assert got[("ann", "04_self_attention")].timestamp == "2026-11-20 10:00:00 UTC"
    assert got[("ann", "05_multi_head_attention")].path is None
    assert got[("bob", "05_multi_head_attention")].path.name == "my copy.ipynb"
    assert got[("bob", "04_self_attention")].path is None


def test_find_submissions_flat_and_unknown_chapter(tmp_path, course):
    _, book = course
    (tmp_path / "ann.ipynb").write_text("{}", encoding="utf-8")
    (tmp_path / "bob.ipynb").write_text("{}", encoding="utf-8")
    chapters, subs = submissions.find_submissions(tmp_path, flat="04_self_attention", book=book)
    assert chapters == ["04_self_attention"]
    assert [(s.student, s.chapter) for s in subs] == [("ann", "04_self_attention"), ("bob", "04_self_attention")]
    with pytest.raises(ValueError, match="no source notebook"):
        submissions.find_submissions(tmp_path, flat="99_nothing", book=book)
    with pytest.raises(ValueError, match="99_nothing"):
        submissions.find_submissions(tmp_path, chapters=["99_nothing"], book=book)


def test_submission_seed_is_per_student_and_reproducible():
    a = journal.submission_seed(1, "ann", "04_self_attention")
    assert a == journal.submission_seed(1, "ann", "04_self_attention")
    assert a != journal.submission_seed(1, "bob", "04_self_attention")
    assert a != journal.submission_seed(2, "ann", "04_self_attention")
    # a resubmission (new content) meets fresh hidden inputs; the same file, the same ones
    b = journal.submission_seed(1, "ann", "04_self_attention", "digest-of-version-1")
    assert b == journal.submission_seed(1, "ann", "04_self_attention", "digest-of-version-1")
    assert b != journal.submission_seed(1, "ann", "04_self_attention", "digest-of-version-2")


# --------------------------------------------------------------------------- reports


def test_reports_have_the_contract_columns_and_totals(tmp_path, course):
    root, book = course
    out = tmp_path / "out"
    report = _grade(root / "submitted", out, book)
    scores = _read(out / "scores.csv")
    grades = _read(out / "grades.csv")
    assert list(scores[0]) == ["student_id", "assignment", "exercise", "grade_id", "score", "max_score",
                               "status", "reason", "parts", "notes", "auto_score", "manual_score",
                               "extra_credit", "comment"]
    assert list(grades[0]) == ["student_id", "assignment", "score", "max_score", "status", "raw_score",
                               "late_seconds", "penalty"]
    # no due date, no grader: the score is the checks' own, nothing late
    assert all(s["score"] == s["auto_score"] and s["manual_score"] == s["extra_credit"] == s["comment"] == ""
               for s in scores)
    assert all(g["raw_score"] == g["score"] and g["late_seconds"] == g["penalty"] == "0" for g in grades)
    assert len(grades) == 4 * len(CHAPTERS)
    by = {(g["student_id"], g["assignment"]): g for g in grades}
    # student001 reference, student002 blank, student003 wrong, student004 reference
    for chapter in CHAPTERS:
        full = by[("student001", chapter)]
        assert full["score"] == full["max_score"] and float(full["max_score"]) > 0
        assert full["status"] == "complete"
        assert by[("student002", chapter)]["score"] == "0"
        assert by[("student002", chapter)]["status"] == "incomplete"
        assert 0 < float(by[("student003", chapter)]["score"]) < float(by[("student003", chapter)]["max_score"])
    # per-cell rows add up to the per-chapter totals
    for (student, chapter), row in by.items():
        cells = [s for s in scores if s["student_id"] == student and s["assignment"] == chapter]
        assert sum(float(c["score"]) for c in cells) == pytest.approx(float(row["score"]))
    blank = [s for s in scores if s["student_id"] == "student002"]
    assert blank and all(s["reason"] == "not implemented yet" for s in blank)
    assert report.graded == len(grades) and report.reused == 0


def test_feedback_escapes_and_shows_only_the_students_code(tmp_path, course):
    root, book = course
    out = tmp_path / "out"
    _grade(root / "submitted", out, book, chapters=["04_self_attention"])
    page = (out / "feedback" / "student003" / "04_self_attention.html").read_text(encoding="utf-8")
    assert "the output has the wrong values &lt;b&gt;" in page and "<b>\n" not in page
    assert "# a bug" in page  # the student's own code is shown
    assert "HIDDEN TESTS" not in page and "hidden=True" not in page
    source = nbformat.read(str(book / "04_self_attention" / "04_self_attention.ipynb"), as_version=4)
    from autograder.book import secret_lines

    wrong = make_submission(source, "04_self_attention", "wrong", index=2)
    own = {ln.strip() for c in wrong.cells for ln in c.source.splitlines()}
    lines = {html.unescape(re.sub(r"<[^>]+>", "", ln)).strip() for ln in page.splitlines()}
    assert sorted(lines & (secret_lines(source) - own)) == []


# --------------------------------------------------------------------------- idempotence, resume


def test_regrading_is_idempotent_and_reuses_the_journal(tmp_path, course):
    root, book = course
    out = tmp_path / "out"
    _grade(root / "submitted", out, book)
    first, rows = _snapshot(out), _gradebook_rows(out / "gradebook.db")
    again = _grade(root / "submitted", out, book)
    assert again.graded == 0 and again.reused == len(again.results)
    assert _snapshot(out) == first
    assert _gradebook_rows(out / "gradebook.db") == rows  # updated, not duplicated
    forced = _grade(root / "submitted", out, book, force=True)
    assert forced.graded == len(forced.results)
    assert _snapshot(out) == first and _gradebook_rows(out / "gradebook.db") == rows


def test_a_changed_submission_is_regraded_alone(tmp_path, course):
    root, book = course
    sub = tmp_path / "submitted"
    import shutil

    shutil.copytree(root / "submitted", sub)
    out = tmp_path / "out"
    _grade(sub, out, book)
    # student002 (blank) hands in the reference for chapter 4
    src = nbformat.read(str(book / "04_self_attention" / "04_self_attention.ipynb"), as_version=4)
    nbformat.write(src, str(sub / "student002" / "04_self_attention" / "04_self_attention.ipynb"))
    report = _grade(sub, out, book)
    assert report.graded == 1
    grades = {(g["student_id"], g["assignment"]): g for g in _read(out / "grades.csv")}
    assert grades[("student002", "04_self_attention")]["status"] == "complete"
    rows = _gradebook_rows(out / "gradebook.db")
    assert len(rows) == len(set((r[0], r[1], r[2]) for r in rows))
    ann = [r for r in rows if r[0] == "student002" and r[1] == "04_self_attention"]
    assert ann and all(r[3] == r[4] for r in ann)


def test_a_broken_submission_gets_zero_with_a_reason_and_the_batch_goes_on(tmp_path, course):
    root, book = course
    sub = tmp_path / "submitted"
    for name, text in (("broken", "{ this is not json"), ("empty", "")):
        folder = sub / name / "04_self_attention"
        folder.mkdir(parents=True)
        (folder / "04_self_attention.ipynb").write_text(text, encoding="utf-8")
    good = sub / "good" / "04_self_attention"
    good.mkdir(parents=True)
    src = nbformat.read(str(book / "04_self_attention" / "04_self_attention.ipynb"), as_version=4)
    nbformat.write(src, str(good / "04_self_attention.ipynb"))

    def crashing_grade(source_nb, submission_nb, **kw):
        if submission_nb is not None and Path(submission_nb).parent.parent.name == "empty":
            raise RuntimeError("grader bug")  # even the grader failing must not stop the batch
        return scripted_grade(source_nb, submission_nb, **kw)

    out = tmp_path / "out"
    _grade(sub, out, book, grade_fn=crashing_grade)
    grades = {g["student_id"]: g for g in _read(out / "grades.csv")}
    assert grades["broken"]["score"] == "0" and grades["broken"]["status"] == "invalid"
    assert grades["empty"]["score"] == "0"
    assert grades["good"]["status"] == "complete"
    reasons = {s["student_id"]: s["reason"] for s in _read(out / "scores.csv")}
    assert "cannot be read" in reasons["broken"]
    assert "grader failed: RuntimeError: grader bug" in reasons["empty"]


def test_parallel_jobs_give_the_same_files(tmp_path, course, clean_grades):
    root, book = course
    _grade(root / "submitted", tmp_path / "two", book, jobs=2)
    assert (_snapshot(tmp_path / "two"), _gradebook_rows(tmp_path / "two" / "gradebook.db")) == clean_grades


KILL_SCRIPT = """
import faulthandler
import signal
import sys
# Ctrl-C as on a terminal: a process started from a background job or a test runner may
# inherit SIGINT ignored, and Python then leaves it ignored.
with open({diag!r}, "w") as f:
    f.write(f"SIGINT inherited as {{signal.getsignal(signal.SIGINT)!r}}\\n")
signal.signal(signal.SIGINT, signal.default_int_handler)
faulthandler.register(signal.SIGUSR1, file=open({diag!r}, "a"), all_threads=True)  # stacks, if it hangs
sys.path.insert(0, {here!r})
from pathlib import Path
from autograder import batch
from autograder.grading import RunSettings
from test_batch import scripted_grade

def on_graded(graded):
    if {elsewhere!r}:  # the pool's threads exist now: the kernel gives them the signal, not this thread
        signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGINT}})

batch.grade_class(Path({sub!r}), Path({out!r}), book=Path({book!r}), settings=RunSettings(seed=7), progress=False,
                  jobs={jobs}, grade_fn=scripted_grade, on_graded=on_graded)
"""


@pytest.mark.parametrize("sig,jobs,elsewhere", [(signal.SIGKILL, 1, False), (signal.SIGINT, 2, False),
                                                (signal.SIGINT, 2, True)],
                         ids=["killed", "ctrl-c", "ctrl-c-to-a-helper-thread"])
def test_an_interrupted_run_resumes_to_the_clean_result(tmp_path, course, clean_grades, sig, jobs, elsewhere):
    """Killed, or stopped by Ctrl-C (SIGINT) wherever the kernel delivers it: a process's
    signal may go to any of its threads, and the main thread must still stop the run."""
    root, book = course
    out = tmp_path / "out"
    diag = tmp_path / "run.diag"
    script = KILL_SCRIPT.format(here=str(HERE), sub=str(root / "submitted"), out=str(out), book=str(book),
                                jobs=jobs, elsewhere=elsewhere, diag=str(diag))
    gate = tmp_path / "gate"
    gate.mkdir()
    # Three submissions are graded; every later one blocks until the run is killed, so the
    # interruption lands midway however slow or loaded the machine is.
    env = dict(os.environ, SCRIPTED_GRADE_GATE=f"{gate}:3")
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, cwd=REPO, start_new_session=True)
    journal = out / ".journal"
    try:
        deadline = time.monotonic() + 600  # a safety net for a stuck run, not a measurement
        while time.monotonic() < deadline:  # wait for the three to be journaled
            if journal.is_dir() and len(list(journal.glob("*/*.json"))) >= 3:
                break
            assert proc.poll() is None, "the run ended before it was interrupted"
            time.sleep(0.05)
        if sig == signal.SIGKILL:
            os.killpg(proc.pid, sig)  # the whole run, workers included
        else:
            proc.send_signal(sig)
        try:
            proc.wait(timeout=60)  # a safety net: an interrupted run stops at once
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGUSR1)  # where each thread of the run is stuck
            time.sleep(2)
            pytest.fail("the run did not stop within 60 s of the signal:\n" + diag.read_text(errors="replace"))
    finally:  # a failed test leaves no run (and no gated worker) behind
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    done = len(list(journal.glob("*/*.json")))
    assert done == 3, f"the run should have stopped after the three graded submissions, {done} journaled"
    assert not (out / "grades.csv").exists()
    resumed = _grade(root / "submitted", out, book)
    assert resumed.reused == done and resumed.graded == 8 - done
    assert _snapshot(out) == clean_grades[0]
    assert _gradebook_rows(out / "gradebook.db") == clean_grades[1]


def test_csv_text_cells_cannot_become_spreadsheet_formulas():
    assert batch._cell('=HYPERLINK("http://x")') == '\'=HYPERLINK("http://x")'
    assert batch._cell("@SUM(A1)") == "'@SUM(A1)"
    assert batch._cell("raised ValueError: =1+1") == "raised ValueError: =1+1"
    assert batch._cell("") == ""


# --------------------------------------------------------------------------- the submitted tree is untrusted


def test_links_pipes_and_odd_names_in_the_submitted_tree(tmp_path, course):
    """A notebook linking to a classmate's or to the source, a student folder linking
    to a classmate's, a FIFO and a device instead of a notebook, a student called
    "seed.json" and a Latin-1 folder name: each is graded or refused on its own,
    nothing hangs, and the honest classmate keeps her grade."""
    root, book = course
    sub = tmp_path / "submitted"
    chapter = CHAPTERS[0]
    honest = sub / "ann" / chapter
    honest.mkdir(parents=True)
    ref = book / chapter / f"{chapter}.ipynb"  # the source notebook: full marks
    (honest / f"{chapter}.ipynb").write_bytes(ref.read_bytes())
    for name, make in [
        ("linker", lambda f: (f / f"{chapter}.ipynb").symlink_to(honest / f"{chapter}.ipynb")),
        ("source_linker", lambda f: (f / f"{chapter}.ipynb").symlink_to(book / chapter / f"{chapter}.ipynb")),
        ("piper", lambda f: os.mkfifo(f / f"{chapter}.ipynb")),
        ("zeroer", lambda f: (f / f"{chapter}.ipynb").symlink_to("/dev/zero")),
        ("seed.json", lambda f: (f / f"{chapter}.ipynb").write_bytes(ref.read_bytes())),
    ]:
        folder = sub / name / chapter
        folder.mkdir(parents=True)
        make(folder)
    (sub / "folder_linker").symlink_to(sub / "ann")
    latin = sub / os.fsdecode(b"M\xfcller") / chapter
    latin.mkdir(parents=True)
    (latin / f"{chapter}.ipynb").write_bytes(ref.read_bytes())

    report = batch.grade_class(sub, tmp_path / "out", chapters=[chapter], book=book, grade_fn=scripted_grade)
    totals = report.totals()
    full = totals[("ann", chapter)][1]
    assert totals[("ann", chapter)][0] == full
    assert totals[("seed.json", chapter)][0] == full
    # Latin-1 bytes: readable, and told apart from a UTF-8 "Müller" by the hash of the raw name
    latin_id = "Müller~" + hashlib.sha256(b"M\xfcller").hexdigest()[:12]
    assert totals[(latin_id, chapter)][0] == full
    for cheat in ("linker", "source_linker", "piper", "zeroer", "folder_linker"):
        graded = next(g for g in report.results if g.submission.student == cheat)
        assert totals[(cheat, chapter)][0] == 0, (cheat, graded.scores)
    grades = (tmp_path / "out" / "grades.csv").read_text(encoding="utf-8")
    assert latin_id in grades
    again = batch.grade_class(sub, tmp_path / "out", chapters=[chapter], book=book, grade_fn=scripted_grade)
    assert again.reused == len(again.results)


# --------------------------------------------------------------------------- some students, due dates


def test_grading_some_students_keeps_the_others_last_grades(tmp_path, course):
    root, book = course
    out = tmp_path / "out"
    _grade(root / "submitted", out, book)
    before = (out / "grades.csv").read_bytes()
    report = _grade(root / "submitted", out, book, students=["student002"], force=True)
    assert report.graded == len(CHAPTERS)  # student002's chapters only
    assert (out / "grades.csv").read_bytes() == before
    assert {g.submission.student for g in report.results} == {f"student00{i}" for i in range(1, 5)}
    with pytest.raises(ValueError, match="no submission of student.s. nobody"):
        _grade(root / "submitted", out, book, students=["nobody"])


def test_a_journal_entry_of_another_version_is_graded_again_never_dropped(tmp_path, course):
    root, book = course
    out = tmp_path / "out"
    first = _grade(root / "submitted", out, book)
    before = (out / "grades.csv").read_bytes()
    old = out / ".journal" / "student001" / f"{CHAPTERS[0]}.json"
    data = json.loads(old.read_text(encoding="utf-8"))
    # as the grader before typed scores wrote it (version 3): a dict row per cell, the fields grading's old CellScore had
    cell_fields = ("exercise", "grade_id", "score", "max_score", "status", "reason", "parts", "notes")
    data.update(version=3, scores=[{k: s[k] for k in cell_fields} for s in data["scores"]])
    old.write_text(json.dumps(data), encoding="utf-8")
    sub = next(g.submission for g in first.results
               if (g.submission.student, g.submission.chapter) == ("student001", CHAPTERS[0]))
    with pytest.raises(journal.JournalError, match="journal version 3, this grader reads version 4"):
        journal.read_journal_entry(out, sub)
    # Grading another student: student001's old entry is neither reused nor dropped from the reports,
    # it is graded again (student002's unchanged work comes from the journal).
    again = _grade(root / "submitted", out, book, students=["student002"])
    assert [(g.submission.student, g.submission.chapter) for g in again.results if not g.reused] == [
        ("student001", CHAPTERS[0])]
    assert (out / "grades.csv").read_bytes() == before
    assert json.loads(old.read_text(encoding="utf-8"))["version"] == journal.JOURNAL_VERSION


def test_a_due_date_gives_lateness_and_nbgraders_penalty_in_grades_csv(tmp_path, course):
    from traitlets.config import Config

    root, book = course
    sub = tmp_path / "submitted"
    import shutil

    shutil.copytree(root / "submitted", sub)
    chapter = CHAPTERS[0]
    for student, stamp in (("student001", "2026-11-20 09:00:00 UTC"), ("student004", "2026-11-22 12:00:00 UTC")):
        (sub / student / chapter / "timestamp.txt").write_text(stamp + "\n", encoding="utf-8")
    config = Config()
    config.LateSubmissionPlugin.penalty_method = "zero"
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="due date"):
        _grade(sub, out, book, chapters=[chapter], gradebook=batch.GradebookTarget(duedate="soon"))
    _grade(sub, out, book, chapters=[chapter],
           gradebook=batch.GradebookTarget(duedate="2026-11-21 12:00:00 UTC", config=config))
    grades = {g["student_id"]: g for g in _read(out / "grades.csv")}
    on_time, late = grades["student001"], grades["student004"]  # both hand in the reference
    assert (on_time["late_seconds"], on_time["penalty"], on_time["score"]) == ("0", "0", on_time["max_score"])
    assert (late["late_seconds"], late["penalty"], late["score"]) == ("86400", late["raw_score"], "0")
    assert late["raw_score"] == late["max_score"] and late["status"] == "complete"
    assert grades["student002"]["late_seconds"] == "0"  # no timestamp.txt: never late
    page = (out / "feedback" / "student004" / f"{chapter}.html").read_text(encoding="utf-8")
    assert "Submitted 1 d after the due date" in page and f"<b>0 / {late['max_score']}</b>" in page


def test_a_hand_grade_in_outs_gradebook_survives_grade_force(tmp_path, course):
    """`grade --force` after a grader changed OUT/gradebook.db (as the formgrader does)."""
    from nbgrader.api import Gradebook

    root, book = course
    out = tmp_path / "out"
    chapter = CHAPTERS[0]
    _grade(root / "submitted", out, book, chapters=[chapter])
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gb:  # student002 handed in the blank notebook
        grade = gb.find_grade("test_softmax", chapter, chapter, "student002")
        grade.manual_score = 1.0
        gb.find_comment("softmax", chapter, chapter, "student002").manual_comment = "explained on paper <ok>"
        gb.db.commit()
    _grade(root / "submitted", out, book, chapters=[chapter], force=True)
    grades = {g["student_id"]: g for g in _read(out / "grades.csv")}
    assert grades["student002"]["score"] == "1"
    row = next(s for s in _read(out / "scores.csv") if s["student_id"] == "student002" and s["exercise"] == "softmax")
    assert (row["score"], row["auto_score"], row["manual_score"], row["comment"]) == \
        ("1", "0", "1", "explained on paper <ok>")
    page = (out / "feedback" / "student002" / f"{chapter}.html").read_text(encoding="utf-8")
    assert f"Graded by hand: 1 / {row['max_score']} points (the checks gave 0)" in page
    assert "explained on paper &lt;ok&gt;" in page


def test_limit_options_reach_the_grader_and_key_the_journal_only_when_set(tmp_path, course):
    """``memory``/``disk``/``processes`` reach the grade function as keyword arguments
    and enter the journal key only when set: a journal written without them is
    reused by a run without them, and a run with them regrades (other limits,
    possibly other grades). Bad values are refused before any grading."""
    root, book = course
    seen = []

    def limited_grade(source_nb, submission_nb, **kwargs):
        seen.append(kwargs["settings"])  # the run's settings, whole
        return scripted_grade(source_nb, submission_nb, **kwargs)

    out = tmp_path / "out"
    plain = _grade(root / "submitted", out, book, chapters=[CHAPTERS[0]])  # scripted_grade knows no limit
    keys = [json.loads(p.read_text())["key"] for p in sorted((out / ".journal").glob("*/*.json"))]
    assert keys and not any({"memory", "disk", "processes"} & set(k) for k in keys)
    assert _grade(root / "submitted", out, book, chapters=[CHAPTERS[0]]).reused == len(plain.results)
    limited = _grade(root / "submitted", out, book, chapters=[CHAPTERS[0]], grade_fn=limited_grade,
                     settings=RunSettings(memory=768 * 2**20, disk=64 * 2**20, processes=20, budget=50.0))
    assert limited.graded == len(plain.results)
    assert seen and all(s == RunSettings(memory=768 * 2**20, disk=64 * 2**20, processes=20, budget=50.0) for s in seen)
    keys = [json.loads(p.read_text())["key"] for p in sorted((out / ".journal").glob("*/*.json"))]
    assert all((k["memory"], k["disk"], k["processes"]) == (768 * 2**20, 64 * 2**20, 20) for k in keys)
    for bad in (dict(memory=0), dict(disk=-1), dict(processes=2.5), dict(memory="2G")):
        with pytest.raises(ValueError, match="must be a positive whole number"):
            RunSettings(**bad)  # refused where the run's settings are made, before any grading


def test_whole_limits_are_a_run_setting_keyed_only_when_given():
    """A test's own :class:`~autograder.sandbox.Limits` (a CPU time or address space no option
    sets) travel in RunSettings too: each run gets them with the options on top, and a journal
    key names them only when given, so a real class's keys are those of a run without them."""
    key = batch.journal_key("ab", "cd", 1, "g", RunSettings(timeout=30.0, memory=2**30))
    assert key == {"submission_sha256": "ab", "source_sha256": "cd", "seed": 1, "grader": "g", "timeout": 30.0,
                   "sandbox": True, "memory": 2**30}
    assert RunSettings(timeout=30.0).run_limits() == limits_for(30.0)
    own = Limits(wall_seconds=300.0, cpu_seconds=10, memory_bytes=2 * 2**30)
    settings = RunSettings(memory=2**30, processes=20, limits=own)
    assert settings.run_limits() == Limits(wall_seconds=300.0, cpu_seconds=10, memory_bytes=4 * 2**30, processes=20,
                                           run_memory_bytes=2**30)
    assert batch.journal_key("ab", "cd", 1, "g", settings)["limits"]["cpu_seconds"] == 10
    with pytest.raises(ValueError, match="limits must be a Limits, got a dict"):
        RunSettings(limits={"cpu_seconds": 10})


def test_the_seed_is_a_run_setting_that_no_file_or_repr_shows(tmp_path, course):
    """The secret base seed travels in RunSettings, whole, and shows nowhere: not in its repr,
    not in a journal key (each submission's own seed is), not in the reports; OUT keeps it
    for resuming in a file only its owner reads."""
    root, book = course
    secret = 918273645
    settings = RunSettings(timeout=30.0, seed=secret)
    assert str(secret) not in repr(settings) and "seed" not in settings.options()
    with pytest.raises(ValueError, match="seed must be a whole number, got a str"):
        RunSettings(seed="918273645")
    out = tmp_path / "out"
    _grade(root / "submitted", out, book, chapters=[CHAPTERS[0]], settings=settings)
    shown = [p for p in out.rglob("*") if p.is_file() and p.name not in (".seed.json", "gradebook.db")
             and str(secret) in p.read_text(encoding="utf-8", errors="replace")]
    assert shown == []
    kept = out / ".journal" / ".seed.json"
    assert journal.stored_seed(out) == secret and kept.stat().st_mode & 0o077 == 0
