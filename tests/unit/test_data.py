"""Tests of the application's data: the synthetic task, the corpus reader, tokenizers and batching
(solutions.app.synthetic, corpus, tokenizer, batching)."""
from pathlib import Path

import pytest
import torch

from solutions.app.batching import BucketBatchSampler, TranslationDataset, collate_batch
from solutions.app.corpus import read_tsv
from solutions.app.synthetic import make_synthetic_splits, synthetic_lexicon, translate_synthetic
from solutions.app.tokenizer import BPETokenizer, WordTokenizer, tokenizer_from_state

CORPUS = Path(__file__).resolve().parents[1] / "data" / "tiny_parallel.tsv"


def test_splits_are_deterministic_disjoint_and_sized():
    train, valid, test = make_synthetic_splits(300, 40, 50, seed=3)
    assert (len(train), len(valid), len(test)) == (300, 40, 50)
    assert make_synthetic_splits(300, 40, 50, seed=3) == (train, valid, test)
    assert make_synthetic_splits(300, 40, 50, seed=4)[0] != train
    train_src = {s for s, _ in train}
    assert not train_src & {s for s, _ in test}
    assert not train_src & {s for s, _ in valid}


def test_target_is_the_grammar_translation():
    train, _, _ = make_synthetic_splits(500, 0, 0, seed=1)
    for src, tgt in train:
        assert translate_synthetic(src) == tgt


def test_grammar_reorders_and_agrees():
    lex = synthetic_lexicon()
    noun = next(n for n in lex["nouns"] if lex["noun_gender"][n] == "f" and n not in lex["noun_plural"])
    stem, adj = lex["noun_stem"][noun], lex["adj_stem"]["red"]
    singular, plural = lex["verb_forms"]["see"]
    # SVO -> SOV, adjective after the noun, feminine agreement on determiner and adjective.
    src = f"the dog sees the red {noun}"
    dog = lex["noun_stem"]["dog"] + ("o" if lex["noun_gender"]["dog"] == "m" else "a")
    definite = {"m": "lo", "f": "la"}[lex["noun_gender"]["dog"]]
    assert translate_synthetic(src) == f"{definite} {dog} la {stem}a {adj}a {singular}"
    # A plural subject changes the verb; a number word replaces the article.
    out = translate_synthetic(f"two {noun}s see the dog").split()
    assert out[0] == lex["number_word"]["two"] and out[1] == stem + "e" and out[-1] == plural
    # The prepositional phrase moves before the object and its preposition after its noun phrase.
    out = translate_synthetic(f"the dog sees a {noun} in the car").split()
    assert out[-1] == singular and lex["postposition"]["in"] in out
    assert out.index(lex["postposition"]["in"]) < out.index("una")


def test_translate_synthetic_rejects_non_grammar():
    with pytest.raises(ValueError, match="synthetic grammar"):
        translate_synthetic("the dog see the cat")  # no agreement
    with pytest.raises(ValueError, match="synthetic grammar"):
        translate_synthetic("dog sees the cat")


def test_vocabulary_is_a_few_hundred_words():
    train, _, _ = make_synthetic_splits(5000, 0, 0, seed=0)
    src_vocab = WordTokenizer.train(s for s, _ in train)
    tgt_vocab = WordTokenizer.train(t for _, t in train)
    assert 150 <= len(src_vocab) <= 600 and 150 <= len(tgt_vocab) <= 600


def test_bad_split_sizes():
    with pytest.raises(ValueError):
        make_synthetic_splits(-1, 0, 0)


def test_read_tsv(tmp_path):
    pairs = read_tsv(CORPUS)
    assert len(pairs) == 30
    assert all(isinstance(s, str) and isinstance(t, str) and s and t for s, t in pairs)
    assert translate_synthetic(pairs[0][0]) == pairs[0][1]


def test_read_tsv_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        read_tsv(tmp_path / "missing.tsv")
    bad = tmp_path / "bad.tsv"
    bad.write_text("a b\tc d\n\nno tab here\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.tsv:3: expected"):
        read_tsv(bad)
    empty_side = tmp_path / "empty.tsv"
    empty_side.write_text("a b\t \n", encoding="utf-8")
    with pytest.raises(ValueError, match=r":1: the target sentence is empty"):
        read_tsv(empty_side)
    nothing = tmp_path / "nothing.tsv"
    nothing.write_text("# only a comment\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no sentence pairs"):
        read_tsv(nothing)


def test_word_tokenizer_round_trip_and_state():
    tok = WordTokenizer.train(["the dog sees the cat", "a cat"])
    assert tok.vocab["<pad>"] == 0 and tok.vocab["<unk>"] == 3 and tok.vocab["cat"] == 4  # ties alphabetical
    ids = tok.encode("the cat sees a bird")
    assert ids[-1] == 3  # unknown word
    assert tok.decode([1] + tok.encode("the dog") + [2, 0, 0]) == "the dog"
    again = tokenizer_from_state(tok.state())
    assert again.encode("a dog") == tok.encode("a dog")


def test_bpe_tokenizer_trains_offline_and_round_trips():
    train, _, _ = make_synthetic_splits(300, 0, 0, seed=2)
    tok = BPETokenizer.train([t for _, t in train], vocab_size=200)
    assert [tok.tokenizer.token_to_id(s) for s in ("<pad>", "<sos>", "<eos>", "<unk>")] == [0, 1, 2, 3]
    sentence = train[0][1]
    ids = tok.encode(sentence)
    assert len(ids) >= len(sentence.split())
    assert tok.decode(ids + [2, 0]) == sentence
    again = tokenizer_from_state(tok.state())
    assert again.encode(sentence) == ids and len(again) == len(tok)


def test_collate_pads_and_shifts():
    batch = collate_batch([([5, 6, 7], [8, 9]), ([5], [10, 11, 12])])
    assert batch.src.tolist() == [[5, 6, 7], [5, 0, 0]]
    assert batch.tgt_in.tolist() == [[1, 8, 9, 0], [1, 10, 11, 12]]
    assert batch.labels.tolist() == [[8, 9, 2, 0], [10, 11, 12, 2]]
    assert batch.src.dtype == torch.long
    with pytest.raises(ValueError):
        collate_batch([])


def test_dataset_drops_long_pairs():
    tok = WordTokenizer.train(["a b c d e", "x y"])
    data = TranslationDataset([("a b", "x y"), ("a b c d e", "x")], tok, tok, max_len=3)
    assert len(data) == 1 and data.pairs == [("a b", "x y")]
    assert data.lengths() == [3]


def test_bucket_sampler_covers_everything_once_and_is_seeded():
    lengths = [((i * 7) % 13) + 1 for i in range(203)]
    sampler = BucketBatchSampler(lengths, batch_size=16, seed=5, bucket_size=4)
    batches = list(sampler)
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(203))
    assert len(batches) == len(sampler)
    assert list(BucketBatchSampler(lengths, 16, seed=5, bucket_size=4)) == batches
    sampler.set_epoch(1)
    assert list(sampler) != batches
    # Sorting inside buckets: batches are more uniform in length than random ones.
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches)
    assert spread < 0.5 * len(batches) * (max(lengths) - min(lengths))


def test_bucket_sampler_shards_global_batches():
    lengths = [i % 9 + 1 for i in range(100)]
    whole = BucketBatchSampler(lengths, batch_size=10, seed=1).global_batches()
    shards = [list(BucketBatchSampler(lengths, 10, seed=1, num_replicas=2, rank=r)) for r in (0, 1)]
    assert len(shards[0]) == len(shards[1]) == len(whole)
    for batch, a, b in zip(whole, *shards):
        assert sorted(a + b) == sorted(batch) and not set(a) & set(b)
    with pytest.raises(ValueError):
        BucketBatchSampler(lengths, 10, num_replicas=2, rank=2)


def test_unshuffled_sampler_keeps_order():
    assert list(BucketBatchSampler([1] * 5, 2, shuffle=False)) == [[0, 1], [2, 3], [4]]


def test_module_docstring_examples_are_exact():
    import solutions.app.synthetic

    for source in ("the old dog sees a red cat", "two children like the car near the big house"):
        target = translate_synthetic(source)
        assert f"    {source}\n    → {target}\n" in solutions.app.synthetic.__doc__


def test_read_parallel_names_file_line_and_problem(tmp_path):
    from solutions.app.corpus import read_parallel

    cases = {
        "tab inside a field": (b"a b\tc d\nthe\tdog\tsees\tle cane\n", ":2: expected 'source<TAB>target'"),
        "bad byte": (b"a b\tc d\ne \xff f\tg h\n", ":2: not UTF-8: byte 0xff at byte 3"),
        "empty side": (b"a b\tc d\n\n  \tg h\n", ":3: the source sentence is empty"),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / (name.replace(" ", "_") + ".tsv")
        path.write_bytes(content)
        with pytest.raises(ValueError, match=path.name + message):
            read_parallel(path)
        with pytest.raises(ValueError, match=path.name + message):
            read_tsv(path)  # the old reader gives the same message (it shares the parser)
        pairs, bad = read_parallel(path, on_bad_line="skip")
        assert pairs == [("a b", "c d")]
        assert [(b.path, b.line) for b in bad] == [(str(path), int(message.split(":")[1]))]
        assert str(bad[0]).startswith(f"{path}:{bad[0].line}: ")
    with pytest.raises(ValueError, match="on_bad_line must be one of"):
        read_parallel(CORPUS, on_bad_line="ignore")
    only_bad = tmp_path / "only_bad.tsv"
    only_bad.write_bytes(b"no tab\n")
    with pytest.raises(ValueError, match=r"no sentence pairs found \(1 bad lines skipped\)"):
        read_parallel(only_bad, on_bad_line="skip")


def test_read_parallel_plain_text_pair(tmp_path):
    from solutions.app.corpus import read_parallel

    src, tgt = tmp_path / "train.src", tmp_path / "train.tgt"
    # A BOM, CRLF ends, a line blank on both sides (skipped), '#' kept as text, an empty target.
    src.write_bytes(b"\xef\xbb\xbfthe dog\r\n\n# hashtag\nlonely\n")
    tgt.write_bytes(b"lo cane\r\n\nun hashtag\n\n")
    with pytest.raises(ValueError, match=r"train.tgt:4: the target sentence is empty"):
        read_parallel(src, tgt)
    pairs, bad = read_parallel(src, tgt, on_bad_line="skip")
    assert pairs == [("the dog", "lo cane"), ("# hashtag", "un hashtag")]
    assert [(b.path, b.line) for b in bad] == [(str(tgt), 4)]
    short = tmp_path / "short.tgt"
    short.write_text("one\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"train.src has 4 lines but .*short.tgt has 1"):
        read_parallel(src, short, on_bad_line="skip")  # misaligned files cannot be repaired by skipping
    with pytest.raises(FileNotFoundError, match="not found"):
        read_parallel(src, tmp_path / "missing.tgt")


def test_file_sha256_is_the_content_fingerprint(tmp_path):
    import hashlib

    from solutions.app.corpus import file_sha256

    path = tmp_path / "f.txt"
    path.write_bytes(b"x" * 3_000_001)
    assert file_sha256(path, chunk_size=1 << 16) == hashlib.sha256(b"x" * 3_000_001).hexdigest()
    path.write_bytes(b"x" * 3_000_000 + b"y")
    assert file_sha256(path) != hashlib.sha256(b"x" * 3_000_001).hexdigest()


# Hand-made sentences with what a word-per-space tokenizer gets wrong: clitics, hyphens,
# quotes, commas and a final period or "!" glued to the word before.
PUNCTUATED = [
    "The man's wife laughs.",
    "A boy in a T-shirt runs.",
    "Two dogs, one ball.",
    "The girl's dog sleeps!",
    'A child eats "ice cream".',
    "Who laughs?",
    "It costs 1,000 euros - or more...",
]


def test_bpe_splits_punctuation_and_decodes_to_the_original_text():
    tok = BPETokenizer.train(PUNCTUATED * 2, vocab_size=90)
    marker = BPETokenizer.MARKER
    for sentence in PUNCTUATED:
        ids = tok.encode(sentence)
        pieces = [tok.tokenizer.id_to_token(i).lstrip(marker) for i in ids]
        # Punctuation is never glued to letters, so "laughs." shares "laughs" with "laughs?".
        glued = [p for p in pieces if any(c in p for c in ".,!?'\"-") and any(c.isalnum() for c in p)]
        assert not glued, (sentence, pieces)
        assert tok.decode([1] + ids + [2, 0, 0]) == sentence  # detokenised: exactly the input text
    pieces = [tok.tokenizer.id_to_token(i) for i in tok.encode("The man's T-shirt.")]
    assert pieces[-1] == "." and "'" in pieces and "-" in pieces
    assert sum(p.startswith(marker) for p in pieces) == 3  # the start and the two spaces are marked
    # Runs of whitespace become one space; characters never seen in training become <unk>.
    assert tok.decode(tok.encode("  Two   dogs,\tone ball. ")) == "Two dogs, one ball."
    assert tok.decode(tok.encode("Two dogs ¿")) == "Two dogs <unk>"
    again = tokenizer_from_state(tok.state())
    assert again.decode(again.encode(PUNCTUATED[0])) == PUNCTUATED[0]


def test_bleu_of_a_round_trip_is_100_on_detokenised_text():
    from solutions.app.evaluation import CorpusBLEU

    tok = BPETokenizer.train(PUNCTUATED * 2, vocab_size=90)
    hypotheses = [tok.decode(tok.encode(sentence)) for sentence in PUNCTUATED]
    assert CorpusBLEU()(hypotheses, PUNCTUATED) == pytest.approx(100.0)
    # What the old whitespace tokenizer printed ("man ' s", "T - shirt") costs BLEU.
    spaced = [" ".join(tok.tokenizer.id_to_token(i).lstrip(BPETokenizer.MARKER) for i in tok.encode(s))
              for s in PUNCTUATED]
    assert spaced[0] != PUNCTUATED[0] and CorpusBLEU()(spaced, PUNCTUATED) < 90
