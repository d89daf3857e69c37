"""Devices: which one a run uses, and whether this CPU computes bfloat16 natively.

:func:`resolve_device` turns ``TrainConfig.device`` (``"auto"``, ``"cpu"``, ``"cuda"``,
``"cuda:1"``) into a ``torch.device``, refusing CUDA where there is none;
:func:`cpu_has_bf16` tells whether ``bf16=True`` pays on this CPU (AVX512-BF16 or AMX:
about 1.5 times the steps per second of float32 on 2 cores of an AMD EPYC; emulated
bfloat16 is slower than float32).
"""
import torch

__all__ = ["resolve_device", "cpu_has_bf16"]


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
