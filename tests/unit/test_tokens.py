"""Chapter 2: vocabularies, BPE, one-hot vectors and cosine similarity."""
import random
from collections import Counter

import numpy as np
import pytest

from solutions import (
    EOS_ID,
    PAD_ID,
    SOS_ID,
    SPECIALS,
    UNK_ID,
    bpe_tokenize,
    build_vocab,
    cosine_similarity,
    encode,
    learn_bpe,
    one_hot,
)

# Sennrich et al. (2016)'s example corpus: low ×5, lower ×2, newest ×6, widest ×3
CLASSIC = ["low " * 5 + "lower " * 2, "newest " * 6 + "widest " * 3]


def test_special_ids():
    assert (PAD_ID, SOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
    assert [SPECIALS[i] for i in (PAD_ID, SOS_ID, EOS_ID, UNK_ID)] == ["<pad>", "<sos>", "<eos>", "<unk>"]


def test_build_vocab_order_specials_count_then_alphabet():
    vocab = build_vocab(["the cat sat", "the dog sat", "a cat"])
    # counts: the 2, cat 2, sat 2, dog 1, a 1 -> by count desc, ties alphabetical
    assert vocab == {
        "<pad>": 0, "<sos>": 1, "<eos>": 2, "<unk>": 3,
        "cat": 4, "sat": 5, "the": 6, "a": 7, "dog": 8,
    }


def test_build_vocab_min_freq_and_custom_specials():
    vocab = build_vocab(["b a b c", "c b"], min_freq=2, specials=("<pad>", "<unk>"))
    assert vocab == {"<pad>": 0, "<unk>": 1, "b": 2, "c": 3}


def test_build_vocab_does_not_duplicate_specials():
    vocab = build_vocab(["<unk> x <unk>"])
    assert vocab == {"<pad>": 0, "<sos>": 1, "<eos>": 2, "<unk>": 3, "x": 4}
    assert sorted(vocab.values()) == list(range(len(vocab)))


def test_build_vocab_on_random_corpus_is_a_ranking():
    rng = random.Random(0)
    words = [f"w{i}" for i in range(30)]
    sentences = [" ".join(rng.choices(words, k=rng.randint(1, 8))) for _ in range(50)]
    counts = Counter(token for s in sentences for token in s.split())
    vocab = build_vocab(sentences, min_freq=2)
    tokens = [t for t in vocab if t not in SPECIALS]
    assert set(tokens) == {t for t, c in counts.items() if c >= 2}
    keys = [(-counts[t], t) for t in tokens]
    assert keys == sorted(keys)
    assert sorted(vocab.values()) == list(range(len(vocab)))


@pytest.mark.parametrize(
    "args, error",
    [(("a b",), TypeError), ((["a"], 0), ValueError), ((["a"], 1, ("<pad>", "<pad>")), ValueError), (([3],), TypeError)],
)
def test_build_vocab_errors(args, error):
    with pytest.raises(error):
        build_vocab(*args)


def test_encode_maps_unknown_to_unk():
    vocab = build_vocab(["the cat sat"])
    assert encode("the dog  sat", vocab) == [vocab["the"], UNK_ID, vocab["sat"]]
    assert encode("", vocab) == []


def test_encode_errors():
    with pytest.raises(ValueError, match="<unk>"):
        encode("x y", {"x": 0})
    with pytest.raises(TypeError):
        encode(["x"], {"x": 0})


def test_learn_bpe_classic_example_worked_by_hand():
    merges = learn_bpe(CLASSIC, 10)
    assert merges == [
        ("e", "s"),  # 9: newest 6 + widest 3; ties (s, t) and (t, </w>) lose alphabetically
        ("es", "t"),  # 9
        ("est", "</w>"),  # 9
        ("l", "o"),  # 7
        ("lo", "w"),  # 7
        ("e", "w"),  # 6, ties (n, e) and (w, est</w>)
        ("ew", "est</w>"),  # 6, tie (n, ew)
        ("n", "ewest</w>"),  # 6
        ("low", "</w>"),  # 5
        ("d", "est</w>"),  # 3, ties (i, d) and (w, i)
    ]


def test_learn_bpe_stops_when_no_pair_is_left():
    merges = learn_bpe(["ab ab", "a"], 100)
    assert merges == [("a", "b"), ("ab", "</w>"), ("a", "</w>")]
    assert learn_bpe(["abc"], 0) == []


def test_learn_bpe_counts_weighted_and_breaks_ties_by_smallest_pair():
    # (c, d) appears 3 times in one word type; (a, b) and (b, </w>) twice each
    assert learn_bpe(["cd cd cd ab ab"], 1) == [("c", "d")]
    # every pair once: (a, </w>) < (a, b) < (b, </w>) < (b, a) since "<" sorts before letters
    assert learn_bpe(["ba ab"], 1) == [("a", "</w>")]


def test_bpe_tokenize_applies_merges_in_order():
    merges = learn_bpe(CLASSIC, 10)
    assert bpe_tokenize("lowest", merges) == ["low", "est</w>"]
    assert bpe_tokenize("newest", merges) == ["newest</w>"]
    assert bpe_tokenize("low", merges) == ["low</w>"]
    assert bpe_tokenize("xyz", merges) == ["x", "y", "z", "</w>"]
    assert bpe_tokenize("ab", []) == ["a", "b", "</w>"]
    # order matters: merging (b, c) first blocks (a, b)
    assert bpe_tokenize("abc", [("b", "c"), ("a", "b")]) == ["a", "bc", "</w>"]
    assert bpe_tokenize("aaa", [("a", "a")]) == ["aa", "a", "</w>"]  # left to right, no overlap


def test_bpe_round_trip_and_training_words_become_single_tokens():
    rng = random.Random(1)
    words = ["".join(rng.choices("abcde", k=rng.randint(1, 6))) for _ in range(40)]
    merges = learn_bpe([" ".join(words)], 200)
    for word in words:
        tokens = bpe_tokenize(word, merges)
        assert "".join(tokens) == word + "</w>"
    # with merges to spare, every training word ends as one token
    if len(merges) < 200:
        assert all(len(bpe_tokenize(w, merges)) == 1 for w in words)


@pytest.mark.parametrize("word", ["", "a b", 3])
def test_bpe_tokenize_rejects_bad_word(word):
    with pytest.raises(ValueError, match="word"):
        bpe_tokenize(word, [])


def test_learn_bpe_errors():
    with pytest.raises(TypeError):
        learn_bpe("low lower", 3)
    with pytest.raises(ValueError):
        learn_bpe(["low"], -1)


def test_one_hot():
    vectors = one_hot([2, 0, 2], 4)
    assert vectors.shape == (3, 4) and vectors.dtype == np.float64
    np.testing.assert_array_equal(vectors, [[0, 0, 1, 0], [1, 0, 0, 0], [0, 0, 1, 0]])
    assert one_hot([], 3).shape == (0, 3)
    ids = np.random.randint(0, 10, size=20)
    np.testing.assert_array_equal(one_hot(ids, 10).argmax(1), ids)
    np.testing.assert_array_equal(one_hot(ids, 10).sum(1), 1.0)


@pytest.mark.parametrize("ids, size, error", [([4], 4, ValueError), ([-1], 4, ValueError), ([0.5], 4, TypeError), ([0], 0, ValueError)])
def test_one_hot_errors(ids, size, error):
    with pytest.raises(error):
        one_hot(ids, size)


def test_cosine_similarity():
    assert cosine_similarity([1, 0], [0, 2]) == pytest.approx(0.0)
    assert cosine_similarity([1, 1], [2, 2]) == pytest.approx(1.0)
    assert cosine_similarity([1, 2], [-1, -2]) == pytest.approx(-1.0)
    a, b = np.random.randn(8), np.random.randn(8)
    assert cosine_similarity(a, b) == pytest.approx(a @ b / np.sqrt((a @ a) * (b @ b)))
    assert isinstance(cosine_similarity(a, b), float)
    # one-hot vectors of different tokens are orthogonal: no notion of similarity
    assert cosine_similarity(*one_hot([1, 2], 5)) == 0.0


def test_cosine_similarity_errors():
    with pytest.raises(ValueError, match="zero vector"):
        cosine_similarity([0, 0], [1, 2])
    with pytest.raises(ValueError, match="same length"):
        cosine_similarity([1, 2], [1, 2, 3])
