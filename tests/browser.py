"""The browser the tests drive: Debian's chromium, never one a tool downloads."""

import os
import shutil

import pytest

# The flags the course's browser tests launch chromium with.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def launch(playwright, path: str):
    """Headless chromium from ``path`` with the course's flags."""
    return playwright.chromium.launch(executable_path=path, headless=True, args=CHROMIUM_ARGS)


def chromium() -> str:
    """The path of chromium; skips the test without it, except under CI (CI=true), where a
    missing browser fails."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        message = (
            "no chromium on PATH for the browser test: install it with "
            "`apt-get update && apt-get install -y chromium` (never `playwright install`)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path
