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
import bisect
import functools
import html
import re
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import nbformat
import nh3
from jinja2 import pass_context
from nbconvert.exporters import HTMLExporter, TemplateExporter
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.strings import files_url_pattern
from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter
from nbconvert.preprocessors import Preprocessor
from pygments.token import STANDARD_TYPES
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

# The most of one markdown cell, and of one formula, that the page shows. A student's cell
# is theirs to make as long as they like; beyond these, the grader's time (latex2mathml's,
# nbconvert's markdown renderer's) is better spent on the next submission, and the page
# says what it left out.
MAX_MARKDOWN = 50_000
MAX_FORMULA = 2_000

# Environments that only say "this is a display equation", and the ones latex2mathml knows
# by their amsmath inner names.
_DISPLAY_WRAPPERS = re.compile(r"\\(begin|end)\{(equation|displaymath|math)\*?\}")
_RENAMED = {"align": "aligned", "align*": "aligned", "gather": "gathered", "gather*": "gathered"}
# The one operator name of LaTeX that latex2mathml 3.81 leaves as text.
_OPERATORS = re.compile(r"\\arg(?![a-zA-Z])")

# Characters that markdown (mistune, in nbconvert) would read as syntax in the text between
# the MathML tags: written as character references, they reach the page as themselves. The
# colon too, or mistune's url plugin would make a link of an ``http://`` in a formula.
_MARKDOWN_SYNTAX = re.compile(r"[\\`*_\[\]!|~$:]")
# Line breaks in a formula's text, which markdown would read as the start of a new block.
_LINE_BREAKS = re.compile(r"[\r\n\t\f\v\x85\u2028\u2029]")


def _protect(text: str) -> str:
    """``text`` (already HTML-escaped) with markdown's syntax characters as references."""
    return _MARKDOWN_SYNTAX.sub(lambda m: f"&#{ord(m.group())};", text)


def _escaped(text: str) -> str:
    """``text`` as page text: HTML-escaped (quotes too: nothing in it reads as an
    attribute), on one line, markdown's syntax as references."""
    return _protect(html.escape(_LINE_BREAKS.sub(" ", text)))


def _source(latex: str) -> str:
    """The LaTeX shown as itself, in code, where it cannot be rendered; of a formula longer
    than ``MAX_FORMULA``, its start and a note of how long it is."""
    tex = latex.strip()
    if len(tex) <= MAX_FORMULA:
        return f'<code class="math-source">{_escaped(tex)}</code>'
    note = f"(a formula of {len(tex):,} characters: the page shows its first {MAX_FORMULA:,})"
    return f'<code class="math-source">{_escaped(tex[:MAX_FORMULA])}</code> <em>{note}</em>'


# The MathML the page may show: the elements latex2mathml writes, less those that link,
# load or hold HTML (maction, mglyph, semantics' annotation-xml), and for each attribute
# the values it may take. Anything else in a formula's MathML (an ``href``, a ``style``, a
# ``class``, an element of the student's) and the formula is shown as its source instead.
MATHML_ELEMENTS = frozenset(
    {
        "math", "mrow", "mi", "mn", "mo", "ms", "mtext", "mspace", "msub", "msup",
        "msubsup", "mfrac", "msqrt", "mroot", "mover", "munder", "munderover", "mtable",
        "mtr", "mtd", "mlabeledtr", "mstyle", "mpadded", "mphantom", "menclose", "merror",
        "mmultiscripts", "mprescripts", "none",
    }
)  # fmt: skip
# A length of at most three digits before the point: room for any spacing command, none
# for one that moves a formula's box far over the rest of the page.
_LENGTH = (
    r"[+-]?(?:\d{1,3}(?:\.\d*)?|\.\d+)(?:em|ex|pt|px|mu|%|width|height|depth)?"
    r"|(?:negative)?(?:very){0,2}(?:thin|medium|thick)mathspace"
)
_LENGTHS = rf"(?:{_LENGTH})(?: (?:{_LENGTH}))*"
_WORDS = r"[a-z]{1,20}(?:[ -][a-z]{1,20}){0,30}"
_TRUTH = r"true|false"
_VALUES = {
    "display": r"block|inline",
    "mathvariant": _WORDS,
    "form": r"prefix|infix|postfix",
    "linebreak": r"auto|newline|nobreak|goodbreak|badbreak",
    "scriptlevel": r"[+-]?\d",
    "mathcolor": r"#[0-9a-fA-F]{3,8}|[a-zA-Z]{1,20}",
    "mathbackground": r"#[0-9a-fA-F]{3,8}|[a-zA-Z]{1,20}",
    **dict.fromkeys(
        ("stretchy", "fence", "separator", "accent", "accentunder", "movablelimits",
         "largeop", "symmetric", "displaystyle", "equalrows", "equalcolumns"),
        _TRUTH,
    ),
    **dict.fromkeys(
        ("width", "height", "depth", "lspace", "rspace", "voffset", "minsize", "maxsize",
         "linethickness", "mathsize"),
        _LENGTH,
    ),
    **dict.fromkeys(("rowspacing", "columnspacing", "framespacing"), _LENGTHS),
    **dict.fromkeys(
        ("columnalign", "rowalign", "columnlines", "rowlines", "frame", "notation"), _WORDS
    ),
}  # fmt: skip
MATHML_ATTRIBUTES = {name: re.compile(rf"(?:{value})\Z") for name, value in _VALUES.items()}
_MATHML_NAMESPACE = "http://www.w3.org/1998/Math/MathML"


class _NotAllowed(ValueError):
    """latex2mathml wrote something the page does not show (see ``MATHML_ELEMENTS``)."""


def _attribute(name: str, value: str) -> str:
    """`` name="value"`` where the allowlist takes ``value`` (which then holds no quote,
    ampersand or angle bracket); raises ``_NotAllowed`` otherwise."""
    pattern = MATHML_ATTRIBUTES.get(name)
    if pattern is None or not pattern.match(value):
        raise _NotAllowed(f"attribute {name}={value[:40]!r}")
    return f' {name}="{value}"'


def _mathml_text(text: str) -> str:
    """A text node of latex2mathml's tree as page text. latex2mathml writes its own
    characters as references (``&#x0003C;``) and the student's as they are (its ``convert``
    then unescapes the whole document, which is how ``\\text{<a ...>}`` became markup): read
    both as characters, then escape them all."""
    shown = html.unescape(text)
    if "\\" in shown:  # a command latex2mathml does not know, kept as text
        raise _NotAllowed("an unknown command")
    return _escaped(shown)


def _rebuilt(element, out: list[str]) -> None:
    """Write ``element`` (latex2mathml's tree) into ``out`` as MathML made only of the
    allowlist's elements and attributes, every text escaped; raises ``_NotAllowed``."""
    if element.tag not in MATHML_ELEMENTS:
        raise _NotAllowed(f"element {str(element.tag)[:40]!r}")
    attributes = "".join(
        _attribute(name, value)
        for name, value in element.attrib.items()
        if not (name == "xmlns" and value == _MATHML_NAMESPACE)
    )
    out.append(f"<{element.tag}{attributes}>")
    if element.text:
        out.append(_mathml_text(element.text))
    for child in element:
        _rebuilt(child, out)
        if child.tail:
            out.append(_mathml_text(child.tail))
    out.append(f"</{element.tag}>")


def _prepared(tex: str) -> str:
    """``tex`` in the LaTeX latex2mathml knows: amsmath's environments by their inner
    names, no display wrapper, ``\\arg`` as an operator name."""
    for name, inner in _RENAMED.items():
        tex = tex.replace(f"\\begin{{{name}}}", f"\\begin{{{inner}}}")
        tex = tex.replace(f"\\end{{{name}}}", f"\\end{{{inner}}}")
    tex = _DISPLAY_WRAPPERS.sub("", tex)
    return _OPERATORS.sub(r"\\operatorname{arg}", tex)


@functools.lru_cache(maxsize=4096)  # a class hands in the course's formulas, and its own
def latex_to_mathml(latex: str, display: bool = False) -> str:
    """MathML for ``latex``, on one line and safe to put into markdown as raw HTML: rebuilt
    from latex2mathml's tree with the allowlist (``MATHML_ELEMENTS``), every text escaped.
    Where latex2mathml cannot convert it, or writes anything outside the allowlist, or the
    formula is longer than ``MAX_FORMULA``: the LaTeX source in a ``<code>`` element."""
    from latex2mathml.converter import convert_to_element

    tex = latex.strip()
    if not tex or len(tex) > MAX_FORMULA:
        return _source(latex)
    tex = _prepared(tex)
    if writes_attributes(tex):  # a student's link or style has no place in the page
        return _source(latex)
    out: list[str] = []
    try:
        _rebuilt(convert_to_element(tex, display="block" if display else "inline"), out)
    except Exception:  # latex2mathml raises many kinds, the allowlist _NotAllowed: fail closed
        return _source(latex)
    return "".join(out)


def writes_attributes(latex: str) -> bool:
    """Whether ``latex`` uses a command that makes latex2mathml write an attribute that
    links or styles (``\\href``, ``\\class``, ``\\style``): never converted."""
    from latex2mathml import commands

    return any(c in latex for c in (commands.HREF, commands.CLASS, commands.STYLE))


# --- where the formulas of a markdown cell are: one pass, left to right -------------------
#
# What Jupyter's markdown treats as math, in the order nbconvert's renderer tries it at
# each place, after what must stay as it is: fenced code blocks and code spans (a `$` in
# code is not math), and an escaped dollar. One pattern with every delimiter's `.*?` (as
# before) tried again from every opening delimiter whose closing one never comes: a cell of
# `\begin{` cost time in the square of its length. Here every closing delimiter is found
# once, up front, and a formula's end is a binary search among them.

_SPECIAL = re.compile(r"[`~$\\]")  # the first character of anything the scan looks for
_RUN = re.compile(r"`+|~+")  # a fence's mark, a code span's ticks
# A line that may close a fenced block: the block's mark, more of its characters, blanks.
_FENCE_LINE = re.compile(r"^[ ]{0,3}([`~]+)[ \t]*$", re.MULTILINE)
_BEGIN = re.compile(r"\\begin\{([a-zA-Z]*\*?)\}")
_END = re.compile(r"\\end\{([a-zA-Z]*\*?)\}")


class Piece(NamedTuple):
    """A stretch of a markdown cell: ``text`` (markdown), ``code`` (kept as it is: a fenced
    block, a code span, an escaped dollar) or ``formula`` (its LaTeX in ``latex``)."""

    kind: str
    start: int
    end: int
    latex: str = ""
    display: bool = False
    unclosed: str = ""  # the mark of a fenced block the cell's end leaves open


def _positions(pattern: str, source: str) -> list[int]:
    return [m.start() for m in re.finditer(pattern, source)]


def _first(positions: list[int], at_least: int) -> int | None:
    """The first of the sorted ``positions`` at or after ``at_least``, or None."""
    k = bisect.bisect_left(positions, at_least)
    return positions[k] if k < len(positions) else None


class _Closers:
    """Where each closing delimiter of ``source`` stands, found once."""

    def __init__(self, source: str):
        self.dollar = _positions(r"\$", source)
        self.display = _positions(r"(?<!\\)(?=\$\$)", source)  # $$$ holds two
        self.display_latex = _positions(r"(?<!\\)\\\\\]", source)
        self.inline_latex = _positions(r"(?<!\\)\\\\\)", source)
        self.ends: dict[str, list[tuple[int, int]]] = {}
        for m in _END.finditer(source):
            self.ends.setdefault(m.group(1), []).append((m.start(), m.end()))
        self.ticks: dict[int, list[int]] = {}  # a run's length: where such runs start
        for m in re.finditer("`+", source):
            self.ticks.setdefault(m.end() - m.start(), []).append(m.start())


def _fence_at(source: str, at: int, mark: str, scanned: int) -> Piece | None:
    """The fenced code block that the run of backticks or tildes ``mark`` at ``at`` opens,
    if it starts its line (no earlier than ``scanned``, after at most three spaces) and
    the line ends."""
    line = at
    while line > scanned and at - line < 3 and source[line - 1] == " ":
        line -= 1
    if len(mark) < 3 or (line and source[line - 1] != "\n"):
        return None
    newline = source.find("\n", at + len(mark))
    if newline < 0:
        return None
    seek = newline + 1
    while (closing := _FENCE_LINE.search(source, seek)) is not None:
        if closing.group(1).startswith(mark):
            return Piece("code", line, closing.end())
        seek = closing.end() + 1
    return Piece("code", line, len(source), unclosed=mark)


def _backslash_at(source: str, at: int, closers: _Closers) -> Piece | None:
    """The escaped dollar, ``\\\\[...\\\\]``, environment or ``\\\\(...\\\\)`` at ``at``."""
    if source.startswith("\\$", at):
        return Piece("code", at, at + 2)
    free = at == 0 or source[at - 1] != "\\"
    if free and source.startswith("\\\\[", at):
        end = _first(closers.display_latex, at + 4)
        if end is not None:
            return Piece("formula", at, end + 3, source[at + 3 : end], True)
    begun = _BEGIN.match(source, at)
    if begun:
        ends = closers.ends.get(begun.group(1), [])
        k = bisect.bisect_left(ends, (begun.end(), -1))
        if k < len(ends):
            return Piece("formula", at, ends[k][1], source[at : ends[k][1]], True)
    if free and source.startswith("\\\\(", at):
        end = _first(closers.inline_latex, at + 4)
        if end is not None:
            return Piece("formula", at, end + 3, source[at + 3 : end], False)
    return None


def _dollar_at(source: str, at: int, closers: _Closers) -> Piece | None:
    """The ``$$...$$`` or ``$...$`` formula at ``at``."""
    before = source[at - 1] if at else ""
    if source.startswith("$$", at) and before != "\\":
        end = _first(closers.display, at + 3)
        if end is not None:
            return Piece("formula", at, end + 2, source[at + 2 : end], True)
    if before not in ("$", "\\"):
        end = _first(closers.dollar, at + 1)
        if end is not None and end > at + 1 and source[end - 1] != "\\":
            return Piece("formula", at, end + 1, source[at + 1 : end], False)
    return None


def pieces(source: str) -> Iterator[Piece]:
    """The markdown ``source`` as consecutive pieces of text, code and formulas, read in one
    pass: each place is looked at once, each formula's end found by a binary search."""
    closers = _Closers(source)
    done = seek = 0  # what is yielded; where the next piece may start
    while (special := _SPECIAL.search(source, seek)) is not None:
        at, char, found = special.start(), special.group(), None
        if char in "`~":
            run = _RUN.match(source, at).group()
            found = _fence_at(source, at, run, done)
        if found is None and char == "`":
            closing = _first(closers.ticks.get(len(run), []), at + len(run) + 1)
            if closing is not None:
                found = Piece("code", at, closing + len(run))
        if found is None and char in "`~":  # a run nothing closes is text
            seek = at + len(run)
            continue
        elif char == "\\":
            found = _backslash_at(source, at, closers)
        elif char == "$":
            found = _dollar_at(source, at, closers)
        if found is None:
            seek = at + 1
            continue
        if found.start > done:
            yield Piece("text", done, found.start)
        yield found
        done = seek = found.end
    if done < len(source):
        yield Piece("text", done, len(source))


def formulas(source: str) -> list[str]:
    """The LaTeX of every formula in the markdown ``source`` (not in code)."""
    return [p.latex for p in pieces(source) if p.kind == "formula"]


# What would still open a formula for nbconvert's markdown renderer in the text between
# the formulas (a `$`, `\\[`, `\\(` or `\begin{` that nothing closes): as references, the
# renderer shows them as themselves, and does not look for their end from each of them
# (its patterns, like the old one here, take time in the square of a cell of them).
_OPENERS = re.compile(r"\$|(?<=\\begin)\{|(?<=(?<!\\)\\\\)[\[(]")


def _without_openers(text: str) -> str:
    return _OPENERS.sub(lambda m: f"&#{ord(m.group())};", text)


def _shown_part(source: str) -> tuple[str, str]:
    """The part of a markdown cell the page shows, and the note that says what it left
    out (empty for a cell of at most ``MAX_MARKDOWN`` characters)."""
    if len(source) <= MAX_MARKDOWN:
        return source, ""
    note = (
        f"\n\n*This cell holds {len(source):,} characters: the page shows its first "
        f"{MAX_MARKDOWN:,}.*\n"
    )
    return source[:MAX_MARKDOWN], note


def markdown_math_to_mathml(source: str) -> str:
    """``source`` (markdown) with every formula replaced by its MathML (see
    ``latex_to_mathml``); code and escaped dollars stay as they are. Of a cell longer than
    ``MAX_MARKDOWN``, the start, and a note."""
    shown, note = _shown_part(source)
    parts, unclosed = [], ""
    for piece in pieces(shown):
        text = shown[piece.start : piece.end]
        if piece.kind == "formula":
            parts.append(latex_to_mathml(piece.latex, piece.display))
        elif piece.kind == "text":
            parts.append(_without_openers(text))
        else:
            parts.append(text)
            unclosed = piece.unclosed
    if note and unclosed:  # the note goes after the code block the cut left open
        parts.append(f"\n{unclosed}")
    return "".join(parts) + note


class MarkdownMath(Preprocessor):
    """Render the math of markdown cells as MathML, before markdown is rendered, so that
    the page needs no MathJax (nor anything else from another host) and markdown cannot
    read a formula's ``_`` or ``*`` as emphasis."""

    enabled = Bool(True).tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "markdown":
            remember = speedups.on("page-parts-once") and len(cell.source) <= _REMEMBERED_MAX
            convert = _remembered_mathml if remember else markdown_math_to_mathml
            cell.source = convert(cell.source)
        return cell, resources


# A class hands in the course's markdown cells unchanged: each one's MathML is made once
# (a cell no longer than the course's would be: no student's megabytes kept for the run).
_remembered_mathml = functools.lru_cache(maxsize=4096)(markdown_math_to_mathml)
_REMEMBERED_MAX = 20_000


# --- what the page writes of a markdown cell: held to an allowlist, whatever made it ------
#
# A student's markdown cell reaches the page only if autograder/inert.py found its HTML
# inert; but that HTML was rendered before the math here became MathML, and the class
# attribute it allows is the page's own bootstrap's (``navbar-fixed-top``,
# ``modal-backdrop``: positioned over the page). So the HTML of every markdown cell is held
# once more to an allowlist of what nbconvert's renderer writes and the MathML above, with
# classes only where that renderer writes them (a heading's anchor link, highlighted code).

# What nbconvert's markdown renderer writes for plain markdown (a heading and its anchor
# link, a table, highlighted code, an attached image) and a hint's collapsed block.
_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
_PAGE_TAGS = frozenset(
    {
        "a", "abbr", "b", "blockquote", "br", "caption", "code", "del", "details", "div",
        "em", "hr", "i", "img", "kbd", "li", "ol", "p", "pre", "s", "span", "strong", "sub",
        "summary", "sup", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "ul",
        *_HEADINGS, *MATHML_ELEMENTS,
    }
)  # fmt: skip
_PAGE_ATTRIBUTES = {
    "a": {"href", "title", "class"},
    "img": {"src", "alt", "title", "width", "height"},
    "th": {"style", "colspan", "rowspan"},
    "td": {"style", "colspan", "rowspan"},
    "tr": {"style"},
    "table": {"border"},
    "details": {"open"},
    **{tag: {"class"} for tag in ("div", "span", "pre", "code")},
    **{tag: {"id"} for tag in _HEADINGS},
    **{tag: set(MATHML_ATTRIBUTES) for tag in MATHML_ELEMENTS},
}
# The ids of the page's own elements, which a heading's may not take.
_PAGE_IDS = {"top", "toc", "notebook", "notebook-container"}
_CLASSES = {
    "a": {"anchor-link"},
    "code": {"math-source"},
    "div": {"highlight"},
    "span": set(STANDARD_TYPES.values()) - {""},  # pygments' token classes
}
_HREF = re.compile(r"#\S*\Z")  # a place in the page: a heading's anchor
_IMAGE_DATA = re.compile(r"data:image/(png|jpeg);base64,[A-Za-z0-9+/=\s]*\Z")
_ALIGN = re.compile(r"text-align:\s*(left|right|center);?\Z")


def _page_attribute(element: str, attribute: str, value: str) -> str | None:
    """The value the page keeps, or None to drop the attribute."""
    if element in MATHML_ELEMENTS:
        return value if MATHML_ATTRIBUTES[attribute].match(value) else None
    if attribute == "id":
        return None if value.strip().lower() in _PAGE_IDS else value
    if attribute == "class":
        allowed = _CLASSES.get(element, set())
        return value if value.split() and set(value.split()) <= allowed else None
    if attribute == "href":
        return value if _HREF.match(value.strip()) else None
    if attribute == "src":
        return value if _IMAGE_DATA.match(value) else None
    if attribute == "style":
        return value if _ALIGN.match(value.strip()) else None
    return value


def page_safe(fragment: str) -> str:
    """``fragment`` (a markdown cell's HTML) as the page may show it: nothing but the
    allowlist's elements and attributes (no style element, no form, meta, base, link or
    iframe, no positioning class, no link but to a place in the page itself: a student's
    link to elsewhere keeps its text, not its ``href``)."""
    return nh3.clean(
        fragment,
        tags=set(_PAGE_TAGS),
        attributes=_PAGE_ATTRIBUTES,
        attribute_filter=_page_attribute,
        link_rel=None,
        url_schemes={"http", "https", "mailto", "data"},
        strip_comments=True,
    )


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
        self.register_filter("strip_files_prefix", strip_files_prefix)
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
        """nbconvert's markdown filter, held to the page's allowlist (``page_safe``); its HTML
        remembered for the process where it depends on the source and the exporter's
        settings alone (no attachments, no image read from a file into the page)."""
        cell = context.get("cell", {})
        if not speedups.on("page-parts-once") or cell.get("attachments") or self.embed_images:
            return page_safe(super().markdown2html(context, source))
        # The folder of the notebook (resources' path, a student's own) is read only to embed
        # images, which these pages do not: the key leaves it out, so that a class's pages
        # share the HTML of their common cells.
        key = (source, self.anchor_link_text, self.exclude_anchor_links)
        key += (repr(sorted(self.lexer_options.items())),)
        if key not in _MARKDOWN_HTML:
            made = page_safe(super().markdown2html(context, source))
            if len(source) > _MARKDOWN_HTML_MAX_SOURCE:  # a student's megabytes are not kept
                return made
            if len(_MARKDOWN_HTML) >= _HIGHLIGHTED_MAX:
                _MARKDOWN_HTML.clear()
            _MARKDOWN_HTML[key] = made
        return _MARKDOWN_HTML[key]


def strip_files_prefix(text: str) -> str:
    """nbconvert's ``strip_files_prefix`` filter for rendered HTML, in linear time: the
    ``files/`` prefix off ``src`` and ``href``. nbconvert's also rewrites markdown links
    (``[caption](files/...)``) with a pattern that scans to the end of the line from every
    ``[`` (seconds for a cell of them); in HTML already rendered there are none left to
    rewrite, only text that shows brackets."""
    return files_url_pattern.sub(r"\1=\2", text)


# A markdown cell's HTML by its source and the exporter's settings, for the life of the process.
_MARKDOWN_HTML: dict[tuple, str] = {}
_MARKDOWN_HTML_MAX_SOURCE = 100_000  # characters of a cell (its math as MathML) remembered


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


def _without_notices(page: str) -> str:
    """``page`` without the notices an earlier run put there: one pass (a pattern with
    ``.*?`` would look for the end again from every start that has none)."""
    kept, at = [], 0
    while (start := page.find(NOTICE_START, at)) >= 0:
        end = page.find(NOTICE_END, start + len(NOTICE_START))
        if end < 0:
            break
        kept.append(page[at:start])
        at = end + len(NOTICE_END)
        at += page.startswith("\n", at)
    kept.append(page[at:])
    return "".join(kept)


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
    page = _without_notices(page)
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
