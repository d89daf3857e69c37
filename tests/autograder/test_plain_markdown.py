"""Student notebooks in plain Markdown (``autograder/student/plain.py``).

Each MyST construct of the book on a small source, with the exact output and the HTML
structure CommonMark (markdown-it-py, as VS Code and the book's own parser use) makes
of it; then all ten real chapters through ``release_chapter``.
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from markdown_it import MarkdownIt

from autograder.book import chapter_ids
from autograder.release import leaked_lines, release_chapter
from autograder.student.plain import (
    MYST_LEFTOVER,
    Label,
    cite_text,
    latex_to_text,
    parse_bibtex,
    parse_name,
    plain_markdown,
    plain_notebook,
    read_bibtex,
    reference_text,
)

REPO = Path(__file__).resolve().parents[2]
BOOK = REPO / "book"

BIB = parse_bibtex(r"""
% a comment line, then the entries
@string{nips = "Advances in Neural Information Processing Systems"}

@inproceedings{vaswani2017attention,
  author    = {Vaswani, Ashish and Shazeer, Noam and Kaiser, {\L}ukasz},
  title     = {Attention Is All You Need},
  booktitle = nips # " 30",
  pages     = {5998--6008},
  year      = 2017,
}
@article{hochreiter1997long,
  author  = "Sepp Hochreiter and J{\"u}rgen Schmidhuber",
  title   = "Long Short-{T}erm Memory",
  journal = {Neural Computation},
  volume  = {9}, number = {8},
  year    = {1997},
  doi     = {10.1162/neco.1997.9.8.1735}
}
@misc(elman1990finding,
  author = {Jeffrey L. Elman},
  title  = {Finding Structure in Time},
  year   = {1990}
)
@inproceedings{cho2014learning,
  author = {Cho, Kyunghyun and van Merri{\"e}nboer, Bart and others},
  title  = {Learning Phrase Representations using {RNN} Encoder--Decoder},
  year   = {2014}
}
""")

LABELS = {
    "sec-1-4": Label("sec-1-4", "1.4 Vanishing gradients", "01_rnn", True, True),
    "sec-1-5": Label("sec-1-5", "1.5 Gates", "01_rnn", True, False),
    "sec-5-4": Label("sec-5-4", "5.4 The PyTorch you need here", "05_mha", True, True),
    "fig-rnn": Label("fig-rnn", "An RNN unrolled in time.", "01_rnn", True, True),
    "sec-install": Label("sec-install", "Install", "how_to_use", False, True),
}

MD = MarkdownIt("commonmark")


def plain(source: str, cited: list | None = None) -> str:
    return plain_markdown(source, labels=LABELS, bibliography=BIB, chapter="01_rnn", cited=cited)


def html(markdown: str) -> str:
    return MD.render(markdown)


def plain_page(source: str, expected: str) -> str:
    """Assert that ``source`` becomes exactly ``expected``; return its CommonMark HTML."""
    out = plain(source)
    assert out == expected, out
    return html(out)


# --------------------------------------------------------------------------- dropdowns


def test_a_dropdown_becomes_details_with_the_hint_rendered_inside():
    page = plain_page("Try first.\n\n:::{dropdown} Hint 1\nUse `x @ W_xh` for all steps: $x_t W_{xh}$.\n:::\n\n"
                      "Then check.",
                      "Try first.\n\n<details>\n<summary>Hint 1</summary>\n\n"
                      "Use `x @ W_xh` for all steps: $x_t W_{xh}$.\n\n</details>\n\nThen check.")
    assert re.search(r"<details>\s*<summary>Hint 1</summary>\s*<p>Use <code>x @ W_xh</code> for all steps: "
                     r"\$x_t W_\{xh\}\$\.</p>\s*</details>\s*<p>Then check\.</p>", page), page


def test_a_dropdown_right_after_a_paragraph_and_before_text_is_still_separate():
    out = plain("Text.\n:::{dropdown} Answer\n- one\n- **two**\n:::\nMore text.")
    page = html(out)
    assert re.search(r"<p>Text\.</p>\s*<details>\s*<summary>Answer</summary>\s*<ul>\s*<li>one</li>\s*"
                     r"<li><strong>two</strong></li>\s*</ul>\s*</details>\s*<p>More text\.</p>", page), page


def test_nested_fences_with_more_colons_and_an_open_dropdown():
    page = plain_page("::::{note}\nOuter text.\n\n:::{dropdown} Inner\n:open:\nHidden *detail*.\n:::\n::::",
                      "> **Note**\n>\n> Outer text.\n>\n> <details open>\n> <summary>Inner</summary>\n>\n"
                      "> Hidden *detail*.\n>\n> </details>")
    assert re.search(r"<blockquote>\s*<p><strong>Note</strong></p>\s*<p>Outer text\.</p>\s*<details open>\s*"
                     r"<summary>Inner</summary>\s*<p>Hidden <em>detail</em>\.</p>\s*</details>\s*</blockquote>",
                     page), page


def test_a_code_fence_inside_a_dropdown_is_kept_verbatim():
    source = ":::{dropdown} Hint\n```python\nx = {cite}`not_a_role`\n```\n:::"
    out = plain(source)
    assert out == "<details>\n<summary>Hint</summary>\n\n```python\nx = {cite}`not_a_role`\n```\n\n</details>"
    assert '<code class="language-python">x = {cite}`not_a_role`' in html(out)


# --------------------------------------------------------------------------- admonitions


def test_an_admonition_is_a_blockquote_with_its_bold_title():
    page = plain_page(":::{admonition} PyTorch in five ideas\n:class: note\n* **Tensors** are arrays,\n"
                      "  with gradients.\n* Modules.\n:::",
                      "> **PyTorch in five ideas**\n>\n> * **Tensors** are arrays,\n>   with gradients.\n> * Modules.")
    assert re.search(r"<blockquote>\s*<p><strong>PyTorch in five ideas</strong></p>\s*<ul>\s*"
                     r"<li><strong>Tensors</strong> are arrays,\s*with gradients\.</li>\s*<li>Modules\.</li>",
                     page), page


@pytest.mark.parametrize("name, title", [("note", "Note"), ("warning", "Warning"), ("tip", "Tip"),
                                         ("important", "Important"), ("seealso", "See also")])
def test_named_admonitions_get_their_default_title(name, title):
    out = plain(f"```{{{name}}} The text on the first line.\nAnd more.\n```")
    assert out == f"> **{title}**\n>\n> The text on the first line.\n> And more."
    assert f"<blockquote>\n<p><strong>{title}</strong></p>\n<p>The text on the first line." in html(out)


# --------------------------------------------------------------------------- figures


def test_a_figure_is_a_markdown_image_with_its_caption_in_italics():
    source = (":::{figure} figures/unrolled_rnn.svg\n:name: fig-rnn\n:alt: An RNN over <sos> and [x] steps.\n"
              ":width: 100%\n\nAn RNN *unrolled* in time:\n$T$ steps.\n:::")
    out = plain(source)
    assert out == ('<a id="fig-rnn"></a>\n![An RNN over \\<sos\\> and \\[x\\] steps.](figures/unrolled_rnn.svg)\n\n'
                   "*An RNN *unrolled* in time: $T$ steps.*")
    page = html(out)
    assert '<img src="figures/unrolled_rnn.svg" alt="An RNN over' in page
    assert "<p><em>An RNN <em>unrolled</em> in time: $T$ steps.</em></p>" in page
    assert "width" not in out and ":name:" not in out


def test_a_figure_without_alt_uses_its_caption_and_an_unreferenced_name_adds_no_anchor():
    out = plain("```{figure} figures/a b.svg\n:name: fig-nowhere\n:align: center\n\nThe $x_t$ inputs.\n\nA legend.\n```")
    assert out == "![The x_t inputs.](<figures/a b.svg>)\n\n*The $x_t$ inputs.*\n\nA legend."
    assert '<img src="figures/a%20b.svg" alt="The x_t inputs." />' in html(out)


# --------------------------------------------------------------------------- labels and references


def test_a_target_line_is_an_anchor_only_where_something_points_to_it():
    page = plain_page("Before.\n\n(sec-1-4)=\n## 1.4 Vanishing gradients\n\n(sec-1-5)=\n## 1.5 Gates\n\n"
                      "See [§1.4](#sec-1-4).",
                      'Before.\n\n<a id="sec-1-4"></a>\n## 1.4 Vanishing gradients\n\n## 1.5 Gates\n\n'
                      "See [§1.4](#sec-1-4).")
    assert '<p><a id="sec-1-4"></a></p>\n<h2>1.4 Vanishing gradients</h2>' in page
    assert "<h2>1.5 Gates</h2>" in page and "sec-1-5" not in page


def test_refs_in_this_chapter_another_chapter_and_a_page():
    page = plain_page("See {ref}`sec-1-4`, {ref}`§5.4 <sec-5-4>`, {ref}`the figure <fig-rnn>` and {ref}`sec-install`.",
                      "See [1.4 Vanishing gradients](#sec-1-4), "
                      "[§5.4](../05_mha/05_mha.ipynb#sec-5-4), [the figure](#fig-rnn) and Install.")
    assert '<a href="../05_mha/05_mha.ipynb#sec-5-4">§5.4</a>' in page
    assert '<a href="#sec-1-4">1.4 Vanishing gradients</a>' in page


def test_a_ref_to_an_unknown_label_raises():
    with pytest.raises(ValueError, match="label 'sec-9-9' is defined nowhere"):
        plain("{ref}`sec-9-9`")


# --------------------------------------------------------------------------- citations


def test_citation_roles_are_author_year_text():
    cited: list[str] = []
    out = plain("{cite:t}`vaswani2017attention` built on {cite:p}`hochreiter1997long, elman1990finding`;\n"
                "see {cite}`cho2014learning;vaswani2017attention` and {cite:t}`elman1990finding`.", cited)
    assert out == ("Vaswani et al. (2017) built on (Hochreiter and Schmidhuber, 1997; Elman, 1990);\n"
                   "see (Cho et al., 2014; Vaswani et al., 2017) and Elman (1990).")
    assert cited == ["vaswani2017attention", "hochreiter1997long", "elman1990finding", "cho2014learning"]


def test_a_citation_role_broken_over_two_lines_is_still_one_role():
    assert plain("As shown by {cite:t}`vaswani2017attention,\nelman1990finding`.") == \
        "As shown by Vaswani et al. (2017); Elman (1990)."


def test_markdown_it_decides_what_is_a_role():
    """Roles are found by markdown-it with MyST's role plugin, as Jupyter Book finds them: a
    role in a list item broken over two indented lines is one role (its line break kept);
    a backslash before the brace, a code span or an indented code block keeps the text;
    the bytes around a role are the cell's own."""
    assert plain("- see {cite:t}`vaswani2017attention,\n  elman1990finding` *here*\n- and  `x`") == \
        "- see Vaswani et al. (2017); Elman (1990) *here*\n- and  `x`"
    assert plain(r"an escaped \{cite:t}`vaswani2017attention`, kept") == \
        r"an escaped \{cite:t}`vaswani2017attention`, kept"
    code = "Text:\n\n    {cite:t}`vaswani2017attention` in an indented code block\n\nthen {math}`x_t`."
    assert plain(code) == "Text:\n\n    {cite:t}`vaswani2017attention` in an indented code block\n\nthen $x_t$."
    assert plain("> quoted {ref}`the\n> section <sec-1-4>`") == "> quoted [the\n> section](#sec-1-4)"


def test_cite_text_variants_and_unknown_keys():
    assert cite_text("cite:ts", ["vaswani2017attention"], BIB) == "Vaswani, Shazeer and Kaiser (2017)"
    assert cite_text("cite:year", ["elman1990finding"], BIB) == "1990"
    with pytest.raises(ValueError, match="unknown citation key.*nobody2020"):
        cite_text("cite:p", ["nobody2020"], BIB)
    with pytest.raises(ValueError, match="nobody2020"):
        plain("{cite:p}`nobody2020`")


def test_the_bibtex_reader():
    v = BIB["vaswani2017attention"]
    assert v.type == "inproceedings" and v.year == "2017"
    assert v.authors == [("Vaswani", "Ashish"), ("Shazeer", "Noam"), ("Kaiser", "Łukasz")]
    assert v.fields["booktitle"] == "Advances in Neural Information Processing Systems 30"
    assert v.fields["pages"] == "5998–6008"
    h = BIB["hochreiter1997long"]
    assert h.authors == [("Hochreiter", "Sepp"), ("Schmidhuber", "Jürgen")]
    assert h.fields["title"] == "Long Short-Term Memory"
    assert BIB["elman1990finding"].authors == [("Elman", "Jeffrey L.")]
    c = BIB["cho2014learning"]
    assert c.authors == [("Cho", "Kyunghyun"), ("van Merriënboer", "Bart"), ("others", "")]
    assert c.fields["title"] == "Learning Phrase Representations using RNN Encoder–Decoder"
    assert [e.short_authors() for e in BIB.values()] == ["Vaswani et al.", "Hochreiter and Schmidhuber",
                                                         "Elman", "Cho et al."]


def test_names_and_latex():
    assert parse_name("Ludwig van Beethoven") == ("van Beethoven", "Ludwig")
    assert parse_name("de la Fontaine, Jean") == ("de la Fontaine", "Jean")
    assert parse_name("King, Jr, Martin Luther") == ("King, Jr", "Martin Luther")
    assert parse_name("{Google Brain Team}") == ("Google Brain Team", "")
    assert latex_to_text(r"R{\'e}, Fran\c{c}ois \& K\"{o}pf~et~al. --- {\"\i}") == "Ré, François & Köpf\u00a0et\u00a0al. — ï"
    with pytest.raises(ValueError, match="unknown LaTeX command"):
        latex_to_text(r"\emph{x}")
    with pytest.raises(ValueError, match="undefined"):
        parse_bibtex("@misc{k, title = undefinedmacro}")


def test_reference_lines():
    assert reference_text(BIB["vaswani2017attention"]) == (
        "Ashish Vaswani, Noam Shazeer, and Łukasz Kaiser (2017). Attention Is All You Need. "
        "*Advances in Neural Information Processing Systems 30*, pp. 5998–6008.")
    assert reference_text(BIB["hochreiter1997long"]) == (
        "Sepp Hochreiter and Jürgen Schmidhuber (1997). Long Short-Term Memory. *Neural Computation*, 9(8). "
        "<https://doi.org/10.1162/neco.1997.9.8.1735>")
    assert reference_text(BIB["cho2014learning"]).startswith("Kyunghyun Cho and Bart van Merriënboer et al. (2014).")


# --------------------------------------------------------------------------- what stays


def test_code_spans_math_and_html_are_untouched():
    source = ("The input `<sos>, y_1, ..., y_{T-1}`, a literal ``{cite}`x` ``, math $x_{t}$ and\n\n"
              "$$\nh_t = \\tanh(x_t W_{xh})\n$$\n\n<b>bold</b> and a plain fence:\n\n~~~\n(label)=\n~~~")
    assert plain(source) == source


def test_a_cell_without_myst_comes_back_unchanged():
    source = "# Title\n\nText with **bold**, a [link](../04/04.ipynb) and a table:\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"
    assert plain(source) == source


# --------------------------------------------------------------------------- notebooks


def _notebook(*markdown: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    code = nbformat.v4.new_code_cell("x = 1  # {cite}`vaswani2017attention` stays in code")
    code.metadata["nbgrader"] = {"grade_id": "ex", "solution": True, "grade": False, "locked": False,
                                 "schema_version": 3}
    nb.cells = [code] + [nbformat.v4.new_markdown_cell(m) for m in markdown]
    return nb


def test_plain_notebook_changes_only_markdown_and_appends_the_references():
    nb = _notebook("Intro {cite:t}`vaswani2017attention` and {cite:p}`elman1990finding`.",
                   "(sec-x)=\n## X\n\nAgain {cite:p}`vaswani2017attention`.")
    out = plain_notebook(nb, "01_rnn_limitations")
    assert nb.cells[1].source.startswith("Intro {cite:t}")  # the input is not modified
    assert out.cells[0] == nb.cells[0]
    assert out.cells[1].source == "Intro Vaswani et al. (2017) and (Elman, 1990)."
    assert out.cells[2].source == "## X\n\nAgain (Vaswani et al., 2017)."
    refs = out.cells[-1]
    assert len(out.cells) == 4 and refs.cell_type == "markdown" and refs.id == "references"
    lines = refs.source.splitlines()
    assert lines[0] == "## References" and lines[2].startswith("- Ashish Vaswani, Noam Shazeer")
    assert lines[3].startswith("- Jeffrey L. Elman (1990). Finding Structure in Time.") and len(lines) == 4
    nbformat.validate(out)


def test_a_notebook_without_citations_gets_no_references_cell():
    nb = _notebook("## Plain", ":::{dropdown} Hint 1\nText.\n:::")
    out = plain_notebook(nb, "01_rnn_limitations")
    assert len(out.cells) == 3 and "<details>" in out.cells[2].source


@pytest.mark.parametrize("source, construct", [
    (":::{margin}\nA side note.\n:::", "unknown MyST directive {margin}"),
    ("```{code-cell} ipython3\nx = 1\n```", "unknown MyST directive {code-cell} ipython3"),
    ("Equation {eq}`eq-attention` says so.", "unknown MyST role {eq}`eq-attention`"),
    ("A {sub-ref}`x` role.", "unknown MyST role {sub-ref}`x`"),
    (":::\nno name\n:::", "without a directive name"),
])
def test_unknown_myst_names_the_chapter_the_cell_and_the_construct(source, construct):
    nb = _notebook("## Fine", source)
    with pytest.raises(ValueError) as info:
        plain_notebook(nb, "99_new_chapter")
    message = str(info.value)
    assert message.startswith("99_new_chapter, markdown cell 2: ") and construct in message, message


# --------------------------------------------------------------------------- the ten chapters


def _rendered_outside_code(text: str) -> str:
    """Markdown source with code spans and fences blanked (they may show MyST on purpose)."""
    text = re.sub(r"^(`{3,}|~{3,})[^\n]*\n.*?^\1\s*$", "", text, flags=re.MULTILINE | re.DOTALL)
    return re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", text, flags=re.DOTALL)


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    out = tmp_path_factory.mktemp("plain_release")
    return {c: release_chapter(c, out).path for c in chapter_ids(BOOK)}


def test_the_real_chapters_are_released_in_plain_markdown(released):
    bib = read_bibtex(BOOK / "references.bib")
    assert len(released) == 11
    for chapter, path in released.items():
        source = nbformat.read(str(BOOK / chapter / f"{chapter}.ipynb"), as_version=4)
        nb = nbformat.read(str(path), as_version=4)
        nbformat.validate(nb)
        assert leaked_lines(source, nb) == [], chapter
        src_md = [c.source for c in source.cells if c.cell_type == "markdown"]
        out_md = [c.source for c in nb.cells if c.cell_type == "markdown"]
        for index, text in enumerate(out_md):
            left = MYST_LEFTOVER.search(_rendered_outside_code(text))
            assert left is None, f"{chapter}, markdown cell {index}: {left.group(0)!r}"
        page = html("\n\n".join(out_md))
        # every folded hint or answer is a <details>, and nothing else is
        dropdowns = sum(len(re.findall(r"^\s*:{3,}\{dropdown\}", s, re.MULTILINE)) for s in src_md)
        assert dropdowns and page.count("<details>") == dropdowns == page.count("</details>"), chapter
        assert page.count("<summary>") == dropdowns
        # every image resolves beside the released notebook
        images = re.findall(r'<img src="([^"]+)"', page)
        figures = sum(len(re.findall(r"^\s*:{3,}\{figure\}", s, re.MULTILINE)) for s in src_md)
        assert len(images) >= figures
        for src in images:
            assert (path.parent / src.replace("%20", " ")).is_file(), f"{chapter}: {src}"
        # every cited work is in the References cell, in order of first citation
        keys: list[str] = []
        for s in src_md:
            for m in re.finditer(r"\{cite(?::\w+)?\}`([^`]+)`", s):
                keys += [k.strip() for k in re.split(r"[,;]", m.group(1)) if k.strip() and k.strip() not in keys]
        refs = nb.cells[-1]
        assert refs.cell_type == "markdown" and refs.source.startswith("## References"), chapter
        assert refs.source.splitlines()[2:] == [f"- {reference_text(bib[k])}" for k in keys], chapter
        # no prose moved or dropped: a cell without MyST is unchanged, and in the others
        # every line that is no fence, option, target or role is still in the same cell
        # release adds two cells of its own: Colab's install cell, first, and before the setup
        # cell a note saying how to install the wheel
        added = ("colab_install", "install_note")
        cells = [c for c in nb.cells if not any(c.metadata.get("transformer_book", {}).get(k) for k in added)]
        assert len(cells) == len(nb.cells) - 2
        assert len(cells) == len(source.cells) + 1
        for index, (before, after) in enumerate(zip(source.cells, cells)):
            assert before.cell_type == after.cell_type
            if before.cell_type != "markdown":
                continue
            if not MYST_LEFTOVER.search(before.source):
                assert after.source == before.source, f"{chapter}, cell {index}"
                continue
            for line in before.source.splitlines():
                text = line.strip()
                if not text or re.match(r"^(:{3,}|`{3,})|^:[\w-]+:|^\(\S+\)=$", text) or re.search(r"\{[\w:]+\}`", text):
                    continue
                assert text in after.source, f"{chapter}, cell {index}: {text!r} is gone"


def test_the_released_checksums_are_those_of_the_plain_cells(released):
    """The plain text is what nbgrader locks and checksums: ``nbgrader validate`` finds
    no changed cell in an untouched student notebook."""
    from nbgrader.utils import compute_checksum

    for chapter, path in released.items():
        nb = nbformat.read(str(path), as_version=4)
        locked = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("locked")]
        assert any(c.cell_type == "markdown" and "<details>" in c.source for c in locked), chapter
        for cell in locked:
            assert cell.metadata.nbgrader["checksum"] == compute_checksum(cell), chapter


# --------------------------------------------------------------------------- nbgrader's own path


def test_nbgrader_generate_assignment_writes_the_same_plain_notebook(tmp_path):
    """This repository's ``nbgrader_config.py`` puts ``PlainMarkdown`` first in
    ``GenerateAssignment``: ``nbgrader generate_assignment`` then releases the same cells
    as ``autograder release``."""
    import os
    import subprocess
    import sys

    from autograder.course import load_course
    from autograder.release import student_version
    from autograder.student.plain import PlainMarkdown

    steps = load_course(REPO).config.GenerateAssignment.preprocessors
    assert steps[0] is PlainMarkdown and steps[1:].count(PlainMarkdown) == 0
    chapter = "01_rnn_limitations"
    (tmp_path / "book" / chapter).mkdir(parents=True)
    source = BOOK / chapter / f"{chapter}.ipynb"
    (tmp_path / "book" / chapter / source.name).write_bytes(source.read_bytes())
    (tmp_path / "nbgrader_config.py").write_text(
        "c = get_config()\n"
        f"load_subconfig({str(REPO / 'nbgrader_config.py')!r})\n"
        f"c.CourseDirectory.root = {str(tmp_path)!r}\n"
        f"c.CourseDirectory.db_url = {'sqlite:///' + str(tmp_path / 'gradebook.db')!r}\n",
        encoding="utf-8")
    env = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    proc = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", chapter],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    made = nbformat.read(str(tmp_path / "release" / chapter / source.name), as_version=4)
    ours = student_version(nbformat.read(str(source), as_version=4), chapter)
    assert [(c.cell_type, c.source) for c in made.cells] == [(c.cell_type, c.source) for c in ours.cells]
    assert any("<details>" in c.source for c in made.cells) and made.cells[-1].source.startswith("## References")
