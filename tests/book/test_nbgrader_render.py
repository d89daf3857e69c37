"""The rendering rules of chapter notebooks (book/_ext/nbgrader_render.py) on a fixture notebook."""
import json

import pytest

from book_helpers import FIXTURES, load_extension

render = load_extension("nbgrader_render")


@pytest.fixture
def source_nb():
    return json.loads((FIXTURES / "nbgrader_chapter.ipynb").read_text(encoding="utf-8"))


def _cell(nb, grade_id):
    matches = [c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id]
    assert len(matches) == 1, grade_id
    return matches[0]


def _text(cell):
    return render._source_text(cell)


@pytest.mark.parametrize("edition", ["web", "course"])
def test_hidden_tests_never_survive(source_nb, edition):
    out = render.render_notebook(source_nb, edition=edition)
    everything = json.dumps(out)
    assert "HIDDEN-TEST-MARKER" not in everything
    assert "ONLY-HIDDEN-MARKER" not in everything
    assert "HIDDEN TESTS" not in everything
    # The visible part of the test cell stays, untouched.
    assert _text(_cell(out, "test_double")) == 'check("double", double)'
    assert "remove-cell" not in _cell(out, "test_double")["metadata"].get("tags", [])
    # A test cell that was all hidden is removed from the page.
    assert "remove-cell" in _cell(out, "test_double_hidden_only")["metadata"]["tags"]


def test_web_edition_folds_solutions_behind_show_solution(source_nb):
    out = render.render_notebook(source_nb, edition="web")
    solution = _cell(out, "double")
    assert solution["metadata"]["tags"] == ["hide-input"]
    assert solution["metadata"]["mystnb"] == {"code_prompt_show": "Show solution",
                                              "code_prompt_hide": "Hide solution"}
    code = _text(solution)
    assert "SOLUTION-CODE-MARKER" in code and "BEGIN SOLUTION" not in code and "END SOLUTION" not in code
    assert code.startswith("def double(x):")
    prose = _text(_cell(out, "why"))
    assert prose.startswith("```{admonition} Solution\n:class: dropdown")
    assert "SOLUTION-PROSE-MARKER" in prose
    # Cells without a solution are left alone.
    assert "tags" not in _cell(out, "setup")["metadata"]
    assert _text(_cell(out, "prompt_double")) == _text(_cell(source_nb, "prompt_double"))


def test_course_edition_removes_solution_code_but_keeps_it_executable(source_nb):
    out = render.render_notebook(source_nb, edition="course")
    solution = _cell(out, "double")
    assert solution["metadata"]["tags"] == ["remove-input"]  # still executed: later cells use it
    assert "SOLUTION-CODE-MARKER" in _text(solution)
    assert "remove-cell" in _cell(out, "why")["metadata"]["tags"]


def test_source_notebook_is_not_modified(source_nb):
    before = json.dumps(source_nb, sort_keys=True)
    render.render_notebook(source_nb, edition="web")
    render.student_notebook(source_nb)
    assert json.dumps(source_nb, sort_keys=True) == before


def test_existing_tags_are_kept(source_nb):
    _cell(source_nb, "double")["metadata"]["tags"] = ["my-tag", "hide-input"]
    out = render.render_notebook(source_nb, edition="web")
    assert _cell(out, "double")["metadata"]["tags"] == ["my-tag", "hide-input"]


def test_student_notebook_has_stubs_not_solutions(source_nb):
    out = render.student_notebook(source_nb)
    everything = json.dumps(out)
    for secret in ("SOLUTION-CODE-MARKER", "SOLUTION-PROSE-MARKER", "HIDDEN-TEST-MARKER", "ONLY-HIDDEN-MARKER"):
        assert secret not in everything
    assert _text(_cell(out, "double")) == (
        'def double(x):\n    """Return twice x."""\n    # YOUR CODE HERE\n    raise NotImplementedError()')
    assert _text(_cell(out, "why")) == "YOUR ANSWER HERE"


@pytest.mark.parametrize("text, message", [
    ("a\n### BEGIN HIDDEN TESTS\nb", "without 'END HIDDEN TESTS'"),
    ("a\n### END HIDDEN TESTS\nb", "without 'BEGIN HIDDEN TESTS'"),
    ("### BEGIN HIDDEN TESTS\n### BEGIN HIDDEN TESTS\n### END HIDDEN TESTS", "nested"),
])
def test_unpaired_hidden_markers_are_an_error_naming_the_cell(text, message):
    with pytest.raises(render.HiddenTestsError, match=message) as err:
        render.strip_hidden_tests(text, where="ch.ipynb, cell 3 ('test_x')")
    assert "ch.ipynb, cell 3 ('test_x')" in str(err.value)


def test_strip_hidden_tests_keeps_code_around_several_regions():
    text = "a = 1\n### BEGIN HIDDEN TESTS\nsecret()\n### END HIDDEN TESTS\nb = 2\n" \
           "### BEGIN HIDDEN TESTS\nmore()\n### END HIDDEN TESTS\nc = 3"
    assert render.strip_hidden_tests(text) == "a = 1\nb = 2\nc = 3"


def test_dropdown_fence_is_longer_than_any_backtick_run_inside():
    wrapped = render._wrap_in_dropdown("code:\n```python\nx = 1\n```")
    assert wrapped.startswith("````{admonition} Solution") and wrapped.endswith("\n````")


def test_unknown_edition_is_rejected(source_nb, monkeypatch):
    with pytest.raises(ValueError, match="edition"):
        render.render_notebook(source_nb, edition="teacher")
    monkeypatch.setenv("BOOK_EDITION", "teacher")
    with pytest.raises(ValueError, match="BOOK_EDITION"):
        render.current_edition()
    monkeypatch.setenv("BOOK_EDITION", "course")
    assert render.current_edition() == "course"
