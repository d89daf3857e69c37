"""The book's diagrams (``solutions.figures``): well-formed, accessible, readable, current."""
from __future__ import annotations

import itertools
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch

from solutions.figures import diagram as diagrams
from solutions.figures.ch06 import MASK_EXAMPLE_LENGTHS, MASK_EXAMPLE_T, mask_example
from solutions.figures.diagram import MAX_WIDTH, MIN_TEXT_SIZE, Rect, text_width
from solutions.masking import causal_mask, decoder_mask, padding_mask

REPO = Path(__file__).resolve().parents[2]
SVG = "{http://www.w3.org/2000/svg}"
DIAGRAMS = diagrams.registry()   # every diagram of the book, chapter modules included
LAYOUTS = diagrams.layouts()

# What each diagram promises a reader: strings that must appear as text in the drawing
# (markup removed: ``K^T`` reads "KT", ``√d_{k}`` reads "√dk").
PROMISED = {
    "book/04_self_attention/figures/scaled_dot_product_attention.svg": [
        "Q", "K", "V", "(n_q, d_k)", "(n_k, d_k)", "(n_k, d_v)", "(n_q, n_k)", "(n_q, d_v)",
        "Q @ KT", "÷ √dk", "optional mask (ch. 6)", "softmax over the keys", "weights", "weights @ V",
        "output",
    ],
    "book/05_multi_head_attention/figures/multi_head_attention.svg": [
        "x", "(B, T, d_model)", "@ WQ", "@ WK", "@ WV", "split heads", "(B, h, T, d_k)",
        "scaled dot-product attention (ch. 4)", "(B, h, T_q, T_k)", "× h heads, in parallel",
        "merge heads", "(B, T, h·d_k)", "@ WO", "d_k = d_model / h",
    ],
    "book/06_masking/figures/mask_broadcast.svg": [
        "padding mask", "(B, 1, 1, T_k)", "causal mask", "(1, 1, T, T)", "decoder mask",
        "(B, 1, T, T)", "(B, h, T_q, T_k)", "masked_fill(¬mask, −∞)", "softmax over the keys",
        "True: may attend", "False: masked (−∞)", "b = 1: length 3",
    ],
}


@pytest.fixture(scope="module")
def drawn() -> dict[str, tuple[diagrams.Diagram, ET.Element, str]]:
    """Every registered diagram: its layout, its parsed SVG and its text."""
    out = {}
    for path, layout in LAYOUTS.items():
        text = DIAGRAMS[path]()
        out[path] = (layout(), ET.fromstring(text), text)
    return out


def _texts(root: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]


def test_registry_lists_each_chapter_figure_once():
    assert set(DIAGRAMS) == set(LAYOUTS) and set(PROMISED) <= set(DIAGRAMS)
    modules = diagrams.chapter_modules()
    assert [m.__name__.rsplit(".", 1)[1] for m in modules] == [f"ch{n:02d}" for n in range(1, 12)]
    for module in modules:
        assert set(module.LAYOUTS) <= set(DIAGRAMS)
        chapter = module.__name__.rsplit(".", 1)[1][2:]
        assert all(path.startswith(f"book/{chapter}_") for path in module.LAYOUTS), module.__name__
    for path in DIAGRAMS:
        assert re.fullmatch(r"book/\d\d_[a-z_]+/figures/[a-z_]+\.svg", path), path
        assert (REPO / path).parent.parent.is_dir(), f"{path}: no such chapter folder"
        assert DIAGRAMS[path]() == LAYOUTS[path]().svg(), f"{path}: the registry and the layout disagree"


def test_svg_is_well_formed_and_accessible(drawn):
    for path, (layout, root, text) in drawn.items():
        assert root.tag == f"{SVG}svg", path
        box = layout.bounds
        width, height = float(root.get("width")), float(root.get("height"))
        x0, y0, w, h = (float(v) for v in root.get("viewBox").split())
        assert (x0, y0, w, h) == (box.x, box.y, width, height) == (box.x, box.y, box.w, box.h), path
        assert 0 < width <= MAX_WIDTH and height > 0, f"{path}: {width} px wide, more than {MAX_WIDTH}"
        assert root.get("role") == "img"
        title, desc = root.find(f"{SVG}title"), root.find(f"{SVG}desc")
        assert title is not None and title.text.strip(), f"{path}: empty <title>"
        assert desc is not None and len(desc.text.split()) >= 30, f"{path}: <desc> too short for alt text"
        assert root.get("aria-labelledby").split() == [title.get("id"), desc.get("id")]
        assert list(root)[:2] == [title, desc], f"{path}: <title> and <desc> must come first"
        assert text.endswith("</svg>\n")


def test_svg_is_self_contained(drawn):
    """Shown through <img>: no page CSS, no external file, no web font."""
    for path, (_, root, text) in drawn.items():
        assert root.find(f"{SVG}defs/{SVG}style") is not None, f"{path}: styles must live inside the SVG"
        assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text
        assert "@import" not in text and "@font-face" not in text and "<image" not in text
        for ref in re.findall(r"url\(([^)]*)\)", text):
            assert ref.startswith("#"), f"{path}: reference outside the file: {ref}"
            assert root.find(f".//*[@id='{ref[1:]}']") is not None, f"{path}: {ref} is not defined"


def test_every_promised_label_and_shape_is_drawn(drawn):
    for path, (layout, root, _) in drawn.items():
        texts = _texts(root)
        assert texts == [t.text for t in layout.texts], f"{path}: the layout model and the SVG disagree"
        missing = [s for s in PROMISED.get(path, []) if s not in texts]
        assert not missing, f"{path}: not drawn: {missing}"


def test_alt_text_names_the_shapes(drawn):
    alt = {path: drawn[path][1].find(f"{SVG}desc").text for path in PROMISED}
    sdpa, mha, masks = (alt[p] for p in PROMISED)
    for shape in ("(n_q, d_k)", "(n_k, d_k)", "(n_k, d_v)", "(n_q, n_k)", "(n_q, d_v)"):
        assert shape in sdpa
    for shape in ("(B, T, d_model)", "(B, h, T, d_k)", "(B, h, T_q, T_k)", "(B, T, h·d_k)"):
        assert shape in mha
    for shape in ("(B, 1, 1, T_k)", "(1, 1, T, T)", "(B, 1, T, T)", "(B, h, T_q, T_k)"):
        assert shape in masks


def test_text_is_at_least_12px(drawn):
    for path, (layout, root, _) in drawn.items():
        assert min(t.size for t in layout.texts) >= MIN_TEXT_SIZE
        sizes = [float(e.get("font-size")) for e in root.iter() if e.get("font-size")]
        assert sizes and min(sizes) >= MIN_TEXT_SIZE, f"{path}: text smaller than {MIN_TEXT_SIZE}px"


def test_nothing_overlaps(drawn):
    for path, (layout, _, _) in drawn.items():
        for a, b in itertools.combinations(layout.texts, 2):
            assert not a.rect.overlaps(b.rect), f"{path}: {a.text!r} overlaps {b.text!r}"
        for a, b in itertools.combinations(layout.boxes, 2):
            assert not a.overlaps(b), f"{path}: two boxes overlap: {a} {b}"
        for t in layout.texts:
            if t.owner is not None:
                assert t.owner.contains(t.rect), f"{path}: {t.text!r} sticks out of its box"
            if t.owner is None or t.owner in layout.frames:  # notes and frame labels
                hit = [b for b in layout.boxes if b.overlaps(t.rect)]
                assert not hit, f"{path}: {t.text!r} lies on a box"
            crossing = [s for s in layout.segments if t.rect.crosses(*s)]
            assert not crossing, f"{path}: an arrow crosses {t.text!r}"


def test_layout_model_catches_an_overlap():
    """The overlap checks above can fail: two notes on the same spot, an arrow through a note."""
    d = diagrams.Diagram("t", "t", "t")
    first = d.note("a note", x=20, top=20)
    second = d.note("another note", x=30, top=24)
    assert first.overlaps(second)
    assert first.crosses((0, first.cy), (200, first.cy))
    assert not first.crosses((0, first.bottom + 5), (200, first.bottom + 5))
    assert not Rect(0, 0, 10, 10).overlaps(Rect(10, 0, 10, 10))  # touching is not overlapping


def test_box_widths_follow_the_label_lengths():
    d = diagrams.Diagram("t", "t", "t")
    short = d.tensor("Q", "(n, d)", "queries", cx=100, top=0)
    long = d.tensor("Q", "(B, h, T_q, d_k, extra)", "queries", cx=400, top=0)
    assert long.w > short.w
    assert long.w >= text_width("(B, h, T_q, d_k, extra)", diagrams.SHAPE_SIZE, mono=True)
    assert text_width("W^Q", 16) < text_width("WQ", 16)  # a superscript is smaller
    assert text_width("mmmm", 14) > text_width("iiii", 14)


def test_every_role_is_named_in_words_and_coloured_distinctly():
    fills = [r.fill for r in diagrams.ROLES.values()]
    assert len(set(fills)) == len(fills)
    named = [r for r in diagrams.ROLES.values() if r.name != "other"]
    assert all(r.word for r in named), "a role must be readable without its colour"
    with pytest.raises(ValueError, match="role must be one of"):
        diagrams.Diagram("t", "t", "t").tensor("Q", "(n, d)", "query", cx=50, top=0)


def test_mask_grids_are_the_reference_masks():
    """Chapter 6's grids are what solutions.masking computes (True = may attend)."""
    padding, causal, decoder = mask_example()
    lengths, T = MASK_EXAMPLE_LENGTHS, MASK_EXAMPLE_T
    ids = torch.tensor([[7] * n + [0] * (T - n) for n in lengths])  # pad_id 0
    assert padding_mask(ids).tolist() == [[p] for p in padding]        # (B, 1, 1, T_k)
    assert causal_mask(T).tolist() == [[causal]]                       # (1, 1, T, T)
    assert decoder_mask(ids).tolist() == [[g] for g in decoder]        # (B, 1, T, T)


def test_mask_svg_draws_each_cell_once(drawn):
    _, root, _ = drawn["book/06_masking/figures/mask_broadcast.svg"]
    padding, causal, decoder = mask_example()
    cells = [g for grid in padding + [causal] + decoder for row in grid for g in row]
    rects = [r for r in root.iter(f"{SVG}rect") if r.get("width") == str(diagrams.CELL)]
    filled = [r for r in rects if r.get("fill") == diagrams.ALLOWED]
    assert len(rects) == len(cells)
    assert len(filled) == sum(cells)  # a filled cell is a True cell


def test_markup_and_bad_arguments():
    assert diagrams.plain_text("W^Q and √d_{k}, masked_fill") == "WQ and √dk, masked_fill"
    with pytest.raises(ValueError, match="unclosed"):
        diagrams.plain_text("d_{k")
    d = diagrams.Diagram("t", "t", "t")
    with pytest.raises(ValueError, match="at least two points"):
        d.arrow((0, 0))
    with pytest.raises(ValueError, match="one caption per grid"):
        d.mask([[[True]]], label="m", shape="(1, 1)", captions=[], cx=50, top=0)
    with pytest.raises(ValueError, match="empty"):
        d.svg()
    d.note("x" * 100, x=0, top=0)
    with pytest.raises(ValueError, match="more than 660 px"):
        d.svg()
    with pytest.raises(ValueError, match="label_at"):
        d.frame([Rect(0, 0, 10, 10)], "f", label_at="left")
    with pytest.raises(ValueError, match="every length"):
        mask_example(lengths=(5,), T=4)


def _run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "solutions.figures", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def test_committed_files_are_current():
    proc = _run_cli("--check")
    assert proc.returncode == 0, proc.stderr + "\nrun `python -m solutions.figures` and commit the SVG files"
    assert f"{len(DIAGRAMS)} diagrams up to date" in proc.stdout


def test_check_names_a_stale_or_missing_file(tmp_path, capsys):
    assert sorted(diagrams.write_all(tmp_path)) == sorted(tmp_path / p for p in DIAGRAMS)
    assert diagrams.stale_files(tmp_path) == [] and diagrams.write_all(tmp_path) == []
    edited, removed = list(DIAGRAMS)[0], list(DIAGRAMS)[-1]
    path = tmp_path / edited
    path.write_text(path.read_text(encoding="utf-8") + "<!-- edited by hand -->\n", encoding="utf-8")
    (tmp_path / removed).unlink()
    assert diagrams.main(["--check", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"stale: {edited}" in err and f"stale: {removed}" in err
    assert [p for p in DIAGRAMS if p in err] == [edited, removed]
    assert diagrams.main(["--root", str(tmp_path)]) == 0
    assert diagrams.main(["--check", "--root", str(tmp_path)]) == 0
    assert "diagrams up to date" in capsys.readouterr().out


def test_alt_command_prints_every_alt_text(capsys):
    assert diagrams.main(["--alt"]) == 0
    out = capsys.readouterr().out
    for path in DIAGRAMS:
        assert f"{path}\n  {diagrams.alt_text(path)}\n" in out
    with pytest.raises(ValueError, match="no diagram registered"):
        diagrams.alt_text("book/99_missing/figures/x.svg")


# A figure directive in a chapter's markdown: the fence, the path, the options, the caption.
FIGURE = re.compile(r"^(?P<fence>:{3,}|`{3,})\{figure\}[ \t]+(?P<src>\S+)[ \t]*\n"
                    r"(?P<options>(?:[ \t]*:[\w-]+:[^\n]*\n)*)(?P<caption>.*?)^(?P=fence)[ \t]*$",
                    re.MULTILINE | re.DOTALL)


def figure_problems(notebook: Path, repo: Path = REPO) -> list[str]:
    """What is wrong with the SVG figures a chapter notebook shows (empty when nothing):
    each must be a registered diagram, with the diagram's own alt text, a ``fig-`` name
    to link to, and a caption (ARCHITECTURE.md section 6)."""
    import nbformat

    problems = []
    for cell in nbformat.read(str(notebook), as_version=4).cells:
        if cell.cell_type != "markdown":
            continue
        for match in FIGURE.finditer(cell.source):
            if not match["src"].endswith(".svg"):
                continue
            where = f"{notebook.name}: figure {match['src']}"
            path = (notebook.parent / match["src"]).resolve().relative_to(repo.resolve()).as_posix()
            if path not in DIAGRAMS:
                problems.append(f"{where} is not drawn by solutions.figures")
                continue
            options = dict(re.findall(r"^[ \t]*:([\w-]+):[ \t]*(.*?)[ \t]*$", match["options"], re.MULTILINE))
            if options.get("alt") != diagrams.alt_text(path):
                problems.append(f"{where}: :alt: must be the diagram's alt text "
                                "(`python -m solutions.figures --alt`)")
            if not options.get("name", "").startswith("fig-"):
                problems.append(f"{where}: needs :name: fig-...")
            if not match["caption"].strip():
                problems.append(f"{where}: needs a caption that says what to see")
    return problems


def test_figure_directive_regex_reads_the_documented_form():
    text = (":::{figure} figures/scaled_dot_product_attention.svg\n:name: fig-sdpa\n:alt: Some alt.\n"
            ":width: 100%\n\nCaption: what to see.\n:::\n")
    (match,) = FIGURE.finditer(text)
    assert match["src"] == "figures/scaled_dot_product_attention.svg"
    assert ":alt: Some alt." in match["options"] and match["caption"].strip() == "Caption: what to see."


def test_figure_problems_finds_a_wrong_alt_a_missing_name_and_an_unregistered_file(tmp_path):
    import nbformat

    chapter = tmp_path / "book" / "04_self_attention"
    chapter.mkdir(parents=True)
    path = "book/04_self_attention/figures/scaled_dot_product_attention.svg"

    def write(*cells):
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_markdown_cell(c) for c in cells]
        nbformat.write(nb, str(chapter / "04_self_attention.ipynb"))
        return figure_problems(chapter / "04_self_attention.ipynb", repo=tmp_path)

    good = (f":::{{figure}} figures/scaled_dot_product_attention.svg\n:name: fig-sdpa\n"
            f":alt: {diagrams.alt_text(path)}\n:width: 100%\n\nWhat to see.\n:::\n")
    assert write(good) == []
    assert any(":alt:" in p for p in write(good.replace(diagrams.alt_text(path), "A diagram.")))
    assert any(":name:" in p for p in write(good.replace(":name: fig-sdpa", ":name: sdpa")))
    assert any("caption" in p for p in write(good.replace("What to see.", "")))
    assert any("not drawn" in p for p in write(good.replace("scaled_dot_product", "hand_drawn")))


def test_chapters_show_registered_diagrams_with_their_alt_text_and_a_caption():
    notebooks = [p for p in sorted((REPO / "book").glob("*/*.ipynb")) if p.stem == p.parent.name]
    assert notebooks
    problems = [problem for notebook in notebooks for problem in figure_problems(notebook)]
    assert not problems, "\n".join(problems)
