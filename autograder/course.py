"""``python -m autograder autograde ASSIGNMENT``: the sandboxed grader in an nbgrader course.

Run where an instructor would run ``nbgrader autograde ASSIGNMENT`` (the folder
with ``nbgrader_config.py``, or ``--course DIR``), it does what that command does,
with student code in the sandbox:

1. reads the course's configuration with nbgrader's own loader and
   ``CourseDirectory`` (the folders, ``db_url``, ``course_id``, the late-penalty
   plugin), so a renamed ``source``/``submitted``/``autograded`` folder or a
   gradebook elsewhere is honoured;
2. grades ``submitted/<student>/ASSIGNMENT/`` with :func:`autograder.batch.grade_class`
   (the same code path as ``python -m autograder grade``: journal, resume,
   idempotent regrades), filling the course's own gradebook: auto scores and
   verdicts, the due date and nbgrader's late penalty; a grader's manual scores,
   extra credit and comments are kept;
3. writes nbgrader's ``autograded/<student>/ASSIGNMENT/ASSIGNMENT.ipynb``: the
   submission cleaned by nbgrader's own sanitising preprocessors (outputs cleared,
   locked and test cells restored from the gradebook), its other code cells with
   the outputs of their execution (once more, in the sandbox, for display only:
   :mod:`autograder.outputs`; then nbgrader's ``IgnorePattern`` and ``LimitOutput``),
   and each test cell's verdict, graded parts and hints as its output in the form
   nbgrader's autograde leaves them — full marks: printed text; partial credit:
   the points as the cell's result; nothing earned: an error — plus
   ``timestamp.txt`` and the source folder's other files, as nbgrader copies them.

So ``nbgrader formgrader``, ``nbgrader generate_feedback`` and ``nbgrader export``
work on the result exactly as after ``nbgrader autograde``. The CSVs and our own
feedback pages go to ``grades/ASSIGNMENT/`` in the course (``--out``).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat.v4 import new_output

from .batch import BatchReport, GradebookTarget, grade_class
from .book import source_notebook
from .extensions import parse_duedate
from .feedback import STATUS_WORDS
from .journal import Graded
from .outputs import execute_for_display
from .release import student_version
from .run_settings import RunSettings
from .scores import ExerciseScore, Status
from .text import score_text
from .untrusted import MAX_NOTEBOOK_BYTES, NotebookError, read_untrusted

__all__ = ["Course", "CourseReport", "load_course", "autograde", "autograded_notebook", "verdict_text",
           "test_cell_outputs"]

DEFAULT_STRUCTURE = os.path.join("{nbgrader_step}", "{student_id}", "{assignment_id}")

# The exception name a test cell that earned nothing shows, by grading status.
ERROR_NAMES = {
    Status.FAILED: "CheckFailure",
    Status.ERROR: "GradingError",
    Status.MISSING: "MissingAnswer",
    Status.TIMEOUT: "TimeoutError",
    Status.CHEAT: "TamperingDetected",
    Status.INVALID: "InvalidNotebook",
}


# --------------------------------------------------------------------------- the course


@dataclass
class Course:
    """An nbgrader course directory, as nbgrader's own configuration describes it.

    Attributes:
        root: the course folder (``CourseDirectory.root``).
        coursedir: nbgrader's ``CourseDirectory``, configured from the course.
        config: the traitlets ``Config`` nbgrader loaded (for its preprocessors and plugins).
    """

    root: Path
    coursedir: object
    config: object

    def folder(self, step: str, student: str, assignment: str) -> Path:
        """nbgrader's ``format_path``: e.g. ``folder(autograded_directory, "ann", "04_self_attention")``."""
        return Path(os.path.normpath(self.coursedir.format_path(step, student, assignment)))

    @property
    def source_root(self) -> Path:
        """The folder holding ``<assignment>/<assignment>.ipynb`` (``source/``, or ``book/`` here)."""
        return self.folder(self.coursedir.source_directory, ".", "x").parent

    @property
    def submitted_root(self) -> Path:
        """The folder holding ``<student>/<assignment>/`` (``submitted/``)."""
        return self.folder(self.coursedir.submitted_directory, "s", "x").parent.parent

    @property
    def db_url(self) -> str:
        return self.coursedir.db_url

    @property
    def course_id(self) -> str:
        return self.coursedir.course_id


def load_course(root: Path | str | None = None) -> Course:
    """Read an nbgrader course's configuration as nbgrader does.

    The user's and the system's ``nbgrader_config.py`` (Jupyter's config path) are
    loaded first, then the course folder's own, through nbgrader's ``NbGrader``
    application; the course's ``CourseDirectory`` is built from the result.

    Args:
        root: the course folder (default: the current directory).

    Returns:
        The :class:`Course`.

    Raises:
        ValueError: ``root`` is not a folder, its ``nbgrader_config.py`` fails to
            load, or it uses a ``directory_structure`` other than nbgrader's default.
    """
    from nbgrader.apps.baseapp import NbGrader  # deferred: nbgrader is slow to import
    from nbgrader.coursedir import CourseDirectory  # deferred with nbgrader
    from traitlets.config.application import Application  # deferred with nbgrader

    root = Path(root or os.getcwd()).resolve()
    if not root.is_dir():
        raise ValueError(f"course folder {root} does not exist")
    app = NbGrader(log_level=logging.ERROR)
    app.load_cwd_config = False  # the course folder is read below, wherever we run from
    app.load_config_file()
    app.raise_config_file_errors = True  # a broken course config is an error, not a warning
    try:
        Application.load_config_file(app, "nbgrader_config.py", path=str(root))
    except Exception as exc:  # noqa: BLE001 - any error of the instructor's config file
        raise ValueError(f"{root / 'nbgrader_config.py'} failed to load: {type(exc).__name__}: {exc}") from None
    config = app.config
    coursedir = CourseDirectory(config=config)
    if "root" not in config.CourseDirectory:
        coursedir.root = str(root)
    if os.path.normpath(coursedir.directory_structure) != DEFAULT_STRUCTURE:
        raise ValueError(f"CourseDirectory.directory_structure = {coursedir.directory_structure!r}: only "
                         f"nbgrader's default {DEFAULT_STRUCTURE!r} is supported")
    return Course(Path(coursedir.root), coursedir, config)


# --------------------------------------------------------------------------- autograded notebooks


def verdict_text(row: ExerciseScore) -> str:
    """A test cell's printed verdict from its score row (as the visible ``check``
    prints it): the verdict line, notes, then each graded part with its hint."""
    passed = row.status == Status.PASSED
    head = f"{'✓' if passed else '✗'} {row.exercise}: {score_text(row.score)}/{score_text(row.max_score)} points"
    if not passed:
        head += f" ({STATUS_WORDS.get(row.status, row.status.value)})"
    lines = [head]
    lines += [f"  note: {n}" for n in row.notes]
    parts = row.parts
    for p in parts:
        earned = p.score >= p.points
        lines.append(f"  {'✓' if earned else '✗'} {p.name} ({score_text(p.score)}/{score_text(p.points)})")
        if not earned:
            lines += ["      " + ln for ln in str(p.message or "failed").splitlines()]
    if not parts and row.reason:
        lines.append("  " + row.reason)
    return "\n".join(lines)


def test_cell_outputs(row: ExerciseScore, execution_count: int) -> list:
    """The outputs nbgrader's autograde would leave on a test cell with this grade.

    nbgrader reads a test cell's grade from its outputs (``nbgrader.utils.determine_grade``):
    an error output scores 0, a numeric result scores that many points (partial
    credit), anything else full marks. So: the verdict as printed text; with
    partial credit also the points as the cell's result; with nothing earned an
    error (its traceback the verdict), which the formgrader shows as a failed test.
    """
    text = verdict_text(row)
    if row.score >= row.max_score and row.status == Status.PASSED:
        return [new_output("stream", name="stdout", text=text + "\n")]
    if row.score > 0:
        return [new_output("stream", name="stdout", text=text + "\n"),
                new_output("execute_result", data={"text/plain": score_text(row.score)}, metadata={},
                           execution_count=execution_count)]
    first = text.splitlines()[0]
    return [new_output("error", ename=ERROR_NAMES.get(row.status, "CheckFailure"), evalue=first,
                       traceback=text.splitlines())]


def _sanitize(nb: nbformat.NotebookNode, resources: dict, config) -> nbformat.NotebookNode:
    """nbgrader autograde's first pass (``Autograde.sanitize_preprocessors``).

    Its warnings are silenced: ``OverwriteCells`` reports every test cell with hidden
    tests (the released checksum differs from the source's by design), and what
    it restores is the point of the pass."""
    from nbgrader.preprocessors import CheckCellMetadata, ClearOutput, DeduplicateIds, OverwriteCells, OverwriteKernelspec  # deferred: nbgrader is slow to import
    from traitlets.log import get_logger  # deferred with nbgrader

    log = get_logger()
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        for step in (ClearOutput, DeduplicateIds, OverwriteKernelspec, OverwriteCells, CheckCellMetadata):
            nb, resources = step(config=config).preprocess(nb, resources)
    finally:
        log.setLevel(level)
    return nb


def _read_submission(path: Path | None) -> nbformat.NotebookNode | None:

    if path is None:
        return None
    try:
        return nbformat.reads(read_untrusted(Path(path), MAX_NOTEBOOK_BYTES).decode("utf-8"), as_version=4)
    except (NotebookError, OSError, ValueError, UnicodeDecodeError, RecursionError, KeyError, TypeError,
            AttributeError):
        return None


def _is_test_cell(cell) -> bool:
    return cell.cell_type == "code" and bool(cell.get("metadata", {}).get("nbgrader", {}).get("grade"))


def _limit_outputs(nb: nbformat.NotebookNode, resources: dict, config) -> nbformat.NotebookNode:
    """nbgrader autograde's output passes after its ``Execute``: ``IgnorePattern``
    (e.g. warnings on stderr) and ``LimitOutput`` (lines and traceback length)."""
    from nbgrader.preprocessors import IgnorePattern, LimitOutput  # deferred: nbgrader is slow to import

    for step in (IgnorePattern, LimitOutput):
        nb, resources = step(config=config).preprocess(nb, resources)
    return nb


# nbgrader's preprocessors (the gradebook they open, traitlets' logger) run one at a time;
# the sandbox runs between them, for several submissions at once (``write_autograded``'s ``jobs``).
_NBGRADER = threading.Lock()


def autograded_notebook(graded: Graded, source: Path, db_url: str, config=None, *,
                        execute: RunSettings | None = None, executed: list | None = None) -> nbformat.NotebookNode:
    """The autograded copy of one submission, as nbgrader's autograde writes it.

    Args:
        graded: the submission's grade (its score rows, from the journal).
        source: the assignment's source notebook.
        db_url: the gradebook that already holds the assignment's cells.
        config: nbgrader's configuration (for its preprocessors).
        execute: the grading run's settings: execute the submission's code cells
            (not the test cells) in the sandbox under them, for their outputs
            (:func:`autograder.outputs.execute_for_display`). ``None``: leave
            them without outputs.
        executed: the outputs of an earlier execution of this same submission, one
            list per cell (``None`` for a test cell), used in place of ``execute``.

    Returns:
        The submission after nbgrader's sanitising preprocessors, each code cell with
        the outputs its execution left (then nbgrader's ``IgnorePattern`` and
        ``LimitOutput``), and every test cell's outputs from
        :func:`test_cell_outputs`. A submission that cannot be read or sanitised is
        replaced by the released (student) version of the source, not executed, so
        the formgrader still shows the verdicts and no answer leaks.
    """
    sub = graded.submission
    resources = {"nbgrader": {"notebook": sub.chapter, "assignment": sub.chapter, "student": sub.student,
                              "db_url": db_url}}
    nb = _read_submission(sub.path)
    with _NBGRADER:
        try:
            if nb is None:
                raise ValueError("unreadable submission")
            nb = _sanitize(nb, resources, config)
        except Exception:  # noqa: BLE001 - nbgrader's preprocessors refuse a mangled notebook in many ways
            released = student_version(nbformat.read(str(source), as_version=4), sub.chapter)
            nb = _sanitize(released, resources, config)
            execute = executed = None
    tests = {i for i, cell in enumerate(nb.cells) if _is_test_cell(cell)}
    if executed is not None and len(executed) == len(nb.cells):
        for cell, outputs in zip(nb.cells, executed):
            if cell.cell_type == "code" and outputs is not None:
                cell.outputs = [nbformat.from_dict(o) for o in outputs]
    elif execute is not None:
        execute_for_display(nb, sub.chapter, execute, skip=tests)
    if execute is not None or executed is not None:
        with _NBGRADER:
            nb = _limit_outputs(nb, resources, config)
    rows = {r.grade_id: r for r in graded.scores}
    count = 0
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        count += 1
        cell.execution_count = count if (i in tests or cell.outputs) else None
        if i not in tests:
            continue
        meta = cell.metadata.nbgrader
        row = rows.get(meta.get("grade_id"))
        if row is None:  # never full marks for a cell the grader did not score
            row = ExerciseScore(graded.submission.student, graded.submission.chapter, meta.get("grade_id", ""), 0.0,
                                float(meta.get("points", 0)), Status.ERROR, "this test cell was not graded")
        cell.outputs = test_cell_outputs(row, count)
    return nb


def _write_if_changed(path: Path, data: bytes) -> bool:
    if path.is_file() and not path.is_symlink() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        path.unlink()
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return True


def _execution_key(path: Path | None, settings: RunSettings) -> str:
    """What an executed notebook's outputs depend on: the submission's bytes and the run's settings."""
    digest = hashlib.sha256(json.dumps(settings.options(), sort_keys=True).encode("utf-8"))
    try:
        digest.update(read_untrusted(Path(path), MAX_NOTEBOOK_BYTES) if path is not None else b"")
    except (NotebookError, OSError):
        return ""
    return digest.hexdigest()


def _earlier_outputs(path: Path, key: str) -> list | None:
    """The outputs of an autograded notebook executed with ``key`` (one list per
    cell, ``None`` for a test cell), or ``None`` when there is none to reuse."""
    if not key or not path.is_file() or path.is_symlink():
        return None
    try:
        nb = nbformat.read(str(path), as_version=4)
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if nb.metadata.get("autograder", {}).get("executed") != key:
        return None
    return [None if c.cell_type != "code" or _is_test_cell(c) else c.outputs for c in nb.cells]


def write_autograded(course: Course, assignment: str, results: list[Graded], source: Path,
                     execute: RunSettings | None = None, jobs: int = 1) -> list[Path]:
    """Write ``autograded/<student>/<assignment>/`` for every submitted result.

    Each folder gets the autograded notebook (:func:`autograded_notebook`, named as
    the source notebook), ``timestamp.txt`` as collected (nbgrader's formgrader
    compares it with the gradebook's timestamp) and the source folder's other
    files (as nbgrader copies them; ``CourseDirectory.ignore`` honoured). Files are
    rewritten only when they changed. With ``execute`` (the grading run's
    settings) each submission is executed in the sandbox for its outputs, once:
    the notebook records what it was executed from (``metadata.autograder.executed``:
    the submission's digest and the settings), and an unchanged submission keeps
    the outputs it has; ``jobs`` submissions are executed at once. Returns the notebooks' paths.
    """
    from nbgrader.utils import find_all_files  # deferred: nbgrader is slow to import

    source_folder = source.parent
    extras = sorted(Path(f) for f in find_all_files(str(source_folder), course.coursedir.ignore + ["*.ipynb"]))
    submitted = [g for g in results if g.submission.path is not None]

    def notebook(graded: Graded) -> nbformat.NotebookNode:
        sub = graded.submission
        path = course.folder(course.coursedir.autograded_directory, sub.student, assignment) / source.name
        key = _execution_key(sub.path, execute) if execute is not None else ""
        nb = autograded_notebook(graded, source, course.db_url, course.config, execute=execute,
                                 executed=_earlier_outputs(path, key))
        if key:
            nb.metadata.setdefault("autograder", {})["executed"] = key
        return nb

    written = []
    with ThreadPoolExecutor(max(1, min(jobs, len(submitted) or 1))) as pool:
        for graded, nb in zip(submitted, pool.map(notebook, submitted)):  # each written as it comes, in order
            sub = graded.submission
            dest = course.folder(course.coursedir.autograded_directory, sub.student, assignment)
            path = dest / source.name
            _write_if_changed(path, (nbformat.writes(nb) + "\n").encode("utf-8"))
            stamp = dest / "timestamp.txt"
            if sub.timestamp:
                _write_if_changed(stamp, (sub.timestamp + "\n").encode("utf-8"))
            elif stamp.exists() or stamp.is_symlink():
                stamp.unlink()
            for extra in extras:
                target = dest / extra.relative_to(source_folder)
                if not (target.is_file() and target.read_bytes() == extra.read_bytes()):
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(extra, target)
            written.append(path)
    return written


# --------------------------------------------------------------------------- the command


@dataclass
class CourseReport:
    """What ``autograde`` did: the batch's report, the course and the notebooks written."""

    batch: BatchReport
    course: Course
    autograded: list[Path] = field(default_factory=list)


def autograde(assignment: str, *, course: Path | str | None = None, students: list[str] | None = None,
              force: bool = False, duedate=None, out: Path | None = None, jobs: int = 1,
              settings: RunSettings = RunSettings(),
              progress: bool | None = None, grade_fn=None, extensions=None,
              late_days: int | None = None, execute: bool = True) -> CourseReport:
    """Autograde one assignment of an nbgrader course (``nbgrader autograde ASSIGNMENT``).

    Args:
        assignment: the assignment id, a chapter id such as ``"04_self_attention"``.
        course: the course folder (default: the current directory).
        students: grade only these students (``--student``); the others keep their grades.
        force: regrade even unchanged submissions (hand grades are kept all the same).
        duedate: sets the assignment's due date in the gradebook (text such as
            ``"2026-11-20 17:00:00 UTC"``); default: the one the gradebook has.
        out: where ``grades.csv``, ``scores.csv``, ``feedback/`` and the journal go
            (default: ``<course>/grades/<assignment>``).
        jobs, settings, progress, grade_fn: as for :func:`autograder.batch.grade_class`
            (``settings``: ``--timeout``, ``--budget``, ``--memory``, ``--disk``,
            ``--processes``, the sandbox and the secret seed).
        extensions, late_days: per-student extensions and the late-day budget, set as
            nbgrader extensions in the course's gradebook (:mod:`autograder.extensions`).
        execute: execute each changed submission's code cells once more, in the
            sandbox under ``settings``, so the formgrader and ``generate_feedback``
            show their outputs as after ``nbgrader autograde`` (the test cells
            show the verdicts either way). ``False``: those cells have no outputs.

    Returns:
        A :class:`CourseReport`.

    Raises:
        ValueError: not an nbgrader course, no source notebook for ``assignment``,
            no submissions, an unknown student or a bad due date.
    """
    if duedate is not None:
        duedate = parse_duedate(duedate)  # a bad date fails before any grading
    c = load_course(course)
    try:
        source = source_notebook(assignment, c.source_root)
    except ValueError:
        raise ValueError(f"no source notebook {c.source_root / assignment / (assignment + '.ipynb')} in the course "
                         f"at {c.root} (run where nbgrader_config.py is, or pass --course)") from None
    if not c.submitted_root.is_dir():
        raise ValueError(f"no submissions folder {c.submitted_root} in the course at {c.root}")
    out = Path(out) if out is not None else c.root / "grades" / assignment
    target = GradebookTarget(url=c.db_url, course_id=c.course_id, duedate=duedate, config=c.config,
                             extensions=None if extensions is None else tuple(extensions), late_days=late_days)
    report = grade_class(c.submitted_root, out, chapters=[assignment], students=students, force=force, jobs=jobs,
                         settings=settings, book=c.source_root, progress=progress,
                         grade_fn=grade_fn, gradebook=target)
    written = write_autograded(c, assignment, report.results, source, settings if execute else None, jobs=jobs)
    return CourseReport(report, c, written)
