"""Chapter 5's diagram: multi-head attention, split into heads, attend, merge, project.

Drawn in the book's figure language (:mod:`solutions.figures.diagram`). ``LAYOUTS`` maps
the file written to the function that lays the diagram out; :func:`solutions.figures.diagram.registry`
draws the SVG from it.
"""
from __future__ import annotations

from .diagram import GAP, OP_H, TENSOR_H, Diagram, Layout

__all__ = ["LAYOUTS"]


def _mha_layout() -> Diagram:
    """Chapter 5: project → split → attend per head → merge → project, with every shape."""
    d = Diagram(
        name="multi-head-attention",
        title="Multi-head attention",
        desc=("Data-flow diagram of multi-head self-attention. The input x of shape (B, T, d_model)"
              " is projected by W^Q, W^K and W^V into queries, keys and values of the same shape; "
              "each is split into h heads of shape (B, h, T, d_k); scaled dot-product attention "
              "runs in every head at once, with weights of shape (B, h, T_q, T_k); the heads are "
              "merged back to (B, T, h·d_k), which is (B, T, d_model), and W^O mixes them into the "
              "output."),
    )
    lanes = {"queries": 95, "keys": 255, "values": 415}
    names = {"queries": "Q", "keys": "K", "values": "V"}
    note_x = 496
    x = d.tensor("x", "(B, T, d_model)", "other", word="input", cx=lanes["keys"], top=20)

    projections = {}
    top = x.bottom + GAP + 4
    for role, cx in lanes.items():
        projections[role] = d.operation(f"@ W^{names[role]}", cx=cx, top=top)
        d.arrow((x.cx + (cx - x.cx) * 0.25, x.bottom), (cx, top))
    d.note("learned matrices:", x=note_x, top=top - 4)
    d.note("(d_model, d_model)", x=note_x, top=top + 14, mono=True)

    full = {}
    top = top + OP_H + GAP
    for role, cx in lanes.items():
        full[role] = d.tensor(names[role], "(B, T, d_model)", role, cx=cx, top=top, after=projections[role],
                              min_width=140)

    split = {}
    top = top + TENSOR_H + GAP
    for role, cx in lanes.items():
        split[role] = d.operation("split heads", cx=cx, top=top, after=full[role])
    d.note(["view (B, T, h, d_k),", "then swap T and h"], x=note_x, top=top - 2)

    heads_in = {}
    top = top + OP_H + GAP
    for role, cx in lanes.items():
        heads_in[role] = d.tensor(names[role], "(B, h, T, d_k)", role, cx=cx, top=top, after=split[role],
                                  min_width=140)
    d.note(["d_k = d_model / h"], x=note_x, top=top + 6, mono=True)
    d.note(["one slice per head"], x=note_x, top=top + 28)

    top = top + TENSOR_H + GAP + 20
    attend = d.operation("scaled dot-product attention (ch. 4)", cx=lanes["keys"], top=top)
    weights = d.tensor("weights", "(B, h, T_q, T_k)", "scores", word="", cx=note_x + 44,
                       top=attend.cy - TENSOR_H / 2)
    d.arrow((attend.right, attend.cy), (weights.left, attend.cy))
    for role, cx in lanes.items():
        d.arrow((cx, heads_in[role].bottom), (attend.cx + (cx - attend.cx) * 0.55, attend.top))
    per_head = d.frame([attend, weights], "× h heads, in parallel", label_at="bottom-right")

    heads_out = d.tensor("heads", "(B, h, T, d_k)", "other", cx=lanes["keys"], top=per_head.bottom + GAP,
                         after=attend)

    merge = d.operation("merge heads", cx=lanes["keys"], after=heads_out)
    d.note(["swap h and T back,", "then reshape"], x=note_x, top=merge.top - 2)

    concat = d.tensor("concat", "(B, T, h·d_k)", "other", cx=lanes["keys"], after=merge)
    d.note(["h heads side by side:", "h·d_k = d_model"], x=note_x, top=concat.top + 6)

    project = d.operation("@ W^O", cx=lanes["keys"], after=concat)
    d.note("mixes the heads:", x=note_x, top=project.top - 4)
    d.note("(d_model, d_model)", x=note_x, top=project.top + 14, mono=True)

    out = d.tensor("output", "(B, T, d_model)", "other", cx=lanes["keys"], after=project)
    return d


#: Chapter diagrams: file (relative to the repository) → the function laying it out.
LAYOUTS: dict[str, Layout] = {
    "book/05_multi_head_attention/figures/multi_head_attention.svg": _mha_layout,
}
