"""The term's commands: ``export`` (an LMS's gradebook import), ``collect``, ``regrades``,
``similarity``, ``prairielearn``, and what ``release``, ``grade`` and ``report`` take from a term
(the roster, extensions, late days, the regrade log).

Each command imports its modules inside its function, so that ``python -m autograder``
starts light (:mod:`autograder.cli`).
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys
import zoneinfo
from pathlib import Path

__all__ = ["cmd_export", "cmd_collect", "cmd_regrades", "cmd_similarity", "cmd_prairielearn", "roster_option",
           "open_extensions_refusal", "late_policy_option", "log_regrades"]


# --------------------------------------------------------------------------- a term (roster, LMS, ...)


def roster_option(args: argparse.Namespace):
    """The ``--roster`` file read, or ``None`` when the option is not given (RosterError propagates)."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from ..roster import read_roster

    return read_roster(args.roster) if getattr(args, "roster", None) else None


def cmd_export(args: argparse.Namespace) -> int:
    """``export OUT --lms canvas|moodle --roster R``: the LMS's gradebook-import CSV of a grade
    output (``--push``: also through Canvas's API). Exit 0; 1 when a graded student is not on
    the roster (not exported) or a roster student lacks the id the LMS matches on; 2 on bad input."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from ..lms import ExportError, lms_export, parse_assignment_ids, write_export
    from ..results import ClassResults, ResultsError
    from ..roster import RosterError

    try:
        results = ClassResults.read(Path(args.out))
        export = lms_export(results, args.lms, roster_option(args), chapters=args.chapters or None,
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
    from ..lms import ExportError, canvas_grade_data, connect_canvas, parse_assignment_ids, push_canvas

    if args.lms != "canvas":
        print("export: --push and --dry-run are for --lms canvas", file=sys.stderr)
        return 2
    try:
        roster = roster_option(args)
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
    """``collect DOWNLOAD --from canvas|gradescope --chapter CH``: an LMS's download into
    nbgrader's ``submitted/``. Exit 0; 1 when a file was refused (each named, and in the log);
    2 on bad input."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from ..collect import CollectError, collect
    from ..roster import RosterError

    try:
        zone = datetime.timezone.utc if args.zip_timezone == "UTC" else zoneinfo.ZoneInfo(args.zip_timezone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        print(f"collect: --zip-timezone {args.zip_timezone!r}: expected a zone such as UTC or Europe/Berlin",
              file=sys.stderr)
        return 2
    try:
        done = collect(args.source, Path(args.download), Path(args.submitted), args.chapter, roster_option(args),
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


def open_extensions_refusal(args: argparse.Namespace, chapters: list[str]) -> str:
    """Why ``release`` must not go on (empty: it may): a student may still hand in an earlier
    chapter whose reference answers the released chapter's student package carries."""
    if not getattr(args, "extensions", None):
        return ""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from ..book import chapter_ids
    from ..extensions import ExtensionsError, open_extensions, read_extensions

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


def late_policy_option(args: argparse.Namespace) -> dict:
    """``GradebookTarget``'s extensions and late days from ``--extensions`` / ``--late-days``."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from ..extensions import read_extensions

    policy = {}
    if getattr(args, "extensions", None):
        policy["extensions"] = tuple(read_extensions(args.extensions))
    if getattr(args, "late_days", None) is not None:
        if args.late_days < 0:
            raise ValueError(f"--late-days {args.late_days}: expected 0 or more days")
        policy["late_days"] = args.late_days
    return policy


def log_regrades(out: Path, before, args: argparse.Namespace) -> None:
    """Append this run's changed scores to OUT/regrades.jsonl (when OUT held results before
    it) and say how many."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from ..regrades import append_log, diff, snapshot

    after = snapshot(out)
    if before is None or after is None:
        return  # a first grading is no regrade (and a grade run writes what merging its shards writes)
    changes = diff(before, after)
    command = " ".join(["python -m autograder", *getattr(args, "argv", [args.command])])
    append_log(out, changes, reason=getattr(args, "reason", ""), command=command)
    if changes:
        print(f"  {out / 'regrades.jsonl'}  {len(changes)} score(s) changed since the last run "
              "(python -m autograder regrades OUT: the page)")


def cmd_regrades(args: argparse.Namespace) -> int:
    """``regrades OUT`` (the page of every run's changed scores) or ``regrades --diff OLD NEW``
    (the changed scores, printed). Exit 0; 2 on bad input."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from ..regrades import diff, load_results, read_log, render_html
    from ..results import ResultsError

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
    """``similarity SUBMITTED --chapter CH``: the pairs of students whose solution cells share
    code, as an HTML page. Exit 0 (flagged pairs are findings, not failures); 2 on bad input."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from ..checks import exercises_of
    from ..similarity import Settings, compare_class, read_class, render_html, stub_cells

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
    """``prairielearn CHAPTER --out DIR``: a PrairieLearn externally graded question. Exit 0;
    2 on bad input (an unknown chapter)."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from ..prairielearn import build_question

    try:
        out = build_question(args.chapter, Path(args.out), book=Path(args.book), image=args.image,
                             timeout=args.timeout, seed=args.seed)
    except ValueError as exc:
        print(f"prairielearn: {exc}", file=sys.stderr)
        return 2
    print(f"wrote the question {out}: copy it under your course's questions/ (the image {args.image} must have "
          "this project installed; PrairieLearn runs python3 -m autograder.prairielearn run in it)")
    return 0
