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
  as in :func:`solutions.viz.plot_mask`: a filled cell is True (may attend), an
  empty hatched cell is False (masked);
* **data flow** is an arrow; a dashed **frame** groups what happens per head or per
  layer; a **note** in a smaller, muted font says what a step does or what shape
  travels along an arrow.

A diagram is a function returning its :class:`Diagram` (the layout, which
``.svg()`` turns into the SVG text); :data:`LAYOUTS` maps the file it is written to
(relative to the repository) to that function, :func:`layouts` adds those of the
chapter modules ``solutions/diagrams_<name>.py``, and :func:`registry` gives, for
each file, the function that draws its SVG. ``python -m
solutions.diagrams`` writes every file; ``python -m solutions.diagrams --check``
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
    "text_width",
    "plain_text",
    "mask_example",
    "MAX_WIDTH",
    "LAYOUTS",
    "chapter_modules",
    "registry",
    "layouts",
    "write_all",
    "stale_files",
    "alt_text",
    "main",
]

REPO = Path(__file__).resolve().parent.parent

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
ALLOWED = "#2b6cb0"      # a True mask cell: the colour of solutions.viz.plot_mask
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


def _num(value: float) -> str:
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
        attrs = (f'x="{_num(x)}" y="{_num(baseline)}" font-size="{_num(size)}" '
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
            attrs = f' dy="{_num(dy)}"' if dy else ""
            if script:
                attrs += f' font-size="{_num(_script_size(size))}"'
            out.append(f"<tspan{attrs}>{escape(run)}</tspan>" if attrs else escape(run))
        return "".join(out)

    # ----------------------------------------------------------------- vocabulary

    def tensor(self, label: str, shape: str, role: str, *, cx: float, top: float,
               word: str | None = None, dashed: bool = False, min_width: float = 0) -> Rect:
        """Draw a tensor: its notation and role word on top, its shape underneath.

        Args:
            label: the book's notation, with markup (``"W^Q"``, ``"Q K^T"``).
            shape: its shape in the paper's names, shown as written (``"(B, h, T, d_k)"``).
            role: a key of :data:`ROLES`; sets the colours and the default role word.
            cx: the box's horizontal centre.
            top: the box's top edge.
            word: the word beside the label; default the role's word; ``""`` for
                none (when the label already says it, as ``weights`` does).
            dashed: draw the outline dashed: an optional input.
            min_width: make the box at least this wide (to line up a column).

        Returns:
            The box's rectangle.
        """
        style = self._role(role)
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
        return rect

    def operation(self, label: str, *, cx: float, top: float, dashed: bool = False) -> Rect:
        """Draw an operation: a white rounded pill with its name (``"softmax over the keys"``).

        Args:
            label: what the operation does, with markup (``"÷ √d_{k}"``).
            cx: the pill's horizontal centre.
            top: the pill's top edge.
            dashed: an optional step (drawn dashed).

        Returns:
            The pill's rectangle.
        """
        width = max(text_width(label, OP_SIZE) + 2 * 16, 56)
        rect = Rect(cx - width / 2, top, width, OP_H)
        self._rect(rect, fill="#ffffff", stroke=INK, radius=OP_H / 2, dashed=dashed, stroke_width=1.4)
        self._text(label, cx, top + OP_H / 2 + 5, OP_SIZE, owner=rect)
        self.boxes.append(rect)
        return rect

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
                        f'<rect x="{_num(gx + j * CELL)}" y="{_num(grid_top + i * CELL)}" width="{CELL}" '
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
            self._body.append(f'<rect x="{_num(cell.x)}" y="{_num(cell.y)}" width="14" height="14" '
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
        path = " ".join(f"{_num(x)},{_num(y)}" for x, y in points)
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
            f'<rect x="{_num(rect.x)}" y="{_num(rect.y)}" width="{_num(rect.w)}" height="{_num(rect.h)}" '
            f'rx="{_num(radius)}" fill="{fill}" stroke="{stroke}" '
            f'stroke-width="{_num(stroke_width)}"{dash}/>')

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
        x0, y0, width, height = _num(box.x), _num(box.y), _num(box.w), _num(box.h)
        title_id, desc_id = f"{self.name}-title", f"{self.name}-desc"
        head = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="{x0} {y0} {width} {height}" role="img" aria-labelledby="{title_id} {desc_id}">',
            f'<title id="{title_id}">{escape(self.title)}</title>',
            f'<desc id="{desc_id}">{escape(self.desc)}</desc>',
            "<!-- Generated by `python -m solutions.diagrams` (solutions/diagrams.py): do not edit. -->",
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


# --------------------------------------------------------------------------- the diagrams


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

    scores = d.tensor("Q K^T", "(n_q, n_k)", "scores", cx=main_x, top=matmul_qk.bottom + GAP)
    d.down(matmul_qk, scores)
    d.note(["one row per query,", "one column per key"], x=scores.right + 14, top=scores.top + 6)

    scale = d.operation("÷ √d_{k}", cx=main_x, top=scores.bottom + GAP)
    d.down(scores, scale)

    masked = d.operation("optional mask (ch. 6)", cx=main_x, top=scale.bottom + GAP + 4, dashed=True)
    d.down(scale, masked)
    d.note("(n_q, n_k)", x=main_x + 10, top=scale.bottom + 7, mono=True)
    mask = d.tensor("mask", "(n_q, n_k)", "masks", cx=480, top=masked.cy - TENSOR_H / 2,
                    word="True = may attend", dashed=True)
    d.arrow((mask.left, masked.cy), (masked.right, masked.cy), dashed=True)
    d.note(["where the mask is False,", "the score becomes −∞"], x=mask.left, top=mask.bottom + 6)

    softmax = d.operation("softmax over the keys", cx=main_x, top=masked.bottom + GAP + 4)
    d.down(masked, softmax)
    d.note("(n_q, n_k)", x=main_x + 10, top=masked.bottom + 7, mono=True)

    weights = d.tensor("weights", "(n_q, n_k)", "scores", word="", cx=main_x, top=softmax.bottom + GAP)
    d.down(softmax, weights)
    d.note(["each row sums to 1", "(−∞ → weight exactly 0)"], x=weights.right + 14, top=weights.top + 6)

    matmul_v = d.operation("weights @ V", cx=main_x, top=weights.bottom + GAP)
    d.down(weights, matmul_v)
    d.arrow((v.cx, v.bottom), (v.cx, matmul_v.cy), (matmul_v.right, matmul_v.cy))

    out = d.tensor("output", "(n_q, d_v)", "other", cx=main_x, top=matmul_v.bottom + GAP)
    d.down(matmul_v, out)
    d.note(["one weighted average", "of the values per query"], x=out.right + 14, top=out.top + 6)
    return d


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
        full[role] = d.tensor(names[role], "(B, T, d_model)", role, cx=cx, top=top, min_width=140)
        d.down(projections[role], full[role])

    split = {}
    top = top + TENSOR_H + GAP
    for role, cx in lanes.items():
        split[role] = d.operation("split heads", cx=cx, top=top)
        d.down(full[role], split[role])
    d.note(["view (B, T, h, d_k),", "then swap T and h"], x=note_x, top=top - 2)

    heads_in = {}
    top = top + OP_H + GAP
    for role, cx in lanes.items():
        heads_in[role] = d.tensor(names[role], "(B, h, T, d_k)", role, cx=cx, top=top, min_width=140)
        d.down(split[role], heads_in[role])
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

    heads_out = d.tensor("heads", "(B, h, T, d_k)", "other", cx=lanes["keys"], top=per_head.bottom + GAP)
    d.down(attend, heads_out)

    merge = d.operation("merge heads", cx=lanes["keys"], top=heads_out.bottom + GAP)
    d.down(heads_out, merge)
    d.note(["swap h and T back,", "then reshape"], x=note_x, top=merge.top - 2)

    concat = d.tensor("concat", "(B, T, h·d_k)", "other", cx=lanes["keys"], top=merge.bottom + GAP)
    d.down(merge, concat)
    d.note(["h heads side by side:", "h·d_k = d_model"], x=note_x, top=concat.top + 6)

    project = d.operation("@ W^O", cx=lanes["keys"], top=concat.bottom + GAP)
    d.down(concat, project)
    d.note("mixes the heads:", x=note_x, top=project.top - 4)
    d.note("(d_model, d_model)", x=note_x, top=project.top + 14, mono=True)

    out = d.tensor("output", "(B, T, d_model)", "other", cx=lanes["keys"], top=project.bottom + GAP)
    d.down(project, out)
    return d


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

    softmax = d.operation("softmax over the keys", cx=fill.cx, top=fill.bottom + GAP)
    d.down(fill, softmax)
    weights = d.tensor("weights", "(B, h, T_q, T_k)", "scores", word="", cx=fill.cx,
                       top=softmax.bottom + GAP)
    d.down(softmax, weights)
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


#: The diagrams of this module: file, relative to the repository, → the function laying it
#: out (its text boxes and element boxes, for the tests; ``.svg()`` for the file).
LAYOUTS: dict[str, Callable[[], Diagram]] = {
    "book/04_self_attention/figures/scaled_dot_product_attention.svg": _sdpa_layout,
    "book/05_multi_head_attention/figures/multi_head_attention.svg": _mha_layout,
    "book/06_masking/figures/mask_broadcast.svg": _mask_layout,
}


def chapter_modules() -> list:
    """The modules ``solutions/diagrams_<name>.py``, in name order.

    A chapter whose diagram needs an element of its own (a wave, a stack of layers)
    draws it in such a module, built on :class:`Diagram`, with its own ``LAYOUTS``
    dictionary; :func:`layouts` gathers them (and :func:`registry` draws from them),
    so there is still one list of the book's diagrams and one command that writes them.
    They are imported here, lazily, because they import this module.
    """
    folder = Path(__file__).resolve().parent
    return [importlib.import_module(f"{__package__ or 'solutions'}.{path.stem}")
            for path in sorted(folder.glob("diagrams_*.py"))]


def layouts() -> dict[str, Callable[[], Diagram]]:
    """Every diagram's layout function (its :class:`Diagram`), by file.

    Returns:
        :data:`LAYOUTS` and the ``LAYOUTS`` of every chapter module, in that order.

    Raises:
        ValueError: when two modules register the same file.
    """
    merged = dict(LAYOUTS)
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


def _draw(layout: Callable[[], Diagram]) -> str:
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
    """``python -m solutions.diagrams [--check | --alt] [--root DIR]``.

    Args:
        argv: the arguments (default ``sys.argv[1:]``).

    Returns:
        The exit status: 0, or 1 when ``--check`` finds stale files.
    """
    parser = argparse.ArgumentParser(
        prog="python -m solutions.diagrams",
        description="Write the book's diagrams (SVG) from solutions/diagrams.py.")
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
            print("run `python -m solutions.diagrams` and commit the SVG files", file=sys.stderr)
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
