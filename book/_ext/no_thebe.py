"""Keep sphinx-thebe's CDN reference off the pages.

Jupyter Book 1 always loads the extension ``sphinx_thebe``. Even with the Thebe launch
button off, it writes ``THEBE_JS_URL = "https://unpkg.com/thebe@..."`` and its loader
script into every page, and a Thebe configuration block (naming a Binder repository) into
every document. Nothing loads them without the button, but a site that must work offline
should not carry a CDN address at all. This extension drops the three from the pages.

Registered in ``_config.yml`` under ``sphinx: local_extensions``.
"""

from docutils import nodes
from sphinx.application import Sphinx


def _is_thebe_script(js) -> bool:
    filename = str(getattr(js, "filename", js) or "")
    body = getattr(js, "attributes", {}).get("body", "") or ""
    return filename.endswith("sphinx-thebe.js") or "THEBE_JS_URL" in body


def drop_thebe_scripts(app: Sphinx, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if scripts is not None:
        scripts[:] = [js for js in scripts if not _is_thebe_script(js)]
    styles = context.get("css_files")
    if styles is not None:
        styles[:] = [
            css
            for css in styles
            if not str(getattr(css, "filename", css)).endswith("sphinx-thebe.css")
        ]


def drop_thebe_config(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    for node in list(doctree.findall(nodes.raw)):
        if "text/x-thebe-config" in node.astext() or node.astext().strip().startswith(
            "<script>kernelName"
        ):
            node.parent.remove(node)


def setup(app: Sphinx) -> dict:
    # sphinx-thebe adds its nodes at doctree-resolved with the default priority (500).
    app.connect("doctree-resolved", drop_thebe_config, priority=900)
    app.connect("html-page-context", drop_thebe_scripts, priority=900)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
