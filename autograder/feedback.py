"""Feedback that teaches without giving the hidden tests away, and reads like the notebook.

nbgrader's feedback shows each test cell with its outputs. A failing hidden test would
show its own code in the traceback; ``ShortTracebacks`` keeps only the error's name and
message in test cells (the course's checks put what was seen, what was expected and the
likely cause in the message).

The page is a file a student opens on their own machine, perhaps offline, so it loads
nothing from another host (the template in ``autograder/templates/course_feedback``):
``MarkdownMath`` turns the LaTeX of markdown cells into MathML, which browsers render
themselves, in place of MathJax from a CDN; ``TestNames`` gives each graded test cell the
name its docstring states (``Check that ...``), which the page shows in its summary and
as the cell's heading instead of nbgrader's "Test cell".
"""

import ast
import functools
import html
import re
from pathlib import Path

import nbformat
from jinja2 import pass_context
from nbconvert.exporters import HTMLExporter, TemplateExporter
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter
from nbconvert.preprocessors import Preprocessor
from traitlets import Bool

from autograder import speedups
from autograder.cells import grade_id, is_graded, is_solution
from autograder.chapters import solution_path
from autograder.outfolder import GradeRow, HandGrade, Out

# Where the feedback template keeps what it shows for a test cell.
METADATA_KEY = "autograder"


class ShortTracebacks(Preprocessor):
    """In graded test cells, replace each traceback with ``ErrorName: message``."""

    enabled = Bool(True).tag(config=True)  # nbgrader registers preprocessors as they are

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and is_graded(cell):
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    output["traceback"] = [
                        f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"
                    ]
        return cell, resources


# --- test names ---------------------------------------------------------------------------


def name_of_test(source: str) -> str | None:
    """The summary of a test cell's docstring (its first paragraph, on one line), or None.

    Every graded test cell of the course starts with ``\"\"\"Check that ... .\"\"\"``; a
    summary too long for one line of code goes on over the next ones, up to a blank line.
    """
    try:
        docstring = ast.get_docstring(ast.parse(source))
    except (SyntaxError, ValueError):  # IPython magics, a null byte: read it by hand
        lines = r"\s*(?:[#%][^\n]*\n\s*)*"  # comments and magics before the string
        match = re.match(lines + r'[rRuU]?("""|\'\'\')(.*?)\1', source, re.DOTALL)
        docstring = match.group(2).strip() if match else None
    if not docstring:
        return None
    first_paragraph = re.split(r"\n\s*\n", docstring.strip())[0]
    summary = " ".join(line.strip() for line in first_paragraph.splitlines())
    return summary or None


class TestNames(Preprocessor):
    """Store each graded test cell's name (its docstring's summary, else its grade id) in
    ``cell.metadata.autograder.test_name`` for the feedback template."""

    __test__ = False  # not a pytest test class, whatever its name says
    enabled = Bool(True).tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and is_graded(cell) and not is_solution(cell):
            name = name_of_test(cell.source) or grade_id(cell) or "Test cell"
            cell.metadata.setdefault(METADATA_KEY, {})["test_name"] = name
        return cell, resources


# --- math ---------------------------------------------------------------------------------

# What Jupyter's markdown treats as math, in the order nbconvert's renderer tries it, after
# what must stay as it is: fenced code blocks and code spans (a `$` in code is not math),
# and an escaped dollar.
_MARKDOWN = re.compile(
    r"(?P<fence>^[ ]{0,3}(?P<mark>`{3,}|~{3,})[^\n]*\n.*?(?:^[ ]{0,3}(?P=mark)[`~]*[ \t]*$|\Z))"
    r"|(?P<code>(?P<ticks>`+)(?!`).*?(?<!`)(?P=ticks)(?!`))"
    r"|(?P<escaped>\\\$)"
    r"|(?<!\\)\$\$(?P<display>.+?)(?<!\\)\$\$"
    r"|(?<!\\)\\\\\[(?P<display_latex>.+?)(?<!\\)\\\\\]"
    r"|(?P<environment>\\begin\{(?P<env>[a-zA-Z]*\*?)\}.*?\\end\{(?P=env)\})"
    r"|(?<![$\\])\$(?P<inline>[^$]+?)(?<![$\\])\$"
    r"|(?<!\\)\\\\\((?P<inline_latex>.+?)(?<!\\)\\\\\)",
    re.DOTALL | re.MULTILINE,
)

# Environments that only say "this is a display equation", and the ones latex2mathml knows
# by their amsmath inner names.
_DISPLAY_WRAPPERS = re.compile(r"\\(begin|end)\{(equation|displaymath|math)\*?\}")
_RENAMED = {"align": "aligned", "align*": "aligned", "gather": "gathered", "gather*": "gathered"}
# The one operator name of LaTeX that latex2mathml 3.81 leaves as text.
_OPERATORS = re.compile(r"\\arg(?![a-zA-Z])")

# Characters that markdown (mistune, in nbconvert) would read as syntax in the text between
# the MathML tags: written as character references, they reach the page as themselves.
_MARKDOWN_SYNTAX = re.compile(r"[\\`*_\[\]!|~$]")
_TEXT = re.compile(r">([^<]+)<")


def _protect(text: str) -> str:
    """``text`` (already HTML-escaped) with markdown's syntax characters as references."""
    return _MARKDOWN_SYNTAX.sub(lambda m: f"&#{ord(m.group())};", text)


def _source(latex: str) -> str:
    """The LaTeX shown as itself, in code, where it cannot be rendered."""
    return f'<code class="math-source">{_protect(html.escape(latex.strip(), quote=False))}</code>'


def latex_to_mathml(latex: str, display: bool = False) -> str:
    """MathML for ``latex``, on one line and safe to put into markdown as raw HTML; the
    LaTeX source in a ``<code>`` element where latex2mathml cannot convert it."""
    from latex2mathml.converter import convert

    tex = latex.strip()
    if not tex:
        return _source(latex)
    for name, inner in _RENAMED.items():
        tex = tex.replace(f"\\begin{{{name}}}", f"\\begin{{{inner}}}")
        tex = tex.replace(f"\\end{{{name}}}", f"\\end{{{inner}}}")
    tex = _DISPLAY_WRAPPERS.sub("", tex)
    tex = _OPERATORS.sub(r"\\operatorname{arg}", tex)
    if writes_attributes(tex):  # a student's link or style has no place in the page
        return _source(latex)
    try:
        mathml = convert(tex, display="block" if display else "inline")
    except Exception:  # latex2mathml raises many kinds; none may stop the feedback
        return _source(latex)
    texts = _TEXT.findall(mathml)
    if any("\\" in t for t in texts):  # a command latex2mathml does not know, kept as text
        return _source(latex)
    mathml = mathml.replace(' xmlns="http://www.w3.org/1998/Math/MathML"', "", 1)
    mathml = mathml.replace("\n", " ")
    return _TEXT.sub(lambda m: f">{_protect(m.group(1))}<", mathml)


def writes_attributes(latex: str) -> bool:
    """Whether ``latex`` uses a command that makes latex2mathml write an attribute that
    links or styles (``\\href``, ``\\class``, ``\\style``): never converted."""
    from latex2mathml import commands

    return any(c in latex for c in (commands.HREF, commands.CLASS, commands.STYLE))


_FORMULA_GROUPS = ("display", "display_latex", "environment", "inline", "inline_latex")


def formulas(source: str) -> list[str]:
    """The LaTeX of every formula in the markdown ``source`` (not in code)."""
    return [
        m.group(g)
        for m in _MARKDOWN.finditer(source)
        for g in _FORMULA_GROUPS
        if m.group(g) is not None
    ]


def markdown_math_to_mathml(source: str) -> str:
    """``source`` (markdown) with every formula replaced by its MathML (see
    ``latex_to_mathml``); code and escaped dollars stay as they are."""

    def replace(m: re.Match) -> str:
        if m.group("fence") or m.group("code") or m.group("escaped"):
            return m.group()
        for group, display in (
            ("display", True),
            ("display_latex", True),
            ("environment", True),
            ("inline", False),
            ("inline_latex", False),
        ):
            if m.group(group) is not None:
                return latex_to_mathml(m.group(group), display)
        return m.group()  # pragma: no cover (every alternative is a group above)

    return _MARKDOWN.sub(replace, source)


class MarkdownMath(Preprocessor):
    """Render the math of markdown cells as MathML, before markdown is rendered, so that
    the page needs no MathJax (nor anything else from another host) and markdown cannot
    read a formula's ``_`` or ``*`` as emphasis."""

    enabled = Bool(True).tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "markdown":
            on = speedups.on("page-parts-once")
            convert = _remembered_mathml if on else markdown_math_to_mathml
            cell.source = convert(cell.source)
        return cell, resources


# A class hands in the course's markdown cells unchanged: each one's MathML is made once.
_remembered_mathml = functools.lru_cache(maxsize=4096)(markdown_math_to_mathml)


# --- the exporter: the same page, faster for a class ---------------------------------------


class _TemplateBytecode:
    """Jinja's compiled templates, kept for the life of the process: nbgrader makes a new
    exporter, and so a new Jinja environment, for every submission, which would compile the
    feedback template and its parents again each time (about 0.35 s)."""

    store: dict[str, bytes] = {}

    @classmethod
    def cache(cls):
        from jinja2 import BytecodeCache

        class InMemory(BytecodeCache):
            def load_bytecode(self, bucket):
                code = cls.store.get(bucket.key)
                if code is not None:
                    bucket.bytecode_from_string(code)  # checks the template's checksum

            def dump_bytecode(self, bucket):
                cls.store[bucket.key] = bucket.bytecode_to_string()

        return InMemory()


IMG_WITHOUT_ALT = re.compile(r"<img(?![^>]*\balt=)", re.IGNORECASE)
NO_ALT_TEXT = "No description has been provided for this image"


class FeedbackExporter(HTMLExporter):
    """The HTML exporter of the feedback pages (``GenerateFeedback.exporter_class``).

    It writes the page nbconvert's ``HTMLExporter`` writes with the course's template, at
    about half the cost per submission, which counts when a class is graded:

    - the compiled templates are shared by every exporter in the process;
    - the highlighted HTML of a code cell is remembered by its source (a class hands in
      the same test cells, and mostly the same set-up cells), and so is the HTML of a
      markdown cell without attachments (nor images read from files into the page);
    - instead of parsing the whole page again with BeautifulSoup to give images without
      one an ``alt`` text (and lab-template cells a ``tabindex``, which the course's
      classic-based template does not have), a pattern adds the ``alt`` text.
    """

    def _create_environment(self):
        environment = super()._create_environment()
        environment.bytecode_cache = _TemplateBytecode.cache()
        return environment

    def from_notebook_node(self, nb, resources=None, **kw):
        info = nb.metadata.get("language_info", {})
        lexer = info.get("pygments_lexer", info.get("name"))
        highlight = self.filters.get(
            "highlight_code", Highlight2HTML(pygments_lexer=lexer, parent=self)
        )
        if speedups.on("page-parts-once"):
            highlight = _remembered(highlight, lexer)
        self.register_filter("highlight_code", highlight)
        resources = self._init_resources(resources)
        self.register_filter(
            "filter_data_type",
            WidgetsDataTypeFilter(
                notebook_metadata=self._nb_metadata, parent=self, resources=resources
            ),
        )
        page, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
        return IMG_WITHOUT_ALT.sub(f'<img alt="{NO_ALT_TEXT}"', page), resources

    @pass_context
    def markdown2html(self, context, source):
        """nbconvert's markdown filter, its HTML remembered for the process where it depends
        on the source and the exporter's settings alone (no attachments, no image read from
        a file into the page)."""
        cell = context.get("cell", {})
        if not speedups.on("page-parts-once") or cell.get("attachments") or self.embed_images:
            return super().markdown2html(context, source)
        path = context.get("resources", {}).get("metadata", {}).get("path", "")
        key = (source, path, self.anchor_link_text, self.exclude_anchor_links)
        key += (repr(sorted(self.lexer_options.items())),)
        if key not in _MARKDOWN_HTML:
            if len(_MARKDOWN_HTML) >= _HIGHLIGHTED_MAX:
                _MARKDOWN_HTML.clear()
            _MARKDOWN_HTML[key] = super().markdown2html(context, source)
        return _MARKDOWN_HTML[key]


# A markdown cell's HTML by its source and the exporter's settings, for the life of the process.
_MARKDOWN_HTML: dict[tuple, str] = {}


# Highlighted HTML by (lexer, source, language), for the life of the process.
_HIGHLIGHTED: dict[tuple, str] = {}
_HIGHLIGHTED_MAX = 20_000


def _remembered(highlight, lexer):
    """``highlight(source, language, metadata)``, its HTML remembered for each source."""

    def cached(source, language=None, metadata=None):
        # The templates pass every code cell's metadata; of it, nbconvert's highlighting
        # reads only the language of a cell magic (``magics_language``), so that is all the
        # key needs (keyed on the whole metadata, the nbgrader ids would make every cell
        # of every notebook a miss).
        magics = (metadata or {}).get("magics_language")
        key = (lexer, source, language, magics)
        if key not in _HIGHLIGHTED:
            if len(_HIGHLIGHTED) >= _HIGHLIGHTED_MAX:
                _HIGHLIGHTED.clear()
            _HIGHLIGHTED[key] = highlight(
                source, language, {"magics_language": magics} if magics else None
            )
        return _HIGHLIGHTED[key]

    return cached


# --- what the grader decided after the page was written -----------------------------------

NOTICE_START, NOTICE_END = "<!-- course-notice -->", "<!-- /course-notice -->"
_NOTICE = re.compile(re.escape(NOTICE_START) + r".*?" + re.escape(NOTICE_END) + r"\n?", re.S)


def notice_html(lowered: list[tuple[str, str, float, float, str]], total: tuple) -> str:
    """The box at the top of a feedback page for the cells whose points the grader lowered
    after the notebook ran: ``lowered`` is (grade id, test name, points, max points, why),
    ``total`` the chapter's (points, max points) as graded."""
    items = "".join(
        f'<li><a href="#{html.escape(cell)}">{html.escape(name)}</a>: '
        f"{points:g} / {max_points:g} points. {html.escape(why)}</li>"
        for cell, name, points, max_points, why in lowered
    )
    return (
        f'{NOTICE_START}<div class="alert alert-danger course-notice" role="alert">'
        f"<h4>Your score: {total[0]:g} / {total[1]:g}, less than this page shows</h4>"
        "<p>The page shows your notebook as it ran. After it ran, the grader lowered these "
        f"test cells' points:</p><ul>{items}</ul></div>{NOTICE_END}\n"
    )


def by_hand_html(scored: list[tuple[str, str, float, float]]) -> str:
    """The box at the top of a feedback page for the test cells the instructor scored by
    hand: ``scored`` is (grade id, test name, points, max points)."""
    items = "".join(
        f'<li><a href="#{html.escape(cell)}">{html.escape(name)}</a>: '
        f"{points:g} / {max_points:g} points, given by your instructor.</li>"
        for cell, name, points, max_points in scored
    )
    return (
        f'{NOTICE_START}<div class="alert alert-info course-notice" role="status">'
        "<h4>Reviewed by your instructor</h4><p>Your instructor read your notebook and scored "
        f"these cells by hand:</p><ul>{items}</ul>"
        f"</div>{NOTICE_END}\n"
    )


def with_notice(page: str, notice: str | None) -> str:
    """``page`` with its notice replaced by ``notice`` (None: no notice), at the top of the
    body; a page given its own notice again is unchanged."""
    page = _NOTICE.sub("", page)
    if not notice:
        return page
    anchor = page.find('<a id="top"></a>')
    if anchor < 0:
        body = re.search(r"<body[^>]*>", page)
        anchor = body.end() if body else 0
    else:
        anchor += len('<a id="top"></a>')
    return page[:anchor] + notice + page[anchor:]


# --- after the notebook ran ---------------------------------------------------------------


def notify(
    root: Path,
    out: Out,
    recorded: list[GradeRow],
    rows: list[GradeRow],
    by_hand: list[HandGrade] = (),
) -> None:
    """Tell each student on their feedback page what the grader decided after their
    notebook ran: which test cells lost points to the scan or to the check outside the
    kernel, and why (``recorded``: the scores of the gradebook, ``rows``: the final ones);
    and which cells the instructor scored by hand (``by_hand``). A page with nothing to
    tell loses any notice an earlier run put there."""
    scored: dict[tuple[str, str], list[HandGrade]] = {}
    for g in by_hand:
        if g.points is not None and g.max_points is not None:
            scored.setdefault((g.student, g.chapter), []).append(g)
    before = {(r.student, r.chapter, r.cell): r.points for r in recorded}
    totals: dict[tuple[str, str], tuple[float, float]] = {}
    lowered: dict[tuple[str, str], list[GradeRow]] = {}
    for r in rows:
        pair = (r.student, r.chapter)
        points, max_points = totals.get(pair, (0.0, 0.0))
        totals[pair] = (points + r.points, max_points + r.max_points)
        if r.points < before.get((r.student, r.chapter, r.cell), r.points):
            lowered.setdefault(pair, []).append(r)
    names = _TestNames(root)
    for (student, chapter), total in totals.items():
        page = out.feedback(student, chapter)
        if not page.is_file():
            continue
        notices = []
        if (student, chapter) in lowered:
            cells = [
                (r.cell, names.of(chapter, r.cell), r.points, r.max_points, r.status)
                for r in lowered[(student, chapter)]
            ]
            notices.append(notice_html(cells, total))
        if (student, chapter) in scored:
            cells = [
                (g.cell, names.of(chapter, g.cell), g.points, g.max_points)
                for g in scored[(student, chapter)]
            ]
            notices.append(by_hand_html(cells))
        notice = "".join(notices) or None
        text = page.read_text(encoding="utf-8")
        changed = with_notice(text, notice)
        if changed != text:
            page.write_text(changed, encoding="utf-8")


class _TestNames:
    """The name each test cell's docstring states, per chapter, read once."""

    def __init__(self, root: Path):
        self.root, self.names = root, {}

    def of(self, chapter: str, cell: str) -> str:
        if chapter not in self.names:
            solution = nbformat.read(solution_path(self.root, chapter), as_version=4)
            self.names[chapter] = {
                grade_id(c): name_of_test(c.source) for c in solution.cells if c.cell_type == "code"
            }
        return self.names[chapter].get(cell) or cell
