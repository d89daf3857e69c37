"""CUDA paths: training on the GPU, bf16 autocast, torch.compile, cached decoding, the base-model bench.

Skipped where ``torch.cuda.is_available()`` is False (see tests/conftest.py).
"""
import pytest
import torch

from solutions import Transformer, TransformerConfig, padding_mask
from solutions.app.bench import bench_base_mfu, bench_kv_cache, bench_training_step
from solutions.app.inference import static_greedy_decode
from solutions.app.synthetic import make_synthetic_splits
from solutions.decoding import greedy_decode
from solutions.app.checkpoint import model_from_checkpoint
from solutions.app.config import TrainConfig
from solutions.app.trainer import Trainer

pytestmark = pytest.mark.gpu

CONFIG = TrainConfig(
    model=TransformerConfig(d_model=64, num_heads=4, num_encoder_layers=2, num_decoder_layers=2, d_ff=128,
                            dropout=0.1, max_len=64),
    batch_size=32, epochs=1, warmup_steps=20, eval_sentences=16, device="cuda", quiet=True,
)


@pytest.fixture(scope="module")
def splits():
    return make_synthetic_splits(256, 16, 16, seed=0)


@pytest.mark.parametrize("bf16, compile", [(False, False), (True, False), (True, True)])
def test_training_on_cuda(splits, bf16, compile, tmp_path):
    train, valid, _ = splits
    trainer = Trainer(CONFIG.replace(bf16=bf16, compile=compile), train, valid, out_dir=tmp_path)
    assert trainer.device.type == "cuda" and trainer.use_bf16 == bf16
    history = trainer.train()
    assert trainer.step == 8 and all(loss == loss for loss in history["train"]["loss"])  # no NaN
    assert next(trainer.model.parameters()).is_cuda
    model, *_ = model_from_checkpoint(tmp_path / "checkpoint.pt", device="cuda")
    assert next(model.parameters()).is_cuda


def test_cuda_resume_is_exact(splits, tmp_path):
    train, valid, _ = splits
    straight = Trainer(CONFIG, train, valid)
    straight.train(max_steps=6)
    first = Trainer(CONFIG, train, valid)
    first.train(max_steps=3)
    path = first.save_checkpoint(tmp_path / "c.pt")
    resumed = Trainer.from_checkpoint(path, train, valid)
    resumed.train(max_steps=6)
    # Fused attention kernels may use atomics in the backward pass: equal up to rounding.
    assert resumed.history["train"]["loss"] == pytest.approx(straight.history["train"]["loss"], rel=1e-4)


def test_cached_greedy_on_cuda_matches_plain():
    torch.manual_seed(0)
    model = Transformer(50, 50, d_model=64, num_heads=4, num_encoder_layers=2, num_decoder_layers=2, d_ff=128,
                        max_len=64).double().cuda().eval()
    src = torch.randint(4, 50, (4, 9), device="cuda")
    src[1, 5:] = 0
    mask = padding_mask(src)
    plain = greedy_decode(model, src, mask, 20, eos_id=-1)
    assert torch.equal(plain, greedy_decode(model, src, mask, 20, eos_id=-1, use_cache=True))


@pytest.mark.parametrize("norm_first", [False, True])
def test_static_cache_and_cuda_graph_give_greedy_decode_s_tokens(norm_first):
    torch.manual_seed(0)
    model = Transformer(50, 50, d_model=64, num_heads=4, num_encoder_layers=2, num_decoder_layers=2, d_ff=128,
                        max_len=64, norm_first=norm_first).cuda().eval()
    src = torch.randint(4, 50, (6, 9), device="cuda")
    src[1, 5:] = 0
    src[4, 3:] = 0
    mask = padding_mask(src)
    eos = int(greedy_decode(model, src, mask, 20, eos_id=-1)[0, 4])  # ends some sentences, at different steps
    expected = greedy_decode(model, src, mask, 20, eos_id=eos, use_cache=True)
    for graph in (False, True):
        assert torch.equal(static_greedy_decode(model, src, mask, 20, eos_id=eos, cuda_graph=graph), expected), graph
    never = greedy_decode(model, src, mask, 20, eos_id=-1, use_cache=True)
    assert torch.equal(static_greedy_decode(model, src, mask, 20, eos_id=-1), never)  # the graph runs 20 steps


def test_benchmarks_on_cuda():
    step = bench_training_step(d_model=64, num_heads=4, num_layers=1, d_ff=128, batch=8, src_len=16, tgt_len=16,
                               vocab=200, repeats=3, device="cuda", bf16=True)
    assert step["ratio"] > 0
    mfu = bench_base_mfu(batch=8, seq_len=32, vocab=1000, repeats=2, device="cuda")
    assert mfu["tokens_per_s"] > 0 and (mfu["mfu"] is None or 0 < mfu["mfu"] < 1)
    cache = bench_kv_cache(d_model=64, num_heads=4, num_layers=1, d_ff=128, batch=4, src_len=8, new_tokens=16,
                           vocab=200, repeats=1, device="cuda")
    assert cache["same_tokens"] and cache["graph_ratio"] > 0 and cache["static_ratio"] > 0
