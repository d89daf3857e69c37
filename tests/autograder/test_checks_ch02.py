"""Tests of the chapter 2 checks: plausible wrong answers are rejected with a hint
that names the mistake, valid answers in other styles earn full marks, half-right
answers earn the parts they get right (that the reference passes and hidden inputs are
fresh: test_checks_registry.py)."""
import functools
import itertools
import math
import re
from collections import Counter, defaultdict

import numpy as np
import pytest
import torch
from torch import nn

import check_helpers
from check_helpers import accepted, stub_says_not_implemented
import solutions
from autograder.checks.ch02_tokens_and_embeddings import _merge

# One intra-op thread (conftest's fixture; importing check_helpers does not activate its own):
# tiny tensors, and a second thread only spins against the other xdist worker.
pytestmark = pytest.mark.usefixtures("one_torch_thread")

NAMES = ["build_vocab", "encode", "learn_bpe", "bpe_tokenize", "one_hot", "cosine_similarity", "TokenEmbedding"]

rejected = functools.partial(check_helpers.rejected, seed=7)
partly = functools.partial(check_helpers.partly, seed=7)
SPECIALS = ("<pad>", "<sos>", "<eos>", "<unk>")


@pytest.mark.parametrize("name", [n for n in NAMES if n != "TokenEmbedding"])
def test_stub_says_not_implemented(name):
    stub_says_not_implemented(name)


# --------------------------------------------------------------------------- build_vocab


def make_vocab(order_key, specials_last=False, strict=False):
    def build_vocab(sentences, min_freq=1, specials=SPECIALS):
        counts = Counter(t for s in sentences for t in s.split())
        tokens = [t for t, c in sorted(counts.items(), key=order_key)
                  if (c > min_freq if strict else c >= min_freq)]
        vocab = {}
        for t in (tokens + list(specials)) if specials_last else (list(specials) + tokens):
            if t not in vocab:
                vocab[t] = len(vocab)
        return vocab

    return build_vocab


def test_build_vocab_with_unsorted_ties_is_rejected():
    rejected("build_vocab", make_vocab(lambda kv: -kv[1]), "alphabetical")


def test_build_vocab_with_specials_last_is_rejected():
    rejected("build_vocab", make_vocab(lambda kv: (-kv[1], kv[0]), specials_last=True), "specials must come first")


def test_build_vocab_with_min_freq_off_by_one_is_rejected():
    rejected("build_vocab", make_vocab(lambda kv: (-kv[1], kv[0]), strict=True), "min_freq is off by one")


def test_build_vocab_reassigning_a_special_is_rejected():
    def reassigning(sentences, min_freq=1, specials=SPECIALS):
        counts = Counter(t for s in sentences for t in s.split())
        vocab = {s: i for i, s in enumerate(specials)}
        ranked = [t for t, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if c >= min_freq]
        for i, t in enumerate(ranked):
            vocab[t] = len(specials) + i  # overwrites '<unk>' when it occurs in the text
        return vocab

    rejected("build_vocab", reassigning, "0 .. len(vocab) - 1")


def test_a_different_valid_build_vocab_passes():
    def with_most_common(sentences, min_freq=1, specials=SPECIALS):
        counts = Counter()
        for s in sentences:
            counts.update(s.split())
        vocab = dict(zip(specials, range(len(specials))))
        by_name = sorted(counts.most_common(), key=lambda kv: kv[0])
        for token, count in sorted(by_name, key=lambda kv: kv[1], reverse=True):
            if count >= min_freq:
                vocab.setdefault(token, len(vocab))
        return vocab

    accepted("build_vocab", with_most_common)


def test_build_vocab_with_a_sort_key_and_no_validation_earns_full_marks():
    def by_sort_key(sentences, min_freq=1, specials=SPECIALS):
        counts = defaultdict(int)
        for sentence in sentences:
            for token in sentence.split():
                counts[token] += 1
        kept = sorted((t for t in counts if counts[t] >= min_freq and t not in specials),
                      key=lambda t: (-counts[t], t))
        return {token: i for i, token in enumerate(itertools.chain(specials, kept))}

    report = accepted("build_vocab", by_sort_key)
    assert report.notes == [] and report.advice == []


def test_build_vocab_with_regex_tokens_and_a_counter_loop_earns_full_marks():
    def by_regex(sentences, min_freq=1, specials=SPECIALS):
        counts = Counter(re.findall(r"\S+", " ".join(sentences)))
        vocab = {}
        for token in list(specials) + sorted(counts, key=lambda t: (-counts[t], t)):
            if token not in vocab and (token in specials or counts[token] >= min_freq):
                vocab[token] = len(vocab)
        return vocab

    accepted("build_vocab", by_regex)


def test_build_vocab_with_specials_last_earns_the_order_and_min_freq_parts():
    partly("build_vocab", make_vocab(lambda kv: (-kv[1], kv[0]), specials_last=True),
           ["descending count, ties alphabetical", "min_freq threshold"], ["specials first, in the given order"],
           "specials must come first")


def test_build_vocab_ignoring_min_freq_earns_the_other_parts():
    def every_token(sentences, min_freq=1, specials=SPECIALS):
        return solutions.build_vocab(sentences, 1, specials)

    partly("build_vocab", every_token,
           ["specials first, in the given order", "descending count, ties alphabetical"], ["min_freq threshold"],
           "min_freq was ignored")


def test_build_vocab_with_reversed_ties_loses_the_order_part_only():
    partly("build_vocab", make_vocab(lambda kv: (-kv[1], [-ord(c) for c in kv[0]])),
           ["specials first, in the given order", "min_freq threshold"], ["descending count, ties alphabetical"],
           "reverse alphabetical")


# --------------------------------------------------------------------------- encode


def test_encode_dropping_unknown_tokens_is_rejected():
    rejected("encode", lambda s, v: [v[t] for t in s.split() if t in v], "dropped")


def test_encode_with_a_hard_coded_unk_id_is_rejected():
    rejected("encode", lambda s, v: [v.get(t, 3) for t in s.split()], "vocab['<unk>']")


def test_encode_without_unk_raises_key_error_and_is_rejected():
    rejected("encode", lambda s, v: [v[t] for t in s.split()], "KeyError", "<unk>")


def test_encode_splitting_on_single_spaces_is_rejected():
    rejected("encode", lambda s, v: [v.get(t, v["<unk>"]) for t in s.split(" ")], "split()")


def test_a_different_valid_encode_passes():
    def encode(sentence, vocab):
        unk = vocab["<unk>"]
        return list(map(lambda token: vocab[token] if token in vocab else unk, sentence.split()))

    accepted("encode", encode)


def test_encode_with_regex_tokens_earns_full_marks():
    accepted("encode", lambda sentence, vocab: [vocab.get(t, vocab["<unk>"]) for t in re.findall(r"\S+", sentence)])


def test_encode_with_a_loop_and_key_error_earns_full_marks():
    def with_try(sentence, vocab):
        ids = []
        for token in sentence.split():
            try:
                ids.append(vocab[token])
            except KeyError:
                ids.append(vocab["<unk>"])
        return ids

    accepted("encode", with_try)


def test_encode_without_unk_earns_the_known_and_whitespace_parts():
    partly("encode", lambda s, v: [v[t] for t in s.split()],
           ["known tokens → their ids", "any whitespace, empty sentence"], ["unknown tokens → vocab['<unk>']"],
           "KeyError", "vocab.get(token, vocab['<unk>'])")


def test_encode_splitting_on_single_spaces_loses_the_whitespace_part_only():
    partly("encode", lambda s, v: [v.get(t, v["<unk>"]) for t in s.split(" ")],
           ["known tokens → their ids", "unknown tokens → vocab['<unk>']"], ["any whitespace, empty sentence"],
           "split()")


# --------------------------------------------------------------------------- learn_bpe


def make_bpe(end="own", weighted=True, tie="smallest", stop=True):
    """A learn_bpe answer with the named rule broken (merging a pair in a word is the
    check's own trusted _merge: no rule under test lives there)."""
    def learn_bpe(corpus, num_merges):
        counts = Counter(w for s in corpus for w in s.split())
        words = {}
        for w, c in counts.items():
            key = tuple(w) + ("</w>",) if end == "own" else tuple(w)
            words[key] = words.get(key, 0) + (c if weighted else 1)
        merges = []
        for _ in range(num_merges):
            pairs = Counter()
            for sym, c in words.items():
                for p in zip(sym, sym[1:]):
                    pairs[p] += c
            if not pairs and stop:
                break
            best = min(pairs, key=lambda p: (-pairs[p], p)) if tie == "smallest" else max(pairs, key=pairs.get)
            merges.append(best)
            words = {_merge(sym, best): c for sym, c in words.items()}
        return merges

    return learn_bpe


def test_learn_bpe_without_end_marker_is_rejected():
    rejected("learn_bpe", make_bpe(end="none"), "end marker")


def test_learn_bpe_with_unweighted_counts_is_rejected():
    rejected("learn_bpe", make_bpe(weighted=False), "weighted")


def test_learn_bpe_with_first_seen_tie_break_is_rejected():
    rejected("learn_bpe", make_bpe(tie="first"), "smallest pair")


def test_learn_bpe_without_early_stop_is_rejected():
    rejected("learn_bpe", make_bpe(stop=False), "stop early")


def test_a_different_valid_learn_bpe_passes():
    def learn_bpe(corpus, num_merges):
        words = [list(w) + ["</w>"] for s in corpus for w in s.split()]  # one entry per occurrence
        merges = []
        while len(merges) < num_merges:
            pairs = Counter(p for w in words for p in zip(w, w[1:]))
            if not pairs:
                break
            top = max(pairs.values())
            best = sorted(p for p, c in pairs.items() if c == top)[0]
            merges.append(best)
            for w in words:
                i = 0
                while i < len(w) - 1:
                    if (w[i], w[i + 1]) == best:
                        w[i:i + 2] = [w[i] + w[i + 1]]
                    i += 1
        return merges

    accepted("learn_bpe", learn_bpe)


def test_learn_bpe_with_regex_merges_on_spaced_words_earns_full_marks():
    def sennrich_style(corpus, num_merges):
        vocab = Counter(" ".join(list(w) + ["</w>"]) for s in corpus for w in s.split())  # "l o w </w>": count
        merges = []
        for _ in range(num_merges):
            pairs = Counter()
            for word, count in vocab.items():
                symbols = word.split()
                for pair in zip(symbols, symbols[1:]):
                    pairs[pair] += count
            if not pairs:
                break
            best = sorted(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
            merges.append(best)
            pattern = re.compile(r"(?<!\S)" + re.escape(" ".join(best)) + r"(?!\S)")
            vocab = Counter({pattern.sub("".join(best), word): count for word, count in vocab.items()})
        return merges

    accepted("learn_bpe", sennrich_style)


def test_learn_bpe_with_lists_of_symbols_and_a_tuple_key_earns_full_marks():
    def with_lists(corpus, num_merges):
        counts = Counter(w for s in corpus for w in s.split())
        words = [[list(w) + ["</w>"], c] for w, c in counts.items()]
        merges = []
        while len(merges) < num_merges:
            pairs = defaultdict(int)
            for symbols, c in words:
                for i in range(len(symbols) - 1):
                    pairs[symbols[i], symbols[i + 1]] += c
            if not pairs:
                break
            top = max(pairs.values())
            best = min(p for p in pairs if pairs[p] == top)  # the smallest among the most frequent
            merges.append(best)
            for entry in words:
                entry[0] = list(_merge(entry[0], best))
        return merges

    accepted("learn_bpe", with_lists)


def test_learn_bpe_without_early_stop_loses_the_stop_part_only():
    partly("learn_bpe", make_bpe(stop=False),
           ["most frequent pair, weighted by word counts", "ties: the smallest pair"], ["stop when no pair is left"],
           "stop early")


def test_learn_bpe_with_first_seen_ties_loses_the_ties_part_only():
    partly("learn_bpe", make_bpe(tie="first"),
           ["most frequent pair, weighted by word counts", "stop when no pair is left"], ["ties: the smallest pair"],
           "smallest pair")


# --------------------------------------------------------------------------- bpe_tokenize


def test_bpe_tokenize_in_reverse_order_is_rejected():
    def reverse(word, merges):
        return solutions.bpe_tokenize(word, list(reversed(merges)))

    rejected("bpe_tokenize", reverse, "order they were learned")


def bpe_string_replace(word, merges):
    """A bpe_tokenize that merges by string replacement on the spaced symbols: it
    also merges inside longer symbols (test_part_isolation.py uses it too)."""
    text = " ".join(list(word) + ["</w>"])
    for a, b in merges:
        text = text.replace(f"{a} {b}", a + b)
    return text.split(" ")


def bpe_first_occurrence_only(word, merges):
    """A bpe_tokenize that applies each merge to its first occurrence only
    (test_part_isolation.py uses it too)."""
    symbols = list(word) + ["</w>"]
    for pair in merges:
        for i in range(len(symbols) - 1):
            if (symbols[i], symbols[i + 1]) == tuple(pair):
                symbols[i:i + 2] = ["".join(pair)]
                break
    return symbols


def test_bpe_tokenize_by_string_replacement_is_rejected():
    rejected("bpe_tokenize", bpe_string_replace, "string replacement")


def test_bpe_tokenize_merging_only_the_first_occurrence_is_rejected():
    rejected("bpe_tokenize", bpe_first_occurrence_only, "every occurrence")


def test_bpe_tokenize_without_end_marker_is_rejected():
    rejected("bpe_tokenize", _tokenize_no_end, "end marker")


def _merge_in_place(symbols, merges):
    """Apply ``merges`` in order to the list ``symbols``, each pair replaced where it stands."""
    for a, b in merges:
        i = 0
        while i < len(symbols) - 1:
            if symbols[i] == a and symbols[i + 1] == b:
                symbols[i:i + 2] = [a + b]
            i += 1
    return symbols


def _tokenize_no_end(word, merges):
    return _merge_in_place(list(word), merges)


def test_a_different_valid_bpe_tokenize_passes():
    def in_place(word, merges):
        return _merge_in_place(list(word) + ["</w>"], merges)

    accepted("bpe_tokenize", in_place)


def test_bpe_tokenize_with_reduce_over_the_merges_earns_full_marks():
    def with_reduce(word, merges):
        def merge_pair(symbols, pair):
            out, i = [], 0
            while i < len(symbols):
                if symbols[i:i + 2] == list(pair):
                    out.append("".join(pair))
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            return out

        return functools.reduce(merge_pair, merges, list(word) + ["</w>"])

    accepted("bpe_tokenize", with_reduce)


def test_bpe_tokenize_with_a_regex_on_spaced_symbols_earns_full_marks():
    def with_regex(word, merges):
        text = " ".join(list(word) + ["</w>"])
        for a, b in merges:
            text = re.sub(r"(?<!\S)" + re.escape(f"{a} {b}") + r"(?!\S)", a + b, text)
        return text.split()

    accepted("bpe_tokenize", with_regex)


def test_bpe_tokenize_merging_only_the_first_occurrence_loses_that_part_only():
    partly("bpe_tokenize", bpe_first_occurrence_only, ["merges in learned order", "whole symbols, not substrings"],
           ["every occurrence, left to right"], "every occurrence")


def test_bpe_tokenize_by_string_replacement_loses_the_whole_symbols_part_only():
    partly("bpe_tokenize", bpe_string_replace, ["merges in learned order", "every occurrence, left to right"],
           ["whole symbols, not substrings"], "string replacement")


# --------------------------------------------------------------------------- one_hot


def test_one_hot_with_int_dtype_is_rejected():
    def ints(ids, vocab_size):
        out = np.zeros((len(ids), vocab_size), dtype=int)
        out[np.arange(len(ids)), ids] = 1
        return out

    rejected("one_hot", ints, "floats")


def test_one_hot_transposed_is_rejected():
    rejected("one_hot", lambda ids, v: np.eye(v)[np.asarray(ids, dtype=int)].T, "swapped")


def test_one_hot_off_by_one_is_rejected():
    def shifted(ids, v):
        out = np.zeros((len(ids), v))
        for row, i in enumerate(ids):
            out[row, i - 1] = 1.0  # ids counted from 1
        return out

    rejected("one_hot", shifted, "off by one", "column ids[i]")


def test_a_different_valid_one_hot_passes():
    accepted("one_hot", lambda ids, v: np.eye(v)[np.asarray(ids, dtype=np.int64)])


def test_one_hot_by_broadcast_comparison_without_validation_earns_full_marks():
    def by_comparison(ids, vocab_size):
        return (np.asarray(ids, dtype=int)[:, None] == np.arange(vocab_size)).astype(float)

    report = accepted("one_hot", by_comparison)
    assert any("out of range" in a for a in report.advice)


def test_one_hot_with_torch_and_a_loop_earns_full_marks():
    def with_torch(ids, vocab_size):
        ids = torch.as_tensor(np.asarray(ids, dtype=np.int64)).reshape(-1)
        return torch.nn.functional.one_hot(ids, vocab_size).double().numpy()  # torch's own error out of range

    def with_loop(ids, vocab_size):
        out = np.zeros((len(ids), vocab_size))
        for row, i in enumerate(ids):
            out[row, i] = 1.0
        return out

    accepted("one_hot", with_torch)
    accepted("one_hot", with_loop)


def test_one_hot_off_by_one_earns_the_shape_part():
    def shifted(ids, v):
        out = np.zeros((len(ids), v))
        for row, i in enumerate(ids):
            out[row, i - 1] = 1.0
        return out

    partly("one_hot", shifted, ["shape (len(ids), vocab_size), floats"], ["a 1.0 at column ids[i]"], "off by one")


# --------------------------------------------------------------------------- cosine_similarity


def test_cosine_similarity_not_raising_on_zero_vectors_loses_the_named_error_part():
    def no_check(a, b):
        a, b = np.asarray(a, float), np.asarray(b, float)
        with np.errstate(all="ignore"):
            return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))

    partly("cosine_similarity", no_check, ["a·b / (|a| |b|)"], ["a zero vector raises ValueError"],
           "should raise ValueError", "np.linalg.norm(a)")


def test_cosine_similarity_without_normalising_is_rejected():
    def dot(a, b):
        a, b = np.asarray(a, float), np.asarray(b, float)
        if not a.any() or not b.any():
            raise ValueError("zero vector")
        return float(a @ b)

    rejected("cosine_similarity", dot, "dot product")


def test_cosine_distance_is_rejected():
    def distance(a, b):
        return 1.0 - solutions.cosine_similarity(a, b)

    rejected("cosine_similarity", distance, "1 - cosine")


def test_cosine_similarity_returning_an_array_is_rejected():
    def array(a, b):
        return np.array([solutions.cosine_similarity(a, b)])

    rejected("cosine_similarity", array, "single float")


def test_a_different_valid_cosine_similarity_passes():
    def via_unit_vectors(a, b):
        a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        if np.all(a == 0) or np.all(b == 0):
            raise ValueError("cosine similarity needs non-zero vectors")
        return float(np.dot(a / np.sqrt(np.sum(a * a)), b / np.sqrt(np.sum(b * b))))

    accepted("cosine_similarity", via_unit_vectors)


def test_cosine_similarity_returning_a_numpy_float_from_pure_python_sums_earns_full_marks():
    def numpy_scalar(a, b):
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        na, nb = np.sqrt(np.sum(a ** 2)), np.sqrt(np.sum(b ** 2))
        if na == 0 or nb == 0:
            raise ValueError("zero vector")
        return np.dot(a, b) / (na * nb)  # a numpy float64: a float

    def pure_python(a, b):
        dot = math.fsum(x * y for x, y in zip(a, b))
        na, nb = math.sqrt(math.fsum(x * x for x in a)), math.sqrt(math.fsum(y * y for y in b))
        if not na or not nb:
            raise ValueError("cosine similarity of a zero vector")
        return dot / (na * nb)

    accepted("cosine_similarity", numpy_scalar)
    accepted("cosine_similarity", pure_python)


def test_cosine_similarity_with_torch_and_an_explicit_zero_check_earns_full_marks():
    def with_torch(a, b):
        a, b = torch.as_tensor(np.asarray(a, dtype=np.float64)), torch.as_tensor(np.asarray(b, dtype=np.float64))
        if not a.any() or not b.any():
            raise ValueError("zero vector")
        return torch.nn.functional.cosine_similarity(a, b, dim=0, eps=0.0).item()

    accepted("cosine_similarity", with_torch)


# --------------------------------------------------------------------------- TokenEmbedding


class EmbeddingTable(nn.Module):
    """What the TokenEmbedding answers here hold: the contract's nn.Embedding named
    embedding, and d_model. Each answer writes its own forward."""

    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.d_model = d_model


def make_embedding(scale):
    class TokenEmbedding(EmbeddingTable):
        def forward(self, ids):
            return self.embedding(ids) * scale(self.d_model)

    return TokenEmbedding


def test_token_embedding_without_scale_earns_the_module_part():
    partly("TokenEmbedding", make_embedding(lambda d: 1.0), ["an nn.Embedding named embedding"],
           ["embedding(ids) · √d_model"], "√d_model scale is missing")


def test_token_embedding_with_another_module_named_embedding_loses_the_module_part():
    class Table(nn.Module):  # looks like nn.Embedding from outside, but is not one
        def __init__(self, vocab_size, d_model):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(vocab_size, d_model))

        def forward(self, ids):
            return self.weight[ids]

    class OwnTable(nn.Module):
        def __init__(self, vocab_size, d_model):
            super().__init__()
            self.embedding = Table(vocab_size, d_model)
            self.d_model = d_model

        def forward(self, ids):
            return self.embedding(ids) * math.sqrt(self.d_model)

    partly("TokenEmbedding", OwnTable, ["embedding(ids) · √d_model"], ["an nn.Embedding named embedding"],
           "must be an nn.Embedding")


def test_token_embedding_scaled_by_d_model_is_rejected():
    rejected("TokenEmbedding", make_embedding(lambda d: float(d)), "not by d_model")


def test_token_embedding_dividing_is_rejected():
    rejected("TokenEmbedding", make_embedding(lambda d: 1 / math.sqrt(d)), "you divided")


def test_token_embedding_with_a_renamed_table_is_rejected():
    class Renamed(nn.Module):
        def __init__(self, vocab_size, d_model):
            super().__init__()
            self.table = nn.Embedding(vocab_size, d_model)
            self.d_model = d_model

        def forward(self, ids):
            return self.table(ids) * math.sqrt(self.d_model)

    rejected("TokenEmbedding", Renamed, "named `embedding`")


def test_a_different_valid_token_embedding_passes():
    class FunctionalEmbedding(EmbeddingTable):
        def __init__(self, vocab_size, d_model):
            super().__init__(vocab_size, d_model)
            self.register_buffer("scale", torch.tensor(d_model ** 0.5), persistent=False)

        def forward(self, ids):
            return torch.nn.functional.embedding(ids, self.embedding.weight) * self.scale

    accepted("TokenEmbedding", FunctionalEmbedding)


def test_token_embedding_by_indexing_the_weight_earns_full_marks():
    class Indexing(EmbeddingTable):
        def __init__(self, vocab_size, d_model):
            super().__init__(vocab_size, d_model)
            self.scale = math.sqrt(d_model)

        def forward(self, ids):
            return torch.mul(self.embedding.weight[ids], self.scale)

    accepted("TokenEmbedding", Indexing)


def test_token_embedding_in_float64_earns_full_marks_with_a_note():
    class Double(EmbeddingTable):
        def forward(self, ids):
            return self.embedding(ids).double() * self.d_model ** 0.5

    report = accepted("TokenEmbedding", Double)
    assert any("float64 where the reference returns float32" in n for n in report.notes)
