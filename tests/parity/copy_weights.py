"""Copy weights from our modules into PyTorch's reference modules, and the layers' state-dict keys (used by the parity tests).

Imported as a plain module (``tests/parity`` has no ``__init__.py``; pytest puts
this folder on ``sys.path``).
"""
import torch


def copy_attention(ours, ref):
    """Our ``w_q/w_k/w_v/w_o`` into ``nn.MultiheadAttention``'s packed ``in_proj`` and ``out_proj``."""
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight]))
        ref.in_proj_bias.copy_(torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias]))
        ref.out_proj.weight.copy_(ours.w_o.weight)
        ref.out_proj.bias.copy_(ours.w_o.bias)


def copy_feed_forward_and_norms(ours, ref, norms):
    """FFN into ``linear1``/``linear2``; randomise our LayerNorms' γ, β (so a swapped
    norm would show) and copy them into the reference's norms of the same name."""
    with torch.no_grad():
        ref.linear1.load_state_dict(ours.feed_forward.linear1.state_dict())
        ref.linear2.load_state_dict(ours.feed_forward.linear2.state_dict())
        for name in norms:
            getattr(ours, name).weight.normal_()
            getattr(ours, name).bias.normal_()
            getattr(ref, name).load_state_dict(getattr(ours, name).state_dict())


def layer_state_dict_keys(attentions, norms):
    """The state-dict keys a layer's contract names, in order: each attention's
    ``w_q/w_k/w_v/w_o`` (weight, bias), the feed-forward's ``linear1``/``linear2``,
    then each LayerNorm (weight, bias). Used by the parity tests to state the
    exact key list of ``EncoderLayer`` and ``DecoderLayer``."""
    return [
        *(f"{attn}.w_{p}.{t}" for attn in attentions for p in "qkvo" for t in ("weight", "bias")),
        *(f"feed_forward.linear{i}.{t}" for i in (1, 2) for t in ("weight", "bias")),
        *(f"{norm}.{t}" for norm in norms for t in ("weight", "bias")),
    ]


def layer_pair(ours_cls, ref_cls, sizes, norm_first, dtype):
    """Our layer and PyTorch's reference layer built alike: the same ``sizes``
    (d_model, heads, d_ff), dropout 0, the same ``norm_first``, in ``dtype``
    (the reference batch-first). Their weights are still to be copied."""
    ours = ours_cls(*sizes, dropout=0.0, norm_first=norm_first).to(dtype)
    ref = ref_cls(*sizes, dropout=0.0, batch_first=True, norm_first=norm_first).to(dtype)
    return ours, ref
