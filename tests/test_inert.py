"""autograder/inert.py: what a page may render of a student's notebook, part by part (the
pages themselves, in chromium, are tests/test_markup_submissions.py)."""

import base64
import copy
import json
import re

import nbformat
import pytest

from attention_course.handout import MIME_TYPE as HANDOUT
from autograder.feedback import latex_to_mathml
from autograder.inert import (
    CODE_CLASSES,
    as_text,
    course_text,
    is_inert_html,
    is_inert_markdown,
    make_inert,
    make_inert_file,
    notes_of,
    rendered_markdown,
)

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()


def notebook(*cells, **metadata):
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": metadata, "cells": list(cells)}
    return json.loads(json.dumps(nb))  # as JSON, unvalidated: a cell id may be anything


def code(*outputs, **fields):
    cell = nbformat.v4.new_code_cell("x = 1")
    cell.outputs = [nbformat.from_dict(o) for o in outputs]
    cell.update(fields)
    return cell


def display(data, metadata=None):
    return {"output_type": "display_data", "data": data, "metadata": metadata or {}}


@pytest.mark.parametrize(
    "html",
    [
        '<img src="x" onerror="alert(1)">',
        "<script>alert(1)</script>",
        "<b>fine</b><script>alert(1)</script>",
        '<a href="javascript:alert(1)">x</a>',
        '<img src="/api/contents">',
        '<img src="https://example.org/pixel.png">',
        '<div style="background:url(https://example.org/x)">x</div>',
        "<iframe src=data:text/html,x></iframe>",
        "<svg onload=alert(1)></svg>",
        "<form action=/api/kernels method=post><button>x</button></form>",
        '<p title="x" onclick="alert(1)">x</p>',
        "<style>body{background:url(/api/contents)}</style>",
        "<b>x</b><!-- a comment -->",
        # an id or a class a page binds to (the formgrader's score box and buttons)
        '<table class="dataframe"><tr><td>1</td></tr></table>',
        '<div class="nbgrader_cell"><div class="full-credit">load the figure</div></div>',
        '<span id="test_attention_masked">x</span>',
        '<span class="k full-credit">x</span>',
        "<h6>test_attention_masked</h6>",
        "<b>x</b><![ x",
        "<b title='unclosed>x</b>",
    ],
)
def test_html_with_anything_beyond_the_allowlist_is_not_inert(html):
    assert not is_inert_html(html)


@pytest.mark.parametrize(
    "html",
    [
        "<b>bold</b> &amp; <em>emphasis</em>",
        '<table border="1"><thead><tr style="text-align: right;"><th></th>'
        "<th>a</th></tr></thead><tbody><tr><th>0</th><td>1</td></tr></tbody></table>",
        '<a href="https://example.org/page">a link</a>',
        f'<img src="data:image/png;base64,{PNG}" alt="plot">',
        "<pre>a &lt; b</pre>",
    ],
)
def test_plain_html_is_inert_as_it_is(html):
    assert is_inert_html(html)


@pytest.mark.parametrize(
    "source",
    [
        '<img src=x onerror="alert(1)">',
        "<script>alert(1)</script>",
        "[x](javascript:alert(1))",
        "<javascript:alert(1)>",
        "[go][r]\n\n[r]: javascript:alert(2)",
        "![an image](/api/contents)",
        "![an image](https://example.org/pixel.png)",
        "$\\href{javascript:alert(1)}{x}$",
        "$$\\style{background:url(x)}{x}$$",
        "<details><summary>a hint</summary>the course's own, copied</details>",
        "![missing](attachment:none.png)",
    ],
)
def test_markdown_with_markup_is_shown_as_text(source):
    assert not is_inert_markdown(source)
    nb = notebook(nbformat.v4.new_markdown_cell(source))
    (note,) = make_inert(nb)
    assert "a markdown cell was shown as text" in note
    assert nb["cells"][0]["source"] == as_text(source)
    assert is_inert_markdown(nb["cells"][0]["source"])  # the fence renders as plain text


@pytest.mark.parametrize(
    "source",
    [
        "My answer: **the scale** keeps the variance at $1$, since $\\mathrm{Var}(q \\cdot k) = d_k$.",
        "A paragraph\n\n- a list\n- of `code`\n\n> a quote\n\n| a | b |\n|:--|--:|\n| 1 | 2 |",
        "a < b and c > d & e, [the paper](https://arxiv.org/abs/1706.03762)",
        "```python\n<script>not run: code</script>\n```",
    ],
)
def test_plain_markdown_stays_markdown(source):
    assert is_inert_markdown(source)
    nb = notebook(nbformat.v4.new_markdown_cell(source))
    assert make_inert(nb) == [] and nb["cells"][0]["source"] == source


def test_the_course_markdown_stays_as_it_is():
    hint = "<details><summary>Hint</summary>Look at the shapes.</details>"
    released = notebook(nbformat.v4.new_markdown_cell(hint))
    nb = notebook(nbformat.v4.new_markdown_cell(hint), nbformat.v4.new_markdown_cell(hint + "!"))
    (note,) = make_inert(nb, course_text(released))
    assert note.startswith("cell 2:")
    assert nb["cells"][0]["source"] == hint


def test_a_fence_longer_than_any_in_the_source():
    source = "<b>x</b>\n````\n<script>alert(1)</script>\n````"
    text = as_text(source)
    assert text.startswith("`````text\n") and text.endswith("\n`````")
    assert "&lt;script&gt;" in rendered_markdown(text)


def test_outputs_keep_text_rasters_plain_html_and_the_handout():
    outputs = [
        {"output_type": "stream", "name": "stdout", "text": "<b>printed</b>"},
        display({"image/png": PNG, "text/plain": "<Figure>"}, {"image/png": {"width": 640}}),
        display({"text/html": "<b>a table</b>", "text/plain": "table"}),
        display({HANDOUT: {"values": [1, 2]}}),
        {"output_type": "error", "ename": "ValueError", "evalue": "<b>", "traceback": ["x"]},
    ]
    nb = notebook(code(*copy.deepcopy(outputs), execution_count=3))
    assert make_inert(nb) == []
    assert nb["cells"][0]["outputs"] == outputs


@pytest.mark.parametrize(
    ("data", "note", "shown"),
    [
        (
            {"text/html": '<img src=x onerror="alert(1)">', "text/plain": "<HTML object>"},
            "an HTML output was shown as text",
            '<img src=x onerror="alert(1)">',
        ),
        ({"image/svg+xml": "<svg onload=x/>"}, "an SVG image was shown as text", "<svg onload=x/>"),
        (
            {"application/javascript": "alert(1)"},
            "a JavaScript output was shown as text",
            "alert(1)",
        ),
        ({"text/markdown": "[x](javascript:y)"}, "a markdown output was shown as text", None),
        ({"text/latex": "$\\href{x}{y}$"}, "a LaTeX output was shown as text", None),
        (
            {"application/vnd.jupyter.widget-view+json": {"model_id": "1"}, "text/plain": "HTML()"},
            "a widget was left out",
            "HTML()",
        ),
        ({"image/png": 'not base64 "><script>'}, "a image/png output was left out", ""),
    ],
)
def test_an_output_a_page_would_render_as_markup_is_shown_as_text(data, note, shown):
    nb = notebook(code(display(data)))
    (said,) = make_inert(nb)
    assert said == f"cell 1: {note}"
    (output,) = nb["cells"][0]["outputs"]
    assert set(output["data"]) == {"text/plain"}
    if shown is not None:
        assert output["data"]["text/plain"] == shown
    assert notes_of(nb) == [said]


def test_raster_metadata_keeps_only_a_size():
    metadata = {"image/png": {"width": 10, "height": "<b>", "isolated": True}, "x": "<b>"}
    nb = notebook(code(display({"image/png": PNG}, metadata)))
    make_inert(nb)
    assert nb["cells"][0]["outputs"][0]["metadata"] == {"image/png": {"width": 10}}


def test_ids_tags_attachments_raw_cells_and_notebook_metadata():
    cell = code()
    cell["id"] = 'x"><img src=x onerror=alert(1)>'  # set after nbformat built the cell
    cell.metadata["tags"] = ["skip-when-grading", '"><b>']
    markdown = nbformat.v4.new_markdown_cell("![plot](attachment:plot.png)")
    markdown["attachments"] = {
        "plot.png": {"image/png": PNG},
        "x.svg": {"image/svg+xml": "<svg onload=alert(1)/>"},
    }
    raw = nbformat.v4.new_raw_cell("<script>alert(1)</script>")
    raw.metadata["format"] = "text/html"
    nb = notebook(cell, markdown, raw, widgets={"state": "</script>"}, title="<b>")
    notes = make_inert(nb)
    assert nb["cells"][0]["id"] == "inert-0"
    assert nb["cells"][0]["metadata"]["tags"] == ["skip-when-grading"]
    assert nb["cells"][1]["attachments"] == {"plot.png": {"image/png": PNG}}
    assert nb["cells"][1]["source"] == "![plot](attachment:plot.png)"  # its image is inert
    assert "format" not in nb["cells"][2]["metadata"]
    assert set(nb["metadata"]) == {"autograder"}  # widgets and title out, the notes in
    assert len(notes) == 6, notes


def test_it_is_idempotent_and_the_notes_add_up(tmp_path):
    nb = notebook(
        nbformat.v4.new_markdown_cell("<script>x</script>"),
        code(display({"text/html": "<script>y</script>"})),
    )
    first = make_inert(nb)
    assert len(first) == 2 and make_inert(nb) == []
    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps(nb))
    assert make_inert_file(path, set()) is False
    nb["cells"][1]["outputs"] = [display({"text/html": "<script>z</script>"})]
    path.write_text(json.dumps(nb))
    assert make_inert_file(path, set()) is True
    assert len(notes_of(json.loads(path.read_text()))) == 2  # the same note once


def test_the_feedback_math_never_writes_a_students_link_or_style():
    for latex in ("\\href{javascript:alert(1)}{x}", "\\style{color:red}{x}", "\\class{a}{x}"):
        mathml = latex_to_mathml(latex)
        assert mathml.startswith('<code class="math-source">'), mathml
        assert "href=" not in mathml and "style=" not in mathml


# --- issue 59: the formgrader's controls, paths that failed open, linear time -------------

# A payload that took over the formgrader's controls of a test cell: its grade id as an
# element id, and a button of the class the formgrader binds "full credit" to.
CONTROLS = (
    '<div class="nbgrader_cell"><h6 id="test_attention_masked">x</h6>'
    '<div class="full-credit">click here to load the figure</div></div>'
)


def _rendered(nb) -> str:
    """Every part of ``nb`` a page renders as HTML, as nbconvert renders it."""
    parts = []
    for cell in nb["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "markdown":
            parts.append(rendered_markdown(source, cell.get("attachments")))
        elif cell["cell_type"] == "raw":
            parts.append(source)  # nbconvert renders a raw cell without a format as HTML
        for output in cell.get("outputs", []):
            parts.append(output.get("data", {}).get("text/html", ""))
    return "\n".join(parts)


def _no_control(html: str) -> None:
    """No element of ``html`` (text aside) has an id, a heading's tag or a class outside
    Pygments' highlighting."""
    for tag in re.findall(r"<[^>]*>", html):
        assert "id=" not in tag and not re.match(r"</?h\d", tag), tag
        for classes in re.findall(r'class="([^"]*)"', tag):
            assert set(classes.split()) <= CODE_CLASSES, tag


@pytest.mark.parametrize("where", ["markdown", "html output", "raw", "raw html"])
def test_no_markup_of_a_students_takes_over_a_test_cells_controls(where):
    if where == "markdown":
        cell = nbformat.v4.new_markdown_cell(CONTROLS)
    elif where == "html output":
        cell = code(display({"text/html": CONTROLS, "text/plain": "<HTML>"}))
    else:
        cell = nbformat.v4.new_raw_cell(CONTROLS)
        if where == "raw html":
            cell.metadata["format"] = "text/html"
    nb = notebook(cell)
    (note,) = make_inert(nb)
    assert "shown as text" in note, note
    _no_control(_rendered(nb))
    assert make_inert(nb) == []  # idempotent


def test_a_raw_cell_becomes_markdown_that_shows_it_as_text():
    raw = nbformat.v4.new_raw_cell("<b>x</b>")
    nb = notebook(raw)
    make_inert(nb)
    (cell,) = nb["cells"]
    assert cell["cell_type"] == "markdown" and cell["source"] == as_text("<b>x</b>")
    nbformat.validate(nbformat.from_dict(nb))


def test_the_course_raw_cell_stays_raw():
    released = notebook(nbformat.v4.new_raw_cell("course text"))
    nb = notebook(nbformat.v4.new_raw_cell("course text"))
    assert make_inert(nb, course_text(released)) == []
    assert nb["cells"][0]["cell_type"] == "raw"


@pytest.mark.parametrize(
    "source",
    [
        "#### test_attention_masked",
        "test_attention_masked\n---------------------",
        "My answer\n\n# test_attention_masked-comment",
        "```full-credit\nx\n```",  # nbconvert: class="language-full-credit"
        "- [ ] a task",  # nbconvert: class="task-list-item"
    ],
)
def test_a_heading_or_a_class_of_a_students_markdown_is_shown_as_text(source):
    """nbconvert gives a heading an id made of its text, which could be a grade id: the
    formgrader's score box would no longer be found (what is typed there is not saved)."""
    nb = notebook(nbformat.v4.new_markdown_cell(source))
    (note,) = make_inert(nb)
    assert "a markdown cell was shown as text" in note
    html = _rendered(nb)
    assert "id=" not in html and "<h" not in html and "language-" not in html, html


def test_a_fence_that_only_looks_like_as_text_is_checked_like_any_markdown():
    source = "```text\nx\n```\n<div class=full-credit>x</div>\n```"
    nb = notebook(nbformat.v4.new_markdown_cell(source))
    (note,) = make_inert(nb)
    assert "a markdown cell was shown as text" in note
    _no_control(_rendered(nb))


@pytest.mark.parametrize("source", ["<![ x", "a <![ x", "<![CDATA[x", "<b>x</b><![ x"])
def test_a_declaration_html_parser_would_raise_on_is_text(source):
    nb = notebook(nbformat.v4.new_markdown_cell(source))
    make_inert(nb)
    assert "<![" not in _rendered(nb)


def test_an_nbformat_3_notebook_is_converted_then_made_inert(tmp_path):
    payload = '<img src="x" onerror="alert(1)">'
    v3 = nbformat.v3.new_notebook(
        worksheets=[
            nbformat.v3.new_worksheet(
                cells=[
                    nbformat.v3.new_text_cell("markdown", source=payload),
                    nbformat.v3.new_code_cell(
                        input="x = 1",
                        outputs=[nbformat.v3.new_output("display_data", output_html=payload)],
                    ),
                ]
            )
        ]
    )
    nb = json.loads(nbformat.writes(v3, version=3))
    notes = make_inert(nb)
    assert notes[0] == "the notebook was converted from nbformat 3 to 4"
    assert nb["nbformat"] == 4 and len(notes) == 3, notes  # the markdown, the HTML output
    _no_control(_rendered(nb))
    assert not any("onerror" in tag for tag in re.findall(r"<[^>]*>", _rendered(nb)))
    nbformat.validate(nbformat.from_dict(nb))
    path = tmp_path / "old.ipynb"
    path.write_text(nbformat.writes(v3, version=3))
    assert make_inert_file(path, set()) is True
    assert json.loads(path.read_text())["nbformat"] == 4


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[1, 2]",
        '{"nbformat": 4, "cells": "x"}',
        '{"nbformat": 5, "cells": []}',
        '{"nbformat": 3, "worksheets": 7}',
        "[" * 100_000 + "]" * 100_000,  # deeper than json or Python recurses
    ],
)
def test_what_is_not_a_notebook_becomes_a_placeholder(tmp_path, text):
    path = tmp_path / "bad.ipynb"
    path.write_text(text)
    assert make_inert_file(path, set()) is True  # never raises
    nb = json.loads(path.read_text())
    nbformat.validate(nbformat.from_dict(nb))
    assert "could not be read" in notes_of(nb)[0]
    assert make_inert_file(path, set()) is False


def test_a_cell_that_cannot_be_checked_becomes_a_placeholder(monkeypatch):
    from autograder import inert

    def broken(*args):
        raise RuntimeError("boom")

    monkeypatch.setattr(inert, "is_inert_markdown", broken)
    monkeypatch.setattr(inert, "_inert_bundle", broken)
    test = code(display({"text/html": CONTROLS}), execution_count=1)
    test.metadata["nbgrader"] = {"grade_id": "test_x", "grade": True, "points": 1}
    nb = notebook(nbformat.v4.new_markdown_cell(CONTROLS), test, {"cell_type": "odd"}, 7)
    notes = make_inert(nb)
    assert len(notes) == 4, notes
    markdown, test, odd, seven = nb["cells"]
    assert markdown["source"] == odd["source"] == seven["source"] == inert.NOT_SHOWN
    assert test["source"] == "x = 1" and test["metadata"]["nbgrader"]["grade_id"] == "test_x"
    assert test["outputs"][0]["output_type"] == "stream"
    _no_control(_rendered(nb))


def test_an_oversized_markdown_cell_is_cut_and_shown_as_text_quickly():
    import time

    source = ("<b " * 700_000)[:2_000_000]  # html.parser: the square of its length
    nb = notebook(nbformat.v4.new_markdown_cell(source))
    started = time.perf_counter()
    (note,) = make_inert(nb)
    assert time.perf_counter() - started < 30
    assert "of 2,000,000 characters was shown as text, cut to its start" in note
    assert len(nb["cells"][0]["source"]) < 200_000
    assert make_inert(nb) == []


@pytest.mark.parametrize("piece", ["<b ", "<a b='", "<a\n", "<!--", "**_", "[a](", "> "])
def test_the_checks_take_time_linear_in_the_length(piece):
    """Twice the text takes well under four times as long (html.parser took the square)."""
    import time

    def seconds(n):
        source = (piece * n)[:n]
        nb = notebook(
            nbformat.v4.new_markdown_cell(source),
            code(display({"text/html": source, "text/plain": ""})),
        )
        started = time.perf_counter()
        make_inert(nb)
        return time.perf_counter() - started

    seconds(1000)  # warm up: imports, compiled patterns
    small, large = seconds(40_000), seconds(160_000)
    assert large < 12 * small + 0.5, (small, large)


def test_an_oversized_output_is_cut():
    text = "x" * 3_000_000
    nb = notebook(code({"output_type": "stream", "name": "stdout", "text": text}))
    (note,) = make_inert(nb)
    assert note == "cell 1: an output of 3,000,000 characters was cut to its start"
    assert len(nb["cells"][0]["outputs"][0]["text"]) <= 500_000
    assert make_inert(nb) == []
