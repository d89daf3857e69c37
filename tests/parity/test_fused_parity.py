"""The fused attention path (``solutions.fused``) against the readable one and against torch.

The fused path packs the q/k/v projections into one matrix product when query, key
and value are the same tensor (one for k/v when key is value). It must give what
chapter 5's readable path gives, in float64 to rounding, with and without masks, in
training mode (dropout 0) and for every gradient; and it must agree with
``torch.nn.MultiheadAttention`` / ``TransformerEncoderLayer`` /
``TransformerDecoderLayer`` with copied weights.
"""
import copy

import pytest
import torch
from torch import nn

from solutions import (
    DecoderLayer,
    EncoderLayer,
    MultiHeadAttention,
    Transformer,
    causal_mask,
    decoder_mask,
    padding_mask,
)
from solutions.configuration import TransformerConfig
from solutions.fused import FusedMultiHeadAttention, packed_projection, use_fused_attention

from copy_weights import copy_attention, copy_feed_forward_and_norms

D_MODEL, HEADS, D_FF = 16, 4, 32
EXACT = dict(rtol=1e-12, atol=1e-12)  # float64: equal up to the order of summation


def readable_and_fused(seed=0):
    """Chapter 5's module on its readable path and a fused copy with the same weights."""
    torch.manual_seed(seed)
    readable = MultiHeadAttention(D_MODEL, HEADS).double().train()  # need_weights=True
    fused = FusedMultiHeadAttention(D_MODEL, HEADS).double().train()
    fused.load_state_dict(readable.state_dict())
    fused.need_weights = False
    return readable, fused


def inputs(kind, generator):
    """``(query, key, value)`` for self-attention (one tensor), cross-attention (key is value)
    or three different tensors."""
    x = torch.randn(3, 5, D_MODEL, dtype=torch.float64, generator=generator, requires_grad=True)
    if kind == "self":
        return x, x, x
    memory = torch.randn(3, 7, D_MODEL, dtype=torch.float64, generator=generator, requires_grad=True)
    if kind == "cross":
        return x, memory, memory
    value = torch.randn(3, 7, D_MODEL, dtype=torch.float64, generator=generator, requires_grad=True)
    return x, memory, value


def mask_for(kind, name, T_q, T_k):
    ids = torch.tensor([[5] * T_k, [5] * (T_k - 2) + [0] * 2, [5] * 3 + [0] * (T_k - 3)])  # 0 = <pad>
    if name == "none":
        return None
    if name == "padding":
        return padding_mask(ids)  # (B, 1, 1, T_k)
    if name == "causal":
        return padding_mask(ids) & causal_mask(T_q)  # (B, 1, T, T): self-attention only
    # a query row of the first sentence sees no key at all: both paths must give 0 there
    mask = padding_mask(ids).expand(3, 1, T_q, T_k).clone()
    mask[0, 0, 1, :] = False
    return mask


CASES = [
    ("self", "none"), ("self", "padding"), ("self", "causal"), ("self", "empty_row"),
    ("cross", "none"), ("cross", "padding"), ("cross", "empty_row"),
    ("distinct", "none"), ("distinct", "padding"),
]


@pytest.mark.parametrize("kind, mask_name", CASES)
def test_fused_path_equals_readable_path_with_gradients(kind, mask_name):
    readable, fused = readable_and_fused()
    query, key, value = inputs(kind, torch.Generator().manual_seed(1))
    mask = mask_for(kind, mask_name, query.size(1), key.size(1))
    upstream = torch.randn(3, 5, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    leaves = list(dict.fromkeys([query, key, value]))  # each distinct input once

    out_readable = readable(query, key, value, mask)
    grads_readable = torch.autograd.grad((out_readable * upstream).sum(), leaves + list(readable.parameters()))
    out_fused = fused(query, key, value, mask)
    grads_fused = torch.autograd.grad((out_fused * upstream).sum(), leaves + list(fused.parameters()))

    assert out_fused.shape == (3, 5, D_MODEL) and fused.attn_weights is None
    torch.testing.assert_close(out_fused, out_readable, **EXACT)
    names = [f"input {i}" for i in range(len(leaves))] + [name for name, _ in fused.named_parameters()]
    for name, a, b in zip(names, grads_fused, grads_readable):
        torch.testing.assert_close(a, b, **EXACT, msg=lambda text, name=name: f"gradient of {name}: {text}")
    if mask_name == "empty_row":
        assert torch.equal(out_fused[0, 1], readable.w_o.bias)  # no key: context 0, only W^O's bias


@pytest.mark.parametrize("kind, called", [("self", {"w_o"}), ("cross", {"w_q", "w_o"}),
                                          ("distinct", {"w_q", "w_k", "w_v", "w_o"})])
def test_fused_path_packs_the_projections_of_shared_inputs(kind, called):
    """Self-attention calls none of w_q/w_k/w_v (one packed product), cross-attention only w_q."""
    _, fused = readable_and_fused()
    seen = set()
    for name in ("w_q", "w_k", "w_v", "w_o"):
        getattr(fused, name).register_forward_hook(lambda module, args, out, name=name: seen.add(name))
    fused(*inputs(kind, torch.Generator().manual_seed(3)))
    assert seen == called
    seen.clear()
    fused.need_weights = True  # the readable path: every projection on its own
    fused(*inputs(kind, torch.Generator().manual_seed(3)))
    assert seen == {"w_q", "w_k", "w_v", "w_o"} and fused.attn_weights.shape[1] == HEADS


def test_fused_module_keeps_the_contract_parameters_and_checks_masks():
    readable, fused = readable_and_fused()
    assert isinstance(fused, MultiHeadAttention)
    assert list(fused.state_dict()) == list(readable.state_dict()) == [
        f"w_{p}.{t}" for p in "qkvo" for t in ("weight", "bias")
    ]
    x = torch.randn(2, 3, D_MODEL, dtype=torch.float64)
    with pytest.raises(TypeError, match="boolean"):
        fused(x, x, x, torch.ones(2, 1, 1, 3))
    with pytest.raises(ValueError, match=r"does not broadcast to \(B, h, T_q, T_k\) = \(2, 4, 3, 3\)"):
        fused(x, x, x, torch.ones(2, 1, 1, 4, dtype=torch.bool))


def test_packed_projection_equals_separate_maps_and_validates():
    torch.manual_seed(0)
    linears = [nn.Linear(6, 6).double(), nn.Linear(6, 4).double()]
    x = torch.randn(2, 3, 6, dtype=torch.float64)
    for got, linear in zip(packed_projection(x, linears), linears):
        torch.testing.assert_close(got, linear(x), **EXACT)
    with pytest.raises(ValueError, match="x has 5 features"):
        packed_projection(torch.randn(2, 5, dtype=torch.float64), linears)
    with pytest.raises(ValueError, match="with bias"):
        packed_projection(x, [nn.Linear(6, 6, bias=False)])


def test_packed_weight_cache_follows_every_parameter_change():
    """Without gradients the packed weight is reused, and rebuilt after an optimizer step,
    load_state_dict and a dtype change; with gradients it is never cached."""
    torch.manual_seed(0)
    linears = [nn.Linear(8, 8), nn.Linear(8, 8)]
    x = torch.randn(4, 8)
    cache = {}

    def check():
        with torch.no_grad():
            outputs = packed_projection(x.to(linears[0].weight.dtype), linears, cache)
            for got, linear in zip(outputs, linears):
                torch.testing.assert_close(got, linear(x.to(linear.weight.dtype)), rtol=0, atol=1e-6)
        return cache["weight"]

    first = check()
    assert check() is first  # nothing changed: reused
    optimizer = torch.optim.SGD([p for m in linears for p in m.parameters()], lr=0.5)
    packed_projection(x, linears, cache)[1].sum().backward()  # recording: no cache use
    assert cache["weight"] is first
    optimizer.step()  # in-place update: version counters move
    second = check()
    assert second is not first
    linears[0].load_state_dict(nn.Linear(8, 8).state_dict())
    third = check()
    assert third is not second
    for linear in linears:
        linear.double()  # new storage
    assert check().dtype == torch.float64


def test_use_fused_attention_puts_fused_modules_that_hold_the_same_parameters():
    model = Transformer(20, 20, D_MODEL, HEADS, 2, 2, D_FF, dropout=0.0, max_len=16)
    before = copy.deepcopy(model.state_dict())
    optimizer = torch.optim.Adam(model.parameters())
    readable = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    assert all(type(m) is MultiHeadAttention and m.need_weights for m in readable)  # the layers build chapter 5's
    assert use_fused_attention(model) is model
    fused = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    assert all(type(m) is FusedMultiHeadAttention and not m.need_weights for m in fused)  # on the fast path
    assert all(type(m) is MultiHeadAttention for m in readable)  # no live object changed its class
    for old, new in zip(readable, fused):  # the same submodules, so the same parameter tensors
        assert new is not old
        assert all(getattr(new, n) is getattr(old, n) for n in ("w_q", "w_k", "w_v", "w_o", "dropout"))
    after = model.state_dict()
    assert list(after) == list(before) and all(torch.equal(after[k], before[k]) for k in before)
    assert {id(p) for group in optimizer.param_groups for p in group["params"]} == {id(p) for p in model.parameters()}
    assert use_fused_attention(model) is model and model.encoder_layers[0].self_attn is fused[0]  # nothing left to do
    alone = MultiHeadAttention(D_MODEL, HEADS).eval()
    shared = use_fused_attention(alone)  # a module alone: its fused twin
    assert type(shared) is FusedMultiHeadAttention and shared.w_q is alone.w_q and not shared.training
    with pytest.raises(TypeError, match="torch.nn.Module"):
        use_fused_attention("model")
    with pytest.raises(TypeError, match="MultiHeadAttention"):
        FusedMultiHeadAttention.sharing(nn.Linear(2, 2))


def test_the_layers_build_chapter_5s_class_and_the_config_chooses_the_fused_one():
    model = Transformer(20, 20, D_MODEL, HEADS, 1, 2, D_FF, dropout=0.0, max_len=16).double()
    attention = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    assert len(attention) == 1 + 2 * 2 and all(type(m) is MultiHeadAttention for m in attention)
    src = torch.tensor([[4, 5, 6, 7], [4, 5, 0, 0]])
    tgt = torch.tensor([[1, 8, 9], [1, 8, 0]])
    readable = model(src, tgt, padding_mask(src), decoder_mask(tgt))
    assert model.decoder_layers[0].self_attn.attn_weights is not None  # the readable path ran
    parameters = [id(p) for p in model.parameters()]
    sdpa = model.set_fused(True)(src, tgt, padding_mask(src), decoder_mask(tgt))
    assert all(type(m) is MultiHeadAttention and m.attn_weights is None for m in attention)  # SDPA, same class
    config = TransformerConfig(D_MODEL, HEADS, 1, 2, D_FF, dropout=0.0, max_len=16)
    built = config.build(20, 20).double()  # attention="fused", the default
    built.load_state_dict(model.state_dict())
    fused = built(src, tgt, padding_mask(src), decoder_mask(tgt))
    attention = [m for m in built.modules() if isinstance(m, MultiHeadAttention)]
    assert all(type(m) is FusedMultiHeadAttention and m.attn_weights is None for m in attention)
    torch.testing.assert_close(sdpa, readable, **EXACT)
    torch.testing.assert_close(fused, readable, **EXACT)
    again = built.set_fused(False)(src, tgt, padding_mask(src), decoder_mask(tgt))  # weights wanted: readable path
    assert all(type(m) is FusedMultiHeadAttention and m.attn_weights is not None for m in attention)
    torch.testing.assert_close(again, readable, **EXACT)
    assert [id(p) for p in model.parameters()] == parameters


# --------------------------------------------------------------------------- against torch


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
@pytest.mark.parametrize("kind", ["self", "cross"])
def test_fused_attention_matches_torch_multihead_attention(kind, dtype, tol):
    torch.manual_seed(0)
    ours = FusedMultiHeadAttention(D_MODEL, HEADS).to(dtype)
    ours.need_weights = False
    ref = nn.MultiheadAttention(D_MODEL, HEADS, batch_first=True).to(dtype)
    copy_attention(ours, ref)
    x = torch.randn(3, 5, D_MODEL, dtype=dtype, requires_grad=True)
    memory = x if kind == "self" else torch.randn(3, 7, D_MODEL, dtype=dtype, requires_grad=True)
    ids = torch.tensor([[5] * memory.size(1), [5] * 4 + [0] * (memory.size(1) - 4), [5] * 2 + [0] * (memory.size(1) - 2)])
    out = ours(x, memory, memory, padding_mask(ids))
    expected, _ = ref(x, memory, memory, key_padding_mask=ids == 0, need_weights=False)
    torch.testing.assert_close(out, expected, rtol=tol, atol=tol)
    if dtype == torch.float64:
        upstream = torch.randn_like(out)
        ours_grads = torch.autograd.grad((out * upstream).sum(), [x, ours.w_k.weight, ours.w_v.bias])
        ref_grads = torch.autograd.grad((expected * upstream).sum(), [x, ref.in_proj_weight, ref.in_proj_bias])
        torch.testing.assert_close(ours_grads[0], ref_grads[0], rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(ours_grads[1], ref_grads[1][D_MODEL:2 * D_MODEL], rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(ours_grads[2], ref_grads[2][2 * D_MODEL:], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("norm_first", [False, True])
def test_fused_layers_match_torch_layers_with_gradients(norm_first):
    dtype = torch.float64
    torch.manual_seed(0)
    encoder = use_fused_attention(EncoderLayer(D_MODEL, HEADS, D_FF, 0.0, norm_first).to(dtype))
    decoder = use_fused_attention(DecoderLayer(D_MODEL, HEADS, D_FF, 0.0, norm_first).to(dtype))
    assert all(type(m) is FusedMultiHeadAttention and not m.need_weights
               for m in (*encoder.modules(), *decoder.modules()) if isinstance(m, MultiHeadAttention))
    ref_encoder = nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, 0.0, batch_first=True, norm_first=norm_first)
    ref_decoder = nn.TransformerDecoderLayer(D_MODEL, HEADS, D_FF, 0.0, batch_first=True, norm_first=norm_first)
    ref_encoder, ref_decoder = ref_encoder.to(dtype).train(), ref_decoder.to(dtype).train()
    copy_attention(encoder.self_attn, ref_encoder.self_attn)
    copy_feed_forward_and_norms(encoder, ref_encoder, ["norm1", "norm2"])
    copy_attention(decoder.self_attn, ref_decoder.self_attn)
    copy_attention(decoder.cross_attn, ref_decoder.multihead_attn)
    copy_feed_forward_and_norms(decoder, ref_decoder, ["norm1", "norm2", "norm3"])

    src = torch.tensor([[5, 6, 7, 8, 9, 4], [5, 6, 7, 0, 0, 0], [5, 6, 0, 0, 0, 0]])
    tgt = torch.tensor([[1, 6, 7, 8], [1, 6, 0, 0], [1, 6, 7, 0]])
    x = torch.randn(3, 6, D_MODEL, dtype=dtype, requires_grad=True)
    y = torch.randn(3, 4, D_MODEL, dtype=dtype, requires_grad=True)
    memory = encoder(x, padding_mask(src))
    out = decoder(y, memory, padding_mask(src), decoder_mask(tgt))
    ref_memory = ref_encoder(x, src_key_padding_mask=src == 0)
    causal = torch.ones(4, 4, dtype=torch.bool).triu(1)  # torch: True = not allowed
    expected = ref_decoder(y, ref_memory, tgt_mask=causal, tgt_key_padding_mask=tgt == 0,
                           memory_key_padding_mask=src == 0)
    torch.testing.assert_close(out, expected, **EXACT)
    upstream = torch.randn_like(out)
    ours = torch.autograd.grad((out * upstream).sum(), [x, y, encoder.self_attn.w_q.weight, decoder.cross_attn.w_v.weight])
    theirs = torch.autograd.grad((expected * upstream).sum(),
                                 [x, y, ref_encoder.self_attn.in_proj_weight, ref_decoder.multihead_attn.in_proj_weight])
    torch.testing.assert_close(ours[0], theirs[0], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(ours[1], theirs[1], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(ours[2], theirs[2][:D_MODEL], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(ours[3], theirs[3][2 * D_MODEL:], rtol=1e-10, atol=1e-12)


def test_fused_training_follows_the_readable_one_step_by_step():
    """Adam steps on the fused model give the readable model's parameters, and the no-grad
    forward after each step (which caches the packed weights) sees the updated weights."""
    def build(fused):
        torch.manual_seed(0)
        config = TransformerConfig(D_MODEL, HEADS, 2, 2, D_FF, dropout=0.0, max_len=16,
                                   attention="fused" if fused else "readable")
        return config.build(20, 20).double()

    models = {"fused": build(True), "readable": build(False)}
    optimizers = {name: torch.optim.Adam(m.parameters(), lr=1e-2) for name, m in models.items()}
    src = torch.tensor([[4, 5, 6, 7], [4, 5, 0, 0]])
    tgt = torch.tensor([[1, 8, 9, 10], [1, 8, 0, 0]])
    labels = torch.tensor([[8, 9, 10, 2], [8, 2, 0, 0]])
    masks = (padding_mask(src), decoder_mask(tgt))
    for _ in range(3):
        evaluated = {}
        for name, model in models.items():
            logits = model.train()(src, tgt, *masks)
            loss = nn.functional.cross_entropy(logits.reshape(-1, 20), labels.reshape(-1), ignore_index=0)
            optimizers[name].zero_grad()
            loss.backward()
            optimizers[name].step()
            with torch.no_grad():
                evaluated[name] = model.eval()(src, tgt, *masks)
        torch.testing.assert_close(evaluated["fused"], evaluated["readable"], rtol=1e-10, atol=1e-10)
    for (name, a), b in zip(models["fused"].named_parameters(), models["readable"].parameters()):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10, msg=lambda text, name=name: f"{name}: {text}")


def test_packed_weight_cache_is_neither_pickled_nor_copied(tmp_path):
    _, fused = readable_and_fused()
    x = torch.randn(2, 3, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        expected = fused(x, x, x)  # fills the cache
    assert fused._packed_cache["qkv"]["weight"].shape == (3 * D_MODEL, D_MODEL)
    twin = copy.deepcopy(fused)
    torch.save(fused, tmp_path / "attention.pt")
    loaded = torch.load(tmp_path / "attention.pt", weights_only=False)
    for other in (twin, loaded):
        assert "_packed_cache" not in other.__dict__
        with torch.no_grad():
            torch.testing.assert_close(other(x, x, x), expected, **EXACT)


def test_no_packed_weight_cache_inside_torch_compile(monkeypatch):
    """A compiled graph packs anew: a dict read and written between calls made CUDA training
    under ``torch.compile`` recompile at every step until dynamo's recompile limit."""
    _, fused = readable_and_fused()
    x = torch.randn(2, 3, D_MODEL, dtype=torch.float64)
    memory = torch.randn(2, 4, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        expected = fused(x, x, x), fused(x, memory, memory)  # self- and encoder-decoder attention
    del fused.__dict__["_packed_cache"]
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    with torch.no_grad():
        torch.testing.assert_close((fused(x, x, x), fused(x, memory, memory)), expected, **EXACT)
    assert "_packed_cache" not in fused.__dict__
