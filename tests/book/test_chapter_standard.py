"""The chapter standard (``CHAPTERS.md``), checked mechanically on every chapter in ``_toc.yml``.

Pure parsing, no execution (``chapter_standard.py`` holds the rules). The first test
runs each rule on each chapter; failure messages name the notebook, the cell index and
the rule. The tests below it show that each rule can fail: a tiny in-memory chapter
that meets every rule, and one variant per way of breaking a rule.
"""
from __future__ import annotations

import copy
import json

import pytest

import chapter_standard as cs
from book_helpers import ROOT, toc_chapters

TOC_CHAPTERS = toc_chapters()
TOC_NUMBERS = {cs.chapter_number(p) for p in TOC_CHAPTERS}


def _chapter_params():
    assert len(TOC_CHAPTERS) == 11, f"_toc.yml lists {len(TOC_CHAPTERS)} chapters, the book has 11"
    return [pytest.param(p, rule, id=f"{p.stem}-{rule.replace(' ', '_')}")
            for p in TOC_CHAPTERS for rule in cs.RULES]


@pytest.mark.parametrize("notebook, rule", _chapter_params())
def test_chapter_meets_the_standard(notebook, rule):
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    problems = cs.check_rule(rule, cells, notebook, TOC_NUMBERS)
    rel = notebook.relative_to(ROOT)
    assert not problems, f"{rel} breaks the chapter standard ({rule}):\n" + "\n".join(
        f"  {rel}, {problem}" for problem in problems)


# --------------------------------------------------------------------------- the rules can fail

FILLER = " ".join(["Attention weighs every key by how well it matches the query."] * 300)  # 3,300 words


def _md(text, grade_id=None):
    cell = {"cell_type": "markdown", "metadata": {}, "source": text}
    if grade_id:
        cell["metadata"]["nbgrader"] = {"grade": False, "solution": False, "locked": True,
                                        "grade_id": grade_id}
    return cell


def _code(text, grade_id=None, solution=False, grade=False):
    cell = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": text}
    if grade_id:
        cell["metadata"]["nbgrader"] = {"grade": grade, "solution": solution, "locked": not solution,
                                        "grade_id": grade_id}
    return cell


GOOD = [
    _md("# 4 · A tiny chapter\n\nWhat does doubling do to a vector? " + FILLER),              # 0
    _code("import solutions\nfrom solutions.figures.plots import show_explorer", "setup"),               # 1
    _md("(sec-4-1)=\n## 4.1 The idea\n\n"                                                      # 2
        "The largest weight is 0.731, about 49 % of the rows agree, and the layer has\n"
        "1,050,624 parameters; $p = 0.25$ in maths too. See [§4.2](#sec-4-2), "
        "{ref}`sec-4-3`, [chapter 5](../05_x/05_x.ipynb) and Figure 4.1; chapter 9 is not\n"
        "written yet. Code such as `x = 0.125` and [a link](https://example.org/v1.5) "
        "states nothing.\n\n"
        ":::{figure} figures/demo.svg\n:name: fig-demo\n:alt: Two boxes joined by an arrow.\n"
        ":width: 100%\n\nFigure 4.1: the input box feeds the output box.\n:::"),
    _code("w = 0.7311\nassert abs(w - 0.731) < 5e-4\nassert round(100 * 0.49) == 49\n"        # 3
          "assert (n_params ==\n        1_050_624)\nassert p == 0.250"),
    _md("Write `double(x)`.\n\n**Graded parts (2 points)**\n- values: 1 point\n"               # 4
        "- dtype: 1 point\n\n:::{dropdown} Hint 1\nHint: multiply.\n:::", "prompt_double"),
    _code("def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION",     # 5
          "double", solution=True),
    _code('check("double", double)', "test_double", grade=True),                               # 6
    _md("From here on the chapter uses the reference."),                                        # 7
    _code("print(solutions.double(3))\nshow_explorer(build_widget)"),                            # 8
    _md("(sec-4-2)=\n## 4.2 Common mistakes\n\nForgetting the dtype."),                         # 9
    _md("(sec-4-3)=\n## 4.3 Think about it\n\n1. Why twice and not three\n   times?\n\n"        # 10
        ":::{dropdown} Answer\nBecause the contract says so.\n:::\n\n"
        "2. What breaks if you add instead?\n\n:::{dropdown} Answer\nThe sum.\n:::"),
    _md("## Summary\n\nDoubling doubles."),                                                     # 11
    _md("## References\n\n```{bibliography}\n:filter: docname in docnames\n```"),              # 12
]


@pytest.fixture
def chapter(tmp_path):
    """A chapter folder with the diagram the good notebook shows; returns its notebook path."""
    folder = tmp_path / "04_tiny"
    (folder / "figures").mkdir(parents=True)
    (folder / "figures" / "demo.svg").write_text("<svg xmlns='http://www.w3.org/2000/svg'/>")
    return folder / "04_tiny.ipynb"


def _problems(rule, cells, path):
    return cs.check_rule(rule, cells, path, {4, 5})


def test_the_tiny_chapter_meets_every_rule(chapter):
    for rule in cs.RULES:
        assert _problems(rule, GOOD, chapter) == [], rule
    assert cs.WORDS_MIN <= cs.word_count(GOOD) <= cs.WORDS_MAX


def _set(index, text):
    def change(cells):
        cells[index]["source"] = text
    return change


def _replace(index, old, new):
    def change(cells):
        assert old in cells[index]["source"], old
        cells[index]["source"] = cells[index]["source"].replace(old, new)
    return change


def _insert(index, cell):
    def change(cells):
        cells.insert(index, cell)
    return change


def _swap(i, j):
    def change(cells):
        cells[i], cells[j] = cells[j], cells[i]
    return change


BROKEN = {
    # rule: [(id, change, text the message must contain, cell it must name)]
    "title": [
        ("no number", _replace(0, "# 4 · A tiny chapter", "# A tiny chapter"), "is not '# 4 · Title'", 0),
        ("wrong number", _replace(0, "# 4 ·", "# 5 ·"), "does not match the folder (4)", 0),
        ("code first", _insert(0, _code("x = 1")), "must be markdown", 0),
    ],
    "sections": [
        ("unnumbered", _replace(2, "## 4.1 The idea", "## The idea"), "is not '## 4.k Title'", 2),
        ("old style", _replace(2, "## 4.1 The idea", "## 1 · The idea"), "is not '## 4.k Title'", 2),
        ("skipped number", _replace(9, "## 4.2", "## 4.4"), "expected 4.2", 9),
        ("other chapter", _replace(2, "## 4.1", "## 3.1"), "chapter number 3", 2),
        ("end matter order", _swap(9, 10), "expected ['Common mistakes', 'Think about it'", 9),
        ("no summary", _replace(11, "## Summary", "Summary:"), "expected ['Common mistakes'", 2),
        ("after references", _insert(13, _code("print('late')")), "nothing may follow", 13),
    ],
    "think about it": [
        ("five questions", _set(10, "## 4.3 Think about it\n\n" + "\n\n".join(
            f"{i}. Question {i}?\n\n:::{{dropdown}} Answer\nYes.\n:::" for i in range(1, 6))),
         "5 questions, expected 2–4", 10),
        ("one question", _set(10, "## 4.3 Think about it\n\n1. Why?\n\n:::{dropdown} Answer\nYes.\n:::"),
         "1 questions, expected 2–4", 10),
        ("unfolded answer", _replace(10, ":::{dropdown} Answer\nThe sum.\n:::", "Answer: the sum."),
         "1 of 2 questions have no folded answer", 10),
        ("missing", _replace(10, "## 4.3 Think about it", "## 4.3 Questions"), "no '## N.k Think about it'",
         None),
    ],
    "answer before exercise": [
        ("attribute", _insert(2, _code("solutions.double(2)")), "uses solutions.double", 2),
        ("from import", _insert(2, _code("from solutions import (softmax,\n    double)")),
         "uses solutions.double", 2),
        ("submodule", _insert(2, _code("from solutions.basics import double as d")), "uses solutions.double", 2),
        ("getattr", _insert(2, _code('f = getattr(solutions, "double")')), "uses solutions.double", 2),
        ("alias", _insert(2, _code("import solutions as S\n%time S.double(1)")), "uses solutions.double", 2),
        ("nested", _insert(2, _code("y = solutions.basics.double(1)")), "uses solutions.double", 2),
    ],
    "prompts": [
        ("no graded parts", _replace(4, "**Graded parts (2 points)**", "Graded parts:"),
         "no '**Graded parts (P points)**' block", 4),
        ("steps recipe", _replace(4, "Write `double(x)`.", "Write `double(x)`.\n\n**Steps:** multiply."),
         "dictates a recipe", 4),
        ("steps bullet", _replace(4, "Write `double(x)`.", "Write it.\n\n- Steps: multiply."),
         "dictates a recipe", 4),
        ("prompt missing", lambda cells: cells[4]["metadata"].pop("nbgrader"), "has no markdown prompt cell", 5),
        ("prompt after", _swap(4, 5), "has no markdown prompt cell", 4),
        ("hint unfolded", _replace(2, "The largest", "Hint: look at the shapes.\n\nThe largest"),
         "a hint outside a {dropdown}", 2),
        ("hint heading", _insert(7, _md("**Hint 2.** Use broadcasting.")), "a hint outside", 7),
    ],
    "word count": [
        ("too short", _replace(0, FILLER, "Short."), "words of prose, expected 3,000–4,350", None),
        ("too long", _replace(0, FILLER, FILLER + " " + FILLER[:12000]), "expected 3,000–4,350", None),
    ],
    "figure and explorer": [
        ("missing file", _replace(2, "figures/demo.svg", "figures/other.svg"), "does not exist", 2),
        ("not svg", _replace(2, "figures/demo.svg", "figures/demo.png"), "is not figures/<name>.svg", 2),
        ("no alt", _replace(2, ":alt: Two boxes joined by an arrow.\n", ""), "no :alt: text", 2),
        ("no caption", _replace(2, "Figure 4.1: the input box feeds the output box.\n", ""), "no caption", 2),
        ("no figure", _replace(2, ":::{figure}", ":::{note}"), "no {figure} directive", None),
        ("no explorer", _replace(8, "show_explorer(build_widget)", "build_widget()"), "show_explorer(", None),
    ],
    "numbers asserted": [
        ("decimal", _replace(7, "reference.", "reference; its error is 0.0042."), "0.0042 (cell 7)", 7),
        ("percent", _replace(7, "reference.", "reference, right in 87 % of rows."), "87 % (cell 7)", 7),
        ("thousands", _replace(7, "reference.", "reference over 2,048 tokens."), "2,048 (cell 7)", 7),
        ("inline maths", _replace(7, "reference.", "reference: $w = 0.333$."), "0.333 (cell 7)", 7),
        ("assert elsewhere", _replace(3, "assert abs(w - 0.731) < 5e-4", "print(abs(w - 0.731))"),
         "0.731 (cell 2)", 2),
        ("in an answer", _replace(10, "The sum.", "The sum, 0.5 of the time."), "0.5 (cell 10)", 10),
    ],
    "cross-references": [
        ("bare section", _replace(7, "reference.", "reference, as section 4.2 shows."), "'section 4.2'", 7),
        ("bare paragraph sign", _replace(7, "reference.", "reference (§4.2)."), "'§4.2'", 7),
        ("bare chapter in toc", _replace(7, "reference.", "reference; chapter 5 reuses it."), "'chapter 5'", 7),
        ("split over lines", _replace(7, "reference.", "reference, see section\n4.2."), "'section 4.2'", 7),
    ],
    "maths text": [
        ("underscore in text", _replace(7, "reference.", "reference: $\\text{warmup\\_steps}$."),
         "warmup\\\\_steps", 7),
    ],
    "raw html": [
        ("special token", _replace(7, "reference.", "reference; the decoder starts from <sos>."), "'<sos>'", 7),
        ("in a prompt", _replace(4, "Write `double(x)`.", "Write `double(x)`; ids map to vocab['<unk>']."),
         "'<unk>'", 4),
    ],
}


def _broken_params():
    return [pytest.param(rule, change, text, cell, id=f"{rule.replace(' ', '_')}-{name.replace(' ', '_')}")
            for rule, cases in BROKEN.items() for name, change, text, cell in cases]


@pytest.mark.parametrize("rule, change, text, cell", _broken_params())
def test_each_rule_catches_what_it_forbids(chapter, rule, change, text, cell):
    cells = copy.deepcopy(GOOD)
    change(cells)
    problems = _problems(rule, cells, chapter)
    assert problems, f"{rule}: the change went unnoticed"
    messages = "\n".join(str(p) for p in problems)
    assert text in messages, messages
    assert cell in [p.cell for p in problems], messages


def test_every_rule_has_a_failing_case():
    assert set(BROKEN) == set(cs.RULES)


def test_allowed_references_and_numbers_are_not_flagged(chapter):
    cells = copy.deepcopy(GOOD)
    cells[7]["source"] = (
        "The paper (its section 3.2.3) masks later keys; chapter 9 will train it, see\n"
        "{cite:t}`vaswani2017attention`, section 3.2.2, [§4.2](#sec-4-2) and Figure 4.1 in\n"
        "[the figure](#fig-demo). Headings' numbers, `0.5` in code, and $$0.75$$ display\n"
        "maths state nothing here.")
    assert _problems("cross-references", cells, chapter) == []
    assert _problems("numbers asserted", cells, chapter) == []
    cells[7]["source"] = "Tokens such as `<sos>`, maths $a < b > c$, and <b>bold</b> HTML are fine."
    assert _problems("raw html", cells, chapter) == []
    cells[7]["source"] = "A rate of $\\mathrm{warmup\\_steps}^{-1.5}$ and $\\text{step}$ are fine."
    assert _problems("maths text", cells, chapter) == []


def test_failure_message_names_notebook_cell_and_rule(chapter):
    cells = copy.deepcopy(GOOD)
    cells[7]["source"] = "From here on (§4.2), 12.5 % of the rows."
    numbers = _problems("numbers asserted", cells, chapter)
    refs = _problems("cross-references", cells, chapter)
    assert str(numbers[0]).startswith("cell 7: [numbers asserted]") and "12.5 %" in str(numbers[0])
    assert str(refs[0]).startswith("cell 7: [cross-references]")


def test_unknown_rule_is_rejected(chapter):
    with pytest.raises(ValueError, match="unknown rule"):
        cs.check_rule("colour", GOOD, chapter, {4})
