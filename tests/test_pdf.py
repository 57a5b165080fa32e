"""`make pdf`: the whole course printed to one PDF by ``book/pdf.py`` (Chromium's print to
PDF of the built site, merged by pypdf).

The PDF is printed from the site that the session builds for tests/test_book.py (its
``site`` fixture, in the background: these tests run last, with the other tests of the
site), into a temporary folder, as soon as the site is built, beside the other tests
(``tests/book_build.py``'s ``AfterBuild``); `make pdf` itself would build the book a second
time. It must hold every page of _toc.yml under its title, the pages' figures, typeset
equations and bookmarks, and it must have been printed without a request to another host.
"""

import re
import tempfile
import unicodedata
from functools import cache
from pathlib import Path

import book_build
import pytest
import test_book
import yaml
from browser import chromium as find_chromium
from pypdf import PdfReader
from pypdf.generic import IndirectObject

ROOT = Path(__file__).resolve().parents[1]
# The session's book build (a session fixture), shared with tests/test_book.py.
site = test_book.site

pytestmark = pytest.mark.slow


def print_pdf(site: Path):
    """The course's PDF printed from the built site into a temporary folder (removed when
    the session ends); in the background as soon as the site is built (``AFTER_BUILD``)."""
    chromium = find_chromium()
    out = Path(_PRINTED.name) / "attention-course.pdf"
    return test_book.book_pdf().build_pdf(site, out, chromium=chromium, log=lambda *args: None)


_PRINTED = tempfile.TemporaryDirectory(prefix="attention-course-pdf-")
AFTER_BUILD = book_build.AfterBuild(print_pdf)


@pytest.fixture(scope="module")
def printed(site):
    """The course's PDF, printed from the session's site: (result, reader, text of page k),
    the text extracted when first asked for (a few seconds for a chapter)."""
    result = AFTER_BUILD.result(site)
    reader = PdfReader(result.path)

    @cache
    def text(k: int) -> str:
        return reader.pages[k].extract_text() or ""

    return result, reader, text


def _pages_of(result, entry) -> range:
    """The 0-based pages of the PDF that print ``entry``."""
    return range(entry.first_page - 1, entry.first_page - 1 + entry.pages)


def _squash(text: str) -> str:
    """Text without spaces or line breaks (PDF text extraction breaks lines anywhere),
    ligatures ("ﬁ") or typographic apostrophes (Sphinx turns ' into ’)."""
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text)).replace("\u2019", "'")


def _heading(path: Path) -> str:
    """A book page's title: its first `# ` heading, without MyST's markup."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return re.sub(r"[`*_]", "", line[2:]).strip()
    raise AssertionError(f"{path} has no `# ` heading")


def _images(page, seen: set) -> int:
    """The image XObjects a page draws (inside form XObjects too), each counted once."""
    count = 0

    def walk(resources):
        nonlocal count
        xobjects = resources.get_object().get("/XObject") if resources is not None else None
        for ref in xobjects.get_object().values() if xobjects is not None else ():
            key = (ref.idnum, ref.generation) if isinstance(ref, IndirectObject) else id(ref)
            if key in seen:
                continue
            seen.add(key)
            obj = ref.get_object()
            if obj.get("/Subtype") == "/Image":
                count += 1
            elif obj.get("/Subtype") == "/Form":
                walk(obj.get("/Resources"))

    walk(page.get("/Resources"))
    return count


def _article_images(html: str) -> int:
    """The distinct images a built page shows in its article (figures, explorers' frames)."""
    article = html[html.find("<article") : html.rfind("</article>")]
    return len(set(re.findall(r'<img[^>]*\ssrc="([^"]+)"', article)))


def test_pdf_was_printed_without_a_request_to_another_host(printed):
    result, _, _ = printed
    assert not result.off_host, "pages asked for other hosts (blocked):\n" + "\n".join(
        sorted(set(result.off_host))
    )
    assert not result.problems, "\n".join(result.problems)


def test_pdf_holds_every_page_of_the_toc_under_its_title(printed):
    result, reader, text = printed
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    chapters = [c["file"] for part in toc["parts"] for c in part["chapters"]]
    chapter_pages = [f for f in chapters if re.fullmatch(r"book/0\d_\w+", f)]
    assert len(chapter_pages) >= 7, chapter_pages
    entries = {entry.file: entry for entry in result.entries}
    assert set(entries) >= set(chapters) | {toc["root"]}
    contents = _squash(" ".join(text(k) for k in range(1, result.entries[0].first_page - 1)))
    for file in chapters + [toc["root"]]:
        entry = entries[file]
        assert entry.pages >= 1, f"{file} printed no page"
        first = _squash(text(entry.first_page - 1))
        assert _squash(entry.title) in first, f"{file}: its title is not on its first page"
        assert _squash(entry.label) in contents, f"{file}: not in the contents"
        if file.startswith("book/0"):
            title = _heading(ROOT / f"{file}.md")
            assert _squash(title) in first, f"{file}: {title!r} is not on its first page"
    for title in ("Glossary", "Bibliography"):
        assert any(e.title.startswith(title) for e in result.entries), title
    # the bookmarks: one per page of the toc, each chapter with its sections and notebook
    outline = reader.outline
    children = {
        item.title: next_item if isinstance(next_item, list) else []
        for item, next_item in zip(outline, outline[1:] + [None], strict=True)
        if not isinstance(item, list)
    }
    for file in chapters:
        assert entries[file].label in children, f"no bookmark for {file}"
    for file in chapter_pages:
        below = [item.title for item in children[entries[file].title] if not isinstance(item, list)]
        assert len(below) >= 3, f"{file}: no bookmarks for its sections: {below}"
        assert "Exercise notebook" in below, f"{file}: no bookmark for its exercise notebook"
    last = result.entries[-1]
    assert len(reader.pages) == result.pages == last.first_page - 1 + last.pages


def test_pdf_shows_every_figure_of_the_pages(printed, site):
    result, reader, _ = printed
    short = {}
    for entry in result.entries:
        expected = _article_images((site / f"{entry.file}.html").read_text(encoding="utf-8"))
        seen: set = set()
        found = sum(_images(reader.pages[k], seen) for k in _pages_of(result, entry))
        if found < expected:
            short[entry.file] = (found, expected)
    with_figures = [
        e.file
        for e in result.entries
        if _article_images((site / f"{e.file}.html").read_text(encoding="utf-8"))
    ]
    assert len(with_figures) >= 7, f"figures on only {with_figures}"
    assert not short, f"pages whose PDF holds fewer images than the page shows: {short}"


def test_pdf_typesets_the_equations(printed, site):
    result, _, text = printed
    # the chapters' own pages (the notebooks' code cells may hold TeX in strings)
    with_math = [
        e
        for e in result.entries
        if e.file.startswith("book/")
        and 'class="math notranslate' in (site / f"{e.file}.html").read_text(encoding="utf-8")
    ]
    assert len(with_math) >= 7, [e.file for e in with_math]
    raw = re.compile(r"\\\(|\\\[|\\frac|\\sqrt|\\mathrm|\\begin\{|\$\$")
    for entry in with_math:
        words = " ".join(text(k) for k in _pages_of(result, entry))
        assert not raw.search(words), f"{entry.file}: TeX source left in the PDF's text"
    chapter4 = next(e for e in result.entries if e.file == "book/04_dot_product_attention")
    words = " ".join(text(k) for k in _pages_of(result, chapter4))
    assert "√" in words, "chapter 4's scaled dot product shows no typeset square root"


def test_pdf_build_blocks_and_reports_a_request_to_another_host(tmp_path):
    """The guard is real: a page that asks another host for a script is printed without
    it, and the request is reported (``make pdf`` then fails)."""
    chromium = find_chromium()
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: book/intro\n", encoding="utf-8")
    (tmp_path / "_config.yml").write_text('title: "T"\nauthor: "A"\n', encoding="utf-8")
    page = tmp_path / "html" / "book" / "intro.html"
    page.parent.mkdir(parents=True)
    page.write_text(
        '<!DOCTYPE html><html><head><title>Intro</title><script src="https://cdn.example.org/'
        'x.js"></script></head><body><article><h1>Intro</h1><p>Text.</p></article></body></html>',
        encoding="utf-8",
    )
    result = test_book.book_pdf().build_pdf(
        tmp_path / "html", tmp_path / "out.pdf", root=tmp_path, chromium=chromium, log=print
    )
    assert result.off_host == ["https://cdn.example.org/x.js"]
    assert result.pages == 3 and [e.title for e in result.entries] == ["Intro"]


def test_make_pdf_is_a_target_and_documented():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^pdf:.*\bbook\b", makefile, re.M), "no `pdf: book` target in the Makefile"
    assert "book/pdf.py" in makefile
    assert "make pdf" in (ROOT / "README.md").read_text(encoding="utf-8")
