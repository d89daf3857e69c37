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

The commands live in :mod:`autograder.commands`, one module per concern; this module
builds the parser and calls them. Each command imports its own modules when it runs (the
imports inside the ``cmd_*`` functions): ``python -m autograder`` starts in about 0.1 CPU s and answers ``--help``
or a usage error at once, where importing every command's machinery (the grader,
torch, nbgrader, Jinja2, the LMS clients) costs about 5 CPU s per start.
"""
from __future__ import annotations

import argparse
import sys

# jsonschema, which nbformat imports, loads its optional IRI format checker at import when
# rfc3987-syntax is installed (jupyter-events pulls it in): 38 Earley parsers built, about
# 1.7 CPU seconds in every command that reads a notebook. No schema the autograder checks
# is validated with a format checker, so the commands go without it: None in sys.modules
# makes that optional import fail as if the package were not installed. It is set here, before
# the commands import nbformat, so that both ``python -m autograder`` and the ``autograder``
# console script (which calls :func:`main` directly) start without it.
sys.modules.setdefault("rfc3987_syntax", None)

from .commands.check import cmd_check, cmd_selftest  # noqa: E402  (after the line above)
from .commands.grade import (cmd_autograde, cmd_bench, cmd_gradescope, cmd_grade, cmd_merge, cmd_release,
                               cmd_report)
from .commands.term import cmd_collect, cmd_export, cmd_prairielearn, cmd_regrades, cmd_similarity

__all__ = ["main", "build_parser"]


# --------------------------------------------------------------------------- the term's options and parsers


def _term_grade_options(p: argparse.ArgumentParser) -> None:
    """``grade``'s options of a term: extensions, late days, the reason of a regrade."""
    p.add_argument("--extensions", metavar="CSV", help="per-student extensions: student,chapter,due (the new due "
                                                      "date), applied as nbgrader extensions")
    p.add_argument("--late-days", type=int, default=None, metavar="N",
                   help="each student's late-day budget over the term: a late chapter spends ceil(late/24h) days "
                        "while they last and is then on time")
    p.add_argument("--reason", default="", help="why this run (e.g. 'regrade request #12'): kept in OUT/regrades.jsonl")


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


def _wall_options(parser: argparse.ArgumentParser) -> None:
    """``--isolation`` and ``--unsafe-no-sandbox``: the wall around student code of a class's
    grading (``grade`` and ``autograde``; :func:`autograder.commands.runs.grading_sandbox`)."""
    parser.add_argument("--isolation", choices=["auto", "bubblewrap", "container"], default=None,
                        help="how student code is kept apart: bubblewrap (namespaces), container (a separate user, "
                             "Landlock, rlimits: for containers without user namespaces) or auto (default: "
                             "bubblewrap where it starts, else container; also AUTOGRADER_ISOLATION)")
    parser.add_argument("--unsafe-no-sandbox", action="store_true",
                        help="run student code without the sandbox (NOT tamper-proof; testing only)")


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
    _wall_options(p)
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
    _wall_options(p)
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
    p.add_argument("--timeout", type=float, default=120.0,
                   help="wall-clock seconds of one sandbox run of the notebook (default 120)")
    p.add_argument("--budget", type=_seconds, default=None, metavar="SECONDS",
                   help="wall-clock seconds over all the sandbox runs (default: twice --timeout)")
    _limit_options(p)
    p.add_argument("--seed", type=int, default=None,
                   help="seed of the cases drawn (default: the visible check's own fixed seed, the cases a "
                        "test cell runs)")
    _book_option(p)
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("selftest", help="source notebooks score full marks, released ones zero")
    p.add_argument("--jobs", type=int, default=2, help="notebooks graded in parallel (default 2)")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="wall-clock seconds of one sandbox run of a notebook (default 120)")
    p.add_argument("--chapters", nargs="*", help="chapter ids (default: every chapter of --book)")
    p.add_argument("--keep", help="keep the work folder here (release/, submitted/, out/)")
    p.add_argument("--unsafe-no-sandbox", action="store_true",
                   help="run the book's own notebooks as a plain subprocess even where a sandbox starts")
    _book_option(p)
    p.set_defaults(func=cmd_selftest)

    p = sub.add_parser("bench", help="throughput vs plain `nbgrader autograde`")
    p.add_argument("--students", type=int, default=10, help="students in the synthetic class (default 10)")
    p.add_argument("--jobs", type=int, nargs="*", default=None,
                   help="--jobs values to measure (default 1, 2, 4, ... up to every core)")
    p.add_argument("--shards", type=int, default=None,
                   help="processes of the sharded run (grade --shard i/N + merge) against one --jobs N run "
                        "(default 2, none with --quick; 0: none)")
    p.add_argument("--chapters", nargs="*", help="chapter ids of the synthetic class (default: every chapter with "
                                                 "checks; --quick: 04_self_attention)")
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
