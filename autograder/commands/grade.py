"""The commands that grade a class and hand out its results: ``release``, ``grade``, ``merge``,
``gradescope``, ``report``, ``autograde``, ``bench``.

Each command imports its modules inside its function, so that ``python -m autograder``
starts light (:mod:`autograder.cli`).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .runs import grading_sandbox, record_isolation, run_settings
from .term import late_policy_option, log_regrades, open_extensions_refusal, roster_option

__all__ = ["cmd_release", "cmd_grade", "cmd_merge", "cmd_gradescope", "cmd_report", "cmd_autograde", "cmd_bench"]


# --------------------------------------------------------------------------- release


def cmd_release(args: argparse.Namespace) -> int:
    """``release --out DIR [CHAPTER...]``: the student notebooks and one student package per
    chapter. Exit 0; 1 when the release is refused (an answer line in what would ship, an open
    extension on an earlier chapter); 2 on bad input (an unknown chapter)."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from ..release import ReleaseError, release

    chapters = list(dict.fromkeys(list(args.chapter_ids or []) + list(args.chapters or [])))
    refusal = open_extensions_refusal(args, chapters)
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


def _term_and_wall(command: str, args: argparse.Namespace) -> tuple[dict, bool] | None:
    """What ``grade`` and ``autograde`` decide before grading: the term's late policy
    (:func:`~autograder.commands.term.late_policy_option`) and whether student code runs in
    the sandbox (:func:`~autograder.commands.runs.grading_sandbox`); ``None`` after saying
    why, when either refuses (exit status 2)."""
    try:
        late_policy = late_policy_option(args)
    except ValueError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return None
    sandbox = grading_sandbox(command, args)
    return None if sandbox is None else (late_policy, sandbox)


def cmd_grade(args: argparse.Namespace) -> int:
    """``grade SUBMITTED --out OUT`` (a class, or one shard of it with ``--shard I/N``): the
    gradebook, the CSVs, ``results.json``, the feedback pages and the console summary. Exit 0;
    2 on bad input or when no sandbox starts; 130 interrupted (the journal keeps what was done)."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from ..batch import GradebookTarget, grade_class
    from ..isolation import choose_isolation
    from ..regrades import snapshot
    from ..shard import SHARD_FILE, ShardError, grade_shard, parse_shard

    shard = None
    if args.shard:
        try:
            shard = parse_shard(args.shard)
        except ShardError as exc:
            print(f"grade: {exc}", file=sys.stderr)
            return 2
    chosen = _term_and_wall("grade", args)
    if chosen is None:
        return 2
    late_policy, sandbox = chosen
    options = dict(
        chapters=args.chapters or None, flat=args.flat, jobs=args.jobs, settings=run_settings(args, sandbox),
        force=args.force, progress=False if args.no_progress else None,
        book=Path(args.book), gradebook=GradebookTarget(duedate=args.duedate, **late_policy),
    )
    before = snapshot(Path(args.out)) if shard is None else None
    try:
        if shard is not None:
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
    record_isolation(Path(args.out), choose_isolation() if sandbox else "none")
    print(_summary(report))
    if shard is None:
        log_regrades(Path(args.out), before, args)
    else:
        print(f"  {Path(args.out) / SHARD_FILE}  shard {shard}: what it graded, with which code and checks; "
              "merge all the shards with `python -m autograder merge OUT_0 ... --out OUT`")
    return 0


def _summary(report) -> str:
    """The console summary of a finished run (a :class:`~autograder.batch.BatchReport`): a
    view of the ``results.json`` it wrote, as the class report is."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from ..summary import summarise

    return summarise(report.class_results(), report.out, graded=report.graded, reused=report.reused)


# --------------------------------------------------------------------------- merge


def cmd_merge(args: argparse.Namespace) -> int:
    """``merge OUT_0 ... --out OUT``: the shards of ``grade --shard`` as one class result. Exit 0;
    1 when the shards do not fit together (another grader, seed or class); 2 on bad input."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from ..regrades import snapshot
    from ..shard import ShardError, isolation_of, merge_shards

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
    mode = isolation_of([Path(s) for s in args.shards])
    record_isolation(Path(args.out), mode)
    print(f"merged {len(args.shards)} shard(s) into {args.out}; the shards were graded with isolation {mode}")
    print(_summary(report))
    log_regrades(Path(args.out), before, args)
    return 0


# --------------------------------------------------------------------------- gradescope


def cmd_gradescope(args: argparse.Namespace) -> int:
    """``gradescope CHAPTER --out autograder.zip``: a Gradescope autograder for one chapter.
    Exit 0; 2 on bad input (an unknown chapter, a bad option)."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from ..gradescope import ENGINE_ONLY, build_zip, chapter_points
    from ..text import score_text

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
    """``report OUT`` (or ``report --course DIR ASSIGNMENT``): the class report of a grade
    output, an HTML page and a CSV per chapter. Exit 0; 2 when the results or the roster
    cannot be read."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from ..course import load_course
    from ..report import ReportError, class_report
    from ..roster import RosterError

    try:
        out = Path(args.out)
        if args.course:  # `report --course DIR ASSIGNMENT`: where `autograde ASSIGNMENT` wrote
            try:
                out = load_course(args.course).root / "grades" / args.out
            except ValueError as exc:
                raise ReportError(f"{exc}: expected an nbgrader course folder (with nbgrader_config.py)") from None
        written = class_report(out, Path(args.to) if args.to else None, roster=roster_option(args))
    except (ReportError, RosterError) as exc:
        print(f"report: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    return 0


# --------------------------------------------------------------------------- autograde


def cmd_autograde(args: argparse.Namespace) -> int:
    """``autograde ASSIGNMENT`` in an nbgrader course: grades ``submitted/`` in the sandbox into
    the course's gradebook and ``autograded/``. Exit 0; 2 on bad input or when no sandbox
    starts; 130 interrupted (the journal keeps what was done)."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from ..course import autograde
    from ..regrades import snapshot

    chosen = _term_and_wall("autograde", args)
    if chosen is None:
        return 2
    late_policy, sandbox = chosen
    out_dir = Path(args.out) if args.out else Path(args.course or ".") / "grades" / args.assignment
    before = snapshot(out_dir)
    try:
        done = autograde(args.assignment, course=args.course, students=args.student or None, force=args.force,
                         duedate=args.duedate, out=Path(args.out) if args.out else None, jobs=args.jobs,
                         settings=run_settings(args, sandbox),
                         progress=False if args.no_progress else None, execute=not args.no_execute,
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
    log_regrades(report.out, before if report.out.resolve() == out_dir.resolve() else None, args)
    return 0


# --------------------------------------------------------------------------- bench


def cmd_bench(args: argparse.Namespace) -> int:
    """``bench``: grading throughput against plain ``nbgrader autograde`` on a synthetic class
    (:func:`autograder.bench.main`'s exit status)."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from ..bench import main as bench_main

    return bench_main(students=args.students, jobs=args.jobs or None, quick=args.quick,
                      chapters=args.chapters or None, shards=args.shards)
