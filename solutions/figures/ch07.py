"""Chapter 7's diagram: the encoder layer with its two residual paths, post-norm (the
paper) and pre-norm (modern models) side by side, with every shape.

It uses only the vocabulary of :mod:`solutions.figures.diagram` (tensors with their shapes,
operations, arrows, frames, notes). A residual path is an elbow arrow that leaves the
main flow before a sub-layer and enters the ``+`` after it from the left.

``LAYOUTS`` maps each file written to the function that lays the diagram out, as in
:mod:`solutions.figures.diagram`, which draws the SVG from it.
"""
from __future__ import annotations

from .diagram import GAP, Diagram, Layout, Rect

__all__ = ["LAYOUTS"]

#: How far left of a column's centre its residual paths run.
SKIP_OFFSET = 122


def _skip(d: Diagram, cx: float, branch_y: float, plus: Rect) -> None:
    """A residual path: from the main flow at ``branch_y`` round the left into ``plus``."""
    lane = cx - SKIP_OFFSET
    d.arrow((cx, branch_y), (lane, branch_y), (lane, plus.cy), (plus.left, plus.cy))


def _column(d: Diagram, cx: float, top: float, norm_first: bool) -> list[Rect]:
    """One encoder layer, top to bottom; returns every element drawn (for the frame)."""
    drawn = []
    x = d.tensor("x", "(B, T, d_model)", "other", word="input", cx=cx, top=top)
    drawn.append(x)
    above = x
    sublayers = (("multi-head attention", "norm1"), ("feed-forward (FFN)", "norm2"))
    for name, norm in sublayers:
        layer_norm = f"LayerNorm ({norm})"
        # pre-norm normalises the sub-layer's input; post-norm (the paper) the sum after the +
        steps = [layer_norm, name, "+"] if norm_first else [name, "+", layer_norm]
        ops = d.chain(steps, cx=cx, after=above)
        _skip(d, cx, above.bottom + GAP / 2, ops[steps.index("+")])
        drawn += ops
        above = ops[-1]
    out = d.tensor("output", "(B, T, d_model)", "other", word="", cx=cx, after=above)
    drawn.append(out)
    drawn.append(Rect(cx - SKIP_OFFSET, x.top, 0, out.bottom - x.top))  # the residual lane, inside the frame
    return drawn


def _encoder_layer_layout() -> Diagram:
    """Chapter 7: the encoder layer, post-norm and pre-norm, with the residual paths."""
    d = Diagram(
        name="encoder-layer-norms",
        title="The encoder layer: post-norm and pre-norm",
        desc=("Two versions of one encoder layer side by side. Left, post-norm, as in the paper: "
              "the input x of shape (B, T, d_model) goes through multi-head self-attention; a "
              "residual path carries x around it to a + node, and the sum goes through LayerNorm "
              "norm1. That result goes through the feed-forward network, a second residual path "
              "carries it around to a + node, and LayerNorm norm2 gives the output of shape "
              "(B, T, d_model). Right, pre-norm, as in most modern models: LayerNorm norm1 comes "
              "first, then self-attention, then the + with x carried around both; then LayerNorm "
              "norm2, the feed-forward network and a + with the residual carried around both, "
              "giving the output (B, T, d_model). In pre-norm the residual paths never pass "
              "through a LayerNorm. Every arrow carries a tensor of shape (B, T, d_model); inside "
              "the feed-forward network the width is d_ff."),
    )
    left_cx, right_cx = 160, 470
    top = 52
    post = _column(d, left_cx, top, norm_first=False)
    pre = _column(d, right_cx, top, norm_first=True)
    d.frame(post, "post-norm: the paper", label_at="top", pad=14)
    d.frame(pre, "pre-norm: modern models", label_at="top", pad=14)
    bottom = max(r.bottom for r in post + pre) + 14
    d.note("every arrow carries (B, T, d_model); inside the FFN: (B, T, d_ff)", x=(left_cx + right_cx) / 2,
           top=bottom + 8, anchor="middle")
    d.note("the arrows on the left of each column are the residual paths", x=(left_cx + right_cx) / 2,
           top=bottom + 30, anchor="middle")
    return d


#: Chapter diagrams: file (relative to the repository) → the function laying it out
#: (:func:`solutions.figures.diagram.registry` draws the SVG from it).
LAYOUTS: dict[str, Layout] = {
    "book/07_add_and_norm/figures/encoder_layer_norms.svg": _encoder_layer_layout,
}
