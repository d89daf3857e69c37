"""The token embedding layer (chapter 2)."""
import math

from torch import nn

__all__ = ["TokenEmbedding"]


class TokenEmbedding(nn.Module):
    """Learned token embeddings scaled by ``√d_model``.

    The scale keeps the embeddings on the same footing as the sinusoidal
    positional encodings (values in [-1, 1]) that are added to them.

    Args:
        vocab_size: number of tokens.
        d_model: embedding width.

    Attributes:
        embedding: the ``nn.Embedding(vocab_size, d_model)`` lookup
            table.
        d_model: the width.

    Shape:
        ids: ``(B, T)`` LongTensor (any shape of ids works)
        output: ``(B, T, d_model)``

    Paper: section 3.4
    ("In the embedding layers, we multiply those weights by √d_model").
    """

    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.d_model = d_model

    def forward(self, ids):
        # (B, T, d_model)
        return self.embedding(ids) * math.sqrt(self.d_model)
