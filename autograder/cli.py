"""``python -m autograder`` (or ``autograder``): release, grade, check, selftest, bench.

* ``release --out DIR [CHAPTER...]`` — the student notebooks ``DIR/<chapter>/<chapter>.ipynb``
  (nbgrader's preprocessors; no solution, no hidden test), after checking that the
  solution cells equal the ``solutions`` package, and the student package
  ``DIR/transformer_book_student-*.whl`` (the visible checks, no answers).
* ``grade SUBMITTED --out OUT`` — grade a class in nbgrader's submitted layout
  (``<student>/<chapter>/<chapter>.ipynb``; ``--flat CHAPTER`` for a folder of
  ``<student>.ipynb``) with the hidden checks, student code in the sandbox; writes
  ``gradebook.db`` (nbgrader's), ``scores.csv``, ``grades.csv`` and
  ``feedback/<student>/<chapter>.html``. Resumes an interrupted run. Ends with a
  summary naming the invalid, wrong-chapter, flagged and timed-out submissions.
* ``grade SUBMITTED --out OUT_I --shard I/N`` — one shard of a class split over machines
  (:mod:`autograder.shard`); ``merge OUT_0 … OUT_N-1 --out OUT`` writes what one run over
  the whole class writes, or refuses shards that do not fit together (exit 1).
* ``gradescope CHAPTER --out autograder.zip`` — a Gradescope autograder for one chapter
  (:mod:`autograder.gradescope`).
* ``report OUT`` — the class report of a ``grade`` output: per chapter, an HTML
  page and a CSV in ``OUT/report/`` (:mod:`autograder.report`).
* ``autograde ASSIGNMENT`` — ``nbgrader autograde`` for an nbgrader course, run in the
  course folder (or ``--course DIR``): grades ``submitted/`` in the sandbox, fills the
  course's gradebook and writes ``autograded/`` for the formgrader (:mod:`autograder.course`).
* ``collect DOWNLOAD --from canvas|gradescope --chapter CH`` — an LMS's download into
  nbgrader's ``submitted/`` (:mod:`autograder.collect`); ``export OUT --lms canvas|moodle
  --roster R`` — the LMS's gradebook import (:mod:`autograder.lms`); ``regrades OUT`` — what
  each ``grade`` run changed (:mod:`autograder.regrades`); ``similarity SUBMITTED --chapter
  CH`` — pairs of students who share code (:mod:`autograder.similarity`); ``prairielearn CH
  --out DIR`` — a PrairieLearn question (:mod:`autograder.prairielearn`).
* ``check NOTEBOOK`` — a student's local run of the visible checks, as a table.
* ``selftest`` — the source notebooks must score full marks and the released ones
  zero, through the same pipeline as ``grade``.
* ``bench`` — throughput against plain ``nbgrader autograde`` (:mod:`autograder.bench`).

Exit codes: 0 success; 1 a check or self-test failed; 2 bad usage or input;
130 interrupted.

Each command imports its own modules when it runs (the imports inside the ``cmd_*``
functions): ``python -m autograder`` starts in about 0.1 CPU s and answers ``--help``
or a usage error at once, where importing every command's machinery (the grader,
torch, nbgrader, Jinja2, the LMS clients) costs about 5 CPU s per start.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
import zoneinfo
from pathlib import Path

__all__ = ["main", "build_parser"]


def _sandbox_available() -> bool:
    """Whether a sandbox starts here (checked once per process): bubblewrap, or the
    container mode where bubblewrap cannot start (:mod:`autograder.isolation`)."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .isolation import choose_isolation

    try:
        choose_isolation()
    except (RuntimeError, OSError):
        return False
    return True


def _isolation_line() -> str:
    """``isolation: …`` — how student code is kept apart, for the console."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .isolation import choose_isolation, describe

    return f"isolation: {describe(choose_isolation())}"


def _record_isolation(out: Path, mode: str) -> None:
    """``OUT/isolation.json``: the isolation the grades were made under (``none``: --unsafe-no-sandbox)."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .isolation import describe

    texts = {"none": "no sandbox (--unsafe-no-sandbox)"}
    data = {"isolation": mode, "description": describe(mode) if mode in ("bubblewrap", "container")
            else texts.get(mode, f"recorded by the shards: {mode}")}
    out.mkdir(parents=True, exist_ok=True)
    (out / "isolation.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def _grading_sandbox(command: str, args: argparse.Namespace) -> bool | None:
    """Whether ``grade``/``autograde`` run student code in the sandbox: True; False only with
    ``--unsafe-no-sandbox`` (with a warning); None (after saying why) when bwrap is missing."""
    if args.unsafe_no_sandbox:
        print("WARNING: --unsafe-no-sandbox: student code runs as a plain subprocess with your rights; "
              "the grades are NOT tamper-proof.", file=sys.stderr)
        return False
    if getattr(args, "isolation", None):
        # this command's modules, loaded when it runs: the CLI starts light (module docstring)
        from .isolation import set_isolation

        set_isolation(args.isolation)
    try:
        # this command's modules, loaded when it runs: the CLI starts light (module docstring)
        from .isolation import choose_isolation

        choose_isolation()
    except (RuntimeError, OSError) as exc:
        print(f"{command}: no sandbox starts here ({exc}); install bubblewrap (apt-get install bubblewrap), "
              "or grade as root or on a kernel with Landlock for the container mode, or pass --unsafe-no-sandbox "
              "for untrusted-free testing only.", file=sys.stderr)
        return None
    print(_isolation_line())
    return True


# --------------------------------------------------------------------------- release


def cmd_release(args: argparse.Namespace) -> int:
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .release import ReleaseError, release

    chapters = list(dict.fromkeys(list(args.chapter_ids or []) + list(args.chapters or [])))
    refusal = _open_extensions_refusal(args, chapters)
    if refusal:
        print(refusal, file=sys.stderr)
        return 1
    try:
        done = release(Path(args.out), chapters or None, book=Path(args.book),
                       check_sync=not args.no_sync_check, package=not args.no_package)
    except (ReleaseError, ValueError) as exc:
        print(f"release failed: {exc}", file=sys.stderr)
        return 1 if isinstance(exc, ReleaseError) else 2
    for item in done:
        print(f"released {item.chapter}: {item.path}")
        pkg = done.packages.get(item.chapter)
        if pkg is None:
            continue
        print(f"  student package: {pkg.wheel}")
        for module, helpers in sorted(pkg.withheld_helpers.items()):
            one = len(helpers) == 1
            print(f"  note: {module}'s hint helper{'' if one else 's'} {', '.join(helpers)} "
                  f"compute{'s' if one else ''} an answer: the package holds {'its' if one else 'their'} results "
                  f"on the visible cases, not {'its' if one else 'their'} code")
    if done.packages:
        print(f"one student package per chapter ({len(done.packages)}): hand out each chapter's notebook with its "
              "own wheel; students install it in an environment of their own for that chapter (or pip install the "
              "next chapter's wheel over it: it replaces the last one), e.g.\n"
              f"  pip install jupyterlab \"{next(iter(done.packages.values())).wheel.name}\"\n"
              "and check a notebook with: python -m autograder check NOTEBOOK")
    return 0


# --------------------------------------------------------------------------- grade


def cmd_grade(args: argparse.Namespace) -> int:
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .batch import GradebookTarget, grade_class

    shard = None
    if args.shard:
        # this command's modules, loaded when it runs: the CLI starts light (module docstring)
        from .shard import ShardError, parse_shard

        try:
            shard = parse_shard(args.shard)
        except ShardError as exc:
            print(f"grade: {exc}", file=sys.stderr)
            return 2
    try:
        late_policy = _late_policy(args)
    except ValueError as exc:
        print(f"grade: {exc}", file=sys.stderr)
        return 2
    sandbox = _grading_sandbox("grade", args)
    if sandbox is None:
        return 2
    options = dict(
        chapters=args.chapters or None, flat=args.flat, jobs=args.jobs, settings=_run_settings(args, sandbox),
        force=args.force, progress=None if not args.no_progress else False,
        book=Path(args.book), gradebook=GradebookTarget(duedate=args.duedate, **late_policy),
    )
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .regrades import snapshot

    before = snapshot(Path(args.out)) if shard is None else None
    try:
        if shard is not None:
            # this command's modules, loaded when it runs: the CLI starts light (module docstring)
            from .shard import SHARD_FILE, grade_shard

            # this command's modules, loaded when it runs: the CLI starts light (module docstring)
            from .isolation import choose_isolation

            report = grade_shard(Path(args.submitted), Path(args.out), shard,
                                 isolation=choose_isolation() if sandbox else "none", **options)
        else:
            report = grade_class(Path(args.submitted), Path(args.out), **options)
    except ValueError as exc:
        print(f"grade: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted: the finished submissions are journaled in "
              f"{Path(args.out) / '.journal'}; run the same command again to resume.", file=sys.stderr)
        return 130
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .isolation import choose_isolation

    _record_isolation(Path(args.out), choose_isolation() if sandbox else "none")
    print(_summary(report))
    if shard is None:
        _log_regrades(Path(args.out), before, args)
    if shard is not None:
        print(f"  {Path(args.out) / SHARD_FILE}  shard {shard}: what it graded, with which code and checks; "
              "merge all the shards with `python -m autograder merge OUT_0 ... --out OUT`")
    return 0


def _summary(report) -> str:
    """The console summary of a finished run (a :class:`~autograder.batch.BatchReport`): a
    view of the ``results.json`` it wrote, as the class report is."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .report import summarise

    return summarise(report.class_results(), report.out, graded=report.graded, reused=report.reused)


# --------------------------------------------------------------------------- merge


def cmd_merge(args: argparse.Namespace) -> int:
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .regrades import snapshot
    from .shard import ShardError, merge_shards

    before = snapshot(Path(args.out))
    try:
        report = merge_shards([Path(s) for s in args.shards], Path(args.out),
                              submitted=Path(args.submitted) if args.submitted else None, book=Path(args.book))
    except ShardError as exc:
        print(f"merge: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"merge: {exc}", file=sys.stderr)
        return 2
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .shard import isolation_of

    mode = isolation_of([Path(s) for s in args.shards])
    _record_isolation(Path(args.out), mode)
    print(f"merged {len(args.shards)} shard(s) into {args.out}; the shards were graded with isolation {mode}")
    print(_summary(report))
    _log_regrades(Path(args.out), before, args)
    return 0


# --------------------------------------------------------------------------- gradescope


def cmd_gradescope(args: argparse.Namespace) -> int:
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .gradescope import ENGINE_ONLY, build_zip, chapter_points
    from .text import score_text

    try:
        out = build_zip(args.chapter, Path(args.out), book=Path(args.book), timeout=args.timeout,
                        memory=args.memory, isolation=args.isolation, visibility=args.visibility, seed=args.seed)
    except ValueError as exc:
        print(f"gradescope: {exc}", file=sys.stderr)
        return 2
    points = chapter_points(Path(args.book) / args.chapter / f"{args.chapter}.ipynb")
    print(f"wrote {out}: upload it as the autograder of a Gradescope programming assignment for {args.chapter} "
          "(students submit the notebook; turn the autograder's internet access off if Gradescope offers it)")
    print(f"{args.chapter}: {score_text(points)} points in all: enter {score_text(points)} as the assignment's "
          "autograder points")
    if args.isolation == ENGINE_ONLY:
        print(f"isolation {ENGINE_ONLY}: no sandbox; Gradescope's container is the only wall around the students' "
              "code (each results.json records it in extra_data)")
    return 0


# --------------------------------------------------------------------------- report


def cmd_report(args: argparse.Namespace) -> int:
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .course import load_course
    from .report import ReportError, class_report
    from .roster import RosterError

    try:
        out = Path(args.out)
        if args.course:  # `report --course DIR ASSIGNMENT`: where `autograde ASSIGNMENT` wrote
            try:
                out = load_course(args.course).root / "grades" / args.out
            except ValueError as exc:
                raise ReportError(f"{exc}: expected an nbgrader course folder (with nbgrader_config.py)") from None
        written = class_report(out, Path(args.to) if args.to else None, roster=_roster(args))
    except (ReportError, RosterError) as exc:
        print(f"report: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    return 0


# --------------------------------------------------------------------------- autograde


def cmd_autograde(args: argparse.Namespace) -> int:
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .course import autograde

    try:
        late_policy = _late_policy(args)
    except ValueError as exc:
        print(f"autograde: {exc}", file=sys.stderr)
        return 2
    sandbox = _grading_sandbox("autograde", args)
    if sandbox is None:
        return 2
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .regrades import snapshot

    out_dir = Path(args.out) if args.out else Path(args.course or ".") / "grades" / args.assignment
    before = snapshot(out_dir)
    try:
        done = autograde(args.assignment, course=args.course, students=args.student or None, force=args.force,
                         duedate=args.duedate, out=Path(args.out) if args.out else None, jobs=args.jobs,
                         settings=_run_settings(args, sandbox),
                         progress=None if not args.no_progress else False, execute=not args.no_execute,
                         **late_policy)
    except ValueError as exc:
        print(f"autograde: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted: the finished submissions are journaled; run the same command again to resume.",
              file=sys.stderr)
        return 130
    report, course = done.batch, done.course
    # The summary of `grade`, less its OUT/gradebook.db line: here the course's own gradebook is filled.
    print("\n".join(line for line in _summary(report).splitlines() if not line.endswith("nbgrader's gradebook")))
    print(f"  {course.folder(course.coursedir.autograded_directory, '<student>', args.assignment)}/  "
          f"{len(done.autograded)} autograded notebook(s), for nbgrader's formgrader and generate_feedback")
    print(f"  {course.db_url}  the course's gradebook (hand grades entered there are kept)")
    _log_regrades(report.out, before if report.out.resolve() == out_dir.resolve() else None, args)
    return 0


# --------------------------------------------------------------------------- check


def cmd_check(args: argparse.Namespace) -> int:
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .text import check_report, wrong_chapter_notice
    from .checks import exercises_of
    from .grading import grade_submission
    from .book import chapter_ids, source_notebook
    from .student.notebook import chapter_named, chapter_of, read_notebook

    path = Path(args.notebook)
    if not path.is_file():
        print(f"check: no such notebook: {path}", file=sys.stderr)
        return 2
    try:
        nb = read_notebook(path)
    except ValueError as exc:
        print(f"check: {exc}", file=sys.stderr)
        return 2
    known = {c: [ex.name for ex in exercises_of(c)] for c in chapter_ids(Path(args.book))}
    chapter = args.chapter or chapter_of(nb, path, known)
    try:
        source = source_notebook(chapter or "", Path(args.book))
    except ValueError:
        print(f"check: {path.name} is none of the chapter notebooks under {args.book}: its metadata names no "
              "chapter and none of its exercise cells belongs to one; pass --chapter (e.g. --chapter "
              "04_self_attention) if you are sure", file=sys.stderr)
        return 2
    sandbox = _sandbox_available()
    if not sandbox:
        print("(no sandbox available: your code runs as a plain subprocess)", file=sys.stderr)
    found = grade_submission(source, path, chapter=chapter, settings=_run_settings(args, sandbox), hidden=False,
                             seed=args.seed)
    print(f"{path.name}: chapter {chapter}, visible checks\n")
    named = chapter_named(path, known)
    if found.wrong_chapter:  # checked as --chapter, it holds another chapter's cells
        print(wrong_chapter_notice(found.wrong_chapter, chapter) + "\n")
    elif not args.chapter and named and named != chapter:  # its name says one chapter, its cells another
        print(wrong_chapter_notice(chapter, named) + "\n")
    text, status = check_report([_check_row(s) for s in found.scores])
    print(text)
    return status


def _check_row(score) -> dict:
    """An :class:`~autograder.scores.ExerciseScore` as :func:`autograder.text.check_report` reads it:
    the reason, then the diagnosis of every missed part; the notes (advice included)."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .scores import parts_line

    missed = [f"{p.name}: {p.message}" for p in score.parts if p.score < p.points and p.message]
    message = "\n".join(([score.reason] if score.reason else []) + missed)
    return {**score.to_dict(), "message": message, "parts_line": parts_line(score.parts), "advice": []}


# --------------------------------------------------------------------------- selftest


def selftest(jobs: int = 1, timeout: float = 120.0, chapters: list[str] | None = None,
             sandbox: bool = True, keep: Path | None = None, book: Path | None = None) -> tuple[bool, str]:
    """Grade the source notebooks (must get full marks) and the released ones (must get
    zero) through the same pipeline as ``grade``; return ``(ok, report)``."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .batch import grade_class
    from .scores import Status
    from .grading import RunSettings
    from .book import BOOK, chapter_ids, source_notebook
    from .release import release

    book = Path(book) if book else BOOK
    chapters = chapters or chapter_ids(book)
    if not chapters:
        return False, f"no chapter notebooks under {book}"
    work = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="autograder-selftest-"))
    try:
        released = release(work / "release", chapters, book=book)
        submitted = work / "submitted"
        for item in released:
            for student, nb in (("reference", source_notebook(item.chapter, book)), ("released", item.path)):
                dest = submitted / student / item.chapter
                dest.mkdir(parents=True, exist_ok=True)
                shutil.copy2(nb, dest / f"{item.chapter}.ipynb")
        report = grade_class(submitted, work / "out", chapters=chapters, jobs=jobs,
                             settings=RunSettings(timeout=timeout, sandbox=sandbox), force=True, book=book)
        problems = []
        lines = []
        for g in report.results:
            sub = g.submission
            total = sum(s.score for s in g.scores)
            max_total = sum(s.max_score for s in g.scores)
            want = max_total if sub.student == "reference" else 0.0
            ok = abs(total - want) < 1e-9 and max_total > 0
            lines.append(f"{'ok  ' if ok else 'FAIL'} {sub.student:<9} {sub.chapter:<28} {total:g}/{max_total:g}"
                         f" (want {want:g})")
            if not ok:
                for s in g.scores:
                    bad = (s.status != Status.PASSED) if sub.student == "reference" else (s.score != 0)
                    if bad:
                        problems.append(f"  {sub.student}/{sub.chapter} {s.grade_id}: {s.score:g}/"
                                        f"{s.max_score:g} {s.status}: {s.reason}")
                if max_total == 0:
                    problems.append(f"  {sub.chapter}: no graded cells (0 points in the source notebook)")
        text = "\n".join(lines + (["", "problems:"] + problems if problems else []))
        return not problems and all(ln.startswith("ok") for ln in lines), text
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)


def cmd_selftest(args: argparse.Namespace) -> int:
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .release import ReleaseError

    sandbox = not args.unsafe_no_sandbox and _sandbox_available()
    if not sandbox:
        print("(no sandbox: the book's own notebooks run as a plain subprocess)", file=sys.stderr)
    try:
        ok, text = selftest(jobs=args.jobs, timeout=args.timeout, chapters=args.chapters or None,
                            sandbox=sandbox, keep=Path(args.keep) if args.keep else None, book=Path(args.book))
    except (ReleaseError, ValueError) as exc:
        print(f"selftest failed: {exc}", file=sys.stderr)
        return 1
    print(text)
    print("selftest passed: reference notebooks get full marks, released ones zero" if ok
          else "selftest FAILED", file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


# --------------------------------------------------------------------------- a term (roster, LMS, ...)


def _roster(args: argparse.Namespace):
    """The ``--roster`` file read, or ``None`` when the option is not given (RosterError propagates)."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .roster import read_roster

    return read_roster(args.roster) if getattr(args, "roster", None) else None


def cmd_export(args: argparse.Namespace) -> int:
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .lms import ExportError, lms_export, parse_assignment_ids, write_export
    from .results import ClassResults, ResultsError
    from .roster import RosterError

    try:
        results = ClassResults.read(Path(args.out))
        export = lms_export(results, args.lms, _roster(args), chapters=args.chapters or None,
                            assignment_ids=parse_assignment_ids(args.assignment_id), missing=args.missing)
    except (ResultsError, RosterError, ExportError) as exc:
        print(f"export: {exc}", file=sys.stderr)
        return 2
    dest = write_export(export, Path(args.to) if args.to else Path(args.out) / f"{args.lms}_grades.csv")
    print(f"wrote {dest}: {export.rows} student(s), import it in {args.lms.capitalize()}'s gradebook")
    for line in export.problems():
        print(f"  WARNING: {line}", file=sys.stderr)
    if args.push or args.dry_run:
        pushed = _push_canvas(args, results)
        if pushed:
            return pushed
    return 1 if export.unknown or export.unmatched else 0


def _push_canvas(args: argparse.Namespace, results) -> int:
    """``export --push`` / ``--dry-run``: the same grades through Canvas's API; 0 when done."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .lms import ExportError, canvas_grade_data, connect_canvas, parse_assignment_ids, push_canvas

    if args.lms != "canvas":
        print("export: --push and --dry-run are for --lms canvas", file=sys.stderr)
        return 2
    try:
        roster = _roster(args)
        chapters = args.chapters or sorted({s.chapter for s in results.submissions})
        data = canvas_grade_data(results, roster, chapters, parse_assignment_ids(args.assignment_id), args.missing)
        course = None
        if not args.dry_run:
            token = os.environ.get("CANVAS_API_TOKEN", "")
            if not (args.canvas_url and args.course_id and token):
                raise ExportError("--push needs --canvas-url, --course-id and the token in CANVAS_API_TOKEN")
            course = connect_canvas(args.canvas_url, token, args.course_id)
        for line in push_canvas(data, course, dry_run=args.dry_run):
            print(line)
    except ExportError as exc:
        print(f"export: {exc}", file=sys.stderr)
        return 2
    return 0


def cmd_collect(args: argparse.Namespace) -> int:
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .collect import CollectError, collect
    from .roster import RosterError

    try:
        zone = datetime.timezone.utc if args.zip_timezone == "UTC" else zoneinfo.ZoneInfo(args.zip_timezone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        print(f"collect: --zip-timezone {args.zip_timezone!r}: expected a zone such as UTC or Europe/Berlin",
              file=sys.stderr)
        return 2
    try:
        done = collect(args.source, Path(args.download), Path(args.submitted), args.chapter, _roster(args),
                       zip_timezone=zone)
    except (CollectError, RosterError) as exc:
        print(f"collect: {exc}", file=sys.stderr)
        return 2
    print(done.summary())
    for f in done.files:
        if f.outcome != "collected" or f.reason:
            print(f"  {f.outcome}: {f.file}{' -> ' + f.student if f.student else ''}: {f.reason}")
    print(f"every file's outcome: {done.log}")
    return 1 if done.by_outcome("refused") else 0


def _open_extensions_refusal(args: argparse.Namespace, chapters: list[str]) -> str:
    """Why ``release`` must not go on (empty: it may): a student may still hand in an earlier
    chapter whose reference answers the released chapter's student package carries."""
    if not getattr(args, "extensions", None):
        return ""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .book import chapter_ids
    from .extensions import ExtensionsError, open_extensions, read_extensions

    try:
        extensions = read_extensions(args.extensions)
    except ExtensionsError as exc:
        return f"release: {exc}"
    order = chapter_ids(Path(args.book))
    found = open_extensions(extensions, chapters or order, order)
    if not found:
        return ""
    lines = [f"  {chapter}: " + ", ".join(f"{e.student} ({e.chapter} until {e.due:%Y-%m-%d %H:%M} UTC)"
                                           for e in exts) for chapter, exts in found.items()]
    if args.allow_open_extensions:
        print("WARNING: --allow-open-extensions: these students can read an earlier chapter's answers in the "
              "package before their extension ends:\n" + "\n".join(lines), file=sys.stderr)
        return ""
    return ("release refused: a chapter's student package carries the reference answers of the chapters before "
            "it, and these students may still hand one of those in:\n" + "\n".join(lines)
            + "\nrelease after their extensions end, or pass --allow-open-extensions")


def _late_policy(args: argparse.Namespace) -> dict:
    """``GradebookTarget``'s extensions and late days from ``--extensions`` / ``--late-days``."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .extensions import read_extensions

    policy = {}
    if getattr(args, "extensions", None):
        policy["extensions"] = tuple(read_extensions(args.extensions))
    if getattr(args, "late_days", None) is not None:
        if args.late_days < 0:
            raise ValueError(f"--late-days {args.late_days}: expected 0 or more days")
        policy["late_days"] = args.late_days
    return policy


def _log_regrades(out: Path, before, args: argparse.Namespace) -> None:
    """Append this run's changed scores to OUT/regrades.jsonl (when OUT held results before
    it) and say how many."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .regrades import append_log, diff, snapshot

    after = snapshot(out)
    if before is None or after is None:
        return  # a first grading is no regrade (and a grade run writes what merging its shards writes)
    changes = diff(before, after)
    command = " ".join(["python -m autograder", *getattr(args, "argv", [args.command])])
    append_log(out, changes, reason=getattr(args, "reason", ""), command=command)
    if changes:
        print(f"  {out / 'regrades.jsonl'}  {len(changes)} score(s) changed since the last run "
              "(python -m autograder regrades OUT: the page)")


def _term_grade_options(p: argparse.ArgumentParser) -> None:
    """``grade``'s options of a term: extensions, late days, the reason of a regrade."""
    p.add_argument("--extensions", metavar="CSV", help="per-student extensions: student,chapter,due (the new due "
                                                      "date), applied as nbgrader extensions")
    p.add_argument("--late-days", type=int, default=None, metavar="N",
                   help="each student's late-day budget over the term: a late chapter spends ceil(late/24h) days "
                        "while they last and is then on time")
    p.add_argument("--reason", default="", help="why this run (e.g. 'regrade request #12'): kept in OUT/regrades.jsonl")


def cmd_regrades(args: argparse.Namespace) -> int:
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .regrades import diff, load_results, read_log, render_html
    from .results import ResultsError

    if args.diff:
        try:
            changes = diff(load_results(args.diff[0]), load_results(args.diff[1]))
        except (ResultsError, OSError) as exc:
            print(f"regrades: {exc}", file=sys.stderr)
            return 2
        for c in changes:
            print(c.line())
        print(f"{len(changes)} changed score(s)")
        return 0
    if not args.out:
        print("regrades: give OUT (the grade output) or --diff OLD NEW", file=sys.stderr)
        return 2
    records = read_log(Path(args.out))
    dest = Path(args.to) if args.to else Path(args.out) / "report" / "regrades.html"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(render_html(records), encoding="utf-8")
    print(f"wrote {dest}: {len(records)} run(s), {sum(len(r['changes']) for r in records)} change(s)")
    return 0


def cmd_similarity(args: argparse.Namespace) -> int:
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .checks import exercises_of
    from .similarity import Settings, compare_class, read_class, render_html, stub_cells

    if not 0 < args.threshold <= 1:
        print(f"similarity: --threshold {args.threshold}: expected a share in (0, 1], e.g. 0.6", file=sys.stderr)
        return 2
    try:
        exercises = [ex.name for ex in exercises_of(args.chapter)]
        stubs = {name: code for name, code in stub_cells(args.chapter, Path(args.book)).items() if name in exercises}
    except (ValueError, KeyError) as exc:
        print(f"similarity: {exc}", file=sys.stderr)
        return 2
    answers, skipped = read_class(Path(args.submitted), args.chapter, exercises)
    if len(answers) < 2:
        print(f"similarity: fewer than 2 readable submissions of {args.chapter} under {args.submitted}",
              file=sys.stderr)
        return 2
    settings = Settings(threshold=args.threshold, min_tokens=args.min_tokens)
    report = compare_class(answers, stubs, args.chapter, settings, skipped)
    dest = Path(args.to) if args.to else Path(args.submitted).parent / "similarity" / f"{args.chapter}.html"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(render_html(report, top=args.top), encoding="utf-8")
    for pair in report.pairs[: min(args.top, 10)]:
        mark = "  FLAGGED" if pair.flagged else ""
        print(f"{pair.a} · {pair.b}: {100 * pair.score:.0f} % of {pair.compared} written tokens{mark}")
    for student, why in skipped.items():
        print(f"  not compared: {student} ({why})")
    print(f"{len(report.flagged)} pair(s) flagged at {100 * settings.threshold:.0f} % of {len(answers)} students; "
          f"wrote {dest}")
    return 0


def cmd_prairielearn(args: argparse.Namespace) -> int:
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .prairielearn import build_question

    try:
        out = build_question(args.chapter, Path(args.out), book=Path(args.book), image=args.image,
                             timeout=args.timeout, seed=args.seed)
    except ValueError as exc:
        print(f"prairielearn: {exc}", file=sys.stderr)
        return 2
    print(f"wrote the question {out}: copy it under your course's questions/ (the image {args.image} must have "
          "this project installed; PrairieLearn runs python3 -m autograder.prairielearn run in it)")
    return 0


def _term_parsers(sub) -> None:
    """The parsers of the term's commands: export, collect."""
    p = sub.add_parser("export", help="an LMS's gradebook-import CSV (Canvas, Moodle) of a grade output")
    p.add_argument("out", help="the --out folder of `grade` (its results.json)")
    p.add_argument("--lms", required=True, choices=["canvas", "moodle"], help="the gradebook format")
    p.add_argument("--roster", required=True, help="the roster CSV: id (folder), name, email, lms_id, section...")
    p.add_argument("--to", help="the CSV to write (default: OUT/<lms>_grades.csv)")
    p.add_argument("--chapters", nargs="*", help="the chapter columns, in order (default: every graded chapter)")
    p.add_argument("--assignment-id", action="append", metavar="CHAPTER=ID",
                   help="the LMS's assignment id of a chapter (Canvas: the column is 'CHAPTER (ID)'; without "
                        "one Canvas creates a new assignment)")
    p.add_argument("--missing", choices=["blank", "zero"], default="blank",
                   help="a chapter not submitted: blank (the LMS keeps its cell) or 0 (default blank)")
    p.add_argument("--push", action="store_true", help="also send the grades through Canvas's API (canvasapi; "
                                                      "the token in CANVAS_API_TOKEN)")
    p.add_argument("--dry-run", action="store_true", help="say what --push would send, contacting nothing")
    p.add_argument("--canvas-url", help="your Canvas, e.g. https://canvas.example.edu (for --push)")
    p.add_argument("--course-id", type=int, help="the Canvas course id (for --push)")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("collect", help="turn a Canvas or Gradescope download into nbgrader's submitted/ folders")
    p.add_argument("download", help="Canvas: the 'Download Submissions' zip; Gradescope: the 'Export Submissions' "
                                    "zip or folder")
    p.add_argument("--from", dest="source", required=True, choices=["canvas", "gradescope"])
    p.add_argument("--chapter", required=True, help="the chapter id the download is of")
    p.add_argument("--submitted", default="submitted", help="nbgrader's submitted folder (default: submitted)")
    p.add_argument("--roster", help="the roster CSV, to name folders by its id (lms_id for Canvas, sis_id/email "
                                    "for Gradescope); without it the LMS's own id is the folder")
    p.add_argument("--zip-timezone", default="UTC", metavar="ZONE",
                   help="the zone of the Canvas zip's file dates, taken as the submission times (default UTC)")
    p.set_defaults(func=cmd_collect)

    p = sub.add_parser("regrades", help="what each grade run changed: OUT/report/regrades.html, or --diff OLD NEW")
    p.add_argument("out", nargs="?", help="the --out folder of `grade` (its regrades.jsonl)")
    p.add_argument("--diff", nargs=2, metavar=("OLD", "NEW"), help="print the changed scores between two outputs "
                                                                  "(folders or results.json files)")
    p.add_argument("--to", help="the page to write (default: OUT/report/regrades.html)")
    p.set_defaults(func=cmd_regrades)

    p = sub.add_parser("similarity", help="pairs of students whose solution cells of a chapter share code "
                                          "(copydetect; the released stub never counts): an HTML page")
    p.add_argument("submitted", help="nbgrader's submitted folder")
    p.add_argument("--chapter", required=True, help="the chapter id")
    p.add_argument("--to", help="the page (default: SUBMITTED/../similarity/<chapter>.html)")
    p.add_argument("--threshold", type=float, default=0.6, help="the pair score flagged, a share (default 0.6)")
    p.add_argument("--min-tokens", type=int, default=64,
                   help="an exercise where either student wrote fewer tokens is left out (default 64)")
    p.add_argument("--top", type=int, default=20, help="pairs listed on the page (default 20)")
    _book_option(p)
    p.set_defaults(func=cmd_similarity)

    p = sub.add_parser("prairielearn", help="write a PrairieLearn externally graded question for a chapter")
    p.add_argument("chapter", help="the chapter id, e.g. 04_self_attention")
    p.add_argument("--out", required=True, help="the question folder to write (info.json, question.html, tests/)")
    p.add_argument("--image", default="transformer-book/autograder:latest",
                   help="the Docker image with this project installed")
    p.add_argument("--timeout", type=_seconds, default=120.0, help="seconds of one sandbox run (default 120)")
    p.add_argument("--seed", type=int, default=None, help="base seed of the hidden cases (default: fresh)")
    _book_option(p)
    p.set_defaults(func=cmd_prairielearn)


# --------------------------------------------------------------------------- bench


def cmd_bench(args: argparse.Namespace) -> int:
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .bench import main as bench_main

    return bench_main(students=args.students, jobs=args.jobs or None, quick=args.quick,
                      chapters=args.chapters or None, shards=args.shards)


# --------------------------------------------------------------------------- parser


def _seconds(text: str) -> float:
    """argparse type of a positive number of seconds (``--budget``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text}")
    return value


def _size(text: str) -> int:
    """argparse type of a size in bytes (``--memory``, ``--disk``): ``512M``, ``2G``."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .limits import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _count(text: str) -> int:
    """argparse type of a positive whole number (``--processes``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of processes such as 64, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of processes, got {text}")
    return value


def _run_settings(args: argparse.Namespace, sandbox: bool):
    """The run's one :class:`~autograder.grading.RunSettings`, from ``--timeout``,
    ``--budget``, ``--memory``, ``--disk``, ``--processes``, the sandbox chosen and the
    secret seed (``--seed-file``, ``AUTOGRADER_SEED``: :func:`main` reads it; ``check``'s
    visible cases take none)."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .grading import RunSettings

    return RunSettings(timeout=args.timeout, budget=args.budget, memory=args.memory, disk=args.disk,
                       processes=args.processes, sandbox=sandbox,
                       seed=args.seed if hasattr(args, "seed_file") else None)


def _class_run_options(parser: argparse.ArgumentParser) -> None:
    """How a class is graded (``grade`` and ``autograde``): ``--jobs``, ``--timeout``,
    ``--budget`` and the limits of each sandbox run (:func:`_limit_options`)."""
    parser.add_argument("--jobs", type=int, default=1, help="submissions graded in parallel (default 1)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="wall-clock seconds of one sandbox run of a submission (default 120)")
    parser.add_argument("--budget", type=_seconds, default=None, metavar="SECONDS",
                        help="wall-clock seconds of one submission over all its sandbox runs; what is left when "
                             "it is spent scores 0 (default: twice --timeout)")
    _limit_options(parser)


def _seed_options(parser: argparse.ArgumentParser, default: str) -> None:
    """``--seed-file`` and ``--seed``: the secret base seed of the hidden cases
    (:func:`autograder.journal.hidden_seed`; also ``AUTOGRADER_SEED``)."""
    parser.add_argument("--seed-file", metavar="PATH",
                        help=f"a file (mode 600) holding the base seed of the hidden cases; or set AUTOGRADER_SEED "
                             f"({default})")
    parser.add_argument("--seed", type=int, default=None,
                        help="the base seed on the command line, where every process can read it: prefer --seed-file")


def _limit_options(parser: argparse.ArgumentParser) -> None:
    """``--memory``, ``--disk`` and ``--processes``: the limits of each sandbox run
    (defaults: :class:`autograder.limits.Limits`)."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .limits import Limits

    d = Limits()
    parser.add_argument("--memory", type=_size, default=None, metavar="SIZE",
                        help="all the memory of one sandbox run, files in memory included, e.g. 2G "
                             f"(default {d.run_memory_bytes // 2**30}G; a memory cgroup where the machine has one)")
    parser.add_argument("--disk", type=_size, default=None, metavar="SIZE",
                        help=f"what one sandbox run may write, e.g. 512M (default {d.scratch_bytes // 2**20}M)")
    parser.add_argument("--processes", type=_count, default=None, metavar="N",
                        help=f"processes and threads of one sandbox run (default {d.processes})")


def _book_option(parser: argparse.ArgumentParser) -> None:
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from .book import BOOK

    parser.add_argument("--book", default=str(BOOK),
                        help="folder of the source notebooks <chapter>/<chapter>.ipynb (default: the repo's book/)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="autograder", description=__doc__.split("\n\n")[0].strip("`"))
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("release", help="write the student notebooks DIR/<chapter>/<chapter>.ipynb and the "
                                       "student package (a wheel in DIR)")
    p.add_argument("--out", required=True, help="release folder")
    p.add_argument("chapter_ids", nargs="*", metavar="CHAPTER", help="chapter ids (default: all)")
    p.add_argument("--chapters", nargs="*", help="chapter ids, as an option (same as CHAPTER...)")
    p.add_argument("--no-sync-check", action="store_true",
                   help="release even if solution cells differ from the solutions package")
    p.add_argument("--no-package", action="store_true",
                   help="only the notebooks: no student package (the visible checks without the answers)")
    p.add_argument("--extensions", metavar="CSV", help="the term's extensions (student,chapter,due): refuse to "
                                                      "release while one on an earlier chapter is open")
    p.add_argument("--allow-open-extensions", action="store_true",
                   help="release although those students could read the earlier chapter's answers in this wheel")
    _book_option(p)
    p.set_defaults(func=cmd_release)

    p = sub.add_parser("grade", help="grade a class's submissions with the hidden checks")
    p.add_argument("submitted", help="nbgrader's submitted folder: <student>/<chapter>/<chapter>.ipynb")
    p.add_argument("--out", required=True, help="output folder (gradebook.db, CSVs, feedback/)")
    _class_run_options(p)
    _seed_options(p, "default: fresh, kept in OUT")
    p.add_argument("--chapters", nargs="*", help="chapter ids to grade (default: those submitted)")
    p.add_argument("--flat", metavar="CHAPTER", help="SUBMITTED is a folder of <student>.ipynb for CHAPTER")
    p.add_argument("--force", action="store_true", help="regrade everything, ignoring the journal")
    p.add_argument("--duedate", help="due date of the graded chapters, e.g. '2026-11-20 17:00:00 UTC' "
                                     "(lateness from timestamp.txt; default: the one in OUT/gradebook.db)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--shard", metavar="I/N",
                   help="grade only shard I of N (0 ≤ I < N; a stable hash of the student id) and write "
                        "OUT/shard.json; auto/N takes I from JOB_COMPLETION_INDEX (Kubernetes) or "
                        "SLURM_ARRAY_TASK_ID (Slurm); needs the seed (--seed-file or AUTOGRADER_SEED), the same "
                        "for every shard")
    p.add_argument("--isolation", choices=["auto", "bubblewrap", "container"], default=None,
                   help="how student code is kept apart: bubblewrap (namespaces), container (a separate user, "
                        "Landlock, rlimits: for containers without user namespaces) or auto (default: bubblewrap "
                        "where it starts, else container; also AUTOGRADER_ISOLATION)")
    p.add_argument("--unsafe-no-sandbox", action="store_true",
                   help="run student code without the sandbox (NOT tamper-proof; testing only)")
    _term_grade_options(p)
    _book_option(p)
    p.set_defaults(func=cmd_grade)

    p = sub.add_parser("merge", help="merge the outputs of grade --shard I/N into one class result")
    p.add_argument("shards", nargs="+", metavar="SHARD_OUT", help="the --out folders of the N shards, any order")
    p.add_argument("--out", required=True, help="the merged output folder (gradebook.db, CSVs, feedback/)")
    p.add_argument("--submitted", help="the class's submissions (default: the folder the shards recorded)")
    _book_option(p)
    p.set_defaults(func=cmd_merge)

    p = sub.add_parser("autograde", help="nbgrader autograde, sandboxed, in an nbgrader course folder")
    p.add_argument("assignment", help="the assignment (chapter) id, e.g. 04_self_attention")
    p.add_argument("--course", default=None, help="the course folder with nbgrader_config.py (default: here)")
    p.add_argument("--student", action="append", metavar="ID",
                   help="grade only this student (repeatable); the others keep their grades")
    p.add_argument("--force", action="store_true", help="regrade unchanged submissions too (hand grades stay)")
    p.add_argument("--duedate", help="set the assignment's due date in the gradebook, "
                                     "e.g. '2026-11-20 17:00:00 UTC' (default: the gradebook's)")
    p.add_argument("--out", help="folder of grades.csv, scores.csv, feedback/ (default: COURSE/grades/ASSIGNMENT)")
    _class_run_options(p)
    _seed_options(p, "default: fresh, kept")
    p.add_argument("--no-execute", action="store_true",
                   help="leave the submissions' own code cells without outputs in autograded/ (default: each "
                        "changed submission is executed once more in the sandbox, as nbgrader autograde does, "
                        "so the formgrader and generate_feedback show its outputs)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--unsafe-no-sandbox", action="store_true",
                   help="run student code without the sandbox (NOT tamper-proof; testing only)")
    _term_grade_options(p)
    p.set_defaults(func=cmd_autograde)

    p = sub.add_parser("gradescope", help="write a Gradescope autograder zip for a chapter")
    p.add_argument("chapter", help="the chapter id, e.g. 04_self_attention")
    p.add_argument("--out", required=True, help="the zip to write, e.g. autograder.zip")
    p.add_argument("--timeout", type=_seconds, default=120.0, help="seconds of one sandbox run (default 120)")
    p.add_argument("--visibility", default="after_due_date",
                   choices=["hidden", "after_due_date", "after_published", "visible"],
                   help="when students see the per-part results (drawn from hidden cases; default after_due_date); "
                        "Gradescope shows no score until then, so the overall output states the total")
    _seed_options(p, "default: fresh, in the zip")
    p.add_argument("--memory", type=_size, default=None, metavar="SIZE",
                   help="all the memory of one sandbox run, e.g. 600M (default 2G; Gradescope's default "
                        "container has 768 MB in all)")
    p.add_argument("--isolation", default="auto", choices=["auto", "bubblewrap", "container", "engine-only"],
                   help="the wall around student code (default auto: bubblewrap, else the container mode; the "
                        "build fails where neither starts); engine-only: no sandbox, Gradescope's container is "
                        "the only wall (recorded in each results.json)")
    _book_option(p)
    p.set_defaults(func=cmd_gradescope)

    p = sub.add_parser("report", help="the class report of a grade output: scores, parts, frequent mistakes")
    p.add_argument("out", help="the --out folder of `grade` (with its scores.csv); with --course, the assignment")
    p.add_argument("--to", help="where the pages go (default: OUT/report)")
    p.add_argument("--course", help="an nbgrader course folder: report on COURSE/grades/ASSIGNMENT (autograde's)")
    p.add_argument("--roster", help="the roster CSV: the term page names the students and who is missing")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("check", help="run the visible checks of a notebook and print a summary")
    p.add_argument("notebook", help="your notebook, whatever its name, e.g. '04_self_attention (1).ipynb'")
    p.add_argument("--chapter", help="chapter id, only when the notebook's metadata and cells do not tell")
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--budget", type=_seconds, default=None, metavar="SECONDS",
                   help="wall-clock seconds over all the sandbox runs (default: twice --timeout)")
    _limit_options(p)
    p.add_argument("--seed", type=int, default=None)
    _book_option(p)
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("selftest", help="source notebooks score full marks, released ones zero")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--chapters", nargs="*")
    p.add_argument("--keep", help="keep the work folder here (release/, submitted/, out/)")
    p.add_argument("--unsafe-no-sandbox", action="store_true")
    _book_option(p)
    p.set_defaults(func=cmd_selftest)

    p = sub.add_parser("bench", help="throughput vs plain `nbgrader autograde`")
    p.add_argument("--students", type=int, default=10, help="students in the synthetic class (default 10)")
    p.add_argument("--jobs", type=int, nargs="*", default=None,
                   help="--jobs values to measure (default 1, 2, 4, ... up to every core)")
    p.add_argument("--shards", type=int, default=None,
                   help="processes of the sharded run (grade --shard i/N + merge) against one --jobs N run "
                        "(default 2, none with --quick; 0: none)")
    p.add_argument("--chapters", nargs="*")
    p.add_argument("--quick", action="store_true", help="tiny run that proves the benchmark works")
    p.set_defaults(func=cmd_bench)
    _term_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m autograder`` and the ``autograder`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv  # the command as typed, for OUT/regrades.jsonl
    if hasattr(args, "seed_file"):  # a secret seed: from a private file or the environment (journal.hidden_seed)
        # this command's modules, loaded when it runs: the CLI starts light (module docstring)
        from .journal import SeedError, hidden_seed

        try:
            args.seed, warning = hidden_seed(args.seed, args.seed_file)
        except SeedError as exc:
            print(f"{args.command}: {exc}", file=sys.stderr)
            return 2
        if warning:
            print(warning, file=sys.stderr)
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
