"""Checks of chapter 2, tokens and embeddings: ``build_vocab``, ``encode``,
``learn_bpe``, ``bpe_tokenize``, ``one_hot``, ``cosine_similarity`` and
``TokenEmbedding``.

The contract is ``shared/EXERCISES.md`` section 2; the references are in
``solutions/tokens.py`` and ``solutions/embeddings.py`` ("Attention Is All You
Need", sections 3.4 and 5.1; Sennrich et al., 2016, for byte-pair encoding).

Parts (what each exercise teaches; the points are split over them):

* ``build_vocab``: "specials first, in the given order" 1 · "descending count, ties
  alphabetical" 2 · "min_freq threshold" 1;
* ``encode``: "known tokens → their ids" 1 · "unknown tokens → vocab['<unk>']" 1 ·
  "any whitespace, empty sentence" 1;
* ``learn_bpe``: "most frequent pair, weighted by word counts" 2 · "ties: the smallest
  pair" 1 · "stop when no pair is left" 1;
* ``bpe_tokenize``: "merges in learned order" 2 · "every occurrence, left to right" 1 ·
  "whole symbols, not substrings" 1;
* ``one_hot``: "shape (len(ids), vocab_size), floats" 1 · "a 1.0 at column ids[i]" 2;
* ``cosine_similarity``: "a·b / (|a| |b|)" 2 · "a zero vector raises ValueError" 1;
* ``TokenEmbedding``: "an nn.Embedding named embedding" 1 · "embedding(ids) · √d_model" 2.

The one error the contract names here is a zero vector in ``cosine_similarity``; an
out-of-range id in ``one_hot`` is advice. No exercise calls another (``encode`` takes
a vocabulary, ``bpe_tokenize`` takes merges), so none declares ``uses``.

The diagnoses rerun small trusted implementations with one switch flipped (ties in
reverse order, specials last, ``count > min_freq``, no ``</w>``, unweighted pair
counts, ...) on the case's own inputs and name the variant the result equals.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from collections import Counter

import numpy as np

from .base import ADVICE, Case, CheckFailure, Exercise, Tensor, load_state_hint, register
from .base import accept_own_state, compare as _compare, redacting
from .base import as_array as _array, close

CHAPTER = "02_tokens_and_embeddings"

_close = functools.partial(close, rtol=1e-5, atol=1e-6)
SPECIALS = ("<pad>", "<sos>", "<eos>", "<unk>")

# Small word pools; the hidden corpora draw from them with random counts.
_WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "to", "big", "red", "hat", "and", "it", "is",
          "was", "low", "lower", "newest", "widest", "new", "wide", "lowest"]
_LETTERS = "abcde"


# --------------------------------------------------------------------------- helpers


def _random_corpus(rng, n_sentences, pool=_WORDS, max_len=7):
    """Sentences of words drawn with skewed frequencies (so counts differ and tie)."""
    words = list(rng.choice(pool, size=min(len(pool), int(rng.integers(4, 12))), replace=False))
    p = rng.dirichlet(np.ones(len(words)) * 0.7)
    return [" ".join(rng.choice(words, size=int(rng.integers(1, max_len + 1)), p=p)) for _ in range(n_sentences)]


# --------------------------------------------------------------------------- build_vocab


def _distinct_counts(rng, n, least):
    """``n`` words of ``_WORDS`` with distinct counts ``>= least`` (no ties)."""
    words = rng.choice(_WORDS, size=n, replace=False)
    counts = rng.choice(np.arange(least, least + 2 * n), size=n, replace=False)
    return {str(w): int(c) for w, c in zip(words, counts)}


def _counted_corpus(rng, counts, *, rare=0, below=1, extra=()):
    """Sentences holding each word of ``counts`` exactly that often, plus ``rare``
    other words seen fewer than ``below`` times each and the ``extra`` tokens once,
    in random order."""
    pool = [w for w in _WORDS if w not in counts]
    tokens = [w for w, c in counts.items() for _ in range(c)] + list(extra)
    for w in rng.choice(pool, size=min(rare, len(pool)), replace=False):
        tokens += [str(w)] * int(rng.integers(1, below)) if below > 1 else []
    tokens = [str(t) for t in rng.permutation(tokens)]
    cuts = sorted(int(c) for c in rng.integers(0, len(tokens) + 1, size=int(rng.integers(0, 4))))
    return [" ".join(tokens[i:j]) for i, j in zip([0] + cuts, cuts + [len(tokens)])]


def _vocab(sentences, min_freq=1, specials=SPECIALS, *, tie="alpha", specials_last=False, strict=False,
           ascending=False, split=None):
    """A trusted vocabulary with switches for the plausible mistakes."""
    counts = Counter(tok for s in sentences for tok in (s.split(split) if split else s.split()))
    order = list(counts.items())  # first-seen order
    if tie == "alpha":
        order.sort(key=lambda kv: kv[0])
    elif tie == "reverse":
        order.sort(key=lambda kv: kv[0], reverse=True)
    order.sort(key=lambda kv: kv[1], reverse=not ascending)  # stable: ties keep the order above
    kept = [t for t, c in order if (c > min_freq if strict else c >= min_freq)]
    vocab = {}
    for token in ([] if specials_last else list(specials)) + kept + (list(specials) if specials_last else []):
        if token not in vocab:
            vocab[token] = len(vocab)
    return vocab


@register
class BuildVocab(Exercise):
    """``build_vocab(sentences, min_freq=1, specials=...) -> dict[str, int]``."""

    name = "build_vocab"
    chapter = CHAPTER
    kind = "function"
    what = "specials first in the given order, descending counts with alphabetical ties, the min_freq threshold"

    parts = {"specials first, in the given order": 1, "descending count, ties alphabetical": 2,
             "min_freq threshold": 1}

    def cases(self, rng, hidden):
        specials, order, threshold = self.parts
        # The order and min_freq cases pass specials=(), so that a mistake with the
        # specials costs the specials part only; the specials cases have no ties.
        cases = [
            Case(args=(["x y y"],), kwargs={"specials": ("<unk>", "<pad>")}, part=specials,
                 label="custom specials ('<unk>', '<pad>') get ids 0 and 1 in that order"),
            Case(args=(["go <unk> go"],), part=specials,
                 label="the token '<unk>' in the text is not added twice: ids stay 0 .. len-1"),
            Case(args=(["the cat sat on the mat", "the dog sat"],), kwargs={"specials": ()}, part=order,
                 label="no specials: 'the' x3, 'sat' x2, then ties in alphabetical order"),
            Case(args=(["  the\tcat  sat\n", "cat   the the"],), kwargs={"specials": ()}, part=order,
                 label="no specials: tabs, newlines and runs of spaces are whitespace too (str.split())"),
            Case(args=(["a b a c a b d"],), kwargs={"min_freq": 2, "specials": ()}, part=threshold,
                 label="min_freq=2, no specials: 'a' x3 and 'b' x2 stay (count == 2 included), 'c' and 'd' go"),
        ]
        if not hidden:
            return cases
        chosen = tuple(str(t) for t in rng.permutation(["<pad>", "<sos>", "<eos>", "<unk>", "<mask>"]))
        chosen = chosen[: int(rng.integers(1, 6))]
        cases.append(Case(args=(_counted_corpus(rng, _distinct_counts(rng, 5, 1)),), kwargs={"specials": chosen},
                          part=specials, label=f"random corpus with specials {chosen}"))
        cases.append(Case(args=([],), kwargs={"specials": chosen}, part=specials,
                          label=f"no sentences: only the specials {chosen}"))
        cases.append(Case(args=(_counted_corpus(rng, _distinct_counts(rng, 4, 1), extra=["<sos>", "<eos>"]),),
                          part=specials, label="a corpus holding '<sos>' and '<eos>': each keeps its special id"))
        for _ in range(3):
            corpus = _random_corpus(rng, int(rng.integers(2, 9)))
            cases.append(Case(args=(corpus,), kwargs={"specials": ()}, part=order,
                              label=f"no specials, random corpus of {len(corpus)} sentences"))
        for _ in range(3):
            min_freq = int(rng.integers(2, 5))
            counts = _distinct_counts(rng, int(rng.integers(1, 5)), min_freq)
            corpus = _counted_corpus(rng, counts, rare=int(rng.integers(1, 4)), below=min_freq)
            cases.append(Case(args=(corpus,), kwargs={"min_freq": min_freq, "specials": ()}, part=threshold,
                              label=f"min_freq={min_freq}, no specials, {len(corpus)} sentences"))
        return cases

    def diagnose(self, case, got, want):
        if not isinstance(got.value, dict):
            return "return a dict mapping each token (str) to its id (int)."
        sentences = case.args[0]
        min_freq = case.kwargs.get("min_freq", 1)
        specials = case.kwargs.get("specials", SPECIALS)
        if sorted(got.value.values()) != list(range(len(got.value))):
            return ("the ids must be exactly 0 .. len(vocab) - 1: give each new token the id len(vocab) "
                    "and skip a token that is already in the vocabulary (e.g. a special seen in the text).")
        if min_freq > 1 and got.value == _vocab(sentences, 1, specials):
            here = "" if redacting() else f" (here {min_freq})"
            return f"min_freq was ignored: keep only the tokens seen at least min_freq{here} times."
        variants = [
            ("ties are not in alphabetical order: sort by (-count, token).", dict(tie="first_seen")),
            ("ties are in reverse alphabetical order: sort by (-count, token), not reverse=True on both.",
             dict(tie="reverse")),
            ("the specials must come first, with ids 0, 1, ... in the given order.", dict(specials_last=True)),
            ("min_freq is off by one: keep tokens with count >= min_freq.", dict(strict=True)),
            ("most frequent first: sort by descending count.", dict(ascending=True)),
            ("split on any whitespace with sentence.split() (no argument), not split(' ').", dict(split=" ")),
        ]
        for hint, flags in variants:
            try:
                value = _vocab(sentences, min_freq, specials, **flags)
            except Exception:  # noqa: BLE001
                continue
            if value != want.value and value == got.value:
                return hint
        if specials and any(got.value.get(s) != i for i, s in enumerate(specials)):
            return "the specials must come first, with ids 0, 1, ... in the given order."
        return None


# --------------------------------------------------------------------------- encode


@register
class Encode(Exercise):
    """``encode(sentence, vocab) -> list[int]``."""

    name = "encode"
    chapter = CHAPTER
    kind = "function"
    what = "ids of whitespace tokens, unknown tokens → vocab['<unk>'] (whatever its id), any whitespace, ''"

    parts = {"known tokens → their ids": 1, "unknown tokens → vocab['<unk>']": 1,
             "any whitespace, empty sentence": 1}

    def cases(self, rng, hidden):
        known, unknown, spaces = self.parts
        vocab = _vocab(["the cat sat on the mat", "the dog ran"])
        unk_first = _vocab(["a b c b"], specials=("<unk>", "<eos>", "<pad>", "<sos>"))
        cases = [
            Case(args=("the cat sat", vocab), label="three known tokens", part=known),
            Case(args=("the zebra sat on a mat", vocab), label="unknown tokens ('zebra', 'a') become <unk>",
                 part=unknown),
            Case(args=("c x b y", unk_first), part=unknown,
                 label="a vocabulary whose '<unk>' has id 0: look the id up, do not assume 3"),
            Case(args=("", vocab), label="an empty sentence gives []", part=spaces),
            Case(args=(" the\tcat\n  sat ", vocab), label="tabs, newlines and extra spaces", part=spaces),
        ]
        if not hidden:
            return cases
        for _ in range(2):
            corpus = _random_corpus(rng, 6)
            v = _vocab(corpus)
            words = sorted({w for s in corpus for w in s.split()})
            sentence = " ".join(rng.choice(words, size=int(rng.integers(1, 10))))
            cases.append(Case(args=(sentence, v), label=f"known tokens {sentence!r}", part=known))
        for _ in range(2):
            corpus = _random_corpus(rng, 6)
            specials = tuple(str(t) for t in rng.permutation(list(SPECIALS)))
            v = _vocab(corpus, int(rng.integers(1, 3)), specials)
            sentence = _random_corpus(rng, 1, max_len=10)[0] + " zebra"
            cases.append(Case(args=(sentence, v), part=unknown,
                              label=f"{sentence!r}, '<unk>' has id {v['<unk>']}"))
        corpus = _random_corpus(rng, 4)
        v = _vocab(corpus)
        gaps = ["  ", "\t", "\n", " \t "]
        words = [w for s in corpus for w in s.split()][:8]
        sentence = "".join(str(rng.choice(gaps)) + w for w in words) + "\n"
        cases.append(Case(args=(sentence, v), label=f"random whitespace {sentence!r}", part=spaces))
        cases.append(Case(args=(" \t\n", v), label="only whitespace gives []", part=spaces))
        return cases

    def raised_hint(self, case, got):
        raised = got.raised
        if raised is None or case.expect_error:
            return None
        if raised["type"] == "KeyError":
            return "a token outside the vocabulary must become vocab['<unk>']: use vocab.get(token, vocab['<unk>'])."
        return None

    def diagnose(self, case, got, want):
        sentence, vocab = case.args
        tokens = sentence.split()
        if not isinstance(got.value, list):
            return "return a list of ints."
        if got.value == [vocab[t] for t in tokens if t in vocab]:
            return "unknown tokens were dropped: each one must become vocab['<unk>'], one id per token."
        unk = vocab.get("<unk>")
        for wrong in (3, 0, -1, len(vocab)):
            if wrong != unk and got.value == [vocab.get(t, wrong) for t in tokens]:
                if redacting():  # the ids are the hidden vocabulary's
                    return "unknown tokens got another id than vocab['<unk>']: use vocab['<unk>']."
                return f"unknown tokens became {wrong}: use vocab['<unk>'] (here {unk})."
        if got.value == [vocab.get(t, unk) for t in sentence.split(" ")]:
            return "split with sentence.split() (any whitespace), not split(' ')."
        return None


# --------------------------------------------------------------------------- learn_bpe


def _merge(symbols, pair):
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            out.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return tuple(out)


def _bpe(corpus, num_merges, *, end="own", weighted=True, tie="smallest"):
    """Trusted BPE learning with switches for the plausible mistakes.

    ``end``: "own" (``</w>`` a symbol of its own), "none" or "glued" (``w</w>``);
    ``tie``: "smallest", "largest" or "first" (first pair seen).
    """
    counts = Counter(w for s in corpus for w in s.split())
    words = {}
    for w, c in counts.items():
        if end == "own":
            symbols = tuple(w) + ("</w>",)
        elif end == "glued":
            symbols = tuple(w[:-1]) + (w[-1] + "</w>",)
        else:
            symbols = tuple(w)
        words[symbols] = words.get(symbols, 0) + (c if weighted else 1)
    merges = []
    for _ in range(num_merges):
        pairs = Counter()
        for symbols, c in words.items():
            for p in zip(symbols, symbols[1:]):
                pairs[p] += c
        if not pairs:
            break
        if tie == "smallest":
            best = min(pairs, key=lambda p: (-pairs[p], p))
        elif tie == "largest":
            best = max(pairs, key=lambda p: (pairs[p], p))
        else:
            best = max(pairs, key=lambda p: pairs[p])  # first seen among the maxima
        merges.append(best)
        words = {_merge(s, best): c for s, c in words.items()}
    return merges


_SENNRICH = ["low " * 5 + "lower " * 2 + "newest " * 6 + "widest " * 3]
# A corpus without ties whose first merge depends on weighting the pairs by word counts.
_WEIGHTED = ["x x ab x", "abc x abd"]
_ENOUGH = 10_000  # more merges than any corpus here can give


def _bpe_corpus(rng):
    """Random words over a small alphabet, so that pairs repeat and tie."""
    vocab = ["".join(rng.choice(list(_LETTERS), size=int(rng.integers(1, 6)))) for _ in range(int(rng.integers(3, 8)))]
    return [" ".join(rng.choice(vocab, size=int(rng.integers(1, 6)))) for _ in range(int(rng.integers(2, 6)))]


def _bpe_letters(rng, extra=()):
    """Two sentences of single letters with distinct counts (each gives one pair,
    ``(letter, '</w>')``, so no two pairs tie) and the ``extra`` words."""
    letters = rng.choice(list(_LETTERS), size=int(rng.integers(2, 5)), replace=False)
    counts = rng.choice(np.arange(1, 12), size=len(letters), replace=False)
    words = [str(c) for c, k in zip(letters, counts) for _ in range(k)] + list(extra)
    words = [str(w) for w in rng.permutation(words)]
    return [" ".join(words[i::2]) for i in range(2)]


# The single mistakes of the other parts, as :func:`_bpe` switches: a case of one part
# is kept only where the other parts' mistakes give the right merges.
_COUNTING = (dict(weighted=False),)
_TIE_BREAKING = (dict(tie="largest"), dict(tie="first"))


def _bpe_agrees(corpus, num_merges, mistakes) -> bool:
    """Whether each mistake of ``mistakes`` learns the same merges as the rule on
    ``corpus``: a case on which those mistakes cannot cost anything."""
    right = _bpe(corpus, num_merges)
    return all(_bpe(corpus, num_merges, **flags) == right for flags in mistakes)


def _bpe_tied(rng):
    """A random corpus and a number of merges (never more than there are) on which
    counting each distinct word once learns the same merges as weighting by word
    counts: a case about breaking ties alone."""
    while True:
        corpus = _bpe_corpus(rng)
        n = min(int(rng.integers(2, 25)), len(_bpe(corpus, _ENOUGH)))
        if _bpe_agrees(corpus, n, _COUNTING):
            return corpus, n


def _bpe_run_out(rng):
    """A random corpus of single letters whose merges are the same however the
    pairs are counted and ties broken: a case about stopping early alone."""
    while True:
        corpus = _bpe_letters(rng)
        if _bpe_agrees(corpus, _ENOUGH, _COUNTING + _TIE_BREAKING):
            return corpus, len(_bpe(corpus, _ENOUGH)) + int(rng.integers(1, 10))


def _bpe_untied(rng):
    """A random corpus and a number of merges (at least 1) that never meet a tie
    or run out of pairs: the three tie-breaking rules agree on every merge."""
    while True:
        # Letters with distinct counts, and one random sentence of longer words.
        corpus = _bpe_letters(rng, _bpe_corpus(rng)[:1])
        merges = [_bpe(corpus, _ENOUGH, tie=tie) for tie in ("smallest", "largest", "first")]
        agree = next((i for i, m in enumerate(zip(*merges)) if len(set(m)) > 1), min(map(len, merges)))
        if agree >= 1:
            return corpus, int(rng.integers(1, agree + 1))


@register
class LearnBpe(Exercise):
    """``learn_bpe(corpus, num_merges) -> list[tuple[str, str]]``."""

    name = "learn_bpe"
    chapter = CHAPTER
    kind = "function"
    what = "merges in order: '</w>' its own symbol, pairs weighted by word counts, smallest pair on ties, early stop"

    parts = {"most frequent pair, weighted by word counts": 2, "ties: the smallest pair": 1,
             "stop when no pair is left": 1}

    def cases(self, rng, hidden):
        frequent, ties, stop = self.parts
        # Each part's cases hold the other parts' rules fixed, so that a mistake in
        # one rule costs its own part only: the first part's cases have no tie and
        # never run out of pairs; the tie cases give the same merges whether pairs
        # are weighted by word counts or each distinct word counted once; the
        # stopping cases the same merges under every counting and tie rule.
        cases = [
            Case(args=(_WEIGHTED, 2), part=frequent,
                 label="'x' x4, 'ab', 'abc', 'abd': (x, </w>) is seen 4 times, (a, b) 3 times"),
            Case(args=(["low lower newest widest"], 10), part=ties,
                 label="Sennrich's words once each: low, lower, newest, widest; 10 merges, "
                       "six pairs tie at 2, (e, s) the smallest"),
            Case(args=(["a b a"], 5), label="'a' x2 and 'b': 2 merges, then no pair is left (stop early)", part=stop),
        ]
        if not hidden:
            return cases
        for _ in range(3):
            corpus, n = _bpe_untied(rng)
            cases.append(Case(args=(corpus, n), label=f"random corpus {corpus}, {n} merges", part=frequent))
        cases.append(Case(args=(_SENNRICH, 0), label="num_merges=0 gives []", part=frequent))
        cases.append(Case(args=(["ba ab"], 1), part=ties,
                          label="a tie: ('a', 'b'), ('b', 'a'), ('a', '</w>') and ('b', '</w>') seen once each"))
        cases.append(Case(args=(["aaaa"], 3), label="'aaaa': pairs overlap, merge left to right", part=ties))
        for _ in range(2):
            corpus, n = _bpe_tied(rng)
            cases.append(Case(args=(corpus, n), label=f"random corpus {corpus}, {n} merges", part=ties))
        cases.append(Case(args=(["a"], 5), label="one word 'a': 1 merge, then no pair is left", part=stop))
        corpus, n = _bpe_run_out(rng)
        cases.append(Case(args=(corpus, n), label=f"random corpus {corpus}, {n} merges: more than there are pairs",
                          part=stop))
        return cases

    def raised_hint(self, case, got):
        raised = got.raised
        if raised is None or case.expect_error:
            return None
        if raised["type"] == "ValueError" and ("empty" in raised["message"] or "max" in raised["message"]):
            return "stop early when no pair is left (every word is a single symbol): do not take max() of nothing."
        return None

    def diagnose(self, case, got, want):
        if not isinstance(got.value, list):
            return "return a list of (left, right) tuples."
        if got.value and not all(isinstance(m, tuple) for m in got.value):
            return "each merge must be a tuple (left, right), not a list."
        corpus, n = case.args
        variants = [
            ("the end marker is missing: every word ends with the symbol '</w>' ('low' → l o w </w>).",
             dict(end="none")),
            ("'</w>' must be a symbol of its own ('low' → l o w </w>), not glued to the last letter.",
             dict(end="glued")),
            ("count pairs weighted by how often each word occurs in the corpus.", dict(weighted=False)),
            ("ties go to the lexicographically smallest pair: min(pairs, key=lambda p: (-count[p], p)).",
             dict(tie="largest")),
            ("ties go to the lexicographically smallest pair, not the first one seen: "
             "min(pairs, key=lambda p: (-count[p], p)).", dict(tie="first")),
        ]
        for hint, flags in variants:
            value = _bpe(corpus, n, **flags)
            if value != want.value and value == got.value:
                return hint
        if len(got.value) > len(want.value):
            return "stop early when no pair is left: there are fewer possible merges than num_merges here."
        return None


# --------------------------------------------------------------------------- bpe_tokenize


def _tokenize(word, merges, *, mode="ordered"):
    """Trusted BPE tokenisation with switches for the plausible mistakes."""
    if mode == "no_end":
        symbols = list(word)
    else:
        symbols = list(word) + ["</w>"]
    if mode == "replace":
        text = " ".join(symbols)
        for a, b in merges:
            text = text.replace(f"{a} {b}", a + b)
        return text.split(" ")
    ordered = list(reversed(merges)) if mode == "reversed" else merges
    for pair in ordered:
        if mode == "once":
            for i in range(len(symbols) - 1):
                if (symbols[i], symbols[i + 1]) == pair:
                    symbols[i: i + 2] = [pair[0] + pair[1]]
                    break
        else:
            symbols = list(_merge(symbols, tuple(pair)))
    return symbols


def _plain_tokenize_case(rng):
    """A random word and learned merges on which tokenising by string replacement
    or merging only the first occurrence gives the right answer: a case about the
    order of the merges alone."""
    while True:
        m = _bpe(_bpe_corpus(rng), int(rng.integers(1, 20)))
        word = "".join(rng.choice(list(_LETTERS), size=int(rng.integers(1, 8))))
        right = _tokenize(word, m)
        if all(_tokenize(word, m, mode=mode) == right for mode in ("once", "replace")):
            return word, m


@register
class BpeTokenize(Exercise):
    """``bpe_tokenize(word, merges) -> list[str]``."""

    name = "bpe_tokenize"
    chapter = CHAPTER
    kind = "function"
    what = "merges applied in learned order, to every occurrence left to right, on whole symbols; '</w>' kept"

    parts = {"merges in learned order": 2, "every occurrence, left to right": 1, "whole symbols, not substrings": 1}

    def cases(self, rng, hidden):
        order, every, whole = self.parts
        merges = _bpe(_SENNRICH, 10)
        cases = [
            Case(args=("lowest", merges), label="'lowest' with Sennrich's 10 merges", part=order),
            Case(args=("abc", [("b", "c"), ("a", "b"), ("a", "bc")]), part=order,
                 label="merges (b, c), (a, b), (a, bc): the order decides"),
            Case(args=("aaaa", [("a", "a")]), label="'aaaa' with the one merge (a, a): two 'aa'", part=every),
            Case(args=("cab", [("c", "a"), ("a", "b")]), part=whole,
                 label="'cab' with (c, a), (a, b): after the first merge 'a' is inside 'ca'"),
        ]
        if not hidden:
            return cases
        cases.append(Case(args=("newer", merges), label="'newer' (not in the corpus)", part=order))
        cases.append(Case(args=("xyz", [("a", "b")]), label="no merge applies: characters plus '</w>'", part=order))
        cases.append(Case(args=("ab", [("b", "</w>"), ("a", "b</w>")]), label="merges that involve '</w>'",
                          part=order))
        # Random words whose merges meet no repeated pair and no symbol boundary:
        # they test the order only.
        for _ in range(4):
            word, m = _plain_tokenize_case(rng)
            cases.append(Case(args=(word, m), label=f"random word {word!r} with {len(m)} learned merges", part=order))
        cases.append(Case(args=("abab", [("a", "b")]), label="'abab' with (a, b): both occurrences", part=every))
        cases.append(Case(args=("aaa", [("a", "a")]), label="'aaa' with (a, a): left to right, aa a", part=every))
        letter = str(rng.choice(list(_LETTERS)))
        word = letter * int(rng.integers(3, 8))
        cases.append(Case(args=(word, [(letter, letter)]), label=f"{word!r} with ({letter}, {letter})", part=every))
        cases.append(Case(args=("abcab", [("a", "b"), ("b", "ca"), ("c", "ab")]), part=every,
                          label="'abcab': (a, b) occurs twice, and (c, ab) builds on the second"))
        cases.append(Case(args=("abc", [("b", "c"), ("a", "b")]), part=whole,
                          label="'abc' with (b, c), (a, b): 'b' is inside 'bc' by then"))
        return cases

    def tolerated(self, case, want):
        """The cases of "every occurrence" and "whole symbols" accept the merges applied in
        reverse order: the order is the rule of the first part, which states it, and these
        cases judge how each merge is applied."""
        if self.part_of(case) == list(self.parts)[0] or case.expect_error:
            return []
        word, merges = case.args
        reversed_order = _tokenize(word, merges, mode="reversed")
        return [dataclasses.replace(want, value=reversed_order)] if reversed_order != want.value else []

    def diagnose(self, case, got, want):
        if not isinstance(got.value, list):
            return "return a list of strings (the subword symbols)."
        word, merges = case.args
        variants = [
            ("the end marker is missing: start from list(word) + ['</w>'].", "no_end"),
            ("apply the merges in the order they were learned (merges[0] first).", "reversed"),
            ("each merge must be applied to every occurrence in the word, left to right, not only the first.",
             "once"),
            ("string replacement merges across symbol boundaries: work on the list of symbols and merge a "
             "pair only where two adjacent symbols equal (left, right).", "replace"),
        ]
        for hint, mode in variants:
            value = _tokenize(word, merges, mode=mode)
            if value != want.value and value == got.value:
                return hint
        return None


# --------------------------------------------------------------------------- one_hot


@register
class OneHot(Exercise):
    """``one_hot(ids, vocab_size) -> (len(ids), vocab_size)`` floats."""

    name = "one_hot"
    chapter = CHAPTER
    kind = "function"
    what = "(len(ids), vocab_size) float rows with one 1.0 at column ids[i], repeated ids, ids as an array, no ids"
    parts = {"shape (len(ids), vocab_size), floats": 1, "a 1.0 at column ids[i]": 2}

    def cases(self, rng, hidden):
        shape, ones = self.parts
        cases = [
            Case(args=([2, 0, 1], 5), label="ids [2, 0, 1], vocab_size 5: shape (3, 5)", compare="structure",
                 part=shape),
            Case(args=([], 3), label="no ids: shape (0, 3)", compare="structure", part=shape),
            Case(args=([2, 0, 1], 4), label="ids [2, 0, 1], vocab_size 4", compare="values", part=ones),
            Case(args=([3, 3], 5), label="a repeated id", compare="values", part=ones),
            Case(args=([1, 5], 5), label="id 5 with vocab_size 5 is out of range", part=ADVICE,
                 expect_error=(ValueError, IndexError)),
        ]
        if not hidden:
            return cases
        for _ in range(3):
            v = int(rng.integers(1, 30))
            ids = [int(i) for i in rng.integers(0, v, size=int(rng.integers(1, 12)))]
            cases.append(Case(args=(ids, v), label=f"random {len(ids)} ids, vocab_size {v}: shape",
                              compare="structure", part=shape))
            cases.append(Case(args=(ids, v), label=f"random {len(ids)} ids, vocab_size {v}", compare="values",
                              part=ones))
        cases.append(Case(args=(np.array([4, 0, 2]), 6), label="ids as a numpy array", compare="values", part=ones))
        return cases

    def diagnose(self, case, got, want):
        g = _array(got.value)
        if g is None:
            return "return a numpy array."
        w = _array(want.value)
        if np.issubdtype(g.dtype, np.integer) or g.dtype == bool:
            return "the vectors must be floats (dtype float64): np.zeros((n, vocab_size)) is float by default."
        if np.issubdtype(g.dtype, np.floating) and g.dtype.itemsize < w.dtype.itemsize:
            return (f"{g.dtype} is narrower than numpy's default float64, which the reference returns: "
                    "np.zeros((n, vocab_size)) or np.eye(vocab_size) without a dtype.")
        if g.shape == w.shape[::-1] and _close(g.T, w):
            return "rows and columns are swapped: one row per id, shape (len(ids), vocab_size)."
        if g.shape == w.shape and len(w) and any(_close(np.roll(g, shift, axis=1), w) for shift in (1, -1)):
            return "the ids are off by one: ids count from 0, so row i has its 1.0 in column ids[i]."
        return None


# --------------------------------------------------------------------------- cosine_similarity


@register
class CosineSimilarity(Exercise):
    """``cosine_similarity(a, b) -> float``; a zero vector raises ``ValueError``."""

    name = "cosine_similarity"
    chapter = CHAPTER
    kind = "function"
    what = "a·b / (|a| |b|) as a float for parallel, opposite, orthogonal, random vectors; a zero vector raises"

    parts = {"a·b / (|a| |b|)": 2, "a zero vector raises ValueError": 1}

    def cases(self, rng, hidden):
        cosine, zero = self.parts
        cases = [
            Case(args=(np.array([1.0, 2.0, 3.0]), np.array([2.0, 4.0, 6.0])), label="parallel vectors: 1.0",
                 part=cosine),
            Case(args=(np.array([1.0, 0.0]), np.array([0.0, 3.0])), label="orthogonal vectors: 0.0", part=cosine),
            Case(args=(np.array([1.0, 2.0, 2.0]), np.array([-2.0, 1.0, 0.5])), label="a general pair", part=cosine),
            Case(args=(np.zeros(3), np.array([1.0, 2.0, 3.0])), label="a zero vector: undefined, raise ValueError",
                 expect_error=(ValueError,), part=zero),
        ]
        if not hidden:
            return cases
        for _ in range(3):
            d = int(rng.integers(2, 50))
            scale = float(rng.choice([1e-3, 1.0, 1e3]))
            cases.append(Case(args=(rng.normal(size=d) * scale, rng.normal(size=d)), part=cosine,
                              label=f"random vectors of length {d}, one scaled by {scale}"))
        a = rng.normal(size=7)
        cases.append(Case(args=(a, -2.5 * a), label="opposite vectors: -1.0", part=cosine))
        cases.append(Case(args=([1, 2, 3], [3, 2, 1]), label="python lists of ints", part=cosine))
        cases.append(Case(args=(rng.normal(size=4), np.zeros(4)), label="b is the zero vector",
                          expect_error=(ValueError,), part=zero))
        return cases

    def raised_hint(self, case, got):
        if case.expect_error:
            return ("|a| |b| = 0 here: check np.linalg.norm(a) and np.linalg.norm(b) first and raise "
                    "ValueError('cosine similarity is undefined for a zero vector').")
        return None

    def diagnose(self, case, got, want):
        if not isinstance(got.value, (float, int)) or isinstance(got.value, bool):
            return "return a single float (float(...)), not an array."
        a, b = (np.asarray(x, dtype=np.float64) for x in case.args)
        na, nb = np.linalg.norm(a), np.linalg.norm(b)
        variants = [
            ("you returned the dot product: divide by both lengths, a·b / (|a| |b|).", a @ b),
            ("divide by the product of both lengths |a| |b|.", a @ b / na),
            ("divide by the product of both lengths |a| |b|.", a @ b / nb),
            ("you returned 1 - cosine (a distance); return the cosine itself.", 1 - a @ b / (na * nb)),
            ("divide by the lengths |a| |b| (square roots), not the squared lengths.", a @ b / (na**2 * nb**2)),
        ]
        for hint, value in variants:
            if np.isclose(got.value, value, rtol=1e-6) and not np.isclose(value, want.value, rtol=1e-6):
                return hint
        return None


# --------------------------------------------------------------------------- TokenEmbedding


def _embedding_case(rng, vocab_size, d_model, ids_shape, label, *, compare="full", part=""):
    """A case of ``TokenEmbedding``: a structure case grades the module (its probes, the
    table's name); a value case grades what it computes, with the reference's table
    loaded into the module's one (vocab_size, d_model) parameter whatever its name."""
    weight = rng.normal(size=(vocab_size, d_model)).astype(np.float32)
    ids = rng.integers(0, vocab_size, size=ids_shape).astype(np.int64)
    structure = compare == "structure"
    return Case(init={"vocab_size": vocab_size, "d_model": d_model}, state={"embedding.weight": weight},
                args=(Tensor(ids),), label=label, rtol=1e-5, atol=1e-5, compare=compare, part=part,
                probes=("state_dict_keys", "type:embedding") if structure else (), state_by_shape=not structure)


@register
class TokenEmbeddingCheck(Exercise):
    """``TokenEmbedding(vocab_size, d_model)``: ``embedding(ids) * sqrt(d_model)``."""

    name = "TokenEmbedding"
    chapter = CHAPTER
    kind = "class"
    what = "self.embedding is an nn.Embedding, output = embedding(ids) · √d_model for (B, T) and 1-D ids"

    parts = {"an nn.Embedding named embedding": 1, "embedding(ids) · √d_model": 2}

    def cases(self, rng, hidden):
        module, scaled = self.parts
        cases = [
            _embedding_case(rng, 10, 4, (2, 3), "vocab 10, d_model 4, ids (2, 3): the module and the output shape",
                            compare="structure", part=module),
            _embedding_case(rng, 10, 4, (2, 3), "vocab 10, d_model 4, ids (2, 3)", part=scaled),
            _embedding_case(rng, 7, 16, (1, 5), "vocab 7, d_model 16, one sentence of 5 ids", part=scaled),
            _embedding_case(rng, 12, 9, (6,), "1-D ids (6,) → (6, d_model), odd d_model 9", part=scaled),
        ]
        if not hidden:
            return cases
        for _ in range(3):
            v, d = int(rng.integers(2, 40)), int(rng.integers(1, 33))
            shape = (int(rng.integers(1, 4)), int(rng.integers(1, 8)))
            cases.append(_embedding_case(rng, v, d, shape, f"random vocab {v}, d_model {d}, ids {shape}: the module",
                                         compare="structure", part=module))
            cases.append(_embedding_case(rng, v, d, shape, f"random vocab {v}, d_model {d}, ids {shape}",
                                         part=scaled))
        return cases

    def judge(self, case, got, want):
        """A structure case compares kinds and shapes only, but the probes (the
        state_dict keys, the type of ``self.embedding``) are this part's facts:
        they must be equal."""
        notes = super().judge(case, got, want)
        if case.compare == "structure":
            try:
                got = accept_own_state(case, got, want)  # a buffer of its own beside `embedding` is fine
                for probe in want.probes:
                    _compare(got.probes.get(probe), want.probes[probe], probe, case)
            except CheckFailure as exc:
                hint = self.diagnose(case, got, want)
                raise CheckFailure(f"{exc} ({case.label})" + (f"\n  Hint: {hint}" if hint else "")) from None
        return notes

    def raised_hint(self, case, got):
        return load_state_hint(case, got, (
            "the module must hold an nn.Embedding(vocab_size, d_model) named `embedding` (state_dict "
            "key 'embedding.weight', a weight of shape (vocab_size, d_model)); state of your own "
            "beside it, such as a buffer holding √d_model, is fine."))

    def diagnose(self, case, got, want):
        if got.probes.get("type:embedding") != want.probes.get("type:embedding"):
            return "self.embedding must be an nn.Embedding(vocab_size, d_model)."
        g = _array(got.value)
        if g is None:
            return "forward must return a tensor."
        d = case.init["d_model"]
        lookup = np.asarray(case.state["embedding.weight"])[_array(case.args[0])]
        variants = [
            ("the √d_model scale is missing: return self.embedding(ids) * math.sqrt(self.d_model).", lookup),
            ("scale by √d_model (math.sqrt(d_model)), not by d_model.", lookup * d),
            ("multiply by √d_model; you divided.", lookup / math.sqrt(d)),
        ]
        for hint, value in variants:
            if _close(g, value) and not _close(value, _array(want.value)):
                return hint
        return None
