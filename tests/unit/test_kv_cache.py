"""The key/value cache gives the same logits and tokens as the full decoder."""
import pytest
import torch

from solutions import Transformer, causal_mask, padding_mask
from solutions.decoding import greedy_decode
from solutions.kv_cache import IncrementalDecoder


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _model(norm_first, seed=0, vocab=23):
    torch.manual_seed(seed)
    model = Transformer(vocab, vocab, d_model=32, num_heads=4, num_encoder_layers=2, num_decoder_layers=2,
                        d_ff=48, dropout=0.1, max_len=64, norm_first=norm_first)
    return model.double().eval()


def _source(batch=4, length=7, vocab=23, seed=1):
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (batch, length), generator=generator)
    src[1, 4:] = 0  # different source lengths
    src[3, 2:] = 0
    return src


@pytest.mark.parametrize("norm_first", [False, True])
def test_step_logits_equal_full_decoder(norm_first):
    model = _model(norm_first)
    src = _source()
    src_mask = padding_mask(src)
    tgt = torch.randint(4, 23, (4, 6), generator=torch.Generator().manual_seed(2))
    tgt[:, 0] = 1
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        full = model.project(model.decode(tgt, memory, src_mask, causal_mask(6)))  # (B, 6, V)
        cache = IncrementalDecoder(model, memory, src_mask)
        for t in range(6):
            step = cache.step(tgt[:, t])
            assert torch.allclose(step, full[:, t], atol=1e-10), t
    assert cache.self_keys[0].shape == (4, 4, 6, 8)  # (B, h, t, d_k) grew one position per step
    assert cache.cross_keys[0].shape == (4, 4, 7, 8)  # (B, h, T_src, d_k) computed once


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cached_greedy_gives_identical_tokens(norm_first, seed):
    model = _model(norm_first, seed)
    src = _source(seed=seed + 10)
    src_mask = padding_mask(src)
    # Choose as <eos> a token some sequences produce at different steps.
    plain = greedy_decode(model, src, src_mask, max_len=12, eos_id=99)
    eos = int(plain[0, 3])
    plain = greedy_decode(model, src, src_mask, max_len=12, eos_id=eos)
    cached = greedy_decode(model, src, src_mask, max_len=12, eos_id=eos, use_cache=True)
    assert torch.equal(plain, cached)
    assert (plain == eos).any()


def test_reorder_keeps_chosen_rows():
    model = _model(False)
    src = _source()
    src_mask = padding_mask(src)
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        cache = IncrementalDecoder(model, memory, src_mask)
        cache.step(torch.ones(4, dtype=torch.long))
        logits = cache.step(torch.full((4,), 5))
        index = torch.tensor([2, 2, 0])
        cache.reorder(index)
        again = cache.step(torch.full((3,), 6))
        fresh = IncrementalDecoder(model, memory[index], src_mask[index])
        fresh.step(torch.ones(3, dtype=torch.long))
        fresh.step(torch.full((3,), 5))
        assert torch.allclose(again, fresh.step(torch.full((3,), 6)), atol=1e-10)
    assert logits.shape == (4, 23)


def test_bad_memory_shape():
    with pytest.raises(ValueError, match="memory"):
        IncrementalDecoder(_model(False), torch.zeros(2, 3), None)
