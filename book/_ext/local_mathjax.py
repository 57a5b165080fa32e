"""Serve MathJax from the built site, so that no page loads anything from a CDN.

Sphinx and Jupyter Book 1 point ``mathjax_path`` at MathJax 3 on a CDN by default: a page
opened offline then shows raw ``\\(x\\)``. The PyPI package ``jupyter-server-mathjax``
ships MathJax 2.7 in ``jupyter_server_mathjax/static`` (the combined configuration
``TeX-AMS-MML_HTMLorMML-full`` and the STIX-Web fonts). This extension

1. points ``mathjax_path`` at ``_static/mathjax/MathJax.js`` in the output folder and
   configures MathJax 2 to typeset what Sphinx writes, ``\\(..\\)`` inline and ``\\[..\\]``
   displayed, inside elements of class ``math``, with the STIX-Web web fonts (the only
   fonts that the package ships);
2. copies the MathJax tree into ``<outdir>/_static/mathjax/`` when an HTML build
   finishes. The copy goes into the *output*, never into a source ``_static`` folder:
   Jupyter Book 1 adds every ``.js`` file under a source ``_static`` to every page.

Registered in ``_config.yml`` under ``sphinx: local_extensions``.
"""

import shutil
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

# Relative to the output's _static folder; Sphinx special-cases "MathJax.js?" and adds no
# checksum query to it, so the ?config= query reaches MathJax 2.
MATHJAX_DIR = "mathjax"
MATHJAX_PATH = f"{MATHJAX_DIR}/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full"

MATHJAX2_CONFIG = {
    "tex2jax": {
        # Only the delimiters Sphinx emits; a dollar sign in prose stays a dollar sign.
        "inlineMath": [["\\(", "\\)"]],
        "displayMath": [["\\[", "\\]"]],
        "processEscapes": False,
        "processClass": "math|output_area|tex2jax_process|mathjax_process",
        "ignoreClass": "tex2jax_ignore|mathjax_ignore",
    },
    # jupyter-server-mathjax ships the STIX-Web fonts only: never ask for the TeX ones.
    "HTML-CSS": {
        "availableFonts": [],
        "preferredFont": None,
        "webFont": "STIX-Web",
        "imageFont": None,
    },
    "SVG": {"font": "STIX-Web"},
    # The hidden MathML copy that MathJax adds for screen readers (AssistiveMML) carries
    # mathvariant attributes, which MathJax's MathML styles map to TeX web fonts such as
    # MathJax_AMS-WEB (fonts/HTML-CSS/TeX/otf, not shipped): the browser would request
    # them, and get a 404, for every \mathbb. The copy is never drawn, so any font does.
    # pydata-sphinx-theme gives every span.math "overflow: hidden" (meant for the Sphinx
    # wrapper around MathJax 3 output); MathJax 2 uses that class inside its own output too,
    # where hidden overflow moves the baseline and lifts inline math above the text.
    "styles": {
        ".MJX_Assistive_MathML, .MJX_Assistive_MathML *": {"font-family": "inherit !important"},
        ".MathJax span.math": {"overflow": "visible !important", "max-width": "none !important"},
    },
    "messageStyle": "none",
}


def mathjax_source() -> Path:
    """The MathJax 2 tree inside the installed jupyter-server-mathjax package."""
    try:
        import jupyter_server_mathjax
    except ImportError as error:  # pragma: no cover - a missing dev dependency
        raise ExtensionError(
            "local_mathjax needs the package jupyter-server-mathjax (pip install "
            "'jupyter-server-mathjax==0.2.6', or `make setup`)"
        ) from error
    static = Path(jupyter_server_mathjax.__file__).parent / "static"
    if not (static / "MathJax.js").is_file():
        raise ExtensionError(f"no MathJax.js in {static}: reinstall jupyter-server-mathjax")
    return static


def configure(app: Sphinx, config) -> None:
    config.mathjax_path = MATHJAX_PATH
    config.mathjax2_config = MATHJAX2_CONFIG
    config.mathjax3_config = None
    # MyST would otherwise write a MathJax 3 configuration (window.MathJax = {options: ...})
    # and mark every section "mathjax_ignore"; MathJax 2 is configured above instead.
    config.myst_update_mathjax = False
    mathjax_source()  # fail early, before any page is read


def copy_mathjax(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / "_static" / MATHJAX_DIR
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(mathjax_source(), target)


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", configure, priority=900)
    app.connect("build-finished", copy_mathjax)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
