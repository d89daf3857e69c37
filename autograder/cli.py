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
* ``check NOTEBOOK`` — a student's local run of the visible checks, as a table.
* ``selftest`` — the source notebooks must score full marks and the released ones
  zero, through the same pipeline as ``grade``.
* ``bench`` — throughput against plain ``nbgrader autograde`` (:mod:`autograder.bench`).

Exit codes: 0 success; 1 a check or self-test failed; 2 bad usage or input;
130 interrupted.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

__all__ = ["main", "build_parser"]


def _sandbox_available() -> bool:
    """Whether a sandbox starts here (checked once per process): bubblewrap, or the
    container mode where bubblewrap cannot start (:mod:`autograder.isolation`)."""
    from .isolation import choose_isolation

    try:
        choose_isolation()
    except (RuntimeError, OSError):
        return False
    return True


def _isolation_line() -> str:
    """``isolation: …`` — how student code is kept apart, for the console."""
    from .isolation import choose_isolation, describe

    return f"isolation: {describe(choose_isolation())}"


def _record_isolation(out: Path, mode: str) -> None:
    """``OUT/isolation.json``: the isolation the grades were made under (``none``: --unsafe-no-sandbox)."""
    import json

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
        from .isolation import set_isolation

        set_isolation(args.isolation)
    try:
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
    from .release import ReleaseError, release

    chapters = list(dict.fromkeys(list(args.chapter_ids or []) + list(args.chapters or [])))
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
    from .batch import GradebookTarget, grade_class

    shard = None
    if args.shard:
        from .shard import ShardError, parse_shard

        try:
            shard = parse_shard(args.shard)
        except ShardError as exc:
            print(f"grade: {exc}", file=sys.stderr)
            return 2
    sandbox = _grading_sandbox("grade", args)
    if sandbox is None:
        return 2
    options = dict(
        chapters=args.chapters or None, flat=args.flat, jobs=args.jobs, settings=_run_settings(args, sandbox),
        seed=args.seed, force=args.force, progress=None if not args.no_progress else False,
        book=Path(args.book), gradebook=GradebookTarget(duedate=args.duedate),
    )
    try:
        if shard is not None:
            from .shard import SHARD_FILE, grade_shard

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
    from .report import summarise

    from .isolation import choose_isolation

    _record_isolation(Path(args.out), choose_isolation() if sandbox else "none")
    print(summarise(report))
    if shard is not None:
        print(f"  {Path(args.out) / SHARD_FILE}  shard {shard}: what it graded, with which code and checks; "
              "merge all the shards with `python -m autograder merge OUT_0 ... --out OUT`")
    return 0


# --------------------------------------------------------------------------- merge


def cmd_merge(args: argparse.Namespace) -> int:
    from .report import summarise
    from .shard import ShardError, merge_shards

    try:
        report = merge_shards([Path(s) for s in args.shards], Path(args.out),
                              submitted=Path(args.submitted) if args.submitted else None, book=Path(args.book))
    except ShardError as exc:
        print(f"merge: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"merge: {exc}", file=sys.stderr)
        return 2
    from .shard import isolation_of

    mode = isolation_of([Path(s) for s in args.shards])
    _record_isolation(Path(args.out), mode)
    print(f"merged {len(args.shards)} shard(s) into {args.out}; the shards were graded with isolation {mode}")
    print(summarise(report))
    return 0


# --------------------------------------------------------------------------- gradescope


def cmd_gradescope(args: argparse.Namespace) -> int:
    from .gradescope import build_zip

    try:
        out = build_zip(args.chapter, Path(args.out), book=Path(args.book), timeout=args.timeout,
                        visibility=args.visibility, seed=args.seed)
    except ValueError as exc:
        print(f"gradescope: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {out}: upload it as the autograder of a Gradescope programming assignment for {args.chapter} "
          "(students submit the notebook; turn the autograder's internet access off if Gradescope offers it)")
    return 0


# --------------------------------------------------------------------------- report


def cmd_report(args: argparse.Namespace) -> int:
    from .report import ReportError, class_report, course_output

    try:
        out, submitted = Path(args.out), Path(args.submitted) if args.submitted else None
        if args.course:  # `report --course DIR ASSIGNMENT`: where `autograde ASSIGNMENT` wrote
            out, in_course = course_output(args.course, args.out)
            submitted = submitted or in_course
        written = class_report(out, Path(args.to) if args.to else None, submitted)
    except ReportError as exc:
        print(f"report: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    return 0


# --------------------------------------------------------------------------- autograde


def cmd_autograde(args: argparse.Namespace) -> int:
    from .course import autograde

    sandbox = _grading_sandbox("autograde", args)
    if sandbox is None:
        return 2
    try:
        done = autograde(args.assignment, course=args.course, students=args.student or None, force=args.force,
                         duedate=args.duedate, out=Path(args.out) if args.out else None, jobs=args.jobs,
                         settings=_run_settings(args, sandbox), seed=args.seed,
                         progress=None if not args.no_progress else False)
    except ValueError as exc:
        print(f"autograde: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted: the finished submissions are journaled; run the same command again to resume.",
              file=sys.stderr)
        return 130
    from .report import summarise

    report, course = done.batch, done.course
    # The summary of `grade`, less its OUT/gradebook.db line: here the course's own gradebook is filled.
    print("\n".join(line for line in summarise(report).splitlines() if not line.endswith("nbgrader's gradebook")))
    print(f"  {course.folder(course.coursedir.autograded_directory, '<student>', args.assignment)}/  "
          f"{len(done.autograded)} autograded notebook(s), for nbgrader's formgrader and generate_feedback")
    print(f"  {course.db_url}  the course's gradebook (hand grades entered there are kept)")
    return 0


# --------------------------------------------------------------------------- check


def cmd_check(args: argparse.Namespace) -> int:
    from .batch import as_dicts
    from .text import check_report
    from .checks import exercises_of
    from .grading import grade_submission
    from .book import chapter_ids, source_notebook
    from .student.notebook import chapter_of, read_notebook

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
    rows = as_dicts(grade_submission(source, path, chapter=chapter, hidden=False, seed=args.seed,
                                     **_run_settings(args, sandbox).options()))
    print(f"{path.name}: chapter {chapter}, visible checks\n")
    text, status = check_report([_check_row(r) for r in rows])
    print(text)
    return status


def _check_row(row: dict) -> dict:
    """A graded row (:func:`autograder.batch.as_dicts`) as :func:`autograder.text.check_report` reads it:
    the reason, then the diagnosis of every missed part; the notes (advice included)."""
    from .batch import parts_text

    missed = [f"{p['name']}: {p['message']}" for p in row["parts"] if p["score"] < p["points"] and p["message"]]
    message = "\n".join(([row["reason"]] if row["reason"] else []) + missed)
    return {**row, "message": message, "parts": parts_text(row), "advice": []}


# --------------------------------------------------------------------------- selftest


def selftest(jobs: int = 1, timeout: float = 120.0, chapters: list[str] | None = None,
             sandbox: bool = True, keep: Path | None = None, book: Path | None = None) -> tuple[bool, str]:
    """Grade the source notebooks (must get full marks) and the released ones (must get
    zero) through the same pipeline as ``grade``; return ``(ok, report)``."""
    from .batch import grade_class
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
            total = sum(s["score"] for s in g.scores)
            max_total = sum(s["max_score"] for s in g.scores)
            want = max_total if sub.student == "reference" else 0.0
            ok = abs(total - want) < 1e-9 and max_total > 0
            lines.append(f"{'ok  ' if ok else 'FAIL'} {sub.student:<9} {sub.chapter:<28} {total:g}/{max_total:g}"
                         f" (want {want:g})")
            if not ok:
                for s in g.scores:
                    bad = (s["status"] != "passed") if sub.student == "reference" else (s["score"] != 0)
                    if bad:
                        problems.append(f"  {sub.student}/{sub.chapter} {s['grade_id']}: {s['score']:g}/"
                                        f"{s['max_score']:g} {s['status']}: {s['reason']}")
                if max_total == 0:
                    problems.append(f"  {sub.chapter}: no graded cells (0 points in the source notebook)")
        text = "\n".join(lines + (["", "problems:"] + problems if problems else []))
        return not problems and all(ln.startswith("ok") for ln in lines), text
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)


def cmd_selftest(args: argparse.Namespace) -> int:
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


# --------------------------------------------------------------------------- bench


def cmd_bench(args: argparse.Namespace) -> int:
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
    from .sandbox import parse_size

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
    ``--budget``, ``--memory``, ``--disk``, ``--processes`` and the sandbox chosen."""
    from .grading import RunSettings

    return RunSettings(timeout=args.timeout, budget=args.budget, memory=args.memory, disk=args.disk,
                       processes=args.processes, sandbox=sandbox)


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
    (defaults: :class:`autograder.sandbox.Limits`)."""
    from .sandbox import Limits

    d = Limits()
    parser.add_argument("--memory", type=_size, default=None, metavar="SIZE",
                        help="all the memory of one sandbox run, files in memory included, e.g. 2G "
                             f"(default {d.run_memory_bytes // 2**30}G; a memory cgroup where the machine has one)")
    parser.add_argument("--disk", type=_size, default=None, metavar="SIZE",
                        help=f"what one sandbox run may write, e.g. 512M (default {d.scratch_bytes // 2**20}M)")
    parser.add_argument("--processes", type=_count, default=None, metavar="N",
                        help=f"processes and threads of one sandbox run (default {d.processes})")


def _book_option(parser: argparse.ArgumentParser) -> None:
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
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--unsafe-no-sandbox", action="store_true",
                   help="run student code without the sandbox (NOT tamper-proof; testing only)")
    p.set_defaults(func=cmd_autograde)

    p = sub.add_parser("gradescope", help="write a Gradescope autograder zip for a chapter")
    p.add_argument("chapter", help="the chapter id, e.g. 04_self_attention")
    p.add_argument("--out", required=True, help="the zip to write, e.g. autograder.zip")
    p.add_argument("--timeout", type=_seconds, default=120.0, help="seconds of one sandbox run (default 120)")
    p.add_argument("--visibility", default="after_due_date",
                   choices=["hidden", "after_due_date", "after_published", "visible"],
                   help="when students see the per-part results (drawn from hidden cases; default after_due_date); "
                        "the total is shown at once")
    _seed_options(p, "default: fresh, in the zip")
    _book_option(p)
    p.set_defaults(func=cmd_gradescope)

    p = sub.add_parser("report", help="the class report of a grade output: scores, parts, frequent mistakes")
    p.add_argument("out", help="the --out folder of `grade` (with its scores.csv); with --course, the assignment")
    p.add_argument("--to", help="where the pages go (default: OUT/report)")
    p.add_argument("--course", help="an nbgrader course folder: report on COURSE/grades/ASSIGNMENT (autograde's)")
    p.add_argument("--submitted", help="the graded submissions folder, to name a notebook of the wrong chapter "
                                       "(default: the course's with --course or OUT = COURSE/grades/ASSIGNMENT, "
                                       "else the folder the last grade into OUT read)")
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
    p.add_argument("--shards", type=int, default=2,
                   help="processes of the sharded run (grade --shard i/N + merge) against one --jobs N run "
                        "(default 2; 0: none)")
    p.add_argument("--chapters", nargs="*")
    p.add_argument("--quick", action="store_true", help="tiny run that proves the benchmark works")
    p.set_defaults(func=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m autograder`` and the ``autograder`` console script."""
    args = build_parser().parse_args(argv)
    if hasattr(args, "seed_file"):  # a secret seed: from a private file or the environment (journal.hidden_seed)
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
