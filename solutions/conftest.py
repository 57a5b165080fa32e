"""nbval runs a solution notebook top to bottom in grading mode, hidden tests included:
``.venv/bin/python -m pytest solutions/ID`` while a chapter is written.

In grading mode the experiments train for seconds instead of a minute
(``attention_course.runtime.budget``). ``make test`` does not run solutions/: it runs the
same notebook as a student has it, its exercises solved, by nbval from the student kit
(``tests/test_kit.py``), and the hidden tests through the grader (``tests/test_grading.py``). The full runs, what a student sees, are timed
against their budgets by ``python -m benchmarks.run --chapter ID``, and the chapters' pages,
which the book build executes, train the reference models in full.
"""

import os

import pytest

from attention_course.runtime import GRADING_ENV

_before: dict[str, str | None] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before nbval starts a notebook's kernel (in the setup of its first cell)."""
    if not _before:
        _before[GRADING_ENV] = os.environ.get(GRADING_ENV)
    os.environ[GRADING_ENV] = "1"


def pytest_runtest_teardown(item, nextitem):
    """After the last cell of the solutions, grading mode ends for whatever runs next."""
    if nextitem is None or "solutions" not in nextitem.path.parts:
        previous = _before.pop(GRADING_ENV, None)
        if previous is None:
            os.environ.pop(GRADING_ENV, None)
        else:
            os.environ[GRADING_ENV] = previous
