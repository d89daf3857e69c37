"""``python -m autograder`` in the student package: ``check NOTEBOOK`` before you submit.

The package (``autograder release`` builds it for a class) holds the visible checks of
the released chapters as data, so this runs offline and without the reference answers:

    python -m autograder check "04_self_attention (1).ipynb"

It recognises the chapter by the notebook's own metadata (any file name), runs the
notebook's setup cell and your exercise cells in a fresh Python process, then the
visible check of every exercise, and prints a table. A notebook that would earn nothing
where it is handed in is named first, in the words of the instructor's ``check``, the
feedback page and Gradescope (:func:`autograder.text.wrong_chapter_notice`): one whose
file name is another chapter's, or one checked as ``--chapter`` that holds another
chapter's exercises (the package knows every chapter's exercise names, its table of
contents). Exit codes: 0 every visible check passes; 1 one does not; 2 bad usage (no
such file, not a chapter notebook of this package); 130 interrupted.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..checks.base import precomputed
from ..text import check_report, wrong_chapter_notice
from .notebook import chapter_of, holds_exercises, misnamed, read_notebook, visible_checks

__all__ = ["main", "build_parser", "released_chapters", "book_chapters"]


def released_chapters() -> dict[str, list[str]]:
    """Chapter id -> exercise names, for the chapters whose checks this package holds."""
    store = precomputed()
    return dict(getattr(store, "chapters", {}) or {})


def book_chapters() -> dict[str, list[str]]:
    """Chapter id -> exercise names, for every chapter of the book (the package's table of
    contents, :func:`autograder.student.expected.write_contents`)."""
    store = precomputed()
    return dict(getattr(store, "contents", {}) or {})


def cmd_check(args: argparse.Namespace) -> int:
    """``check NOTEBOOK [--chapter CH]`` (see the module docstring for what it prints and its
    exit statuses)."""
    path = Path(args.notebook)
    if not path.is_file():
        print(f"check: no such notebook: {path}", file=sys.stderr)
        return 2
    chapters = released_chapters()
    book = {**book_chapters(), **chapters}
    try:
        nb = read_notebook(path)
    except ValueError as exc:
        print(f"check: {exc}", file=sys.stderr)
        return 2
    held = chapter_of(nb, None, book)  # by its release stamp, else its exercise cells
    chapter = args.chapter or held or chapter_of(nb, path, book)  # last, by its file name
    named = misnamed(path, held, book)
    notice = ""
    if args.chapter and held and held != args.chapter and not holds_exercises(nb, book.get(args.chapter, [])):
        notice = wrong_chapter_notice(held, args.chapter)  # checked as --chapter, it holds another chapter's cells
    elif not args.chapter and named:  # its name says one chapter, its stamp or cells another
        notice = wrong_chapter_notice(held, named)
    if chapter not in chapters:
        if notice:
            print(notice)
        known = ", ".join(chapters) or "none"
        if args.chapter in book:
            print(f"check: this package checks {known} only, not {chapter}: install the package released with "
                  f"{chapter} to check {path.name} as {chapter}.", file=sys.stderr)
        elif chapter in book:
            print(f"check: {path.name} is a {chapter} notebook, and this package checks {known} only: install the "
                  f"package released with {chapter} to check it.", file=sys.stderr)
        else:
            print(f"check: {path.name} is not a notebook of the chapters this package checks ({known}): its "
                  "metadata names no such chapter and none of its exercise cells belongs to one. Check the notebook "
                  "your instructor released, or install the package released with its chapter.", file=sys.stderr)
        return 2
    try:
        rows = visible_checks(path, timeout=args.timeout, chapter=chapter)
    except (TimeoutError, RuntimeError) as exc:
        print(f"check: {exc}", file=sys.stderr)
        return 1
    print(f"{path.name}: chapter {chapter}, visible checks\n")
    if notice:
        print(notice + "\n")
    text, status = check_report(rows)
    print(text)
    return status


def build_parser() -> argparse.ArgumentParser:
    """The student package's parser: one command, ``check``."""
    parser = argparse.ArgumentParser(prog="autograder", description="Check your chapter notebook before you "
                                     "submit it (the student package of the Transformer book).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("check", help="run the visible checks of your notebook and print a summary")
    p.add_argument("notebook", help="your notebook, whatever its name, e.g. '04_self_attention (1).ipynb'")
    p.add_argument("--chapter", help="chapter id, only if the notebook's metadata was lost")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds for your cells and the checks (default 300)")
    p.set_defaults(func=cmd_check)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the student package's ``python -m autograder`` and ``autograder``."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
