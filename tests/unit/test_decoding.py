"""Tests of greedy decoding, beam search and translate."""
import math

import pytest
import torch

from solutions import Transformer, padding_mask
from solutions.app.tokenizer import WordTokenizer
from solutions.decoding import beam_search, greedy_decode
from solutions.translation import length_sorted_batches, translate


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _model(seed=0, vocab=19, norm_first=False):
    torch.manual_seed(seed)
    model = Transformer(vocab, vocab, d_model=32, num_heads=2, num_encoder_layers=1, num_decoder_layers=2,
                        d_ff=64, dropout=0.1, max_len=64, norm_first=norm_first)
    return model.double().eval()


class CopyModel(torch.nn.Module):
    """A stand-in with the Transformer interface whose next token is fixed by position:
    it emits ``script[t]`` at step ``t`` (so the expected output is known exactly)."""

    def __init__(self, script, vocab=10):
        super().__init__()
        self.script, self.vocab = script, vocab

    def encode(self, src, src_mask):
        return torch.zeros(src.size(0), src.size(1), 4)

    def decode(self, tgt, memory, src_mask, tgt_mask):
        return torch.arange(tgt.size(1)).float()[None, :, None].expand(tgt.size(0), -1, 1)

    def project(self, hidden):
        steps = hidden[..., 0].long()  # (B, T)
        logits = torch.zeros(*steps.shape, self.vocab)
        for b in range(steps.size(0)):
            for t in range(steps.size(1)):
                logits[b, t, self.script[b][min(int(steps[b, t]), len(self.script[b]) - 1)]] = 1.0
        return logits


def test_greedy_follows_argmax_and_pads_after_eos():
    model = CopyModel([[5, 6, 2, 7, 7], [4, 4, 4, 4, 2]])
    src = torch.ones(2, 3, dtype=torch.long)
    out = greedy_decode(model, src, None, max_len=6)
    assert out.tolist() == [[1, 5, 6, 2, 0, 0], [1, 4, 4, 4, 4, 2]]
    out = greedy_decode(model, src, None, max_len=2)
    assert out.tolist() == [[1, 5, 6], [1, 4, 4]]
    assert greedy_decode(model, src, None, max_len=6, sos_id=3, pad_id=9).tolist() == [
        [3, 5, 6, 2, 9, 9], [3, 4, 4, 4, 4, 2]]


def test_greedy_stops_when_all_have_ended():
    model = CopyModel([[2], [5, 2]])
    out = greedy_decode(model, torch.ones(2, 1, dtype=torch.long), None, max_len=10)
    assert out.tolist() == [[1, 2, 0], [1, 5, 2]]


@pytest.mark.parametrize("seed", range(4))
def test_beam_size_one_equals_greedy(seed):
    model = _model(seed)
    src = torch.randint(4, 19, (1, 6), generator=torch.Generator().manual_seed(seed))
    src_mask = padding_mask(src)
    probe = greedy_decode(model, src, src_mask, max_len=10, eos_id=99)
    eos = int(probe[0, 4])  # a token greedy produces: the search ends at different points
    greedy = greedy_decode(model, src, src_mask, max_len=10, eos_id=eos)[0].tolist()
    assert beam_search(model, src, src_mask, 1, 10, eos_id=eos) == greedy
    # max_len reached without <eos>: both return the prefix as it is.
    assert beam_search(model, src, src_mask, 1, 3, eos_id=99) == greedy_decode(
        model, src, src_mask, 3, eos_id=99)[0].tolist()


class TableModel(torch.nn.Module):
    """A stand-in whose next-token log probabilities depend only on the last token:
    ``table[last_token] = {token: log_prob}``; every other token gets -30."""

    def __init__(self, table, vocab=8):
        super().__init__()
        self.table, self.vocab = table, vocab

    def encode(self, src, src_mask):
        return torch.zeros(src.size(0), 1, 1)

    def decode(self, tgt, memory, src_mask, tgt_mask):
        return tgt.double()[..., None]  # (B, T, 1): the token itself

    def project(self, hidden):
        logits = torch.full((*hidden.shape[:2], self.vocab), -30.0, dtype=torch.double)
        for b in range(hidden.size(0)):
            for t in range(hidden.size(1)):
                for token, log_prob in self.table.get(int(hidden[b, t, 0]), {}).items():
                    logits[b, t, token] = log_prob
        return logits


def test_beam_search_finds_what_greedy_misses():
    # Greedy takes 5 (p 0.55), then <eos> (p 0.4): 0.22. Beam 2 also keeps 6 (p 0.45),
    # then <eos> (p 0.95): 0.43, the better sentence.
    log = math.log
    model = TableModel({1: {5: log(0.55), 6: log(0.45)}, 5: {2: log(0.4), 3: log(0.3), 4: log(0.3)},
                        6: {2: log(0.95), 3: log(0.05)}})
    src = torch.ones(1, 1, dtype=torch.long)
    assert greedy_decode(model, src, None, 5)[0].tolist() == [1, 5, 2]
    assert beam_search(model, src, None, 1, 5) == [1, 5, 2]
    assert beam_search(model, src, None, 2, 5, length_penalty=0.0) == [1, 6, 2]


def test_beam_search_length_penalty_prefers_longer():
    # "<sos> <eos>" has p 0.6 (log -0.51); "<sos> 5 6 <eos>" has p 0.4 (log -0.92).
    log = math.log
    model = TableModel({1: {2: log(0.6), 5: log(0.4)}, 5: {6: 0.0}, 6: {2: 0.0}})
    src = torch.ones(1, 1, dtype=torch.long)
    assert beam_search(model, src, None, 2, 5, length_penalty=0.0) == [1, 2]
    # GNMT penalty ((5 + len) / 6) ** alpha: -0.51 / 1 against -0.92 / (8/6) ** 5 = -0.22.
    assert beam_search(model, src, None, 2, 5, length_penalty=5.0) == [1, 5, 6, 2]


def test_beam_search_rejects_batches():
    model = _model()
    with pytest.raises(ValueError, match="one sentence"):
        beam_search(model, torch.ones(2, 3, dtype=torch.long), None, 2, 5)


def test_sentences_are_batched_by_length_and_each_keeps_its_index():
    """translate's and the tuner's one batching: sorted by length (ties in order),
    right-padded with <pad> = 0, each row named by its sentence's index."""
    encoded = [[5, 6, 7], [8], [9, 10], [11, 12, 13, 14], [15]]
    batches = list(length_sorted_batches(encoded, 2))
    assert [chunk for chunk, _ in batches] == [[1, 4], [2, 0], [3]]
    for chunk, src in batches:
        assert src.dtype == torch.long and tuple(src.shape) == (len(chunk), max(len(encoded[i]) for i in chunk))
        for row, i in enumerate(chunk):
            assert src[row].tolist() == encoded[i] + [0] * (src.size(1) - len(encoded[i]))
    assert list(length_sorted_batches([], 4)) == []


def test_translate_returns_strings_in_order():
    src_tok = WordTokenizer.train(["a b c", "d e"])
    tgt_tok = WordTokenizer.train(["x y z", "w"])
    model = Transformer(len(src_tok), len(tgt_tok), d_model=16, num_heads=2, num_encoder_layers=1,
                        num_decoder_layers=1, d_ff=16, max_len=32).eval()
    out = translate(model, ["a b c", "d", "e e e e"], src_tok, tgt_tok, max_len=4)
    assert len(out) == 3 and all(isinstance(s, str) for s in out)
    assert all(len(s.split()) <= 4 for s in out)
    with torch.no_grad():
        beam = translate(model, ["a b c"], src_tok, tgt_tok, beam_size=1, max_len=4)
        beam2 = translate(model, ["a b c"], src_tok, tgt_tok, beam_size=2, max_len=4)
    assert beam[0] == out[0] and isinstance(beam2[0], str)
    with pytest.raises(TypeError):
        translate(model, "a b c", src_tok, tgt_tok)
