"""Shared pytest set-up: seeded randomness and the GPU marker."""
import random

import numpy as np
import pytest


def pytest_collection_modifyitems(config, items):
    """Skip tests marked ``gpu`` where CUDA is not available (CI has no GPU)."""
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:  # pragma: no cover - torch is a hard requirement
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs CUDA (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed_everything():
    """Every test starts from the same random state."""
    random.seed(0)
    np.random.seed(0)
    try:
        import torch

        torch.manual_seed(0)
    except ImportError:  # pragma: no cover
        pass
    yield
