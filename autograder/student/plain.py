"""Student notebooks in plain Markdown: the book's MyST turned into what every front-end renders.

The chapters are written in MyST for Jupyter Book. JupyterLab, Notebook 7, VS Code,
Colab and a JupyterHub render the markdown cells of a notebook as CommonMark plus a
little HTML, so there a student would read ``:::{dropdown} Hint 1`` fences,
``(sec-1-4)=`` lines and ``{cite:t}`vaswani2017attention``` roles. The release
(:func:`autograder.release.student_version`) starts with :func:`plain_notebook`, which
rewrites only the markdown cells:

========================  ==================================================================
MyST                      plain notebook
========================  ==================================================================
``{dropdown}`` fence      ``<details><summary>TITLE</summary>`` … ``</details>`` (folded;
                          the body stays Markdown, math included)
``{admonition}``,         a blockquote whose first line is the bold title
``{note}``, ``{tip}``, …
``{figure}``              ``![alt](same/relative/path)`` and the caption in italics below
``(label)=``              removed; ``<a id="label"></a>`` where a link or ``{ref}`` of the
                          book points to it, so that ``[§1.4](#sec-1-4)`` still jumps there
``{cite:t}`k```           ``Vaswani et al. (2017)``; ``{cite:p}`k``` and ``{cite}`k```:
                          ``(Vaswani et al., 2017)``; a References cell is appended
``{ref}`text <label>```   ``[text](#label)`` (same chapter) or
                          ``[text](../<ch>/<ch>.ipynb#label)`` (another chapter)
========================  ==================================================================

Any other directive or role raises ``ValueError`` naming the chapter, the cell and the
construct: a new chapter cannot ship raw MyST unnoticed.

What is a fence (```````, ``~~~``, ``:::``), where it closes, what is a ``(label)=``
target, and which backticks make a role or a code span (a backslash before its ``{``
leaves a role as text) is markdown-it-py's decision, with the MyST plugins of
mdit-py-plugins (the parser Jupyter Book's MyST is built on); only what it found is
rewritten, in place, so everything but the MyST constructs comes back byte for byte.
The BibTeX is pybtex's. Code cells, ``$…$`` and
``$$…$$`` math, HTML already in the text, plain code fences and cell metadata are left
as they are.
"""
from __future__ import annotations

import copy
import html
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
from markdown_it import MarkdownIt
from mdit_py_plugins.colon_fence import colon_fence_plugin
from mdit_py_plugins.myst_blocks import myst_block_plugin
from mdit_py_plugins.myst_role import myst_role_plugin
from pybtex.backends.plaintext import Backend as PlainTextBackend
from pybtex.database import Person, parse_string
from pybtex.exceptions import PybtexError
from pybtex.richtext import Text

__all__ = [
    "BibEntry",
    "Label",
    "read_bibtex",
    "parse_bibtex",
    "parse_name",
    "latex_to_text",
    "book_labels",
    "cite_text",
    "reference_text",
    "plain_markdown",
    "plain_notebook",
    "MYST_LEFTOVER",
]

BOOK = Path(__file__).resolve().parents[2] / "book"

#: What raw MyST looks like in a markdown cell: a directive fence, a role, a target line.
MYST_LEFTOVER = re.compile(
    r"^\s*(`{3,}|~{3,}|:{3,})\s*\{[^}\n]*\}"      # ```{name} / :::{name}
    r"|\{[A-Za-z][\w:.+-]*\}`"                     # {role}`...`
    r"|^\s*\([^()\s]+\)=\s*$",                     # (label)=
    re.MULTILINE,
)

# --------------------------------------------------------------------------- BibTeX


def latex_to_text(value: str) -> str:
    """The plain Unicode text of a BibTeX field value (pybtex's LaTeX reader): accents
    (``{\\"e}``, ``\\"{e}``, ``\\'e``, ``\\c{c}``), letters (``{\\L}``, ``\\ss``), escaped
    specials (``\\&``), dashes (``--``, ``---``), ``~`` and the braces that protect capitals
    (``{RNN}``) are resolved; whitespace is collapsed.

    Raises:
        ValueError: on a LaTeX command it does not know (it would print as garbage).
    """
    # pybtex's render_as("text") looks the backend up among every installed package's
    # entry points on each call: 20 CPU s for the book's references, once per process
    text = Text.from_latex(value).render(PlainTextBackend())
    unknown = re.search(r"\\([A-Za-z]+|.)", text)
    if unknown:
        raise ValueError(f"unknown LaTeX command \\{unknown.group(1)} in BibTeX value {value!r}")
    return re.sub(r"[ \t\r\n]+", " ", text).strip(" ")


def _name_parts(person: Person) -> tuple[str, str]:
    """``(last, first)`` of a pybtex person, in plain text; *last* keeps its *von* and *Jr* parts."""
    last = " ".join(person.prelast_names + person.last_names)
    if person.lineage_names:
        last += ", " + " ".join(person.lineage_names)
    return latex_to_text(last), latex_to_text(" ".join(person.first_names + person.middle_names))


def parse_name(name: str) -> tuple[str, str]:
    """``(last, first)`` of one BibTeX name, in plain text; *last* keeps its *von* part
    and *Jr* part (``van Merriënboer``).

    Both forms are read (by pybtex, as BibTeX reads them): ``von Last, First`` (also
    ``von Last, Jr, First``) and ``First von Last``. A braced group (``{Google Brain
    Team}``) is one word.
    """
    return _name_parts(Person(name))


@dataclass
class BibEntry:
    """One work of ``references.bib``: its key, type, fields (plain text, lower-case
    names) and authors as ``(last, first)`` pairs (``("others", "")`` for *and others*)."""

    key: str
    type: str
    fields: dict[str, str]
    authors: list[tuple[str, str]] = field(default_factory=list)

    @property
    def year(self) -> str:
        return self.fields.get("year", "n.d.")

    def short_authors(self) -> str:
        """One author: ``Last``; two: ``A and B``; three or more: ``A et al.``"""
        lasts = [last for last, _ in self.authors] or [self.fields.get("organization", self.key)]
        if len(lasts) >= 3 or (len(lasts) == 2 and lasts[1] == "others"):
            return f"{lasts[0]} et al."
        return " and ".join(lasts)


def parse_bibtex(text: str, source: str = "BibTeX") -> dict[str, BibEntry]:
    """The entries of a BibTeX file, by key (read by pybtex, strictly).

    Args:
        text: the file's text: ``@type{key, name = value, …}`` (or with parentheses),
            values in braces, quotes, numbers or ``@string`` macros joined with ``#``;
            ``@comment``, ``@preamble`` and text outside an entry are skipped.
        source: what to name in an error (the file).

    Raises:
        ValueError: a malformed entry, an undefined macro, a duplicate key.
    """
    try:
        data = parse_string(text, "bibtex")
    except PybtexError as exc:
        raise ValueError(f"{source}: {exc}") from None
    entries = {}
    for key, entry in data.entries.items():
        authors = [_name_parts(person) for person in entry.persons.get("author", [])]
        fields = {name.lower(): latex_to_text(value) for name, value in entry.fields.items()}
        entries[key] = BibEntry(key, entry.type.lower(), fields, authors)
    return entries


def read_bibtex(path: Path) -> dict[str, BibEntry]:
    """:func:`parse_bibtex` of the file at ``path``."""
    return parse_bibtex(Path(path).read_text(encoding="utf-8"), source=str(path))


# --------------------------------------------------------------------------- citations

_CITE_ROLES = {"cite", "cite:p", "cite:t", "cite:ps", "cite:ts", "cite:author", "cite:year"}


def cite_text(role: str, keys: list[str], bibliography: dict[str, BibEntry]) -> str:
    """The author-year text of a citation role.

    ``cite:t`` → ``Vaswani et al. (2017)``; ``cite:p`` and ``cite`` →
    ``(Vaswani et al., 2017)``; several keys are joined with ``; ``. ``cite:ts`` and
    ``cite:ps`` name every author; ``cite:author`` and ``cite:year`` give one half.

    Raises:
        ValueError: a key that is not in the bibliography.
    """
    missing = [k for k in keys if k not in bibliography]
    if missing:
        raise ValueError(f"{{{role}}}: unknown citation key(s) {', '.join(missing)} (not in references.bib)")
    entries = [bibliography[k] for k in keys]

    def names(e: BibEntry) -> str:
        if role in ("cite:ts", "cite:ps"):
            lasts = [last for last, _ in e.authors]
            return lasts[0] if len(lasts) == 1 else ", ".join(lasts[:-1]) + " and " + lasts[-1]
        return e.short_authors()

    if role in ("cite:t", "cite:ts"):
        return "; ".join(f"{names(e)} ({e.year})" for e in entries)
    if role == "cite:author":
        return "; ".join(names(e) for e in entries)
    if role == "cite:year":
        return "; ".join(e.year for e in entries)
    return "(" + "; ".join(f"{names(e)}, {e.year}" for e in entries) + ")"


def _md_escape(text: str) -> str:
    """``text`` with the characters that Markdown would read as syntax escaped."""
    return re.sub(r"([\\`*_\[\]<>#|])", r"\\\1", text)


def _alt_escape(text: str) -> str:
    """An image description that CommonMark reads back as ``text``: the characters that
    would open a tag, a link or an escape are backslash-escaped; ``*`` and ``_`` stay
    (at worst an emphasis in the alt text loses its markers)."""
    return re.sub(r"([\\\[\]<>`])", r"\\\1", " ".join(text.split()))


def _url(path: str) -> str:
    """A link destination: in ``<…>`` when it holds a space or a parenthesis."""
    return f"<{path}>" if re.search(r"[\s()]", path) else path


def reference_text(entry: BibEntry) -> str:
    """One line of the References cell: authors (year). Title. *Venue*, details. Link."""
    people = [f"{first} {last}".strip() for last, first in entry.authors if last != "others"]
    if len(people) > 2:
        authors = ", ".join(people[:-1]) + ", and " + people[-1]
    else:
        authors = " and ".join(people)
    if any(last == "others" for last, _ in entry.authors):
        authors += " et al."
    f = entry.fields
    venue = f.get("booktitle") or f.get("journal") or f.get("howpublished") or f.get("school") or ""
    details = []
    if f.get("journal") and f.get("volume"):
        details.append(f["volume"] + (f"({f['number']})" if f.get("number") else ""))
    if f.get("pages"):
        details.append(("pp. " if not f.get("journal") else "") + f["pages"])
    if entry.type == "book" and f.get("publisher"):
        details.append(f["publisher"])
    if f.get("type") and not venue:
        venue = f["type"]
    elif f.get("type"):
        details.insert(0, f["type"])
    text = f"{_md_escape(authors or entry.key)} ({entry.year}). {_md_escape(f.get('title', '').rstrip('.'))}."
    if venue:
        text += f" *{_md_escape(venue)}*"
        text += (", " + ", ".join(_md_escape(d) for d in details) if details else "") + "."
    elif details:
        text += " " + ", ".join(_md_escape(d) for d in details) + "."
    if f.get("doi"):
        text += f" <https://doi.org/{f['doi']}>"
    elif f.get("url"):
        text += f" <{f['url']}>"
    return text


# --------------------------------------------------------------------------- labels


@dataclass(frozen=True)
class Label:
    """A MyST target of the book: ``(name)=`` before a heading, or a figure's ``:name:``.

    Attributes:
        name: the label.
        title: the heading's text (a figure: its caption's first sentence).
        document: the chapter id (``04_self_attention``) or page (``how_to_use``).
        notebook: whether ``document`` is a chapter notebook (released beside the others).
        referenced: whether a ``[…](#name)`` link or a ``{ref}`` of the book points to it.
    """

    name: str
    title: str
    document: str
    notebook: bool
    referenced: bool = False


_LINK_TARGET = re.compile(r"\]\([^)\s]*#([^)\s]+)\)")
_REF_TARGET = re.compile(r"\{(?:ref|numref)\}`(?:[^`<]*<([^`>]+)>|([^`<>]+))`")


def _labels_of(text: str, document: str, notebook: bool) -> list[Label]:
    """The labels ``text`` defines, in order: each ``(label)=`` target (titled by the heading
    that follows it, else by its name) and each directive's ``:name:`` (titled by the first
    paragraph of its content: a figure's caption), in directives within directives too."""
    labels = []
    tokens = _MARKDOWN.parse(text)
    for i, token in enumerate(tokens):
        if token.type == "myst_target":
            j = next((j for j in range(i + 1, len(tokens))
                      if tokens[j].nesting >= 0 and tokens[j].type != "myst_target"), None)
            heading = j is not None and tokens[j].type == "heading_open"  # its text is the next token's
            labels.append(Label(token.content, tokens[j + 1].content if heading else token.content, document,
                                notebook))
        elif token.type in ("fence", "colon_fence") and _DIRECTIVE_INFO.match(token.info):
            options, content = _split_options(token.content.split("\n"))
            if options.get("name"):
                caption = []
                for line in content:
                    if not line.strip():
                        break
                    caption.append(line.strip())
                labels.append(Label(options["name"], " ".join(caption) or options["name"], document, notebook))
            labels += _labels_of("\n".join(content), document, notebook)
    return labels


def book_labels(book: Path = BOOK) -> dict[str, Label]:
    """Every label of the book's chapters (markdown cells) and pages (``*.md``), with
    ``referenced`` set for those a link or ``{ref}`` anywhere in the book points to.

    Raises:
        ValueError: a label defined twice.
    """
    texts: list[tuple[str, str, bool]] = []
    for path in sorted(Path(book).glob("*/*.ipynb")):
        if path.stem != path.parent.name:
            continue
        nb = nbformat.read(str(path), as_version=4)
        texts.append(("\n\n".join(c.source for c in nb.cells if c.cell_type == "markdown"), path.stem, True))
    for path in sorted(Path(book).glob("*.md")):
        texts.append((path.read_text(encoding="utf-8"), path.stem, False))
    labels: dict[str, Label] = {}
    wanted: set[str] = set()
    for text, document, notebook in texts:
        for label in _labels_of(text, document, notebook):
            if label.name in labels:
                raise ValueError(f"label {label.name!r} is defined in {labels[label.name].document} "
                                 f"and in {document}")
            labels[label.name] = label
        wanted.update(m.group(1) for m in _LINK_TARGET.finditer(text))
        wanted.update(m.group(1) or m.group(2).strip() for m in _REF_TARGET.finditer(text))
    return {name: Label(lb.name, lb.title, lb.document, lb.notebook, name in wanted)
            for name, lb in labels.items()}


# --------------------------------------------------------------------------- Markdown

_ADMONITIONS = {"admonition", "note", "tip", "hint", "important", "warning", "caution",
                "attention", "danger", "error", "seealso"}
# CommonMark with MyST's block syntax: ``:::`` fences and ``(label)=`` targets (mdit-py-plugins,
# the parser MyST itself is built on), so that what is a fence, where it closes and what is
# a target is decided as Jupyter Book decides it. Blocks only: the inline parse (which
# would split every paragraph into tokens no rule here reads) is off.
_MARKDOWN = MarkdownIt("commonmark").use(colon_fence_plugin).use(myst_block_plugin).disable(["inline", "text_join"])
# A line that could open one of them: text without any is not parsed at all (most cells).
_MAY_OPEN = re.compile(r"^[ \t]*(?:`{3,}|~{3,}|:{3,}|\(.*\)=)", re.MULTILINE)
_DIRECTIVE_INFO = re.compile(r"^\s*\{(?P<name>[^}\s]+)\}\s*(?P<arg>.*?)\s*$")
_OPTION = re.compile(r"^:(?P<key>[\w-]+):\s*(?P<value>.*?)\s*$")


class _Context:
    """What converting one notebook needs and collects."""

    def __init__(self, labels: dict[str, Label], bibliography: dict[str, BibEntry] | None,
                 chapter: str | None, cited: list[str] | None):
        self.labels = labels
        self.bibliography = bibliography
        self.chapter = chapter
        self.cited = cited if cited is not None else []


def _recording(rule):
    """``rule`` (an inline rule of markdown-it) that also notes, in the parse's ``env``, the
    exact text of what it matched (its token's type and the source it consumed)."""

    def record(state, silent: bool) -> bool:
        start = state.pos
        if not rule(state, silent):
            return False
        if not silent:
            state.env.setdefault("spans", []).append((state.tokens[-1].type, state.src[start:state.pos]))
        return True

    return record


# CommonMark's inline syntax with MyST's roles (mdit-py-plugins' myst_role, as Jupyter Book
# reads them): which backtick runs open a role or a code span, where each one closes, what a
# backslash escapes and what is raw HTML are markdown-it's decisions. Its two rules for
# backticks note the text of each role and code span they match (_recording); nothing is
# rendered, and every other byte of the cell is kept as it was written.
_INLINE = MarkdownIt("commonmark").use(myst_role_plugin)
for _rule in _INLINE.inline.ruler.__rules__:
    if _rule.name in ("myst_role", "backticks"):
        _INLINE.inline.ruler.at(_rule.name, _recording(_rule.fn))
# A role as myst_role matches it: ``{name}``, a run of backticks, the content, the same run.
_ROLE = re.compile(r"\{(?P<name>[A-Za-z0-9_+:-]+)\}(?P<ticks>`+)(?P<content>.*)(?P=ticks)\Z", re.DOTALL)


def _inline(text: str, ctx: _Context) -> str:
    """``text`` with its roles replaced; code spans and everything else copied unchanged.

    markdown-it finds the roles and code spans (:data:`_INLINE`), in order; each is found
    again in ``text`` from where the last one ended (a line break in it may be followed
    there by the indentation or ``>`` of the list or quote it stands in, which markdown-it
    took off), and only a role's own characters are replaced (:func:`_role`).
    """
    if "`" not in text:
        return text
    env: dict = {}
    _INLINE.parse(text, env)
    out, i = [], 0
    for kind, literal in env.get("spans", []):
        where = re.compile(r"\n[ \t>]*".join(re.escape(line) for line in literal.split("\n"))).search(text, i)
        if where is None:
            raise ValueError(f"the text of {literal!r} was not found again in the cell")
        out.append(text[i:where.start()])
        found = where.group()
        role = _ROLE.match(found) if kind == "myst_role" else None
        out.append(_role(role.group("name"), role.group("content"), ctx) if role else found)
        i = where.end()
    out.append(text[i:])
    return "".join(out)


def _role(name: str, content: str, ctx: _Context) -> str:
    """The plain Markdown of role ``{name}`content```."""
    if name in _CITE_ROLES:
        if "{" in content:
            raise ValueError(f"{{{name}}}`{content}`: citation pre/post notes are not supported")
        keys = [k.strip() for k in re.split(r"[,;]", content) if k.strip()]
        if not keys:
            raise ValueError(f"{{{name}}}`{content}`: no citation key")
        if ctx.bibliography is None:
            raise ValueError(f"{{{name}}}`{content}`: the book has no references.bib")
        text = cite_text(name, keys, ctx.bibliography)
        ctx.cited.extend(k for k in keys if k not in ctx.cited)
        return text
    if name in ("ref", "numref"):
        m = re.fullmatch(r"\s*(?P<text>.*?)\s*<(?P<label>[^<>]+)>\s*", content, re.DOTALL)
        text, label = (m.group("text"), m.group("label").strip()) if m else (None, content.strip())
        target = ctx.labels.get(label)
        if target is None:
            raise ValueError(f"{{{name}}}`{content}`: label {label!r} is defined nowhere in the book")
        if not text:
            text = target.title
        if not target.notebook:
            return text  # a page of the web book: not part of a release
        if target.document == ctx.chapter:
            return f"[{text}](#{label})"
        return f"[{text}](../{target.document}/{target.document}.ipynb#{label})"
    if name == "math":
        return f"${content}$"
    raise ValueError(f"unknown MyST role {{{name}}}`{content}`")


def _anchor(label: str, ctx: _Context) -> list[str]:
    target = ctx.labels.get(label)
    if target is not None and target.referenced:
        return [f'<a id="{html.escape(label, quote=True)}"></a>']
    return []


def _myst_blocks(lines: list[str]) -> list[tuple[int, int, Any]]:
    """The fences (`````, ``~~~``, ``:::``) and targets (``(label)=``) of ``lines``, as
    markdown-it parses them: ``(first line, line after the last, token)``, in order.

    A fence counts only when its opening line starts with it (after spaces): one behind a
    block quote's ``>`` or a list marker stays text, as do the fences inside a fence."""
    text = "\n".join(lines)
    if not _MAY_OPEN.search(text):
        return []
    found = []
    for token in _MARKDOWN.parse(text):
        if token.map is None or token.type not in ("fence", "colon_fence", "myst_target"):
            continue
        start, end = token.map
        if token.type != "myst_target" and not lines[start].lstrip(" \t").startswith(token.markup):
            continue
        found.append((start, end, token))
    return found


def _closes(line: str, fence: str) -> bool:
    """Whether ``line`` closes ``fence`` (the same character, at least as many, nothing else)."""
    return re.fullmatch(r"[ \t]*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*", line) is not None


def _split_options(body: list[str]) -> tuple[dict[str, str], list[str]]:
    """A directive's ``:key: value`` lines (or ``---`` YAML block) and its content."""
    options: dict[str, str] = {}
    k = 0
    if body and body[0].strip() == "---":
        end = next((j for j in range(1, len(body)) if body[j].strip() == "---"), None)
        if end is None:
            raise ValueError("a directive's option block '---' is not closed")
        for line in body[1:end]:
            if line.strip():
                key, _, value = line.partition(":")
                options[key.strip()] = value.strip()
        k = end + 1
    else:
        while k < len(body) and _OPTION.match(body[k].strip()) and body[k].strip():
            m = _OPTION.match(body[k].strip())
            options[m.group("key")] = m.group("value")
            k += 1
    content = body[k:]
    while content and not content[0].strip():
        content = content[1:]
    while content and not content[-1].strip():
        content = content[:-1]
    return options, content


def _dedent(lines: list[str], indent: str) -> list[str]:
    return [ln[len(indent):] if ln.startswith(indent) else ln.lstrip() for ln in lines]


def _directive(name: str, arg: str, body: list[str], ctx: _Context) -> list[str]:
    """The plain Markdown lines of directive ``{name} arg`` with raw ``body`` lines."""
    options, content = _split_options(body)
    if name == "dropdown":
        title = _inline(arg, ctx) if arg else "Details"
        inner = _blocks(content, ctx)
        opened = " open" if "open" in options else ""
        return [f"<details{opened}>", f"<summary>{html.escape(title, quote=False)}</summary>", "",
                *inner, "", "</details>"]
    if name in _ADMONITIONS:
        if name == "admonition":
            if not arg:
                raise ValueError("{admonition} needs a title")
            title = arg
        else:
            title = "See also" if name == "seealso" else name.capitalize()
            if arg:
                content = [arg, *content]
        inner = _blocks(content, ctx)
        quoted = [f"> **{_inline(title, ctx)}**"]
        if inner:
            quoted.append(">")
            quoted += [f"> {ln}" if ln.strip() else ">" for ln in inner]
        return _anchor(options.get("name", ""), ctx) + quoted
    if name == "figure":
        if not arg:
            raise ValueError("{figure} needs an image path")
        paragraphs: list[list[str]] = [[]]
        for line in content:
            if line.strip():
                paragraphs[-1].append(line)
            elif paragraphs[-1]:
                paragraphs.append([])
        caption = [ln.strip() for ln in paragraphs[0]]
        legend = [ln for p in paragraphs[1:] for ln in (p + [""])]
        caption_text = _inline(" ".join(caption), ctx)
        alt = options.get("alt") or re.sub(r"[$*`]", "", caption_text) or Path(arg).stem
        out = _anchor(options.get("name", ""), ctx)
        out += [f"![{_alt_escape(alt)}]({_url(arg)})"]
        if caption_text:
            out += ["", f"*{caption_text}*"]
        if legend:
            out += ["", *_blocks(legend[:-1], ctx)]
        return out
    raise ValueError(f"unknown MyST directive {{{name}}}" + (f" {arg}" if arg else ""))


def _blocks(lines: list[str], ctx: _Context) -> list[str]:
    """Convert a run of Markdown lines: directives, targets, roles (code fences verbatim)."""
    out: list[str] = []

    def separate() -> None:  # a blank line before a converted block
        if out and out[-1].strip():
            out.append("")

    def text(k: int, stop: int) -> None:
        # ordinary lines, each joined with the following ones of its paragraph so that a
        # role broken over two lines is still seen as one
        while k < stop:
            j = k + 1
            while j < stop and lines[j].strip():
                j += 1
            out.extend(_inline("\n".join(lines[k:j]), ctx).split("\n"))
            k = j

    k = 0
    for start, end, token in _myst_blocks(lines):
        if start < k:  # within a block already converted
            continue
        text(k, start)
        if token.type == "myst_target":
            anchor = _anchor(token.content, ctx)
            if anchor:
                separate()
                out.extend(anchor)
            k = end
            continue
        line, fence = lines[start], token.markup
        indent = line[:len(line) - len(line.lstrip(" \t"))]
        close = end - 1 if end - 1 > start and _closes(lines[end - 1], fence) else end  # unclosed: to the end
        dm = _DIRECTIVE_INFO.match(line[len(indent) + len(fence):])
        if dm is None:
            if fence[0] == ":":
                raise ValueError(f"a ':::' fence without a directive name: {line.strip()!r}")
            out.extend(lines[start:close + 1])  # a plain code block: verbatim
        else:
            converted = _directive(dm.group("name"), dm.group("arg"), _dedent(lines[start + 1:close], indent), ctx)
            separate()
            out.extend(indent + ln if ln else ln for ln in converted)
            if close + 1 < len(lines) and lines[close + 1].strip():
                out.append("")
        k = close + 1
    text(k, len(lines))
    return out


def plain_markdown(source: str, *, labels: dict[str, Label], bibliography: dict[str, BibEntry] | None,
                   chapter: str | None = None, cited: list[str] | None = None) -> str:
    """The MyST markdown ``source`` as CommonMark plus a little HTML.

    Args:
        source: a markdown cell's text.
        labels: the book's labels (:func:`book_labels`), for ``{ref}`` and anchors.
        bibliography: the book's works (:func:`read_bibtex`), for the citations;
            ``None`` when the book has none (a citation then raises).
        chapter: the chapter the cell belongs to (a ``{ref}`` there is a local link).
        cited: a list to which every cited key is appended, once, in order.

    Returns:
        The converted text; a source without MyST comes back unchanged.

    Raises:
        ValueError: an unknown directive or role, an unknown label or citation key.
    """
    ctx = _Context(labels, bibliography, chapter, cited)
    return "\n".join(_blocks(source.split("\n"), ctx))


def _references_cell(keys: list[str], bibliography: dict[str, BibEntry], ids: set[str],
                     with_id: bool) -> nbformat.NotebookNode:
    lines = ["## References", ""]
    lines += [f"- {reference_text(bibliography[k])}" for k in keys]
    cell = nbformat.v4.new_markdown_cell("\n".join(lines))
    cell.pop("id", None)
    if with_id:  # nbformat 4.5 and later: a fixed id, unique in the notebook
        cell_id, n = "references", 1
        while cell_id in ids:
            n += 1
            cell_id = f"references-{n}"
        cell["id"] = cell_id
    return cell


_CACHE: dict[Path, tuple[dict, dict | None]] = {}


def _book_data(book: Path) -> tuple[dict[str, Label], dict[str, BibEntry] | None]:
    """The labels and bibliography of ``book``, read once per process."""
    book = Path(book).resolve()
    if book not in _CACHE:
        bib = book / "references.bib"
        _CACHE[book] = (book_labels(book), read_bibtex(bib) if bib.is_file() else None)
    return _CACHE[book]


def plain_notebook(nb: nbformat.NotebookNode, chapter: str, book: Path = BOOK) -> nbformat.NotebookNode:
    """A copy of ``nb`` whose markdown cells are plain Markdown (:func:`plain_markdown`),
    with a References cell appended when a cell cites a work. Code cells, outputs and
    metadata (nbgrader's included) are untouched.

    Args:
        nb: a chapter notebook (source or student version).
        chapter: its chapter id.
        book: the book folder whose chapters, pages and ``references.bib`` resolve the
            labels and citations.

    Raises:
        ValueError: naming the chapter, the cell index and the construct, for any MyST
            it cannot turn into Markdown, and if raw MyST would remain.
    """
    labels, bibliography = _book_data(book)
    out = copy.deepcopy(nb)
    cited: list[str] = []
    for index, cell in enumerate(out.cells):
        if cell.cell_type != "markdown":
            continue
        try:
            cell.source = plain_markdown(cell.source, labels=labels, bibliography=bibliography,
                                         chapter=chapter, cited=cited)
        except ValueError as exc:
            raise ValueError(f"{chapter}, markdown cell {index}: {exc}") from None
        left = MYST_LEFTOVER.search(_without_code(cell.source))
        if left:
            raise ValueError(f"{chapter}, markdown cell {index}: MyST left after conversion: {left.group(0)!r}")
    if cited:
        with_id = (out.nbformat, out.nbformat_minor) >= (4, 5)
        out.cells.append(_references_cell(cited, bibliography, {c.get("id") for c in out.cells}, with_id))
    return out


def _without_code(text: str) -> str:
    """``text`` with fenced code blocks and code spans blanked (they may show MyST)."""
    text = re.sub(r"^([ \t]*)(`{3,}|~{3,})[^\n]*\n.*?^[ \t]*\2[ \t]*$", "", text, flags=re.MULTILINE | re.DOTALL)
    return re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", text, flags=re.DOTALL)


# --------------------------------------------------------------------------- nbgrader


def _plain_markdown_preprocessor():
    """The :class:`PlainMarkdown` nbgrader preprocessor class (made on first use, so
    that this module does not import nbgrader)."""
    # nbgrader and traitlets (heavy) when the preprocessor is first made (docstring)
    from nbgrader.preprocessors import NbGraderPreprocessor
    from traitlets import Unicode

    class PlainMarkdown(NbGraderPreprocessor):
        """nbgrader preprocessor: the markdown cells of the assignment's notebook in plain
        Markdown (:func:`plain_notebook`), as ``python -m autograder release`` writes them.

        Put it first in ``c.GenerateAssignment.preprocessors`` (``nbgrader_config.py``
        does), so that the checksums and the cells ``SaveCells`` records are those of
        the plain text. The chapter is nbgrader's notebook name.
        """

        book = Unicode("", help="The book folder whose labels and references.bib resolve "
                                "{ref} and {cite} (default: this repository's book/).").tag(config=True)

        def preprocess(self, nb, resources):
            chapter = resources["nbgrader"]["notebook"]
            return plain_notebook(nb, chapter, book=Path(self.book) if self.book else BOOK), resources

    PlainMarkdown.__module__ = __name__
    PlainMarkdown.__qualname__ = "PlainMarkdown"
    return PlainMarkdown


def __getattr__(name: str):
    if name == "PlainMarkdown":
        cls = globals()["PlainMarkdown"] = _plain_markdown_preprocessor()
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
