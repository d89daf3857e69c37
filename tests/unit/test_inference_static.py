"""The decoders of solutions.app.inference give chapter 10's logits and tokens.

The CPU path (one attention kernel, ended sentences dropped from the batch), the batched
beam search, and the fixed-shape key/value cache of the GPU path. The CUDA graph itself
needs a GPU (tests/unit/test_gpu.py); the cache it records, its masks, the early-stop
trimming and the refusals run here on the CPU.
"""
from functools import partial

import pytest
import torch

from solutions import Transformer, padding_mask
from solutions.app.inference import (CUDAGraphStep, FusedIncrementalDecoder, StaticIncrementalDecoder,
                                     batch_beam_search, decoders_for, greedy_decoder_for, shrinking_greedy_decode,
                                     static_greedy_decode)
from solutions.decoding import beam_search, greedy_decode
from solutions.kv_cache import IncrementalDecoder
from solutions.translation import translate
from test_kv_cache import _model, _source as _kv_source

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _source(batch=5, length=9, seed=1):
    """test_kv_cache's sources, and one more of a third length."""
    src = _kv_source(batch=batch, length=length, seed=seed)
    src[4, 7:] = 0
    return src


class Words:
    """A toy tokenizer: ids 4.. for words (hashed), the specials dropped when decoding."""

    def encode(self, sentence):
        return [4 + (sum(map(ord, word)) % 19) for word in sentence.split()]

    def decode(self, ids):
        return " ".join(str(i) for i in ids if i not in (0, 1, 2))


@pytest.mark.parametrize("norm_first", [False, True])
def test_static_cache_logits_equal_the_growing_cache_s(norm_first):
    model = _model(norm_first)
    src = _source()
    src_mask = padding_mask(src)
    tokens = torch.randint(4, 23, (5, 10), generator=torch.Generator().manual_seed(2))
    tokens[:, 0] = 1
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        growing = IncrementalDecoder(model, memory, src_mask)
        static = StaticIncrementalDecoder(model, memory, src_mask, steps=10)
        for t in range(10):
            expected = growing.step(tokens[:, t])
            got = static.step(tokens[:, t])
            assert torch.allclose(got, expected, atol=1e-10), t
            assert int(static.position_tensor) == static.position == t + 1
    assert static.self_keys[0].shape == (5, 4, 10, 8)  # (B, h, L, d_k): allocated once, never grown
    with pytest.raises(ValueError, match="holds 10 steps: cannot decode step 11"):
        static.step(tokens[:, 0])


def _ending_apart(norm_first, seed):
    """A model, sources, their mask, and as ``<eos>`` a token some sentences produce at
    different steps: they end apart, and the batch stops early."""
    model = _model(norm_first, seed)
    src = _source(seed=seed + 10)
    src_mask = padding_mask(src)
    eos = int(greedy_decode(model, src, src_mask, max_len=14, eos_id=99)[0, 3])
    return model, src, src_mask, eos


def _assert_greedy_decode_s_tokens(decode, model, src, src_mask, eos):
    """``decode`` gives ``greedy_decode``'s tokens when sentences end apart, and when none ends."""
    got = decode(model, src, src_mask, max_len=14, eos_id=eos)
    expected = greedy_decode(model, src, src_mask, max_len=14, eos_id=eos, use_cache=True)
    assert torch.equal(got, expected) and (expected == eos).any()
    never = decode(model, src, src_mask, max_len=6, eos_id=99)
    assert torch.equal(never, greedy_decode(model, src, src_mask, max_len=6, eos_id=99))  # runs to max_len
    assert never.shape == (5, 7)
    return got


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("check_every", [1, 3, 8])
def test_static_greedy_gives_greedy_decode_s_tokens(norm_first, seed, check_every):
    decode = partial(static_greedy_decode, check_every=check_every)
    _assert_greedy_decode_s_tokens(decode, *_ending_apart(norm_first, seed))


@pytest.mark.parametrize("decoder", [static_greedy_decode, shrinking_greedy_decode])
@pytest.mark.parametrize("batch_size", [2, 3])
def test_translate_with_the_inference_decoders_gives_the_same_translations(decoder, batch_size):
    model = _model(True, seed=3).float()
    sentences = ["a b c", "ein kurzer satz", "x", "ein viel längerer satz mit mehr wörtern als die anderen", "d e"]
    plain = translate(model, sentences, Words(), Words(), max_len=12, batch_size=batch_size)
    got = translate(model, sentences, Words(), Words(), max_len=12, batch_size=batch_size, greedy=decoder)
    assert got == plain and len(set(plain)) > 1


def test_the_static_path_refuses_what_it_cannot_do():
    model = _model(False)
    src = _source()
    src_mask = padding_mask(src)
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        with pytest.raises(ValueError, match=r"steps must be an int in \[1, max_len = 64\], got 65"):
            StaticIncrementalDecoder(model, memory, src_mask, steps=65)
        decoder = StaticIncrementalDecoder(model, memory, src_mask, steps=4)
        with pytest.raises(NotImplementedError, match="beam search reorders the cache"):
            decoder.reorder(torch.tensor([0, 0]))
        with pytest.raises(ValueError, match="CUDA graphs need a CUDA device, the decoder is on cpu"):
            CUDAGraphStep(decoder)
    with pytest.raises(ValueError, match="check_every must be >= 1"):
        static_greedy_decode(model, src, src_mask, 4, check_every=0)
    assert greedy_decoder_for("cpu") is shrinking_greedy_decode and greedy_decoder_for("cuda:0") is static_greedy_decode



# -- the CPU path: one attention kernel, ended sentences leave the batch ---------------------------
@pytest.mark.parametrize("norm_first", [False, True])
def test_fused_cache_logits_equal_the_growing_cache_s_even_for_an_empty_source(norm_first):
    model = _model(norm_first)
    src = _source()
    src[2] = 0  # a source of padding only: every cross-attention key masked, masked_softmax's zeros
    src_mask = padding_mask(src)
    tokens = torch.randint(4, 23, (5, 8), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        growing = IncrementalDecoder(model, memory, src_mask)
        fused = FusedIncrementalDecoder(model, memory, src_mask)
        for t in range(8):
            expected = growing.step(tokens[:, t])
            got = fused.step(tokens[:, t])
            assert torch.allclose(got, expected, atol=1e-10), t
            assert not got.isnan().any()


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shrinking_greedy_gives_greedy_decode_s_tokens_and_drops_ended_sentences(norm_first, seed, monkeypatch):
    model, src, src_mask, eos = _ending_apart(norm_first, seed)
    rows = []
    step = FusedIncrementalDecoder.step
    monkeypatch.setattr(FusedIncrementalDecoder, "step",
                        lambda self, tokens: rows.append(len(tokens)) or step(self, tokens))  # rows fed
    got = _assert_greedy_decode_s_tokens(shrinking_greedy_decode, model, src, src_mask, eos)
    rows = rows[:len(rows) - 6]  # the steps of the first decoding (the second ran 6 steps, no sentence ending)
    ended_at = [1 + int((row[1:] == eos).nonzero()[0, 0]) for row in got if (row[1:] == eos).any()]  # steps
    assert ended_at and rows[0] == 5  # some sentence ends; the first step decodes all five
    for t, fed in enumerate(rows, start=1):  # step t decodes exactly the sentences not ended before it
        assert fed == 5 - sum(end < t for end in ended_at), (t, rows, ended_at)
    with pytest.raises(ValueError, match="max_len must be >= 1, got 0"):
        shrinking_greedy_decode(model, src, src_mask, 0)


# -- beam search over a batch of sentences ---------------------------------------------------------
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("beam_size, alpha", [(1, 0.6), (2, 0.0), (4, 0.6), (5, 1.0)])
def test_batch_beam_search_gives_beam_search_s_hypothesis_for_every_sentence(norm_first, beam_size, alpha):
    model = _model(norm_first, seed=4)
    src = _source(batch=6, length=9, seed=20)
    src[5, 6:] = 0
    mask = padding_mask(src)
    # As <eos>, a token greedy decoding produces early in one sentence: hypotheses finish at different steps.
    eos = int(greedy_decode(model, src, mask, max_len=12, eos_id=99)[2, 2])
    limits = [10, 3, 12, 1, 7, 10]  # each sentence its own max_len (translate: its length + 50)
    got = batch_beam_search(model, src, mask, beam_size, limits, eos_id=eos, length_penalty=alpha)
    expected = []
    for row, limit in enumerate(limits):
        length = int(mask[row].sum())
        one = src[row:row + 1, :length]  # the sentence alone, unpadded: what translate gives beam_search
        expected.append(beam_search(model, one, padding_mask(one), beam_size, limit, eos_id=eos,
                                    length_penalty=alpha))
    assert got == expected
    assert any(h[-1] == eos for h in expected) and any(h[-1] != eos for h in expected)  # both endings occur


def test_translate_with_the_batched_beam_gives_the_same_translations():
    model = _model(True, seed=5).float()
    sentences = ["a b c", "ein kurzer satz", "x", "ein viel längerer satz mit mehr wörtern als die anderen", "d e",
                 "noch einer", "und der letzte satz hier"]
    one_by_one = translate(model, sentences, Words(), Words(), beam_size=3, max_len=9, length_penalty=0.6)
    batched = translate(model, sentences, Words(), Words(), beam_size=3, max_len=9, length_penalty=0.6,
                        batch_size=4, beam=batch_beam_search)
    assert batched == one_by_one and len(set(one_by_one)) > 1
    assert decoders_for("cpu") == {"greedy": shrinking_greedy_decode, "beam": batch_beam_search}
    with pytest.raises(ValueError, match="one max_len per sentence"):
        batch_beam_search(model, _source(), padding_mask(_source()), 2, [3, 4])
