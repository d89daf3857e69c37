"""Data-parallel training on the CPU: two gloo processes against one process on the same global batches."""
import os
import socket

import pytest
import torch
import torch.multiprocessing as mp

from solutions.app.config import TrainConfig
from solutions.app.distributed import DistributedContext, cleanup_distributed, setup_distributed
from solutions.app.synthetic import make_synthetic_splits
from solutions.app.trainer import Trainer
from solutions.configuration import TransformerConfig


pytestmark = pytest.mark.usefixtures("one_torch_thread")


CONFIG = TrainConfig(
    model=TransformerConfig(d_model=32, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=64,
                            dropout=0.0, max_len=32),
    batch_size=16, epochs=5, warmup_steps=5, eval_sentences=0, device="cpu", quiet=True,
    log_every=1, seed=3,
)
STEPS = 3


def _pairs():
    return make_synthetic_splits(60, 4, 0, seed=9)[:2]


def _worker(rank, world_size, port, folder):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    context = setup_distributed("cpu")
    train, valid = _pairs()
    trainer = Trainer(CONFIG, train, valid, distributed=context)
    trainer.train(max_steps=STEPS)
    torch.save({"params": {n: p.detach().clone() for n, p in trainer.model.named_parameters()},
                "losses": trainer.history["train"]["loss"],
                "local_batch": len(next(iter(trainer.sampler)))}, os.path.join(folder, f"rank{rank}.pt"))
    cleanup_distributed()


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_context_without_torchrun(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    context = setup_distributed("cpu")
    assert context == DistributedContext() and not context.enabled and context.is_main
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(ValueError, match="torchrun"):
        setup_distributed("cpu")


@pytest.mark.slow
def test_two_gloo_processes_match_one_process(tmp_path):
    mp.spawn(_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]
    # Each process saw half of every global batch of 16.
    assert ranks[0]["local_batch"] == ranks[1]["local_batch"] == 8
    # DDP keeps the replicas identical.
    for name, value in ranks[0]["params"].items():
        assert torch.equal(value, ranks[1]["params"][name]), name

    train, valid = _pairs()
    single = Trainer(CONFIG, train, valid, distributed=DistributedContext())
    single.train(max_steps=STEPS)
    # Same global batches, the loss averaged over the global batch's tokens: same run.
    assert ranks[0]["losses"] == pytest.approx(single.history["train"]["loss"], rel=1e-5)
    compared = 0
    for name, value in single.model.named_parameters():
        # The key bias shifts every score of a query by the same amount, which the softmax
        # cancels: its true gradient is 0, what remains is rounding noise that Adam
        # normalises into full-size steps of random sign. It differs in any two runs
        # that sum in a different order, so it is left out.
        if name.endswith("w_k.bias"):
            continue
        assert torch.allclose(value, ranks[0]["params"][name], atol=1e-5), name
        compared += 1
    assert compared == len(ranks[0]["params"]) - 3  # encoder self, decoder self and cross
