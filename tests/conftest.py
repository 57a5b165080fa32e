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


def pytest_collection_modifyitems(config, items):
    """The tests that need the website run last, and its build starts now, in the background
    (``tests/book_build.py``): it uses one core for ten minutes while the other tests run."""
    website = [item for item in items if "site" in getattr(item, "fixturenames", ())]
    if not website:
        return
    others = [item for item in items if "site" not in getattr(item, "fixturenames", ())]
    items[:] = others + website
    if not config.option.collectonly:
        book_build.start()


def pytest_unconfigure(config):
    book_build.stop()
