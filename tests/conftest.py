from pathlib import Path

import book_build
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a module's tests (``pytestmark = pytest.mark.usefixtures(
    "one_thread")``): tiny models, and blocked attention's many small products, run far
    faster on one thread than on two that synchronise, above all on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# The modules whose tests keep one core busy and leave the other idle (measured with vmstat
# beside a whole run: about half the machine idle while each ran alone). They run first,
# beside the book's build, which keeps the other core busy for its first ten minutes; the
# tests that use both cores (two grading workers, a kit's two kernels, the browser) run
# once the build is done, instead of sharing the cores three ways with it.
ONE_CORE_FIRST = (
    "tests/test_mistakes.py",
    "tests/test_resume.py",
    "tests/test_solution_check.py",
    "tests/test_scan.py",
    "tests/test_validate.py",
    "tests/test_release_solutions.py",
    "tests/test_report.py",
    "tests/test_skip_when_grading.py",
    "tests/test_reference_",
)


# The tests that keep both cores busy from start to end (the kit's: its notebook and its
# checks run two at a time), last of the others: the grading tests before them wait on
# their kernels (a fifth to a third of the two cores idle), which the site's survey,
# started once the book is built, then fills; the kit's tests fill the cores alone after it.
BOTH_CORES_LAST = ("tests/test_kit.py",)


def _path(item) -> str:
    return Path(str(item.path)).relative_to(ROOT).as_posix()


def _one_core(item) -> bool:
    return any(_path(item).startswith(prefix) for prefix in ONE_CORE_FIRST)


def pytest_collection_modifyitems(config, items):
    """The tests that need the website run last, and its build starts now, in the background
    (``tests/book_build.py``): it uses one core for about ten minutes, while the tests that
    use one core (``ONE_CORE_FIRST``) run first on the other; ``BOTH_CORES_LAST`` run last
    before the website's. What those tests' modules do
    with the site (their ``AFTER_BUILD``: the survey, the PDF) starts as soon as it is
    built, beside the other tests."""
    website = [item for item in items if "site" in getattr(item, "fixturenames", ())]
    if not website:
        return
    others = [item for item in items if "site" not in getattr(item, "fixturenames", ())]
    first = [item for item in others if _one_core(item)]
    last = [item for item in others if _path(item) in BOTH_CORES_LAST]
    then = [item for item in others if not _one_core(item) and item not in last]
    items[:] = first + then + last + website
    if not config.option.collectonly:
        build = book_build.start()
        # what the website's test modules do with the site, started once it is built
        for module in dict.fromkeys(item.module for item in website):
            if isinstance(getattr(module, "AFTER_BUILD", None), book_build.AfterBuild):
                build.then(module.AFTER_BUILD)


def pytest_unconfigure(config):
    book_build.stop()
