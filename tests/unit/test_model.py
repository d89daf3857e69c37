"""Chapter 8: the full Transformer, its configuration, weight tying, initialisation and parameter counts."""
import dataclasses
import inspect
import math

import pytest
import torch
from torch import nn

from solutions import (
    ConfigError,
    PAPER_CONFIGS,
    PAPER_PARAMETERS,
    MultiHeadAttention,
    Transformer,
    TransformerConfig,
    count_parameters,
    decoder_mask,
    padding_mask,
    paper_parameter_count,
)
from solutions.fused import FusedMultiHeadAttention

SMALL = dict(d_model=16, num_heads=4, num_encoder_layers=2, num_decoder_layers=3, d_ff=32, dropout=0.0, max_len=50)


def small_batch():
    src = torch.tensor([[4, 5, 6, 7, 0, 0], [8, 9, 10, 11, 12, 13]])
    tgt = torch.tensor([[1, 5, 6, 0], [1, 7, 8, 9]])
    return src, tgt


def test_forward_shape_and_composition():
    model = Transformer(20, 30, **SMALL).eval()
    src, tgt = small_batch()
    src_mask, tgt_mask = padding_mask(src), decoder_mask(tgt)
    logits = model(src, tgt, src_mask, tgt_mask)
    assert logits.shape == (2, 4, 30)
    memory = model.encode(src, src_mask)
    assert memory.shape == (2, 6, 16)
    hidden = model.decode(tgt, memory, src_mask, tgt_mask)
    assert hidden.shape == (2, 4, 16)
    torch.testing.assert_close(logits, model.project(hidden))
    torch.testing.assert_close(model.project(hidden), model.generator(hidden))


def test_attributes():
    model = Transformer(20, 30, **SMALL, norm_first=True)
    assert model.src_embed.embedding.weight.shape == (20, 16)
    assert model.tgt_embed.embedding.weight.shape == (30, 16)
    assert model.positional.pe.shape == (50, 16)
    assert isinstance(model.encoder_layers, nn.ModuleList) and len(model.encoder_layers) == 2
    assert isinstance(model.decoder_layers, nn.ModuleList) and len(model.decoder_layers) == 3
    assert model.generator.weight.shape == (30, 16) and model.generator.bias is not None
    assert isinstance(model.encoder_norm, nn.LayerNorm) and isinstance(model.decoder_norm, nn.LayerNorm)
    assert all(layer.norm_first for layer in [*model.encoder_layers, *model.decoder_layers])
    assert not hasattr(Transformer(20, 30, **SMALL), "encoder_norm")


def test_decoder_is_causal():
    model = Transformer(20, 30, **SMALL).eval()
    src, tgt = small_batch()
    logits = model(src, tgt, padding_mask(src), decoder_mask(tgt))
    changed = tgt.clone()
    changed[1, 3] = 17  # change the last target token of the second sentence
    logits_changed = model(src, changed, padding_mask(src), decoder_mask(changed))
    torch.testing.assert_close(logits[:, :3], logits_changed[:, :3])
    assert not torch.allclose(logits[1, 3], logits_changed[1, 3])


def test_source_padding_is_ignored():
    model = Transformer(20, 30, **SMALL).eval()
    src, tgt = small_batch()
    changed = src.clone()
    changed[0, 4:] = 3  # overwrite the two pad positions with real tokens, keep the mask
    mask = padding_mask(src)
    torch.testing.assert_close(model(src, tgt, mask, decoder_mask(tgt)), model(changed, tgt, mask, decoder_mask(tgt)))


@pytest.mark.parametrize("norm_first", [False, True])
def test_set_fused_switches_every_attention_and_keeps_outputs(norm_first):
    model = Transformer(20, 30, **SMALL, norm_first=norm_first).eval()
    src, tgt = small_batch()
    args = (src, tgt, padding_mask(src), decoder_mask(tgt))
    readable = model(*args)
    attention = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    assert len(attention) == 2 + 2 * 3 and all(m.attn_weights is not None for m in attention)
    assert model.set_fused(True) is model
    assert all(m.need_weights is False for m in attention)
    torch.testing.assert_close(model(*args), readable, rtol=1e-5, atol=1e-6)
    model.set_fused(False)
    assert all(m.need_weights is True for m in attention)


def test_share_embeddings_ties_three_matrices():
    model = Transformer(25, 25, **SMALL, share_embeddings=True)
    weight = model.src_embed.embedding.weight
    assert model.tgt_embed.embedding.weight is weight and model.generator.weight is weight
    untied = Transformer(25, 25, **SMALL)
    assert count_parameters(untied) - count_parameters(model) == 2 * 25 * 16
    with pytest.raises(ValueError, match="share_embeddings"):
        Transformer(25, 26, **SMALL, share_embeddings=True)


def test_xavier_uniform_initialisation():
    torch.manual_seed(0)
    model = Transformer(200, 300, d_model=64, num_heads=4, num_encoder_layers=1, num_decoder_layers=1, d_ff=256)
    for name, p in model.named_parameters():
        if p.dim() > 1:
            fan_out, fan_in = p.shape
            bound = math.sqrt(6 / (fan_in + fan_out))
            assert p.abs().max() <= bound, name
            # uniform on [-a, a] has std a / √3; without Xavier, nn.Embedding would be N(0, 1)
            assert abs(p.std().item() - bound / math.sqrt(3)) < 0.1 * bound, name


def test_count_parameters_counts_trainable_and_shared_once():
    layer = nn.Linear(3, 4)
    assert count_parameters(layer) == 3 * 4 + 4
    layer.bias.requires_grad_(False)
    assert count_parameters(layer) == 12
    shared = nn.Linear(5, 5)
    assert count_parameters(nn.Sequential(shared, shared, nn.Linear(5, 2))) == 30 + 12
    with pytest.raises(TypeError, match="nn.Module"):
        count_parameters([torch.zeros(3)])


def test_count_parameters_of_small_model_by_hand():
    d, d_ff, V_src, V_tgt = 16, 32, 20, 30
    attention = 4 * (d * d + d)
    ffn = 2 * d * d_ff + d_ff + d
    expected = (
        2 * (attention + ffn + 2 * 2 * d)
        + 3 * (2 * attention + ffn + 3 * 2 * d)
        + V_src * d
        + V_tgt * d
        + V_tgt * d
        + V_tgt
    )
    assert count_parameters(Transformer(V_src, V_tgt, **SMALL)) == expected
    assert count_parameters(Transformer(V_src, V_tgt, **SMALL, norm_first=True)) == expected + 2 * 2 * d


@pytest.mark.parametrize("name", ["base", "big"])
def test_paper_configurations_counted_on_the_meta_device(name):
    """The closed form agrees with a real (meta-device, no memory) model of the paper's size."""
    with torch.device("meta"):
        model = PAPER_CONFIGS[name].replace(share_embeddings=True).build(37000, 37000)
    count = count_parameters(model)
    assert count == paper_parameter_count(name)
    assert abs(count - PAPER_PARAMETERS[name]) / PAPER_PARAMETERS[name] < 0.03  # within 3% of Table 3
    with torch.device("meta"):
        untied = PAPER_CONFIGS[name].build(37000, 37000)
    assert count_parameters(untied) == paper_parameter_count(name, share_embeddings=False)


def test_paper_configs_follow_table_3():
    assert PAPER_CONFIGS["base"] == TransformerConfig(
        d_model=512, num_heads=8, num_encoder_layers=6, num_decoder_layers=6, d_ff=2048, dropout=0.1
    )
    assert PAPER_CONFIGS["big"] == TransformerConfig(
        d_model=1024, num_heads=16, num_encoder_layers=6, num_decoder_layers=6, d_ff=4096, dropout=0.3
    )
    with pytest.raises(ValueError, match="base"):
        paper_parameter_count("huge")


def test_training_steps_reduce_loss():
    """A few plain gradient steps (no torch.optim: its first step imports torch._dynamo, seconds)."""
    torch.manual_seed(0)
    model = Transformer(20, 20, **SMALL).set_fused(True)
    src, tgt = small_batch()
    losses = []
    for _ in range(5):
        logits = model(src, tgt, padding_mask(src), decoder_mask(tgt))
        loss = nn.functional.cross_entropy(logits.reshape(-1, 20), src[:, :4].reshape(-1), ignore_index=0)
        model.zero_grad()
        loss.backward()
        assert all(p.grad is not None for p in model.parameters())
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.05 * p.grad
        losses.append(loss.item())
    assert losses[-1] < losses[0]


# -- the configuration ------------------------------------------------------------------------


def test_config_defaults_are_the_paper_base_model_and_the_model_s_own():
    config = TransformerConfig()
    assert config == PAPER_CONFIGS["base"]
    defaults = {name: p.default for name, p in inspect.signature(Transformer).parameters.items()
                if p.default is not inspect.Parameter.empty}
    # one name and one default per idea: the fields are the arguments, and the one switch of the fast path
    assert dataclasses.asdict(config) == {**defaults, "attention": "fused"}


def test_config_builds_the_model_it_describes():
    config = TransformerConfig(d_model=32, num_heads=2, num_encoder_layers=1, num_decoder_layers=2, d_ff=48,
                               dropout=0.0, max_len=20, share_embeddings=True, norm_first=True)
    torch.manual_seed(0)
    built = config.build(30, 30)
    after_build = torch.rand(1)
    torch.manual_seed(0)
    direct = Transformer(30, 30, d_model=32, num_heads=2, num_encoder_layers=1, num_decoder_layers=2, d_ff=48,
                         dropout=0.0, max_len=20, share_embeddings=True, norm_first=True)
    assert torch.equal(torch.rand(1), after_build)  # choosing the attention class draws no random number
    assert built.state_dict().keys() == direct.state_dict().keys()
    for name, tensor in built.state_dict().items():
        assert torch.equal(tensor, direct.state_dict()[name]), name
    assert len(built.decoder_layers) == 2 and built.norm_first
    attention = [m for m in built.modules() if isinstance(m, MultiHeadAttention)]
    assert len(attention) == 1 + 2 * 2 and all(type(m) is FusedMultiHeadAttention for m in attention)
    readable = config.replace(attention="readable").build(30, 30)
    assert all(type(m) is MultiHeadAttention and m.need_weights for m in readable.modules()
               if isinstance(m, MultiHeadAttention))
    readable.load_state_dict(built.state_dict())  # one state_dict: a checkpoint of one path loads into the other
    src, tgt = small_batch()
    torch.testing.assert_close(built.eval()(src, tgt, padding_mask(src), decoder_mask(tgt)),
                               readable.eval()(src, tgt, padding_mask(src), decoder_mask(tgt)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("changes, fields, message", [
    (dict(d_model=30, num_heads=4), ("d_model", "num_heads"), "d_model 30 is not divisible by num_heads 4"),
    (dict(d_model=15, num_heads=5), ("d_model",), "d_model must be even"),
    (dict(num_heads=0), ("num_heads",), "num_heads must be a positive integer, got 0"),
    (dict(num_encoder_layers=-1), ("num_encoder_layers",), "num_encoder_layers must be a positive integer, got -1"),
    (dict(num_decoder_layers=2.0), ("num_decoder_layers",), "num_decoder_layers must be a positive integer, got 2.0"),
    (dict(d_ff=True), ("d_ff",), "d_ff must be a positive integer, got True"),
    (dict(max_len=0), ("max_len",), "max_len must be a positive integer, got 0"),
    (dict(dropout=1.0), ("dropout",), "dropout must be in [0, 1), got 1.0"),
    (dict(dropout=-0.1), ("dropout",), "dropout must be in [0, 1), got -0.1"),
    (dict(dropout="0.1"), ("dropout",), "dropout must be in [0, 1), got '0.1'"),
    (dict(norm_first=1), ("norm_first",), "norm_first must be True or False, got 1"),
    (dict(share_embeddings="yes"), ("share_embeddings",), "share_embeddings must be True or False, got 'yes'"),
    (dict(attention="sdpa"), ("attention",), "attention must be one of ('fused', 'readable'), got 'sdpa'"),
])
def test_config_errors_name_the_field_and_the_value(changes, fields, message):
    with pytest.raises(ConfigError) as caught:
        TransformerConfig(**changes)
    assert caught.value.fields == fields and message in str(caught.value)
    assert isinstance(caught.value, ValueError)
    with pytest.raises(ConfigError):  # replace checks again
        TransformerConfig().replace(**changes)


def test_config_is_frozen_and_replace_refuses_unknown_names():
    config = TransformerConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.d_model = 64
    assert config.replace(d_model=64, num_heads=4).d_model == 64 and config.d_model == 512
    with pytest.raises(ValueError, match="unknown TransformerConfig fields: \\['heads'\\]"):
        config.replace(heads=4)
