"""Submissions whose notebooks hold markup: no script of a student's runs in a page that
shows their work (issue 34; ``autograder/inert.py``).

One class of chapter 04, graded in the sandbox: ``correct`` (the solution) and
``untouched`` (as released), the controls, and a student for each way in, each the
solution plus the payload, so that each should earn full marks:

- ``html``: an HTML output with an ``onerror`` handler and a ``<script>``;
- ``svg``: an SVG output with ``onload``;
- ``javascript``: an ``application/javascript`` output;
- ``markdown``: a markdown cell of the student's with raw HTML, a ``<script>``, a
  ``javascript:`` link and an image from the Jupyter API;
- ``widget``: an ipywidgets HTML widget whose value closes the widget state's
  ``<script>`` element and opens one of its own;
- ``names``: the notebook handed in under a file name with markup (the only notebook in
  its folder), with a cell id and a tag with markup;
- ``old_format``: the solution with the markdown payload, handed in as nbformat 3 (issue 59:
  staging once failed on it and copied it as it was).

And one student whose code fails a test, ``controls`` (issue 59), whose markup tries to
take over that test cell's controls in the formgrader (which finds a cell's score box by the
element id ``#<grade id>`` and its button by the class ``.full-credit``): a ``div`` of the
class ``nbgrader_cell`` with an ``h6`` whose id is the grade id and a ``div`` of the class
``full-credit`` dressed as a notice, in a markdown cell, an HTML output and a raw cell; a
markdown heading whose text is the grade id; and a markdown cell of ``<![ x``, on which
Python's html.parser raised. A score the instructor types in that cell's box must land in
that cell, and the page must have one full-credit button per graded cell.

Each payload, if it ran, would mark the page (``data-pwned`` on ``<html>``) and ask the
Jupyter API for ``/api/contents?pwned=<name>``. The class is then opened as an instructor
and a student would: every submission in nbgrader's formgrader (``python -m autograder
review``'s server) and in the server's nbconvert view of the graded notebook, every feedback
page and the class report, in Debian's chromium. No page may be marked, and no request of
the student's content may leave a page.
"""

import json
import subprocess
import sys
import urllib.request

import nbformat
import pytest
from browser import chromium, launch
from bwrap import require_bwrap

from attention_course.handout import MIME_TYPE as HANDOUT
from autograder.outfolder import CELLS_CSV, GRADES_CSV, Out, read_csv
from autograder.submissions import mutate, solved_notebook, untouched_notebook, write_submission

pytestmark = pytest.mark.slow

CHAPTER = "04_dot_product_attention"
TOKEN = "test-markup-token"
FULL_MARKS = "19"
MARK = "pwned"


def js(name: str) -> str:
    """What a payload runs: a mark on the page and a request to the Jupyter API."""
    return f"document.documentElement.dataset.{MARK}='{name}';fetch('/api/contents?{MARK}={name}')"


def _cell(nb, grade_id: str):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def with_output(root, code: str):
    """The solution with ``code`` run at the end of an exercise's cell."""
    nb = solved_notebook(root, CHAPTER)
    cell = _cell(nb, "padding_mask")
    cell.source += "\n\n" + code
    return nb


def html_output(root):
    markup = f'<img src="x" onerror="{js("html-onerror")}"><script>{js("html-script")}</script>'
    return with_output(
        root, f"from IPython.display import HTML, display\ndisplay(HTML({markup!r}))"
    )


def svg_output(root):
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" onload="{js("svg")}">'
        '<rect width="10" height="10"/></svg>'
    )
    return with_output(root, f"from IPython.display import SVG, display\ndisplay(SVG({svg!r}))")


def javascript_output(root):
    return with_output(
        root, f"from IPython.display import Javascript, display\ndisplay(Javascript({js('js')!r}))"
    )


def markdown_cell(root):
    nb = solved_notebook(root, CHAPTER)
    answer = (
        "My answer, with some **bold**:\n\n"
        f'<img src="x" onerror="{js("md-onerror")}">\n\n'
        f"<script>{js('md-script')}</script>\n\n"
        f"A [link](javascript:{js('md-link')}) and ![an image](/api/contents?{MARK}=md-image)"
    )
    at = nb.cells.index(_cell(nb, "padding_mask"))
    nb.cells.insert(at + 1, nbformat.v4.new_markdown_cell(answer))
    return nb


def widget_output(root):
    value = f'</script><script>{js("widget-state")}</script><img src="x" onerror="{js("widget")}">'
    return with_output(root, f"import ipywidgets\ndisplay(ipywidgets.HTML({value!r}))")


# no "/" in a file name: this payload only marks the page
FILE_NAME = "<img src=x onerror=\"document.documentElement.dataset.pwned='file'\">.ipynb"


def write_names(root, submissions):
    """The solution under a file name with markup, a cell id and a tag with markup."""
    nb = json.loads(nbformat.writes(solved_notebook(root, CHAPTER)))
    for cell in nb["cells"]:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "padding_mask":
            cell["id"] = f'x"><img src=x onerror="{js("cell-id")}">'
            cell["metadata"]["tags"] = [f'"><img src=x onerror="{js("tag")}">']
    folder = submissions / "names" / CHAPTER
    folder.mkdir(parents=True)
    (folder / FILE_NAME).write_text(json.dumps(nb), encoding="utf-8")


# The formgrader's hooks of a test cell, in a student's markup (issue 59).
FAILED_TEST = "test_attention_masked"
CONTROLS = (
    f'<div class="nbgrader_cell"><h6 id="{FAILED_TEST}">Figure</h6>'
    '<div class="full-credit">Click here to load the figure</div></div>'
)


def controls_notebook(root):
    """The solution whose attention gives NaN, not zeros, for a row with no allowed key
    (``test_attention_masked`` fails), with markup that reaches for that cell's controls."""
    nb = mutate(
        solved_notebook(root, CHAPTER),
        "scaled_dot_product_attention",
        "    weights = torch.nan_to_num(weights, nan=0.0)",
        "    pass",
    )
    cell = _cell(nb, "padding_mask")
    cell.source += f"\n\nfrom IPython.display import HTML, display\ndisplay(HTML({CONTROLS!r}))"
    at = nb.cells.index(cell) + 1
    nb.cells[at:at] = [
        nbformat.v4.new_markdown_cell(CONTROLS),
        nbformat.v4.new_raw_cell(CONTROLS),
        nbformat.v4.new_markdown_cell(f"#### {FAILED_TEST}"),
        nbformat.v4.new_markdown_cell("<![ x"),
    ]
    return nb


def write_old_format(root, submissions):
    """The markdown student's notebook, in nbformat 3."""
    nb = nbformat.reads(nbformat.writes(markdown_cell(root)), as_version=4)
    folder = submissions / "old_format" / CHAPTER
    folder.mkdir(parents=True)
    text = nbformat.writes(nbformat.convert(nb, 3), version=3)
    (folder / f"{CHAPTER}.ipynb").write_text(text, encoding="utf-8")


HOSTILE = {
    "html": html_output,
    "svg": svg_output,
    "javascript": javascript_output,
    "markdown": markdown_cell,
    "widget": widget_output,
}


@pytest.fixture(scope="module")
def graded(root, tmp_path_factory):
    require_bwrap()
    path = chromium()  # before grading: skips (fails under CI) without chromium
    submissions = tmp_path_factory.mktemp("markup-submissions")
    out = tmp_path_factory.mktemp("markup-graded")
    write_submission(solved_notebook(root, CHAPTER), submissions, "correct", CHAPTER)
    write_submission(untouched_notebook(root, CHAPTER), submissions, "untouched", CHAPTER)
    for student, make in HOSTILE.items():
        write_submission(make(root), submissions, student, CHAPTER)
    write_names(root, submissions)
    write_old_format(root, submissions)
    write_submission(controls_notebook(root), submissions, "controls", CHAPTER)
    command = [sys.executable, "-m", "autograder", "grade", str(submissions), "--out", str(out)]
    result = subprocess.run(
        command + ["--workers", "2"], cwd=root, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return {"out": out, "chromium": path, "stdout": result.stdout}


def test_the_controls_and_every_payload_score_as_their_code_earns(graded):
    totals = {r["student"]: r[CHAPTER] for r in read_csv_dicts(graded["out"] / GRADES_CSV)}
    assert totals["correct"] == FULL_MARKS and totals["untouched"] == "0"
    for student in [*HOSTILE, "names", "old_format"]:
        assert totals[student] == FULL_MARKS, (student, totals)
    statuses = {(r.student, r.cell): r.status for r in read_csv(graded["out"] / CELLS_CSV)}
    assert all(s == "graded" for (student, _), s in statuses.items() if student != "untouched")
    points = {
        r.cell: r.points for r in read_csv(graded["out"] / CELLS_CSV) if r.student == "controls"
    }
    assert points[FAILED_TEST] == 0 and float(totals["controls"]) < float(FULL_MARKS), points


def read_csv_dicts(path):
    import csv

    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_the_graded_notebooks_hold_no_markup_of_the_students(graded):
    out = Out(graded["out"])
    for student in [*HOSTILE, "names", "old_format", "controls"]:
        text = out.autograded(student, CHAPTER).read_text(encoding="utf-8")
        for where in (text, out.submitted(student, CHAPTER).read_text(encoding="utf-8")):
            nb = json.loads(where)
            for cell in nb["cells"]:
                for output in cell.get("outputs", []):
                    rich = set(output.get("data", {})) - {"text/plain", "image/png", HANDOUT}
                    assert not rich, (student, rich)
                assert cell["cell_type"] != "raw", student
            assert "widgets" not in nb["metadata"], student


def test_the_feedback_says_what_was_shown_as_text(graded):
    out = Out(graded["out"])
    said = {
        "html": "an HTML output was shown as text",
        "svg": "an SVG image was shown as text",
        "javascript": "a JavaScript output was shown as text",
        "markdown": "a markdown cell was shown as text",
        "widget": "a widget was left out",
        "names": "its id held characters a page could read as markup",
        "old_format": "a markdown cell was shown as text",
        "controls": "a raw cell was shown as text",
    }
    for student, note in said.items():
        page = out.feedback(student, CHAPTER).read_text(encoding="utf-8")
        assert note in page, (student, note)
    assert "Shown as text" not in out.feedback("correct", CHAPTER).read_text(encoding="utf-8")


def _watch(page, seen: list):
    """Record every request with the mark, and any dialog, of ``page``."""
    page.on("request", lambda r: seen.append(r.url) if MARK in r.url else None)
    page.on("dialog", lambda d: (seen.append(f"dialog: {d.message}"), d.dismiss()))


def _marked(page) -> str | None:
    page.wait_for_timeout(300)  # an onerror fires once the image fails: give it the time
    return page.evaluate(f"document.documentElement.dataset.{MARK} || null")


def test_no_payload_runs_in_the_formgrader_the_feedback_or_the_report(root, graded):
    from nbgrader.api import Gradebook
    from playwright.sync_api import sync_playwright

    from autograder.formgrader import Server, gradebook_url
    from autograder.nbgrader_settings import COURSE_ID

    out = Out(graded["out"])
    url = gradebook_url(out, None)
    with Gradebook(url, COURSE_ID) as gb:
        students = [*HOSTILE, "names", "old_format", "controls"]
        ids = {s: gb.find_submission_notebook(CHAPTER, CHAPTER, s).id for s in students}
    with Server(out, url, token=TOKEN) as server, sync_playwright() as playwright:
        browser = launch(playwright, graded["chromium"])
        try:
            pages = {}
            for student, notebook in ids.items():
                pages[f"formgrader: {student}"] = (
                    f"{server.base}/formgrader/submissions/{notebook}/?token={TOKEN}"
                )
                for step in ("autograded", "submitted"):
                    pages[f"nbconvert {step}: {student}"] = (
                        f"{server.base}/nbconvert/html/{step}/{student}/{CHAPTER}/"
                        f"{CHAPTER}.ipynb?download=false&token={TOKEN}"
                    )
                if out.feedback(student, CHAPTER).is_file():  # names's is asserted above
                    pages[f"feedback: {student}"] = out.feedback(student, CHAPTER).as_uri()
            pages["report"] = (out / "report" / "index.html").as_uri()
            ran = {}
            for name, address in pages.items():
                page, seen = browser.new_page(), []
                _watch(page, seen)
                answer = page.goto(address)
                if answer is not None and not answer.ok:  # a page that shows nothing
                    ran[name] = f"HTTP {answer.status}"
                mark = _marked(page)
                links = page.locator("a[href^='javascript:' i]").count()
                if mark or seen or links:
                    ran[name] = f"marked {mark!r}; requests {seen}; javascript: links {links}"
                page.close()
        finally:
            browser.close()
        # the server answered nothing to a payload: no request with the mark reached it
        status = f"{server.base}/api/status?token={TOKEN}"
        with urllib.request.urlopen(status, timeout=10) as answer:
            assert answer.status == 200
    assert not ran, ran


def test_a_students_markup_takes_over_no_control_of_the_formgrader(graded):
    """The formgrader of ``controls``: one full-credit button per graded cell, no element
    with a grade id but nbgrader's own score box, and a score typed in the failed test's box
    saved to that test cell (issue 59: the student's notice once took the box's place)."""
    from nbgrader.api import Gradebook
    from playwright.sync_api import sync_playwright

    from autograder.formgrader import Server, gradebook_url
    from autograder.nbgrader_settings import COURSE_ID

    out = Out(graded["out"])
    url = gradebook_url(out, None)
    with Gradebook(url, COURSE_ID) as gb:
        notebook = gb.find_submission_notebook(CHAPTER, CHAPTER, "controls")
        submission, graded_cells = notebook.id, len(notebook.grades)
        assert gb.find_grade(FAILED_TEST, CHAPTER, CHAPTER, "controls").score == 0
    with Server(out, url, token=TOKEN) as server, sync_playwright() as playwright:
        browser = launch(playwright, graded["chromium"])
        try:
            page = browser.new_page()
            page.set_default_timeout(90_000)
            page.goto(f"{server.base}/formgrader?token={TOKEN}")  # signs in: its cookie
            page.goto(f"{server.base}/formgrader/submissions/{submission}/")
            page.wait_for_function(
                "() => window.formgrader && formgrader.grades && formgrader.grades.loaded"
                " && formgrader.comments && formgrader.comments.loaded"
            )
            names = page.evaluate("formgrader.grades.map(g => g.get('name'))")
            assert len(names) == graded_cells and FAILED_TEST in names
            assert page.locator(".full-credit").count() == graded_cells
            assert page.locator(".nbgrader_cell").count() >= graded_cells
            for name in names:  # the only element of each grade id: nbgrader's score box
                assert page.locator(f'[id="{name}"]').count() == 1, name
                assert page.locator(f'input.score[id="{name}"]').count() == 1, name
            assert page.locator("h1, h2, h3, h4, h5, h6").filter(has_text=FAILED_TEST).count() == 0
            box = page.locator(f'input.score[id="{FAILED_TEST}"]')
            with page.expect_response(
                lambda r: "/api/grade/" in r.url and r.request.method == "PUT"
            ) as answer:
                box.click()
                box.press_sequentially("1")
                box.press("Tab")
            assert answer.value.json()["name"] == FAILED_TEST
            page.close()
        finally:
            browser.close()
    with Gradebook(url, COURSE_ID) as gb:
        grade = gb.find_grade(FAILED_TEST, CHAPTER, CHAPTER, "controls")
        assert grade.manual_score == 1.0 and grade.score == 1.0
        others = [g for g in gb.find_submission_notebook(CHAPTER, CHAPTER, "controls").grades]
        assert all(g.manual_score is None for g in others if g.name != FAILED_TEST)
