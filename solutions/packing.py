"""The packed training path: the position-wise work on real tokens only.

A batch of sentences of different lengths is padded to ``(B, T)``, and the model
computes every position, padding included: the q/k/v/output projections, the
feed-forward network, the LayerNorms, dropout and the residual additions, and the
generator over the whole target vocabulary. The loss ignores the padded positions,
and no real position reads one (masks hide padded keys), so that work changes
nothing. All of it is position-wise ("applied to each position separately and
identically", section 3.3) except attention's two products, ``q kᵀ`` and
``weights · v``, which need each sentence's positions side by side.

:func:`packed_logits` runs a :class:`~solutions.model.Transformer` that way: it gathers
the rows of real tokens once (``B·T`` positions → ``N`` rows of ``d_model``), runs the
model's own embeddings, layers and norms on ``(N, d_model)``, and gives each attention
module a :class:`~solutions.fused.PackedMask` in place of its mask, which scatters the
rows onto the ``(B, h, T, d_k)`` grid for the two products and gathers the result back
(:meth:`~solutions.fused.FusedMultiHeadAttention._forward_rows`); the generator runs
only on the rows whose label is not padding. Same modules, parameters and
``state_dict``; the same loss and gradients as the padded forward up to rounding
(``tests/parity/test_packing_parity.py``); dropout draws its masks for ``N`` rows
instead of ``B·T``, so with dropout the random numbers differ, not their law.

**One switch**, as for the fused attention: a model built with
``TransformerConfig(attention="fused")`` takes packed rows (:func:`takes_packed_rows`),
and the trainer's steps on the CPU and ``bench``'s "ours" row run this path (no GPU has run
it yet: a CUDA run trains padded); ``attention="readable"`` keeps the padded computation.
Evaluation and decoding are unchanged.

What it saves is the padding's share of the position-wise work: about a quarter at
``bench``'s random batches, about a tenth in Multi30k's length-bucketed batches.

Paper: section 3.3 (position-wise layers), 3.2.3 (masks), 5.1 (batches of similar length).
"""
import torch

from .fused import FusedMultiHeadAttention, PackedMask, PackedRows
from .masking import decoder_mask, padding_mask
from .multihead import MultiHeadAttention

__all__ = ["takes_packed_rows", "packed_logits"]


def takes_packed_rows(model):
    """True when every attention module of ``model`` can run on packed rows.

    That is, each is a :class:`~solutions.fused.FusedMultiHeadAttention` on its fast path
    (``need_weights`` False): a model built with ``attention="fused"``, the default, and
    not switched to its readable path by ``model.set_fused(False)``.

    Args:
        model: an ``nn.Module`` (a :class:`~solutions.model.Transformer`).

    Returns:
        ``bool``; False for a model without attention modules.
    """
    attention = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    return bool(attention) and all(isinstance(m, FusedMultiHeadAttention) and not m.need_weights
                                   for m in attention)


def _embed_rows(ids, rows, embed, positional):
    """``positional(embed(ids))`` at the rows only: token embedding, its position's encoding, dropout.

    Shape:
        ids: ``(B, T)``; output: ``(N, d_model)``.
    """
    if rows.length > positional.pe.size(0):
        raise ValueError(f"sequence length {rows.length} exceeds max_len = {positional.pe.size(0)}")
    tokens = ids.reshape(-1).index_select(0, rows.index)  # (N,)
    positions = rows.index % rows.length  # (N,): t of b·T + t
    return positional.dropout(embed(tokens) + positional.pe[positions])  # (N, d_model)


def packed_logits(model, src, tgt_in, labels, pad_id=0):
    """The logits of the target positions whose label is not padding, computed on real tokens only.

    Equal, up to rounding, to ``model(src, tgt_in, padding_mask(src), decoder_mask(tgt_in))``
    at those positions (with dropout off; with dropout on, different masks of the same law),
    and so is every gradient of a loss of them. The masks are the ones the trainer and
    ``bench`` use: ``padding_mask(src, pad_id)`` for the encoder and the cross-attention,
    ``decoder_mask(tgt_in, pad_id)`` (causal and not padding) for the decoder.

    Args:
        model: a :class:`~solutions.model.Transformer` that :func:`takes_packed_rows`.
        src: source ids; tgt_in: the decoder input (``<sos>`` first); labels: the ids to predict
            (:func:`~solutions.training.make_decoder_io`'s pair).
        pad_id: the id of ``<pad>``.

    Shape:
        src: ``(B, S)``; tgt_in, labels: ``(B, T)``.
        output: ``logits (M, V_tgt)`` and ``targets (M,)``, for the ``M`` positions whose label
        is not ``pad_id``, in row-major order (``labels[labels != pad_id]``).

    Returns:
        ``(logits, targets)``: e.g. ``F.cross_entropy(logits, targets, label_smoothing=0.1)``
        is the padded loss with ``ignore_index=pad_id``.

    Raises:
        ValueError: the model holds attention that cannot take packed rows (built
            ``attention="readable"``, or switched by ``set_fused(False)``), or the shapes
            do not fit.

    Paper: section 3 (the model), 3.3 (position-wise layers).
    """
    if not takes_packed_rows(model):
        raise ValueError("packed rows need every attention module on the fused fast path: build the model with "
                         "TransformerConfig(attention='fused') and leave model.set_fused(True)")
    if src.dim() != 2 or tgt_in.dim() != 2 or labels.shape != tgt_in.shape or src.size(0) != tgt_in.size(0):
        raise ValueError(f"expected src (B, S), tgt_in and labels (B, T) with one B, got {tuple(src.shape)}, "
                         f"{tuple(tgt_in.shape)} and {tuple(labels.shape)}")
    src_rows = PackedRows(src != pad_id)
    # A position is computed when the decoder reads a token there or a label is predicted there.
    tgt_rows = PackedRows((tgt_in != pad_id) | (labels != pad_id))
    src_mask, tgt_mask = padding_mask(src, pad_id), decoder_mask(tgt_in, pad_id)  # True = may attend
    encoder_self = PackedMask(src_rows, src_rows, src_mask)
    decoder_self = PackedMask(tgt_rows, tgt_rows, tgt_mask)
    decoder_cross = PackedMask(tgt_rows, src_rows, src_mask)

    memory = _embed_rows(src, src_rows, model.src_embed, model.positional)  # (N_src, d_model)
    for layer in model.encoder_layers:
        memory = layer(memory, encoder_self)
    if model.norm_first:
        memory = model.encoder_norm(memory)

    hidden = _embed_rows(tgt_in, tgt_rows, model.tgt_embed, model.positional)  # (N_tgt, d_model)
    for layer in model.decoder_layers:
        hidden = layer(hidden, memory, decoder_cross, decoder_self)
    if model.norm_first:
        hidden = model.decoder_norm(hidden)

    targets = labels.reshape(-1).index_select(0, tgt_rows.index)  # (N_tgt,)
    predicted = targets != pad_id  # (N_tgt,): rows the decoder reads but nothing is predicted at
    if int(predicted.sum()) < len(tgt_rows):
        hidden, targets = hidden[predicted], targets[predicted]  # (M, d_model), (M,)
    return model.project(hidden), targets  # (M, V_tgt), (M,)
