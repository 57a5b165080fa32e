"""A hostile student against the feedback page (issue 59).

latex2mathml copies the text of ``\\text{...}`` as it is, so a formula could write a link
over the whole page or a ``meta`` refresh that sends whoever opens it elsewhere; and the
patterns that found the formulas took time in the square of a cell's length. Each attack
is made again here: on the conversion itself, on the page's allowlist for a markdown cell's
HTML, on the time a 2 MB cell costs, and on a page opened in Debian's chromium.
"""

import re
import time
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import nbformat
import nbgrader
import pytest
from browser import chromium as find_chromium
from browser import launch
from nbconvert.filters.markdown_mistune import markdown2html_mistune
from traitlets.config import Config

import autograder.feedback as feedback
from autograder.chapters import chapters_in, solution_path
from autograder.feedback import (
    MATHML_ATTRIBUTES,
    MATHML_ELEMENTS,
    MAX_FORMULA,
    MAX_MARKDOWN,
    FeedbackExporter,
    MarkdownMath,
    formulas,
    latex_to_mathml,
    markdown_math_to_mathml,
    page_safe,
)
from autograder.nbgrader_settings import FEEDBACK_TEMPLATE, FEEDBACK_TEMPLATES

EVIL = "http://evil.example/"
# Where nbgrader's GenerateFeedback finds the bootstrap the page inlines.
_BOOTSTRAP = (
    Path(nbgrader.__file__).parent
    / "server_extensions/formgrader/static/node_modules/bootstrap/dist/css"
)
COVER = "position:fixed;top:0;left:0;width:100%;height:100%;z-index:9999"
# Elements no student text may become on the page.
FORBIDDEN = {"meta", "base", "form", "style", "link", "iframe", "a", "script", "object"}

PAYLOADS = [
    f'\\text{{<a style="{COVER}" href="{EVIL}">you passed</a>}}',
    f'\\text{{<meta http-equiv="refresh" content="0;url={EVIL}">}}',
    "\\text{\"quoted\" & 'single' &amp; &lt;b&gt; <b>bold</b>}",
    f'\\mathrm{{<a href="{EVIL}">x</a>}}',
    f'\\operatorname{{<a href="{EVIL}">x</a>}}',
    f'\\mbox{{<meta http-equiv="refresh" content="0;url={EVIL}">}}',
    f"\\textbf{{<base href='{EVIL}'>}} \\texttt{{<form action='{EVIL}'>}}",
    f"\\href{{{EVIL}}}{{click}}",
    f"\\style{{{COVER}}}{{x}}",
    "\\class{navbar-fixed-top}{x}",
    '\\unicode{<iframe src="http://evil.example/">}',
    f'\\begin{{matrix}}\\text{{<a href="{EVIL}">}} & \\mathrm{{<style>}}\\end{{matrix}}',
    f'\\begin{{<a href="{EVIL}">}}x\\end{{<a href="{EVIL}">}}',
    f'\\text{{<link rel="stylesheet" href="{EVIL}">}} \\mbox{{<style>*{{display:none}}</style>}}',
]


class _Elements(HTMLParser):
    """Every element of an HTML fragment, with its attributes, and its text."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    handle_startendtag = handle_starttag

    def handle_data(self, data):
        self.text.append(data)


def _parsed(fragment: str) -> _Elements:
    parser = _Elements()
    parser.feed(fragment)
    parser.close()
    return parser


def _assert_no_student_markup(fragment: str) -> None:
    """Only MathML of the allowlist, a code element for a formula's source, a note, and
    the paragraphs markdown writes: no link, style, refresh or positioning."""
    for tag, attributes in _parsed(fragment).elements:
        assert tag not in FORBIDDEN, (tag, fragment[:300])
        assert tag in MATHML_ELEMENTS | {"code", "em", "p"}, (tag, fragment[:300])
        for name, value in attributes.items():
            if tag == "code":
                assert (name, value) == ("class", "math-source"), fragment[:300]
            else:
                assert name in MATHML_ATTRIBUTES, (tag, name, fragment[:300])
                assert MATHML_ATTRIBUTES[name].match(value or ""), (name, value)


# --- the formulas ---------------------------------------------------------------------------


@pytest.mark.parametrize("latex", PAYLOADS)
@pytest.mark.parametrize("delimiters", ["${}$", "$${}$$", "\\\\({}\\\\)", "\\\\[{}\\\\]"])
def test_a_formula_never_writes_the_students_markup(latex, delimiters):
    source = "Before " + delimiters.format(latex) + " after."
    assert formulas(source) == [latex]
    converted = markdown_math_to_mathml(source)
    _assert_no_student_markup(converted)
    _assert_no_student_markup(markdown2html_mistune(converted))  # as the page renders it


def test_the_students_text_is_shown_as_text():
    """The payload is not lost: the page shows what the student wrote, as characters."""
    for latex in PAYLOADS[:3]:
        parsed = _parsed(latex_to_mathml(latex))
        assert "<math" not in latex_to_mathml(latex) or parsed.elements[0][0] == "math"
        shown = "".join(parsed.text).replace("\xa0", " ")
        assert re.sub(r"\\\w+\{|\}$", "", latex)[:12] in shown, shown
    quotes = latex_to_mathml(PAYLOADS[2])
    assert quotes.startswith("<math") and "&lt;b&gt;bold&lt;/b&gt;" in quotes
    assert "&amp;" in quotes and "<b>" not in quotes


def test_anything_outside_the_allowlist_shows_the_source(monkeypatch):
    """Fail closed: whatever latex2mathml might write that the allowlist does not know (an
    element, an attribute, a value), the formula is shown as its LaTeX, escaped."""
    import latex2mathml.converter

    def writes(tag, **attributes):
        def convert(latex, display="inline"):
            math = ET.Element("math", {"display": display})
            ET.SubElement(math, tag, attributes).text = "x"
            return math

        return convert

    cases = [
        writes("a", href=EVIL),
        writes("mi", style=COVER),
        writes("mi", onclick="alert(1)"),
        writes("mi", mathvariant='normal" onclick="alert(1)'),
        writes("mspace", width="100000em"),
        writes("annotation-xml", encoding="text/html"),
    ]
    for number, convert in enumerate(cases):
        monkeypatch.setattr(latex2mathml.converter, "convert_to_element", convert)
        shown = latex_to_mathml(f"x_{number} <b>")  # a new formula each: none remembered
        assert shown.startswith('<code class="math-source">'), shown
        assert f"x&#95;{number} &lt;b&gt;" in shown


def test_the_page_allowlist_keeps_the_course_and_drops_the_rest(root):
    """Every markdown cell of the course renders the same through ``page_safe``; markup
    a student's cell might carry past inert.py does not."""
    compared = 0
    for chapter in chapters_in(root):
        nb = nbformat.read(solution_path(root, chapter), as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                html = markdown2html_mistune(markdown_math_to_mathml(cell.source))
                before, after = _parsed(html), _parsed(page_safe(html))
                assert after.elements == before.elements, cell.source[:200]
                assert "".join(after.text).split() == "".join(before.text).split()
                compared += 1
    assert compared > 50
    hostile = (
        f'<div class="modal-backdrop in">x</div><a class="navbar-fixed-top" href="{EVIL}">y</a>'
        f'<meta http-equiv="refresh" content="0;url={EVIL}"><base href="{EVIL}">'
        f'<form action="{EVIL}"><input></form><style>*{{}}</style><link href="{EVIL}">'
        f'<iframe src="{EVIL}"></iframe><p style="{COVER}" onclick="x()">z</p>'
        f'<a href="javascript:alert(1)">j</a><span class="affix">s</span>'
        f'<math><mi style="{COVER}" href="{EVIL}">m</mi></math>'
    )
    for tag, attributes in _parsed(page_safe(hostile)).elements:
        assert tag not in FORBIDDEN - {"a"}, tag
        assert "style" not in attributes and "onclick" not in attributes, (tag, attributes)
        assert "class" not in attributes and "href" not in attributes, (tag, attributes)
    assert 'href="#x"' in page_safe('<a href="#x">in the page</a>')


# --- time -----------------------------------------------------------------------------------

PATHOLOGICAL = {
    "begin": "\\begin{",
    "begin-name": "\\begin{x}",
    "dollar": "$",
    "dollars": "$$ ",
    "escaped-closer": "$a\\$",
    "display-latex": "\\\\[ ",
    "inline-latex": "\\\\( ",
    "backticks": "``a`",
    "fences": "```\n",
    "tildes": "~",
    "brackets": "[a",
}


def _cell(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def _seconds(step, *args) -> float:
    start = time.perf_counter()
    step(*args)
    return time.perf_counter() - start


@pytest.mark.parametrize("unit", PATHOLOGICAL.values(), ids=PATHOLOGICAL.keys())
def test_a_2_mb_cell_costs_seconds_not_an_hour(unit):
    """Finding the formulas (which inert.py also does, on the whole cell) and making the
    cell's MathML and HTML take time in proportion to the cell: a bound far over what it
    takes (about 2 s here), far under the hour of the old patterns."""
    cell = _cell(unit, 2_000_000)
    assert _seconds(formulas, cell) < 20
    start = time.perf_counter()
    converted = markdown_math_to_mathml(cell)
    markdown2html_mistune(converted)
    assert time.perf_counter() - start < 20
    assert "the page shows its first 50,000" in converted  # the cut is said


@pytest.mark.parametrize("unit", ["\\begin{x}", "$a\\$", "\\\\[ "], ids=["begin", "$", "\\["])
def test_the_time_grows_with_the_cell_not_its_square(unit):
    """From 18 KB to 144 KB (8 times), the old patterns took 54 times as long; a linear
    pass takes about 8 times as long (16 allows for a noisy machine)."""
    small, large = _cell(unit, 18_000), _cell(unit, 144_000)
    ratio = min(_seconds(formulas, large) for _ in range(3)) / max(
        min(_seconds(formulas, small) for _ in range(3)), 1e-4
    )
    assert ratio < 16, ratio


def test_an_oversized_cell_and_formula_are_shown_in_part_with_a_note():
    long_formula = "x+" * MAX_FORMULA
    shown = latex_to_mathml(long_formula, display=True)
    assert shown.startswith('<code class="math-source">') and "<math" not in shown
    assert f"a formula of {len(long_formula):,} characters" in shown
    cell = "```python\n" + "x = 1\n" * MAX_MARKDOWN
    converted = markdown_math_to_mathml(cell)
    assert len(converted) < MAX_MARKDOWN + 200
    html = markdown2html_mistune(converted)
    # the cut closed the code block it fell in: the note is a paragraph of its own
    assert re.search(r"<em>This cell holds [\d,]+ characters: the page shows", html)


# --- the page, in a browser -----------------------------------------------------------------

HOSTILE_MARKDOWN = [
    f'Look: $\\text{{<a style="{COVER}" href="{EVIL}">You passed: click here</a>}}$',
    f'$$\\text{{<meta http-equiv="refresh" content="0;url={EVIL}">}}$$',
    f'\\begin{{aligned}} x &= \\mbox{{<a style="{COVER}" href="{EVIL}">x</a>}}\\end{{aligned}}',
    "$\\text{\"quoted\" & 'single' &amp; <b>}$ and $\\class{navbar-fixed-top}{x}$",
    f'<div class="modal-backdrop in"></div><a class="navbar-fixed-top" href="{EVIL}">z</a>',
    "\\begin{" * 20_000 + " and $$ unclosed \\\\[ and \\\\( and ` and $",
]


def _hostile_page(tmp_path):
    """A feedback page made by the course's exporter and template, with MarkdownMath, from
    a notebook of hostile markdown cells (not made inert first: the page's own defences)."""
    config = Config()
    config.HTMLExporter.template_name = FEEDBACK_TEMPLATE
    config.HTMLExporter.extra_template_basedirs = [str(FEEDBACK_TEMPLATES)]
    config.HTMLExporter.extra_template_paths = [str(_BOOTSTRAP)]
    exporter = FeedbackExporter(config=config)
    exporter.register_preprocessor(MarkdownMath(), enabled=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(s) for s in HOSTILE_MARKDOWN]
    nb.cells.append(nbformat.v4.new_markdown_cell("The course's $a_{ij} = q_i^\\top k_j$."))
    nbgrader = {"notebook": "hostile", "score": 0.0, "max_score": 1.0, "late_penalty": 0}
    page, _ = exporter.from_notebook_node(nb, resources={"nbgrader": nbgrader})
    path = tmp_path / "hostile.html"
    path.write_text(page, encoding="utf-8")
    return path


@pytest.mark.parametrize("unit", ["\\\\[ ", "[a", "$a\\$"], ids=["\\[", "[", "$"])
def test_a_page_with_a_2_mb_cell_is_made_in_seconds(tmp_path, monkeypatch, unit):
    """The whole page (MarkdownMath, markdown, the allowlist, the template's filters): about
    half a second here; the old patterns and nbconvert's link filter took minutes."""
    monkeypatch.setitem(globals(), "HOSTILE_MARKDOWN", [_cell(unit, 2_000_000)])
    start = time.perf_counter()
    text = _hostile_page(tmp_path).read_text(encoding="utf-8")
    assert time.perf_counter() - start < 20
    assert "the page shows its first 50,000" in text


def test_the_hostile_page_holds_no_student_markup(tmp_path):
    text = _hostile_page(tmp_path).read_text(encoding="utf-8")
    elements = _parsed(text[text.index("<body") :]).elements
    for tag, attributes in elements:
        assert tag not in FORBIDDEN - {"a"}, (tag, attributes)
        assert (attributes.get("href") or "#").startswith("#"), attributes
        assert "position" not in (attributes.get("style") or ""), attributes
        assert not re.search(r"modal|navbar|affix", attributes.get("class") or ""), attributes
    assert ("math", {"display": "inline"}) in elements  # the course's math still is math
    assert "You passed: click here" in " ".join(_parsed(text).text).replace("\xa0", " ")


# Every element of the notebook's cells that is positioned, a link to elsewhere, or a
# refresh; the page's URL; what covers the middle of the window.
INSPECT_JS = """() => {
    const cells = document.querySelector("#notebook-container");
    const positioned = Array.from(cells.querySelectorAll("*")).filter((e) =>
        ["fixed", "absolute", "sticky"].includes(getComputedStyle(e).position));
    const links = Array.from(document.querySelectorAll("a[href]"))
        .map((a) => a.getAttribute("href")).filter((h) => !h.startsWith("#"));
    const middle = document.elementFromPoint(innerWidth / 2, innerHeight / 2);
    return {
        positioned: positioned.map((e) => e.outerHTML.slice(0, 120)),
        links,
        refresh: document.querySelectorAll("meta[http-equiv=refresh], base, form").length,
        url: location.href,
        middle: middle ? middle.closest("a") && middle.closest("a").getAttribute("href") : null,
        text: document.body.innerText,
    };
}"""


@pytest.mark.slow
def test_a_hostile_page_stays_put_in_a_browser(tmp_path):
    """Opened in chromium, the page navigates nowhere (a second later it is still itself),
    and no element of the student's is positioned or links away."""
    chromium = find_chromium()
    from playwright.sync_api import sync_playwright

    page_file = _hostile_page(tmp_path)
    requested, navigated = [], []

    def route(route):
        url = route.request.url
        if url.startswith("data:") or urlsplit(url).path == str(page_file):
            route.continue_()
        else:
            requested.append(url)
            route.abort()

    with sync_playwright() as p:
        browser = launch(p, chromium)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            context.route("**/*", route)
            page = context.new_page()
            page.goto(page_file.as_uri(), wait_until="load")
            page.on(
                "framenavigated", lambda f: navigated.append(f.url) if f == page.main_frame else 0
            )
            page.wait_for_timeout(1500)
            seen = page.evaluate(INSPECT_JS)
        finally:
            browser.close()
    assert not navigated and seen["url"] == page_file.as_uri(), (navigated, seen["url"])
    assert not requested, requested
    assert not seen["positioned"], seen["positioned"]
    assert not seen["links"] and not seen["refresh"] and seen["middle"] is None, seen
    shown = " ".join(seen["text"].replace("\xa0", " ").split())
    assert "You passed: click here" in shown  # shown, as the student's text


def test_the_scan_agrees_with_the_old_patterns_where_they_were_right():
    """The one-pass scan finds what the old pattern found, on small cells of every kind
    of delimiter (the old pattern, here as the reference, is fine at this size)."""
    import random

    old = re.compile(
        r"(?P<fence>^[ ]{0,3}(?P<mark>`{3,}|~{3,})[^\n]*\n.*?(?:^[ ]{0,3}(?P=mark)[`~]*[ \t]*$|\Z))"
        r"|(?P<escaped>\\\$)"
        r"|(?<!\\)\$\$(?P<display>.+?)(?<!\\)\$\$"
        r"|(?<!\\)\\\\\[(?P<display_latex>.+?)(?<!\\)\\\\\]"
        r"|(?P<environment>\\begin\{(?P<env>[a-zA-Z]*\*?)\}.*?\\end\{(?P=env)\})"
        r"|(?<![$\\])\$(?P<inline>[^$]+?)(?<![$\\])\$"
        r"|(?<!\\)\\\\\((?P<inline_latex>.+?)(?<!\\)\\\\\)",
        re.DOTALL | re.MULTILINE,
    )
    groups = ("display", "display_latex", "environment", "inline", "inline_latex")
    parts = ["$", "$$", "\\", "\\\\[", "\\\\]", "\\\\(", "\\\\)", "~~~", "\n", " "]
    parts += ["a", "\\begin{x}", "\\end{x}", "\\begin{y}", "\\end{y}"]
    rng = random.Random(59)
    for _ in range(20_000):
        cell = "".join(rng.choice(parts) for _ in range(rng.randint(1, 12)))
        expected = [m.group(g) for m in old.finditer(cell) for g in groups if m.group(g)]
        assert formulas(cell) == expected, cell


def test_code_spans_are_not_math():
    assert formulas("`$a$` and $b$ and ``x ` $c$ ``") == ["b"]
    assert formulas("a ``` b $c$") == ["c"]  # a run nothing closes is text
    assert list(feedback.pieces("`x`")) == [feedback.Piece("code", 0, 3)]
