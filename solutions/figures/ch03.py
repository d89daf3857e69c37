"""Chapter 3's diagram: how the positional encoding joins the token embedding, and
what its columns hold (one sinusoid per column pair, wavelengths from 2π to almost
10000·2π).

It uses the book's figure language of :mod:`solutions.figures.diagram` (tensors with their
shapes, operations, arrows, frames, notes) and adds one element that only this
chapter needs: a **wave**, a sampled curve drawn as a polyline inside its own box.

``LAYOUTS`` maps each file written to the function that lays the diagram out, as in
:mod:`solutions.figures.diagram`, which draws the SVG from it.
"""
from __future__ import annotations

import math

from .diagram import ALLOWED, GAP, GRID_LINE, Diagram, Layout, Rect, number

__all__ = ["wave_rows", "LAYOUTS"]

#: The width of the model the wave panel describes (the paper's base model).
D_MODEL = 512
#: The positions the wave panel shows: 0 .. SHOWN_POSITIONS - 1.
SHOWN_POSITIONS = 64
#: The column pairs i drawn in the wave panel (i = 0 .. D_MODEL / 2 - 1).
PAIRS = (0, 64, 128, 192, 255)


def wave_rows(d_model: int = D_MODEL, pairs=PAIRS):
    """The wavelength of each drawn column pair, from the formula.

    Args:
        d_model: the encoding width (even).
        pairs: the pair indices ``i``; columns ``2i`` (sin) and ``2i + 1`` (cos).

    Returns:
        list of ``(i, wavelength)``, ``wavelength = 2π · 10000**(2i / d_model)`` positions.
    """
    if d_model < 2 or d_model % 2:
        raise ValueError(f"d_model must be a positive even int, got {d_model!r}")
    if any(not 0 <= i < d_model // 2 for i in pairs):
        raise ValueError(f"pair indices must be in 0..{d_model // 2 - 1}, got {tuple(pairs)}")
    return [(i, 2 * math.pi * 10000 ** (2 * i / d_model)) for i in pairs]


class _WaveDiagram(Diagram):
    """A :class:`Diagram` that can also draw a sampled sine wave."""

    def wave(self, *, left: float, right: float, cy: float, amplitude: float, wavelength: float,
             positions: int) -> Rect:
        """Draw ``sin(pos · 2π / wavelength)`` for ``pos`` in ``[0, positions - 1]`` with its zero line.

        Args:
            left, right: the horizontal extent of positions ``0`` and ``positions - 1``.
            cy: the vertical position of the zero line.
            amplitude: the height of a peak in px (the value 1).
            wavelength: the wave's period, in positions.
            positions: how many positions the width stands for.

        Returns:
            The wave's box (zero line and peaks), recorded with the diagram's boxes.
        """
        rect = Rect(left, cy - amplitude - 1, right - left, 2 * amplitude + 2)
        self._body.append(f'<line x1="{number(left)}" y1="{number(cy)}" x2="{number(right)}" y2="{number(cy)}" '
                          f'stroke="{GRID_LINE}" stroke-width="0.8"/>')
        steps = 400
        span = positions - 1
        points = []
        for s in range(steps + 1):
            pos = span * s / steps
            x = left + (right - left) * s / steps
            y = cy - amplitude * math.sin(2 * math.pi * pos / wavelength)  # SVG y grows downwards
            points.append(f"{x:.1f},{y:.1f}")
        self._body.append(f'<polyline points="{" ".join(points)}" fill="none" stroke="{ALLOWED}" '
                          f'stroke-width="1.6"/>')
        self.boxes.append(rect)
        return rect


def _wavelength_text(i: int, wavelength: float, d_model: int) -> str:
    """``λ = 2π ≈ 6.3``-style label of one pair's wavelength."""
    exponent = 2 * i / d_model
    if i == 0:
        return "λ = 2π ≈ 6.3"
    power = 10000 ** exponent
    if abs(power - round(power)) < 1e-9:
        return f"λ = 2π·{round(power)} ≈ {wavelength:,.0f}"
    return f"λ ≈ {wavelength:,.0f}, nearly 10000·2π"


def _pe_layout() -> Diagram:
    """Chapter 3: token embedding + pe[:T] → dropout → encoder input; the waves in PE's columns."""
    d = _WaveDiagram(
        name="positional-encoding",
        title="How the positional encoding joins the token embedding",
        desc=("Positional encoding. Token ids of shape (B, T) go through the embedding layer, "
              "scaled by the square root of d_model, giving token embeddings E of shape "
              "(B, T, d_model). A fixed table PE of shape (max_len, d_model), computed once and "
              "stored as a buffer, is cut to its first T rows, PE[:T] of shape (T, d_model). The "
              "two are added, the table broadcast over the B sentences of the batch, dropout is "
              "applied to the sum, and the result X of shape (B, T, d_model) is the input of the "
              "first attention layer. Below, the columns of PE for d_model = 512 over positions 0 "
              "to 63: column 2i holds sin(pos / 10000^(2i/d_model)) and column 2i+1 the cosine of "
              "the same angle. The wavelength grows geometrically with i: 2π for i = 0, 2π·10 for "
              "i = 64, 2π·100 for i = 128, 2π·1000 for i = 192 and about 60,611 positions, nearly "
              "10000·2π, for the last pair i = 255. Fast columns tell neighbours apart, slow ones "
              "say roughly where in a long sequence a token is."),
    )
    left_cx, right_cx = 150, 470
    ids = d.tensor("ids", "(B, T)", "other", word="token ids", cx=left_cx, top=20)
    table = d.tensor("PE", "(max_len, d_model)", "other", word="fixed table", cx=right_cx, top=20)

    top = ids.bottom + GAP
    embed = d.operation("embedding, × √d_{model}", cx=left_cx, top=top, after=ids)
    cut = d.operation("first T rows", cx=right_cx, top=top, after=table)
    d.note(["computed once;", "a buffer,", "not learned"], x=cut.left - 10, top=cut.top - 8, anchor="end")

    top = embed.bottom + GAP + 30
    emb = d.tensor("E", "(B, T, d_model)", "other", word="token embeddings", cx=left_cx, top=top, after=embed)
    pe = d.tensor("PE[:T]", "(T, d_model)", "other", word="positions", cx=right_cx, top=top, after=cut)

    add = d.operation("+", cx=(left_cx + right_cx) / 2, top=emb.bottom + GAP + 4)
    d.arrow((emb.cx, emb.bottom), (emb.cx, add.cy), (add.left, add.cy))
    d.arrow((pe.cx, pe.bottom), (pe.cx, add.cy), (add.right, add.cy))
    d.note(["PE[:T] is broadcast", "over the B sentences"], x=pe.cx + 8, top=add.bottom + 4)

    drop = d.operation("dropout", cx=add.cx, after=add)
    x = d.tensor("X", "(B, T, d_model)", "other", word="encoder input", cx=add.cx, after=drop)
    d.note(["to the first", "attention layer"], x=x.right + 14, top=x.top + 8)

    # The wave panel: what the columns of PE hold.
    panel_top = x.bottom + 36
    d.note("inside PE, for d_model = 512: column 2i = sin(pos / 10000^{2i/d_model}),", x=24, top=panel_top)
    d.note("column 2i+1 = cos of the same angle; positions 0 … 63 from left to right", x=24,
           top=panel_top + 20)
    row_h, amplitude = 44, 14
    wave_left, wave_right = 96, 400
    first_cy = panel_top + 44 + row_h / 2
    rows = []
    for row, (i, wavelength) in enumerate(wave_rows()):
        cy = first_cy + row * row_h
        rows.append(d.note(f"i = {i}", x=36, top=cy - 10))
        rows.append(d.wave(left=wave_left, right=wave_right, cy=cy, amplitude=amplitude,
                           wavelength=wavelength, positions=SHOWN_POSITIONS))
        rows.append(d.note(_wavelength_text(i, wavelength, D_MODEL), x=wave_right + 14, top=cy - 10))
    d.frame(rows, "fast pairs tell neighbours apart; slow pairs tell where in a long text",
            label_at="bottom")
    return d


#: Chapter diagrams: file (relative to the repository) → the function laying it out
#: (:func:`solutions.figures.diagram.registry` draws the SVG from it).
LAYOUTS: dict[str, Layout] = {
    "book/03_positional_encoding/figures/positional_encoding.svg": _pe_layout,
}
