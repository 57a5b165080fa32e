"""A submission made inert: nothing a student put in a notebook runs in a page that shows it.

A notebook's outputs, markdown, attachments and metadata are the student's to write. Pages
render them: nbgrader's formgrader (served by the instructor's Jupyter server, whose origin
can start kernels), the feedback page, anything a later tool (``jupyter nbconvert``,
JupyterLab) renders from OUT. So before any page renders a submission, :func:`make_inert`
rebuilds every part of it a page would read as markup from what is known to be inert:

- **outputs** keep plain text, PNG and JPEG images (their data checked to be base64, their
  metadata reduced to a width and a height), HTML that the course's allowlist leaves whole,
  and the values a test cell hands to the check outside the kernel (JSON, which no page
  renders); every other kind (HTML with a script, an event handler, a style or a link to
  elsewhere; SVG; JavaScript; markdown; LaTeX; a widget's view) is dropped, and its source
  is shown as plain text in its place;
- a **markdown cell** the course did not write is rendered as nbconvert renders it, and the
  HTML that gives is held to the same allowlist (with nh3, the Ammonia sanitiser): when the
  sanitiser would change anything (raw HTML, a ``javascript:`` link, an image from a URL, a
  formula that writes a link), the cell is shown as text, in a fenced code block;
- **attachments** keep PNG and JPEG images with plain names; a **raw cell** the course did
  not write loses the format that would make a page render it as HTML;
- a **cell id** or a **tag** with characters a template could read as markup is replaced;
  the **notebook metadata** keeps only the kernel's and the language's description (no
  widget state, which nbconvert would write into a ``<script>`` element; no title).

What was dropped or shown as text is said, one line each, in the notebook's
``metadata.autograder.inert``; the feedback page lists it. The function is idempotent: an
inert notebook is left as it is. It runs where the notebook is staged for nbgrader
(``autograder/restore.py``'s ``stage``), in nbgrader's autograde after the kernel has run
(:class:`InertNotebook`, which writes the notebook the formgrader shows), before a feedback
page is made, and over every graded notebook ``review`` serves.
"""

import base64
import binascii
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import nh3
from nbconvert.preprocessors import Preprocessor
from traitlets import Bool, Unicode

from attention_course.handout import MIME_TYPE as HANDOUT

# Where a notebook says what was made inert: ``metadata[METADATA_KEY][NOTES_KEY]``.
METADATA_KEY, NOTES_KEY = "autograder", "inert"

# --- the allowlist ------------------------------------------------------------------------

# What nbconvert's markdown renderer writes for plain markdown (and a table, a heading's
# anchor, an attached image), and what a plain HTML table or text output uses.
TAGS = {
    "a", "abbr", "b", "blockquote", "br", "caption", "code", "del", "div", "em", "h1",
    "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "kbd", "li", "ol", "p", "pre", "s",
    "span", "strong", "sub", "sup", "table", "tbody", "td", "tfoot", "th", "thead", "tr",
    "ul",
}  # fmt: skip
ATTRIBUTES = {
    "a": {"href", "title", "class"},
    "img": {"src", "alt", "title", "width", "height"},
    "h1": {"id"}, "h2": {"id"}, "h3": {"id"}, "h4": {"id"}, "h5": {"id"}, "h6": {"id"},
    "th": {"style", "colspan", "rowspan"},
    "td": {"style", "colspan", "rowspan"},
    "table": {"class", "border"},
    "tr": {"style"},
    # highlighted code: pygments' classes
    "div": {"class"}, "span": {"class"}, "pre": {"class"}, "code": {"class"},
}  # fmt: skip
# An image is inert only as data of a raster format; a link only to the web, to mail or to
# a place in the same page (a heading's anchor). Nothing relative to the page's server.
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


class _Tokens(HTMLParser):
    """An HTML fragment as a list of its tags (attributes sorted) and text, so that two
    serialisations of the same document compare equal."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tokens: list[tuple] = []

    def handle_starttag(self, tag, attrs):
        self.tokens.append(("<", tag, tuple(sorted((k, v or "") for k, v in attrs))))

    handle_startendtag = handle_starttag

    def handle_endtag(self, tag):
        self.tokens.append((">", tag))

    def handle_data(self, data):
        if self.tokens and self.tokens[-1][0] == "text":
            self.tokens[-1] = ("text", self.tokens[-1][1] + data)
        else:
            self.tokens.append(("text", data))

    def handle_comment(self, data):
        self.tokens.append(("comment", data))

    handle_decl = handle_pi = unknown_decl = handle_comment


def _tokens(html: str) -> list[tuple]:
    parser = _Tokens()
    parser.feed(html)
    parser.close()
    # void elements: "<br>" has no end tag, "<br></br>" would; whitespace between blocks
    return [
        ("text", " ".join(t[1].split())) if t[0] == "text" else t
        for t in parser.tokens
        if not (t[0] == "text" and not t[1].strip())
        and not (t[0] == ">" and t[1] in ("br", "hr", "img"))
    ]


def is_inert_html(html: str) -> bool:
    """Whether the course's allowlist leaves ``html`` whole: no tag, attribute or URL in it
    that the sanitiser would take out."""
    return _tokens(sanitised(html)) == _tokens(html)


# --- markdown -----------------------------------------------------------------------------


def rendered_markdown(source: str, attachments: dict | None = None) -> str:
    """``source`` as nbconvert's HTML exporter renders a markdown cell (raises
    ``InvalidNotebook`` for an attachment the cell does not have)."""
    from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

    renderer = IPythonRenderer(escape=False, attachments=attachments or {})
    return MarkdownWithMath(renderer=renderer).render(source)


def _formula_writes_markup(source: str) -> bool:
    """Whether a formula of ``source`` would make the feedback page's math write a link, a
    class or a style (``autograder/feedback.py``)."""
    from autograder.feedback import formulas, writes_attributes

    return any(writes_attributes(latex) for latex in formulas(source))


def is_inert_markdown(source: str, attachments: dict | None = None) -> bool:
    """Whether a page may render the markdown ``source`` as markdown."""
    try:
        html = rendered_markdown(source, attachments)
    except Exception:  # a missing attachment, a renderer's error: show it as text
        return False
    return is_inert_html(html) and not _formula_writes_markup(source)


def as_text(source: str) -> str:
    """``source`` as a fenced code block, which markdown shows exactly as written."""
    longest = max((len(run) for run in re.findall(r"`+", source)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{source}\n{fence}"


def _is_fenced_text(source: str) -> bool:
    match = re.match(r"(`{3,})text\n", source)
    return bool(match) and source.endswith("\n" + match.group(1))


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


def _inert_bundle(output: dict, where: str, notes: list[str]) -> None:
    """Keep what is inert of a display_data or execute_result output, in place."""
    data = output.get("data") if isinstance(output.get("data"), dict) else {}
    kept, dropped = {}, {}
    for mime, value in data.items():
        text = _text(value)
        if mime == "text/plain" or (mime in RASTER and _is_base64(value)):
            kept[mime] = text
        elif mime == HANDOUT and isinstance(value, (dict, list)):
            kept[mime] = value  # values the grader reads as JSON; no page renders them
        elif mime == "text/html" and is_inert_html(text):
            kept[mime] = text
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
            text = json.dumps(dropped[shown])
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


def _inert_outputs(cell: dict, where: str, notes: list[str]) -> None:
    outputs = cell.get("outputs")
    if not isinstance(outputs, list):
        cell["outputs"] = []
        return
    kept = []
    for output in outputs:
        kind = output.get("output_type") if isinstance(output, dict) else None
        if kind == "stream":
            if output.get("name") not in ("stdout", "stderr"):
                output["name"] = "stdout"
            output["text"] = _text(output.get("text"))
        elif kind == "error":
            output["ename"], output["evalue"] = (
                _text(output.get("ename")),
                _text(output.get("evalue")),
            )
            traceback = output.get("traceback")
            output["traceback"] = (
                [_text(t) for t in traceback] if isinstance(traceback, list) else []
            )
        elif kind in ("display_data", "execute_result"):
            _inert_bundle(output, where, notes)
            for key in set(output) - {"output_type", "data", "metadata", "execution_count"}:
                del output[key]  # a "transient" display id, say: nothing a page needs
        else:
            notes.append(f"{where}: an output of an unknown kind was left out")
            continue
        kept.append(output)
    cell["outputs"] = kept
    if not (cell.get("execution_count") is None or type(cell.get("execution_count")) is int):
        cell["execution_count"] = None


# --- cells and the notebook ---------------------------------------------------------------

_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}\Z")
_TAG = re.compile(r"[\w.-]+\Z")
_ATTACHMENT_NAME = re.compile(r"[\w. ()-]+\Z")
NOTEBOOK_METADATA = ("kernelspec", "language_info", METADATA_KEY, "nbgrader")


def _where(index: int, cell: dict) -> str:
    """How the notes name a cell: its place in the notebook, and its grade id if any."""
    nbgrader = (cell.get("metadata") or {}).get("nbgrader")
    grade_id = nbgrader.get("grade_id") if isinstance(nbgrader, dict) else None
    return f"cell {index + 1}" + (f" ({grade_id})" if isinstance(grade_id, str) else "")


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


def make_inert(nb: dict, course: set[str] = frozenset()) -> list[str]:
    """Make the notebook ``nb`` (as JSON, or nbformat's) inert in place; the notes of what
    was dropped or shown as text, also added to ``nb.metadata.autograder.inert``. The
    markdown and raw cells whose source is in ``course`` (the release's) are the course's,
    and stay as they are."""
    notes: list[str] = []
    cells = nb.get("cells") if isinstance(nb.get("cells"), list) else []
    taken: set[str] = set()
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict):
            continue
        where = _where(index, cell)
        if "id" in cell:
            plain = isinstance(cell["id"], str) and bool(_ID.match(cell["id"]))
            if not plain:
                notes.append(f"{where}: its id held characters a page could read as markup")
            if not plain or cell["id"] in taken:
                cell["id"] = f"inert-{index}"
            taken.add(cell["id"])
        metadata = cell.get("metadata")
        if isinstance(metadata, dict) and "tags" in metadata:
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
            if source in course or _is_fenced_text(source):
                continue
            if not is_inert_markdown(source, cell.get("attachments")):
                cell["source"] = as_text(source)
                notes.append(
                    f"{where}: a markdown cell was shown as text (it held HTML, a link a "
                    "page must not follow or an image from elsewhere)"
                )
        elif kind == "raw" and source not in course and isinstance(metadata, dict):
            for key in ("format", "raw_mimetype"):
                if metadata.pop(key, None) is not None:
                    notes.append(f"{where}: a raw cell's format was dropped (it is shown as text)")
    metadata = nb.get("metadata") if isinstance(nb.get("metadata"), dict) else None
    if metadata is not None:
        for key in sorted(set(metadata) - set(NOTEBOOK_METADATA)):
            del metadata[key]
            notes.append(f"the notebook's metadata {key!r} was left out")
    if notes:
        nb.setdefault("metadata", {})
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


def make_inert_file(path: Path, course: set[str]) -> bool:
    """Make the notebook file at ``path`` inert; whether it changed."""
    text = path.read_text(encoding="utf-8")
    nb = json.loads(text)
    before = json.dumps(nb, sort_keys=True)
    make_inert(nb, course)
    if json.dumps(nb, sort_keys=True) == before:
        return False
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return True
