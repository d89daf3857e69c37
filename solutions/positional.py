"""Sinusoidal positional encoding (chapter 3).

    PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
    PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))

"Attention Is All You Need", section 3.5.
"""
import math

import numpy as np
import torch
from torch import nn

__all__ = ["sinusoidal_positional_encoding", "PositionalEncoding", "relative_position_matrix"]


def sinusoidal_positional_encoding(max_len, d_model):
    """The table of sinusoidal positional encodings.

    Args:
        max_len: number of positions ``0 .. max_len - 1``.
        d_model: encoding width; must be even (sin and cos come in
            pairs).

    Shape:
        output: ``(max_len, d_model)``, a float array (float64, numpy's
        default, or float32: either is correct); even columns sin, odd
        columns cos.

    Returns:
        np.ndarray ``PE`` with
        ``PE[pos, 2i] = sin(pos / 10000**(2i/d_model))`` and
        ``PE[pos, 2i+1] = cos(pos / 10000**(2i/d_model))``.

    Paper: section 3.5.
    """
    if (
        isinstance(max_len, bool)
        or not isinstance(max_len, (int, np.integer))
        or max_len < 1
    ):
        raise ValueError(
            f"max_len must be a positive int, got {max_len!r}"
        )
    if (
        isinstance(d_model, bool)
        or not isinstance(d_model, (int, np.integer))
        or d_model < 2
    ):
        raise ValueError(
            f"d_model must be a positive even int, got {d_model!r}"
        )
    if d_model % 2 != 0:
        raise ValueError(
            f"d_model must be even (sin/cos pairs), got {d_model}"
        )
    position = np.arange(max_len)[:, None]  # (max_len, 1)
    two_i = np.arange(0, d_model, 2)  # (d_model / 2,): the values 2i
    # angle: (max_len, d_model / 2)
    angle = position / 10000 ** (two_i / d_model)
    pe = np.zeros((max_len, d_model))
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle)
    return pe


class PositionalEncoding(nn.Module):
    """Add sinusoidal positional encodings to embeddings, then apply
    dropout.

    Args:
        d_model: embedding width (even).
        max_len: the longest sequence it can encode (default 5000).
        dropout: dropout on the sum (the paper's ``P_drop = 0.1``).

    Attributes:
        pe: registered buffer ``(max_len, d_model)``, float32 (float64
            is accepted too), that follows ``.to(device)`` and is not a
            parameter. Saved in the ``state_dict`` or not
            (``persistent=False``, as it is derived, not learned):
            either is correct.
        dropout: ``nn.Dropout``.

    Shape:
        x: ``(B, T, d_model)`` with ``T <= max_len``
        output: ``(B, T, d_model)``

    Paper: section 3.5 (encodings) and 5.4 (dropout on the sums).
    """

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        pe = torch.tensor(
            sinusoidal_positional_encoding(max_len, d_model),
            dtype=torch.float32,
        )
        # (max_len, d_model)
        self.register_buffer("pe", pe, persistent=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        seq_len = x.size(1)
        if seq_len > self.pe.size(0):
            raise ValueError(
                f"sequence length {seq_len} exceeds max_len = "
                f"{self.pe.size(0)}"
            )
        return self.dropout(x + self.pe[:seq_len])  # (B, T, d_model)


def relative_position_matrix(k, d_model):
    """The linear map that shifts a positional encoding by ``k``
    positions.

    Args:
        k: the offset (any int, negative too; ``k = 0`` gives the
            identity).
        d_model: encoding width (even).

    Shape:
        output: ``(d_model, d_model)``.

    Returns:
        np.ndarray ``M`` with ``M @ pe[pos] == pe[pos + k]`` for every
        ``pos``, where ``pe`` is the table of
        :func:`sinusoidal_positional_encoding` (``M`` multiplies the
        encoding from the left). It does not depend on ``pos``.

    Paper: section 3.5
    ("PE_{pos+k} can be represented as a linear function of PE_pos").
    """
    if (
        isinstance(d_model, bool)
        or not isinstance(d_model, (int, np.integer))
        or d_model < 2
        or d_model % 2
    ):
        raise ValueError(
            f"d_model must be a positive even int, got {d_model!r}"
        )
    # For each frequency w_i = 1 / 10000**(2i/d_model) the pair (sin(pos
    # w_i), cos(pos w_i)) is rotated by the angle k w_i:
    #     [sin((pos+k) w)]   [ cos(k w)  sin(k w)] [sin(pos w)]
    #     [cos((pos+k) w)] = [-sin(k w)  cos(k w)] [cos(pos w)]
    # so M is block-diagonal, one 2x2 rotation per pair.
    M = np.zeros((d_model, d_model))
    for i in range(d_model // 2):
        theta = k / 10000 ** (2 * i / d_model)
        M[2 * i, 2 * i] = math.cos(theta)
        M[2 * i, 2 * i + 1] = math.sin(theta)
        M[2 * i + 1, 2 * i] = -math.sin(theta)
        M[2 * i + 1, 2 * i + 1] = math.cos(theta)
    return M
