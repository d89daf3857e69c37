"""The book's diagram language: data-flow pictures of the Transformer, written as SVG.

Every chapter draws its mechanism with the same small vocabulary, so a reader who
has learnt to read one diagram can read them all:

* a **tensor** is a box with square corners: the book's notation on top (``Q``,
  ``W^Q``, ``weights``), a word naming its role beside it ("queries", "keys", …),
  and its shape underneath in the paper's names, ``(B, h, T_q, d_k)``. The fill
  colour says the role too (:data:`ROLES`), but never alone: the word does;
* an **operation** is a white rounded pill (``Q @ K^T``, ``softmax over the keys``,
  ``split heads``); a dashed pill is an optional step;
* a **mask** is a small boolean grid, queries on the rows and keys on the columns
  as in :func:`solutions.figures.plots.plot_mask`: a filled cell is True (may attend), an
  empty hatched cell is False (masked);
* **data flow** is an arrow; a dashed **frame** groups what happens per head or per
  layer; a **note** in a smaller, muted font says what a step does or what shape
  travels along an arrow.

This module is the vocabulary and the command; the drawings live in one module per
chapter, ``solutions/figures/chNN.py``. A diagram is a function returning its
:class:`Diagram` (the layout, which ``.svg()`` turns into the SVG text); each chapter
module's ``LAYOUTS`` maps the file it is written to (relative to the repository) to that
function, :func:`layouts` gathers them, and :func:`registry` gives, for each file, the
function that draws its SVG. ``python -m solutions.figures`` writes every file; ``python -m solutions.figures --check``
exits with status 1 and names the files that differ from what the code draws (a
test runs it, so a drawing edited by hand or left stale fails CI).

The SVG files are shown through ``<img>``, so nothing outside them applies: styles,
the arrowhead and the hatching live inside each file, fonts are the reader's own
system fonts (nothing is loaded), text is at least 12 px at 100 % zoom, and every
file has a ``<title>`` and a ``<desc>`` (its alt text). Boxes are as wide as their
text measured with the widths of DejaVu Sans, the widest common system sans-serif,
so the labels fit with any font the reader has; the layout model
(:attr:`Diagram.texts`) lets the tests prove that no two texts overlap.
"""
from __future__ import annotations

import argparse
import functools
import importlib
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence
from xml.sax.saxutils import escape

__all__ = [
    "Role",
    "ROLES",
    "Rect",
    "TextBox",
    "Diagram",
    "Layout",
    "text_width",
    "plain_text",
    "number",
    "MAX_WIDTH",
    "chapter_modules",
    "registry",
    "layouts",
    "write_all",
    "stale_files",
    "alt_text",
    "main",
]

REPO = Path(__file__).resolve().parents[2]

# --------------------------------------------------------------------------- palette


@dataclass(frozen=True)
class Role:
    """What a tensor is for, and how it is drawn.

    Attributes:
        name: the role's key in :data:`ROLES` (``"queries"``).
        word: the word written beside a tensor's label so the role can be read
            without the colour (``"queries"``; empty for plain activations).
        fill: the box's fill colour, a light tint.
        stroke: the box's outline colour, a dark shade of the same hue.
    """

    name: str
    word: str
    fill: str
    stroke: str


# One fixed palette built on the Okabe–Ito colours, which stay distinct under the
# common colour-vision deficiencies: light tints for fills, dark shades for outlines.
ROLES: dict[str, Role] = {
    role.name: role
    for role in (
        Role("queries", "queries", "#d7ebf8", "#0072b2"),      # blue
        Role("keys", "keys", "#fde7c4", "#a86b00"),            # orange
        Role("values", "values", "#cdeee2", "#00785a"),        # bluish green
        Role("scores", "scores", "#f5dcea", "#9c4a78"),        # reddish purple: scores and weights
        Role("parameters", "parameter", "#f8f2c2", "#857600"),  # yellow
        Role("masks", "mask", "#fbe1d3", "#c0500a"),           # vermillion
        Role("other", "", "#ececec", "#555555"),               # grey: inputs, activations, outputs
    )
}

INK = "#1a1a1a"          # text and arrows
MUTED = "#555555"        # notes (7.5:1 against white)
ALLOWED = "#2b6cb0"      # a True mask cell: the colour of solutions.figures.plots.plot_mask
GRID_LINE = "#8a8a8a"
HATCH = "#b4b4b4"

SANS = "'DejaVu Sans', 'Segoe UI', 'Helvetica Neue', Arial, sans-serif"
MONO = "'DejaVu Sans Mono', Menlo, Consolas, 'Liberation Mono', monospace"

# Font sizes in px; the smallest is 12 so that a figure shown at its own width
# stays readable at 100 % zoom.
LABEL_SIZE = 16   # a tensor's notation, bold
WORD_SIZE = 13    # the role word beside it
SHAPE_SIZE = 13   # shapes, monospace
OP_SIZE = 14      # operations
NOTE_SIZE = 13    # notes and frame labels
CAPTION_SIZE = 12  # captions under mask grids
MIN_TEXT_SIZE = 12

# The book's column is 672 px wide in the browser test's 1280 px window; a figure
# shown with `:width: 100%` at most this wide is never shrunk there.
MAX_WIDTH = 660
MARGIN = 16       # blank border around a drawing

TENSOR_H = 54     # height of a tensor box
OP_H = 32         # height of an operation pill
PAD_X = 12        # horizontal padding inside boxes
GAP = 26          # vertical gap between two rows: the length of a straight arrow
CELL = 18         # side of one mask cell

# --------------------------------------------------------------------------- text metrics

# Advance widths (in em) of DejaVu Sans, rounded up and grouped. A system font
# that is narrower leaves a little more margin; none that ships widely is wider.
_NARROW = set("ijl.,:;'|!I ")
_SEMI = set("frt()[]{}/\\-")
_WIDE = set("mwMW@%")
_SYMBOLS = set("−÷×=+∞∧∨¬→←↓·<>~")
_SAFETY = 1.05


def _char_em(ch: str) -> float:
    if ch in _NARROW:
        return 0.32
    if ch in _SEMI:
        return 0.43
    if ch in _WIDE:
        return 1.0
    if ch in _SYMBOLS:
        return 0.84
    if ch.isupper():
        return 0.78
    return 0.64


def _segments(text: str) -> list[tuple[str, str]]:
    """Split light markup into ``(text, script)`` runs, ``script`` in ``"", "sup", "sub"``.

    ``^X`` or ``^{XY}`` is a superscript, ``_{XY}`` a subscript (braces required, so
    code names such as ``masked_fill`` stay as they are).
    """
    runs: list[tuple[str, str]] = []
    plain = ""
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "^_" and i + 1 < len(text) and (ch == "^" or text[i + 1] == "{"):
            if text[i + 1] == "{":
                end = text.find("}", i + 2)
                if end < 0:
                    raise ValueError(f"unclosed {ch}{{ in {text!r}")
                script, i = text[i + 2:end], end + 1
            else:
                script, i = text[i + 1], i + 2
            if plain:
                runs.append((plain, ""))
                plain = ""
            runs.append((script, "sup" if ch == "^" else "sub"))
        else:
            plain += ch
            i += 1
    if plain:
        runs.append((plain, ""))
    return runs


def plain_text(text: str) -> str:
    """The characters a reader sees for ``text`` with its markup removed (``W^Q`` → ``WQ``)."""
    return "".join(run for run, _ in _segments(text))


def text_width(text: str, size: float, mono: bool = False, bold: bool = False) -> float:
    """A conservative estimate of the width of ``text`` drawn at ``size`` px.

    Args:
        text: the text, with ``^``/``_{}`` markup unless ``mono``.
        size: the font size in px.
        mono: True for the monospace font (shapes and code), where markup is literal.
        bold: True for the bold weight (about 10 % wider).

    Returns:
        The width in px, rounded up generously so that the text fits its box.
    """
    if mono:
        return 0.62 * size * len(text)
    width = 0.0
    for run, script in _segments(text):
        run_size = _script_size(size) if script else size
        width += sum(_char_em(ch) for ch in run) * run_size
    return width * (1.1 if bold else 1.0) * _SAFETY


def _script_size(size: float) -> float:
    """The font size of a super- or subscript: three quarters, but never under 12 px."""
    return max(0.75 * size, MIN_TEXT_SIZE)


def number(value: float) -> str:
    """A coordinate as short, stable text (one decimal at most)."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


# --------------------------------------------------------------------------- layout model


Point = tuple[float, float]


@dataclass(frozen=True)
class Rect:
    """An axis-aligned rectangle in the diagram's pixels (y grows downwards)."""

    x: float
    y: float
    w: float
    h: float

    @property
    def left(self) -> float:
        return self.x

    @property
    def right(self) -> float:
        return self.x + self.w

    @property
    def top(self) -> float:
        return self.y

    @property
    def bottom(self) -> float:
        return self.y + self.h

    @property
    def cx(self) -> float:
        return self.x + self.w / 2

    @property
    def cy(self) -> float:
        return self.y + self.h / 2

    def overlaps(self, other: "Rect") -> bool:
        """True when the two rectangles share some area (touching edges do not count)."""
        return (self.left < other.right and other.left < self.right
                and self.top < other.bottom and other.top < self.bottom)

    def contains(self, other: "Rect") -> bool:
        """True when ``other`` lies entirely inside this rectangle."""
        return (self.left <= other.left and other.right <= self.right
                and self.top <= other.top and other.bottom <= self.bottom)

    def crosses(self, start: "Point", end: "Point") -> bool:
        """True when the straight segment from ``start`` to ``end`` passes through this rectangle.

        Liang–Barsky clipping: the segment is ``start + t (end - start)``, ``0 <= t <= 1``.
        """
        (x0, y0), (x1, y1) = start, end
        t_low, t_high = 0.0, 1.0
        for p, q in ((x0 - x1, x0 - self.left), (x1 - x0, self.right - x0),
                     (y0 - y1, y0 - self.top), (y1 - y0, self.bottom - y0)):
            if p == 0:
                if q < 0:
                    return False  # parallel to this edge and outside it
                continue
            t = q / p
            if p < 0:
                t_low = max(t_low, t)
            else:
                t_high = min(t_high, t)
        return t_low < t_high

    def padded(self, left: float, top: float | None = None, right: float | None = None,
               bottom: float | None = None) -> "Rect":
        """This rectangle grown by the given margins (CSS order; missing ones repeat ``left``)."""
        top = left if top is None else top
        right = left if right is None else right
        bottom = top if bottom is None else bottom
        return Rect(self.x - left, self.y - top, self.w + left + right, self.h + top + bottom)

    @staticmethod
    def union(rects: Sequence["Rect"]) -> "Rect":
        """The smallest rectangle holding every one of ``rects``."""
        if not rects:
            raise ValueError("Rect.union needs at least one rectangle")
        left = min(r.left for r in rects)
        top = min(r.top for r in rects)
        return Rect(left, top, max(r.right for r in rects) - left, max(r.bottom for r in rects) - top)


@dataclass(frozen=True)
class TextBox:
    """One line of text as laid out: what it says, where it is, and what holds it.

    Attributes:
        text: the characters shown (markup removed).
        rect: its estimated bounding box.
        size: its font size in px.
        owner: the box it is written inside (a tensor, an operation, a mask, a
            frame), or None for a free note.
    """

    text: str
    rect: Rect
    size: float
    owner: Rect | None = None


@dataclass
class Diagram:
    """An SVG drawing built from tensors, operations, masks, arrows, frames and notes.

    Each drawing method places one element and returns its :class:`Rect`, so a layout
    can attach arrows and notes to what it has drawn. :attr:`texts`, :attr:`boxes`
    (tensors, operations, masks), :attr:`frames` and :attr:`segments` (the straight
    pieces of every arrow) are the layout model the tests check; :meth:`svg` writes
    the file.

    Args:
        name: a short identifier, used for the ids of ``<title>`` and ``<desc>``.
        title: the figure's title (``<title>``): a few words.
        desc: the alt text (``<desc>``): the whole data flow in sentences, for a
            reader who cannot see the picture. Use the same text in the chapter's
            ``:alt:``.

    The canvas is what was drawn plus a margin (:attr:`bounds`), so coordinates
    are free; the drawing must stay within :data:`MAX_WIDTH`.
    """

    name: str
    title: str
    desc: str
    texts: list[TextBox] = field(default_factory=list)
    boxes: list[Rect] = field(default_factory=list)
    frames: list[Rect] = field(default_factory=list)
    segments: list[tuple[Point, Point]] = field(default_factory=list)
    _body: list[str] = field(default_factory=list)

    # ----------------------------------------------------------------- text

    def _text(self, text: str, x: float, baseline: float, size: float, *, anchor: str = "middle",
              mono: bool = False, bold: bool = False, muted: bool = False,
              owner: Rect | None = None) -> Rect:
        """Write one line of text; record and return its estimated bounding box."""
        if size < MIN_TEXT_SIZE:
            raise ValueError(f"text must be at least {MIN_TEXT_SIZE} px, got {size} for {text!r}")
        width = text_width(text, size, mono=mono, bold=bold)
        left = {"start": x, "middle": x - width / 2, "end": x - width}[anchor]
        has_sup = not mono and any(script == "sup" for _, script in _segments(text))
        has_sub = not mono and any(script == "sub" for _, script in _segments(text))
        top = baseline - size * (1.05 if has_sup else 0.8)
        bottom = baseline + size * (0.45 if has_sub else 0.25)
        rect = Rect(left, top, width, bottom - top)
        classes = ["mono" if mono else "sans"]  # mono text keeps its spaces (aligned columns)
        if bold:
            classes.append("bold")
        if muted:
            classes.append("muted")
        attrs = (f'x="{number(x)}" y="{number(baseline)}" font-size="{number(size)}" '
                 f'text-anchor="{anchor}" class="{" ".join(classes)}"')
        if mono:
            attrs += ' xml:space="preserve"'
        self._body.append(f"<text {attrs}>{self._runs(text, size, mono)}</text>")
        self.texts.append(TextBox(text if mono else plain_text(text), rect, size, owner))
        return rect

    @staticmethod
    def _runs(text: str, size: float, mono: bool) -> str:
        """The content of a ``<text>``: plain runs, and ``<tspan>`` raised or lowered for scripts."""
        if mono:
            return escape(text)
        out, shift = [], 0.0
        for run, script in _segments(text):
            target = {"": 0.0, "sup": -0.4 * size, "sub": 0.25 * size}[script]
            dy = target - shift
            shift = target
            attrs = f' dy="{number(dy)}"' if dy else ""
            if script:
                attrs += f' font-size="{number(_script_size(size))}"'
            out.append(f"<tspan{attrs}>{escape(run)}</tspan>" if attrs else escape(run))
        return "".join(out)

    # ----------------------------------------------------------------- vocabulary

    def tensor(self, label: str, shape: str, role: str, *, cx: float, top: float | None = None,
               after: Rect | None = None, word: str | None = None, dashed: bool = False,
               min_width: float = 0) -> Rect:
        """Draw a tensor: its notation and role word on top, its shape underneath.

        Args:
            label: the book's notation, with markup (``"W^Q"``, ``"Q K^T"``).
            shape: its shape in the paper's names, shown as written (``"(B, h, T, d_k)"``).
            role: a key of :data:`ROLES`; sets the colours and the default role word.
            cx: the box's horizontal centre.
            top: the box's top edge; default :data:`GAP` below ``after``.
            after: the element this tensor comes out of: an arrow is drawn down from
                it (:meth:`down`) once the box is drawn.
            word: the word beside the label; default the role's word; ``""`` for
                none (when the label already says it, as ``weights`` does).
            dashed: draw the outline dashed: an optional input.
            min_width: make the box at least this wide (to line up a column).

        Returns:
            The box's rectangle.
        """
        style = self._role(role)
        top = self._top(top, after)
        word = style.word if word is None else word
        label_w = text_width(label, LABEL_SIZE, bold=True)
        word_w = text_width(word, WORD_SIZE) if word else 0.0
        head_w = label_w + (8 + word_w if word else 0.0)
        width = max(head_w, text_width(shape, SHAPE_SIZE, mono=True), min_width - 2 * PAD_X, 40) + 2 * PAD_X
        rect = Rect(cx - width / 2, top, width, TENSOR_H)
        self._rect(rect, fill=style.fill, stroke=style.stroke, radius=3, dashed=dashed)
        start = cx - head_w / 2
        self._text(label, start, top + 22, LABEL_SIZE, anchor="start", bold=True, owner=rect)
        if word:
            self._text(word, start + label_w + 8, top + 22, WORD_SIZE, anchor="start",
                       muted=True, owner=rect)
        self._text(shape, cx, top + 43, SHAPE_SIZE, mono=True, owner=rect)
        self.boxes.append(rect)
        if after is not None:
            self.down(after, rect)
        return rect

    def operation(self, label: str, *, cx: float, top: float | None = None, after: Rect | None = None,
                  dashed: bool = False) -> Rect:
        """Draw an operation: a white rounded pill with its name (``"softmax over the keys"``).

        Args:
            label: what the operation does, with markup (``"÷ √d_{k}"``).
            cx: the pill's horizontal centre.
            top: the pill's top edge; default :data:`GAP` below ``after``.
            after: the element this operation is applied to: an arrow is drawn down
                from it (:meth:`down`) once the pill is drawn.
            dashed: an optional step (drawn dashed).

        Returns:
            The pill's rectangle.
        """
        top = self._top(top, after)
        width = max(text_width(label, OP_SIZE) + 2 * 16, 56)
        rect = Rect(cx - width / 2, top, width, OP_H)
        self._rect(rect, fill="#ffffff", stroke=INK, radius=OP_H / 2, dashed=dashed, stroke_width=1.4)
        self._text(label, cx, top + OP_H / 2 + 5, OP_SIZE, owner=rect)
        self.boxes.append(rect)
        if after is not None:
            self.down(after, rect)
        return rect

    def chain(self, labels: Sequence[str], *, cx: float, top: float | None = None,
              after: Rect | None = None) -> list[Rect]:
        """Draw a column of operations, each :data:`GAP` below the last, joined by arrows.

        A stack of sub-layers (``"self-attention"``, ``"Add & Norm"``, …) is drawn
        this way: every pill first, then the arrows from top to bottom.

        Args:
            labels: the operations' labels, top to bottom (at least one).
            cx: the column's horizontal centre.
            top: the first pill's top edge; default :data:`GAP` below ``after``.
            after: the element that feeds the first operation, or None; its arrow
                comes before the arrows inside the column.

        Returns:
            The pills' rectangles, top to bottom.
        """
        if not labels:
            raise ValueError("a chain needs at least one operation")
        top = self._top(top, after)
        pills = []
        for label in labels:
            pills.append(self.operation(label, cx=cx, top=top))
            top = pills[-1].bottom + GAP
        flow = [after, *pills] if after is not None else pills
        for upper, lower in zip(flow, flow[1:]):
            self.down(upper, lower)
        return pills

    @staticmethod
    def _top(top: float | None, after: Rect | None) -> float:
        """An element's top edge: ``top`` when given, else :data:`GAP` below ``after``."""
        if top is not None:
            return top
        if after is None:
            raise ValueError("give the element's top, or the element it comes after")
        return after.bottom + GAP

    @staticmethod
    def _mask_slots(grids: Sequence[Sequence[Sequence[bool]]], captions: Sequence[str]) -> list[float]:
        """The width of each grid's slot: the grid, or its caption when that is wider."""
        return [max(len(g[0]) * CELL, text_width(c, CAPTION_SIZE)) for g, c in zip(grids, captions)]

    @classmethod
    def mask_size(cls, grids: Sequence[Sequence[Sequence[bool]]], label: str, shape: str,
                  captions: Sequence[str]) -> tuple[float, float]:
        """The ``(width, height)`` that :meth:`mask` will take for these arguments."""
        slots = cls._mask_slots(grids, captions)
        grids_w = sum(slots) + 18 * (len(slots) - 1)
        head_w = text_width(label, LABEL_SIZE, bold=True)
        width = max(grids_w, head_w, text_width(shape, SHAPE_SIZE, mono=True)) + 2 * PAD_X
        rows = max(len(g) for g in grids)
        return width, 30 + rows * CELL + 20 + 22

    def mask(self, grids: Sequence[Sequence[Sequence[bool]]], *, label: str, shape: str,
             captions: Sequence[str], cx: float, top: float) -> Rect:
        """Draw a boolean mask: a box holding one small grid per batch element.

        Rows are queries and columns keys; a filled cell is True (may attend), an
        empty hatched cell is False (its score becomes −∞ before the softmax).

        Args:
            grids: one or more boolean grids (lists of rows), drawn side by side,
                e.g. one per sentence of the batch. All have the same number of rows.
            label: the mask's name, bold on top (``"padding mask"``).
            shape: its shape in the paper's names (``"(B, 1, 1, T_k)"``).
            captions: one caption per grid, under it (``"b = 0"``).
            cx: the box's horizontal centre.
            top: the box's top edge.

        Returns:
            The box's rectangle.
        """
        if not grids or len(captions) != len(grids):
            raise ValueError(f"mask needs one caption per grid, got {len(grids)} grids and "
                             f"{len(captions)} captions")
        rows = len(grids[0])
        for grid in grids:
            if len(grid) != rows or any(len(row) != len(grid[0]) for row in grid):
                raise ValueError("mask grids must be rectangular and have the same number of rows")
        width, height = self.mask_size(grids, label, shape, captions)
        rect = Rect(cx - width / 2, top, width, height)
        style = ROLES["masks"]
        self._rect(rect, fill=style.fill, stroke=style.stroke, radius=3)
        self._text(label, cx, top + 21, LABEL_SIZE, bold=True, owner=rect)
        slots = self._mask_slots(grids, captions)
        x = cx - (sum(slots) + 18 * (len(slots) - 1)) / 2   # left edge of the first slot
        grid_top = top + 30
        for grid, caption, slot in zip(grids, captions, slots):
            gx = x + (slot - len(grid[0]) * CELL) / 2         # the grid, centred in its slot
            for i, row in enumerate(grid):
                for j, allowed in enumerate(row):
                    fill = ALLOWED if allowed else "url(#hatch)"
                    self._body.append(
                        f'<rect x="{number(gx + j * CELL)}" y="{number(grid_top + i * CELL)}" width="{CELL}" '
                        f'height="{CELL}" fill="{fill}" stroke="{GRID_LINE}" stroke-width="0.8"/>')
            self._text(caption, x + slot / 2, grid_top + len(grid) * CELL + 15, CAPTION_SIZE, owner=rect)
            x += slot + 18
        self._text(shape, cx, rect.bottom - 9, SHAPE_SIZE, mono=True, owner=rect)
        self.boxes.append(rect)
        return rect

    def mask_legend(self, *, x: float, baseline: float) -> Rect:
        """Draw the key to mask grids: a filled cell is True (may attend), a hatched one False."""
        parts = []
        for allowed, words in ((True, "True: may attend"), (False, "False: masked (−∞)")):
            cell = Rect(x, baseline - 12, 14, 14)
            fill = ALLOWED if allowed else "url(#hatch)"
            self._body.append(f'<rect x="{number(cell.x)}" y="{number(cell.y)}" width="14" height="14" '
                              f'fill="{fill}" stroke="{GRID_LINE}" stroke-width="0.8"/>')
            self.boxes.append(cell)
            parts.append(cell)
            parts.append(self._text(words, x + 20, baseline, NOTE_SIZE, anchor="start", muted=True))
            x = parts[-1].right + 18
        return Rect.union(parts)

    def arrow(self, *points: Point, dashed: bool = False) -> None:
        """Draw data flowing along ``points`` (two or more), with a head at the last one."""
        if len(points) < 2:
            raise ValueError(f"an arrow needs at least two points, got {len(points)}")
        self.segments.extend(zip(points[:-1], points[1:]))
        path = " ".join(f"{number(x)},{number(y)}" for x, y in points)
        dash = ' stroke-dasharray="5 4"' if dashed else ""
        self._body.append(f'<polyline points="{path}" fill="none" stroke="{INK}" stroke-width="1.4"'
                          f'{dash} marker-end="url(#arrowhead)"/>')

    def down(self, upper: Rect, lower: Rect, *, dashed: bool = False) -> None:
        """An arrow from the middle of ``upper``'s bottom edge to the middle of ``lower``'s top edge."""
        self.arrow((upper.cx, upper.bottom), (lower.cx, lower.top), dashed=dashed)

    def frame(self, around: Sequence[Rect], label: str, *, pad: float = 12,
              label_at: str = "bottom") -> Rect:
        """Draw a dashed frame around a group, labelled inside (``"× h heads, in parallel"``).

        Args:
            around: the rectangles of the elements it groups.
            label: its label, with markup.
            pad: the margin between the elements and the frame.
            label_at: ``"top"``, ``"bottom"`` or ``"bottom-right"``: where the label's
                line goes, in room added to the frame for it (at the left, or at the
                right for ``"bottom-right"``).

        Returns:
            The frame's rectangle.
        """
        if label_at not in ("top", "bottom", "bottom-right"):
            raise ValueError(f"label_at must be 'top', 'bottom' or 'bottom-right', got {label_at!r}")
        inner = Rect.union(list(around))
        line = NOTE_SIZE + 10
        rect = inner.padded(pad, pad + (line if label_at == "top" else 0), pad,
                            pad + (line if label_at != "top" else 0))
        self._rect(rect, fill="none", stroke=MUTED, radius=8, dashed=True, stroke_width=1.2)
        baseline = rect.top + pad + NOTE_SIZE if label_at == "top" else rect.bottom - pad + 2
        if label_at == "bottom-right":
            self._text(label, rect.right - 10, baseline, NOTE_SIZE, anchor="end", muted=True, owner=rect)
        else:
            self._text(label, rect.left + 10, baseline, NOTE_SIZE, anchor="start", muted=True, owner=rect)
        self.frames.append(rect)
        return rect

    def note(self, lines: str | Sequence[str], *, x: float, top: float, anchor: str = "start",
             mono: bool = False) -> Rect:
        """Write a note: one or more lines in the smaller, muted font.

        Args:
            lines: the text, one string per line (markup allowed unless ``mono``).
            x: the anchor's x (the lines' left edge for ``anchor="start"``).
            top: the top of the first line.
            anchor: ``"start"``, ``"middle"`` or ``"end"``.
            mono: set in the monospace font (shapes, code).

        Returns:
            The rectangle holding all the lines.
        """
        lines = [lines] if isinstance(lines, str) else list(lines)
        rects = []
        for i, line in enumerate(lines):
            baseline = top + NOTE_SIZE + i * (NOTE_SIZE + 5)
            rects.append(self._text(line, x, baseline, NOTE_SIZE, anchor=anchor, mono=mono, muted=True))
        return Rect.union(rects)

    # ----------------------------------------------------------------- output

    def _role(self, role: str) -> Role:
        if role not in ROLES:
            raise ValueError(f"role must be one of {sorted(ROLES)}, got {role!r}")
        return ROLES[role]

    def _rect(self, rect: Rect, *, fill: str, stroke: str, radius: float, dashed: bool = False,
              stroke_width: float = 1.5) -> None:
        dash = ' stroke-dasharray="6 4"' if dashed else ""
        self._body.append(
            f'<rect x="{number(rect.x)}" y="{number(rect.y)}" width="{number(rect.w)}" height="{number(rect.h)}" '
            f'rx="{number(radius)}" fill="{fill}" stroke="{stroke}" '
            f'stroke-width="{number(stroke_width)}"{dash}/>')

    @property
    def bounds(self) -> Rect:
        """The drawing's canvas: everything drawn, plus a margin, in whole pixels."""
        rects = [t.rect for t in self.texts] + self.boxes + self.frames
        rects += [Rect(x, y, 0, 0) for segment in self.segments for x, y in segment]
        if not rects:
            raise ValueError(f"diagram {self.name!r} is empty")
        content = Rect.union(rects)
        left, top = math.floor(content.left - MARGIN), math.floor(content.top - MARGIN)
        right, bottom = math.ceil(content.right + MARGIN), math.ceil(content.bottom + MARGIN)
        return Rect(left, top, right - left, bottom - top)

    def svg(self) -> str:
        """The finished SVG document (UTF-8 text, ending with a newline).

        Raises:
            ValueError: when the drawing is wider than :data:`MAX_WIDTH`.
        """
        box = self.bounds
        if box.w > MAX_WIDTH:
            raise ValueError(f"diagram {self.name!r} is {box.w:.0f} px wide, more than {MAX_WIDTH} px: "
                             "the book's column would shrink its text below 12 px")
        x0, y0, width, height = number(box.x), number(box.y), number(box.w), number(box.h)
        title_id, desc_id = f"{self.name}-title", f"{self.name}-desc"
        head = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="{x0} {y0} {width} {height}" role="img" aria-labelledby="{title_id} {desc_id}">',
            f'<title id="{title_id}">{escape(self.title)}</title>',
            f'<desc id="{desc_id}">{escape(self.desc)}</desc>',
            "<!-- Generated by `python -m solutions.figures` (solutions/figures/): do not edit. -->",
            "<defs>",
            "<style>"
            f"text{{fill:{INK}}} .sans{{font-family:{SANS}}} .mono{{font-family:{MONO}}} "
            f".mono{{white-space:pre}} .bold{{font-weight:700}} .muted{{fill:{MUTED}}}"
            "</style>",
            f'<marker id="arrowhead" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="9" '
            f'markerHeight="9" markerUnits="userSpaceOnUse" orient="auto">'
            f'<path d="M0,0 L10,5 L0,10 z" fill="{INK}"/></marker>',
            f'<pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
            f'patternTransform="rotate(45)"><rect width="6" height="6" fill="#ffffff"/>'
            f'<line x1="0" y1="0" x2="0" y2="6" stroke="{HATCH}" stroke-width="1.6"/></pattern>',
            "</defs>",
            f'<rect x="{x0}" y="{y0}" width="{width}" height="{height}" fill="#ffffff"/>',
        ]
        return "\n".join(head + self._body + ["</svg>"]) + "\n"


#: A chapter module's layout function: it lays one diagram out and returns it. Each
#: chapter module's ``LAYOUTS`` is a ``dict[str, Layout]``: file → layout.
Layout = Callable[[], Diagram]


def chapter_modules() -> list:
    """The chapter modules ``solutions/figures/chNN.py``, in chapter order.

    Each draws its chapter's diagrams with :class:`Diagram` and lists them in its own
    ``LAYOUTS`` dictionary; :func:`layouts` gathers them (and :func:`registry` draws from
    them), so there is one list of the book's diagrams and one command that writes them.
    They are imported lazily because they import this module.
    """
    folder = Path(__file__).resolve().parent
    return [importlib.import_module(f"{__package__}.{path.stem}") for path in sorted(folder.glob("ch[0-9][0-9].py"))]


def layouts() -> dict[str, Layout]:
    """Every diagram's layout function (its :class:`Diagram`), by file.

    Returns:
        The ``LAYOUTS`` of every chapter module, in chapter order.

    Raises:
        ValueError: when two modules register the same file.
    """
    merged: dict[str, Layout] = {}
    for module in chapter_modules():
        clash = sorted(set(module.LAYOUTS) & set(merged))
        if clash:
            raise ValueError(f"{module.__name__}.LAYOUTS registers {clash} a second time")
        merged.update(module.LAYOUTS)
    return merged


def registry() -> dict[str, Callable[[], str]]:
    """Every diagram of the book: its file, relative to the repository, → the function drawing it.

    Returns:
        For each file of :func:`layouts`, a function returning its SVG text.

    Raises:
        ValueError: when two modules register the same file.
    """
    return {path: functools.partial(_draw, layout) for path, layout in layouts().items()}


def _draw(layout: Layout) -> str:
    return layout().svg()


# --------------------------------------------------------------------------- command line


def write_all(root: Path = REPO) -> list[Path]:
    """Write every registered diagram under ``root``.

    Args:
        root: the folder the registry's paths are relative to (the repository).

    Returns:
        The paths written whose content changed (or that did not exist).
    """
    changed = []
    for relative, draw in registry().items():
        path = Path(root) / relative
        text = draw()
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            changed.append(path)
    return changed


def stale_files(root: Path = REPO) -> list[str]:
    """The registry paths whose file under ``root`` is missing or differs from the code.

    Args:
        root: the folder the registry's paths are relative to (the repository).

    Returns:
        The stale paths, relative to ``root``, in registry order (empty when all are current).
    """
    stale = []
    for relative, draw in registry().items():
        path = Path(root) / relative
        if not path.is_file() or path.read_text(encoding="utf-8") != draw():
            stale.append(relative)
    return stale


def alt_text(path: str) -> str:
    """The alt text (the ``<desc>``) of the registered diagram at ``path``, for ``:alt:``.

    Raises:
        ValueError: when no diagram is registered at ``path``.
    """
    known = layouts()
    if path not in known:
        raise ValueError(f"no diagram registered at {path!r}; registered: {sorted(known)}")
    return known[path]().desc


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m solutions.figures [--check | --alt] [--root DIR]``.

    Args:
        argv: the arguments (default ``sys.argv[1:]``).

    Returns:
        The exit status: 0, or 1 when ``--check`` finds stale files.
    """
    parser = argparse.ArgumentParser(
        prog="python -m solutions.figures",
        description="Write the book's diagrams (SVG) from solutions/figures/.")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 and name the files that differ from the code")
    parser.add_argument("--alt", action="store_true",
                        help="write nothing; print each diagram's path and alt text (for a figure's :alt:)")
    parser.add_argument("--root", type=Path, default=REPO,
                        help="the folder the diagram paths are relative to (default: the repository)")
    args = parser.parse_args(argv)
    if args.alt:
        for relative in registry():
            print(f"{relative}\n  {alt_text(relative)}\n")
        return 0
    if args.check:
        stale = stale_files(args.root)
        for relative in stale:
            print(f"stale: {relative}", file=sys.stderr)
        if stale:
            print("run `python -m solutions.figures` and commit the SVG files", file=sys.stderr)
            return 1
        print(f"{len(registry())} diagrams up to date")
        return 0
    changed = write_all(args.root)
    for path in changed:
        print(f"wrote {path}")
    print(f"{len(registry())} diagrams, {len(changed)} changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
