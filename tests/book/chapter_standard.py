"""What ``CHAPTERS.md`` makes mechanically checkable, as pure functions on a notebook.

Each ``check_*`` function takes the notebook's cells (nbformat 4 dicts, as read by
``json``) and what else it needs, and returns a list of :class:`Problem` (empty when
the rule holds). Nothing is executed. ``tests/book/test_chapter_standard.py`` runs
every rule on every chapter listed in ``_toc.yml`` and unit-tests each rule on tiny
notebooks that break it.

The MyST the chapters use is scanned line by line (:func:`prose_lines`): fenced code,
``$$`` maths and directive option lines are not prose; the content of directives such
as ``{dropdown}`` and ``{figure}`` captions is prose, tagged with the open directives.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

# CHAPTERS.md asks for 3,000-4,500 words of prose; the ceiling enforced is 150 under
# 4,500, so that a chapter can take a sentence of correction without losing one
# elsewhere (issue 39: each chapter at least 150 words under 4,500).
WORDS_MIN, WORDS_MAX = 3000, 4350
THINK_MIN, THINK_MAX = 2, 4
END_MATTER = ("Common mistakes", "Think about it", "Summary", "References")
UNNUMBERED = ("Summary", "References")


@dataclass(frozen=True)
class Problem:
    """One broken rule: where (cell index, or None for the whole notebook) and what."""

    cell: int | None
    rule: str
    message: str

    def __str__(self):
        where = "notebook" if self.cell is None else f"cell {self.cell}"
        return f"{where}: [{self.rule}] {self.message}"


# --------------------------------------------------------------------------- reading cells


def source(cell):
    """A cell's source as one string."""
    text = cell.get("source", "")
    return "".join(text) if isinstance(text, list) else text


def nbgrader(cell):
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


@dataclass(frozen=True)
class Line:
    """A line of markdown prose: the cell, the text, the directives open around it."""

    cell: int
    text: str
    directives: tuple[str, ...]  # e.g. ("dropdown",) inside a dropdown, () at top level


_FENCE = re.compile(r"^\s*(`{3,}|:{3,}|~{3,})\s*(\{([\w:-]+)\})?\s*(.*)$")
_LABEL = re.compile(r"^\s*\([\w:.-]+\)=\s*$")


def prose_lines(cells):
    """The markdown lines that are prose, with the directives each sits in.

    Dropped: fenced code blocks (a fence without ``{directive}``, or ``{code-cell}``,
    ``{code-block}``, ``{code}``), ``$$`` display maths, directive fence lines and
    option lines (``:alt: …``), MyST target labels (``(sec-4-3)=``).

    Args:
        cells: the notebook's cells.

    Returns:
        list[Line]: in order, for every markdown cell.
    """
    lines = []
    for index, cell in enumerate(cells):
        if cell.get("cell_type") != "markdown":
            continue
        stack = []  # (fence chars, fence length, directive name or "code")
        in_math = False
        options_allowed = False
        for text in source(cell).splitlines():
            stripped = text.strip()
            if in_math:
                if stripped.endswith("$$"):
                    in_math = False
                continue
            fence = _FENCE.match(text)
            if fence:
                chars, name = fence.group(1), fence.group(3)
                if stack and stack[-1][0] == chars[0] and len(chars) >= stack[-1][1] and not name \
                        and not fence.group(4):
                    stack.pop()  # a closing fence
                    options_allowed = False
                    continue
                if not (stack and stack[-1][2] == "code"):
                    kind = "code" if (name is None and chars[0] != ":") or name in (
                        "code-cell", "code-block", "code", "math") else (name or "")
                    stack.append((chars[0], len(chars), kind))
                    options_allowed = kind != "code"
                    continue
            if stack and stack[-1][2] == "code":
                continue
            if options_allowed and re.match(r"^\s*:[\w-]+:", text):
                continue
            options_allowed = False
            if stripped.startswith("$$"):
                if not (len(stripped) > 2 and stripped.endswith("$$") and stripped != "$$"):
                    in_math = True
                continue
            if _LABEL.match(text):
                continue
            lines.append(Line(index, text, tuple(name for _, _, name in stack)))
    return lines


_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
_ROLE = re.compile(r"\{[\w:-]+\}`[^`]*`")
_DISPLAY_MATH = re.compile(r"\$\$.+?\$\$")
_INLINE_MATH = re.compile(r"\$[^$]+\$")
_LINK = re.compile(r"!?\[([^\]]*)\]\(([^)]*)\)")
_HTML = re.compile(r"<[^>]+>")


def plain_text(text, keep_link_text=False):
    """A prose line without roles (``{cite:p}`…```), inline code, inline maths, HTML, links.

    Args:
        text: one line of markdown.
        keep_link_text: keep the visible text of ``[text](url)`` links (for counting words).
    """
    text = _ROLE.sub(" ", text)
    text = _INLINE_CODE.sub(" ", text)
    text = _DISPLAY_MATH.sub(" ", text)
    text = _INLINE_MATH.sub(" ", text)
    text = _HTML.sub(" ", text)
    return _LINK.sub((lambda m: m.group(1)) if keep_link_text else " ", text)


def headings(cells, level=2):
    """``(cell index, heading text)`` of every markdown heading of exactly ``level``."""
    mark = "#" * level + " "
    return [(line.cell, line.text[len(mark):].strip()) for line in prose_lines(cells)
            if line.text.startswith(mark) and not line.directives]


def chapter_number(notebook_path):
    """The chapter number from the folder name: ``book/04_self_attention/…`` → 4."""
    match = re.match(r"(\d+)_", Path(notebook_path).parent.name)
    if not match:
        raise ValueError(f"{notebook_path}: expected a folder named NN_topic")
    return int(match.group(1))


# --------------------------------------------------------------------------- the rules


def check_title(cells, number):
    """The first cell is markdown and starts with ``# N · Title``."""
    if not cells or cells[0].get("cell_type") != "markdown":
        return [Problem(0, "title", "the first cell must be markdown starting with '# N · Title'")]
    first = next((line for line in source(cells[0]).splitlines() if line.strip()), "")
    match = re.match(r"^# (\d+) · \S.*$", first)
    if not match:
        return [Problem(0, "title", f"first line {first!r} is not '# {number} · Title'")]
    if int(match.group(1)) != number:
        return [Problem(0, "title", f"title number {match.group(1)} does not match the folder ({number})")]
    return []


def check_sections(cells, number):
    """``## N.k Title`` with k = 1, 2, … in order; end matter in order; nothing after References."""
    problems = []
    found = headings(cells)
    expected_k = 1
    titles = []
    for cell, text in found:
        if text in UNNUMBERED:
            titles.append((cell, text))
            continue
        match = re.match(r"^(\d+)\.(\d+) (\S.*)$", text)
        if not match:
            problems.append(Problem(cell, "sections", f"'## {text}' is not '## {number}.k Title' "
                                                      "(nor Summary/References)"))
            titles.append((cell, text))
            continue
        n, k, title = int(match.group(1)), int(match.group(2)), match.group(3).strip()
        if n != number:
            problems.append(Problem(cell, "sections", f"'## {text}': chapter number {n}, expected {number}"))
        if k != expected_k:
            problems.append(Problem(cell, "sections", f"'## {text}': section {n}.{k}, expected "
                                                      f"{number}.{expected_k} (numbered 1, 2, … in order)"))
        expected_k = k + 1
        titles.append((cell, title))
    tail = titles[-len(END_MATTER):]
    if [title for _, title in tail] != list(END_MATTER):
        wrong = [cell for (cell, title), want in zip(tail, END_MATTER) if title != want]
        where = wrong[0] if wrong else (tail[0][0] if tail else None)
        tail = [title for _, title in tail]
        problems.append(Problem(where, "end matter", f"the last sections are {tail}, expected "
                                                     f"{list(END_MATTER)} in this order"))
    references = [cell for cell, title in titles if title == "References"]
    if references:
        after = [i for i, cell in enumerate(cells) if i > references[-1]
                 and (cell.get("cell_type") == "code" or re.search(r"^#{1,2} ", source(cell), re.M))]
        if after:
            problems.append(Problem(after[0], "end matter", "nothing may follow ## References "
                                                            f"(cells {after} do)"))
    return problems


def _section_lines(cells, title_suffix):
    """The prose lines of the ``##`` section whose title ends with ``title_suffix``."""
    lines = prose_lines(cells)
    start = next((i for i, line in enumerate(lines) if line.text.startswith("## ")
                  and not line.directives and line.text.rstrip().endswith(title_suffix)), None)
    if start is None:
        return None, []
    end = next((i for i in range(start + 1, len(lines)) if lines[i].text.startswith("## ")
                and not lines[i].directives), len(lines))
    return lines[start].cell, lines[start + 1:end]


def check_think_about_it(cells):
    """2–4 questions in "Think about it", each followed by its folded answer (a dropdown).

    A question is a paragraph or list item outside dropdowns that contains "?"; its
    answer is a ``{dropdown}`` that opens after it and before the next question.
    """
    cell, lines = _section_lines(cells, "Think about it")
    if cell is None:
        return [Problem(None, "think about it", "no '## N.k Think about it' section")]
    events = []  # "question" / "other" paragraphs and "answer" dropdowns, in order
    paragraph, previous_inside = [], False

    def end_paragraph():
        if paragraph:
            events.append("question" if any("?" in text for text in paragraph) else "other")
            paragraph.clear()

    for line in lines:
        inside = "dropdown" in line.directives
        if inside:
            if not previous_inside:
                end_paragraph()
                events.append("answer")
        elif not line.text.strip():
            end_paragraph()
        else:
            if re.match(r"^\s*(\d+[.)]|[-*+])\s", line.text):
                end_paragraph()  # a list item starts a new question
            paragraph.append(line.text)
        previous_inside = inside
    end_paragraph()
    questions = events.count("question")
    unanswered = sum(1 for i, event in enumerate(events) if event == "question"
                     and "answer" not in events[i + 1:next((j for j in range(i + 1, len(events))
                                                            if events[j] == "question"), len(events))])
    problems = []
    if not THINK_MIN <= questions <= THINK_MAX:
        problems.append(Problem(cell, "think about it", f"{questions} questions, expected "
                                                        f"{THINK_MIN}–{THINK_MAX}"))
    if unanswered:
        problems.append(Problem(cell, "think about it", f"{unanswered} of {questions} questions have no "
                                                        "folded answer (a {dropdown} right after it)"))
    return problems


_MAGIC = re.compile(r"^(\s*)%{1,2}\w+(?:\s+-\w+(?:\s+\d+)?)*\s*")


def parseable(code):
    """Code with IPython syntax made plain Python, line numbers kept.

    ``%time f(x)`` / ``%timeit -n 3 f(x)`` keep the statement they time; ``!shell``
    lines and cell magics' first lines become blank.
    """
    lines = []
    for line in code.splitlines():
        if line.lstrip().startswith("!"):
            lines.append("")
        elif line.lstrip().startswith("%"):
            lines.append(_MAGIC.sub(r"\1", line))
        else:
            lines.append(line)
    return "\n".join(lines)


def _solution_aliases(tree):
    """Names bound to the ``solutions`` package in a module: ``solutions``, ``import solutions as s``."""
    names = {"solutions"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "solutions":
                    names.add(alias.asname or "solutions")
    return names


def uses_reference(code, name):
    """Does ``code`` reach ``solutions.<name>``?

    Caught: ``solutions.name`` (also through ``import solutions as s``, and
    ``solutions.sub.name``), ``from solutions[.sub] import name``, and
    ``getattr(solutions, "name")``, also inside ``%time``/``%timeit`` lines.
    """
    try:
        tree = ast.parse(parseable(code))
    except SyntaxError:
        pattern = (rf"\bsolutions(\.\w+)*\.{re.escape(name)}\b|from\s+solutions(\.\w+)*\s+import\b[^\n]*"
                   rf"\b{re.escape(name)}\b|getattr\(\s*solutions\s*,\s*['\"]{re.escape(name)}['\"]")
        return re.search(pattern, code) is not None
    aliases = _solution_aliases(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "solutions":
            if any(alias.name == name for alias in node.names):
                return True
        if isinstance(node, ast.Attribute) and node.attr == name:
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in aliases:
                return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
                and len(node.args) >= 2 and isinstance(node.args[0], ast.Name) \
                and node.args[0].id in aliases and isinstance(node.args[1], ast.Constant) \
                and node.args[1].value == name:
            return True
    return False


def exercises(cells):
    """``(cell index, name)`` of every nbgrader solution cell (the name is its grade_id)."""
    return [(i, nbgrader(c)["grade_id"]) for i, c in enumerate(cells)
            if nbgrader(c).get("solution") and nbgrader(c).get("grade_id")]


def check_no_answer_before_exercise(cells):
    """No code cell before an exercise's solution cell calls ``solutions.<that exercise>``."""
    problems = []
    for position, name in exercises(cells):
        for index in range(position):
            cell = cells[index]
            if cell.get("cell_type") == "code" and uses_reference(source(cell), name):
                problems.append(Problem(index, "answer before exercise",
                                        f"uses solutions.{name} before the exercise '{name}' "
                                        f"(solution cell {position})"))
    return problems


_GRADED_PARTS = re.compile(r"^\*\*Graded parts \((\d+) points?\)\*\*\s*$", re.MULTILINE)
_STEPS = re.compile(r"^[\s>*_#-]*Steps\s*[:*_]", re.IGNORECASE)
_HINT = re.compile(r"^[\s>*_#\-\d.]*Hints?\b")


def check_prompts(cells):
    """Each exercise has its prompt cell before it, with a Graded parts block and no Steps: recipe.

    Also, across all markdown: a line starting "Hint" outside a ``{dropdown}`` is an
    unfolded hint.
    """
    problems = []
    prompts = {nbgrader(c).get("grade_id"): i for i, c in enumerate(cells)
               if c.get("cell_type") == "markdown" and str(nbgrader(c).get("grade_id", "")).startswith("prompt_")}
    for position, name in exercises(cells):
        index = prompts.get(f"prompt_{name}")
        if index is None or index > position:
            problems.append(Problem(position, "prompt", f"exercise '{name}' has no markdown prompt cell "
                                                        f"(grade_id 'prompt_{name}') before its solution cell"))
            continue
        text = source(cells[index])
        if not _GRADED_PARTS.search(text):
            problems.append(Problem(index, "prompt", f"prompt of '{name}' has no "
                                                     "'**Graded parts (P points)**' block"))
        for line in text.splitlines():
            if _STEPS.match(line):
                problems.append(Problem(index, "prompt", f"prompt of '{name}' dictates a recipe: {line.strip()!r}"))
    for line in prose_lines(cells):
        if "dropdown" not in line.directives and _HINT.match(line.text):
            problems.append(Problem(line.cell, "hints folded", f"a hint outside a {{dropdown}}: "
                                                               f"{line.text.strip()[:80]!r}"))
    return problems


def word_count(cells):
    """Words of prose: markdown cells without code blocks, maths, HTML, directive options, labels.

    A word is a whitespace-separated token with a letter or digit in it; the text of a
    link counts, its URL does not.
    """
    count = 0
    for line in prose_lines(cells):
        text = plain_text(line.text, keep_link_text=True)
        count += sum(1 for token in text.split() if re.search(r"[^\W_]", token))
    return count


def check_word_count(cells, low=WORDS_MIN, high=WORDS_MAX):
    words = word_count(cells)
    if not low <= words <= high:
        return [Problem(None, "word count", f"{words:,} words of prose, expected {low:,}–{high:,}")]
    return []


_FIGURE_OPEN = re.compile(r"^\s*(`{3,}|:{3,})\{figure\}\s*(\S+)\s*$")


def figures(cells):
    """``(cell, path, alt, caption)`` of every ``{figure}`` directive in markdown cells."""
    found = []
    for index, cell in enumerate(cells):
        if cell.get("cell_type") != "markdown":
            continue
        lines = source(cell).splitlines()
        i = 0
        while i < len(lines):
            match = _FIGURE_OPEN.match(lines[i])
            if not match:
                i += 1
                continue
            fence, path = match.group(1), match.group(2)
            body = []
            i += 1
            while i < len(lines) and not (lines[i].strip().startswith(fence[0] * len(fence))
                                          and lines[i].strip().strip(fence[0]) == ""):
                body.append(lines[i])
                i += 1
            options = {}
            caption = []
            for line in body:
                option = re.match(r"^\s*:([\w-]+):\s*(.*)$", line)
                if option and not caption:
                    options[option.group(1)] = option.group(2).strip()
                elif line.strip():
                    caption.append(line.strip())
            found.append((index, path, options.get("alt", ""), " ".join(caption)))
            i += 1
    return found


def check_figures_and_explorer(cells, folder):
    """At least one ``{figure}`` of an existing ``figures/*.svg`` with alt text and a caption,
    and at least one ``show_explorer(`` call in a code cell."""
    problems = []
    good = []
    for cell, path, alt, caption in figures(cells):
        issues = []
        if not re.fullmatch(r"figures/[\w.-]+\.svg", path):
            issues.append(f"'{path}' is not figures/<name>.svg")
        elif not (Path(folder) / path).is_file():
            issues.append(f"'{path}' does not exist next to the notebook")
        if not alt:
            issues.append("no :alt: text")
        if not caption:
            issues.append("no caption")
        if issues:
            problems.append(Problem(cell, "figure", f"figure {path}: " + "; ".join(issues)))
        else:
            good.append(path)
    if not good:
        problems.append(Problem(None, "figure", "no {figure} directive showing an existing "
                                                "figures/*.svg with :alt: and a caption"))
    if not any(c.get("cell_type") == "code" and "show_explorer(" in source(c) for c in cells):
        problems.append(Problem(None, "explorer", "no code cell calls show_explorer("))
    return problems


# A number the prose states: 0.731, 49 %, 1,050,624, 92.5%.
_NUMBER = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.\d+|\d+)(\s?%)?(?![\w])")
# References by number, not measured numbers: "§4.6", "Figure 4.2", "section 4.3", headings' "## 4.3".
_NUMBERED_REF = re.compile(r"(§|\b(?:[Ff]igures?|[Ff]ig\.|[Tt]ables?|[Ss]ections?|[Cc]hapters?|"
                           r"[Ee]quations?|[Ee]q\.|[Ee]xercises?|[Ll]istings?))\s*\d+(?:\.\d+)*")
# Inline maths states results too ($[0.731, 0.269, 0]$); display maths ($$…$$) holds equations.
NUMBERS_IN_MATH = True
_ASSERT_NUMBER = re.compile(r"(?<![\w.])\d[\d_]*(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _normal(number):
    """``1,050,624`` → ``1050624``; ``0.50`` → ``0.5``; ``2.0`` → ``2``."""
    number = number.replace(",", "").replace("_", "")
    if "." in number and "e" not in number.lower():
        number = number.rstrip("0").rstrip(".")
    return number


def prose_by_cell(cells):
    """``(cell, headings, body)`` per markdown cell: its heading lines, and the rest of its
    prose joined with spaces (so "section\\n5.10" and ``$…$`` split over lines are seen whole)."""
    grouped = {}
    for line in prose_lines(cells):
        heads, body = grouped.setdefault(line.cell, ([], []))
        (heads if re.match(r"^#{1,6} ", line.text) and not line.directives else body).append(line.text)
    return [(cell, heads, " ".join(part.strip() for part in body)) for cell, (heads, body) in grouped.items()]


def _latex_numbers(math):
    """Inline maths with LaTeX spellings made plain: ``1{,}050{,}624``, ``49\\%``, ``\\,``."""
    return math.replace("{,}", ",").replace("\\%", "%").replace("\\,", "")


def stated_numbers(cells, include_math=NUMBERS_IN_MATH):
    """``(cell, number as written, normalised)`` for every prose number with a decimal point,
    a percent sign or a thousands separator.

    Not counted: code, display maths, links, citations and other roles, HTML, headings'
    section numbers, and numbered references ("§4.6", "Figure 4.2", "section 4.3").
    Inline maths ``$…$`` is counted when ``include_math`` (results such as
    ``$[0.731, 0.269, 0]$`` are stated numbers too).
    """
    found = []

    def scan(cell, text):
        text = _NUMBERED_REF.sub(" ", text)
        for match in _NUMBER.finditer(text):
            digits, percent = match.group(1), match.group(2)
            if "." in digits or "," in digits or percent:
                found.append((cell, match.group(0).strip(), _normal(digits)))

    for cell, heads, body in prose_by_cell(cells):
        for head in heads:
            scan(cell, plain_text(re.sub(r"^(#{1,6} )\d+(\.\d+)*", r"\1", head)))
        scan(cell, plain_text(body))
        if include_math:
            without_code = _DISPLAY_MATH.sub(" ", _INLINE_CODE.sub(" ", _ROLE.sub(" ", body)))
            for math in _INLINE_MATH.findall(without_code):
                scan(cell, _latex_numbers(math.strip("$")))
    return found


def asserted_numbers(cells):
    """Every number literal on an ``assert`` statement of a code cell, normalised."""
    numbers = set()
    for cell in cells:
        if cell.get("cell_type") != "code":
            continue
        code = source(cell)
        statements = []
        lines = code.splitlines()
        try:
            tree = ast.parse(parseable(code))
            for node in ast.walk(tree):
                if isinstance(node, ast.Assert):
                    statements.append("\n".join(lines[node.lineno - 1:node.end_lineno]))
        except SyntaxError:
            statements = [line for line in code.splitlines() if line.lstrip().startswith("assert ")]
        for statement in statements:
            statement = re.sub(r"#.*", "", statement)
            numbers.update(_normal(n) for n in _ASSERT_NUMBER.findall(statement))
    return numbers


def check_numbers_asserted(cells):
    """Every stated number appears on an ``assert`` line of some code cell of the notebook."""
    asserted = asserted_numbers(cells)
    missing = {}
    for cell, written, normal in stated_numbers(cells):
        if normal not in asserted:
            missing.setdefault(written, []).append(cell)
    if not missing:
        return []
    listing = "; ".join(f"{number} (cell{'s' if len(set(where)) > 1 else ''} "
                        f"{', '.join(map(str, sorted(set(where))))})" for number, where in missing.items())
    first = min(min(where) for where in missing.values())
    return [Problem(first, "numbers asserted", f"{len(missing)} numbers in the prose appear on no "
                                               f"assert line: {listing}")]


_BARE_REF = re.compile(r"(§\s*\d+(?:\.\d+)*|\b[Ss]ections?\s+\d+(?:\.\d+)*|\b[Cc]hapters?\s+(\d+))")


_CITE = re.compile(r"\{cite(?::\w+)?\}`[^`]*`")
_CITE_MARK = "\u2020CITE\u2020"
_SOURCE_AFTER = re.compile(rf"^\s*(?:of\s+)?(?:the\s+paper\b|{_CITE_MARK})")
_SOURCE_BEFORE = re.compile(rf"{_CITE_MARK}|\bpaper\b")


def check_cross_references(cells, toc_numbers):
    """No bare "section N", "§N.k" or "chapter N" (for a chapter in the toc) that is not a link.

    A section of a cited source is fine when the same sentence names the source before
    it ("The paper (its section 3.2.3)", "{cite:t}`key`, section 3.2.2") or right after
    it ("section 3.2.1 of the paper", "§3.2.1 {cite:p}`key`").

    Args:
        cells: the notebook's cells.
        toc_numbers: the chapter numbers listed in ``_toc.yml`` (others may be named in plain text).
    """
    problems = []
    for cell, _, body in prose_by_cell(cells):
        text = plain_text(_CITE.sub(f" {_CITE_MARK} ", body))
        for match in _BARE_REF.finditer(text):
            chapter = match.group(2)
            if chapter is not None and int(chapter) not in toc_numbers:
                continue  # a chapter not in the book yet: plain text, no link
            sentence = re.split(r"[.?!]\s", text[:match.start()])[-1]
            if chapter is None and (_SOURCE_AFTER.match(text[match.end():])
                                    or _SOURCE_BEFORE.search(sentence)):
                continue  # a section of the cited paper, named as such
            problems.append(Problem(cell, "cross-references", f"bare {match.group(1)!r} is not a link "
                                                              "(use [§N.k](#sec-N-k), a {ref} or a link)"))
    return problems


# The HTML a chapter may write on purpose; anything else in angle brackets is a token
# such as <sos> that MyST would pass through as a raw (invisible) HTML tag.
_HTML_TAGS = {"a", "b", "br", "code", "details", "div", "em", "i", "img", "kbd", "p", "small", "span", "strong",
              "sub", "summary", "sup", "table", "td", "th", "tr", "u"}
_ANGLE = re.compile(r"</?([A-Za-z][\w-]*)[^<>]*>")


def check_raw_html(cells):
    """No ``<token>`` in prose outside code and maths unless it is real HTML: MyST
    hands ``<sos>`` to the browser as a tag, and the reader sees nothing. Write it
    in backticks (`` `<sos>` ``)."""
    problems = []
    for line in prose_lines(cells):
        text = _ROLE.sub(" ", line.text)
        text = _INLINE_CODE.sub(" ", text)
        text = _DISPLAY_MATH.sub(" ", text)
        text = _INLINE_MATH.sub(" ", text)
        for match in _ANGLE.finditer(text):
            if match.group(1).lower() not in _HTML_TAGS:
                problems.append(Problem(line.cell, "raw html", f"{match.group(0)!r} would vanish from the page "
                                        "(MyST passes it on as an HTML tag): write it in backticks"))
    return problems


# MathJax's text mode does not know \_: \text{warmup\_steps} shows its backslash.
_TEXT_UNDERSCORE = re.compile(r"\\text(?:tt|rm|bf|it|sf)?\{[^{}]*\\_[^{}]*\}")


def check_maths_text(cells):
    r"""No ``\_`` inside ``\text{…}`` / ``\texttt{…}`` in maths: MathJax prints the
    backslash there. ``\mathrm{warmup\_steps}`` or ``\mathtt{…}`` (maths mode) is right."""
    problems = []
    for index, cell in enumerate(cells):
        if cell.get("cell_type") != "markdown":
            continue
        for match in _TEXT_UNDERSCORE.finditer(source(cell)):
            problems.append(Problem(index, "maths text", f"{match.group(0)!r} shows a backslash in MathJax: "
                                    "use \\mathrm{…} or \\mathtt{…}"))
    return problems


RULES = ("title", "sections", "think about it", "answer before exercise", "prompts", "word count",
         "figure and explorer", "numbers asserted", "cross-references", "raw html", "maths text")


def check_rule(rule, cells, notebook_path, toc_numbers):
    """Run one rule (a name from :data:`RULES`) on a notebook's cells."""
    number = chapter_number(notebook_path)
    runners = {
        "title": lambda: check_title(cells, number),
        "sections": lambda: check_sections(cells, number),
        "think about it": lambda: check_think_about_it(cells),
        "answer before exercise": lambda: check_no_answer_before_exercise(cells),
        "prompts": lambda: check_prompts(cells),
        "word count": lambda: check_word_count(cells),
        "figure and explorer": lambda: check_figures_and_explorer(cells, Path(notebook_path).parent),
        "numbers asserted": lambda: check_numbers_asserted(cells),
        "cross-references": lambda: check_cross_references(cells, toc_numbers),
        "raw html": lambda: check_raw_html(cells),
        "maths text": lambda: check_maths_text(cells),
    }
    if rule not in runners:
        raise ValueError(f"unknown rule {rule!r}; expected one of {RULES}")
    return runners[rule]()
