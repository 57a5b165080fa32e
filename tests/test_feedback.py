"""The feedback page a student gets back reads as well as the notebook.

Its math is MathML made at feedback time (latex2mathml), not LaTeX waiting for MathJax;
it loads nothing from another host; its summary and its test cells are named by the
tests' "Check that ..." docstrings instead of nbgrader's "Test cell". The fast tests check
the conversion itself; the slow ones grade one small chapter through the course's own
command and open the page in headless Chromium with every request off the file blocked.
"""

import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import markupsafe
import nbformat
import pytest
from browser import chromium as find_chromium
from browser import launch
from bwrap import grade_options
from nbconvert.filters.markdown_mistune import markdown2html_mistune

import autograder.feedback as feedback_module
from autograder.chapters import chapters_in, release_path, solution_path
from autograder.feedback import (
    MarkdownMath,
    TestNames,
    by_hand_html,
    latex_to_mathml,
    markdown_math_to_mathml,
    name_of_test,
    notice_html,
    with_notice,
)
from autograder.submissions import mutate, solved_notebook, write_submission

CHAPTER = "04_dot_product_attention"
FAILING_TEST = "test_attention_unmasked"  # the one the mutant below fails
SCREENSHOT = Path(__file__).resolve().parents[1] / "test-artifacts" / "screenshots"


# --- the conversion, fast -----------------------------------------------------------------


def _html(markdown: str) -> str:
    """What the feedback page shows for a markdown cell: MarkdownMath, then nbconvert's
    markdown renderer, as the template applies it."""
    return markdown2html_mistune(markdown_math_to_mathml(markdown))


def test_the_notice_goes_on_top_once_and_goes_away_when_nothing_was_lowered():
    page = '<html><body>\n  <a id="top"></a>\n  <div class="container">cells</div></body></html>'
    lowered = [("test_scale", "Check that <scores> are scaled.", 0.0, 2.0, "failed outside: x")]
    notice = notice_html(lowered, (3.0, 10.0))
    once = with_notice(page, notice)
    assert once.index('<a id="top"></a>') < once.index("course-notice") < once.index("cells")
    assert "Your score: 3 / 10" in once and "0 / 2 points" in once
    assert 'href="#test_scale"' in once and "Check that &lt;scores&gt; are scaled." in once
    assert with_notice(once, notice) == once  # a run again changes nothing
    assert with_notice(once, None) == page  # regraded, nothing lowered: the notice goes


def test_the_cells_scored_by_hand_are_said_beside_the_points_lowered():
    page = '<html><body>\n  <a id="top"></a>\n  <div class="container">cells</div></body></html>'
    lowered = notice_html([("test_b", "Check b.", 0.0, 2.0, "flagged for review: x")], (4.0, 7.0))
    scored = by_hand_html([("test_a", "Check that <a> works.", 1.0, 3.0)])
    both = with_notice(page, lowered + scored)
    assert both.count('class="alert') == 2 and both.count("/course-notice") == 2
    assert "Reviewed by your instructor" in both and "1 / 3 points, given by your" in both
    assert 'href="#test_a"' in both and "Check that &lt;a&gt; works." in both
    assert with_notice(both, scored) == with_notice(page, scored)  # the flag reviewed since
    assert with_notice(both, None) == page


def test_inline_and_display_math_become_mathml():
    page = _html(
        "The scores $q_i^\\top k_j$ are\n\n$$\na_{ij} = \\frac{e_{ij}}{\\sum_k e_{ik}}\n$$\n"
    )
    assert page.count("<math") == 2
    assert '<math display="inline">' in page and '<math display="block">' in page
    assert "$" not in page and "\\frac" not in page
    assert "<mfrac>" in page and "<msub>" in page


def test_markdown_does_not_read_latex_as_emphasis():
    # two underscores and two asterisks in one paragraph would be <em> and <strong> if
    # markdown saw the LaTeX
    page = _html("Here $a_i * b_j$ and $c_i * d_j$, and also $x_{**}$ and $y_{**}$ and **bold**.")
    assert page.count("<math") == 4
    maths = re.findall(r"<math.*?</math>", page, re.DOTALL)
    assert not any("<em>" in m or "<strong>" in m for m in maths), maths
    assert "<strong>bold</strong>" in page  # markdown outside the math still works
    assert page.count("<mo>*</mo>") == 6  # every asterisk of the LaTeX, as itself


def test_code_and_escaped_dollars_are_not_math():
    source = "Cost \\$5 in `x = $y$`, and\n\n```python\nprint('$a$')\n```\n\nthen $z$."
    converted = markdown_math_to_mathml(source)
    assert "`x = $y$`" in converted and "print('$a$')" in converted and "\\$5" in converted
    assert converted.count("<math") == 1


def test_environments_and_matrices():
    page = _html(
        "\\begin{align}\nx &= 1 \\\\\ny &= 2\n\\end{align}\n\n$\\begin{pmatrix} a & b \\end{pmatrix}$"
    )
    assert page.count("<math") == 2 and "<mtable" in page and "\\begin" not in page


@pytest.mark.parametrize("latex", ["\\left( x", "\\notacommand{x}", ""])
def test_a_formula_that_cannot_be_converted_shows_its_source(latex):
    shown = latex_to_mathml(latex, display=True)
    assert shown.startswith('<code class="math-source">') and "<math" not in shown
    page = _html(f"before $${latex}$$ after")
    assert "before" in page and "after" in page and "<em>" not in page


def test_every_formula_of_the_course_converts(root):
    """No markdown cell of any chapter falls back to showing LaTeX source."""
    fallbacks, formulas = [], 0
    for chapter in chapters_in(root):
        nb = nbformat.read(solution_path(root, chapter), as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                converted = markdown_math_to_mathml(cell.source)
                formulas += converted.count("<math")
                fallbacks += re.findall(r'<code class="math-source">.*?</code>', converted)
    assert formulas > 100
    assert not fallbacks, fallbacks


def test_test_names_come_from_the_docstring():
    assert name_of_test('"""Check that x is one."""\nassert x == 1') == "Check that x is one."
    long = '"""Check that a long summary goes on\n    over two lines.\n\n    Details.\n    """\n'
    assert name_of_test(long) == "Check that a long summary goes on over two lines."
    assert name_of_test("# a comment\n%%time\n'''Check the magic.'''") == "Check the magic."
    assert name_of_test("assert x == 1") is None

    nb = nbformat.v4.new_notebook()
    for source, grade_id in [('"""Check y."""\nassert y', "test_y"), ("assert z", "test_z")]:
        cell = nbformat.v4.new_code_cell(source)
        cell.metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": grade_id}
        nb.cells.append(cell)
    nb, _ = TestNames().preprocess(nb, {})
    nb, _ = MarkdownMath().preprocess(nb, {})
    assert [c.metadata["autograder"]["test_name"] for c in nb.cells] == ["Check y.", "test_z"]


# --- the page, through `python -m autograder grade` ---------------------------------------


@pytest.fixture(scope="module")
def feedback(root, tmp_path_factory) -> dict[str, Path]:
    """Feedback pages of one chapter, graded by the course's command: the solution and a
    submission that forgets the 1/sqrt(d_k) scale."""
    submissions = tmp_path_factory.mktemp("feedback-submitted")
    out = tmp_path_factory.mktemp("feedback-graded")
    write_submission(solved_notebook(root, CHAPTER), submissions, "solution", CHAPTER)
    nb = mutate(
        solved_notebook(root, CHAPTER),
        "scaled_dot_product_attention",
        "Q @ K.transpose(-2, -1) / math.sqrt(d_k)",
        "Q @ K.transpose(-2, -1)",
    )
    write_submission(nb, submissions, "no-scaling", CHAPTER)
    result = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", str(submissions), "--out", str(out)]
        + ["--workers", "1", "--chapter", CHAPTER, *grade_options()],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    pages = {s: out / "feedback" / s / f"{CHAPTER}.html" for s in ("solution", "no-scaling")}
    for student, page in pages.items():
        assert page.is_file(), f"no feedback page for {student}: {result.stdout[-2000:]}"
    return pages


def _display_equations(root) -> list[str]:
    nb = nbformat.read(release_path(root, CHAPTER), as_version=4)
    return [
        m.group()
        for cell in nb.cells
        if cell.cell_type == "markdown"
        for m in re.finditer(r"\$\$.+?\$\$", cell.source, re.DOTALL)
    ]


@pytest.mark.slow
def test_math_is_mathml_not_latex(feedback, root):
    equations = _display_equations(root)
    assert equations, f"{CHAPTER} has no display equation any more: pick another chapter"
    for page in feedback.values():
        text = page.read_text(encoding="utf-8")
        assert text.count('<math display="block"') >= len(equations)
        assert text.count('<math display="inline"') > 0
        assert "$$" not in text
        for equation in equations:
            assert equation not in text
        assert "MathJax" not in text
        assert 'class="math-source"' not in text  # no formula fell back to its source


@pytest.mark.slow
def test_page_refers_to_nothing_on_another_host(feedback):
    for page in feedback.values():
        text = page.read_text(encoding="utf-8")
        for url in re.findall(r"""\b(?:src|href)\s*=\s*["']([^"']*)["']""", text, re.I):
            parts = urlsplit(url)
            assert parts.scheme in ("", "data") and not parts.netloc, f"{page.name}: {url[:80]}"
        assert not re.search(r"<(?:script|link|iframe)\b", text, re.I)
        assert not re.search(r"url\(\s*['\"]?(?:https?:)?//", text, re.I)
        assert "Content-Security-Policy" in text


@pytest.mark.slow
def test_tests_are_named_by_their_docstrings(feedback, root):
    expected = {}
    for cell in nbformat.read(release_path(root, CHAPTER), as_version=4).cells:
        nbgrader = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and nbgrader.get("grade") and not nbgrader.get("solution"):
            expected[nbgrader["grade_id"]] = name_of_test(cell.source)
    assert expected and all(name.startswith("Check") for name in expected.values()), expected
    for page in feedback.values():
        text = page.read_text(encoding="utf-8")
        assert "Test cell" not in text and "Grade cell" not in text
        summary = text[text.index('<div id="toc">') : text.index('<div class="panel-body">')]
        for grade_id, name in expected.items():
            escaped = str(markupsafe.escape(name))  # as the page's template escapes it
            assert f'<a href="#{grade_id}">{escaped}</a>' in summary, (grade_id, summary)
            # the cell's heading, where the summary's link lands
            assert re.search(
                rf'<h3 class="test-name" id="{grade_id}">{re.escape(escaped)}</h3>', text
            )


@pytest.mark.slow
def test_failing_test_message_is_still_shown(feedback):
    text = feedback["no-scaling"].read_text(encoding="utf-8")
    start = text.index(f'id="{FAILING_TEST}"')
    cell = text[start : text.index('class="test-name"', start + 1)]
    assert "Score: 0.0" in cell
    error = re.search(
        r'class="output_subarea output_text output_error">\s*<pre>(.*?)</pre>', cell, re.S
    )
    message = error.group(1).strip() if error else ""
    assert message.startswith("AssertionError: ") and "sqrt(d_k)" in message, message
    assert "Traceback" not in cell  # the hidden tests' code stays hidden
    solution = feedback["solution"].read_text(encoding="utf-8")
    assert "output_text output_error" not in solution


# Each rendered math element's width, and for display equations the centre of the formula
# (its children's boxes) against the centre of the text column it sits in.
GEOMETRY_JS = """() => {
    const maths = Array.from(document.querySelectorAll("math"));
    const display = maths.filter((m) => m.getAttribute("display") === "block").map((m) => {
        const boxes = Array.from(m.children).map((c) => c.getBoundingClientRect());
        const left = Math.min(...boxes.map((b) => b.left));
        const right = Math.max(...boxes.map((b) => b.right));
        const column = m.closest(".text_cell_render");
        const style = getComputedStyle(column);
        const box = column.getBoundingClientRect();
        const start = box.left + parseFloat(style.paddingLeft) + parseFloat(style.borderLeftWidth);
        const end = box.right - parseFloat(style.paddingRight) - parseFloat(style.borderRightWidth);
        return {formula: (left + right) / 2, width: right - left, column: (start + end) / 2,
                columnWidth: end - start};
    });
    return {widths: maths.map((m) => m.getBoundingClientRect().width), display};
}"""


@pytest.mark.slow
def test_page_renders_offline_in_a_browser(feedback):
    chromium = find_chromium()
    from playwright.sync_api import sync_playwright

    page_file = feedback["no-scaling"]
    external, errors = [], []

    def route(route):
        url = route.request.url
        if urlsplit(url).scheme in {"file", "data"} and (
            url.startswith("data:") or Path(urlsplit(url).path) == page_file
        ):
            route.continue_()
        else:
            external.append(url)
            route.abort()

    SCREENSHOT.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = launch(p, chromium)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            context.route("**/*", route)
            page = context.new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(page_file.as_uri(), wait_until="load")
            geometry = page.evaluate(GEOMETRY_JS)
            page.screenshot(path=str(SCREENSHOT / "feedback-04.png"), full_page=True)
        finally:
            browser.close()
    assert not external, f"the page asked for something besides its own file: {external}"
    assert not errors, errors
    assert any(w > 0 for w in geometry["widths"]), geometry["widths"]
    assert geometry["display"], "no display equation on the page"
    for eq in geometry["display"]:
        assert 0 < eq["width"] < eq["columnWidth"], eq
        assert abs(eq["formula"] - eq["column"]) < 4, f"display equation not centred: {eq}"


def test_a_code_cells_highlighting_is_made_once_whatever_its_metadata():
    """The templates pass each cell's metadata to the highlighter: the HTML is remembered by
    source (nbgrader's ids differ from cell to cell), and a cell magic's language is still
    honoured."""
    calls = []

    def highlight(source, language=None, metadata=None):
        calls.append((source, metadata))
        return f"<{(metadata or {}).get('magics_language', language)}>{source}"

    cached = feedback_module._remembered(highlight, "ipython3")
    source = "x = 1  # a cell of the test of 2026-11-26"
    first = cached(source, None, {"nbgrader": {"grade_id": "a"}})
    again = cached(source, None, {"nbgrader": {"grade_id": "b"}, "tags": ["t"]})
    assert first == again == f"<None>{source}" and len(calls) == 1
    bash = cached(source, None, {"magics_language": "bash"})
    assert bash == f"<bash>{source}" and len(calls) == 2


def test_a_markdown_cell_is_rendered_once_for_a_whole_class(monkeypatch):
    """The HTML of a markdown cell is remembered by its source, not by the student's folder
    (read only to embed images, which these pages do not), so that a class's pages share
    the cells they have in common; a cell with attachments is rendered each time."""
    from nbconvert.exporters import HTMLExporter

    rendered = []

    def render(self, context, source):
        rendered.append(source)
        return f"<p>{source}</p>"

    monkeypatch.setattr(HTMLExporter, "markdown2html", render)
    exporter = feedback_module.FeedbackExporter()
    source = "A cell every student has, 2026-11-29."
    pages = [
        exporter.markdown2html(
            {"cell": {}, "resources": {"metadata": {"path": f"/out/{student}"}}}, source
        )
        for student in ("ada", "bob")
    ]
    assert pages[0] == pages[1] == f"<p>{source}</p>" and rendered == [source]
    attached = {"cell": {"attachments": {"a.png": {}}}, "resources": {}}
    exporter.markdown2html(attached, source)
    assert rendered == [source, source]
