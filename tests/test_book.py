"""The website: it builds from clean with warnings as errors, it shows no solution code and
no hidden test, it loads nothing from outside the host that serves it, and it renders in a
real browser (math typeset by the locally served MathJax).

The book is built once per session into a temporary folder (about half a minute plus the
execution of the narrative pages), in the background while the other tests run
(``tests/book_build.py``); the tests that need it run last. Screenshots of every page (JPEG,
whole page) go to test-artifacts/screenshots/ for a human to look at.
"""

import html
import importlib.util
import re
import zipfile
from functools import partial
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import book_build
import nbformat
import pytest
import yaml
from browser import chromium as find_chromium
from browser import launch

from autograder.leaks import MARKERS, course_secret_lines, find_leaks
from benchmarks.pages import PAGE_BUDGET_BYTES, Assets, course_page_weights, html_pages

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
LOCAL_HOSTS = {"127.0.0.1", "localhost"}
# Figures each chapter page computes at build time (a page may have more).
MEASURED_FIGURES = {
    "book/03_convs2s.html": 5,
    "book/04_dot_product_attention.html": 4,
    "book/05_multi_head_attention.html": 5,
    "book/07_spatial_transformer.html": 7,
    "book/08_language_models.html": 6,
    "book/09_vision_transformer.html": 5,
    "book/10_attention_since_2023.html": 7,
}

# Explorers each chapter page carries (attention_course.explorer: frames drawn at build
# time, stepped through by the browser alone).
EXPLORERS = {
    "book/02_bahdanau_attention.html": 1,
    "book/03_convs2s.html": 1,
    "book/04_dot_product_attention.html": 1,
    "book/05_multi_head_attention.html": 1,
    "book/06_transformer.html": 1,
    "book/07_spatial_transformer.html": 1,
    "book/08_language_models.html": 1,
    "book/09_vision_transformer.html": 2,
    "book/10_attention_since_2023.html": 3,
}


pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def site() -> Path:
    """The book built from clean (-W -n --keep-going): its HTML folder. The build runs in the
    background from the start of the session (``tests/book_build.py``)."""
    build = book_build.start()
    code = build.wait()
    log = book_build.LOG.relative_to(ROOT)
    if code is None:
        pytest.fail(
            f"the book build ran past {book_build.TIMEOUT_S} s; full log in {log}, last "
            f"lines:\n{build.log_tail()}"
        )
    if code != 0 or not (build.html / "index.html").is_file():
        pytest.fail(
            f"`jupyter-book build . -W -n --keep-going` failed (exit status {code}); "
            f"full log in {log}, last lines:\n{build.log_tail()}"
        )
    return build.html


def toc_files() -> list[str]:
    """Every document named in _toc.yml, root first, without its suffix."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    files = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections"))

    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    return [re.sub(r"\.(md|ipynb)$", "", f) for f in files]


def visible_text(path: Path) -> str:
    """What a reader (or a scraper) can get from a built file: an HTML page without its
    tags, HTML entities decoded (highlighted code is split into one tag per token); the
    cells' sources of a notebook; any other text file as it is."""
    raw = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".html":
        return html.unescape(re.sub(r"<[^>]+>", "", raw))
    if path.suffix == ".ipynb":
        nb = nbformat.reads(raw, as_version=4)
        return "\n".join(cell.source for cell in nb.cells)
    return raw


# ---------------------------------------------------------------------------------------
# What the site contains


def test_book_builds_every_page_in_the_toc_and_nothing_else(site):
    missing = [f for f in toc_files() if not (site / f"{f}.html").is_file()]
    assert not missing, f"pages named in _toc.yml but absent from the built site: {missing}"
    # Only book/ and notebooks/ are published: never solutions/, tests/, autograder/, ...
    sources = [
        p.relative_to(site / "_sources").as_posix()
        for p in (site / "_sources").rglob("*")
        if p.is_file()
    ]
    pages = [p.relative_to(site).as_posix() for p in html_pages(site)]
    stray = [
        p
        for p in sources + pages
        if p.split("/")[0] not in {"book", "notebooks"}
        and p not in {"index.html", "genindex.html", "search.html"}
    ]
    assert not stray, f"the site publishes files from outside book/ and notebooks/: {stray}"


def test_site_shows_no_solution_code_or_hidden_tests(site):
    solutions = sorted(ROOT.glob("solutions/*/*.ipynb"))
    assert solutions, "no solution notebooks under solutions/: nothing to check the site against"
    secrets = course_secret_lines(solutions)
    assert secrets, "no solution or hidden-test lines found in the solution notebooks"
    scanned, leaks = 0, {}
    for path in sorted(site.rglob("*")):
        if path.suffix not in {".html", ".ipynb", ".md", ".txt", ".py"} or "_static" in path.parts:
            continue
        scanned += 1
        found = find_leaks(visible_text(path), secrets)
        if found:
            leaks[str(path.relative_to(site))] = found[:5]
    assert scanned, "no HTML found in the built site"
    assert not leaks, (
        f"the website shows solution code or hidden tests (or their {MARKERS} markers): {leaks}"
    )


def test_exercise_notebooks_are_the_student_versions_not_executed(site):
    for chapter_dir in sorted((ROOT / "notebooks").glob("*/")):
        page = site / "notebooks" / chapter_dir.name / f"{chapter_dir.name}.html"
        if not page.is_file():
            continue  # not in the toc yet: test_book_builds_every_page_in_the_toc covers the toc
        text = page.read_text(encoding="utf-8")
        assert "NotImplementedError" in text, (
            f"{page.name}: no exercise stub; is it the student version?"
        )
        assert "cell_output" not in text, f"{page.name}: the student notebook was executed at build"
        assert re.search(r'href="[^"]*\.ipynb"', text), (
            f"{page.name}: no download link to the .ipynb"
        )
        words = visible_text(page)
        assert "Run this notebook yourself" in words and SETUP in words, (
            f"{page.name}: no note on how to run the notebook (book/_ext/run_notebook_note.py)"
        )
        _offers_its_chapters_kit(site, page, chapter_dir.name)


def _offers_its_chapters_kit(site: Path, page: Path, chapter: str) -> None:
    """The page links the kit of its chapter: a zip in the site that holds the wheel, this
    chapter's notebook and the earlier ones', and no later chapter's."""
    links = re.findall(r'href="([^"]*_kits/[^"]*\.zip)"', page.read_text(encoding="utf-8"))
    assert len(set(links)) == 1, f"{page.name}: links to kits {links}, expected one"
    kit_zip = (page.parent / links[0]).resolve()
    assert kit_zip.is_file() and kit_zip.is_relative_to(site.resolve()), (
        f"{page.name}: its kit {links[0]} is not in the site"
    )
    with zipfile.ZipFile(kit_zip) as z:
        names = z.namelist()
    chapters = sorted(p.name for p in (ROOT / "notebooks").glob("*/") if p.is_dir())
    held = {c for c in chapters if f"notebooks/{c}/{c}.ipynb" in names}
    assert held == {c for c in chapters if c <= chapter}, (
        f"{page.name}: its kit holds the notebooks of {sorted(held)}"
    )
    assert any(n.endswith(".whl") for n in names), f"{page.name}: its kit has no wheel"


def _run_note_setup() -> str:
    """The set-up command that book/_ext/run_notebook_note.py puts on the notebook pages."""
    spec = importlib.util.spec_from_file_location(
        "run_notebook_note", ROOT / "book" / "_ext" / "run_notebook_note.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SETUP


SETUP = _run_note_setup()


def test_the_notebook_pages_give_the_readmes_set_up_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert SETUP in readme, (
        f"book/_ext/run_notebook_note.py tells students to run {SETUP!r}, the README does not"
    )


def test_every_chapter_page_links_its_terms_to_the_glossary(site):
    """One vocabulary: the glossary defines each term once, the intro and every chapter page
    link their terms to it, every link lands on a definition, and no term goes unused."""
    glossary = (site / "book" / "glossary.html").read_text(encoding="utf-8")
    defined = set(re.findall(r'<dt id="(term-[^"]+)"', glossary))
    assert len(defined) >= 30, f"the glossary defines only {len(defined)} terms"
    pages = [f for f in toc_files() if f == "book/intro" or re.fullmatch(r"book/\d\d_\w+", f)]
    assert len(pages) >= 8, pages
    used: set[str] = set()
    for page in pages:
        html_text = (site / f"{page}.html").read_text(encoding="utf-8")
        links = set(re.findall(r'href="glossary\.html#(term-[^"]+)"', html_text))
        assert len(links) >= 3, f"{page} links only {sorted(links)} to the glossary"
        assert links <= defined, f"{page} links to undefined terms {sorted(links - defined)}"
        used |= links
    # terms the glossary's own definitions point to count as used
    used |= set(re.findall(r'href="#(term-[^"]+)"', glossary))
    assert defined <= used, f"glossary terms no page links to: {sorted(defined - used)}"


def test_pages_stay_light(site):
    weights = course_page_weights(site)
    report = "\n".join(f"{size / 1024:8.0f} KiB  {rel}" for rel, size in sorted(weights.items()))
    (ROOT / "test-artifacts").mkdir(exist_ok=True)
    (ROOT / "test-artifacts" / "page-sizes.txt").write_text(report + "\n", encoding="utf-8")
    heavy = {rel: size for rel, size in weights.items() if size > PAGE_BUDGET_BYTES}
    assert not heavy, f"pages over {PAGE_BUDGET_BYTES // 1024} KiB with their images:\n{report}"


def test_mathjax_is_served_from_the_site(site):
    mathjax = site / "_static" / "mathjax"
    for rel in (
        "MathJax.js",
        "config/TeX-AMS-MML_HTMLorMML-full.js",
        "jax/output/HTML-CSS/fonts/STIX-Web/fontdata.js",
    ):
        assert (mathjax / rel).is_file(), f"{rel} is missing from the site's _static/mathjax/"
    assert list((mathjax / "fonts").rglob("*.woff")), "no web fonts in _static/mathjax/fonts"
    page = (site / "book" / "04_dot_product_attention.html").read_text(encoding="utf-8")
    assert "_static/mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full" in page


def test_no_page_references_another_host(site):
    problems = []
    for page in html_pages(site):
        parser = Assets()
        parser.feed(page.read_text(encoding="utf-8"))
        rel = page.relative_to(site)
        for url in parser.urls:
            if re.match(r"^([a-z][a-z0-9+.-]*:|//)", url, re.I) and not url.startswith("data:"):
                problems.append(f"{rel}: loads {url}")
        for code in parser.inline:
            for url in re.findall(r"https?://[^\s\"'<>)]+", code):
                problems.append(f"{rel}: inline script or style names {url}")
    for css in (site / "_static").rglob("*.css"):
        for url in re.findall(
            r"@import\s+(?:url\()?['\"]?(https?://[^'\")\s]+)", css.read_text(errors="replace")
        ):
            problems.append(f"{css.relative_to(site)}: imports {url}")
    assert not problems, "the site would load from other hosts:\n" + "\n".join(problems)


# ---------------------------------------------------------------------------------------
# A real browser


def book_pdf():
    """``book/pdf.py`` (the PDF's build, and the server of the built site it prints from),
    which no package holds."""
    spec = importlib.util.spec_from_file_location("book_pdf", ROOT / "book" / "pdf.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The first non-empty <h1> (genindex.html has an empty one in the theme's header) without
# its "#" permalink.
HEADING_JS = """() => {
    for (const h1 of document.querySelectorAll("h1")) {
        const copy = h1.cloneNode(true);
        copy.querySelectorAll(".headerlink").forEach((a) => a.remove());
        const text = copy.textContent.trim();
        if (text) return text;
    }
    return "";
}"""

# The math Sphinx writes (MathJax's own output spans also have the class "math").
MATH = "span.math.notranslate, div.math.notranslate"
MATH_COUNT_JS = f"() => document.querySelectorAll('{MATH}').length"

# MathJax 2 is done when its queue is idle and every math element holds typeset output
# instead of its TeX source.
MATH_DONE_JS = """() => {
    if (!window.MathJax || !MathJax.Hub || !MathJax.Hub.queue) return false;
    if (MathJax.Hub.queue.pending || MathJax.Hub.queue.running) return false;
    const maths = document.querySelectorAll("MATH_SELECTOR");
    return Array.from(maths).every((el) =>
        el.querySelector(".MathJax, .MathJax_Display, .MathJax_CHTML, .MathJax_SVG") &&
        !el.innerText.includes("\\\\(") && !el.innerText.includes("\\\\["));
}""".replace("MATH_SELECTOR", MATH)

# Every image: [src, width in pixels once loaded, alt text, whether it is a figure].
IMAGES_JS = """() => Array.from(document.querySelectorAll("article img")).map((img) =>
    [img.getAttribute("src"), img.naturalWidth, img.alt, !!img.closest("figure")])"""

# An explorer's frame, once decoded: [src, naturalWidth].
FRAME_JS = "(img) => img.decode().then(() => [img.getAttribute('src'), img.naturalWidth])"


def _shown(explorer) -> tuple[str, int, str]:
    """What an explorer shows: its frame's src, that image's width once decoded, and the
    status line that says which values the frame is drawn for."""
    src, width = explorer.locator("img.ac-frame").evaluate(FRAME_JS)
    return src, width, explorer.locator(".ac-status").inner_text()


def _check_change(problems: list, rel: str, explorer, what: str, act, label=None) -> None:
    """Do ``act`` and check that the frame, the status and ``label`` (if any) change."""
    src, _, said = _shown(explorer)
    label_before = label.inner_text() if label is not None else None
    act()
    new_src, width, new_said = _shown(explorer)
    if new_src == src or width == 0:
        problems.append(f"{rel}: {what} did not change the frame (or it did not load)")
    if new_said == said:
        problems.append(f"{rel}: {what} left the status {said!r} unchanged")
    if label is not None and label.inner_text() == label_before:
        problems.append(f"{rel}: {what} left its label {label_before!r} unchanged")


def drive_explorers(page, rel: str) -> list[str]:
    """Move every slider, pick another entry of every menu and click another button of
    every group of each explorer on the page; each must change the frame shown and the
    labels that say what it shows. Returns what went wrong."""
    problems = []
    explorers = page.locator(".ac-explorer")
    if explorers.count() < EXPLORERS.get(rel, 0):
        problems.append(f"{rel}: expected {EXPLORERS[rel]} explorer(s), found {explorers.count()}")
    for n in range(explorers.count()):
        explorer = explorers.nth(n)
        sliders = explorer.locator("input[type=range]")
        for k in range(sliders.count()):
            slider = sliders.nth(k)
            at_end = slider.evaluate("(s) => Number(s.value) >= Number(s.max)")
            key = "ArrowLeft" if at_end else "ArrowRight"
            label = explorer.locator(f'output[data-label="{slider.get_attribute("data-control")}"]')
            _check_change(
                problems,
                rel,
                explorer,
                f"slider {k + 1} ({key})",
                partial(slider.press, key),
                label,
            )
        menus = explorer.locator("select")
        for k in range(menus.count()):
            menu = menus.nth(k)
            other = menu.evaluate("(m) => String((m.selectedIndex + 1) % m.options.length)")
            _check_change(
                problems, rel, explorer, f"menu {k + 1}", partial(menu.select_option, other)
            )
        groups = explorer.locator('[role="group"]')
        for k in range(groups.count()):
            button = groups.nth(k).locator('button[aria-pressed="false"]').first
            _check_change(problems, rel, explorer, f"button group {k + 1}", button.click)
            if groups.nth(k).locator('button[aria-pressed="true"]').count() != 1:
                problems.append(f"{rel}: button group {k + 1} does not show one button pressed")
        if not explorer.evaluate("(e) => e.scrollWidth <= e.clientWidth + 1"):
            problems.append(f"{rel}: explorer {n + 1} is wider than the page")
    return problems


MATH_ERRORS_JS = """() => Array.from(document.querySelectorAll(".merror, .noError, .MathJax_Error"))
    .map((el) => el.textContent.trim()).slice(0, 5)"""

# Each display equation's typeset box (MathJax 2's inline-block span.math) against the text
# column that holds it: how far its centre sits from the column's centre, in pixels, for
# the equations narrower than the column (a wider one scrolls and cannot be centred).
DISPLAY_OFFSETS_JS = """() => Array.from(document.querySelectorAll("div.math.notranslate"))
    .map((div) => {
        const box = div.querySelector(".MathJax_Display .MathJax span.math");
        const column = div.parentElement.getBoundingClientRect();
        if (!box) return null;
        const r = box.getBoundingClientRect();
        if (r.width === 0 || r.width >= column.width - 2) return null;
        return [(r.left + r.right) / 2 - (column.left + column.right) / 2,
                div.textContent.trim().slice(0, 40)];
    }).filter((x) => x !== null)"""
DISPLAY_CENTRE_TOLERANCE_PX = 3


def render_problems(page, rel: str) -> list[str]:
    """On a page loaded and typeset in the light tab at 1280 px (after its axe-core run):
    its title starts with its heading, its math typeset without an error and its display
    equations centred, its images loaded (its figures with alt text, as many as it
    measures), its explorers answer; then its screenshot. Returns what went wrong."""
    problems = []
    page.wait_for_load_state("networkidle")  # what the page loads after its load event
    title, heading = page.title().strip(), page.evaluate(HEADING_JS)
    if not title or not heading or not title.startswith(heading):
        problems.append(f"{rel}: title {title!r} does not start with its heading {heading!r}")
    if page.evaluate(MATH_COUNT_JS):
        errors = page.evaluate(MATH_ERRORS_JS)
        if errors:
            problems.append(f"{rel}: MathJax could not typeset {errors}")
        problems += [
            f"{rel}: display equation {text!r} sits {offset:+.0f} px off the centre of the "
            "text column"
            for offset, text in page.evaluate(DISPLAY_OFFSETS_JS)
            if abs(offset) > DISPLAY_CENTRE_TOLERANCE_PX
        ]
    images = page.evaluate(IMAGES_JS)
    broken = [src for src, width, _, _ in images if width == 0]
    no_alt = [src for src, _, alt, in_figure in images if in_figure and not alt]
    if broken:
        problems.append(f"{rel}: images that did not load: {broken}")
    if no_alt:
        problems.append(f"{rel}: figures without alt text: {no_alt}")
    expected = MEASURED_FIGURES.get(rel, 0)
    if len(images) < expected:
        problems.append(f"{rel}: expected its {expected} measured figures, found {len(images)}")
    problems += drive_explorers(page, rel)
    # networkidle: the web fonts requested while typesetting, and nothing left in flight
    # that the next page's load would abort
    page.wait_for_load_state("networkidle")
    # JPEG: a long page's full PNG took 2 to 5 s to encode, its JPEG about half
    shot = SCREENSHOTS / (rel.replace("/", "__")[:-5] + ".jpg")
    page.screenshot(path=str(shot), full_page=True, type="jpeg", quality=80)
    return problems


def test_pages_render_offline_in_a_browser(survey):
    """Every page, in the survey's light tab at 1280 px: nothing requested from another
    host, no request failed or answered with an error, no JavaScript error, and each page's
    own checks (``render_problems``); index.html sends the reader to the intro."""
    local_failures = [f for f in survey.failed if urlsplit(f.split(" ")[0]).hostname in LOCAL_HOSTS]
    assert survey.redirect, "index.html does not send the reader to book/intro.html"
    assert not survey.blocked, "pages tried to load from other hosts:\n" + "\n".join(
        sorted(set(survey.blocked))
    )
    assert not local_failures, "requests failed:\n" + "\n".join(local_failures)
    assert not survey.bad_status, "requests answered with an error:\n" + "\n".join(
        survey.bad_status
    )
    assert not survey.errors, "JavaScript errors:\n" + "\n".join(survey.errors)
    assert len(survey.rendered) == len(survey.pages), (
        f"{len(survey.rendered)} of {len(survey.pages)} pages checked"
    )
    assert not survey.problems, "\n".join(survey.problems)


# ---------------------------------------------------------------------------------------
# Accessibility, equations, figures and search: one pass over the site in three tabs

# axe-core's rules for WCAG 2.0 and 2.1, levels A and AA. label-content-name-mismatch
# (WCAG 2.5.3, level A) is tagged "experimental" in axe-core, which leaves it out of a run
# by tags: it is asked for by name.
AXE_OPTIONS = {
    "runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]},
    "rules": {"label-content-name-mismatch": {"enabled": True}},
    "resultTypes": ["violations"],
}
# axe.run does most of its work before its promise resolves: started from a timer, it runs
# in each tab's own process at the same time (the light and the dark tab's runs overlap).
AXE_START_JS = """(options) => {
    window.courseAxeRun = new Promise((resolve, reject) =>
        setTimeout(() => axe.run(document, options).then(resolve, reject), 0));
}"""
AXE_RESULT_JS = "() => window.courseAxeRun"
# The theme's colour mode as a returning reader has it: pydata-sphinx-theme's script in
# each page's head reads it from localStorage, before the page is drawn.
MODE_INIT_JS = "localStorage.setItem('mode', 'MODE'); localStorage.setItem('theme', 'MODE');"
THEME_JS = "() => document.documentElement.dataset.theme"

# Each display equation's box (MathJax 2's div.MathJax_Display inside Sphinx's div.math):
# what keeps a reader from reading all of it. Its TeX source names it.
EQUATIONS_JS = """() => {
    const width = document.documentElement.clientWidth;
    const problems = [];
    for (const div of document.querySelectorAll("div.math.notranslate")) {
        const tex = div.querySelector('script[type^="math/tex"]');
        const name = Array.from((tex || div).textContent.trim().replace(/\\s+/g, " "))
            .slice(0, 50).join("");
        const box = div.querySelector(".MathJax_Display");
        if (!box) {
            problems.push(`not typeset: ${name}`);
            continue;
        }
        const r = box.getBoundingClientRect();
        const wide = box.scrollWidth > box.clientWidth + 1;
        if (wide && !["auto", "scroll"].includes(getComputedStyle(box).overflowX))
            problems.push(`${box.scrollWidth} px wide in a ${box.clientWidth}-px box that ` +
                          `does not scroll: ${name}`);
        const math = box.querySelector(".MathJax");
        if (math && math.getBoundingClientRect().left < r.left - 1)
            problems.push(`starts left of its box, out of reach: ${name}`);
        if (r.left < -1 || r.right > width + 1)
            problems.push(`its box spans ${Math.round(r.left)} to ${Math.round(r.right)} px ` +
                          `of a ${width}-px window: ${name}`);
        for (let up = box.parentElement; up && up !== document.body; up = up.parentElement) {
            const overflow = getComputedStyle(up).overflowX;
            if ((overflow === "hidden" || overflow === "clip") &&
                up.scrollWidth > up.clientWidth + 1) {
                problems.push(`cut off by ${up.tagName.toLowerCase()}.` +
                              `${String(up.className).split(" ")[0]}: ${name}`);
                break;
            }
        }
        if (wide && box.tabIndex < 0 && !box.querySelector('[tabindex]:not([tabindex="-1"])'))
            problems.push(`scrolls, but the keyboard cannot reach it: ${name}`);
    }
    return problems;
}"""
DISPLAY_MATH_COUNT_JS = "() => document.querySelectorAll('div.math.notranslate').length"
# Each display equation's layout: [box left, box width, scrollWidth, clientWidth, typeset
# width, font sizes of the box and of Sphinx's div], to compare a narrowed tab with a phone.
EQUATION_LAYOUT_JS = """() => Array.from(document.querySelectorAll("div.math.notranslate"))
    .map((div) => {
        const box = div.querySelector(".MathJax_Display");
        if (!box) return null;
        const r = box.getBoundingClientRect(), math = box.querySelector(".MathJax");
        return [Math.round(r.left), Math.round(r.width), box.scrollWidth, box.clientWidth,
                math ? Math.round(math.getBoundingClientRect().width) : -1,
                getComputedStyle(box).fontSize, getComputedStyle(div).fontSize];
    })"""
TWO_FRAMES_JS = "() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))"
PHONE_WIDTH = 390

SEARCH_DONE_JS = "() => !!document.querySelector('#search-results .search-summary')"
SEARCH_HITS_JS = """() => Array.from(document.querySelectorAll("#search-results ul.search li a"))
    .map((a) => a.getAttribute("href"))"""


def axe_script() -> Path:
    """axe-core as the pinned package axe-playwright-python ships it (axe.min.js), read
    from the local file system."""
    spec = importlib.util.find_spec("axe_playwright_python")
    if spec is None or spec.origin is None:
        pytest.fail("axe-playwright-python is not installed: run `make setup` (dev extra)")
    script = Path(spec.origin).parent / "axe.min.js"
    assert script.is_file(), f"no axe.min.js in {script.parent}"
    return script


def axe_version(script: Path) -> str:
    found = re.search(r"axe v(\d+\.\d+\.\d+)", script.read_text(encoding="utf-8")[:200])
    return found.group(1) if found else "unknown"


def test_axe_core_is_a_recent_release():
    """The accessibility check is only as good as axe-core's rules: 4.10 or later."""
    version = axe_version(axe_script())
    assert version != "unknown", "axe.min.js does not say its version in its header"
    assert tuple(int(n) for n in version.split(".")) >= (4, 10), f"axe-core {version} < 4.10"


def book_pages(site: Path) -> list[str]:
    """Every page a reader can land on (not index.html, which only redirects)."""
    return [
        p.relative_to(site).as_posix()
        for p in html_pages(site)
        if 'http-equiv="Refresh"' not in p.read_text(encoding="utf-8")
    ]


class Tab:
    """A headless chromium tab on the served site, in a colour mode, at a width."""

    def __init__(self, browser, server: str, mode: str, width: int, blocked: list, errors: list):
        self.server, self.mode, self.width = server, mode, width
        context = browser.new_context(viewport={"width": width, "height": 900})
        context.add_init_script(MODE_INIT_JS.replace("MODE", mode))

        def route(route):
            parts = urlsplit(route.request.url)
            if parts.scheme in {"data", "blob", "about"} or parts.hostname in LOCAL_HOSTS:
                route.continue_()
            else:
                blocked.append(route.request.url)
                route.abort()

        context.route("**/*", route)
        self.page = context.new_page()
        self.page.on("pageerror", lambda e: errors.append(f"{self.page.url}: {e}"))

    def open(self, rel: str) -> None:
        """Start loading ``rel`` (a path and query on the site): the tabs load together."""
        if self.page.viewport_size["width"] != self.width:  # narrowed for the last page
            self.page.set_viewport_size({"width": self.width, "height": 900})
        self.page.goto(f"{self.server}/{rel}", wait_until="commit")

    def narrow(self, width: int) -> None:
        """Lay the page out again at ``width`` px, as a phone shows it (MathJax 2 typesets
        once, at load: the equations' layout then matches a page loaded at that width,
        which ``test_a_narrowed_tab_lays_out_equations_as_a_phone_does`` checks)."""
        self.page.set_viewport_size({"width": width, "height": 900})
        self.page.evaluate(TWO_FRAMES_JS)

    def settle(self, rel: str) -> None:
        """Wait for the page to load and MathJax to finish; check the page is in the tab's
        colour mode."""
        self.page.wait_for_load_state("load")
        if self.page.evaluate(MATH_COUNT_JS):
            self.page.wait_for_function(MATH_DONE_JS, timeout=60_000)
        theme = self.page.evaluate(THEME_JS)
        assert theme == self.mode, f"{rel} shows the {theme} mode, not the {self.mode} one"

    def equation_problems(self, rel: str) -> list[str]:
        if not self.page.evaluate(DISPLAY_MATH_COUNT_JS):
            return []
        width = self.page.viewport_size["width"]
        return [f"{rel} at {width} px: {p}" for p in self.page.evaluate(EQUATIONS_JS)]

    def start_axe(self) -> None:
        if not self.page.evaluate("() => typeof window.axe === 'object'"):
            self.page.add_script_tag(path=str(axe_script()))
        self.page.evaluate(AXE_START_JS, AXE_OPTIONS)

    def axe_violations(self, rel: str) -> list[str]:
        """What the run started by start_axe found: one line per element and rule."""
        found = []
        for rule in self.page.evaluate(AXE_RESULT_JS)["violations"]:
            for node in rule["nodes"]:
                target = " ".join(str(t) for t in node["target"])
                found.append(
                    f"{rule['id']} ({rule['impact']}): {rel} [{self.mode}]: {target}: "
                    f"{rule['help']}"
                )
        return found


class Survey:
    """What one pass over every page found: axe-core's violations in the light and the dark
    mode at 1280 px, the display equations a reader cannot read whole at 1280 and at
    390 px, and what the light tab saw of each page's rendering (``render_problems``)."""

    def __init__(self):
        self.pages: list[str] = []
        self.violations: list[str] = []
        self.equations: list[str] = []
        self.blocked: list[str] = []
        self.errors: list[str] = []
        # the light tab's: local requests that failed, answers >= 400, render_problems
        self.failed: list[str] = []
        self.bad_status: list[str] = []
        self.problems: list[str] = []
        self.rendered: list[str] = []
        self.redirect = False
        self.axe_running = False  # in the light tab
        self.phone_layouts: dict[str, list] = {}  # page -> EQUATION_LAYOUT_JS at 390 px
        # the page with the most display equations, loaded at 390 px: (page, its layout)
        self.phone_loaded: tuple[str, list] | None = None
        # the light tab's search for "label smoothing": the pages found, axe-core's
        # violations on the results, the requests to other hosts it made
        self.search_hits: list[str] = []
        self.search_violations: list[str] = []
        self.search_blocked: list[str] = []


def run_survey(site: Path) -> Survey:
    """One pass over the site, with its own server and browser. Two tabs, light and dark
    at 1280 px, load each page together: their MathJax and axe-core runs overlap, and the
    light tab's rendering checks overlap the dark tab's axe-core run. Then the dark tab is
    narrowed to a phone's 390 px for the equations (instead of a third tab loading and
    typesetting every page again: 20 pages, about 5 s of CPU each). Last, a tab loads the
    page with the most display equations at 390 px, and the light tab searches the site.

    It runs in the background as soon as the site is built (``AFTER_BUILD``), beside the
    other tests; what it finds does not depend on the load."""
    chromium = find_chromium()
    from playwright.sync_api import sync_playwright

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for old in [*SCREENSHOTS.glob("*.png"), *SCREENSHOTS.glob("*.jpg")]:
        old.unlink()
    found = Survey()
    with book_pdf().serve(site) as server, sync_playwright() as p:
        browser = launch(p, chromium)
        try:
            light, dark = (
                Tab(browser, server, mode, 1280, found.blocked, found.errors)
                for mode in ("light", "dark")
            )
            light.page.on("requestfailed", lambda r: found.failed.append(f"{r.url} ({r.failure})"))

            def answered(response):
                # axe-core reads the style sheets' @imports again, by fetch or XHR, resolved
                # against the page instead of the sheet (basic.css): not the site's requests
                axes = found.axe_running and response.request.resource_type in {"fetch", "xhr"}
                if response.status >= 400 and not axes:
                    found.bad_status.append(f"{response.url}: HTTP {response.status}")

            light.page.on("response", answered)
            # index.html only redirects, to the root page of the toc
            light.page.goto(f"{server}/index.html", wait_until="load")
            light.page.wait_for_url(re.compile(r".*/book/intro\.html$"), timeout=10_000)
            light.page.wait_for_load_state("networkidle")
            found.redirect = True
            # the intro typesets math: MathJax waits for its web fonts on a timer, so the
            # network can be idle before it asks for its font data, which the next page's
            # load would then abort (seen once in CI: fontdata.js, net::ERR_ABORTED)
            light.settle("book/intro.html")
            found.pages = book_pages(site)
            for rel in found.pages:
                html_text = (site / rel.split("?")[0]).read_text(encoding="utf-8")
                for tab in (light, dark):
                    tab.open(rel)
                light.settle(rel)
                dark.settle(rel)
                found.equations += light.equation_problems(rel)
                found.axe_running = True
                light.start_axe()
                dark.start_axe()
                found.violations += light.axe_violations(rel)
                found.axe_running = False
                found.problems += render_problems(light.page, rel)  # beside dark's axe-core
                found.rendered.append(rel)
                found.violations += dark.axe_violations(rel)
                if '<div class="math notranslate' in html_text:  # display equations
                    dark.narrow(PHONE_WIDTH)
                    found.equations += dark.equation_problems(rel)
                    found.phone_layouts[rel] = dark.page.evaluate(EQUATION_LAYOUT_JS)
            _load_as_a_phone(found, browser, server)
            _search(found, light)
        finally:
            browser.close()
    return found


def _load_as_a_phone(found: Survey, browser, server: str) -> None:
    """The page with the most display equations, loaded by a tab at 390 px: its layout."""
    if not found.phone_layouts:
        return
    rel = max(found.phone_layouts, key=lambda page: len(found.phone_layouts[page]))
    phone = Tab(browser, server, "light", PHONE_WIDTH, [], [])
    try:
        phone.open(rel)
        phone.settle(rel)
        found.phone_loaded = (rel, phone.page.evaluate(EQUATION_LAYOUT_JS))
    finally:
        phone.page.context.close()


def _search(found: Survey, light: Tab) -> None:
    """The light tab searches the site for "label smoothing"; axe-core on the results."""
    blocked = len(found.blocked)
    light.open("search.html?q=label+smoothing")
    light.settle("search.html")
    light.page.wait_for_function(SEARCH_DONE_JS, timeout=30_000)
    found.search_hits = light.page.evaluate(SEARCH_HITS_JS)
    found.axe_running = True
    light.start_axe()
    found.search_violations = light.axe_violations("search.html?q=label+smoothing")
    found.axe_running = False
    found.search_blocked = found.blocked[blocked:]


AFTER_BUILD = book_build.AfterBuild(run_survey)


@pytest.fixture(scope="module")
def survey(site) -> Survey:
    """The survey of the site (:func:`run_survey`), started as soon as it was built."""
    return AFTER_BUILD.result(site)


def test_every_page_passes_axe_core_in_light_and_dark_mode(survey):
    """axe-core (the WCAG 2.0 and 2.1 rules of levels A and AA) finds nothing on any page,
    in either of the theme's colour modes, with nothing loaded from another host."""
    assert len(survey.pages) >= 19, f"only {len(survey.pages)} pages checked"
    assert not survey.blocked, "pages tried to load from other hosts:\n" + "\n".join(
        sorted(set(survey.blocked))
    )
    assert not survey.errors, "JavaScript errors:\n" + "\n".join(survey.errors)
    assert not survey.violations, (
        f"axe-core {axe_version(axe_script())} found {len(survey.violations)} violation(s) of "
        "the WCAG 2.1 A/AA rules (rule (impact): page [mode]: element: what is wrong):\n"
        + "\n".join(survey.violations)
    )


def test_every_display_equation_can_be_read_whole_on_a_laptop_and_a_phone(survey):
    """At 1280 and at 390 px, each display equation fits its box or its box scrolls sideways
    (and the keyboard reaches it); no equation is cut off."""
    assert len(survey.phone_layouts) >= 10, f"{len(survey.phone_layouts)} pages seen at 390 px"
    assert not survey.equations, "display equations a reader cannot read whole:\n" + "\n".join(
        survey.equations
    )


def test_a_narrowed_tab_lays_out_equations_as_a_phone_does(survey):
    """The survey checks the equations at 390 px in a tab narrowed after loading at 1280 px:
    on the page with the most display equations, a tab that loads it at 390 px lays every
    one of them out the same (box, scroll and typeset widths, font sizes)."""
    assert survey.phone_loaded is not None, "no page with display equations was loaded at 390 px"
    rel, loaded = survey.phone_loaded
    narrowed = survey.phone_layouts[rel]
    assert len(narrowed) >= 5 and None not in narrowed, (rel, narrowed)
    assert loaded == narrowed, f"{rel}: loaded at 390 px {loaded}, narrowed {narrowed}"


class _Figures(HTMLParser):
    """The images inside <figure> elements: (src, alt)."""

    def __init__(self):
        super().__init__()
        self.depth, self.images = 0, []

    def handle_starttag(self, tag, attrs):
        values = dict(attrs)
        if tag == "figure":
            self.depth += 1
        elif tag == "img" and self.depth:
            self.images.append((values.get("src", "")[:60], (values.get("alt") or "").strip()))

    def handle_endtag(self, tag):
        if tag == "figure":
            self.depth -= 1


def test_every_figure_keeps_its_alt_text(site):
    figures, missing = 0, []
    for path in html_pages(site):
        parser = _Figures()
        parser.feed(path.read_text(encoding="utf-8"))
        figures += len(parser.images)
        rel = path.relative_to(site).as_posix()
        missing += [f"{rel}: {src}" for src, alt in parser.images if not alt]
    assert figures >= sum(MEASURED_FIGURES.values()), f"only {figures} figures found"
    assert not missing, "figures without alt text:\n" + "\n".join(missing)


def test_the_sites_search_finds_a_chapter_page_offline(survey):
    """Sphinx's search (its index, searchindex.js, served by the site) finds the chapter
    that explains label smoothing, with every request off the host blocked; the results
    page passes axe-core too."""
    hits = survey.search_hits
    chapters = [h.split("#")[0] for h in hits if re.match(r"book/\d\d_\w+\.html", h)]
    assert "book/06_transformer.html" in chapters, (
        f"searching 'label smoothing' did not find chapter 6; it found {hits}"
    )
    assert not survey.search_blocked, "the search tried to reach other hosts:\n" + "\n".join(
        survey.search_blocked
    )
    assert not survey.search_violations, "axe-core on the search results:\n" + "\n".join(
        survey.search_violations
    )
