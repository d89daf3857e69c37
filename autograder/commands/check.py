"""A student's and a maintainer's checks: ``check`` (one notebook's visible checks, as a
table) and ``selftest`` (the book's own notebooks through ``grade``).

Each command imports its modules inside its function, so that ``python -m autograder``
starts light (:mod:`autograder.cli`).
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from .runs import run_settings, sandbox_available

__all__ = ["cmd_check", "cmd_selftest", "selftest"]


# --------------------------------------------------------------------------- check


def cmd_check(args: argparse.Namespace) -> int:
    """``check NOTEBOOK``: one notebook's visible checks, graded as ``grade`` does (in the
    sandbox where one starts), as a table; a notebook of another chapter, or named for one,
    is said so first. Exit 0 every visible check passes; 1 one does not; 2 bad usage (no
    such file, not a chapter notebook)."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from ..text import check_report, wrong_chapter_notice
    from ..checks import exercises_of
    from ..grading import grade_submission
    from ..book import chapter_ids, source_notebook
    from ..student.notebook import chapter_of, misnamed, read_notebook

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
    sandbox = sandbox_available()
    if not sandbox:
        print("(no sandbox available: your code runs as a plain subprocess)", file=sys.stderr)
    found = grade_submission(source, path, chapter=chapter, settings=run_settings(args, sandbox), hidden=False,
                             seed=args.seed)
    print(f"{path.name}: chapter {chapter}, visible checks\n")
    named = misnamed(path, chapter, known)
    if found.wrong_chapter:  # checked as --chapter, it holds another chapter's cells
        print(wrong_chapter_notice(found.wrong_chapter, chapter) + "\n")
    elif not args.chapter and named:  # its name says one chapter, its cells another
        print(wrong_chapter_notice(chapter, named) + "\n")
    text, status = check_report([_check_row(s) for s in found.scores])
    print(text)
    return status


def _check_row(score) -> dict:
    """An :class:`~autograder.scores.ExerciseScore` as :func:`autograder.text.check_report` reads it:
    the reason, then the diagnosis of every missed part; the notes (advice included)."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from ..scores import parts_line

    missed = [f"{p.name}: {p.message}" for p in score.parts if p.score < p.points and p.message]
    message = "\n".join(([score.reason] if score.reason else []) + missed)
    return {**score.to_dict(), "message": message, "parts_line": parts_line(score.parts), "advice": []}


# --------------------------------------------------------------------------- selftest


def selftest(jobs: int = 1, timeout: float = 120.0, chapters: list[str] | None = None,
             sandbox: bool = True, keep: Path | None = None, book: Path | None = None) -> tuple[bool, str]:
    """Grade the source notebooks (must get full marks) and the released ones (must get
    zero) through the same pipeline as ``grade``; return ``(ok, report)``."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from ..batch import grade_class
    from ..scores import Status
    from ..run_settings import RunSettings
    from ..book import BOOK, chapter_ids, source_notebook
    from ..release import release

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
    """``selftest``: the source notebooks must get full marks and the released ones zero
    (:func:`selftest`). Exit 0 when they do; 1 otherwise."""
    # this command's modules, loaded when it runs: the CLI starts light (module docstring)
    from ..release import ReleaseError

    sandbox = not args.unsafe_no_sandbox and sandbox_available()
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
