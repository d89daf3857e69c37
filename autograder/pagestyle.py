"""The instructor pages' shared look: escaping, the stylesheet, and matplotlib figures as inline SVG.

The class report (:mod:`autograder.report`) and its term pages (:mod:`autograder.term_plots`)
draw with these helpers, so every page escapes the same way and every figure is a
self-contained ``<svg>`` (text drawn as paths, no fonts, no request outside the page).
"""
from __future__ import annotations

import html
import io
import re

__all__ = ["BLUE", "INK", "MUTED", "CSS", "escape", "new_figure", "style_axes", "inline_svg"]

BLUE, INK, MUTED = "#0072b2", "#222222", "#666666"


def inline_svg(fig, label: str) -> str:
    """A matplotlib figure as inline SVG: text drawn as paths (no font files), no
    XML prologue, DOCTYPE or metadata, an accessible label, scaled to the column."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": "class-report"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)
    text = re.sub(r'<svg\b', f'<svg role="img" aria-label="{html.escape(label)}" class="figure"', text, count=1)
    return text


def new_figure(width: float, height: float):
    """An empty matplotlib figure of ``width`` x ``height`` inches with a transparent background."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    fig.patch.set_alpha(0)
    return fig


def style_axes(ax) -> None:
    """The pages' axes: no top or right spine, small dark tick labels."""
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.tick_params(colors=INK, labelsize=9)


CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 62rem; margin: 2rem auto;
       padding: 0 1rem; color: #222; line-height: 1.45; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { font-size: 1.2rem; margin-top: 2rem;
     border-top: 1px solid #ddd; padding-top: 1rem; }
.lead { color: #555; margin-top: 0; }
table { border-collapse: collapse; margin: .8rem 0; width: 100%; }
th, td { border-bottom: 1px solid #ddd; padding: .3rem .5rem; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
.track { display: inline-block; width: 4rem; height: .7rem; background: #e6e6e6; vertical-align: middle;
         margin-right: .4rem; } .track .bar { display: block; height: 100%; background: #0072b2; }
.headline { font-size: 1.05rem; margin: .3rem 0; } .headline b { color: #0072b2; }
code { background: #f4f4f4; padding: 0 .2rem; border-radius: 3px; }
svg.figure { width: 100%; max-width: 46rem; height: auto; display: block; margin: .5rem 0; }
details summary { cursor: pointer; color: #555; } .muted { color: #666; } .earned { color: #176317; }
.missed { color: #a11; }
"""


def escape(text) -> str:
    """``text`` (any value) escaped for HTML text and attribute values."""
    return html.escape(str(text), quote=True)
