"""The fused attention path: packed q/k/v projections for training and decoding.

Chapter 5's :class:`~solutions.multihead.MultiHeadAttention` projects the query,
the key and the value with three ``d_model × d_model`` linear maps: three matrix
products, and in the backward pass three more for the input's gradient, summed.
When the three inputs are the same tensor (self-attention, ``x``) the three maps
are one map onto ``3 d_model`` columns,

``[Q K V] = x [W^Q W^K W^V] + [b^Q b^K b^V]``,

one ``(B·T, d_model) × (d_model, 3 d_model)`` product; when only key and value are
the same tensor (encoder-decoder attention, ``memory``) ``[K V]`` is one product onto
``2 d_model`` columns. This is how ``torch.nn.MultiheadAttention`` stores its
weights (``in_proj_weight``); here the parameters stay the contract's ``w_q, w_k,
w_v, w_o`` (same ``state_dict``, same optimizer state) and are packed on the fly.

**One switch.** A model is built fused or readable, once:
``TransformerConfig(attention="fused")`` (the default; :mod:`solutions.configuration`)
makes :meth:`~solutions.configuration.TransformerConfig.build` call
:func:`use_fused_attention`, and the trainer, checkpoints, benchmarks and the command
line build every model that way; ``attention="readable"`` keeps chapter 5's class.
The package's :class:`~solutions.layers.EncoderLayer` and
:class:`~solutions.decoder.DecoderLayer` construct chapter 5's
:class:`~solutions.multihead.MultiHeadAttention`, as the book's notebooks do (their
constructors are exercise text), so :func:`use_fused_attention` puts, in each place
where one sits, a :class:`FusedMultiHeadAttention` made from it that *holds the same*
``w_q, w_k, w_v, w_o`` and dropout modules: same parameter tensors, ``state_dict``
names and optimizer references, no class changed on a live object. A
:class:`FusedMultiHeadAttention` starts with ``need_weights = False``; setting it True
(chapter 8's ``model.set_fused(False)``, to plot the weights) runs chapter 5's readable
forward, which it inherits.

Packing costs a copy of the weights (``torch.cat``, ``3 d_model²`` numbers, about
20 µs for ``d_model = 256`` on one CPU core) per forward pass while gradients are
recorded, beside a product of about 1 ms at ``B·T = 1024`` rows; the backward pass
splits the packed weight's gradient into views, no copy. Without gradients
(decoding) the packed weight is cached and rebuilt only when a parameter changes
(its version counter or its storage).

What it buys depends on the device. A GPU runs one kernel instead of three (and
one for the input's gradient instead of three plus two sums). On 2 CPU threads at
the bench's sizes it is neutral (``python -m solutions bench``: fused/separate
1.00×): the products are compute-bound, and the backward's gathering of the
``Q, K, V`` gradients into one ``(B·T, 3 d_model)`` tensor costs about what the two
saved additions did.

Paper: section 3.2.2 (``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)``).
"""
import torch
import torch.nn.functional as F
from torch import nn

from .masking import check_attention_mask, zero_fully_masked_rows
from .multihead import MultiHeadAttention, merge_heads, split_heads

__all__ = ["packed_projection", "FusedMultiHeadAttention", "use_fused_attention"]


def _compiling():
    """True while ``torch.compile`` traces (``torch.compiler.is_compiling``; False on a torch without it)."""
    return getattr(torch.compiler, "is_compiling", lambda: False)()


def packed_projection(x, linears, cache=None):
    """Apply several ``nn.Linear`` maps of the same input ``x`` as one matrix product.

    Args:
        x: the input of every map.
        linears: ``nn.Linear`` modules with the same ``in_features`` and with biases.
        cache: a dict kept by the caller; without gradients the packed weight is
            stored there and reused while no parameter has changed (by storage or
            version counter; an in-place edit through ``.data`` bypasses the counter:
            clear the dict after one). ``None`` = pack every time.

    Shape:
        x: ``(..., in_features)``
        output: a tuple with one ``(..., out_features_i)`` tensor per map.

    Returns:
        ``tuple(linear(x) for linear in linears)``, computed as
        ``x @ cat(W_i)ᵀ + cat(b_i)`` and split by columns (views, no copy).

    Paper: section 3.2.2 (the projections ``W^Q``, ``W^K``, ``W^V``).
    """
    if not linears or any(not isinstance(m, nn.Linear) or m.bias is None for m in linears):
        raise ValueError("linears must be a non-empty sequence of nn.Linear modules with bias")
    in_features = linears[0].in_features
    if any(m.in_features != in_features for m in linears) or x.size(-1) != in_features:
        raise ValueError(
            f"every map must take the input's last axis: x has {x.size(-1)} features, "
            f"the maps take {[m.in_features for m in linears]}"
        )
    parameters = [p for m in linears for p in (m.weight, m.bias)]
    # While autograd records, the packed weight must be part of this graph: pack anew.
    # Inside torch.compile, too (the compiler fuses the copy itself).
    recording = torch.is_grad_enabled() and any(p.requires_grad for p in parameters)
    use_cache = cache is not None and not recording and not _compiling()
    # A parameter has changed when its storage moved (.to, .double, assignment) or its
    # version counter did (in-place updates: optimizer steps, load_state_dict). The
    # cache keeps the packed storages alive, so no new storage can reuse an address.
    key = tuple((p.data_ptr(), p._version) for p in parameters) if use_cache else None
    if use_cache and cache.get("key") == key:
        weight, bias = cache["weight"], cache["bias"]
    else:
        weight = torch.cat([m.weight for m in linears])  # (sum out_i, in_features)
        bias = torch.cat([m.bias for m in linears])  # (sum out_i,)
        if use_cache:
            cache.update(key=key, weight=weight, bias=bias, sources=[p.detach() for p in parameters])
    packed = F.linear(x, weight, bias)  # (..., sum out_i)
    return packed.split([m.out_features for m in linears], dim=-1)  # one (..., out_i) per map


class FusedMultiHeadAttention(MultiHeadAttention):
    """:class:`~solutions.multihead.MultiHeadAttention` with packed projections on its fast path.

    Same constructor, parameters (``w_q, w_k, w_v, w_o``), ``state_dict`` keys and
    results. ``need_weights=False`` (how it is built): one matrix product for ``Q, K,
    V`` when ``query is key is value``, one for ``K, V`` when ``key is value``, three
    otherwise; then ``F.scaled_dot_product_attention`` (dropout on the attention
    weights in training mode); ``attn_weights`` is None. ``need_weights=True``: chapter
    5's readable forward, weights kept in ``attn_weights``.

    Args:
        d_model, num_heads, dropout: as for :class:`MultiHeadAttention`.

    Shape:
        query: ``(B, T_q, d_model)``
        key, value: ``(B, T_k, d_model)``
        mask: bool, True = may attend, broadcastable to ``(B, h, T_q, T_k)``
        output: ``(B, T_q, d_model)``

    Paper: section 3.2.2.
    """

    def __init__(self, d_model, num_heads, dropout=0.0):
        super().__init__(d_model, num_heads, dropout)
        self.need_weights = False

    @classmethod
    def sharing(cls, module):
        """A fused module that holds ``module``'s own ``w_q, w_k, w_v, w_o`` and dropout (not copies).

        Nothing is initialised (no parameter is made, so the random stream is untouched):
        the new module takes ``module``'s attributes and its own containers of the same
        submodules, so replacing one submodule of either later leaves the other alone.

        Args:
            module: a :class:`MultiHeadAttention`.

        Returns:
            A :class:`FusedMultiHeadAttention` on the fast path, in ``module``'s training mode,
            whose parameters are ``module``'s tensors.
        """
        if not isinstance(module, MultiHeadAttention):
            raise TypeError(f"module must be a MultiHeadAttention, got {type(module).__name__}")
        fused = cls.__new__(cls)
        fused.__dict__.update(module.__dict__)
        for container in ("_parameters", "_buffers", "_modules"):
            setattr(fused, container, dict(getattr(module, container)))
        fused.__dict__.pop("_packed_cache", None)
        fused.need_weights, fused.attn_weights = False, None
        return fused

    def forward(self, query, key, value, mask=None):
        if self.need_weights:
            return super().forward(query, key, value, mask)
        if query is key and key is value:  # self-attention: one product for Q, K, V
            q, k, v = packed_projection(query, (self.w_q, self.w_k, self.w_v), self._cache_for("qkv"))
        elif key is value:  # encoder-decoder attention: one product for K, V
            q = self.w_q(query)
            k, v = packed_projection(key, (self.w_k, self.w_v), self._cache_for("kv"))
        else:
            q, k, v = self.w_q(query), self.w_k(key), self.w_v(value)
        q = split_heads(q, self.num_heads)  # (B, h, T_q, d_k)
        k = split_heads(k, self.num_heads)  # (B, h, T_k, d_k)
        v = split_heads(v, self.num_heads)  # (B, h, T_k, d_k)
        check_attention_mask(mask, (q.size(0), self.num_heads, q.size(2), k.size(2)))
        dropout_p = self.dropout.p if self.training else 0.0
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)  # (B, h, T_q, d_k)
        context = zero_fully_masked_rows(context, mask)  # a query with no key: zeros, as from masked_softmax
        self.attn_weights = None
        return self.w_o(merge_heads(context))  # (B, T_q, d_model)

    def _cache_for(self, group):
        """The dict that keeps ``group``'s packed weight between calls (``None`` inside ``torch.compile``).

        Kept in ``__dict__``, not as a buffer, so it has no ``state_dict`` entry. A compiled
        graph packs anew (the compiler fuses the copy), and reading a dict that changes
        between calls would make it recompile on every step.
        """
        if _compiling():
            return None
        return self.__dict__.setdefault("_packed_cache", {}).setdefault(group, {})

    def __getstate__(self):
        state = super().__getstate__()  # nn.Module's: a copy of __dict__
        state.pop("_packed_cache", None)  # derived from the parameters: never pickled or deep-copied
        return state


def use_fused_attention(module):
    """Put a :class:`FusedMultiHeadAttention` where ``module`` holds chapter 5's attention; returns ``module``.

    Every submodule whose class is exactly :class:`MultiHeadAttention` is replaced, in
    its parent, by :meth:`FusedMultiHeadAttention.sharing` of it: the same parameter
    tensors under the same ``state_dict`` names (an optimizer built before keeps
    working), on the fast path. Subclasses of your own are left as they are.
    :meth:`~solutions.configuration.TransformerConfig.build` calls it for
    ``attention="fused"``; build with ``attention="readable"`` for chapter 5's class.

    Args:
        module: any ``nn.Module`` (a layer, a :class:`~solutions.model.Transformer`).

    Returns:
        ``module``; when ``module`` itself is a :class:`MultiHeadAttention`, the fused module
        sharing its parameters.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    if type(module) is MultiHeadAttention:
        return FusedMultiHeadAttention.sharing(module)
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is MultiHeadAttention:
                setattr(parent, name, FusedMultiHeadAttention.sharing(child))
    return module
