"""Chapter 9's diagram: one training step of the encoder–decoder, with every shape.

Drawn in the book's figure language (:mod:`solutions.figures.diagram`), three columns read
top-down: the source ids go through the encoder to ``memory``; the target sentences,
shifted right, become the decoder input ``[<sos>, y…]`` and the labels
``[y…, <eos>]``; the decoder's logits meet the labels in a cross-entropy with label
smoothing that skips the pad positions; the scalar loss drives one optimizer step.

``LAYOUTS`` maps each file written to the function that lays the diagram out, as in
:mod:`solutions.figures.diagram`, which draws the SVG from it.
"""
from __future__ import annotations

from .diagram import GAP, Diagram, Layout

__all__ = ["LAYOUTS"]

FILE = "book/09_training/figures/training_step.svg"


def _training_step_layout() -> Diagram:
    """Chapter 9: source → encoder; [<sos>, y] → decoder; logits against [y, <eos>]; pads ignored."""
    d = Diagram(
        name="training-step",
        title="One training step with teacher forcing",
        desc=("One training step of the Transformer, drawn top to bottom in three columns. Left: the "
              "source ids, shape (B, S), right-padded with <pad>, go through the encoder with the source "
              "padding mask and give memory of shape (B, S, d_model). Middle and right: the B target "
              "sentences, each a list of token ids without special tokens, the longest of length L, are "
              "shifted right: the decoder input is <sos> followed by the target, shape (B, L + 1), and the "
              "labels are the target followed by <eos>, shape (B, L + 1), both right-padded with <pad>. "
              "The decoder reads the decoder input under the decoder mask (padding and causal) and reads "
              "memory in its cross-attention; the output projection gives logits of shape (B, L + 1, V). "
              "The logits and the labels meet in a cross-entropy with label smoothing epsilon = 0.1 in "
              "which the positions whose label is <pad> are ignored; the loss is the mean over the real "
              "tokens, a scalar. Backpropagation, gradient clipping and an Adam step with the warm-up "
              "learning rate finish the step. All L + 1 positions are trained in one parallel pass."),
    )
    src_x, in_x, lab_x = 104, 312, 532

    # Row 1: the data.
    src = d.tensor("src", "(B, S)", "other", word="source ids", cx=src_x, top=20)
    targets = d.tensor("y", "B lists, longest L", "other", word="target ids", cx=(in_x + lab_x) / 2, top=20)
    shift = d.operation("shift right, pad with <pad>", cx=(in_x + lab_x) / 2, after=targets)

    # Row 2: the decoder input and the labels.
    top = shift.bottom + GAP
    tgt_in = d.tensor("[<sos>, y]", "(B, L + 1)", "other", word="decoder input", cx=in_x, top=top)
    labels = d.tensor("[y, <eos>]", "(B, L + 1)", "other", word="labels", cx=lab_x, top=top)
    d.arrow((shift.cx - 30, shift.bottom), (in_x, tgt_in.top))
    d.arrow((shift.cx + 30, shift.bottom), (lab_x, labels.top))
    d.note(["<sos> Ti amo molto"], x=in_x, top=tgt_in.bottom + 6, anchor="middle", mono=True)
    d.note(["Ti amo molto <eos>"], x=lab_x, top=labels.bottom + 6, anchor="middle", mono=True)

    # The encoder, level with the shift.
    encoder = d.operation("encoder × N, src_mask", cx=src_x, after=src)
    memory = d.tensor("memory", "(B, S, d_model)", "keys", word="", cx=src_x, after=encoder)

    # Row 3: the decoder reads the input and memory.
    decoder = d.operation("decoder × N, tgt_mask", cx=in_x, top=tgt_in.bottom + GAP + 28)
    d.arrow((in_x, tgt_in.bottom + 26), (in_x, decoder.top))
    d.arrow((memory.right, memory.cy), (decoder.left - 20, memory.cy), (decoder.left - 20, decoder.cy),
            (decoder.left, decoder.cy))
    d.note(["cross-attention", "reads memory"], x=src_x, top=memory.bottom + 8, anchor="middle")
    project = d.operation("Linear(d_{model}, V)", cx=in_x, after=decoder)
    logits = d.tensor("logits", "(B, L + 1, V)", "scores", word="", cx=in_x, after=project)

    # Row 4: the loss, the labels joining from the right.
    loss_op = d.operation("cross-entropy, ε = 0.1, pads ignored", cx=(in_x + lab_x) / 2 - 20,
                          top=logits.bottom + GAP)
    d.arrow((in_x, logits.bottom), (in_x, loss_op.top))
    d.arrow((lab_x, labels.bottom + 26), (lab_x, loss_op.top))
    loss = d.tensor("loss", "()  mean over real tokens", "other", word="", cx=loss_op.cx,
                    after=loss_op)
    step = d.operation("backward, clip, Adam step at lr(step)", cx=loss_op.cx, after=loss)
    return d


#: Chapter diagrams: file (relative to the repository) → the function laying it out
#: (:func:`solutions.figures.diagram.registry` draws the SVG from it).
LAYOUTS: dict[str, Layout] = {FILE: _training_step_layout}
