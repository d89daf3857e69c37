"""No student can break a class's grading (issue 26): the attacks of that round.

Each attack is a student folder beside honest classmates. What must hold:

1. one submission's failure at any per-student step (reading the folder, the
   timestamp, the notebook, grading, the journal, the gradebook rows, the
   feedback page, the CSV rows) is a reason in that student's rows, and every
   other student is graded and written in full (a failure injected at each step);
2. student ids come from the folder names as bytes: a Latin-1 twin of a UTF-8
   name and a name too long to store are graded under ids of their own;
3. a ``timestamp.txt`` that is not a date is a note, treated as on time;
4. no student source is parsed in the trusted process beyond one bound, and the
   feedback page neither reads more than grading nor shows unbounded code;
5. no CSV cell the project writes starts a formula, whatever the separator;
6. two notebooks in one chapter folder say so; a "Hint:" the student wrote is
   never the class report's diagnosis.

The class corpus (:func:`attacked_class`) runs through the real sandboxed ``grade``
and ``report`` on a one-exercise chapter; the unit tests pin each fix down.
"""
from __future__ import annotations

import csv
import hashlib
import io
import os
import tracemalloc
import unicodedata
from pathlib import Path

import nbformat
import pytest

import fixtures
from walls import cannot_start
from autograder import batch, feedback, grading, gradebook, reference_regrade, report, submissions, untrusted, verdicts
from autograder.bench import make_source_notebook
from autograder.cells import GradedCell
from autograder.scores import ExerciseScore, NotebookScores, Status
from autograder.tamper import Withheld
from autograder.text import FORMULA_STARTS, csv_cell, csv_text, csv_uncell

pytestmark = pytest.mark.slow  # its module fixture grades the attacked class in the sandbox (26-30 s)

CH = "04_self_attention"
HONEST = "honest_café"  # UTF-8 on disk
LATIN_TWIN = b"honest_caf\xe9"  # the same display name in Latin-1 bytes
LONG = b"\xe9" * 200  # legal on disk, 400 bytes once shown as UTF-8
BAD_STAMP = "4:31999999999999999123123595914"
FORMULA_NAME = "@evil;=7*6,=1+1"
FORMULA_MESSAGE = "=cmd|' /C calc'!A0;=7*6\t-2+3,@SUM(A1) Hint: you forgot the temperature"

BROKEN_SOFTMAX = """def softmax(x, axis=-1):
    return x * 0"""


def _book(root: Path) -> Path:
    """A book with chapter 4 reduced to its first exercise (softmax): seconds per grading."""
    book = root / "book"
    (book / CH).mkdir(parents=True)
    nbformat.write(make_source_notebook(CH, exercises=["softmax"]), str(book / CH / f"{CH}.ipynb"))
    return book


def _source(book: Path) -> nbformat.NotebookNode:
    return nbformat.read(str(book / CH / f"{CH}.ipynb"), as_version=4)


def _put(submitted: Path, name: bytes | str, nb, stamp: str | None = None, filename: str = f"{CH}.ipynb") -> Path:
    folder = Path(os.fsdecode(os.path.join(os.fsencode(submitted), os.fsencode(name)))) / CH
    fixtures.write_notebook(nb, folder / filename)
    if stamp is not None:
        (folder / "timestamp.txt").write_text(stamp, encoding="utf-8")
    return folder


def _rows(path: Path) -> list[dict]:
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def _hashed(raw: bytes, readable: str) -> str:
    return f"{readable}~{hashlib.sha256(raw).hexdigest()[:12]}"


# --------------------------------------------------------------------------- 2. identity from bytes


def test_student_ids_come_from_the_bytes_and_never_coincide():
    nfd = unicodedata.normalize("NFD", HONEST).encode()
    names = [HONEST.encode(), LATIN_TWIN, LONG, nfd, b"ann", b"ann~0123456789ab", b"ctl\x1b[31m"]
    ids = submissions.student_ids(names)
    assert len(set(ids.values())) == len(names)
    assert ids[HONEST.encode()] == HONEST and ids[b"ann"] == "ann"  # plain names are their own ids
    assert ids[LATIN_TWIN] == _hashed(LATIN_TWIN, HONEST)  # readable, and told apart by the raw bytes' hash
    assert ids[nfd] == _hashed(nfd, unicodedata.normalize("NFD", HONEST))  # the NFC name keeps its id
    assert ids[b"ann~0123456789ab"] != "ann~0123456789ab"  # a name shaped like a hashed id is hashed too
    assert "\x1b" not in ids[b"ctl\x1b[31m"] and ids[b"ctl\x1b[31m"].startswith("ctl\\x1b[31m~")
    long_id = ids[LONG]
    assert long_id.endswith("~" + hashlib.sha256(LONG).hexdigest()[:12])
    assert len(long_id) <= submissions.MAX_ID_CHARS and len(long_id.encode()) <= 200 and long_id.startswith("éé")
    assert submissions.student_ids(list(reversed(names))) == ids  # stable: the same bytes, the same ids
    assert submissions.student_ids([nfd]) == {nfd: nfd.decode()}  # alone, a variant is nobody's twin


# --------------------------------------------------------------------------- 3. timestamps


@pytest.mark.parametrize("text", [BAD_STAMP, "9" * 60, "2026-11-20 25:61:00", "\x00\x01\x02", "1" * 5000,
                                  "2026-11-20T17:00:00+99:00", "-" * 40, "10000000000-01-01"])
def test_a_timestamp_that_is_not_a_date_is_a_note_never_an_exception(text):
    when, note = gradebook.submission_time(text)
    assert when is None
    assert note.startswith("timestamp.txt (") and "treated as on time" in note
    assert "\x00" not in note and len(note) < 200


def test_a_real_timestamp_parses():
    when, note = gradebook.submission_time("2026-11-20 17:00:00.123456 UTC")
    assert note == "" and (when.year, when.hour, when.microsecond) == (2026, 17, 123456)
    assert gradebook.submission_time(None) == (None, "") and gradebook.submission_time("  ") == (None, "")


# --------------------------------------------------------------------------- 4. bounded reads and parses


def _withheld_name_error(name: str, source: str) -> GradedCell:
    g = GradedCell(name, "test_" + name, 1.0, {})
    g.source = source
    verdicts._judge(g, {"type": "NameError", "message": Withheld("name 'x' is not defined")}, [])
    return g


def test_a_4_mb_cell_that_fails_with_name_error_is_not_parsed_here(monkeypatch):
    parsed: list[int] = []
    real_parse = untrusted.parse_source
    monkeypatch.setattr(untrusted, "parse_source", lambda source, filename: parsed.append(len(source))
                        or real_parse(source, filename))
    big = "x = 1\n" * (4 * 2**20 // 6)  # 4 MB: ~3.6 GB of syntax tree if parsed
    tracemalloc.start()
    try:
        g = _withheld_name_error("softmax", big)
        syntax = verdicts._syntax_error(big)
        names = reference_regrade._names_in(big)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert parsed == []  # refused before the parser, every time
    assert peak < 8 * 2**20, peak  # not one syntax tree of it was built
    assert g.result.status == "error" and "is not shown" in g.result.reason  # not "does not define"
    assert syntax.startswith("not located: the cell is over the 256 kB") and names == set()
    with pytest.raises(untrusted.SourceTooLarge):
        untrusted.parse_untrusted("é" * (untrusted.MAX_PARSED_SOURCE // 2 + 1))  # the bound is in bytes
    # under the bound the same cell is parsed and judged as before
    small = _withheld_name_error("softmax", "x = 1\n")
    assert parsed == [len("x = 1\n")] and "does not define 'softmax'" in small.result.reason


SWAP_COMPILE = """import builtins

_compile = builtins.compile


def _refuse_big(source, *args, **kwargs):
    if len(source) > 2**20:
        raise NameError("compile")  # the runner reports NameError without parsing the cell
    return _compile(source, *args, **kwargs)


builtins.compile = _refuse_big
"""


def test_a_4_mb_cell_reported_as_name_error_by_a_swapped_compile_is_not_parsed_here(tmp_path, monkeypatch,
                                                                                   needs_sandbox):
    """The attack for real: the first answer swaps ``builtins.compile`` in the sandbox,
    so the runner reports the second (4 MB) cell as ``NameError`` after hidden inputs
    were sent, and the trusted side would parse it again to name what it defines."""
    source_nb = make_source_notebook(CH, exercises=["softmax", "scaled_dot_product_attention"])
    source_path = fixtures.write_notebook(source_nb, tmp_path / f"{CH}.ipynb")
    softmax = fixtures.solution_cell(source_nb, "softmax").source + "\n\n\n" + SWAP_COMPILE
    attack = fixtures.submission_with(source_nb, softmax=softmax,
                                      scaled_dot_product_attention="x = 1\n" * (4 * 2**20 // 6))
    path = fixtures.write_notebook(attack, tmp_path / "attack.ipynb")
    parsed: list[int] = []
    real_parse = untrusted.parse_source
    monkeypatch.setattr(untrusted, "parse_source", lambda source, filename: parsed.append(len(source))
                        or real_parse(source, filename))
    tracemalloc.start()
    try:
        scores = grading.grade_submission(source_path, path, seed=2, settings=grading.RunSettings(timeout=60.0)).scores
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [s.status for s in scores] == ["passed", "error"], scores
    assert "NameError" in scores[1].reason and "is not shown" in scores[1].reason
    assert not [n for n in parsed if n > untrusted.MAX_PARSED_SOURCE], parsed  # nothing of the student's over the bound
    assert peak < 256 * 2**20, peak  # the notebook and its job, not a 4 MB cell's syntax tree (~3.6 GB)


def test_the_feedback_page_reads_no_more_than_grading_and_caps_the_code(tmp_path):
    huge = tmp_path / "huge.ipynb"
    with open(huge, "wb") as fh:  # sparse: over grading's limit, under the old 50 MB of the page
        fh.truncate(untrusted.MAX_NOTEBOOK_BYTES + 1)
    assert batch.MAX_NOTEBOOK_BYTES == untrusted.MAX_NOTEBOOK_BYTES
    assert feedback.student_code(huge) == {} and feedback.student_code(huge, 50 * 2**20) == {}
    code = {"softmax": ["'" * (2 * 2**20)] + ["pass"] * 40}
    rows = [ExerciseScore("s", CH, "softmax", 0.0, 1.0, Status.FAILED, "r", grade_id="test_softmax")]
    page = feedback.render_feedback("s", CH, rows, code, "incomplete")
    assert len(page) < 2 * feedback.MAX_SHOWN_CHARS * 6 + 20_000  # escaped code within the cap, plus the page
    assert "more characters not shown" in page and "36 more cells with this exercise's id are not shown" in page


# --------------------------------------------------------------------------- 5. CSV cells


def _cells_as_read(text: str) -> list[str]:
    """Every cell a reader may see: the csv module with each separator, and a naive split."""
    cells = []
    for sep in (",", ";", "\t"):
        cells += [c for row in csv.reader(io.StringIO(text, newline=""), delimiter=sep) for c in row]
        cells += [c for line in text.splitlines() for c in line.split(sep)]
    return cells


def _formula_cells(text: str) -> list[str]:
    return [c for c in _cells_as_read(text) if c.lstrip(' "')[:1] in FORMULA_STARTS]


@pytest.mark.parametrize("text", ["=1+1", "a;=7*6", "a,=7*6", "a\t=7*6", "a; =1", 'a;"=1', "@x", "-2+3",
                                  "+1", "\t=1", "\r=1", "x\n=1", "ok - fine", "1e-3", "", FORMULA_MESSAGE])
def test_a_guarded_cell_starts_no_formula_however_the_line_is_split(text):
    assert csv_uncell(csv_cell(text)) == text
    line = csv_text(["a", "b"], [[text, text]])
    assert _formula_cells(line) == [], line
    assert [row for row in csv.reader(io.StringIO(line, newline=""))][1] == [csv_cell(text)] * 2


# --------------------------------------------------------------------------- 1. a failure at each step


def _quick_grade(source_nb, submission_nb, *, chapter=None, settings=None, hidden=True, seed=None, student=""):
    """Full marks for every test cell of a readable submission (no sandbox: the
    batch's own steps are under test here)."""
    src = nbformat.read(str(source_nb), as_version=4)
    tests = [(c.metadata.nbgrader["grade_id"], float(c.metadata.nbgrader["points"])) for c in src.cells
             if c.get("metadata", {}).get("nbgrader", {}).get("grade")]
    if submission_nb is None:
        return NotebookScores([fixtures.judged_cell(student, chapter, g, 0.0, p, Status.MISSING, "no submission")
                               for g, p in tests])
    untrusted.read_notebook(Path(submission_nb))
    return NotebookScores([fixtures.judged_cell(student, chapter, g, p, p, Status.PASSED, "") for g, p in tests])


VICTIM = "mallory"


def _only_victim(real, *, at=lambda args, kwargs: args[0]):
    """``real`` wrapped to raise for the victim's submission (found by ``at``)."""

    def wrapped(*args, **kwargs):
        if VICTIM in str(at(args, kwargs)):
            raise OSError(36, "File name too long (injected)")
        return real(*args, **kwargs)

    return wrapped


STEPS = {
    # step: (how to inject the failure, what the victim's rows say)
    "folder": (lambda mp: mp.setattr(submissions, "_read_folder", _only_victim(submissions._read_folder)),
               "the folder could not be read"),
    "timestamp": (lambda mp: mp.setattr(submissions, "_timestamp", _only_victim(submissions._timestamp)),
                  "timestamp.txt could not be read"),
    "notebook": (lambda mp: mp.setattr(batch, "file_sha256", _only_victim(batch.file_sha256)),
                 "the notebook could not be read"),
    "grading": (None, "the grader failed"),
    "journal": (lambda mp: mp.setattr(batch, "write_journal",
                                      _only_victim(batch.write_journal, at=lambda a, k: a[1].submission.student)),
                "the journal entry could not be written"),
    "gradebook": (lambda mp: mp.setattr(gradebook, "_record_submission",
                                        _only_victim(gradebook._record_submission,
                                                     at=lambda a, k: a[1].submission.student)),
                  "the gradebook could not record this submission"),
    "read back": (lambda mp: mp.setattr(gradebook, "_read_one",
                                        _only_victim(gradebook._read_one, at=lambda a, k: a[1].student)),
                  "the gradebook could not be read back"),
    "feedback": (lambda mp: mp.setattr(batch, "_write_feedback",
                                       _only_victim(batch._write_feedback, at=lambda a, k: a[1].submission.student)),
                 "the feedback page could not be written"),
    "csv rows": (lambda mp: mp.setattr(batch, "_exercise_score",
                                       _only_victim(batch._exercise_score, at=lambda a, k: a[0].submission.student)),
                 "the rows could not be written"),
}


@pytest.fixture(scope="module")
def small_class(tmp_path_factory):
    root = tmp_path_factory.mktemp("steps")
    book = _book(root)
    source = _source(book)
    for name in ("ann", VICTIM, "zoe"):
        _put(root / "submitted", name, source, stamp="2026-11-20 10:00:00 UTC")
    return root, book


@pytest.mark.parametrize("step", list(STEPS))
def test_a_failure_at_any_step_of_one_student_stays_in_that_students_rows(small_class, tmp_path, monkeypatch, step):
    root, book = small_class
    inject, said = STEPS[step]
    grade_fn = _quick_grade
    if inject is None:
        grade_fn = _only_victim(_quick_grade, at=lambda a, k: a[1])
    else:
        inject(monkeypatch)
    out = tmp_path / "out"
    batch.grade_class(root / "submitted", out, book=book, settings=grading.RunSettings(seed=5), progress=False,
                      grade_fn=grade_fn,
                      gradebook=batch.GradebookTarget(duedate="2026-11-21 00:00:00 UTC"))
    scores = _rows(out / "scores.csv")
    grades = {r["student_id"]: r for r in _rows(out / "grades.csv")}
    assert sorted(grades) == ["ann", VICTIM, "zoe"]
    for honest in ("ann", "zoe"):
        assert (grades[honest]["score"], grades[honest]["status"]) == (grades[honest]["max_score"], "complete")
        assert [r["reason"] for r in scores if r["student_id"] == honest] == [""]
        assert (out / "feedback" / honest / f"{CH}.html").is_file()
        assert (out / ".journal" / honest / f"{CH}.json").is_file()
    victim = [r for r in scores if r["student_id"] == VICTIM]
    assert victim and all(said in r["reason"] for r in victim), victim
    assert all("File name too long (injected)" in r["reason"] for r in victim)
    from nbgrader.api import Gradebook

    with Gradebook(gradebook.db_url(out / "gradebook.db")) as gb:
        held = {s.student.id: s.score for s in gb.assignment_submissions(CH)}
    assert held["ann"] == held["zoe"] == float(grades["ann"]["max_score"])


# --------------------------------------------------------------------------- the class corpus, graded for real


@pytest.fixture(scope="module")
def attacked_class(tmp_path_factory):
    """Honest students beside the attackers, graded by ``grade`` in the sandbox, and
    the honest ones alone (the baseline their pages must equal)."""
    from autograder.sandbox import check_sandbox

    try:
        check_sandbox()
    except RuntimeError as exc:
        cannot_start("bubblewrap", str(exc))
    root = tmp_path_factory.mktemp("attacked")
    book = _book(root)
    source = _source(book)
    honest = {HONEST: source, "ann": source}
    attackers = {
        LATIN_TWIN: fixtures.submission_with(source, softmax=BROKEN_SOFTMAX),
        LONG: fixtures.submission_with(source, softmax=BROKEN_SOFTMAX),
        "timer": source,
        FORMULA_NAME: fixtures.submission_with(source, softmax=f"raise ValueError({FORMULA_MESSAGE!r})"),
    }
    for sub in ("alone", "all"):
        for name, nb in honest.items():
            _put(root / sub, name, nb, stamp="2026-11-20 10:00:00.000000 UTC")
    for name, nb in attackers.items():
        _put(root / "all", name, nb, stamp=BAD_STAMP if name == "timer" else None)
    twice = _put(root / "all", "twice", source, filename="a.ipynb")
    fixtures.write_notebook(source, twice / "b.ipynb")
    target = batch.GradebookTarget(duedate="2026-11-20 12:00:00 UTC")
    runs = {}
    for sub in ("alone", "all"):
        out = root / f"out_{sub}"
        runs[sub] = batch.grade_class(root / sub, out, book=book, progress=False,
                                      settings=grading.RunSettings(timeout=60.0, seed=3),
                                      gradebook=target)
        report.class_report(out)
    return root, runs


def test_honest_students_keep_full_marks_and_the_same_page(attacked_class):
    root, runs = attacked_class
    totals = runs["all"].totals()
    for name in (HONEST, "ann"):
        score, full = totals[(name, CH)]
        assert score == full > 0
        alone = (root / "out_alone" / "feedback" / name / f"{CH}.html").read_bytes()
        assert (root / "out_all" / "feedback" / name / f"{CH}.html").read_bytes() == alone
    grades = {r["student_id"]: r for r in _rows(root / "out_all" / "grades.csv")}
    assert grades[HONEST]["score"] == grades[HONEST]["max_score"] and grades[HONEST]["status"] == "complete"
    assert [r["student_id"] for r in _rows(root / "out_all" / "scores.csv")].count(HONEST) == 1


def test_each_attacker_is_graded_under_an_id_of_its_own(attacked_class):
    root, runs = attacked_class
    out = root / "out_all"
    totals = runs["all"].totals()
    twin, long = _hashed(LATIN_TWIN, HONEST), submissions.student_ids([LONG])[LONG]
    assert totals[(twin, CH)][0] == 0 and totals[(long, CH)][0] == 0  # their own (broken) code
    assert len({g.submission.student for g in runs["all"].results}) == 7
    for sid in (twin, long):
        page = (out / "feedback" / sid / f"{CH}.html").read_text(encoding="utf-8")
        assert "x * 0" in page and (out / ".journal" / sid / f"{CH}.json").is_file()
    honest_page = (out / "feedback" / HONEST / f"{CH}.html").read_text(encoding="utf-8")
    assert "x * 0" not in honest_page
    from nbgrader.api import Gradebook

    with Gradebook(gradebook.db_url(out / "gradebook.db")) as gb:
        ids = sorted(s.student.id for s in gb.assignment_submissions(CH))
    assert ids == sorted(sid for sid, _ in totals if sid != "twice")


def test_a_bad_timestamp_is_on_time_with_a_note_and_two_notebooks_say_so(attacked_class):
    root, runs = attacked_class
    grades = {r["student_id"]: r for r in _rows(root / "out_all" / "grades.csv")}
    scores = {r["student_id"]: r for r in _rows(root / "out_all" / "scores.csv")}
    assert grades["timer"]["late_seconds"] == "0" and grades["timer"]["score"] == grades["timer"]["max_score"]
    assert "is not a date: treated as on time" in scores["timer"]["reason"]
    assert float(grades["ann"]["late_seconds"]) == 0  # submitted before the due date
    assert grades["twice"]["status"] == "invalid" and grades["twice"]["score"] == "0"
    assert "holds 2 notebooks (a.ipynb, b.ipynb) and none is named" in scores["twice"]["reason"]
    assert (root / "out_all" / "feedback" / "twice" / f"{CH}.html").is_file()


def test_no_csv_cell_starts_a_formula_and_no_student_hint_is_a_diagnosis(attacked_class):
    root, _ = attacked_class
    out = root / "out_all"
    written = [out / "scores.csv", out / "grades.csv", *sorted((out / "report").glob("*.csv"))]
    assert len(written) == 3
    for path in written:
        text = path.read_text(encoding="utf-8")
        assert _formula_cells(text) == [], path
    scores = {r["student_id"]: r for r in _rows(out / "scores.csv")}
    formula_id = csv_cell(FORMULA_NAME)
    assert formula_id in scores and "=cmd|" in csv_uncell(scores[formula_id]["reason"])
    rows, lines = report.load_rows(out)
    summary = report.chapter_summary(CH, rows, lines)
    assert FORMULA_NAME in summary.students  # read back as the student's own id
    told = [d for d in summary.diagnoses if FORMULA_NAME in d.students]
    assert told and all(not d.recognised and "temperature" not in d.text for d in told), told
    page = (out / "report" / f"{CH}.html").read_text(encoding="utf-8")
    assert "forgot the temperature" not in page
