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


def test_course_edition_keeps_solution_code_executable_and_removes_prose(source_nb):
    out = render.render_notebook(source_nb, edition="course")
    solution = _cell(out, "double")
    assert "SOLUTION-CODE-MARKER" in _text(solution)  # still executed: later cells use it
    assert "remove-cell" in _cell(out, "why")["metadata"]["tags"]
    # The code is taken off the page after parsing (doctree-read; see test_render_build).


@pytest.mark.parametrize("hidden", ["strip", "run"])
def test_code_cells_are_the_same_in_both_editions(source_nb, hidden):
    """jupyter-cache hashes code cells with their metadata: equal cells share one execution."""
    def code(edition):
        out = render.render_notebook(source_nb, edition=edition, hidden=hidden)
        return [c for c in out["cells"] if c["cell_type"] == "code"]

    assert code("web") == code("course")


def test_run_mode_sets_hidden_tests_apart_in_removed_cells(source_nb):
    out = render.render_notebook(source_nb, edition="web", hidden="run")
    ids = [c.get("id") for c in out["cells"]]
    assert len(ids) == len(set(ids)) == len(source_nb["cells"]) + 2
    visible = _cell(out, "test_double")
    assert _text(visible) == 'check("double", double)'
    assert "remove-cell" not in visible["metadata"].get("tags", [])
    after = out["cells"][out["cells"].index(visible) + 1]
    assert _text(after) == 'check("double", double, hidden=True)  # HIDDEN-TEST-MARKER'
    assert after["metadata"] == {"tags": ["remove-cell"],
                                 render.HIDDEN_CELL_KEY: {"hidden_tests_of": "test_double"}}
    assert after["cell_type"] == "code" and after["outputs"] == [] and after["execution_count"] is None
    only_hidden = _cell(out, "test_double_hidden_only")
    assert _text(only_hidden) == "" and "remove-cell" in only_hidden["metadata"]["tags"]
    after = out["cells"][out["cells"].index(only_hidden) + 1]
    assert _text(after) == "assert double(7) == 14  # ONLY-HIDDEN-MARKER"
    assert "remove-cell" in after["metadata"]["tags"]
    # No marker line survives, and no hidden line sits in a cell that is shown.
    shown = [c for c in out["cells"] if "remove-cell" not in c["metadata"].get("tags", [])]
    assert "HIDDEN" not in json.dumps(shown).replace("HIDDEN-RAN", "")
    assert "HIDDEN TESTS" not in json.dumps(out)


def test_the_packages_fingerprint_is_recorded_on_the_first_code_cell(source_nb, tmp_path):
    (tmp_path / "solutions").mkdir()
    (tmp_path / "solutions" / "a.py").write_text("x = 1\n")
    before = render.inputs_fingerprint(tmp_path)
    out = render.render_notebook(source_nb, hidden="run", inputs=before)
    first_code = next(c for c in out["cells"] if c["cell_type"] == "code")
    assert first_code["metadata"][render.INPUTS_KEY] == {"inputs": before}
    assert sum(render.INPUTS_KEY in c["metadata"] for c in out["cells"]) == 1
    assert render.INPUTS_KEY not in json.dumps(render.render_notebook(source_nb, hidden="run"))
    (tmp_path / "solutions" / "__pycache__").mkdir()
    (tmp_path / "solutions" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"cache")
    assert render.inputs_fingerprint(tmp_path) == before  # caches do not count
    (tmp_path / "autograder").mkdir()
    (tmp_path / "autograder" / "b.py").write_text("y = 2\n")
    assert render.inputs_fingerprint(tmp_path) != before


def test_split_hidden_tests_keeps_the_order_of_several_regions():
    text = "a = 1\n### BEGIN HIDDEN TESTS\nsecret()\n### END HIDDEN TESTS\nb = 2\n" \
           "### BEGIN HIDDEN TESTS\nmore()\n### END HIDDEN TESTS"
    assert render.split_hidden_tests(text) == [(False, "a = 1"), (True, "secret()"),
                                               (False, "b = 2"), (True, "more()")]
    cell = {"cell_type": "code", "id": "abc", "metadata": {"nbgrader": {"grade_id": "t"}},
            "outputs": [], "execution_count": None, "source": text}
    out = render.render_notebook({"cells": [cell]}, hidden="run")
    assert [(_text(c), c["metadata"].get("tags")) for c in out["cells"]] == [
        ("a = 1", None), ("secret()", ["remove-cell"]), ("b = 2", None), ("more()", ["remove-cell"])]
    assert [c["id"] for c in out["cells"]] == ["abc", "abc-h1", "abc-h2", "abc-h3"]


def test_an_indented_hidden_region_is_an_error_in_run_mode():
    with pytest.raises(render.HiddenTestsError, match="indented"):
        render.split_hidden_tests("for x in xs:\n    ### BEGIN HIDDEN TESTS\n    f(x)\n"
                                  "    ### END HIDDEN TESTS", where="ch.ipynb, cell 9")


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
    with pytest.raises(ValueError, match="hidden"):
        render.render_notebook(source_nb, hidden="show")
    monkeypatch.setenv("BOOK_EDITION", "teacher")
    with pytest.raises(ValueError, match="BOOK_EDITION"):
        render.current_edition()
    monkeypatch.setenv("BOOK_EDITION", "course")
    assert render.current_edition() == "course"
