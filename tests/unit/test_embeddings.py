"""Chapter 2: the token embedding layer."""
import math

import torch
from torch import nn

from solutions import TokenEmbedding


def test_lookup_scaled_by_sqrt_d_model():
    layer = TokenEmbedding(10, 16)
    assert isinstance(layer.embedding, nn.Embedding) and layer.embedding.weight.shape == (10, 16)
    ids = torch.tensor([[1, 2, 9], [0, 0, 3]])
    out = layer(ids)
    assert out.shape == (2, 3, 16)
    torch.testing.assert_close(out, layer.embedding.weight[ids] * math.sqrt(16))


def test_same_id_same_vector_and_gradient_reaches_used_rows_only():
    layer = TokenEmbedding(6, 4)
    ids = torch.tensor([[2, 5, 2]])
    out = layer(ids)
    torch.testing.assert_close(out[0, 0], out[0, 2])
    out.sum().backward()
    grad = layer.embedding.weight.grad
    assert torch.all(grad[[0, 1, 3, 4]] == 0)
    torch.testing.assert_close(grad[2], torch.full((4,), 2 * math.sqrt(4)))  # used twice
    torch.testing.assert_close(grad[5], torch.full((4,), math.sqrt(4)))


def test_state_dict_key():
    assert list(TokenEmbedding(5, 8).state_dict()) == ["embedding.weight"]
