"""Chapter 4's diagrams: the three projections X·W = Q, K, V of self-attention, and scaled
dot-product attention with every shape and the slot where a mask enters.

Drawn in the book's figure language (:mod:`solutions.figures.diagram`). ``LAYOUTS`` maps
the file written to the function that lays the diagram out; :func:`solutions.figures.diagram.registry`
draws the SVG from it.
"""
from __future__ import annotations

from .diagram import GAP, TENSOR_H, Diagram, Layout

__all__ = ["LAYOUTS"]


def _sdpa_layout() -> Diagram:
    """Chapter 4: scaled dot-product attention, every shape and the slot where a mask enters."""
    d = Diagram(
        name="scaled-dot-product-attention",
        title="Scaled dot-product attention",
        desc=("A top-to-bottom flow diagram of scaled dot-product attention. Q (n_q, d_k) and K "
              "(n_k, d_k) enter the product Q @ Kᵀ, giving the scores (n_q, n_k); the scores are "
              "divided by √d_k, pass an optional mask slot (chapter 6) and a softmax over the keys,"
              " giving the weights (n_q, n_k); the product of the weights with V (n_k, d_v) gives "
              "the output (n_q, d_v)."),
    )
    main_x = 240  # the column of the main flow
    q = d.tensor("Q", "(n_q, d_k)", "queries", cx=150, top=20)
    k = d.tensor("K", "(n_k, d_k)", "keys", cx=330, top=20)
    v = d.tensor("V", "(n_k, d_v)", "values", cx=585, top=20)

    y = q.bottom + GAP + 4
    matmul_qk = d.operation("Q @ K^T", cx=main_x, top=y)
    d.arrow((q.cx, q.bottom), (matmul_qk.cx - 22, matmul_qk.top))
    d.arrow((k.cx, k.bottom), (matmul_qk.cx + 22, matmul_qk.top))
    d.note(["K^T: (d_k, n_k), K transposed"], x=matmul_qk.right + 14, top=matmul_qk.top + 8)

    scores = d.tensor("Q K^T", "(n_q, n_k)", "scores", cx=main_x, after=matmul_qk)
    d.note(["one row per query,", "one column per key"], x=scores.right + 14, top=scores.top + 6)

    scale = d.operation("÷ √d_{k}", cx=main_x, after=scores)

    masked = d.operation("optional mask (ch. 6)", cx=main_x, top=scale.bottom + GAP + 4, after=scale,
                         dashed=True)
    d.note("(n_q, n_k)", x=main_x + 10, top=scale.bottom + 7, mono=True)
    mask = d.tensor("mask", "(n_q, n_k)", "masks", cx=480, top=masked.cy - TENSOR_H / 2,
                    word="True = may attend", dashed=True)
    d.arrow((mask.left, masked.cy), (masked.right, masked.cy), dashed=True)
    d.note(["where the mask is False,", "the score becomes −∞"], x=mask.left, top=mask.bottom + 6)

    softmax = d.operation("softmax over the keys", cx=main_x, top=masked.bottom + GAP + 4, after=masked)
    d.note("(n_q, n_k)", x=main_x + 10, top=masked.bottom + 7, mono=True)

    weights = d.tensor("weights", "(n_q, n_k)", "scores", word="", cx=main_x, after=softmax)
    d.note(["each row sums to 1", "(−∞ → weight exactly 0)"], x=weights.right + 14, top=weights.top + 6)

    matmul_v = d.operation("weights @ V", cx=main_x, after=weights)
    d.arrow((v.cx, v.bottom), (v.cx, matmul_v.cy), (matmul_v.right, matmul_v.cy))

    out = d.tensor("output", "(n_q, d_v)", "other", cx=main_x, after=matmul_v)
    d.note(["one weighted average", "of the values per query"], x=out.right + 14, top=out.top + 6)
    return d


def _projections_layout() -> Diagram:
    """Chapter 4: one sequence X, three learned matrices, three roles: X W^Q = Q, X W^K = K, X W^V = V."""
    d = Diagram(
        name="qkv-projections",
        title="Self-attention's three projections: X W^Q = Q, X W^K = K, X W^V = V",
        desc=("A diagram of the three projections of self-attention. The token vectors of one "
              "sentence are the rows of X, of shape (n, d_model), one row per token. The same X "
              "is multiplied by three learned matrices: W^Q of shape (d_model, d_k) gives the "
              "queries Q of shape (n, d_k); W^K of shape (d_model, d_k) gives the keys K of shape "
              "(n, d_k); W^V of shape (d_model, d_v) gives the values V of shape (n, d_v). Row i "
              "of Q, K and V all come from row i of X, the same token in three roles. Q and K "
              "then meet in the scores Q K^T, and V is what the weights average."),
    )
    trunk_x = 80  # X's vertical line, left of the parameter boxes
    x = d.tensor("X", "(n, d_model)", "other", word="tokens", cx=trunk_x, top=20)
    rows = (("Q", "queries", "d_k"), ("K", "keys", "d_k"), ("V", "values", "d_v"))
    top = x.bottom + GAP
    outputs = []
    for letter, role, width in rows:
        w = d.tensor(f"W^{letter}", f"(d_model, {width})", "parameters", cx=240, top=top)
        product = d.operation(f"X @ W^{letter}", cx=240, after=w)
        d.arrow((trunk_x, x.bottom), (trunk_x, product.cy), (product.left, product.cy))
        out = d.tensor(letter, f"(n, {width})", role, cx=425, top=product.cy - TENSOR_H / 2)
        d.arrow((product.right, product.cy), (out.left, product.cy))
        outputs.append(out)
        top = product.bottom + GAP
    d.note(["row i: token i", "in three roles"], x=outputs[0].right + 14, top=outputs[0].top + 6)
    d.note(["Q K^T: the scores;", "V: what they average"], x=outputs[2].right + 14, top=outputs[2].top + 6)
    return d


#: Chapter diagrams: file (relative to the repository) → the function laying it out.
LAYOUTS: dict[str, Layout] = {
    "book/04_self_attention/figures/scaled_dot_product_attention.svg": _sdpa_layout,
    "book/04_self_attention/figures/qkv_projections.svg": _projections_layout,
}
