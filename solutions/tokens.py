"""Tokens: vocabularies, byte-pair encoding, one-hot vectors, similarity (chapter 2).

The paper (section 5.1) encodes sentences with byte-pair encoding (Sennrich et al.,
2016) into a shared source-target vocabulary of about 37000 tokens. The functions
below are the from-scratch versions the chapter builds; real corpora use the
Hugging Face ``tokenizers`` library.
"""
import numpy as np

__all__ = [
    "PAD_ID",
    "SOS_ID",
    "EOS_ID",
    "UNK_ID",
    "SPECIALS",
    "build_vocab",
    "encode",
    "learn_bpe",
    "bpe_tokenize",
    "one_hot",
    "cosine_similarity",
]

PAD_ID, SOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
SPECIALS = ("<pad>", "<sos>", "<eos>", "<unk>")  # in id order: SPECIALS[PAD_ID] == "<pad>"


def build_vocab(
    sentences, min_freq=1, specials=("<pad>", "<sos>", "<eos>", "<unk>")
):
    """Build a word-level vocabulary from whitespace-separated
    sentences.

    The specials come first, with ids ``0, 1, ...`` in the given order;
    then every token seen at least ``min_freq`` times, most frequent
    first, ties in alphabetical order. A token equal to a special is not
    added twice.

    Args:
        sentences: iterable of strings.
        min_freq: minimum count for a token to enter the vocabulary (≥
            1).
        specials: special tokens, in id order.

    Returns:
        ``dict[str, int]`` mapping each token to its id (ids
        ``0 .. len - 1``).

    Paper: section 5.1 (the vocabulary; ours is word-level, the paper's
    is BPE).
    """
    if isinstance(sentences, str):
        raise TypeError(
            "sentences must be a list of strings, not a single string"
        )
    if (
        isinstance(min_freq, bool)
        or not isinstance(min_freq, int)
        or min_freq < 1
    ):
        raise ValueError(
            f"min_freq must be an int >= 1, got {min_freq!r}"
        )
    if len(set(specials)) != len(specials):
        raise ValueError(f"specials must be distinct, got {specials!r}")
    counts = {}
    for sentence in sentences:
        if not isinstance(sentence, str):
            raise TypeError(
                "every sentence must be a str, got "
                f"{type(sentence).__name__}"
            )
        for token in sentence.split():
            counts[token] = counts.get(token, 0) + 1
    vocab = {token: i for i, token in enumerate(specials)}
    for token, count in sorted(
        counts.items(), key=lambda item: (-item[1], item[0])
    ):
        if count >= min_freq and token not in vocab:
            vocab[token] = len(vocab)
    return vocab


def encode(sentence, vocab):
    """Turn a sentence into token ids; unknown tokens become ``<unk>``.

    Args:
        sentence: a string, split on whitespace.
        vocab: ``dict[str, int]`` from :func:`build_vocab`; must contain
            ``"<unk>"`` if the sentence has a token outside it.

    Returns:
        ``list[int]``, one id per whitespace token (no
        ``<sos>``/``<eos>`` added).

    Paper: section 5.1.
    """
    if not isinstance(sentence, str):
        raise TypeError(
            f"sentence must be a str, got {type(sentence).__name__}"
        )
    ids = []
    for token in sentence.split():
        if token in vocab:
            ids.append(vocab[token])
        elif "<unk>" in vocab:
            ids.append(vocab["<unk>"])
        else:
            raise ValueError(
                f"token {token!r} is not in the vocabulary and the "
                "vocabulary has no '<unk>'"
            )
    return ids


def learn_bpe(corpus, num_merges):
    """Learn byte-pair-encoding merges from a corpus (Sennrich et al.,
    2016).

    Each word is split into characters plus the end-of-word marker
    ``"</w>"`` as a symbol of its own (``"low"`` → ``l o w </w>``). Each
    step counts every adjacent pair of symbols over the corpus (a word
    seen n times counts n times), merges the most frequent pair
    everywhere (left to right, non-overlapping), and records it. Ties go
    to the lexicographically smallest pair. Learning stops early when no
    word has two symbols left.

    This is the teaching version: it recounts every pair at every merge,
    so its cost is about
    ``num_merges × (symbols in the distinct words)``, fine for the
    book's corpora (thousands of words, hundreds of merges) and slow for
    a real one. For a real corpus use
    ``solutions.app.tokenizer.BPETokenizer`` (Hugging Face
    ``tokenizers``, which updates the pair counts incrementally).

    Args:
        corpus: list of sentences (strings), split on whitespace into
            words.
        num_merges: the maximum number of merges to learn (≥ 0).

    Returns:
        ``list[tuple[str, str]]``, the merges in the order they were
        learned.

    Paper: section 5.1
    ("byte-pair encoding ... shared source-target vocabulary").
    """

    def merge_word(symbols, pair):
        merged, i = [], 0
        while i < len(symbols):
            if (
                i + 1 < len(symbols)
                and (symbols[i], symbols[i + 1]) == pair
            ):
                merged.append(symbols[i] + symbols[i + 1])
                i += 2
            else:
                merged.append(symbols[i])
                i += 1
        return tuple(merged)

    if isinstance(corpus, str):
        raise TypeError(
            "corpus must be a list of sentences, not a single string"
        )
    if (
        isinstance(num_merges, bool)
        or not isinstance(num_merges, int)
        or num_merges < 0
    ):
        raise ValueError(
            f"num_merges must be an int >= 0, got {num_merges!r}"
        )
    words = {}  # symbols of a word -> how often the word occurs
    for sentence in corpus:
        for word in sentence.split():
            # "low" -> ('l', 'o', 'w', '</w>')
            symbols = tuple(word) + ("</w>",)
            words[symbols] = words.get(symbols, 0) + 1
    merges = []
    for _ in range(num_merges):
        pair_counts = {}
        for symbols, count in words.items():
            for pair in zip(symbols, symbols[1:]):
                pair_counts[pair] = pair_counts.get(pair, 0) + count
        if not pair_counts:
            break
        best = min(
            pair_counts, key=lambda pair: (-pair_counts[pair], pair)
        )
        merges.append(best)
        words = {
            merge_word(symbols, best): count
            for symbols, count in words.items()
        }
    return merges


def bpe_tokenize(word, merges):
    """Split one word into subword tokens by applying learned merges in
    order.

    Args:
        word: a single word (no whitespace).
        merges: ``list[tuple[str, str]]`` from :func:`learn_bpe`.

    Returns:
        ``list[str]``: the symbols of ``word`` + ``"</w>"`` after every
        merge, e.g. ``["low", "est</w>"]``.

    Paper: section 5.1.
    """
    if (
        not isinstance(word, str)
        or not word
        or any(ch.isspace() for ch in word)
    ):
        raise ValueError(
            "word must be a non-empty string without whitespace, got "
            f"{word!r}"
        )
    symbols = list(word) + ["</w>"]
    for left, right in merges:
        merged, i = [], 0
        while i < len(symbols):
            if (
                i + 1 < len(symbols)
                and symbols[i] == left
                and symbols[i + 1] == right
            ):
                merged.append(left + right)
                i += 2
            else:
                merged.append(symbols[i])
                i += 1
        symbols = merged
    return symbols


def one_hot(ids, vocab_size):
    """One-hot vectors: row ``i`` has a single 1.0 at column ``ids[i]``.

    Args:
        ids: sequence of integer ids, each in ``[0, vocab_size)``.
        vocab_size: the number of columns.

    Shape:
        output: ``(len(ids), vocab_size)``, floats (float64, numpy's
            default,
        or float32: either is correct).

    Returns:
        np.ndarray of zeros and ones.

    Paper: section 3.4 (the embedding replaces these sparse vectors by
    dense ones).
    """
    ids = np.asarray(ids)
    if ids.size == 0:
        ids = ids.astype(np.int64)  # an empty list arrives as float64
    if ids.ndim != 1:
        raise ValueError(
            f"ids must be a 1-D sequence of ints, got shape {ids.shape}"
        )
    if not np.issubdtype(ids.dtype, np.integer):
        raise TypeError(f"ids must be integers, got dtype {ids.dtype}")
    if (
        isinstance(vocab_size, bool)
        or not isinstance(vocab_size, (int, np.integer))
        or vocab_size < 1
    ):
        raise ValueError(
            f"vocab_size must be a positive int, got {vocab_size!r}"
        )
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        raise ValueError(
            f"every id must lie in [0, {vocab_size}), got min "
            f"{ids.min()}, max {ids.max()}"
        )
    vectors = np.zeros((len(ids), vocab_size))
    vectors[np.arange(len(ids)), ids] = 1.0
    return vectors


def cosine_similarity(a, b):
    """Cosine of the angle between two vectors: ``a·b / (|a| |b|)``.

    Args:
        a, b: 1-D vectors of the same length, neither all zeros.

    Returns:
        ``float`` in ``[-1, 1]``.

    Paper: background for section 3.4 (similar tokens get similar
    embeddings).
    """
    a, b = (np.asarray(v, dtype=np.float64) for v in (a, b))
    if a.ndim != 1 or b.ndim != 1 or a.shape != b.shape:
        raise ValueError(
            "a and b must be 1-D vectors of the same length, got "
            f"{a.shape} and {b.shape}"
        )
    norm_a, norm_b = np.linalg.norm(a), np.linalg.norm(b)
    if norm_a == 0 or norm_b == 0:
        raise ValueError(
            "cosine similarity is undefined"
            " for a zero vector"
        )
    return float(a @ b / (norm_a * norm_b))
