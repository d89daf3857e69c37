"""What every command of the command line shares: usage errors, the parser, and reading what the user names.

A :class:`UsageError` is a mistake of the user's: :func:`solutions.app.cli.main` prints it
as one line ``transformer: error: ...`` and exits with status 2 (no traceback).
:func:`load_checkpoint_for_user` and :func:`read_corpus` read a checkpoint and a CORPUS
argument and turn what can go wrong into such a line naming the option.
"""
import argparse
import os
import sys
import zipfile

from .checkpoint import CheckpointError, load_checkpoint
from .corpus import file_sha256, read_parallel

__all__ = ["UsageError", "Parser", "warn", "positive", "load_checkpoint_for_user", "corpus_files", "read_corpus",
           "data_dir_files"]


class UsageError(Exception):
    """A user error: reported as one line, exit status 2."""


def warn(message):
    """Print ``transformer: warning: <message>`` to stderr."""
    print(f"transformer: warning: {message}", file=sys.stderr)


class Parser(argparse.ArgumentParser):
    """An ``argparse`` parser whose errors are :class:`UsageError` s (one line, exit status 2)."""

    def error(self, message):
        raise UsageError(f"{message} (see '{self.prog} --help')")


def positive(name, value):
    """Refuse an integer option below 1 (``None`` = not given)."""
    if value is not None and value < 1:
        raise UsageError(f"{name} must be a positive integer, got {value}")


def load_checkpoint_for_user(option, path, missing="no such file"):
    """The checkpoint's state, or a :class:`UsageError` naming the file (never a torch traceback)."""
    if not os.path.isfile(path):
        raise UsageError(f"{option}: {missing}: {path}")
    problem = (f"{option}: {path} is not a readable checkpoint of this package "
               "(expected a file written by 'transformer train')")
    if not zipfile.is_zipfile(path):  # torch.save writes a zip archive
        raise UsageError(problem)
    try:
        return load_checkpoint(path)
    except CheckpointError:
        raise UsageError(problem) from None


def corpus_files(option, spec):
    """The file(s) a CORPUS argument names: ``(path,)`` for TSV, ``(source, target)`` for a pair."""
    if os.path.isfile(spec):
        return (spec,)
    # SRC_FILE:TGT_FILE; try every colon, since a path may itself contain one.
    for index, char in enumerate(spec):
        if char == ":" and os.path.isfile(spec[:index]) and os.path.isfile(spec[index + 1:]):
            return spec[:index], spec[index + 1:]
    if ":" in spec:
        source, target = spec.split(":", 1)
        missing = source if not os.path.isfile(source) else target
        raise UsageError(f"{option}: no such file: {missing} (in {spec!r}; a CORPUS is PATH.tsv or "
                         "SRC_FILE:TGT_FILE)")
    raise UsageError(f"{option}: no such file: {spec} (a CORPUS is PATH.tsv or SRC_FILE:TGT_FILE)")


def read_corpus(option, spec, on_bad_line, skipped=None):
    """``(pairs, files)``: the pairs of a CORPUS and ``[{"path", "sha256"}]`` of its file(s).

    ``skipped``: a dict that records, under ``option``, how many bad lines were left out
    (``results.json`` reports them).
    """
    files = corpus_files(option, spec)
    try:
        pairs, bad_lines = read_parallel(*files, on_bad_line=on_bad_line)
    except ValueError as error:
        hint = " (--on-bad-line skip leaves such lines out)" if on_bad_line == "error" and any(
            str(error).startswith(f"{path}:") for path in files) and "no sentence pairs" not in str(error) else ""
        raise UsageError(f"{option}: {error}{hint}") from None
    if skipped is not None:
        skipped[option] = len(bad_lines)
    if bad_lines and os.environ.get("RANK", "0") == "0":
        shown = "; ".join(str(bad) for bad in bad_lines[:5])
        more = f"; and {len(bad_lines) - 5} more" if len(bad_lines) > 5 else ""
        warn(f"{option}: skipped {len(bad_lines)} bad line{'s' if len(bad_lines) > 1 else ''} "
             f"(kept {len(pairs)} pairs): {shown}{more}")
    return pairs, [{"path": os.path.abspath(path), "sha256": file_sha256(path)} for path in files]


def data_dir_files(folder):
    """``{"train", "valid", "test"}`` → the TSV file of each role in ``folder`` (see ``--data-dir``)."""
    if not os.path.isdir(folder):
        raise UsageError(f"--data-dir: no such folder: {folder}")
    names = sorted(n for n in os.listdir(folder) if n.endswith(".tsv") and os.path.isfile(os.path.join(folder, n)))
    roles = {"train": ("train",), "valid": ("val", "dev"), "test": ("test",)}
    found = {}
    for role, prefixes in roles.items():
        matching = [n for n in names if n.lower().startswith(prefixes)]
        if len(matching) != 1:
            what = "no" if not matching else f"{len(matching)} ({', '.join(matching)})"
            raise UsageError(f"--data-dir: {folder} has {what} .tsv file(s) whose name starts with "
                             f"{' or '.join(repr(p) for p in prefixes)}; expected exactly one {role} file")
        found[role] = os.path.join(folder, matching[0])
    return found
