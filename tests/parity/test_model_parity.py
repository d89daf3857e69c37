"""Parity: the whole Transformer stack against torch's encoder and decoder stacks.

Our embeddings, positional encoding and output projection are shared by both
sides; the stacks in between are ``nn.TransformerEncoder`` and
``nn.TransformerDecoder`` with our layers' weights copied in. With
``norm_first=True`` both add a final LayerNorm after each stack (``torch.nn.Transformer``
does so for post-norm too, which the paper does not; hence the stacks, not
``nn.Transformer`` itself).
"""
import pytest
import torch
from torch import nn

from solutions import decoder_mask, padding_mask
from solutions.configuration import TransformerConfig

from copy_weights import copy_attention, copy_feed_forward_and_norms

SIZES = dict(d_model=16, num_heads=4, num_encoder_layers=2, num_decoder_layers=2, d_ff=32, dropout=0.0, max_len=32)


def reference_stacks(model, norm_first):
    d, h, d_ff = SIZES["d_model"], SIZES["num_heads"], SIZES["d_ff"]
    enc_layer = nn.TransformerEncoderLayer(d, h, d_ff, 0.0, batch_first=True, norm_first=norm_first)
    dec_layer = nn.TransformerDecoderLayer(d, h, d_ff, 0.0, batch_first=True, norm_first=norm_first)
    encoder = nn.TransformerEncoder(
        enc_layer, SIZES["num_encoder_layers"], norm=nn.LayerNorm(d) if norm_first else None, enable_nested_tensor=False
    )
    decoder = nn.TransformerDecoder(dec_layer, SIZES["num_decoder_layers"], norm=nn.LayerNorm(d) if norm_first else None)
    encoder, decoder = encoder.double(), decoder.double()
    for ours, ref in zip(model.encoder_layers, encoder.layers):
        copy_attention(ours.self_attn, ref.self_attn)
        copy_feed_forward_and_norms(ours, ref, ["norm1", "norm2"])
    for ours, ref in zip(model.decoder_layers, decoder.layers):
        copy_attention(ours.self_attn, ref.self_attn)
        copy_attention(ours.cross_attn, ref.multihead_attn)
        copy_feed_forward_and_norms(ours, ref, ["norm1", "norm2", "norm3"])
    if norm_first:
        encoder.norm.load_state_dict(model.encoder_norm.state_dict())
        decoder.norm.load_state_dict(model.decoder_norm.state_dict())
    return encoder.train(), decoder.train()  # dropout 0; train() avoids torch's inference fast path


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("fused", [False, True])
def test_transformer_matches_torch_stacks(norm_first, fused):
    # fused: every attention module packs its projections (TransformerConfig's one switch)
    config = TransformerConfig(**SIZES, norm_first=norm_first, attention="fused" if fused else "readable")
    model = config.build(20, 24).double()
    encoder, decoder = reference_stacks(model, norm_first)
    src = torch.tensor([[4, 5, 6, 7, 8, 9, 10], [4, 5, 6, 0, 0, 0, 0]])
    tgt = torch.tensor([[1, 5, 6, 7, 8], [1, 9, 0, 0, 0]])
    logits = model(src, tgt, padding_mask(src), decoder_mask(tgt))

    memory = encoder(model.positional(model.src_embed(src)), src_key_padding_mask=src == 0)
    causal = torch.ones(5, 5, dtype=torch.bool).triu(1)  # torch: True = not allowed
    hidden = decoder(
        model.positional(model.tgt_embed(tgt)),
        memory,
        tgt_mask=causal,
        tgt_key_padding_mask=tgt == 0,
        memory_key_padding_mask=src == 0,
    )
    expected = model.generator(hidden)
    assert logits.shape == (2, 5, 24)
    torch.testing.assert_close(logits, expected, rtol=1e-12, atol=1e-12)
