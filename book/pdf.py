"""The course as one PDF, for instructors who print and students who read offline.

``make pdf`` builds the website (``make book``) and then runs this script, which prints the
built site with Chromium, page by page, in the order of ``_toc.yml``, and merges the pages
into ``_build/pdf/attention-course.pdf``::

    .venv/bin/python book/pdf.py [--site _build/html] [--out _build/pdf/attention-course.pdf]

How:

1. The built site is served on 127.0.0.1 (a free port), as the browser test serves it.
2. Headless Chromium (Debian's, never a downloaded one) opens every page named in
   ``_toc.yml``: the introduction, each chapter with its exercise notebook (the student
   version, without outputs), the instructor guide, the glossary and the bibliography.
   Every request is routed through a guard that lets only 127.0.0.1/localhost through and
   records any other: the build fails if a page asked for another host.
3. On each page it waits for MathJax 2 (served by the site, ``book/_ext/local_mathjax.py``)
   to typeset every equation and for every image to load, then prints it to A4 with the
   site's chrome (sidebars, header, footer, buttons, the explorers' controls) hidden by a
   print style sheet; links to other pages of the site, which would point at the
   temporary server, lose their address (links to other sites keep theirs).
4. A title page (title and author from ``_config.yml``, date, commit, licences from
   ``LICENSE``) and a contents page with each page's first page number are printed the
   same way; pypdf merges everything, adds bookmarks (parts, chapters, their sections and
   exercise notebooks) and stamps a running footer (the page's title and the page number,
   the PDF viewer's own page number) on every page but the title page.

Why Chromium and not LaTeX: the project already installs Chromium and Playwright for its
browser test, so the PDF needs no TeX distribution (several hundred MB of Debian packages);
and it shows the equations, the figures the pages compute at build time, the explorers'
frames and the code cells exactly as the website does, from the same build.
"""

import argparse
import datetime
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from html import escape
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from io import BytesIO
from pathlib import Path
from urllib.parse import urlsplit

import yaml

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "html"
OUT = ROOT / "_build" / "pdf" / "attention-course.pdf"

# tests/browser.py's flags: headless, and no request of Chromium's own (updates, etc.).
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
LOCAL_HOSTS = {"127.0.0.1", "localhost"}
# A4 with room for the footer stamped in the bottom margin (FOOTER_CSS).
MARGIN = {"top": "16mm", "bottom": "20mm", "left": "16mm", "right": "16mm"}
# The site's pages are laid out for a screen: printed at 80 % they keep the width of the
# site's text column (about 850 CSS pixels across the 178 mm of A4 between the margins),
# so code lines and wide equations fit as on the site.
SCALE = 0.8
PAGE_TIMEOUT_MS = 60_000
# Pages loading ahead of the one being printed, each in a tab of its own.
AHEAD = 2

# Hides the site's chrome and keeps what a printed page needs. The theme's own print styles
# (sphinx-book-theme, applied too) print a title block of their own and hide the page's
# first heading: the page's heading is shown instead, like a chapter's title in a book.
PRINT_CSS = """
@media print {
  .bd-header, .bd-header-announcement, .bd-sidebar-primary, .bd-sidebar-secondary,
  .bd-header-article, .header-article, .bd-footer, .bd-footer-article, .bd-footer-content,
  .prev-next-area, .footer-article-items, #jb-print-docs-body, .skip-link,
  .search-button, .theme-switch-button, .sidebar-toggle, .primary-toggle,
  .secondary-toggle, .headerlink, .copybtn, .bd-search, .search-button-field,
  .ac-explorer .ac-controls, details.hide.above-input { display: none !important; }
  html, body { background: #fff !important; }
  .bd-container, .bd-container__inner, .bd-main, .bd-content, .bd-article-container,
  .bd-article { display: block !important; max-width: none !important; width: auto !important;
    margin: 0 !important; padding: 0 !important; overflow: visible !important; }
  .bd-main .bd-content .bd-article h1:first-of-type { display: block !important;
    margin-top: 0 !important; }
  h1, h2, h3, h4 { break-after: avoid; }
  figure, img, .ac-explorer img.ac-frame, table, .math, .admonition { break-inside: avoid; }
  /* A code cell moves to the next page whole unless it is longer than a page (the theme
     keeps only its inner block together, leaving the cell's empty frame behind). */
  .cell_input, div.highlight, div[class*="highlight-"] { display: block !important; }
  div.highlight, div[class*="highlight-"] { break-inside: auto !important; }
  .cell_input, .cell_output { break-inside: avoid; }
  pre { white-space: pre-wrap !important; overflow-wrap: anywhere; overflow: visible !important; }
  .cell_output, .output, div.highlight { overflow: visible !important; }
  a { color: inherit; }
  a.reference.external { color: #0a4f8a; }
}
"""

# MathJax 2 is done when its queue is idle and every math element holds typeset output
# instead of its TeX source (the same test as tests/test_book.py's).
MATH = "span.math.notranslate, div.math.notranslate"
MATH_DONE_JS = """() => {
    if (!document.querySelector("MATH_SELECTOR")) return true;
    if (!window.MathJax || !MathJax.Hub || !MathJax.Hub.queue) return false;
    if (MathJax.Hub.queue.pending || MathJax.Hub.queue.running) return false;
    return Array.from(document.querySelectorAll("MATH_SELECTOR")).every((el) =>
        el.querySelector(".MathJax, .MathJax_Display, .MathJax_CHTML, .MathJax_SVG") &&
        !el.innerText.includes("\\\\(") && !el.innerText.includes("\\\\["));
}""".replace("MATH_SELECTOR", MATH)

# Loads every image now (a lazy one would print empty), waits for the web fonts, opens the
# notebooks' hints (collapsed on the site, they would print as a bare "Hint 1"), drops the
# address of links into the site (they would point at the temporary server) and returns
# the page's first heading and the images that did not load.
PREPARE_JS = """async () => {
    document.querySelectorAll("article details:not(.hide)").forEach((d) => { d.open = true; });
    const images = Array.from(document.images);
    images.forEach((img) => { img.loading = "eager"; });
    await Promise.all(images.map((img) => img.decode().catch(() => null)));
    await document.fonts.ready;
    for (const a of document.querySelectorAll("a[href]")) {
        const url = new URL(a.href, document.baseURI);
        if (url.hostname === location.hostname) a.removeAttribute("href");
    }
    let heading = "";
    for (const h1 of document.querySelectorAll("article h1, main h1")) {
        const copy = h1.cloneNode(true);
        copy.querySelectorAll(".headerlink").forEach((el) => el.remove());
        heading = copy.textContent.trim();
        if (heading) break;
    }
    const broken = images.filter((img) => img.naturalWidth === 0 && img.getClientRects().length)
        .map((img) => img.getAttribute("src").slice(0, 80));
    return [heading, broken];
}"""

FRONT_CSS = """
@page { size: A4; margin: 25mm 22mm; }
body { font-family: "DejaVu Serif", Georgia, serif; color: #111; }
.title { page-break-after: always; text-align: center; padding-top: 60mm; }
.title h1 { font-size: 28pt; line-height: 1.25; margin: 0 0 12mm; }
.title .author { font-size: 15pt; margin-bottom: 6mm; }
.title .date { font-size: 12pt; color: #444; }
.title .licence { margin-top: 80mm; font-size: 9.5pt; color: #444; line-height: 1.5; }
h2 { font-size: 20pt; margin: 0 0 8mm; }
ol { list-style: none; padding: 0; margin: 0; font-size: 11pt; }
li { display: flex; align-items: baseline; margin: 0 0 2.2mm; }
li.part { font-weight: bold; margin-top: 5mm; font-size: 10pt; text-transform: uppercase;
  letter-spacing: 0.05em; color: #444; }
li.sub { padding-left: 8mm; font-size: 10pt; color: #333; }
li .fill { flex: 1; border-bottom: 1px dotted #888; margin: 0 2mm; }
"""

# One A4 sheet per page of the PDF, blank but for the footer: merged onto the page.
FOOTER_CSS = """
@page { size: A4; margin: 0; }
html, body { margin: 0; padding: 0; }
.sheet { position: relative; height: 296mm; overflow: hidden; break-after: page; }
.sheet:last-child { break-after: auto; }
.foot { position: absolute; left: 16mm; right: 16mm; bottom: 9mm; display: flex;
  justify-content: space-between; font: 8.5pt "DejaVu Sans", Arial, sans-serif; color: #555;
  border-top: 0.5pt solid #bbb; padding-top: 1.5mm; }
"""


@dataclass
class Entry:
    """A page of _toc.yml, in order: its file (no suffix), the part it opens (its caption,
    for the first page of a part), whether it is a chapter's sub-page, its title in the
    toc if it has one ("Exercise notebook"), and once printed its heading."""

    file: str
    part: str | None = None
    sub: bool = False
    toc_title: str | None = None
    title: str = ""
    first_page: int = 0  # 1-based, in the merged PDF
    pages: int = 0

    @property
    def label(self) -> str:
        """What the contents and the bookmarks call the page."""
        return self.toc_title or self.title


@dataclass
class Result:
    path: Path
    pages: int
    entries: list[Entry]
    off_host: list[str] = field(default_factory=list)  # requests to another host (blocked)
    problems: list[str] = field(default_factory=list)  # images that did not load, etc.
    seconds: float = 0.0


def toc_entries(root: Path = ROOT, notebooks: bool = True) -> list[Entry]:
    """Every page of _toc.yml, root first, in order; without the exercise notebooks if
    ``notebooks`` is false."""
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    entries = [Entry(toc["root"])]

    def walk(items, part, sub):
        for item in items or []:
            if "file" in item:
                if notebooks or not item["file"].startswith("notebooks/"):
                    entries.append(Entry(item["file"], part, sub, item.get("title")))
                    part = None
            walk(item.get("sections"), None, True)

    for part in toc.get("parts", []):
        walk(part.get("chapters"), part.get("caption"), False)
    walk(toc.get("chapters"), None, False)
    for entry in entries:
        entry.file = re.sub(r"\.(md|ipynb)$", "", entry.file)
    return entries


@contextmanager
def serve(site: Path) -> Iterator[str]:
    """The folder ``site`` served on 127.0.0.1 at a free port: its base URL."""

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(site)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def find_chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _config(root: Path) -> dict:
    return yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))


def _licences(root: Path) -> list[str]:
    """The licences LICENSE states: its underlined headings of the form "What: licence"."""
    path = root / "LICENSE"
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [
        line.strip()
        for line, under in zip(lines, lines[1:], strict=False)
        if ":" in line and re.fullmatch(r"-{3,}", under.strip())
    ]


def _commit(root: Path) -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        )
    except OSError:
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def front_matter(root: Path, entries: list[Entry], date: str) -> str:
    """The title page and the contents, as HTML."""
    config = _config(root)
    commit = _commit(root)
    built = f"{date}" + (f" · commit {commit}" if commit else "")
    licences = "<br>".join(escape(line) for line in _licences(root))
    if licences:
        licences += "<br>See the file LICENSE of the course's repository."
    rows = []
    for entry in entries:
        if entry.part:
            rows.append(f'<li class="part">{escape(entry.part)}</li>')
        rows.append(
            f'<li class="{"sub" if entry.sub else ""}"><span>{escape(entry.label)}</span>'
            f'<span class="fill"></span><span>{entry.first_page}</span></li>'
        )
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>'
        f"{escape(config['title'])}</title><style>{FRONT_CSS}</style></head><body>"
        f'<section class="title"><h1>{escape(config["title"])}</h1>'
        f'<div class="author">{escape(config.get("author", ""))}</div>'
        f'<div class="date">{escape(built)}</div>'
        f'<div class="licence">{licences}</div></section>'
        f"<section><h2>Contents</h2><ol>{''.join(rows)}</ol></section></body></html>"
    )


def footer_sheets(running: list[str], first: int) -> str:
    """One blank A4 sheet per page, numbered from ``first``, with its running title."""
    sheets = "".join(
        f'<div class="sheet"><div class="foot"><span>{escape(title)}</span>'
        f"<span>{first + k}</span></div></div>"
        for k, title in enumerate(running)
    )
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><style>{FOOTER_CSS}'
        f"</style></head><body>{sheets}</body></html>"
    )


def _bad_status(problems: list[str], response) -> None:
    if response.status >= 400:
        problems.append(f"{response.url}: HTTP {response.status}")


def _print_page(page, entry: Entry, problems: list[str]) -> bytes:
    """Wait until ``page`` has loaded, typeset its math and decoded its images; print it.
    Sets ``entry.title`` to the page's first heading."""
    page.wait_for_load_state("load", timeout=PAGE_TIMEOUT_MS)
    try:
        page.wait_for_function(MATH_DONE_JS, timeout=PAGE_TIMEOUT_MS)
    except Exception:
        problems.append(f"{entry.file}: MathJax did not finish typesetting")
    title, broken = page.evaluate(PREPARE_JS)
    entry.title = title or entry.file
    if broken:
        problems.append(f"{entry.file}: images that did not load: {broken}")
    page.add_style_tag(content=PRINT_CSS)
    page.emulate_media(media="print")
    page.evaluate("() => document.fonts.ready.then(() => true)")
    # tagged: Chromium builds the outline (the sections' bookmarks) from the tags
    return page.pdf(
        format="A4", margin=MARGIN, scale=SCALE, print_background=True, outline=True, tagged=True
    )


def _print_html(page, html: str) -> bytes:
    page.set_content(html, wait_until="load")
    page.evaluate("() => document.fonts.ready.then(() => true)")
    return page.pdf(prefer_css_page_size=True, print_background=True)


def _sections(reader) -> list[tuple[str, int]]:
    """The h2 headings of a printed page (Chromium's outline: the h1, then its h2s), with
    the 0-based page each is on."""
    outline = reader.outline
    items: list[tuple[str, int]] = []
    # [h1, [h2, [h3...], h2, ...]]: the list after the first item holds its children.
    if len(outline) >= 2 and isinstance(outline[1], list):
        for item in outline[1]:
            if not isinstance(item, list):
                items.append((item.title.strip(), reader.get_destination_page_number(item)))
    return items


def build_pdf(
    site: Path = SITE,
    out: Path = OUT,
    *,
    root: Path = ROOT,
    chromium: str | None = None,
    notebooks: bool = True,
    log=print,
) -> Result:
    """Print every page of _toc.yml from the built ``site`` into the one PDF ``out``."""
    from playwright.sync_api import sync_playwright
    from pypdf import PdfReader, PdfWriter

    started = time.monotonic()
    site, out = Path(site), Path(out)
    chromium = chromium or find_chromium()
    if chromium is None:
        raise RuntimeError(
            "no chromium on PATH: install Debian's (`apt-get install -y chromium`), never "
            "`playwright install`"
        )
    entries = toc_entries(root, notebooks)
    missing = [e.file for e in entries if not (site / f"{e.file}.html").is_file()]
    if missing:
        raise FileNotFoundError(
            f"pages of _toc.yml missing from {site} (run `make book`): {missing}"
        )
    result = Result(out, 0, entries)

    def guard(route):
        parts = urlsplit(route.request.url)
        if parts.scheme in {"data", "blob", "about"} or parts.hostname in LOCAL_HOSTS:
            route.continue_()
        else:
            result.off_host.append(route.request.url)
            route.abort()

    printed: list[bytes] = []
    with serve(site) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            context.route("**/*", guard)

            def open_page(entry: Entry):
                """A tab that starts loading ``entry`` (and typesetting it) now."""
                page = context.new_page()
                page.on("response", partial(_bad_status, result.problems))
                page.on("pageerror", lambda e: result.problems.append(f"{entry.file}: {e}"))
                page.goto(f"{base}/{entry.file}.html", wait_until="commit")
                return page

            # MathJax takes most of a page's time: the next pages load and typeset in tabs
            # of their own (their own renderer processes) while this one prints.
            tabs = deque(open_page(entry) for entry in entries[:AHEAD])
            for k, entry in enumerate(entries):
                tick = time.monotonic()
                page = tabs.popleft()
                if k + AHEAD < len(entries):
                    tabs.append(open_page(entries[k + AHEAD]))
                printed.append(_print_page(page, entry, result.problems))
                entry.pages = len(PdfReader(BytesIO(printed[-1])).pages)
                page.close()
                log(f"  {entry.file}: {entry.pages} pages, {time.monotonic() - tick:.1f} s")

            page = context.new_page()
            # The front matter's length does not depend on its page numbers: print it once
            # to count its pages, then again with the numbers.
            date = datetime.date.today().isoformat()
            front = _print_html(page, front_matter(root, entries, date))
            offset = len(PdfReader(BytesIO(front)).pages)
            for entry in entries:
                entry.first_page = offset + 1
                offset += entry.pages
            front = _print_html(page, front_matter(root, entries, date))
            n_front = len(PdfReader(BytesIO(front)).pages)
            running, chapter = ["Contents"] * (n_front - 1), ""
            for entry in entries:
                chapter = chapter if entry.sub else entry.title
                title = f"{chapter} · {entry.label}" if entry.sub else entry.title
                running += [title] * entry.pages
            footers = PdfReader(BytesIO(_print_html(page, footer_sheets(running, 2))))
        finally:
            browser.close()

    config = _config(root)
    writer = PdfWriter()
    writer.append(PdfReader(BytesIO(front)), import_outline=False)
    if n_front > 1:
        writer.add_outline_item(title="Contents", page_number=1)
    chapter_item = None
    for entry, pdf in zip(entries, printed, strict=True):
        reader = PdfReader(BytesIO(pdf))
        start = len(writer.pages)
        writer.append(reader, import_outline=False)
        parent = chapter_item if entry.sub else None
        item = writer.add_outline_item(
            title=entry.label, page_number=start, parent=parent, is_open=False
        )
        if not entry.sub:
            chapter_item = item
        for title, number in _sections(reader):
            writer.add_outline_item(title=title, page_number=start + number, parent=item)
    if len(footers.pages) != len(writer.pages) - 1:
        result.problems.append(
            f"{len(footers.pages)} footers printed for {len(writer.pages) - 1} pages"
        )
    for sheet, target in zip(footers.pages, writer.pages[1:], strict=False):
        target.merge_page(sheet)
        target.compress_content_streams()  # merge_page writes the merged stream plain
    writer.add_metadata(
        {
            "/Title": config["title"],
            "/Author": config.get("author", ""),
            "/Creator": "book/pdf.py: the website printed by Chromium, merged by pypdf",
        }
    )
    writer.page_mode = "/UseOutlines"
    # Each printed page embeds its own copy of the fonts (and the footers theirs): keep one.
    writer.compress_identical_objects()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=out.parent, suffix=".pdf", delete=False) as tmp:
        writer.write(tmp)
    Path(tmp.name).replace(out)
    result.pages = len(writer.pages)
    result.seconds = time.monotonic() - started
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", type=Path, default=SITE, help="the built site (make book)")
    parser.add_argument("--out", type=Path, default=OUT, help="the PDF to write")
    parser.add_argument("--chromium", help="the chromium to print with (default: on PATH)")
    parser.add_argument(
        "--no-notebooks", action="store_true", help="leave the exercise notebooks' pages out"
    )
    args = parser.parse_args(argv)
    print(f"Printing {args.site} with Chromium into {args.out}")
    result = build_pdf(args.site, args.out, chromium=args.chromium, notebooks=not args.no_notebooks)
    for url in sorted(set(result.off_host)):
        print(f"error: a page asked for another host (blocked): {url}", file=sys.stderr)
    for problem in result.problems:
        print(f"error: {problem}", file=sys.stderr)
    size = result.path.stat().st_size / 2**20
    print(f"{result.path}: {result.pages} pages, {size:.1f} MiB, in {result.seconds:.0f} s")
    return 1 if result.off_host or result.problems else 0


if __name__ == "__main__":
    sys.exit(main())
