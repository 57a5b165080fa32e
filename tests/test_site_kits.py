"""Which kits the site hands out, and how a kit installs (issue 60).

The site hosts and links the kit of each open chapter only (``course_open_through`` in
``_config.yml``, read by ``book/_ext/run_notebook_note.py``): a small Sphinx project with
three notebook pages is built with the extension, through the second chapter, in a second or
two (the suite's one build of the whole book, ``tests/test_book_build.py``, is of every
chapter). ``make kit`` says which chapter it needs; each kit has a version of its own, in
course order, and a later chapter's kit installs over an earlier one's without touching
torch; the kit's ``validate`` prints no warning of the kernel's.
"""

import html
import importlib.util
import io
import os
import re
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from packaging.version import Version

from autograder import kit
from autograder.chapters import ALL_CHAPTERS, CourseError

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = ALL_CHAPTERS[:3]  # the mini site's notebook pages
SECRET = "THE CELLS OF THIS NOTEBOOK"
WORDS = dict(zip(CHAPTERS, ("alphaqq", "betaqq", "gammaqq"), strict=True))  # one a page


def _extension():
    spec = importlib.util.spec_from_file_location(
        "run_notebook_note", ROOT / "book" / "_ext" / "run_notebook_note.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fake_build(out: Path, through: str) -> dict:
    """What ``kit.build`` returns, in a zip named as it names it (no wheel is built)."""
    out.mkdir(parents=True)
    archive = out / kit.zip_name(through)
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr(kit.wheel_name(through), b"")
    return {"zip": archive}


def _build_mini_book(folder: Path, setting: str, monkeypatch) -> Path:
    """A Sphinx site of an index and the notebook pages of :data:`CHAPTERS`, built with
    ``book/_ext/run_notebook_note.py`` and ``course_open_through = setting``."""
    from sphinx.application import Sphinx
    from sphinx.util.docutils import docutils_namespace

    monkeypatch.setattr(kit, "build", _fake_build)
    src = folder / "src"
    for chapter in CHAPTERS:
        page = src / "notebooks" / chapter / f"{chapter}.rst"
        page.parent.mkdir(parents=True)
        page.write_text(f"Chapter {chapter}\n{'=' * 40}\n\n{SECRET}: {WORDS[chapter]}.\n")
    pages = "\n".join(f"   notebooks/{c}/{c}" for c in CHAPTERS)
    (src / "index.rst").write_text(f"Course\n======\n\n.. toctree::\n\n{pages}\n")
    (src / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / 'book' / '_ext')!r})\n"
        f"extensions = ['run_notebook_note']\ncourse_open_through = {setting!r}\n"
    )
    out = folder / "html"
    warnings = io.StringIO()
    with docutils_namespace():  # each build registers Sphinx's nodes and roles afresh
        app = Sphinx(
            str(src), str(src), str(out), str(folder / "doctrees"), "html",
            status=None, warning=warnings, freshenv=True,
        )  # fmt: skip
        app.build()
    assert not warnings.getvalue(), warnings.getvalue()
    return out


def _page(out: Path, chapter: str) -> str:
    return (out / "notebooks" / chapter / f"{chapter}.html").read_text(encoding="utf-8")


def _words(page: str) -> str:
    """The page's text, as a reader sees it."""
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def test_a_class_site_hosts_and_links_the_kits_of_the_open_chapters_only(tmp_path, monkeypatch):
    out = _build_mini_book(tmp_path, CHAPTERS[1], monkeypatch)
    ext = _extension()
    for chapter in CHAPTERS[:2]:
        page = _page(out, chapter)
        links = set(re.findall(r'href="([^"]*_kits/[^"]*\.zip)"', page))
        assert links == {f"../../_kits/{chapter}/{kit.zip_name(chapter)}"}, links
        assert (out / "notebooks" / chapter / next(iter(links))).resolve().is_file()
        words = _words(page)
        assert SECRET in words and "Run this notebook yourself" in words
        assert ext.SETUP in words and f"first kit's folder>/{ext.INSTALL}" in words, (
            "no command to install the kit over an earlier one"
        )
        assert "for self-study" not in words
    closed = CHAPTERS[2]
    page = _page(out, closed)
    assert "_kits/" not in page and ".zip" not in page, "a closed chapter's page links a kit"
    assert "This chapter is not open yet" in _words(page) and f"Chapter {closed}" in page
    assert SECRET not in page, "a closed chapter's page shows its notebook"
    assert not (out / "_kits" / closed).exists()
    assert not (out / "_sources" / "notebooks" / closed).exists()
    assert sorted(p.name for p in (out / "_kits").iterdir()) == list(CHAPTERS[:2])
    index = (out / "searchindex.js").read_text()
    assert WORDS[CHAPTERS[0]] in index and WORDS[closed] not in index, "searched, it is found"


def test_a_self_study_site_opens_every_chapter_and_says_what_later_kits_hold(tmp_path, monkeypatch):
    out = _build_mini_book(tmp_path, "all", monkeypatch)
    for chapter in CHAPTERS:
        page = _page(out, chapter)
        assert f"_kits/{chapter}/{kit.zip_name(chapter)}" in page
        assert re.search(r"A later chapter(\u2019|')s kit holds the answers", _words(page))
        assert (out / "_kits" / chapter / kit.zip_name(chapter)).is_file()


def test_a_setting_that_names_no_chapter_stops_the_build(tmp_path, monkeypatch):
    from sphinx.errors import ExtensionError

    with pytest.raises(ExtensionError, match="course_open_through.*neither a chapter nor"):
        _build_mini_book(tmp_path, "04", monkeypatch)


def test_a_closed_chapters_page_offers_no_download_of_its_notebook():
    ext = _extension()

    app = SimpleNamespace(config={ext.SETTING: CHAPTERS[0]})

    def buttons():
        return [
            {
                "label": "download-buttons",
                "buttons": [
                    {"label": "download-notebook-button"},
                    {"label": "download-source-button"},
                    {"label": "download-pdf-button"},
                ],
            }
        ]

    for chapter, kept in ((CHAPTERS[0], 3), (CHAPTERS[1], 1)):
        context = {"header_buttons": buttons()}
        ext.drop_download_links(app, f"notebooks/{chapter}/{chapter}", None, context, None)
        assert len(context["header_buttons"][0]["buttons"]) == kept, chapter


def test_the_repositorys_site_is_the_self_study_site():
    """``_config.yml`` sets the open chapters explicitly (tests/test_book.py checks a kit on
    every notebook page of the site it builds)."""
    config = (ROOT / "_config.yml").read_text()
    assert re.search(r"^    course_open_through: all$", config, re.M)


def test_make_kit_names_the_chapter_it_needs():
    env = {k: v for k, v in os.environ.items() if k not in ("THROUGH", "MAKEFLAGS")}
    result = subprocess.run(
        ["make", "kit"], cwd=ROOT, capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode != 0
    assert "make kit needs THROUGH" in result.stderr and "THROUGH=all" in result.stderr
    for through, passed in (
        ("04_dot_product_attention", "--through 04_dot_product_attention"),
        ("all", "--through all"),  # the command takes 'all' for the last chapter
    ):
        dry = subprocess.run(
            ["make", "-n", "kit", f"THROUGH={through}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert dry.returncode == 0 and passed in dry.stdout, dry.stdout + dry.stderr


def test_the_kit_command_needs_a_chapter_or_all():
    with pytest.raises(CourseError, match="--through CHAPTER"):
        kit.chapter_through(None)
    assert kit.chapter_through("all") == ALL_CHAPTERS[-1]
    assert kit.chapter_through("04_dot_product_attention") == "04_dot_product_attention"
    with pytest.raises(CourseError, match="not a chapter"):
        kit.chapter_through("04")


def test_each_kit_has_a_version_and_pip_orders_them_as_the_chapters():
    versions = [Version(kit.kit_version(c)) for c in ALL_CHAPTERS]
    assert len(set(versions)) == len(versions)
    assert versions == sorted(versions), [str(v) for v in versions]
    assert versions[0] > Version(kit.version())
    assert all(not v.local for v in versions), "a local version (+...) PyPI refuses"
    assert kit.kit_version("04_dot_product_attention") == f"{kit.version()}.4"


def test_the_kits_readme_takes_torch_from_pytorchs_cpu_index():
    text = kit.README.format(
        kit_version="0.1.0.4", through="04", torch_cpu=kit.TORCH_CPU, wheel="kit.whl"
    )
    assert "--extra-index-url https://download.pytorch.org/whl/cpu kit.whl" in text


def test_a_later_chapters_kit_installs_over_an_earlier_one_in_seconds(tmp_path):
    """Into a venv that holds the kit through 04 and the course's packages (torch among
    them), pip installs the kit through 05 with nothing else: no index is reached, torch
    stays, and the later kit's files are there."""
    earlier, later = "04_dot_product_attention", "05_multi_head_attention"
    wheels = {c: kit.build_wheel(tmp_path / c, c) for c in (earlier, later)}
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    (site / "site-packages" / "course-packages.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n"
    )

    def pip_install(wheel: Path) -> tuple[str, float]:
        start = time.perf_counter()
        result = subprocess.run(
            [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index",
             "--disable-pip-version-check", str(wheel)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout, time.perf_counter() - start

    pip_install(wheels[earlier])
    said, seconds = pip_install(wheels[later])
    installing = [line for line in said.splitlines() if line.startswith("Installing collected")]
    assert installing == ["Installing collected packages: attention-course-kit"], said
    assert f"Successfully uninstalled attention-course-kit-{kit.kit_version(earlier)}" in said
    assert f"Successfully installed attention-course-kit-{kit.kit_version(later)}" in said
    probe = subprocess.run(
        [str(python), "-c",
         "import importlib.metadata as m, attention_course, pathlib; "
         "print(m.version('attention-course-kit')); print(pathlib.Path(attention_course.__file__).parent)"],
        capture_output=True, text=True, check=True, cwd=tmp_path,
    )  # fmt: skip
    version, package = probe.stdout.split()
    assert version == kit.kit_version(later)
    package = Path(package)
    assert package.is_relative_to(venv), f"attention_course imported from {package}"
    assert (package / "data" / "recorded" / f"{later}.pt").is_file()
    assert (package / "handed_out" / "dot_product_attention.py").is_file()
    print(f"the kit through {later} installed over the kit through {earlier} in {seconds:.1f} s")


def test_validate_prints_no_warning_of_the_kernels(tmp_path, capfd):
    """The kernel's traffic goes over sockets in a private folder, so ipykernel's warning
    of unencrypted TCP, once above every report, is gone; a cell's error still is there."""
    from attention_course import validate

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("print('ran')"),
        nbformat.v4.new_code_cell("1 / 0"),
    ]
    ran = validate.run(nb, tmp_path)
    captured = capfd.readouterr()
    assert "encryption" not in captured.err and "WARNING" not in captured.err, captured.err
    assert ran.cells[0].outputs[0]["text"] == "ran\n"
    assert ran.cells[1].outputs[0]["ename"] == "ZeroDivisionError"
