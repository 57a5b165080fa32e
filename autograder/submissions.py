"""Build submissions the way a student would produce them: the released notebook with
the exercises filled in. Used by the test suite and the benchmarks to prove the grader
gives full marks to a correct submission and takes points for each common mistake."""

from pathlib import Path

import nbformat

from autograder.cells import grade_id, is_solution
from autograder.chapters import release_path, solution_path
from autograder.solutions_out import strip_solution_markers


def solved_notebook(root: Path, chapter: str):
    """The released notebook with every solution cell replaced by the reference solution."""
    released = nbformat.read(release_path(root, chapter), as_version=4)
    solutions = {
        grade_id(c): c.source
        for c in nbformat.read(solution_path(root, chapter), as_version=4).cells
        if is_solution(c)
    }
    for cell in released.cells:
        if is_solution(cell):
            cell.source = strip_solution_markers(solutions[grade_id(cell)])
    return released


def untouched_notebook(root: Path, chapter: str):
    """The released notebook as the student received it."""
    return nbformat.read(release_path(root, chapter), as_version=4)


def mutate(nb, cell_id: str, old: str, new: str):
    """Replace ``old`` (which must occur exactly once) by ``new`` in the cell ``cell_id``."""
    for cell in nb.cells:
        if grade_id(cell) == cell_id:
            count = cell.source.count(old)
            if count != 1:
                raise ValueError(f"{old!r} occurs {count} times in cell {cell_id!r}, expected once")
            cell.source = cell.source.replace(old, new)
            return nb
    raise KeyError(f"no cell with grade id {cell_id!r}")


def write_submission(nb, submissions: Path, student: str, chapter: str) -> Path:
    """Write ``nb`` as ``submissions/<student>/<chapter>/<chapter>.ipynb``."""
    path = Path(submissions) / student / chapter / f"{chapter}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path
