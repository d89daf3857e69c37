"""Every chapter's reference answers grade full marks in the real sandbox, and the
blank (released) answers grade zero — including chapters whose notebook is not
written yet, so a `solutions` layout that withholds too much is caught early.

The setup cell imports everything the stripped library still offers
(`from solutions import *`), which is what a chapter's own setup cell may use.
"""
import pytest

import fixtures
from autograder.checks import load_all
from autograder.grading import grade_submission

CHAPTERS = sorted({ex.chapter for ex in load_all().values()})
SETUP = fixtures.SETUP_SOURCE + "\nfrom solutions import *"


@pytest.mark.slow
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_reference_full_marks_blank_zero(chapter, tmp_path):
    names = [ex.name for ex in load_all().values() if ex.chapter == chapter]
    source = fixtures.source_notebook(chapter, names, setup=SETUP)
    src = fixtures.write_notebook(source, tmp_path / "source" / f"{chapter}.ipynb")
    blank = fixtures.write_notebook(fixtures.blank_submission(source), tmp_path / "blank" / f"{chapter}.ipynb")

    reference = grade_submission(src, src, chapter=chapter, seed=7)
    assert [s.exercise for s in reference] == names
    failed = [f"{s.exercise}: {s.status} {s.reason}" for s in reference if s.score != s.max_score]
    assert not failed, f"reference answers of {chapter} lose points in the sandbox: {failed}"

    zero = grade_submission(src, blank, chapter=chapter, seed=7)
    assert all(s.score == 0 for s in zero), [(s.exercise, s.score) for s in zero]
    assert all("not implemented yet" in s.reason for s in zero), [s.reason for s in zero]
