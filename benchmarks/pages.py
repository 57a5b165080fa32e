"""The built website's pages and what each weighs: shared by the book's tests
(``tests/test_book.py``: no page over the budget, no page loading another host) and by
``python -m benchmarks.run --book``, which measures the pages of a clean build."""

from html.parser import HTMLParser
from pathlib import Path

PAGE_BUDGET_BYTES = 2 * 1024 * 1024  # a page with its images, for readers on a phone


def html_pages(site: Path) -> list[Path]:
    """Every page of the site (theme fragments under _static/ are not pages)."""
    return sorted(p for p in site.rglob("*.html") if "_static" not in p.relative_to(site).parts)


class Assets(HTMLParser):
    """The URLs a page makes the browser fetch: script, link, img, iframe, source, etc."""

    ATTRS = {
        "script": "src",
        "link": "href",
        "img": "src",
        "iframe": "src",
        "source": "src",
        "video": "src",
        "audio": "src",
        "embed": "src",
        "object": "data",
    }

    def __init__(self):
        super().__init__()
        self.urls: list[str] = []
        self.inline: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        wanted = self.ATTRS.get(tag)
        values = dict(attrs)
        if wanted and values.get(wanted):
            self.urls.append(values[wanted])
        self._in_script = tag in {"script", "style"}

    def handle_endtag(self, tag):
        self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.inline.append(data)


def page_weight(page: Path) -> int:
    """Bytes a browser downloads for a page's own content: its HTML (with the images it
    embeds) and the local images it shows (the theme's shared files not counted)."""
    parser = Assets()
    parser.feed(page.read_text(encoding="utf-8"))
    total = page.stat().st_size
    for url in parser.urls:
        target = (page.parent / url.split("#")[0].split("?")[0]).resolve()
        if not url.startswith("data:") and "_images" in target.parts and target.is_file():
            total += target.stat().st_size
    return total


def course_page_weights(site: Path) -> dict[str, int]:
    """Page (relative path) -> its weight, for the course's own pages (book/, notebooks/)."""
    return {
        p.relative_to(site).as_posix(): page_weight(p)
        for p in html_pages(site)
        if p.relative_to(site).parts[0] in {"book", "notebooks"}
    }
