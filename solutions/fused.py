"""The fused attention path: packed q/k/v projections for training and decoding, and packed rows.

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

**Packed rows.** Given a :class:`PackedMask` in place of its mask, a
:class:`FusedMultiHeadAttention` takes ``(N, d_model)`` rows of real tokens (named by
:class:`PackedRows`) instead of a padded ``(B, T, d_model)`` batch: it projects the rows,
puts them on the batch's ``(B, h, T, d_k)`` grid for the two products, and returns rows.
:mod:`solutions.packing` trains that way, with the layers' own ``forward``.

**Dropout's random numbers.** ``nn.Dropout`` on the CPU draws its mask with
``bernoulli_``: on processors other than Intel's (where PyTorch uses MKL's parallel
generator) that is one thread drawing a 64-bit uniform number per element, about 8 ns
each, 14–21 % of a training step at the bench's sizes. :class:`FastDropout` is an
``nn.Dropout`` (same ``p``, no parameters, no ``state_dict`` entry) whose CPU mask comes
from 16 random bits per element (one 64-bit draw of PyTorch's generator gives four):
about a quarter of the cost, seeded by ``torch.manual_seed`` like any other draw. The
drop probability is ``p`` rounded to a multiple of ``2⁻¹⁶`` (0.1 becomes 0.1000061) and
the kept values are scaled by ``1 / (1 - that)``, so the expectation is still ``x``.
On other devices, inside ``torch.compile`` and for dtypes other than float32/float64 it
is ``nn.Dropout``. :func:`use_fast_dropout` puts one where a model holds an
``nn.Dropout``; ``attention="fused"`` builds call it after :func:`use_fused_attention`.
With attention dropout on the CPU, :class:`FusedMultiHeadAttention` computes the
weights itself and drops them with its ``dropout`` module: PyTorch's CPU kernels for
``F.scaled_dot_product_attention`` have no dropout, and with ``dropout_p > 0`` it falls
back to these same products and ``bernoulli_``.

Paper: section 3.2.2 (``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)``), 5.4 (``P_drop``).
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

from .masking import check_attention_mask, zero_fully_masked_rows
from .multihead import MultiHeadAttention, merge_heads, split_heads

__all__ = ["packed_projection", "PackedRows", "PackedMask", "FusedMultiHeadAttention", "use_fused_attention",
           "dropout_keep_mask", "FastDropout", "use_fast_dropout"]

# Dropout masks come from 16-bit draws: 2**16 levels of probability.
_LEVELS = 1 << 16


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
    packed = _packed_linear(x, linears, cache)  # (..., sum out_i)
    return packed.split([m.out_features for m in linears], dim=-1)  # one (..., out_i) per map


def _packed_linear(x, linears, cache=None):
    """:func:`packed_projection` before the split: ``x @ cat(W_i)ᵀ + cat(b_i)``, ``(..., sum out_i)``."""
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
    return F.linear(x, weight, bias)  # (..., sum out_i)


class PackedRows:
    """Where the rows of real tokens sit in a padded batch: the layout of the packed path.

    The packed training path (:mod:`solutions.packing`) runs the position-wise layers on
    ``(N, d_model)``, one row per token that is not padding, instead of ``(B, T, d_model)``;
    attention needs the ``(B, h, T, d_k)`` grid back for its products. This names the rows.

    Args:
        keep: bool ``(B, T)``, True where a position has a row.

    Attributes:
        index: ``(N,)`` LongTensor, the flat positions ``b · T + t`` of the rows, in order.
        sentence, position: ``(N,)`` LongTensors, each row's ``b`` and ``t``.
        batch, length: ``B`` and ``T``.

    Paper: section 3.3 ("applied to each position separately and identically").
    """

    def __init__(self, keep):
        if not isinstance(keep, torch.Tensor) or keep.dtype != torch.bool or keep.dim() != 2:
            raise ValueError(f"keep must be a boolean (B, T) tensor, got {getattr(keep, 'dtype', type(keep))} "
                             f"{tuple(getattr(keep, 'shape', ()))}")
        self.batch, self.length = keep.shape
        self.index = keep.reshape(-1).nonzero().squeeze(1)  # (N,)
        self.sentence, self.position = self.index // self.length, self.index % self.length  # (N,) each
        self._heads_index = {}  # (heads, parts) -> _head_rows

    def __len__(self):
        return self.index.numel()

    def to_heads(self, rows, num_heads, parts=1):
        """The rows on the batch's grid, split into heads: zeros at the positions without a row.

        Each grid is contiguous in the heads' layout, so the attention products read it as it
        is (a padded ``(B, T, d_model)`` batch split by :func:`split_heads` is a transposed
        view, which they copy first); ``parts`` maps packed side by side (``[Q K V]``, ``[K V]``)
        go onto their grids in one copy.

        Args:
            rows: one row per position of this layout.
            num_heads: ``h``.
            parts: how many maps' outputs ``rows`` holds side by side.

        Shape:
            rows: ``(N, parts · h · d_k)``; output: ``(parts, B, h, T, d_k)``.
        """
        if rows.dim() != 2 or rows.size(0) != len(self) or rows.size(1) % (parts * num_heads):
            raise ValueError(f"rows must have shape (N = {len(self)}, parts · h · d_k) with parts = {parts}, "
                             f"h = {num_heads}, got {tuple(rows.shape)}")
        d_k = rows.size(1) // (parts * num_heads)
        grid = rows.new_zeros(parts * self.batch * num_heads * self.length, d_k)  # (parts·B·h·T, d_k)
        # (N·parts·h, d_k) into it; in place: the zeros are no part of the graph
        grid.index_copy_(0, self._head_rows(num_heads, parts), rows.reshape(-1, d_k))
        return grid.view(parts, self.batch, num_heads, self.length, d_k)  # (parts, B, h, T, d_k)

    def from_heads(self, grid):
        """The rows of ``grid`` at this layout's positions, heads concatenated: the inverse of :meth:`to_heads`.

        Shape:
            grid: ``(B, h, T, d_k)``; output: ``(N, h · d_k)``.
        """
        if grid.dim() != 4 or grid.size(0) != self.batch or grid.size(2) != self.length:
            raise ValueError(f"grid must have shape (B, h, T, d_k) = ({self.batch}, h, {self.length}, d_k), "
                             f"got {tuple(grid.shape)}")
        batch, num_heads, length, d_k = grid.shape
        rows = grid.reshape(-1, d_k).index_select(0, self._head_rows(num_heads, 1))  # (N·h, d_k)
        return rows.view(len(self), num_heads * d_k)  # (N, h · d_k)

    def _head_rows(self, num_heads, parts):
        """Where each row's heads sit in a ``(parts·B·h·T, d_k)`` grid: ``((c·B + b)·h + j)·T + t`` for
        row ``(b, t)``, map ``c`` and head ``j``, in the order of the rows' ``(N, parts, h, d_k)``
        layout. Made once per number of heads and parts.

        Shape:
            output: ``(N · parts · h,)``.
        """
        if (num_heads, parts) not in self._heads_index:
            maps = torch.arange(parts, device=self.index.device)[None, :, None]  # (1, parts, 1)
            heads = torch.arange(num_heads, device=self.index.device)[None, None, :]  # (1, 1, h)
            sentence, position = self.sentence[:, None, None], self.position[:, None, None]  # (N, 1, 1) each
            flat = ((maps * self.batch + sentence) * num_heads + heads) * self.length + position  # (N, parts, h)
            self._heads_index[num_heads, parts] = flat.reshape(-1)  # (N·parts·h,)
        return self._heads_index[num_heads, parts]


class PackedMask:
    """What a :class:`FusedMultiHeadAttention` takes in place of its mask on the packed path.

    Its ``query`` and ``key``/``value`` inputs are then packed rows, ``(N_q, d_model)`` and
    ``(N_k, d_model)``: the layers (:class:`~solutions.layers.EncoderLayer`,
    :class:`~solutions.decoder.DecoderLayer`) pass their mask argument on to attention
    unchanged, so the book's layers run the packed path as they are. What every layer would
    derive from the mask again is derived once, here: :meth:`score_bias` and
    :attr:`some_query_has_no_key`.

    Args:
        query: the :class:`PackedRows` of the queries.
        key: the :class:`PackedRows` of the keys and values.
        mask: bool, True = may attend, broadcastable to ``(B, h, T_q, T_k)`` on the padded
            grid (``padding_mask(src)``, ``decoder_mask(tgt)``), or None.

    Attributes:
        some_query_has_no_key: whether a query row (a real one) may attend no key; only then
            does attention zero such queries (:func:`~solutions.masking.zero_fully_masked_rows`).

    Paper: section 3.2.3 (masking inside attention).
    """

    def __init__(self, query, key, mask):
        if not isinstance(query, PackedRows) or not isinstance(key, PackedRows):
            raise TypeError("query and key must be PackedRows")
        if query.batch != key.batch:
            raise ValueError(f"query and key rows come from batches of {query.batch} and {key.batch} sentences")
        heads = mask.size(-3) if isinstance(mask, torch.Tensor) and mask.dim() >= 3 else 1
        check_attention_mask(mask, (query.batch, heads, query.length, key.length))
        self.query, self.key, self.mask = query, key, mask
        self.some_query_has_no_key = False
        if mask is not None:
            attends = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape)).any(dim=-1)  # (B|1, h|1, T_q|1)
            attends = attends.expand(query.batch, heads, query.length)  # (B, h|1, T_q)
            self.some_query_has_no_key = not bool(attends[query.sentence, :, query.position].all())
        self._biases = {}

    def score_bias(self, num_heads, dtype):
        """The mask as a term added to the scores: 0 where a query may attend, the dtype's most
        negative number where not (not ``-inf``: a query with no key stays finite), made once per
        heads and dtype.

        Shape:
            output: ``(B · h, T_q, T_k)``, contiguous, or None without a mask.
        """
        if self.mask is None:
            return None
        key = (num_heads, dtype)
        if key not in self._biases:
            shape = (self.query.batch, num_heads, self.query.length, self.key.length)
            bias = torch.zeros(shape, dtype=dtype, device=self.mask.device)  # (B, h, T_q, T_k)
            bias.masked_fill_(~self.mask, torch.finfo(dtype).min)
            self._biases[key] = bias.view(-1, *shape[2:])  # (B·h, T_q, T_k)
        return self._biases[key]


class FusedMultiHeadAttention(MultiHeadAttention):
    """:class:`~solutions.multihead.MultiHeadAttention` with packed projections on its fast path.

    Same constructor, parameters (``w_q, w_k, w_v, w_o``), ``state_dict`` keys and
    results. ``need_weights=False`` (how it is built): one matrix product for ``Q, K,
    V`` when ``query is key is value``, one for ``K, V`` when ``key is value``, three
    otherwise; then ``F.scaled_dot_product_attention`` (dropout on the attention
    weights in training mode; on the CPU, whose kernels have no dropout, the same
    products written out and the weights dropped by its ``dropout`` module);
    ``attn_weights`` is None. ``need_weights=True``: chapter
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
        if isinstance(mask, PackedMask):  # rows of real tokens only (solutions.packing)
            return self._forward_rows(query, key, value, mask)
        if self.need_weights:
            return super().forward(query, key, value, mask)
        q, k, v = self._project(query, key, value)  # (B, T_q, d_model), (B, T_k, d_model) x 2
        q = split_heads(q, self.num_heads)  # (B, h, T_q, d_k)
        k = split_heads(k, self.num_heads)  # (B, h, T_k, d_k)
        v = split_heads(v, self.num_heads)  # (B, h, T_k, d_k)
        context = self._attend(q, k, v, mask)  # (B, h, T_q, d_k)
        self.attn_weights = None
        return self.w_o(merge_heads(context))  # (B, T_q, d_model)

    def _project(self, query, key, value):
        """``w_q(query), w_k(key), w_v(value)``, one product for the maps whose input is the same tensor."""
        if query is key and key is value:  # self-attention: one product for Q, K, V
            return packed_projection(query, (self.w_q, self.w_k, self.w_v), self._cache_for("qkv"))
        if key is value:  # encoder-decoder attention: one product for K, V
            k, v = packed_projection(key, (self.w_k, self.w_v), self._cache_for("kv"))
            return self.w_q(query), k, v
        return self.w_q(query), self.w_k(key), self.w_v(value)

    def _attend(self, q, k, v, mask):
        """The heads' attention, ``softmax(q kᵀ / √d_k) v``, dropped out in training mode.

        Shape:
            q: ``(B, h, T_q, d_k)``; k, v: ``(B, h, T_k, d_k)``; mask: bool, True = may
            attend, broadcastable to ``(B, h, T_q, T_k)``, or None; output: ``(B, h, T_q, d_k)``,
            zeros for a query with no key.
        """
        check_attention_mask(mask, (q.size(0), self.num_heads, q.size(2), k.size(2)))
        dropout_p = self.dropout.p if self.training else 0.0
        if dropout_p > 0.0 and q.device.type == "cpu" and not _compiling():
            # SDPA's CPU kernels have no dropout: it would run these products with bernoulli_'s mask.
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)  # (B, h, T_q, T_k)
            if mask is not None:  # the most negative float, not -inf: a query with no key stays finite
                scores.masked_fill_(~mask, torch.finfo(scores.dtype).min)  # in place: nothing saved it
            context = self.dropout(torch.softmax(scores, dim=-1)) @ v  # (B, h, T_q, d_k)
        else:
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)  # (B, h, T_q, d_k)
        return zero_fully_masked_rows(context, mask)  # a query with no key: zeros, as from masked_softmax

    def _forward_rows(self, query, key, value, packed):
        """Attention between packed rows: the projections on the rows, the heads' products on the batch's grid.

        The rows are put on zero-filled ``(B, h, T, d_k)`` grids for the products ``q kᵀ`` and
        ``weights · v`` only (the zeros sit where ``packed.mask`` hides keys, or at queries
        whose output is not gathered back). The scaling by ``1/√d_k`` and the mask are one
        term of the scores' product (``baddbmm``), the mask's bias made once per batch.

        Shape:
            query: ``(N_q, d_model)``, the rows ``packed.query`` names; key, value:
            ``(N_k, d_model)``, the rows ``packed.key`` names; output: ``(N_q, d_model)``.
        """
        if self.need_weights:
            raise ValueError("packed rows run on the fast path only: this module keeps its attention "
                             "weights (need_weights=True, e.g. after model.set_fused(False)); set it False")
        heads = self.num_heads
        if query is key and key is value:  # self-attention: one product for Q, K, V, one copy onto the grids
            if packed.query is not packed.key:
                raise ValueError("self-attention on packed rows needs one PackedRows for the queries and the keys")
            qkv = _packed_linear(query, (self.w_q, self.w_k, self.w_v), self._cache_for("qkv"))  # (N, 3 d_model)
            q, k, v = packed.query.to_heads(qkv, heads, parts=3).unbind(0)  # (B, h, T, d_k) each
        elif key is value:  # encoder-decoder attention: one product for K, V
            q = packed.query.to_heads(self.w_q(query), heads)[0]  # (B, h, T_q, d_k)
            kv = _packed_linear(key, (self.w_k, self.w_v), self._cache_for("kv"))  # (N_k, 2 d_model)
            k, v = packed.key.to_heads(kv, heads, parts=2).unbind(0)  # (B, h, T_k, d_k) each
        else:
            q = packed.query.to_heads(self.w_q(query), heads)[0]  # (B, h, T_q, d_k)
            k = packed.key.to_heads(self.w_k(key), heads)[0]  # (B, h, T_k, d_k)
            v = packed.key.to_heads(self.w_v(value), heads)[0]  # (B, h, T_k, d_k)
        batch, _, query_len, d_k = q.shape
        dropout_p = self.dropout.p if self.training else 0.0
        if dropout_p > 0.0 and q.device.type == "cpu" and not _compiling():
            # SDPA's CPU kernels have no dropout: the products written out, weights dropped by our module.
            q3 = q.view(batch * heads, query_len, d_k)  # (B·h, T_q, d_k)
            k3 = k.view(batch * heads, -1, d_k)  # (B·h, T_k, d_k)
            bias = packed.score_bias(heads, q.dtype)  # (B·h, T_q, T_k) or None
            product = k3.new_zeros(()) if bias is None else bias
            scores = torch.baddbmm(product, q3, k3.transpose(1, 2), alpha=1.0 / math.sqrt(d_k))  # (B·h, T_q, T_k)
            weights = self.dropout(torch.softmax(scores, dim=-1))  # (B·h, T_q, T_k)
            context = torch.bmm(weights, v.view(batch * heads, -1, d_k)).view(q.shape)  # (B, h, T_q, d_k)
        else:
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=packed.mask, dropout_p=dropout_p)
        if packed.some_query_has_no_key:
            context = zero_fully_masked_rows(context, packed.mask)  # (B, h, T_q, d_k)
        self.attn_weights = None
        return self.w_o(packed.query.from_heads(context))  # (N_q, d_model)

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


def dropout_keep_mask(shape, p, dtype=torch.float32, generator=None):
    """Dropout's scaled keep-mask on the CPU, from 16 random bits per element.

    Each element is dropped when its 16-bit draw falls below ``round(p · 2¹⁶)``, so
    with probability ``p' = round(p · 2¹⁶) / 2¹⁶`` (``|p' - p| ≤ 2⁻¹⁷``), and kept
    elements are ``1 / (1 - p')``. The bits are PyTorch's own (``random_`` over all
    64 bits of ``int64`` words, four draws a word), so ``torch.manual_seed`` or
    ``generator`` makes the mask reproducible.

    Args:
        shape: the mask's shape (that of the tensor to drop).
        p: the drop probability, ``0 ≤ p < 1``.
        dtype: a floating-point dtype of the mask.
        generator: a CPU ``torch.Generator``; default: PyTorch's global one.

    Shape:
        output: ``shape``.

    Returns:
        A tensor of ``0`` and ``1 / (1 - p')``: ``x * mask`` is ``x`` dropped out, with
        expectation ``x``.

    Paper: section 5.4 (residual dropout, ``P_drop``).
    """
    if not 0.0 <= p < 1.0:
        raise ValueError(f"p must be in [0, 1), got {p}")
    if not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point dtype, got {dtype}")
    drop = round(p * _LEVELS)  # an element is dropped when its draw (0 .. 2**16 - 1) is below this
    numel = math.prod(shape)
    words = torch.empty((numel + 3) // 4, dtype=torch.int64)
    words.random_(-(1 << 63), None, generator=generator)  # every bit uniform: the full int64 range
    draws = words.view(torch.int16)[:numel].view(shape)  # uniform on -2**15 .. 2**15 - 1
    # In the mask's own dtype: the draws converted, compared in place (1.0 kept, 0.0 dropped), scaled in
    # place; three passes over one buffer, about 3.5x faster than a boolean comparison converted afterwards.
    mask = torch.empty(shape, dtype=dtype).copy_(draws)
    return mask.ge_(drop - _LEVELS // 2).mul_(_LEVELS / (_LEVELS - drop))


class FastDropout(nn.Dropout):
    """``nn.Dropout`` whose CPU mask is :func:`dropout_keep_mask` (16 random bits an element).

    Same constructor (``p``, ``inplace``), attributes and ``state_dict`` (none) as
    ``nn.Dropout``; in evaluation mode, and for ``p = 0``, the identity. In training mode
    on a CPU float32/float64 tensor it multiplies by :func:`dropout_keep_mask` (the drop
    probability ``p`` rounded to a multiple of ``2⁻¹⁶``); elsewhere (another device or
    dtype, ``p = 1``, inside ``torch.compile``) it is ``F.dropout``. The gradient is the
    same mask times the output's gradient, as for ``nn.Dropout``.

    Args:
        p: the drop probability (the paper's ``P_drop``).
        inplace: drop in ``x`` itself.

    Shape:
        x: any; output: the same.

    Paper: section 5.4.
    """

    def forward(self, x):
        if not self.training or self.p == 0.0:
            return x
        if x.device.type != "cpu" or x.dtype not in (torch.float32, torch.float64) or self.p >= 1.0 or _compiling():
            return F.dropout(x, self.p, True, self.inplace)
        mask = dropout_keep_mask(x.shape, self.p, x.dtype)  # 0 or 1 / (1 - p'), x's shape
        return x.mul_(mask) if self.inplace else x * mask


def use_fast_dropout(module):
    """Put a :class:`FastDropout` where ``module`` holds an ``nn.Dropout``; returns ``module``.

    Every submodule whose class is exactly ``nn.Dropout`` is replaced, in its parent, by a
    :class:`FastDropout` with its ``p``, ``inplace`` and training mode (a dropout module has
    no parameters or buffers: the ``state_dict`` is unchanged). Subclasses are left as they are.
    :meth:`~solutions.configuration.TransformerConfig.build` calls it for ``attention="fused"``.

    Args:
        module: any ``nn.Module``.

    Returns:
        ``module``; when ``module`` itself is an ``nn.Dropout``, a new :class:`FastDropout`.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")

    def fast(dropout):
        replacement = FastDropout(dropout.p, dropout.inplace)
        return replacement.train(dropout.training)

    if type(module) is nn.Dropout:
        return fast(module)
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Dropout:
                setattr(parent, name, fast(child))
    return module
