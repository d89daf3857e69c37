"""Tokenizers of the application: word level (chapter 2's vocabulary) and BPE (Hugging Face ``tokenizers``).

Both map a sentence to ids with ``<pad>, <sos>, <eos>, <unk>`` at ids 0..3 and back
(``encode``, ``decode``, ``len``), and store themselves as a plain dict (``state()``) that
a checkpoint keeps and :func:`tokenizer_from_state` reads back. :func:`build_tokenizer`
trains either on one language side of the training split.

Paper: section 5.1 (byte-pair encoding, a shared source-target vocabulary).
"""
from ..tokens import EOS_ID, PAD_ID, SOS_ID, SPECIALS, build_vocab, encode

__all__ = ["WordTokenizer", "BPETokenizer", "build_tokenizer", "build_tokenizers", "tokenizer_from_state"]



def content_ids(ids):
    """The ids a tokenizer decodes: up to the first ``<eos>``, without ``<pad>`` and ``<sos>``.

    Args:
        ids: token ids (ints or 0-d tensors).

    Returns:
        A list of ints.
    """
    kept = []
    for index in ids:
        index = int(index)
        if index == EOS_ID:
            break
        if index not in (PAD_ID, SOS_ID):
            kept.append(index)
    return kept

class WordTokenizer:
    """Whitespace tokens to ids with a fixed vocabulary (chapter 2's ``build_vocab``/``encode``).

    Args:
        vocab: ``{token: id}`` with ``<pad>, <sos>, <eos>, <unk>`` at ids 0..3.

    ``encode(sentence) -> list[int]`` (no ``<sos>``/``<eos>``; unknown words → ``<unk>``),
    ``decode(ids) -> str`` (stops at ``<eos>``, drops ``<pad>``/``<sos>``),
    ``len(tokenizer)`` = vocabulary size, ``state()`` = a plain dict for checkpoints.

    Paper: the paper uses subwords (section 5.1); word level keeps the synthetic task readable.
    """

    kind = "word"

    def __init__(self, vocab):
        for token, index in zip(SPECIALS, range(4)):
            if vocab.get(token) != index:
                raise ValueError(f"vocab must map {token!r} to {index}, got {vocab.get(token)!r}")
        self.vocab = dict(vocab)
        self.itos = {index: token for token, index in self.vocab.items()}

    @classmethod
    def train(cls, sentences, min_freq=1):
        """Build the vocabulary from ``sentences`` (an iterable of strings)."""
        return cls(build_vocab(list(sentences), min_freq=min_freq, specials=SPECIALS))

    def encode(self, sentence):
        return encode(sentence, self.vocab)

    def decode(self, ids):
        return " ".join(self.itos.get(index, "<unk>") for index in content_ids(ids))

    def __len__(self):
        return len(self.vocab)

    def state(self):
        return {"kind": self.kind, "vocab": dict(self.vocab)}


class BPETokenizer:
    """Byte-pair encoding trained in memory with Hugging Face ``tokenizers`` (offline), reversible.

    Args:
        tokenizer: a ``tokenizers.Tokenizer`` whose vocabulary starts with
            ``<pad>, <sos>, <eos>, <unk>`` (ids 0..3).

    Same interface as :class:`WordTokenizer`. Build one with :meth:`train`.

    Tokenisation is reversible, as in SentencePiece: runs of whitespace become one
    space, a word-initial token carries the marker ``"▁"`` (it was preceded by a
    space) and punctuation is split off as tokens of its own, so
    ``"A man's T-shirt."`` → ``▁A ▁man ' s ▁T - shirt .`` and :meth:`decode` gives
    ``"A man's T-shirt."`` back (detokenised: no space before ``'s``, ``-`` or the
    final period). A character never seen in training becomes ``<unk>``.
    (Tokenizers trained before this scheme are read back as they were stored.)

    Paper: section 5.1 ("byte-pair encoding ... shared source-target vocabulary").
    """

    kind = "bpe"
    MARKER = "\u2581"  # "▁": the token was preceded by a space (SentencePiece's convention)

    def __init__(self, tokenizer):
        for token, index in zip(SPECIALS, range(4)):
            if tokenizer.token_to_id(token) != index:
                raise ValueError(f"the BPE vocabulary must map {token!r} to {index}")
        self.tokenizer = tokenizer

    @classmethod
    def train(cls, sentences, vocab_size=1000, min_frequency=2):
        """Learn merges on ``sentences`` (an iterable of strings); nothing is downloaded."""
        # Imported here: Hugging Face tokenizers is needed by BPE only, and word-level runs start faster without it.
        from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

        tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
        tokenizer.normalizer = normalizers.Sequence([normalizers.Replace(Regex(r"\s+"), " "), normalizers.Strip()])
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Metaspace(replacement=cls.MARKER, prepend_scheme="always", split=True),
            pre_tokenizers.Punctuation(behavior="isolated"),
        ])
        tokenizer.decoder = decoders.Metaspace(replacement=cls.MARKER, prepend_scheme="always", split=True)
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(SPECIALS), show_progress=False,
        )
        tokenizer.train_from_iterator(list(sentences), trainer=trainer)
        return cls(tokenizer)

    def encode(self, sentence):
        return self.tokenizer.encode(sentence).ids

    def decode(self, ids):
        return self.tokenizer.decode(content_ids(ids), skip_special_tokens=False)

    def __len__(self):
        return self.tokenizer.get_vocab_size()

    def state(self):
        return {"kind": self.kind, "json": self.tokenizer.to_str()}


def build_tokenizer(sentences, kind="word", vocab_size=1000, min_freq=1):
    """Train a tokenizer of ``kind`` ``"word"`` or ``"bpe"`` on ``sentences``.

    Args:
        sentences: an iterable of strings (one language side of the training split).
        kind: ``"word"`` (:class:`WordTokenizer`) or ``"bpe"`` (:class:`BPETokenizer`).
        vocab_size: target vocabulary size for BPE.
        min_freq: minimum count of a word (word level) or of a merge (BPE).

    Returns:
        The tokenizer.

    Paper: section 5.1.
    """
    if kind == "word":
        return WordTokenizer.train(sentences, min_freq=min_freq)
    if kind == "bpe":
        return BPETokenizer.train(sentences, vocab_size=vocab_size, min_frequency=max(min_freq, 2))
    raise ValueError(f"kind must be 'word' or 'bpe', got {kind!r}")



def build_tokenizers(pairs, kind="word", vocab_size=1000, shared=False, src_tokenizer=None, tgt_tokenizer=None):
    """The source and target tokenizers of a run: those given, the others trained on ``pairs``.

    Args:
        pairs: the training split's ``(source, target)`` strings.
        kind, vocab_size: as for :func:`build_tokenizer`.
        shared: one tokenizer trained on both sides (the paper's shared vocabulary,
            section 5.1, so that the embeddings can be tied), when neither is given.
        src_tokenizer, tgt_tokenizer: tokenizers to keep (e.g. a resumed run's); ``None`` = train one.

    Returns:
        ``(src_tokenizer, tgt_tokenizer)`` (the same object twice when shared).
    """
    if shared and src_tokenizer is None and tgt_tokenizer is None:
        src_tokenizer = tgt_tokenizer = build_tokenizer([text for pair in pairs for text in pair], kind, vocab_size)
    if src_tokenizer is None:
        src_tokenizer = build_tokenizer((source for source, _ in pairs), kind, vocab_size)
    if tgt_tokenizer is None:
        tgt_tokenizer = build_tokenizer((target for _, target in pairs), kind, vocab_size)
    return src_tokenizer, tgt_tokenizer

def tokenizer_from_state(state):
    """Rebuild a tokenizer from its ``state()`` dict (as stored in a checkpoint).

    Args:
        state: ``{"kind": "word", "vocab": {...}}`` or ``{"kind": "bpe", "json": "..."}``.

    Returns:
        The tokenizer.
    """
    if not isinstance(state, dict) or "kind" not in state:
        raise ValueError("tokenizer state must be a dict with a 'kind' key")
    if state["kind"] == "word":
        return WordTokenizer(state["vocab"])
    if state["kind"] == "bpe":
        from tokenizers import Tokenizer  # imported here: needed by BPE only (see BPETokenizer.train)

        return BPETokenizer(Tokenizer.from_str(state["json"]))
    raise ValueError(f"unknown tokenizer kind {state['kind']!r}")
