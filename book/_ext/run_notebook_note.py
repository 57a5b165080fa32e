"""Tell readers of an exercise notebook's page how to run it, and host the kits of the
chapters that are open.

The pages under ``notebooks/`` show each student notebook as released: not executed, so
no plot, widget or test result appears on them. This extension puts a note under the
title of each such page, when the book is built (the notebooks themselves stay as
nbgrader generates them): where to get the notebook (the page's download button, or the
student kit) and the set-up command of the README's "Quick start: students".

Which chapters are open is a setting of the site, ``course_open_through`` in
``_config.yml`` (under ``sphinx: config:``; registered here): the id of the last chapter
open to the class, or ``all``. The site hosts the kit of each open chapter, the kit a class
receives while that chapter is open (``python -m autograder kit --through CHAPTER``, built
into ``_kits/<chapter>/`` of the site when the book is built): the notebooks of that chapter
and the earlier ones, the package and the recorded values they need, and no answer of that
chapter or a later one (``tests/test_kit.py`` checks each such kit). A later chapter's kit
holds code handed out from the earlier chapters, and its notebook may give an earlier
exercise as a ready cell: their answers. So a chapter not open yet gets no kit, and its page
keeps its title and a note that the notebook and the kit come when the chapter opens; its
cells, its download links and its copy of the notebook (``_sources/``) are left out.

``all`` (the setting of this repository: the public site, for self-study) opens every
chapter, and each kit's note says that later kits hold the earlier chapters' answers.

Registered in ``_config.yml`` under ``sphinx: local_extensions``.
"""

import shutil
import sys
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util import logging

ROOT = Path(__file__).resolve().parents[2]
KITS = "_kits"  # the site's folder of kits, one per open chapter
SETTING = "course_open_through"  # _config.yml, sphinx: config:
ALL = "all"

# The README's set-up command (tests/test_book.py checks that the README still says it).
INSTALL = (
    "course/bin/pip install --extra-index-url https://download.pytorch.org/whl/cpu "
    "attention_course_kit-*.whl"
)
SETUP = f"python3.11 -m venv course && {INSTALL}"
START = "course/bin/jupyter lab"

logger = logging.getLogger(__name__)


def _kit():
    sys.path.insert(0, str(ROOT))
    from autograder import kit

    return kit


def _paragraph(*parts) -> nodes.paragraph:
    """A paragraph of text and ``("code", text)`` literals."""
    paragraph = nodes.paragraph()
    for part in parts:
        if isinstance(part, tuple):
            paragraph += nodes.literal(text=part[1])
        else:
            paragraph += nodes.Text(part)
    return paragraph


def open_chapters(setting: str) -> tuple[str, ...]:
    """The chapters open on the site: every chapter up to ``setting``, or all of them."""
    chapters = _kit().ALL_CHAPTERS
    if setting == ALL:
        return tuple(chapters)
    if setting not in chapters:
        raise ExtensionError(
            f"_config.yml, sphinx: config: {SETTING}: {setting!r} is neither a chapter nor "
            f"{ALL!r}: the last chapter open to the class ({', '.join(chapters)}), or {ALL!r} "
            "for a site of every chapter (self-study)"
        )
    return tuple(chapters[: chapters.index(setting) + 1])


def kit_name(chapter: str) -> str:
    """The file name of the kit through ``chapter`` (as ``autograder/kit.py`` names it)."""
    return _kit().zip_name(chapter)


def _chapter(docname: str) -> str:
    return docname.split("/")[1]


def run_note(docname: str, setting: str = ALL) -> nodes.admonition:
    """The note atop the page ``notebooks/<chapter>/<chapter>``: the chapter's kit and how
    to set it up, or, for a chapter not open yet, that they come when it opens."""
    chapter = _chapter(docname)
    if chapter not in open_chapters(setting):
        note = nodes.admonition(classes=["note", "run-this-notebook", "not-open-yet"])
        note += nodes.title(text="This chapter is not open yet")
        note += _paragraph(
            "Its exercise notebook and its course kit come when your instructor opens the "
            "chapter: until then this page holds neither, since a chapter's notebook and kit "
            "may hold the answers of the chapters before it."
        )
        return note
    path = f"{docname}.ipynb"
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
    note += _paragraph(
        "Already set up with an earlier chapter's kit? Unzip this one into a folder of its "
        "own (its copies of the earlier notebooks must not overwrite your work) and run the "
        "same ",
        ("code", "pip install"),
        " there with the environment you have (",
        ("code", "../<first kit's folder>/" + INSTALL),
        "): it replaces the earlier kit in seconds and keeps torch.",
    )
    if setting == ALL:
        note += _paragraph(
            "Every chapter is open on this site, for self-study. A later chapter's kit holds "
            "the answers of the earlier chapters it builds on (the code the course hands out "
            "from them, and cells of its notebook ready-made): do the chapters in order, and "
            "take each chapter's kit once you have done the chapters before it."
        )
    return note


def _withhold(section: nodes.section) -> None:
    """Leave the title of a closed chapter's notebook page, and nothing of its cells."""
    for child in list(section.children):
        if not isinstance(child, nodes.title):
            section.remove(child)


def add_run_note(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    if not docname.startswith("notebooks/"):
        return
    section = next(iter(doctree.findall(nodes.section)), None)
    if section is None:
        return
    setting = app.config[SETTING]
    if _chapter(docname) not in open_chapters(setting):
        _withhold(section)
        for other in list(doctree.children):
            if other is not section and not isinstance(other, nodes.target):
                doctree.remove(other)
    title = next((i for i, child in enumerate(section) if isinstance(child, nodes.title)), -1)
    section.insert(title + 1, run_note(docname, setting))


def _closed_page(app: Sphinx, pagename: str) -> bool:
    return pagename.startswith("notebooks/") and _chapter(pagename) not in open_chapters(
        app.config[SETTING]
    )


def drop_download_links(app: Sphinx, pagename, templatename, context, doctree) -> None:
    """A closed chapter's page offers no download of its notebook or its source (the
    theme's buttons, added at priority 501); printing the page stays."""
    if not _closed_page(app, pagename):
        return
    dropped = {"download-notebook-button", "download-source-button"}
    for button in context.get("header_buttons", []):
        if button.get("label") == "download-buttons":
            button["buttons"] = [b for b in button["buttons"] if b.get("label") not in dropped]


def check_setting(app: Sphinx) -> None:
    """Stop the build at once on a setting that names no chapter, and say what is open."""
    setting = app.config[SETTING]
    chapters = open_chapters(setting)
    if setting == ALL:
        logger.info(f"{SETTING}: every chapter is open (self-study); the site hosts every kit")
    else:
        logger.info(f"{SETTING}: chapters {chapters[0]} .. {chapters[-1]} are open; kits of those")


def shown_chapters(app: Sphinx) -> list[str]:
    return sorted({_chapter(d) for d in app.env.found_docs if d.startswith("notebooks/")})


def build_kits(app: Sphinx, exception) -> None:
    """Put the kit of each open chapter whose notebook the site shows into
    ``_kits/<chapter>/``; of a chapter not open, leave no kit and no copy of its notebook."""
    if exception is not None or app.builder.format != "html":
        return
    kit = _kit()
    opened = open_chapters(app.config[SETTING])
    outdir = Path(app.outdir)
    for chapter in shown_chapters(app):
        folder = outdir / KITS / chapter
        shutil.rmtree(folder, ignore_errors=True)  # a kit of an earlier build
        if chapter not in opened:
            shutil.rmtree(outdir / "_sources" / "notebooks" / chapter, ignore_errors=True)
            continue
        built = kit.build(outdir / KITS / f".build-{chapter}", chapter)
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(built["zip"], folder / kit_name(chapter))
        shutil.rmtree(built["zip"].parent)


def setup(app: Sphinx) -> dict:
    # The last chapter open to the class, or "all" (_config.yml says which, and why).
    app.add_config_value(SETTING, ALL, "env", types=[str])
    app.connect("builder-inited", check_setting)
    app.connect("doctree-resolved", add_run_note)
    app.connect("html-page-context", drop_download_links, priority=600)
    app.connect("build-finished", build_kits)
    return {"version": "1.1", "parallel_read_safe": True, "parallel_write_safe": True}
