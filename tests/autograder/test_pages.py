"""The pages are Jinja2 templates, and no template edit can drop their escaping.

``autograder/templates/`` holds the feedback page and the class report's pages, rendered by
:func:`autograder.pagestyle.render_page`: every ``{{ value }}`` is escaped as
:func:`html.escape` does (the pages' bytes before the templates), and Jinja2's autoescape
stays on beneath. Shown here with a payload in every field a page shows, and with a
template written the careless ways (no ``|e``, ``autoescape false``): only an explicit
``|safe`` (or a value that is :class:`~markupsafe.Markup` already) passes HTML through.
"""
from __future__ import annotations

import html

import pytest

from autograder import feedback, pagestyle, report
from autograder.results import SubmissionGrade
from autograder.scores import ExerciseScore, PartScore, Status

PAYLOAD = "<script>alert('x')</script>"
ESCAPED = html.escape(PAYLOAD)  # &lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;


def _score(student: str, chapter: str, status: Status, **fields) -> ExerciseScore:
    """A score whose every text field holds the payload."""
    base = dict(student=student, chapter=chapter, exercise="softmax" + PAYLOAD, score=1.0, max_score=2.0,
                status=status, reason="reason " + PAYLOAD, grade_id="test_softmax" + PAYLOAD,
                parts=[PartScore("part " + PAYLOAD, 0.0, 1.0, "message " + PAYLOAD, "hint " + PAYLOAD),
                       PartScore("earned " + PAYLOAD, 1.0, 1.0)],
                notes=["note " + PAYLOAD], auto_score=0.5, manual_score=1.0, extra_credit=0.5,
                comment="comment " + PAYLOAD)
    return ExerciseScore(**{**base, **fields})


def test_the_feedback_page_escapes_every_field():
    scores = [_score(PAYLOAD, PAYLOAD, Status.PARTIAL),
              _score(PAYLOAD, PAYLOAD, Status.MISSING, exercise="other" + PAYLOAD, parts=[])]
    code = {"softmax" + PAYLOAD: ["# " + PAYLOAD] * 7}  # more cells than the page shows
    page = feedback.render_feedback(PAYLOAD, PAYLOAD, scores, code, PAYLOAD, late_seconds=60.0, penalty=0.5)
    assert "<script" not in page.lower()
    # title, h1, student, status; per exercise: link, row, reason, section, parts, notes, comment, code
    assert page.count(ESCAPED) >= 20
    assert "Grader's comment" in page and "2 more cells" in page  # the template's own text is not escaped


def test_the_class_report_pages_escape_every_field():
    students = [PAYLOAD + str(i) for i in range(3)]
    rows = [_score(s, "ch", Status.ERROR, parts=[]) if i == 0 else _score(s, "ch", Status.PARTIAL)
            for i, s in enumerate(students)]
    grades = {(s, "ch"): SubmissionGrade(s, "ch", PAYLOAD, late_seconds=90.0, penalty=0.5) for s in students}
    grades[(students[2], "ch")].wrong_chapter = "05" + PAYLOAD
    summary = report.chapter_summary("ch", rows, grades)
    page = report.render_html(summary, PAYLOAD)
    index = report._index_html([summary])
    for text in (page, index):
        assert "<script" not in text.lower()
    assert page.count(html.escape(PAYLOAD)) >= 8


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
