"""``release-solutions``: a chapter's worked solutions, for the students once the class is
graded (what nbgrader's issue #1394 asks for).

The solution notebook ``solutions/<chapter>/<chapter>.ipynb`` holds three things: the
exercises' solutions, the visible tests, and the hidden tests. What goes to the students is
the first two: nbgrader's own ``ClearHiddenTests`` takes the hidden-test regions out (as it
does for the feedback pages), the ``### BEGIN SOLUTION`` / ``### END SOLUTION`` lines go,
the solutions' code stays, and the nbgrader metadata goes (a notebook of worked answers is
not an assignment). A note on top says what it is. Nothing of the gradebook, the reference
implementations or the mistake catalogue is in it.
"""

import copy
from pathlib import Path

import nbformat
from nbgrader.preprocessors import ClearHiddenTests

from autograder.chapters import solution_path, validate_chapters
from autograder.leaks import MARKERS

NOTE = (
    "**Worked solutions of chapter {chapter}**, handed out by your instructor once the "
    "class was graded. Each exercise holds a solution that earns full marks; the visible "
    "tests are as in your notebook, the hidden tests are left out. There are other right "
    "answers: compare, do not copy into a later submission."
)


def strip_solution_markers(source: str) -> str:
    """``source`` without the lines that mark a solution region (its code stays)."""
    return "\n".join(line for line in source.splitlines() if not any(m in line for m in MARKERS))


def solutions_notebook(root: Path, chapter: str):
    """The chapter's solution notebook as it may go to the students (see the module)."""
    nb = nbformat.read(solution_path(root, chapter), as_version=4)
    nb, _ = ClearHiddenTests().preprocess(copy.deepcopy(nb), {})
    for cell in nb.cells:
        cell.metadata.pop("nbgrader", None)
        if cell.cell_type == "code":
            cell.source = strip_solution_markers(cell.source)
            cell.outputs, cell.execution_count = [], None
    nb.cells.insert(0, nbformat.v4.new_markdown_cell(NOTE.format(chapter=chapter)))
    nbformat.validate(nb)
    return nb


def release_solutions(root: Path, chapters: list[str], out: Path) -> list[Path]:
    """Write ``out/<chapter>/<chapter>-solutions.ipynb`` for each of ``chapters``."""
    written = []
    for chapter in validate_chapters(root, chapters):
        path = Path(out) / chapter / f"{chapter}-solutions.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(solutions_notebook(root, chapter), path)
        written.append(path)
    return written
