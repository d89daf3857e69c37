"""Parallel corpora on disk: TSV files and line-aligned text pairs, their bad lines, fingerprints, splits.

:func:`read_parallel` reads one ``source<TAB>target`` file or two line-aligned plain-text
files (how most public corpora ship), either stopping at the first bad line (a line
without exactly one tab, a pair with an empty side, bytes that are not UTF-8) or
leaving the bad lines out and listing them (:class:`BadLine`). :func:`file_sha256`
fingerprints a corpus file (the run's ``data_identity``); :func:`split_pairs` cuts one
corpus into train / valid / test without a source sentence in two splits.

Paper: section 5.1 (sentence pairs).
"""
import hashlib
import os
import random
from dataclasses import dataclass

__all__ = ["read_tsv", "read_parallel", "ON_BAD_LINE", "BadLine", "file_sha256", "split_pairs"]


def read_tsv(path):
    """Read a tab-separated parallel corpus: one ``source<TAB>target`` pair per line.

    Blank lines and lines starting with ``#`` are skipped; surrounding whitespace
    of each side is stripped.

    Args:
        path: the file (UTF-8, with or without a byte-order mark).

    Returns:
        A list of ``(source, target)`` string pairs.

    Raises:
        FileNotFoundError: when ``path`` does not exist.
        ValueError: for a line without exactly one tab, with an empty side or with
            bytes that are not UTF-8, naming the file and the line number; or for a
            file with no pairs.

    Paper: section 5.1 (sentence pairs).
    """
    pairs, _ = read_parallel(path)
    return pairs


ON_BAD_LINE = ("error", "skip")


@dataclass(frozen=True)
class BadLine:
    """A line of a corpus file that :func:`read_parallel` could not use.

    Attributes:
        path: the file.
        line: the line number (from 1).
        problem: what is wrong, e.g. ``"the target sentence is empty"``.
    """

    path: str
    line: int
    problem: str

    def __str__(self):
        return f"{self.path}:{self.line}: {self.problem}"


def _numbered_lines(path):
    """``(line_number, text, problem)`` for each line of a UTF-8 file.

    ``text`` is the line without its end of line (``\\n`` or ``\\r\\n``) and without a
    leading byte-order mark; for a line that is not valid UTF-8 it is ``None`` and
    ``problem`` says which byte, where in the line, could not be decoded.
    """
    with open(path, "rb") as handle:
        for line_number, raw in enumerate(handle, start=1):
            if line_number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            raw = raw.rstrip(b"\n").rstrip(b"\r")
            try:
                yield line_number, raw.decode("utf-8"), None
            except UnicodeDecodeError as error:
                byte = raw[error.start]
                yield line_number, None, f"not UTF-8: byte 0x{byte:02x} at byte {error.start + 1} of the line"


def _tsv_pair(text):
    """``((source, target), None)`` for a good TSV line, ``(None, problem)`` otherwise."""
    fields = text.split("\t")
    if len(fields) != 2:
        hint = " (a tab inside a sentence?)" if len(fields) > 2 else ""
        return None, (f"expected 'source<TAB>target' (exactly one tab), found {len(fields) - 1} tabs{hint}")
    src, tgt = fields[0].strip(), fields[1].strip()
    if not src or not tgt:
        return None, f"the {'source' if not src else 'target'} sentence is empty"
    return (src, tgt), None


def _count_lines(path):
    with open(path, "rb") as handle:
        return sum(1 for _ in handle)


def read_parallel(source, target=None, on_bad_line="error"):
    """Read a parallel corpus: one TSV file, or two line-aligned plain-text files.

    - ``target=None``: ``source`` is a TSV file read like :func:`read_tsv`
      (``source<TAB>target`` per line; blank lines and ``#`` lines are skipped).
    - ``target`` given: ``source`` and ``target`` are plain-text files with one
      sentence per line, line ``i`` of one translating line ``i`` of the other
      (how most public corpora ship). Both must have the same number of lines; a
      line blank on both sides is skipped; ``#`` has no special meaning.

    A *bad line* is a TSV line without exactly one tab (e.g. a tab inside a
    sentence), a pair with an empty side, or a line that is not UTF-8.

    Args:
        source: the TSV file, or the source-language file of a plain-text pair.
        target: the target-language file of a plain-text pair; ``None`` for TSV.
        on_bad_line: ``"error"`` (default): raise at the first bad line;
            ``"skip"``: leave bad lines out and list them in the result.

    Returns:
        ``(pairs, bad_lines)``: a list of ``(source, target)`` strings (each side
        stripped) and a list of :class:`BadLine` (empty with ``"error"``).

    Raises:
        FileNotFoundError: a file does not exist.
        ValueError: a bad line with ``on_bad_line="error"`` (``"FILE:LINE: problem"``),
            two plain-text files with different line counts, no pair left, or an
            unknown ``on_bad_line``.

    Paper: section 5.1 (sentence pairs).
    """
    if on_bad_line not in ON_BAD_LINE:
        raise ValueError(f"on_bad_line must be one of {ON_BAD_LINE}, got {on_bad_line!r}")
    paths = [os.fspath(source)] + ([] if target is None else [os.fspath(target)])
    for path in paths:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"parallel corpus not found: {path}")
    pairs, bad_lines = [], []

    def bad(path, line_number, problem):
        if on_bad_line == "error":
            raise ValueError(f"{path}:{line_number}: {problem}")
        bad_lines.append(BadLine(path, line_number, problem))

    if target is None:
        path = paths[0]
        for line_number, text, problem in _numbered_lines(path):
            if problem is not None:
                bad(path, line_number, problem)
                continue
            if not text.strip() or text.lstrip().startswith("#"):
                continue
            pair, problem = _tsv_pair(text)
            if problem is not None:
                bad(path, line_number, problem)
            else:
                pairs.append(pair)
    else:
        src_path, tgt_path = paths
        src_count, tgt_count = _count_lines(src_path), _count_lines(tgt_path)
        if src_count != tgt_count:
            raise ValueError(f"{src_path} has {src_count} lines but {tgt_path} has {tgt_count}: the two files "
                             "of a plain-text pair must have one sentence per line, line by line")
        for (line_number, src, src_problem), (_, tgt, tgt_problem) in zip(
                _numbered_lines(src_path), _numbered_lines(tgt_path)):
            if src_problem is not None or tgt_problem is not None:
                bad(src_path if src_problem else tgt_path, line_number, src_problem or tgt_problem)
                continue
            src, tgt = src.strip(), tgt.strip()
            if not src and not tgt:
                continue
            if not src or not tgt:
                side = "source" if not src else "target"
                bad(src_path if not src else tgt_path, line_number, f"the {side} sentence is empty")
                continue
            pairs.append((src, tgt))
    if not pairs:
        raise ValueError(f"{' and '.join(paths)}: no sentence pairs found"
                         + (f" ({len(bad_lines)} bad lines skipped)" if bad_lines else ""))
    return pairs, bad_lines


def file_sha256(path, chunk_size=1 << 20):
    """The SHA-256 of a file's bytes as a hex string (the fingerprint of a corpus file)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(chunk_size), b""):
            digest.update(chunk)
    return digest.hexdigest()


def split_pairs(pairs, valid_fraction=0.05, test_fraction=0.05, seed=0):
    """Shuffle a corpus (seeded) and cut it into train / valid / test.

    Args:
        pairs: a list of ``(source, target)`` pairs (e.g. from :func:`read_tsv`).
        valid_fraction, test_fraction: shares of the corpus (each split gets at
            least one pair when the corpus has three or more).
        seed: seed of the shuffle.

    Returns:
        ``(train, valid, test)`` lists of pairs. A source sentence that occurs
        several times goes to one split only, so no test sentence is in train.
    """
    if not 0 <= valid_fraction < 1 or not 0 <= test_fraction < 1 or valid_fraction + test_fraction >= 1:
        raise ValueError("valid_fraction and test_fraction must be in [0, 1) and sum to less than 1")
    groups = {}
    for src, tgt in pairs:
        groups.setdefault(src, []).append((src, tgt))
    sources = sorted(groups)
    random.Random(seed).shuffle(sources)
    n = len(sources)
    n_test = max(1, round(n * test_fraction)) if n >= 3 and test_fraction > 0 else 0
    n_valid = max(1, round(n * valid_fraction)) if n >= 3 and valid_fraction > 0 else 0
    test = [p for s in sources[:n_test] for p in groups[s]]
    valid = [p for s in sources[n_test:n_test + n_valid] for p in groups[s]]
    train = [p for s in sources[n_test + n_valid:] for p in groups[s]]
    return train, valid, test
