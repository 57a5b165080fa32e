"""Make the theme's pages pass axe-core's WCAG 2.1 A and AA rules, and let wide equations
scroll inside their own box.

Each fix is made where the problem arises, never by hiding an element from assistive
technology:

1. the sidebar's expand/collapse toggles (pydata-sphinx-theme's ``<summary>`` holding only
   a chevron icon) get a name: "Pages under <the chapter's title>" (rule ``summary-name``);
2. the search button and the colour-mode button: their templates
   (``accessible_theme_files/templates``, ahead of the theme's on ``templates_path``) no
   longer give them an ``aria-label`` that leaves out the text they show; the search
   button is named by its text ("Search Ctrl+K"), the colour-mode icons are decorative
   and the button keeps its name "Color mode" (rule ``label-content-name-mismatch``);
3. MyST-NB's "Show code cell source" toggles: the same ``<summary>`` without the
   ``aria-label`` "Toggle hidden content", so their name is the text they show (rule
   ``label-content-name-mismatch``);
4. the bibliography: docutils writes each entry as ``role="doc-biblioentry"``, a role that
   DPUB-ARIA 1.1 deprecates, inside a ``role="list"``, which then has no list items; the
   entries become ``role="listitem"`` (rules ``aria-deprecated-role``,
   ``aria-required-children``);
5. ``accessible_theme_files/static/course-theme.css``: the explorers' buttons take the
   text colour of the panel around them, not the browser's button colour, which the dark
   mode makes white on their light grey (rule ``color-contrast``), and a display equation
   wider than the text column scrolls sideways inside its own box (MathJax 2's
   ``.MathJax_Display``; pydata-sphinx-theme does the same for MathJax 3's
   ``mjx-container``) instead of being cut off. MathJax 2 already puts each typeset
   equation in the tab order (``tabindex="0"``), so the keyboard reaches the scrolling box.

``tests/test_book.py`` runs axe-core on every page in the light and the dark mode, and
checks at 1280 and 390 px that every display equation fits or scrolls.

Registered in ``_config.yml`` under ``sphinx: local_extensions``.
"""

from functools import wraps
from html import escape
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx

FILES = Path(__file__).resolve().parent / "accessible_theme_files"
TEMPLATES = FILES / "templates"
STATIC = FILES / "static"
CSS = "course-theme.css"


def configure(app: Sphinx, config) -> None:
    # Ahead of the themes' own component folders, which they append to templates_path.
    config.templates_path.insert(0, str(TEMPLATES))
    config.html_static_path.append(str(STATIC))


# -- 1. the sidebar's toggles --------------------------------------------------------------


def name_toggles(soup) -> None:
    """Give each chevron-only ``<summary>`` of the sidebar the title of the page whose
    sub-pages it shows or hides."""
    for summary in soup.select("li.has-children > details > summary"):
        if summary.get("aria-label") or summary.get_text(strip=True):
            continue  # a part's caption: the summary shows its text already
        link = summary.find_parent("li").find("a", recursive=False)
        if link is not None and link.get_text(strip=True):
            summary["aria-label"] = f"Pages under {link.get_text(' ', strip=True)}"


def wrap_toctree(app: Sphinx, pagename, templatename, context, doctree) -> None:
    generate = context.get("generate_toctree_html")
    if generate is None or getattr(generate, "names_toggles", False):
        return

    @wraps(generate)
    def generate_toctree_html(kind, *args, **kwargs):
        soup = generate(kind, *args, **kwargs)
        if kind == "sidebar" and hasattr(soup, "select"):
            name_toggles(soup)
        return soup

    generate_toctree_html.names_toggles = True
    context["generate_toctree_html"] = generate_toctree_html


# -- 3. MyST-NB's hidden code cells ----------------------------------------------------------


def visit_hide_cell_input(self, node) -> None:
    """myst_nb.sphinx_.visit_HideCellInput, less the summary's aria-label: a screen reader
    says the visible "Show code cell source" / "Hide code cell source"."""
    classes = " ".join(node["classes"])
    self.body.append(f'<details class="admonition hide {classes}">\n')
    self.body.append("<summary>\n")
    self.body.append(f'<p class="collapsed admonition-title">{escape(node["prompt_show"])}</p>\n')
    self.body.append(f'<p class="expanded admonition-title">{escape(node["prompt_hide"])}</p>\n')
    self.body.append("</summary>\n")


def depart_hide_cell_input(self, node) -> None:
    self.body.append("</details>\n")


# -- 4. the bibliography ---------------------------------------------------------------------


def visit_citation(self, node) -> None:
    """docutils' HTML5 citation, with the entries as list items of their role="list"."""
    if not isinstance(node.previous_sibling(), type(node)):
        self.body.append('<div role="list" class="citation-list">\n')
    self.body.append(self.starttag(node, "div", classes=[node.tagname], role="listitem"))


def depart_citation(self, node) -> None:
    self.body.append("</div>\n")
    if not isinstance(node.next_node(descend=False, siblings=True), type(node)):
        self.body.append("</div>\n")


def setup(app: Sphinx) -> dict:
    app.setup_extension("myst_nb")
    from myst_nb.sphinx_ import HideCodeCellNode

    app.connect("config-inited", configure)
    # After pydata-sphinx-theme has put its toctree functions in the context (priority 500).
    app.connect("html-page-context", wrap_toctree, priority=900)
    app.add_node(
        HideCodeCellNode, override=True, html=(visit_hide_cell_input, depart_hide_cell_input)
    )
    app.add_node(nodes.citation, override=True, html=(visit_citation, depart_citation))
    app.add_css_file(CSS)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
