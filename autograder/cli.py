"""``python -m autograder`` (or ``autograder``): release, grade, check, selftest, bench.

* ``release --out DIR`` — the student notebooks ``DIR/<chapter>/<chapter>.ipynb``
  (nbgrader's preprocessors; no solution, no hidden test), after checking that the
  solution cells equal the ``solutions`` package.
* ``grade SUBMITTED --out OUT`` — grade a class in nbgrader's submitted layout
  (``<student>/<chapter>/<chapter>.ipynb``; ``--flat CHAPTER`` for a folder of
  ``<student>.ipynb``) with the hidden checks, student code in the sandbox; writes
  ``gradebook.db`` (nbgrader's), ``scores.csv``, ``grades.csv`` and
  ``feedback/<student>/<chapter>.html``. Resumes an interrupted run.
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
    """Whether the bubblewrap sandbox starts here (checked once per process)."""
    from .sandbox import check_sandbox

    try:
        check_sandbox()
    except (RuntimeError, OSError):
        return False
    return True


# --------------------------------------------------------------------------- release


def cmd_release(args: argparse.Namespace) -> int:
    from .release import ReleaseError, release

    try:
        done = release(Path(args.out), args.chapters or None, book=Path(args.book),
                       check_sync=not args.no_sync_check)
    except (ReleaseError, ValueError) as exc:
        print(f"release failed: {exc}", file=sys.stderr)
        return 1 if isinstance(exc, ReleaseError) else 2
    for item in done:
        print(f"released {item.chapter}: {item.path}")
    return 0


# --------------------------------------------------------------------------- grade


def cmd_grade(args: argparse.Namespace) -> int:
    from .batch import grade_class

    sandbox = True
    if args.unsafe_no_sandbox:
        sandbox = False
        print("WARNING: --unsafe-no-sandbox: student code runs as a plain subprocess with your rights; "
              "the grades are NOT tamper-proof.", file=sys.stderr)
    elif not _sandbox_available():
        print("grade: the bubblewrap sandbox (bwrap) is not available; install it "
              "(apt-get install bubblewrap) or pass --unsafe-no-sandbox for untrusted-free testing only.",
              file=sys.stderr)
        return 2
    try:
        report = grade_class(
            Path(args.submitted), Path(args.out),
            chapters=args.chapters or None, flat=args.flat, jobs=args.jobs, timeout=args.timeout,
            seed=args.seed, force=args.force, sandbox=sandbox, progress=None if not args.no_progress else False,
            book=Path(args.book),
        )
    except ValueError as exc:
        print(f"grade: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted: the finished submissions are journaled in "
              f"{Path(args.out) / '.journal'}; run the same command again to resume.", file=sys.stderr)
        return 130
    totals = report.totals()
    students = sorted({s for s, _ in totals})
    print(f"graded {report.graded} submission(s), reused {report.reused} unchanged from the journal; "
          f"{len(students)} student(s).")
    print(f"wrote {report.out / 'grades.csv'}, {report.out / 'scores.csv'}, {report.out / 'gradebook.db'}, "
          f"{report.out / 'feedback'}/")
    return 0


# --------------------------------------------------------------------------- check


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    widths[-1] = min(widths[-1], 200)
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def cmd_check(args: argparse.Namespace) -> int:
    from .batch import _as_dicts, _num, parts_text
    from .grading import grade_submission
    from .release import source_notebook

    path = Path(args.notebook)
    if not path.is_file():
        print(f"check: no such notebook: {path}", file=sys.stderr)
        return 2
    chapter = args.chapter or path.stem
    try:
        source = source_notebook(chapter, Path(args.book))
    except ValueError:
        print(f"check: cannot tell the chapter of {path.name}; pass --chapter (e.g. --chapter 04_self_attention)",
              file=sys.stderr)
        return 2
    sandbox = _sandbox_available()
    if not sandbox:
        print("(no sandbox available: your code runs as a plain subprocess)", file=sys.stderr)
    rows = _as_dicts(grade_submission(source, path, chapter=chapter, timeout=args.timeout,
                                      hidden=False, seed=args.seed, sandbox=sandbox))
    table = [[r["exercise"], f"{_num(r['score'])}/{_num(r['max_score'])}", r["status"], r["reason"] or "ok"]
             for r in rows]
    print(_table(table, ["exercise", "points", "status", "message"]))
    for r in rows:
        if r["parts"] and r["status"] != "passed":
            print(f"\n{r['exercise']}: {parts_text(r)}")
        for note in r["notes"]:
            print(f"  note on {r['exercise']}: {note}")
    passed = sum(r["status"] == "passed" for r in rows)
    print(f"\n{passed} of {len(rows)} exercises pass the visible checks "
          "(the hidden checks, run when grading, test more cases).")
    return 0 if rows and passed == len(rows) else 1


# --------------------------------------------------------------------------- selftest


def selftest(jobs: int = 1, timeout: float = 120.0, chapters: list[str] | None = None,
             sandbox: bool = True, keep: Path | None = None, book: Path | None = None) -> tuple[bool, str]:
    """Grade the source notebooks (must get full marks) and the released ones (must get
    zero) through the same pipeline as ``grade``; return ``(ok, report)``."""
    from .batch import grade_class
    from .release import BOOK, chapter_ids, release, source_notebook

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
        report = grade_class(submitted, work / "out", chapters=chapters, jobs=jobs, timeout=timeout,
                             sandbox=sandbox, force=True, book=book)
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

    return bench_main(students=args.students, jobs=args.jobs, quick=args.quick, chapters=args.chapters or None)


# --------------------------------------------------------------------------- parser


def _book_option(parser: argparse.ArgumentParser) -> None:
    from .release import BOOK

    parser.add_argument("--book", default=str(BOOK),
                        help="folder of the source notebooks <chapter>/<chapter>.ipynb (default: the repo's book/)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="autograder", description=__doc__.split("\n\n")[0].strip("`"))
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("release", help="write the student notebooks DIR/<chapter>/<chapter>.ipynb")
    p.add_argument("--out", required=True, help="release folder")
    p.add_argument("--chapters", nargs="*", help="chapter ids (default: all)")
    p.add_argument("--no-sync-check", action="store_true",
                   help="release even if solution cells differ from the solutions package")
    _book_option(p)
    p.set_defaults(func=cmd_release)

    p = sub.add_parser("grade", help="grade a class's submissions with the hidden checks")
    p.add_argument("submitted", help="nbgrader's submitted folder: <student>/<chapter>/<chapter>.ipynb")
    p.add_argument("--out", required=True, help="output folder (gradebook.db, CSVs, feedback/)")
    p.add_argument("--jobs", type=int, default=1, help="submissions graded in parallel (default 1)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per submission (default 120)")
    p.add_argument("--seed", type=int, default=None, help="base seed of the hidden cases (default: fresh, kept in OUT)")
    p.add_argument("--chapters", nargs="*", help="chapter ids to grade (default: those submitted)")
    p.add_argument("--flat", metavar="CHAPTER", help="SUBMITTED is a folder of <student>.ipynb for CHAPTER")
    p.add_argument("--force", action="store_true", help="regrade everything, ignoring the journal")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--unsafe-no-sandbox", action="store_true",
                   help="run student code without the sandbox (NOT tamper-proof; testing only)")
    _book_option(p)
    p.set_defaults(func=cmd_grade)

    p = sub.add_parser("check", help="run the visible checks of a notebook and print a summary")
    p.add_argument("notebook", help="your notebook, e.g. 04_self_attention.ipynb")
    p.add_argument("--chapter", help="chapter id when the file name is not <chapter>.ipynb")
    p.add_argument("--timeout", type=float, default=120.0)
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
    p.add_argument("--jobs", type=int, nargs="*", default=[1, 2], help="--jobs values to measure (default 1 2)")
    p.add_argument("--chapters", nargs="*")
    p.add_argument("--quick", action="store_true", help="tiny run that proves the benchmark works")
    p.set_defaults(func=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m autograder`` and the ``autograder`` console script."""
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
