"""Several processes, one model: the ``torch.distributed`` set-up used by the trainer.

``torchrun --nproc_per_node N -m solutions train ...`` starts N processes and sets
``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` in
each. :func:`setup_distributed` reads them and joins the process group (NCCL on
GPUs, gloo on CPUs); the trainer then wraps the model in
``DistributedDataParallel`` (:func:`training_model`; gradients are averaged across processes after every
backward pass), gives each process its share of every global batch
(:class:`~solutions.app.batching.BucketBatchSampler` with ``num_replicas``/``rank``) and
lets only rank 0 log and save checkpoints. A single process without those
variables runs unchanged.

Paper: section 5.2 (training on 8 GPUs); data parallelism is how such runs split batches.
"""
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

__all__ = ["DistributedContext", "setup_distributed", "cleanup_distributed", "all_reduce_sum", "training_model"]


@dataclass(frozen=True)
class DistributedContext:
    """Where this process stands: ``rank`` of ``world_size`` processes, ``local_rank`` on its machine."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self):
        """True when more than one process takes part."""
        return self.world_size > 1

    @property
    def is_main(self):
        """True on rank 0, the process that logs and writes checkpoints."""
        return self.rank == 0


def setup_distributed(device_type="cpu"):
    """Join the process group described by ``torchrun``'s environment variables, if any.

    Args:
        device_type: ``"cuda"`` (NCCL backend, one GPU per local rank) or ``"cpu"`` (gloo).

    Returns:
        A :class:`DistributedContext`; ``world_size == 1`` (and nothing initialised)
        when ``WORLD_SIZE`` is unset or 1.

    Raises:
        ValueError: when the variables are inconsistent (e.g. ``RANK`` missing).
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistributedContext()
    try:
        rank = int(os.environ["RANK"])
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
    except (KeyError, ValueError) as error:
        raise ValueError("WORLD_SIZE > 1 needs RANK (and LOCAL_RANK): start with torchrun") from error
    if not dist.is_initialized():
        backend = "nccl" if device_type == "cuda" else "gloo"
        if device_type == "cuda":
            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend=backend, rank=rank, world_size=world_size)
    return DistributedContext(rank=rank, world_size=world_size, local_rank=local_rank)


def cleanup_distributed():
    """Leave the process group (no-op when none was joined)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(tensor, context):
    """Sum ``tensor`` over all processes in place (no-op for one process); returns it."""
    if context.enabled:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def training_model(model, context, compile=False):
    """What the training steps call: ``model`` itself, in ``DistributedDataParallel`` when
    several processes take part (on this process's GPU, or the CPU), compiled with
    ``torch.compile`` when ``compile`` is True. The parameters stay ``model``'s."""
    wrapped = model
    if context.enabled:
        device = next(model.parameters()).device
        wrapped = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    return torch.compile(wrapped) if compile else wrapped
