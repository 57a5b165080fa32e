"""Tell readers of an exercise notebook's page how to run it.

The pages under ``notebooks/`` show each student notebook as released: not executed, so
no plot, widget or test result appears on them. This extension puts a note under the
title of each such page, when the book is built (the notebooks themselves stay as
nbgrader generates them): where to get the notebook (the page's download button, or the
student kit) and the set-up command of the README's "Quick start: students".

Registered in ``_config.yml`` under ``sphinx: local_extensions``.
"""

from docutils import nodes
from sphinx.application import Sphinx

# The README's set-up command (tests/test_book.py checks that the README still says it).
SETUP = "python3.11 -m venv course && course/bin/pip install attention_course_kit-*.whl"
START = "course/bin/jupyter lab"


def _paragraph(*parts) -> nodes.paragraph:
    """A paragraph of text and ``("code", text)`` literals."""
    paragraph = nodes.paragraph()
    for part in parts:
        if isinstance(part, tuple):
            paragraph += nodes.literal(text=part[1])
        else:
            paragraph += nodes.Text(part)
    return paragraph


def run_note(docname: str) -> nodes.admonition:
    path = f"{docname}.ipynb"
    note = nodes.admonition(classes=["note", "run-this-notebook"])
    note += nodes.title(text="Run this notebook yourself")
    note += _paragraph(
        "This page shows the exercise notebook as it is handed out, not run: its plots, "
        "explorers and test results appear when you run it. Get it with the download "
        "button at the top of this page (.ipynb), or open ",
        ("code", path),
        " in the course kit your instructor hands out (a zip of the course's package and "
        "its notebooks).",
    )
    note += _paragraph(
        "Set up once, in the kit's folder (Python 3.11): ",
        ("code", SETUP),
        ", then start ",
        ("code", START),
        " and open the notebook. Fill in each function where it says ",
        ("code", "raise NotImplementedError"),
        " and run the test cell below it.",
    )
    return note


def add_run_note(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    if not docname.startswith("notebooks/"):
        return
    section = next(iter(doctree.findall(nodes.section)), None)
    if section is None:
        return
    title = next((i for i, child in enumerate(section) if isinstance(child, nodes.title)), -1)
    section.insert(title + 1, run_note(docname))


def setup(app: Sphinx) -> dict:
    app.connect("doctree-resolved", add_run_note)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
