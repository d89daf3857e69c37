"""Chapter 3: sinusoidal positional encodings and relative positions as rotations."""
import math

import numpy as np
import pytest
import torch

from solutions import PositionalEncoding, relative_position_matrix, sinusoidal_positional_encoding


def test_formula_entry_by_entry():
    max_len, d_model = 7, 6
    pe = sinusoidal_positional_encoding(max_len, d_model)
    assert pe.shape == (max_len, d_model)
    for pos in range(max_len):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            assert pe[pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-12)
            assert pe[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-12)


def test_lecture_table_d_model_4():
    """The worked d_model = 4 table: frequencies 1 and 1/100."""
    pe = sinusoidal_positional_encoding(4, 4)
    expected = np.array(
        [[math.sin(p), math.cos(p), math.sin(p / 100), math.cos(p / 100)] for p in range(4)]
    )
    np.testing.assert_allclose(pe, expected, atol=1e-12)
    np.testing.assert_allclose(pe[1], [0.8415, 0.5403, 0.0100, 1.0000], atol=5e-5)


def test_properties_bounded_and_unique():
    pe = sinusoidal_positional_encoding(200, 32)
    assert np.abs(pe).max() <= 1.0
    distances = np.linalg.norm(pe[:, None] - pe[None], axis=-1)
    assert (distances + np.eye(200)).min() > 1e-3  # every position is distinct


@pytest.mark.parametrize("args", [(10, 5), (0, 4), (10, 0), (10.0, 4)])
def test_bad_arguments(args):
    with pytest.raises(ValueError):
        sinusoidal_positional_encoding(*args)


def test_module_adds_encoding_with_buffer():
    module = PositionalEncoding(8, max_len=20, dropout=0.0)
    assert "pe" in dict(module.named_buffers()) and not list(module.parameters())
    assert module.pe.shape == (20, 8) and module.pe.dtype == torch.float32
    x = torch.randn(2, 5, 8)
    expected = x + torch.tensor(sinusoidal_positional_encoding(5, 8), dtype=torch.float32)
    torch.testing.assert_close(module(x), expected)


def test_module_dropout_and_length_check():
    module = PositionalEncoding(8, max_len=4, dropout=0.5)
    x = torch.randn(2, 4, 8)
    assert (module(x) == 0).any()
    module.eval()
    torch.testing.assert_close(module(x), x + module.pe[:4])
    with pytest.raises(ValueError, match="max_len"):
        module(torch.randn(1, 5, 8))


def test_buffer_follows_dtype_and_is_not_saved():
    module = PositionalEncoding(8, max_len=10).double()
    assert module.pe.dtype == torch.float64
    assert "pe" not in module.state_dict()


@pytest.mark.parametrize("k", [0, 1, 3, 17, -2])
def test_relative_position_matrix_shifts_every_position(k):
    d_model = 16
    pe = sinusoidal_positional_encoding(60, d_model)
    M = relative_position_matrix(k, d_model)
    assert M.shape == (d_model, d_model)
    for pos in range(max(0, -k), 60 - max(k, 0)):
        np.testing.assert_allclose(M @ pe[pos], pe[pos + k], atol=1e-10)


def test_relative_position_matrix_is_a_block_diagonal_rotation():
    M = relative_position_matrix(5, 8)
    np.testing.assert_allclose(M @ M.T, np.eye(8), atol=1e-12)  # orthogonal
    off_block = M.copy()
    for i in range(4):
        off_block[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = 0
    assert np.all(off_block == 0)
    np.testing.assert_allclose(relative_position_matrix(2, 8) @ relative_position_matrix(3, 8), M, atol=1e-12)
    with pytest.raises(ValueError):
        relative_position_matrix(1, 7)
