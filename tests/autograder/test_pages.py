"""The pages are Jinja2 templates, and no template edit can drop their escaping.

``autograder/templates/`` holds the feedback page, the class report's pages (the term page and
the lateness section among them) and the similarity page, rendered by
:func:`autograder.pagestyle.render_page`: every ``{{ value }}`` is escaped as
:func:`html.escape` does (the pages' bytes before the templates), and Jinja2's autoescape
stays on beneath. Shown here with a payload in every field a page shows, and with a
template written the careless ways (no ``|e``, ``autoescape false``): only an explicit
``|safe`` (or a value that is :class:`~markupsafe.Markup` already) passes HTML through.
"""
from __future__ import annotations

import html

import pytest

from autograder import feedback, pagestyle, report, similarity, term_plots
from autograder.results import SubmissionGrade
from autograder.roster import Roster, Student
from autograder.scores import ExerciseScore, PartScore, Status

PAYLOAD = "<script>alert('x')</script>"
ESCAPED = html.escape(PAYLOAD)  # &lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;


def _score(student: str, chapter: str, status: Status, **fields) -> ExerciseScore:
    """A score whose every text field holds the payload."""
    base = dict(student=student, chapter=chapter, exercise="softmax" + PAYLOAD, score=1.0, max_score=2.0,
                status=status, reason="reason " + PAYLOAD, grade_id="test_softmax" + PAYLOAD,
                parts=[PartScore("part " + PAYLOAD, 0.0, 1.0, "message " + PAYLOAD, "hint " + PAYLOAD),
                       PartScore("earned " + PAYLOAD, 1.0, 1.0)],
                notes=["note " + PAYLOAD], auto_score=1.0, manual_score=1.0, extra_credit=0.5,
                comment="comment " + PAYLOAD)
    return ExerciseScore(**{**base, **fields})


def test_the_feedback_page_escapes_every_field():
    scores = [_score(PAYLOAD, PAYLOAD, Status.PARTIAL),
              _score(PAYLOAD, PAYLOAD, Status.MISSING, exercise="other" + PAYLOAD, parts=[], auto_score=0.0)]
    code = {"softmax" + PAYLOAD: ["# " + PAYLOAD] * 7}  # more cells than the page shows
    page = feedback.render_feedback(PAYLOAD, PAYLOAD, scores, code, PAYLOAD, late_seconds=60.0, penalty=0.5)
    assert "<script" not in page.lower()
    # title, h1, student, status; per exercise: link, row, reason, section, parts, notes, comment, code
    assert page.count(ESCAPED) >= 20
    assert "Grader's comment" in page and "2 more cells" in page  # the template's own text is not escaped


def test_the_class_report_pages_escape_every_field():
    students = [PAYLOAD + str(i) for i in range(3)]
    rows = [_score(s, "ch", Status.ERROR, parts=[], auto_score=0.0) if i == 0 else _score(s, "ch", Status.PARTIAL)
            for i, s in enumerate(students)]
    grades = {(s, "ch"): SubmissionGrade(s, "ch", "incomplete", late_seconds=90.0, penalty=0.5) for s in students}
    grades[(students[2], "ch")].wrong_chapter = "05" + PAYLOAD
    summary = report.chapter_summary("ch", rows, grades)
    page = report.render_html(summary, PAYLOAD)
    index = report._index_html([summary])
    for text in (page, index):
        assert "<script" not in text.lower()
    assert page.count(html.escape(PAYLOAD)) >= 8


def test_the_term_page_and_the_lateness_section_escape_every_field():
    students = [PAYLOAD + str(i) for i in range(3)]
    rows = [_score(s, "ch" + PAYLOAD, Status.PARTIAL) for s in students]
    grades = {(s, "ch" + PAYLOAD): SubmissionGrade(s, "ch" + PAYLOAD, "incomplete", late_seconds=90.0 * i,
                                                    extension_seconds=86400.0 * (i == 1), late_days_used=2 * (i == 2))
              for i, s in enumerate(students)}
    summary = report.chapter_summary("ch" + PAYLOAD, rows, grades)
    section = term_plots.chapter_section(summary, grades, [])
    # the figure's label names the chapter; the words name the two helped students, once each
    assert "<script" not in section.lower() and section.count(ESCAPED) == 3, section
    roster = Roster([Student(students[0], name=PAYLOAD, section=PAYLOAD), Student("absent" + PAYLOAD)])
    for with_roster in (roster, None):
        page = term_plots.term_page([summary], grades, with_roster)
        assert "<script" not in page.lower()
        # the chapter twice (link and text) and each student; with the roster: name, section, the two notes
        assert page.count(ESCAPED) >= 5 + (4 if with_roster else 0), page


def test_the_similarity_page_escapes_every_field():
    match = similarity.Match(exercise="softmax" + PAYLOAD, code_a="a = '" + PAYLOAD + "'", code_b=PAYLOAD,
                             slices_a=[(0, 5)], slices_b=[(0, 3)], matched_a=3, matched_b=3, written_a=9, written_b=9,
                             counted=True)
    pair = similarity.Pair(PAYLOAD + "a", PAYLOAD + "b", 0.9, 0.9, 0.8, 18, True, [match])
    found = similarity.SimilarityReport("ch" + PAYLOAD, similarity.Settings(), [pair], [PAYLOAD + "a", PAYLOAD + "b"],
                                        {PAYLOAD + "c": "not readable " + PAYLOAD})
    page = similarity.render_html(found)
    assert "<script" not in page.lower()
    assert page.count(ESCAPED) >= 10, page


@pytest.fixture
def own_templates(tmp_path, monkeypatch):
    """render_page reading templates from ``tmp_path`` (as an edited templates folder would be)."""
    monkeypatch.setattr(pagestyle, "TEMPLATES", tmp_path)
    pagestyle._environment.cache_clear()
    yield tmp_path
    pagestyle._environment.cache_clear()


def test_a_careless_template_still_escapes(own_templates):
    (own_templates / "careless.html").write_text(
        '<p>{{ x }}</p><a title="{{ x }}">{{ x|e }}</a>{{ x ~ "" }}{{ [x]|join }}\n'
        "{% autoescape false %}<i>{{ x }}</i>{% endautoescape %}\n", encoding="utf-8")
    page = pagestyle.render_page("careless.html", x=PAYLOAD)
    # every slot escaped (|e is markupsafe's own: ' as &#39;), none twice
    assert "<script" not in page and page.count("&lt;script&gt;") == 6 and "&amp;" not in page, page
    # Only an explicit opt-out passes HTML through: |safe, or a value that is Markup already.
    (own_templates / "trusted.html").write_text("{{ x|safe }}{{ y }}", encoding="utf-8")
    assert pagestyle.render_page("trusted.html", x="<b>", y=pagestyle.Markup("<i>")) == "<b><i>"


def test_a_template_that_reads_a_missing_name_fails_loudly(own_templates):
    (own_templates / "typo.html").write_text("{{ studnet }}", encoding="utf-8")
    with pytest.raises(Exception, match="studnet"):
        pagestyle.render_page("typo.html", student="ann")
