"""nbgrader configuration: this repository is an nbgrader course directory.

The chapter notebooks are the nbgrader *source* notebooks, so plain nbgrader and
its formgrader work here as well as ``python -m autograder``:

    nbgrader generate_assignment 04_self_attention   # -> release/04_self_attention/
    nbgrader autograde 04_self_attention             # submissions/<student>/04_self_attention/

Prefer ``python -m autograder release`` and ``python -m autograder autograde
04_self_attention`` (run here): the first also checks the solution cells against
``solutions`` and proves that nothing secret was released; the second reads this
file as nbgrader does and does what ``nbgrader autograde`` does (this gradebook,
``graded/<student>/<chapter>/`` for the formgrader, nbgrader's late penalties; hand
grades kept), but runs student code in a sandbox, which plain ``nbgrader autograde``
does not (it runs it with your rights, in the kernel that runs the hidden tests).
"""
import os

c = get_config()  # noqa: F821 - provided by nbgrader when it loads this file

HERE = os.path.dirname(os.path.abspath(__file__))

c.CourseDirectory.root = HERE
c.CourseDirectory.course_id = "transformer-book"

# nbgrader's folders under human names. The source notebooks are the book itself:
# book/<chapter>/<chapter>.ipynb, one chapter = one assignment = one notebook.
c.CourseDirectory.source_directory = "book"
c.CourseDirectory.release_directory = "release"          # student notebooks (`make release`)
c.CourseDirectory.submitted_directory = "submissions"    # submissions/<student>/<chapter>/<chapter>.ipynb
c.CourseDirectory.autograded_directory = "graded"        # nbgrader autograde's executed copies
c.CourseDirectory.feedback_directory = "feedback"        # nbgrader generate_feedback's HTML
c.CourseDirectory.solution_directory = "answer_key"      # nbgrader generate_solution's output
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(HERE, "gradebook.db")
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "_build", "feedback"]


# Only real chapters are assignments. book/ also holds the book's _ext, _static and
# _vendor folders, and nbgrader 0.9.6 has no setting that hides a folder of the source
# directory from the formgrader: NbGraderAPI.get_source_assignments() lists every
# folder there (CourseDirectory.ignore only filters files nbgrader copies). So this
# file, which every nbgrader command and the formgrader load, narrows that listing
# to the folders that hold a notebook named after themselves (<id>/<id>.ipynb).
def _only_chapters(get_source_assignments):
    def chapters(self):
        return {
            name for name in get_source_assignments(self)
            if os.path.isfile(os.path.join(self.coursedir.format_path(
                self.coursedir.source_directory, ".", name), name + ".ipynb"))
        }

    chapters.only_chapters = True
    return chapters


def _install_chapter_filter():
    from nbgrader.apps.api import NbGraderAPI

    if not getattr(NbGraderAPI.get_source_assignments, "only_chapters", False):  # once per process
        NbGraderAPI.get_source_assignments = _only_chapters(NbGraderAPI.get_source_assignments)


_install_chapter_filter()

# Per-cell timeout of `nbgrader autograde`. The longest cell of a chapter (the
# training chapter's short run, ~1-2 min on 2 CPU cores) must fit with margin; a
# student's endless loop costs at most this long per cell.
c.Execute.timeout = 300
c.Execute.interrupt_on_timeout = True

# `nbgrader generate_assignment` writes the student notebook as `autograder release`
# does: the chapters' MyST (hint dropdowns, citations, labels, figures) becomes plain
# Markdown first (autograder/student/plain.py), so that JupyterLab, Notebook 7, VS Code
# and Colab render it; nbgrader's own steps follow, so checksums match the plain text.
def _plain_markdown_first():
    from nbgrader.converters import GenerateAssignment

    steps = list(GenerateAssignment.class_traits()["preprocessors"].default())
    try:
        from autograder.student.plain import PlainMarkdown
    except ImportError as exc:  # nbgrader run from a Python without this repository
        import warnings

        warnings.warn(f"generate_assignment will keep the MyST markup: {exc}", stacklevel=1)
        return steps
    return [PlainMarkdown] + [step for step in steps if step is not PlainMarkdown]


c.GenerateAssignment.preprocessors = _plain_markdown_first()

# The book's solution and hidden-test delimiters are nbgrader's defaults.
c.ClearSolutions.begin_solution_delimeter = "BEGIN SOLUTION"
c.ClearSolutions.end_solution_delimeter = "END SOLUTION"
c.ClearHiddenTests.begin_test_delimeter = "BEGIN HIDDEN TESTS"
c.ClearHiddenTests.end_test_delimeter = "END HIDDEN TESTS"
