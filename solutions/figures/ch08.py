"""Chapter 8's diagram: the full encoder–decoder Transformer with every shape.

The reader's own map of the paper's Figure 1, drawn top-down in the book's figure
language of :mod:`solutions.figures.diagram`: the encoder column on the left (source ids →
embedding and positions → N encoder layers → ``memory``), the decoder column on the
right (target ids → embedding and positions → N decoder layers, each reading
``memory`` in its cross-attention → the output projection → logits → softmax), and
the mask each attention takes.

``LAYOUTS`` maps each file written to the function that lays the diagram out, as in
:mod:`solutions.figures.diagram`, which draws the SVG from it.
"""
from __future__ import annotations

from .diagram import GAP, Diagram, Layout

__all__ = ["LAYOUTS"]

FILE = "book/08_transformer/figures/encoder_decoder.svg"


def _encoder_decoder_layout() -> Diagram:
    """Chapter 8: source and target columns, the two stacks, memory into every cross-attention."""
    d = Diagram(
        name="encoder-decoder",
        title="The encoder–decoder Transformer",
        desc=("The full encoder-decoder Transformer, drawn top to bottom in two columns. Left, the "
              "encoder: source ids of shape (B, T_src) are embedded, scaled by the square root of "
              "d_model and summed with the positional encoding, giving x of shape (B, T_src, d_model); "
              "a stack of N encoder layers, each self-attention with the source padding mask then a "
              "feed-forward network, each sub-layer followed by Add & Norm, turns x into memory of "
              "shape (B, T_src, d_model). Right, the decoder: target ids of shape (B, T_tgt), shifted "
              "right, are embedded the same way into y of shape (B, T_tgt, d_model); a stack of N "
              "decoder layers applies masked self-attention with the decoder mask, cross-attention "
              "whose queries come from y and whose keys and values come from memory, with the source "
              "padding mask, and a feed-forward network, each followed by Add & Norm. The same memory "
              "enters the cross-attention of every decoder layer. The decoder output, hidden of shape "
              "(B, T_tgt, d_model), is projected by the generator to logits of shape "
              "(B, T_tgt, V_tgt), and a softmax over the vocabulary gives the probabilities of the "
              "next token. T_src and T_tgt are independent; cross-attention weights have shape "
              "(B, h, T_tgt, T_src)."),
    )
    enc_x, dec_x = 138, 468

    # The two inputs and their embeddings.
    src = d.tensor("src", "(B, T_src)", "other", word="source ids", cx=enc_x, top=20)
    tgt = d.tensor("tgt", "(B, T_tgt)", "other", word="target ids, shifted right", cx=dec_x, top=20)
    top = src.bottom + GAP
    embed_src = d.operation("embed × √d_{model} + PE", cx=enc_x, top=top)
    embed_tgt = d.operation("embed × √d_{model} + PE", cx=dec_x, top=top)
    d.down(src, embed_src)
    d.down(tgt, embed_tgt)
    top = embed_src.bottom + GAP
    x = d.tensor("x", "(B, T_src, d_model)", "other", cx=enc_x, top=top)
    y = d.tensor("y", "(B, T_tgt, d_model)", "other", cx=dec_x, top=top)
    d.down(embed_src, x)
    d.down(embed_tgt, y)

    # The encoder layer: self-attention, Add & Norm, FFN, Add & Norm.
    enc_ops = d.chain(("self-attention, src_mask", "Add & Norm", "feed-forward", "Add & Norm"),
                      cx=enc_x, top=x.bottom + GAP + 12)
    d.down(x, enc_ops[0])
    enc_frame = d.frame(enc_ops, "× N (encoder)")

    # The decoder layer: masked self-attention, cross-attention, FFN, each with Add & Norm.
    dec_ops = d.chain(("masked self-attention, tgt_mask", "Add & Norm", "cross-attention, src_mask",
                       "Add & Norm", "feed-forward", "Add & Norm"), cx=dec_x, top=y.bottom + GAP + 12)
    d.down(y, dec_ops[0])
    dec_frame = d.frame(dec_ops, "× N (decoder)")
    cross = dec_ops[2]

    # memory, and its way into every decoder layer's cross-attention.
    memory = d.tensor("memory", "(B, T_src, d_model)", "keys", word="keys and values",
                      cx=enc_x, top=enc_frame.bottom + GAP, after=enc_ops[-1])
    lane = (enc_frame.right + dec_frame.left) / 2
    d.arrow((memory.right, memory.cy), (lane, memory.cy), (lane, cross.cy), (cross.left, cross.cy))
    d.note(["the same memory feeds the", "cross-attention of all", "N decoder layers"],
           x=enc_x, top=memory.bottom + 8, anchor="middle")
    d.note(["cross-attention: Q = (decoder", "stream) W^Q, K = memory W^K,", "V = memory W^V;",
            "weights (B, h, T_tgt, T_src)"], x=enc_x, top=memory.bottom + 76, anchor="middle")

    # The output side.
    hidden = d.tensor("hidden", "(B, T_tgt, d_model)", "other", cx=dec_x, top=dec_frame.bottom + GAP,
                      after=dec_ops[-1])
    project = d.operation("generator: Linear(d_{model}, V_{tgt})", cx=dec_x, after=hidden)
    logits = d.tensor("logits", "(B, T_tgt, V_tgt)", "scores", word="", cx=dec_x, after=project)
    softmax = d.operation("softmax over the vocabulary", cx=dec_x, after=logits)
    probs = d.tensor("P(next token)", "(B, T_tgt, V_tgt)", "scores", word="", cx=dec_x,
                     after=softmax)
    d.note(["T_src and T_tgt are independent:", "nothing pads one to the other"],
           x=enc_x, top=probs.top + 4, anchor="middle")
    return d


#: Chapter diagrams: file (relative to the repository) → the function laying it out
#: (:func:`solutions.figures.diagram.registry` draws the SVG from it).
LAYOUTS: dict[str, Layout] = {FILE: _encoder_decoder_layout}
