"""What the benchmarks share: ``torch.nn.Transformer`` wrapped as ours is
(:class:`TorchTransformerBaseline`), the benchmarks' model sizes, random batches with their
own lengths, the clock, and a CUDA synchronisation before each reading.

Paper: section 3 (the model).
"""
import time

import torch
from torch import nn

from ..configuration import TransformerConfig
from ..embeddings import TokenEmbedding
from ..positional import PositionalEncoding

__all__ = ["TorchTransformerBaseline", "sync_device", "bench_config", "random_batch", "bench_clock"]


class TorchTransformerBaseline(nn.Module):
    """``torch.nn.Transformer`` with the same embeddings, positions and projection as ours.

    Takes our masks (True = may attend) and converts them to PyTorch's (True = masked
    out), so both models get the same inputs and do the same work.

    Paper: section 3 (the same architecture, PyTorch's implementation).
    """

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model, num_heads, num_encoder_layers,
                 num_decoder_layers, d_ff, dropout, max_len=512, norm_first=False):
        super().__init__()
        self.src_embed = TokenEmbedding(src_vocab_size, d_model)
        self.tgt_embed = TokenEmbedding(tgt_vocab_size, d_model)
        self.positional = PositionalEncoding(d_model, max_len, dropout)
        self.transformer = nn.Transformer(d_model, num_heads, num_encoder_layers, num_decoder_layers, d_ff,
                                          dropout, batch_first=True, norm_first=norm_first)
        self.generator = nn.Linear(d_model, tgt_vocab_size)

    def forward(self, src, tgt, src_pad, tgt_pad):
        """``src_pad (B, S)``, ``tgt_pad (B, T)``: True where the token is padding."""
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.size(1), device=tgt.device, dtype=torch.bool)
        hidden = self.transformer(
            self.positional(self.src_embed(src)), self.positional(self.tgt_embed(tgt)),
            tgt_mask=causal, src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=src_pad,
        )  # (B, T, d_model)
        return self.generator(hidden)  # (B, T, V)


def sync_device(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench_config(d_model, num_heads, num_layers, d_ff, dropout, attention="fused"):
    """The benchmarks' model: ``num_layers`` encoder and decoder layers, positions up to 512."""
    return TransformerConfig(d_model=d_model, num_heads=num_heads, num_encoder_layers=num_layers,
                             num_decoder_layers=num_layers, d_ff=d_ff, dropout=dropout, max_len=512,
                             attention=attention)


def random_batch(batch, src_len, tgt_len, vocab, device, generator):
    """A batch of random ids whose sentences have their own lengths (``len // 2`` to ``len``), padded with 0.

    Shape:
        output: ``src (batch, src_len)``, ``tgt (batch, tgt_len)``, ``labels (batch, tgt_len)``.
    """
    src = torch.randint(4, vocab, (batch, src_len), generator=generator)
    tgt = torch.randint(4, vocab, (batch, tgt_len), generator=generator)
    labels = torch.randint(4, vocab, (batch, tgt_len), generator=generator)
    # Realistic padding: every sentence has its own length.
    src_lengths = torch.randint(src_len // 2, src_len + 1, (batch,), generator=generator)
    tgt_lengths = torch.randint(tgt_len // 2, tgt_len + 1, (batch,), generator=generator)
    src[torch.arange(src_len)[None, :] >= src_lengths[:, None]] = 0
    tgt[torch.arange(tgt_len)[None, :] >= tgt_lengths[:, None]] = 0
    labels[tgt == 0] = 0
    return src.to(device), tgt.to(device), labels.to(device)


def bench_clock(name, device):
    """``"wall"``: ``time.perf_counter``; ``"cpu"``: the process's CPU time (steadier on a
    shared machine; CPU only, and meaningful with few threads)."""
    if name not in ("wall", "cpu"):
        raise ValueError(f"clock must be 'wall' or 'cpu', got {name!r}")
    if name == "cpu" and device.type == "cuda":
        raise ValueError("clock='cpu' measures CPU work; use 'wall' on CUDA")
    return time.perf_counter if name == "wall" else time.process_time
