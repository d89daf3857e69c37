"""The pages' shared look: templates, escaping, the stylesheet, and matplotlib figures as inline SVG.

The feedback pages (:mod:`autograder.feedback`) and the class report (:mod:`autograder.report`)
are Jinja2 templates, ``autograder/templates/*.html`` (package data, shipped in the Gradescope
zip too), rendered by :func:`render_page`; the term pages (:mod:`autograder.term_plots`) draw
with the helpers below. Every page escapes the same way and every figure is a self-contained
``<svg>`` (text drawn as paths, no fonts, no request outside the page).

Escaping. The templates' environment autoescapes, and every ``{{ value }}`` is first passed
through :func:`escape` (the environment's ``finalize``), which marks it as HTML: so each value
is escaped once, as :func:`html.escape` does it (``'`` as ``&#x27;``, ``"`` as ``&quot;``:
the pages' bytes before the templates), and a template that bypassed ``finalize`` would
still meet Jinja2's own autoescape. Only values that already are HTML (:class:`Markup`:
figures, the stylesheet, a fragment built from escaped parts) pass unchanged.
"""
from __future__ import annotations

import functools
import html
import io
import re
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from .text import score_text

__all__ = ["BLUE", "INK", "MUTED", "CSS", "TEMPLATES", "Markup", "escape", "render_page", "new_figure", "style_axes",
           "inline_svg"]

# The pages' templates (package data: pyproject's [tool.setuptools.package-data], the Gradescope zip).
TEMPLATES = Path(__file__).resolve().parent / "templates"

BLUE, INK, MUTED = "#0072b2", "#222222", "#666666"


def inline_svg(fig, label: str) -> str:
    """A matplotlib figure as inline SVG: text drawn as paths (no font files), no
    XML prologue, DOCTYPE or metadata, an accessible label, scaled to the column."""
    # matplotlib (heavy) only for a page that draws a figure
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
    # matplotlib (heavy) only for a page that draws a figure
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


def _finalize(value) -> Markup:
    """Every ``{{ value }}`` of a template: HTML already (``__html__``) as it is, else escaped."""
    if hasattr(value, "__html__"):
        return Markup(value)
    return Markup(escape(value))


@functools.cache
def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=True, finalize=_finalize,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["points"] = score_text  # 1.5, 2 (no ".0"): the CSVs' and the console's numbers
    return env


def render_page(name: str, **context) -> str:
    """Render ``autograder/templates/<name>`` with ``context`` (every value escaped: see above).

    Raises:
        jinja2.TemplateNotFound: no such template; jinja2.UndefinedError: the template
            reads a name ``context`` does not give.
    """
    return _environment().get_template(name).render(**context)
