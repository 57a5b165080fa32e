"""``record``: the reference's answers to each chapter's visible tests, for the student kit.

The released notebooks' visible tests ask the reference for the values they compare with
(``ref = recorded("attention")``, :mod:`attention_course.recorded`). The kit holds no
reference: it holds what the reference answered when this command ran the chapter's
solution notebook, its hidden tests taken out (:func:`autograder.solutions_out.solutions_notebook`),
in grading mode, with ``ATTENTION_COURSE_RECORD`` set: every call a visible test made of
the reference, its inputs and its result, written to
``attention_course/data/recorded/<chapter>.pt``.

A recording that no longer fits the tests shows itself: the solution notebooks run against
the recorded values in the test suite, and a test whose inputs or reference changed fails
there (``NotRecorded``, or values that differ); run ``python -m autograder record`` again.
"""

import os
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from attention_course import GRADING_ENV
from attention_course.recorded import DATA, RECORD_ENV
from autograder.chapters import CourseError, solution_path, validate_chapters
from autograder.solutions_out import solutions_notebook

SAVE = "from attention_course.recorded import save_recording\n\nsave_recording()"


def record(root: Path, chapters: list[str] | None = None, out: Path = DATA) -> list[Path]:
    """Run each chapter's solution notebook (no hidden tests) recording the reference's
    answers; write ``out/<chapter>.pt``. Returns the files written."""
    written = []
    for chapter in validate_chapters(root, chapters):
        nb = solutions_notebook(root, chapter)
        nb.cells.append(nbformat.v4.new_code_cell(SAVE))
        target = Path(out) / f"{chapter}.pt"
        saved = {k: os.environ.get(k) for k in (RECORD_ENV, GRADING_ENV)}
        os.environ[RECORD_ENV], os.environ[GRADING_ENV] = str(target), "1"
        try:
            client = NotebookClient(
                nb,
                timeout=600,
                kernel_name="python3",
                resources={"metadata": {"path": str(solution_path(root, chapter).parent)}},
            )
            client.execute()
        except Exception as error:
            raise CourseError(f"recording {chapter} failed: {error}") from error
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        written.append(target)
    return written
