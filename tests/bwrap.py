"""bwrap (Debian's bubblewrap), the sandbox ``python -m autograder grade`` runs every
kernel in, for the tests that grade."""

import os
import shutil

import pytest

MISSING = (
    "no bwrap on PATH for the sandbox of the grading kernels: install it with "
    "`apt-get update && apt-get install -y bubblewrap`"
)


def require_bwrap() -> None:
    """Skip the test without bwrap, except under CI (CI=true), where a missing bwrap fails."""
    if shutil.which("bwrap") is None:
        if os.environ.get("CI") == "true":
            pytest.fail(MISSING)
        pytest.skip(MISSING)


def grade_options() -> list[str]:
    """What a test that grades adds to ``grade``'s command line: nothing where bwrap is
    installed (or under CI, where a missing bwrap must fail); ``--no-sandbox`` elsewhere,
    so that a machine without bwrap still tests the grading itself (tests/test_hostile.py
    is then skipped)."""
    if shutil.which("bwrap") is None and os.environ.get("CI") != "true":
        return ["--no-sandbox"]
    return []
