"""A submission made inert: nothing a student put in a notebook runs in a page that shows it,
or takes over a control of that page.

A notebook's outputs, markdown, attachments and metadata are the student's to write. Pages
render them: nbgrader's formgrader (served by the instructor's Jupyter server, whose origin
can start kernels, and whose script binds each graded cell's score box by the element id
``#<grade id>`` and its buttons by classes such as ``.full-credit``), the feedback page,
anything a later tool (``jupyter nbconvert``, JupyterLab) renders from OUT. So before any
page renders a submission, :func:`make_inert` rebuilds every part of it a page would read as
markup from what is known to be inert:

- **outputs** keep plain text, PNG and JPEG images (their data checked to be base64, their
  metadata reduced to a width and a height), HTML that the course's allowlist leaves whole
  (kept as the sanitiser writes it), and the values a test cell hands to the check outside
  the kernel (JSON, which no page renders); every other kind (HTML with a script, an event
  handler, a style, a link to elsewhere, a heading, an element id or a class; SVG;
  JavaScript; markdown; LaTeX; a widget's view) is dropped, and its source is shown as plain
  text in its place;
- a **markdown cell** the course did not write is rendered as nbconvert renders it: when it
  holds raw HTML, or when the HTML it gives is not left whole by the same allowlist (with
  nh3, the Ammonia sanitiser: a heading, whose id nbconvert derives from its text and which
  could equal a grade id; a ``javascript:`` link; an image from a URL; a class of the
  student's choosing), or when a formula would write a link, a class or a style, the cell
  is shown as text, in a fenced code block;
- **attachments** keep PNG and JPEG images with plain names; a **raw cell** the course did
  not write becomes a markdown cell that shows its source as text (nbconvert renders a raw
  cell without a format as HTML);
- a **cell id** or a **tag** with characters a template could read as markup is replaced;
  the **notebook metadata** keeps only the kernel's and the language's description (no
  widget state, which nbconvert would write into a ``<script>`` element; no title).

So no markup of a student's creates an element id or a class that a page's script or style
uses: the allowlist keeps no ``id`` at all, and a class only from the fixed names of
Pygments' highlighting (which nbconvert writes for code blocks, and no page binds a control
to).

Every step fails closed and runs in time linear in the notebook's size. A markdown cell or
an HTML output longer than ``MAX_CHECKED`` characters is not parsed: it is shown as text,
cut to its start; a text output longer than ``MAX_TEXT`` is cut. A cell that cannot be
checked (any error while it is) becomes a placeholder that says so; a notebook of an older
format is converted to format 4 first, and one that cannot be read as a notebook becomes a
placeholder notebook. Nothing is ever left as it was because it could not be checked.

What was dropped or shown as text is said, one line each, in the notebook's
``metadata.autograder.inert``; the feedback page lists it. The function is idempotent: an
inert notebook is left as it is. It runs where the notebook is staged for nbgrader
(``autograder/restore.py``'s ``stage``), in nbgrader's autograde after the kernel has run
(:class:`InertNotebook`, which writes the notebook the formgrader shows), before a feedback
page is made, and over every graded notebook ``review`` serves (:func:`make_inert_file`,
which never raises but for the file's own reading and writing).
"""

import base64
import binascii
import html as html_module
import json
import re
from pathlib import Path

import nbformat
import nh3
from nbconvert.preprocessors import Preprocessor
from traitlets import Bool, Unicode

from attention_course.handout import MIME_TYPE as HANDOUT

# Where a notebook says what was made inert: ``metadata[METADATA_KEY][NOTES_KEY]``.
METADATA_KEY, NOTES_KEY = "autograder", "inert"

# A markdown cell or an HTML output longer than this (characters) is shown as text without
# being parsed; a text output longer than MAX_TEXT is cut. Each check below is linear, but a
# page of megabytes helps no reader.
MAX_CHECKED = 200_000
MAX_TEXT = 500_000

# --- the allowlist ------------------------------------------------------------------------

# What nbconvert's markdown renderer writes for plain markdown (and a table, an attached
# image, a highlighted code block), and what a plain HTML table or text output uses. No
# heading: nbconvert gives a heading an id made of its text.
TAGS = {
    "a", "abbr", "b", "blockquote", "br", "caption", "code", "del", "div", "em", "hr", "i",
    "img", "kbd", "li", "ol", "p", "pre", "s", "span", "strong", "sub", "sup", "table",
    "tbody", "td", "tfoot", "th", "thead", "tr", "ul",
}  # fmt: skip
ATTRIBUTES = {
    "a": {"href", "title"},
    "img": {"src", "alt", "title", "width", "height"},
    "th": {"style", "colspan", "rowspan"},
    "td": {"style", "colspan", "rowspan"},
    "table": {"border"},
    "tr": {"style"},
    # highlighted code: Pygments' classes only (CODE_CLASSES)
    "div": {"class"}, "span": {"class"}, "pre": {"class"}, "code": {"class"},
}  # fmt: skip
# The classes nbconvert's highlighting writes: Pygments' short token names and its block's
# "highlight". A fixed vocabulary, which colours code and names no control of any page.
CODE_CLASSES = frozenset(
    {"highlight"}
    | {
        "bp", "c", "c1", "ch", "cm", "cp", "cpf", "cs", "dl", "err", "esc", "fm", "g", "gd",
        "ge", "ges", "gh", "gi", "go", "gp", "gr", "gs", "gt", "gu", "il", "k", "kc", "kd",
        "kn", "kp", "kr", "kt", "l", "ld", "m", "mb", "mf", "mh", "mi", "mo", "n", "na", "nb",
        "nc", "nd", "ne", "nf", "ni", "nl", "nn", "no", "nt", "nv", "nx", "o", "ow", "p", "pm",
        "py", "s", "s1", "s2", "sa", "sb", "sc", "sd", "se", "sh", "si", "sr", "ss", "sx",
        "vc", "vg", "vi", "vm", "w", "x",
    }
)  # fmt: skip
# An image is inert only as data of a raster format; a link only to the web, to mail or to
# a place in the same page. Nothing relative to the page's server.
RASTER = ("image/png", "image/jpeg")
_IMAGE_DATA = re.compile(r"data:image/(png|jpeg);base64,[A-Za-z0-9+/=\s]*\Z")
_LINK = re.compile(r"(https?://|mailto:|#)", re.IGNORECASE)
_ALIGN = re.compile(r"text-align:\s*(left|right|center);?\Z")


def _attribute(element: str, attribute: str, value: str) -> str | None:
    """The value nh3 may keep, or None to drop the attribute."""
    if attribute == "src":
        return value if _IMAGE_DATA.match(value) else None
    if attribute == "href":
        return value if _LINK.match(value.strip()) else None
    if attribute == "style":
        return value if _ALIGN.match(value.strip()) else None
    if attribute == "class":
        return value if set(value.split()) <= CODE_CLASSES else None
    return value


def sanitised(html: str) -> str:
    """``html`` as nh3 leaves it under the course's allowlist."""
    return nh3.clean(
        html,
        tags=TAGS,
        attributes=ATTRIBUTES,
        attribute_filter=_attribute,
        link_rel=None,
        url_schemes={"http", "https", "mailto", "data"},
        strip_comments=True,
    )


# --- comparing two HTML fragments, in linear time -----------------------------------------
#
# Python's html.parser takes time in the square of the length of a fragment of unclosed tags
# (`<b ` repeated: 12 s for 25 kB), and raises on some declarations. These patterns never
# look past the next "<" or ">", and possessive quantifiers never backtrack, so one pass over
# a fragment reads it. What they do not read as a tag is text: a fragment whose markup they
# misread differs from the sanitiser's well-formed rewriting of it, which fails closed.
_PIECE = re.compile(r"<(/?)([A-Za-z][^\s/<>]*+)([^<>]*+)>|[^<]++|<")
_ATTRIBUTES_WHOLE = re.compile(
    r"""(?:\s++[^\s"'=/<>]++(?:\s*+=\s*+(?:"[^"]*+"|'[^']*+'|[^\s"'=<>`]++))?+)*+\s*+/?\s*+"""
)
_ONE_ATTRIBUTE = re.compile(
    r"""\s++([^\s"'=/<>]++)(?:\s*+=\s*+(?:"([^"]*+)"|'([^']*+)'|([^\s"'=<>`]++)))?+"""
)
_VOID = {"br", "hr", "img"}


def _tag(closing: str, name: str, rest: str) -> tuple:
    name = name.lower()
    if closing:
        return (">", name)
    if not _ATTRIBUTES_WHOLE.fullmatch(rest):
        return ("odd", name, rest)
    attributes = sorted(
        (m.group(1).lower(), html_module.unescape(m.group(2) or m.group(3) or m.group(4) or ""))
        for m in _ONE_ATTRIBUTE.finditer(rest)
    )
    return ("<", name, tuple(attributes))


def _tokens(html: str) -> list[tuple]:
    """An HTML fragment as a list of its tags (attributes sorted) and text (entities read,
    white space collapsed), so that two serialisations of the same document compare equal.
    Linear in the fragment's length."""
    tokens: list[tuple] = []
    text: list[str] = []

    def flush():
        words = " ".join(html_module.unescape("".join(text)).split())
        if words:
            tokens.append(("text", words))
        text.clear()

    for m in _PIECE.finditer(html):
        if m.group(2) is None:
            text.append(m.group())
            continue
        flush()
        token = _tag(*m.group(1, 2, 3))
        if not (token[0] == ">" and token[1] in _VOID):
            tokens.append(token)
    flush()
    return tokens


def is_inert_html(html: str) -> bool:
    """Whether the course's allowlist leaves ``html`` whole: no tag, attribute or URL in it
    that the sanitiser would take out. False for a fragment longer than ``MAX_CHECKED``, or
    one that cannot be read."""
    return isinstance(html, str) and len(html) <= MAX_CHECKED and _is_whole(html)


def _is_whole(html: str) -> bool:
    """:func:`is_inert_html` at any length (linear): for the HTML nbconvert renders from a
    markdown cell whose length was checked, which may be a few times as long."""
    try:
        return _tokens(sanitised(html)) == _tokens(html)
    except Exception:  # fail closed: what cannot be compared is not inert
        return False


# --- markdown -----------------------------------------------------------------------------


def _render(source: str, attachments: dict | None) -> tuple[str, bool]:
    """``source`` as nbconvert's HTML exporter renders a markdown cell, and whether it held
    raw HTML (raises ``InvalidNotebook`` for an attachment the cell does not have)."""
    from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

    raw: list[str] = []

    class Watching(IPythonRenderer):
        def block_html(self, html):
            raw.append(html)
            return super().block_html(html)

        def inline_html(self, html):
            raw.append(html)
            return super().inline_html(html)

    renderer = Watching(escape=False, attachments=attachments or {})
    return MarkdownWithMath(renderer=renderer).render(source), bool(raw)


def rendered_markdown(source: str, attachments: dict | None = None) -> str:
    """``source`` as nbconvert's HTML exporter renders a markdown cell (raises
    ``InvalidNotebook`` for an attachment the cell does not have)."""
    return _render(source, attachments)[0]


def _formula_writes_markup(source: str) -> bool:
    """Whether ``source`` names a command that would make the feedback page's math write a
    link, a class or a style (``autograder/feedback.py``), anywhere: in a formula or not
    (one linear search, which fails closed)."""
    from autograder.feedback import writes_attributes

    return writes_attributes(source)


def is_inert_markdown(source: str, attachments: dict | None = None) -> bool:
    """Whether a page may render the markdown ``source`` as markdown: no raw HTML, and the
    HTML nbconvert renders it to left whole by the allowlist (so no heading)."""
    if not isinstance(source, str) or len(source) > MAX_CHECKED:
        return False
    try:
        html, raw = _render(source, attachments)
        formulas = not _is_as_text(source) and _formula_writes_markup(source)
        return not raw and _is_whole(html) and not formulas
    except Exception:  # a missing attachment, a renderer's error: show it as text
        return False


def as_text(source: str) -> str:
    """``source`` as a fenced code block, which markdown shows exactly as written."""
    longest = max((len(run) for run in re.findall(r"`+", source)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{source}\n{fence}"


def _is_as_text(source: str) -> bool:
    """Whether ``source`` is what :func:`as_text` writes: a fence no line inside can close,
    so all of it is code (and no formula)."""
    match = re.match(r"(`{3,})text\n", source)
    if not match or not source.endswith("\n" + match.group(1)):
        return False
    fence = match.group(1)
    inside = source[len(fence) + 5 : -len(fence) - 1]
    return all(len(run) < len(fence) for run in re.findall(r"`+", inside))


def _cut(text: str, limit: int) -> str:
    """``text``, or its first characters and a line that says how many are not shown, at
    most ``limit`` characters in all."""
    if len(text) <= limit:
        return text
    keep = limit - 100
    return text[:keep] + f"\n[... {len(text) - keep:,} more characters not shown]"


# --- outputs ------------------------------------------------------------------------------

_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*\Z")
_NAMES = {
    "text/html": "an HTML output",
    "image/svg+xml": "an SVG image",
    "application/javascript": "a JavaScript output",
    "text/javascript": "a JavaScript output",
    "text/markdown": "a markdown output",
    "text/latex": "a LaTeX output",
    "application/vnd.jupyter.widget-view+json": "a widget",
}
# The markup shown as text in place of a dropped output: the first of these it had.
_AS_TEXT = ("text/html", "image/svg+xml", "text/markdown", "text/latex", "text/javascript")
_AS_TEXT_MAX = 4000  # characters of a dropped output's source shown


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else value if isinstance(value, str) else ""


def _is_base64(value) -> bool:
    text = _text(value)
    if not text or not _BASE64.match(text):
        return False
    try:
        base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _long_text(text: str, where: str, notes: list[str]) -> str:
    """A text output cut to ``MAX_TEXT`` characters, said in ``notes`` when it was."""
    if len(text) > MAX_TEXT:
        notes.append(f"{where}: an output of {len(text):,} characters was cut to its start")
    return _cut(text, MAX_TEXT)


def _inert_bundle(output: dict, where: str, notes: list[str]) -> None:
    """Keep what is inert of a display_data or execute_result output, in place."""
    data = output.get("data") if isinstance(output.get("data"), dict) else {}
    kept, dropped = {}, {}
    for mime, value in data.items():
        text = _text(value)
        if mime == "text/plain":
            kept[mime] = _long_text(text, where, notes)
        elif mime in RASTER and _is_base64(value):
            kept[mime] = text
        elif mime == HANDOUT and isinstance(value, (dict, list)):
            kept[mime] = value  # values the grader reads as JSON; no page renders them
        elif mime == "text/html" and is_inert_html(text):
            kept[mime] = sanitised(text)  # the same document, as the sanitiser writes it
        else:
            dropped[mime] = value
    for mime in dropped:
        shown = mime in _AS_TEXT or mime == "application/javascript"
        name = _NAMES.get(mime, f"a {mime} output")
        notes.append(f"{where}: {name} was " + ("shown as text" if shown else "left out"))
    shown = next((m for m in (*_AS_TEXT, "application/javascript") if m in dropped), None)
    if shown and not any(m in kept for m in RASTER):
        text = _text(dropped[shown]) if isinstance(dropped[shown], (str, list)) else ""
        if not text:
            text = json.dumps(dropped[shown])[: _AS_TEXT_MAX + 1]
        kept["text/plain"] = text[:_AS_TEXT_MAX] + ("\n[...]" if len(text) > _AS_TEXT_MAX else "")
    if not kept:
        kept["text/plain"] = ""
    metadata = output.get("metadata") if isinstance(output.get("metadata"), dict) else {}
    size = {}
    for mime in RASTER:
        if mime in kept and isinstance(metadata.get(mime), dict):
            size[mime] = {
                k: v
                for k, v in metadata[mime].items()
                if k in ("width", "height") and isinstance(v, int) and not isinstance(v, bool)
            }
    if dropped or set(metadata) - set(size) or data != kept:
        output["data"] = nbformat.from_dict(kept)
        output["metadata"] = nbformat.from_dict(size)


def _inert_output(output, where: str, notes: list[str]) -> dict | None:
    """``output`` made inert in place, or None to leave it out."""
    kind = output.get("output_type") if isinstance(output, dict) else None
    if kind == "stream":
        if output.get("name") not in ("stdout", "stderr"):
            output["name"] = "stdout"
        output["text"] = _long_text(_text(output.get("text")), where, notes)
    elif kind == "error":
        output["ename"] = _text(output.get("ename"))[:_AS_TEXT_MAX]
        output["evalue"] = _long_text(_text(output.get("evalue")), where, notes)
        traceback = output.get("traceback")
        lines = [_text(t) for t in traceback] if isinstance(traceback, list) else []
        output["traceback"] = [_long_text(t, where, notes) for t in lines]
    elif kind in ("display_data", "execute_result"):
        _inert_bundle(output, where, notes)
        for key in set(output) - {"output_type", "data", "metadata", "execution_count"}:
            del output[key]  # a "transient" display id, say: nothing a page needs
        if kind == "execute_result" and type(output.get("execution_count")) is not int:
            output["execution_count"] = None
    else:
        notes.append(f"{where}: an output of an unknown kind was left out")
        return None
    return output


def _placeholder_output(where: str, error: Exception, notes: list[str]) -> dict:
    notes.append(f"{where}: an output could not be checked and is not shown ({_why(error)})")
    return nbformat.v4.new_output("stream", name="stdout", text="[an output not shown]\n")


def _inert_outputs(cell: dict, where: str, notes: list[str]) -> None:
    outputs = cell.get("outputs")
    if not isinstance(outputs, list):
        cell["outputs"] = []
        return
    kept = []
    for output in outputs:
        try:
            output = _inert_output(output, where, notes)
        except Exception as error:  # fail closed: a placeholder, never the output as it was
            output = _placeholder_output(where, error, notes)
        if output is not None:
            kept.append(output)
    cell["outputs"] = kept
    if not (cell.get("execution_count") is None or type(cell.get("execution_count")) is int):
        cell["execution_count"] = None


# --- cells --------------------------------------------------------------------------------

_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}\Z")
_TAG = re.compile(r"[\w.-]+\Z")
_ATTACHMENT_NAME = re.compile(r"[\w. ()-]+\Z")
NOTEBOOK_METADATA = ("kernelspec", "language_info", METADATA_KEY, "nbgrader")
MARKDOWN_AS_TEXT = (
    "a markdown cell was shown as text (it held HTML, a heading, a link a page must not "
    "follow or an image from elsewhere)"
)
NOT_SHOWN = "*This cell could not be checked, so no page shows it (see the notes).*"


def _why(error: Exception) -> str:
    return f"{type(error).__name__}: {str(error)[:200]}"


def _where(index: int, cell: dict) -> str:
    """How the notes name a cell: its place in the notebook, and its grade id if any."""
    metadata = cell.get("metadata")
    nbgrader = metadata.get("nbgrader") if isinstance(metadata, dict) else None
    grade_id = nbgrader.get("grade_id") if isinstance(nbgrader, dict) else None
    plain = isinstance(grade_id, str) and _ID.match(grade_id)
    return f"cell {index + 1}" + (f" ({grade_id})" if plain else "")


def _inert_attachments(cell: dict, where: str, notes: list[str]) -> None:
    attachments = cell.get("attachments")
    if attachments is None:
        return
    kept = {}
    for name, bundle in attachments.items() if isinstance(attachments, dict) else []:
        images = {
            mime: _text(value)
            for mime, value in (bundle.items() if isinstance(bundle, dict) else [])
            if mime in RASTER and _is_base64(value)
        }
        if images and isinstance(name, str) and _ATTACHMENT_NAME.match(name):
            kept[name] = images
        if not images or len(images) != len(bundle) or name not in kept:
            notes.append(f"{where}: an attachment that is not a PNG or JPEG image was left out")
    if kept != attachments:
        cell["attachments"] = nbformat.from_dict(kept)


def _markdown_source(source: str, attachments, where: str, notes: list[str]) -> str:
    """What a student's markdown cell may hold: ``source``, or ``source`` as text (cut to
    ``MAX_CHECKED`` characters) when a page must not render it as markdown."""
    if is_inert_markdown(source, attachments):
        return source
    if len(source) > MAX_CHECKED - 1000:
        notes.append(
            f"{where}: a markdown cell of {len(source):,} characters was shown as text, cut "
            "to its start"
        )
        return as_text(_cut(source, MAX_CHECKED - 1000))
    notes.append(f"{where}: {MARKDOWN_AS_TEXT}")
    return as_text(source)


def _raw_as_markdown(cell: dict, source: str, where: str, notes: list[str]) -> None:
    """A student's raw cell, in place, as a markdown cell that shows its source as text:
    nbconvert renders a raw cell without a format as HTML."""
    cell["cell_type"] = "markdown"
    cell.pop("attachments", None)
    metadata = cell["metadata"]
    for key in ("format", "raw_mimetype", "nbgrader"):
        metadata.pop(key, None)  # nbgrader never grades a raw cell
    cell["source"] = as_text(_cut(source, MAX_CHECKED - 1000))
    notes.append(f"{where}: a raw cell was shown as text")


def _inert_cell(index: int, cell: dict, course: set[str], taken: set[str], notes: list[str]):
    """Make the cell ``cell`` inert in place."""
    where = _where(index, cell)
    if "id" in cell:
        plain = isinstance(cell["id"], str) and bool(_ID.match(cell["id"]))
        if not plain:
            notes.append(f"{where}: its id held characters a page could read as markup")
        if not plain or cell["id"] in taken:
            cell["id"] = f"inert-{index}"
        taken.add(cell["id"])
    if not isinstance(cell.get("metadata"), dict):
        cell["metadata"] = {}
    metadata = cell["metadata"]
    if "tags" in metadata:
        tags = metadata["tags"] if isinstance(metadata["tags"], list) else []
        safe = [t for t in tags if isinstance(t, str) and _TAG.match(t)]
        if safe != metadata["tags"]:
            metadata["tags"] = safe
            notes.append(f"{where}: a tag that a page could read as markup was dropped")
    kind = cell.get("cell_type")
    source = _text(cell.get("source"))
    if kind == "code":
        _inert_outputs(cell, where, notes)
    elif kind == "markdown":
        _inert_attachments(cell, where, notes)
        if source not in course:
            cell["source"] = _markdown_source(source, cell.get("attachments"), where, notes)
    elif kind == "raw":
        if source not in course:
            _raw_as_markdown(cell, source, where, notes)
    else:
        raise ValueError(f"a cell of an unknown type {str(kind)[:40]!r}")


def _placeholder_cell(index: int, cell, error: Exception, notes: list[str]) -> dict:
    """What stands in for a cell that could not be checked: a code cell keeps its code and
    its nbgrader metadata (it was graded as it ran) and loses its outputs; any other cell
    becomes a markdown cell that says it is not shown."""
    where = _where(index, cell) if isinstance(cell, dict) else f"cell {index + 1}"
    notes.append(f"{where}: the cell could not be checked and is not shown ({_why(error)})")
    metadata = cell.get("metadata") if isinstance(cell, dict) else None
    nbgrader = metadata.get("nbgrader") if isinstance(metadata, dict) else None
    kept = {"nbgrader": nbgrader} if isinstance(nbgrader, dict) else {}
    if isinstance(cell, dict) and cell.get("cell_type") == "code":
        placeholder = nbformat.v4.new_code_cell(_text(cell.get("source")), metadata=kept)
        placeholder.outputs = [_placeholder_output(where, error, [])]
    else:
        placeholder = nbformat.v4.new_markdown_cell(NOT_SHOWN)
    placeholder["id"] = f"inert-{index}"
    return json.loads(json.dumps(placeholder))


# --- the notebook -------------------------------------------------------------------------


def placeholder_notebook(why: str) -> dict:
    """A notebook (as JSON) that stands in for one that could not be read as a notebook:
    one markdown cell and a note that say why."""
    note = f"the notebook could not be read, so no page shows it ({why})"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(NOT_SHOWN)])
    nb.cells[0]["id"] = "inert-0"
    nb.metadata[METADATA_KEY] = {NOTES_KEY: [note]}
    return json.loads(json.dumps(nb))


def _as_version_4(nb: dict) -> str | None:
    """Convert the notebook ``nb`` (as JSON) to nbformat 4 in place, or replace it with a
    placeholder; a note when it did either."""
    if nb.get("nbformat") == 4 and isinstance(nb.get("cells"), list):
        return None
    try:
        if nb.get("nbformat") not in (1, 2, 3):
            raise ValueError(f"nbformat {str(nb.get('nbformat'))[:20]}, or no list of cells")
        converted = json.loads(json.dumps(nbformat.convert(nbformat.from_dict(nb), 4)))
        if not isinstance(converted.get("cells"), list):
            raise ValueError("no list of cells once converted")
        for key in ("orig_nbformat", "orig_nbformat_minor"):  # nbformat's, said in the note
            converted.get("metadata", {}).pop(key, None)
        note = f"the notebook was converted from nbformat {nb['nbformat']} to 4"
    except Exception as error:
        converted = placeholder_notebook(_why(error))
        note = converted["metadata"][METADATA_KEY][NOTES_KEY][0]
    nb.clear()
    nb.update(converted)
    return note


def _inert_metadata(nb: dict, notes: list[str]) -> None:
    if not isinstance(nb.get("metadata"), dict):
        nb["metadata"] = {}
        notes.append("the notebook's metadata was left out")
    metadata = nb["metadata"]
    for key in sorted(set(metadata) - set(NOTEBOOK_METADATA), key=str):
        del metadata[key]
        notes.append(f"the notebook's metadata {str(key)[:40]!r} was left out")
    if not isinstance(metadata.get(METADATA_KEY, {}), dict):
        metadata[METADATA_KEY] = {}
    if not isinstance(metadata.get(METADATA_KEY, {}).get(NOTES_KEY, []), list):
        metadata[METADATA_KEY][NOTES_KEY] = []


def make_inert(nb: dict, course: set[str] = frozenset()) -> list[str]:
    """Make the notebook ``nb`` (as JSON, or nbformat's) inert in place; the notes of what
    was dropped or shown as text, also added to ``nb.metadata.autograder.inert``. The
    markdown and raw cells whose source is in ``course`` (the release's) are the course's,
    and stay as they are. It never raises: a notebook of an older format is converted, one
    that is not a notebook becomes a placeholder notebook, and a cell that cannot be checked
    a placeholder cell."""
    notes: list[str] = []
    converted = _as_version_4(nb)
    if converted is not None:
        notes.append(converted)
    cells = nb["cells"]
    taken: set[str] = set()
    for index, cell in enumerate(cells):
        try:
            if not isinstance(cell, dict):
                raise ValueError("not a cell")
            _inert_cell(index, cell, course, taken, notes)
        except Exception as error:  # fail closed: a placeholder, never the cell as it was
            cells[index] = _placeholder_cell(index, cell, error, notes)
    _inert_metadata(nb, notes)
    if notes:
        said = nb["metadata"].setdefault(METADATA_KEY, {}).setdefault(NOTES_KEY, [])
        said.extend(n for n in dict.fromkeys(notes) if n not in said)
    return notes


def notes_of(nb: dict) -> list[str]:
    """What :func:`make_inert` said of ``nb``, over all its passes."""
    said = (nb.get("metadata") or {}).get(METADATA_KEY, {})
    return list(said.get(NOTES_KEY, [])) if isinstance(said, dict) else []


def course_text(released: dict) -> set[str]:
    """The sources of the markdown and raw cells of a released notebook (as JSON)."""
    return {
        _text(c.get("source"))
        for c in released.get("cells", [])
        if isinstance(c, dict) and c.get("cell_type") in ("markdown", "raw")
    }


_COURSE: dict[tuple[str, float], set[str]] = {}


def course_text_at(path: Path) -> set[str]:
    """:func:`course_text` of the released notebook at ``path`` (read once per version);
    empty when there is none."""
    try:
        key = (str(path), path.stat().st_mtime)
    except OSError:
        return set()
    if key not in _COURSE:
        _COURSE[key] = course_text(json.loads(path.read_text(encoding="utf-8")))
    return _COURSE[key]


class InertNotebook(Preprocessor):
    """nbgrader's (and nbconvert's) step that makes a notebook inert (:func:`make_inert`)
    with the markdown of the chapter's release in ``release_directory`` as the course's."""

    enabled = Bool(True).tag(config=True)
    release_directory = Unicode("", help="nbgrader's release folder of the run").tag(config=True)

    def preprocess(self, nb, resources):
        chapter = (resources.get("nbgrader") or {}).get("assignment", "")
        course: set[str] = set()
        if self.release_directory and chapter:
            course = course_text_at(Path(self.release_directory) / chapter / f"{chapter}.ipynb")
        make_inert(nb, course)
        return nb, resources


def made_inert(text: str, course: set[str]) -> dict:
    """The notebook whose file holds ``text``, made inert (:func:`make_inert`); a
    placeholder notebook when ``text`` is not a notebook's JSON. Never raises."""
    try:
        nb = json.loads(text)
        if not isinstance(nb, dict):
            raise ValueError("not a JSON object")
    except Exception as error:  # not JSON, nested too deep: no page may render it
        return placeholder_notebook(_why(error))
    try:
        make_inert(nb, course)
        json.dumps(nb)  # what cannot be written back is not kept either
    except Exception as error:
        return placeholder_notebook(_why(error))
    return nb


def make_inert_file(path: Path, course: set[str]) -> bool:
    """Make the notebook file at ``path`` inert (a placeholder notebook when it is not a
    notebook); whether it changed. Raises only ``OSError``, from reading or writing it."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        nb = placeholder_notebook(_why(error))
    else:
        nb = made_inert(text, course)
    written = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
    try:
        if json.loads(raw) == nb:
            return False
    except Exception:  # not JSON: it changes
        pass
    path.write_text(written, encoding="utf-8")
    return True
