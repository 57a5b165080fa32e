"""Tell readers of an exercise notebook's page how to run it.

The pages under ``notebooks/`` show each student notebook as released: not executed, so
no plot, widget or test result appears on them. This extension puts a note under the
title of each such page, when the book is built (the notebooks themselves stay as
nbgrader generates them): where to get the notebook (the page's download button, or the
student kit) and the set-up command of the README's "Quick start: students".

Beside each notebook the site offers the student kit of its chapter: the kit a class
receives while that chapter is open (``python -m autograder kit --through CHAPTER``, built
into ``_kits/<chapter>/`` of the site when the book is built). It holds the notebooks of
that chapter and the earlier ones, the package and the recorded values they need, and no
answer of that chapter or a later one (``tests/test_kit.py`` checks each such kit).

Registered in ``_config.yml`` under ``sphinx: local_extensions``.
"""

import shutil
import sys
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx

ROOT = Path(__file__).resolve().parents[2]
KITS = "_kits"  # the site's folder of kits, one per chapter

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


def kit_name(chapter: str) -> str:
    """The file name of the kit through ``chapter`` (as ``autograder/kit.py`` names it)."""
    sys.path.insert(0, str(ROOT))
    from autograder import kit

    last = chapter == kit.ALL_CHAPTERS[-1]
    return f"{kit.DISTRIBUTION}-{kit.version()}{'' if last else f'-through-{chapter}'}.zip"


def run_note(docname: str) -> nodes.admonition:
    path = f"{docname}.ipynb"
    chapter = docname.split("/")[1]
    depth = docname.count("/")
    kit_zip = f"{'../' * depth}{KITS}/{chapter}/{kit_name(chapter)}"
    note = nodes.admonition(classes=["note", "run-this-notebook"])
    note += nodes.title(text="Run this notebook yourself")
    link = nodes.reference(
        "", "", nodes.Text(f"the course kit of this chapter ({kit_name(chapter)})"), refuri=kit_zip
    )
    intro = _paragraph(
        "This page shows the exercise notebook as it is handed out, not run: its plots, "
        "explorers and test results appear when you run it. Download ",
    )
    intro += link
    intro += nodes.Text(
        ": a zip of the course's package, this notebook and the earlier chapters' notebooks, "
        "as your instructor hands it out; or get the notebook alone with the download button "
        "at the top of this page (.ipynb) and open "
    )
    intro += nodes.literal(text=path)
    intro += nodes.Text(" in a kit you already have.")
    note += intro
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


def build_kits(app: Sphinx, exception) -> None:
    """Put the kit of each chapter whose notebook the site shows into ``_kits/<chapter>/``."""
    if exception is not None or app.builder.format != "html":
        return
    sys.path.insert(0, str(ROOT))
    from autograder import kit

    shown = sorted({d.split("/")[1] for d in app.env.found_docs if d.startswith("notebooks/")})
    for chapter in shown:
        folder = Path(app.outdir) / KITS / chapter
        built = kit.build(Path(app.outdir) / KITS / f".build-{chapter}", chapter)
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(built["zip"], folder / kit_name(chapter))
        shutil.rmtree(built["zip"].parent)


def setup(app: Sphinx) -> dict:
    app.connect("doctree-resolved", add_run_note)
    app.connect("build-finished", build_kits)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
