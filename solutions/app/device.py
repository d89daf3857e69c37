"""Devices: which one a run uses, and whether this CPU computes bfloat16 natively.

:func:`resolve_device` turns ``TrainConfig.device`` (``"auto"``, ``"cpu"``, ``"cuda"``,
``"cuda:1"``) into a ``torch.device``, refusing CUDA where there is none;
:func:`cpu_has_bf16` tells whether ``bf16=True`` pays on this CPU (AVX512-BF16 or AMX:
about 1.5 times the steps per second of float32 on 2 cores of an AMD EPYC; emulated
bfloat16 is slower than float32); :func:`training_device` settles a training run's
device, precision and compilation in one place.
"""
import warnings

import torch

__all__ = ["resolve_device", "cpu_has_bf16", "training_device"]


def cpu_has_bf16():
    """True when this CPU computes bfloat16 natively (AVX512-BF16 or AMX), as oneDNN reports it."""
    try:
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch build without oneDNN
        return False


def resolve_device(name):
    """``"auto"`` → ``"cuda"`` when available, else ``"cpu"``; checks that CUDA exists when asked."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} requested but CUDA is not available (torch.cuda.is_available() is False)")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda[:N]', got {name!r}")
    return device


def training_device(config, context):
    """The device of a training run and the switches that apply there.

    The device is :func:`resolve_device` of ``config.device``; a distributed CUDA run
    takes its process's own GPU (``context.local_rank``). ``config.bf16`` applies on
    CUDA and on a CPU with native bfloat16 (:func:`cpu_has_bf16`), ``config.compile`` on
    CUDA only; elsewhere each warns and is ignored.

    Args:
        config: the run's :class:`~solutions.app.config.TrainConfig` (``device``, ``bf16``, ``compile``).
        context: the run's :class:`~solutions.app.distributed.DistributedContext`.

    Returns:
        ``(device, bf16, compile)``: a ``torch.device`` and the two switches as they apply.
    """
    device = resolve_device(config.device)
    if context.enabled and device.type == "cuda":
        device = torch.device("cuda", context.local_rank)
    bf16 = bool(config.bf16) and (device.type == "cuda" or cpu_has_bf16())
    if config.bf16 and not bf16:
        warnings.warn("bf16=True needs CUDA or a CPU with native bfloat16 (AVX512-BF16 or AMX); this one "
                      "would emulate it, slower than float32: ignored", stacklevel=3)
    if config.compile and device.type != "cuda":
        warnings.warn(f"compile=True applies on CUDA only; ignored on {device.type}", stacklevel=3)
    return device, bf16, bool(config.compile) and device.type == "cuda"
