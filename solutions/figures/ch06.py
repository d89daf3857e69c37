"""Chapter 6's diagram: how a padding and a causal mask broadcast together and meet the scores.

Drawn in the book's figure language (:mod:`solutions.figures.diagram`). ``LAYOUTS`` maps
the file written to the function that lays the diagram out; :func:`solutions.figures.diagram.registry`
draws the SVG from it.
"""
from __future__ import annotations

from typing import Sequence

from .diagram import GAP, NOTE_SIZE, TENSOR_H, Diagram, Layout

__all__ = ["mask_example", "MASK_EXAMPLE_LENGTHS", "MASK_EXAMPLE_T", "LAYOUTS"]


#: Chapter 6's example batch: two target sentences of lengths 4 and 3, padded to T = 4.
MASK_EXAMPLE_LENGTHS = (4, 3)
MASK_EXAMPLE_T = 4


def mask_example(lengths: Sequence[int] = MASK_EXAMPLE_LENGTHS, T: int = MASK_EXAMPLE_T):
    """The grids chapter 6's diagram draws, computed from their definitions (True = may attend).

    Args:
        lengths: the real length of each sentence of the batch (at most ``T``).
        T: the padded length.

    Returns:
        ``(padding, causal, decoder)``: ``padding[b]`` is sentence ``b``'s one-row grid
        (the ``(1, 1, 1, T_k)`` slice of the padding mask), ``causal`` the ``(T, T)``
        lower-triangular grid, ``decoder[b]`` their broadcast logical and, ``(T, T)``.
    """
    if any(not 0 < n <= T for n in lengths):
        raise ValueError(f"every length must be in 1..T = {T}, got {tuple(lengths)}")
    padding = [[[j < n for j in range(T)]] for n in lengths]      # key j is a real token
    causal = [[j <= i for j in range(T)] for i in range(T)]        # query i sees keys 0..i
    decoder = [[[c and p for c, p in zip(c_row, pad[0])] for c_row in causal] for pad in padding]
    return padding, causal, decoder


def _mask_layout() -> Diagram:
    """Chapter 6: how a padding and a causal mask broadcast together and meet the scores."""
    lengths = MASK_EXAMPLE_LENGTHS
    padding, causal, combined = mask_example()
    d = Diagram(
        name="mask-broadcast",
        title="How the padding and causal masks broadcast and meet the scores",
        desc=("For two target sentences of lengths 4 and 3 padded to T = 4, a padding mask of shape"
              " (B, 1, 1, T_k) and a causal mask of shape (1, 1, T, T) are combined with a logical "
              "AND into a decoder mask of shape (B, 1, T, T). The mask is repeated over the h heads"
              " and meets the scores of shape (B, h, T_q, T_k) in a masked fill before the softmax,"
              " so masked weights are exactly 0."),
    )
    pad_cx, causal_cx = 150, 405
    legend = d.mask_legend(x=24, baseline=20 + NOTE_SIZE)
    d.note("rows: queries, columns: keys", x=legend.right + 18, top=20)
    top = legend.bottom + 18
    pad_captions = [f"b = {b}: length {n}" for b, n in enumerate(lengths)]
    _, pad_h = Diagram.mask_size(padding, "padding mask", "(B, 1, 1, T_k)", pad_captions)
    pad = d.mask(padding, label="padding mask", shape="(B, 1, 1, T_k)", captions=pad_captions,
                 cx=pad_cx, top=top)
    causal_box = d.mask([causal], label="causal mask", shape="(1, 1, T, T)", captions=["every b"],
                        cx=causal_cx, top=top)
    d.note(["one row per sentence,", "stretched over the", "T_q query rows"], x=pad.left, top=pad.bottom + 8)
    d.note(["query i may attend", "to keys 0 … i;", "one grid for every b"],
           x=causal_box.right + 14, top=causal_box.top + 30)

    both = d.operation("∧  logical and, broadcast", cx=(pad_cx + causal_cx) / 2 + 20,
                       top=causal_box.bottom + GAP + 4)
    d.arrow((pad.right - 24, pad.bottom), (both.cx - 40, both.top))
    d.arrow((causal_box.cx, causal_box.bottom), (both.cx + 40, both.top))

    decoder_top = both.bottom + GAP
    decoder = d.mask(combined, label="decoder mask", shape="(B, 1, T, T)",
                     captions=[f"b = {b}" for b in range(len(lengths))], cx=200, top=decoder_top)
    d.arrow((both.cx, both.bottom), (both.cx, both.bottom + GAP / 2), (decoder.cx, both.bottom + GAP / 2),
            (decoder.cx, decoder.top))
    scores = d.tensor("scores", "(B, h, T_q, T_k)", "scores", word="Q K^T / √d_{k}", cx=520,
                      top=decoder.cy - TENSOR_H / 2)
    d.note(["b = 1: query 3 may not", "see key 3 (padding)"], x=24, top=decoder.bottom + 8)

    fill = d.operation("masked_fill(¬mask, −∞)", cx=(decoder.cx + scores.cx) / 2,
                       top=max(decoder.bottom, scores.bottom) + GAP + 4)
    d.arrow((decoder.cx, decoder.bottom), (fill.cx - 50, fill.top))
    d.arrow((scores.cx, scores.bottom), (fill.cx + 50, fill.top))
    d.note(["the mask is repeated", "over the h heads"], x=fill.right + 14, top=fill.top - 4)

    softmax = d.operation("softmax over the keys", cx=fill.cx, after=fill)
    weights = d.tensor("weights", "(B, h, T_q, T_k)", "scores", word="", cx=fill.cx,
                       after=softmax)
    d.note(["False → weight exactly 0;", "each row still sums to 1"],
           x=weights.right + 14, top=weights.top + 6)

    table = [
        "padding  (2, 1, 1, 4)   (B, 1, 1, T_k)",
        "causal   (1, 1, 4, 4)   (1, 1, T, T)",
        "∧ mask   (2, 1, 4, 4)   (B, 1, T, T)",
        "scores   (2, h, 4, 4)   (B, h, T_q, T_k)",
    ]
    table_top = weights.bottom + 22
    d.note("the shapes, axis by axis (a size-1 axis stretches to match):", x=24, top=table_top)
    d.note(table, x=24, top=table_top + 22, mono=True)
    return d


#: Chapter diagrams: file (relative to the repository) → the function laying it out.
LAYOUTS: dict[str, Layout] = {
    "book/06_masking/figures/mask_broadcast.svg": _mask_layout,
}
