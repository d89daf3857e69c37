"""Shared helpers of the per-chapter check tests (``test_checks_chNN.py``)."""
import pytest
import torch

import solutions
from autograder.checks import CheckFailure, check


def rejected(name, wrong, *words, seed=None, hidden=True, any_word=False):
    """Assert that the check of ``name`` rejects ``wrong`` and that the message names
    the mistake: every one of ``words`` (case-sensitive), or with ``any_word`` at least
    one of them (case-insensitive). Returns the message."""
    with pytest.raises(CheckFailure) as info:
        check(name, wrong, hidden=hidden, seed=seed)
    message = str(info.value)
    if any_word:
        assert any(w.lower() in message.lower() for w in words), message
    else:
        for word in words:
            assert word in message, f"{word!r} not in the message:\n{message}"
    return message


def accepted(name, obj):
    """Assert that ``obj`` passes the visible and the hidden check of ``name``."""
    check(name, obj)
    check(name, obj, hidden=True)


def assert_reference_passes(name, capsys):
    """The reference passes its own visible and hidden checks, printing to stdout only."""
    accepted(name, getattr(solutions, name))
    out = capsys.readouterr()
    assert out.out.count(f"✓ {name}") == 2 and out.err == ""


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny tensors: one thread is faster than a pool on a busy machine. Active in
    every test module that imports it."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
