"""Put the instructor's cells of a submitted notebook back as they were released, before
nbgrader grades it.

nbgrader matches a submission's cells to the chapter's by their grade ids and puts a locked
cell's source back from the gradebook; but a student who changes a test cell's nbgrader
metadata (``grade: false``, another grade id, a copy of the cell) makes it stop with
"Inconsistent checksums" or a ``KeyError``, and the whole notebook is not graded; a test
cell dragged above its exercise runs before the student's function exists. So ``grade``
first puts every cell of the released notebook back as it was released, from the notebook
as JSON, keeping what the student wrote:

- a **locked cell** (a test, the setup cell, the header), found by its grade id: the
  released cell, in its place (its hidden tests are restored by nbgrader, as always);
- a **solution cell**: the student's source, with the released cell's type and nbgrader
  metadata;
- a cell with nbgrader metadata the release does not have (a grade id of its own, a second
  copy of a cell): the student's cell without that metadata, so it runs and earns nothing;
- a **test cell moved above its exercise's solution cell**: moved back below it;
- every other cell (the student's own, the release's plain markdown): as it is.

A deleted test cell is left to nbgrader, which adds it back (``add_missing_cells``). What
was put back is said in one line, which ``grade`` shows as a warning and in the report.
"""

import copy
import json
import uuid
from pathlib import Path

import nbformat

from autograder.cells import exercise_above, metadata
from autograder.cells import grade_id as cell_grade_id
from autograder.experiments import skip_marked
from autograder.inert import course_text, made_inert, make_inert, placeholder_notebook
from autograder.outfolder import Out


def _source(cell) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def _as_type(cell: dict, cell_type: str) -> dict:
    """``cell`` as a cell of ``cell_type`` (a code cell has outputs, a markdown cell none)."""
    cell = dict(cell, cell_type=cell_type)
    if cell_type == "code":
        cell.setdefault("outputs", [])
        cell.setdefault("execution_count", None)
    else:
        cell.pop("outputs", None)
        cell.pop("execution_count", None)
    return cell


def exercises_of_locked_cells(released: dict) -> dict[str, str]:
    """Locked cell's grade id -> the solution cell before it in the release (none before the
    first exercise)."""
    return {cell: above for cell, above in exercise_above(released).items() if above is not None}


def restore(submitted: dict, released: dict) -> tuple[dict, str | None]:
    """``submitted`` (a notebook as JSON) with the cells of ``released`` put back as
    released, and a line saying what was put back (None when nothing was). A notebook of
    another format than 4 is left as it is (``stage`` converts it first)."""
    if submitted.get("nbformat") != 4 or not isinstance(submitted.get("cells"), list):
        return submitted, None
    originals = {cell_grade_id(c): c for c in released["cells"] if cell_grade_id(c)}
    put_back: list[str] = []  # "grade id (why)"
    ungraded: list[str] = []  # cells whose nbgrader metadata is not the release's
    cells, seen = [], set()
    for cell in submitted["cells"]:
        meta = metadata(cell)
        if meta is None or not isinstance(cell, dict):
            cells.append(cell)
            continue
        grade_id = cell_grade_id(cell)
        if grade_id not in originals or grade_id in seen:
            cell = copy.deepcopy(cell)
            del cell["metadata"]["nbgrader"]
            if grade_id in seen:
                ungraded.append(f"a copy of {grade_id}")
            else:
                ungraded.append(f"a cell with the grade id {grade_id!r}" if grade_id else "a cell")
            cells.append(cell)
            continue
        seen.add(grade_id)
        original = originals[grade_id]
        changed = meta != metadata(original) or cell.get("cell_type") != original["cell_type"]
        if (metadata(original) or {}).get("solution"):
            restored = _as_type(copy.deepcopy(cell), original["cell_type"])
            restored["metadata"]["nbgrader"] = copy.deepcopy(metadata(original))
            if changed:
                put_back.append(f"{grade_id} (its nbgrader metadata)")
            cells.append(restored)
            continue
        if changed:
            put_back.append(f"{grade_id} (nbgrader metadata changed)")
        elif _source(cell) != _source(original):
            put_back.append(f"{grade_id} (edited)")
        cells.append(copy.deepcopy(original))
    exercises = exercises_of_locked_cells(released)
    for grade_id in exercises:
        if _move_below(cells, grade_id, exercises, list(originals)):
            put_back.append(f"{grade_id} (moved above its exercise)")
    for grade_id, original in originals.items():
        if grade_id not in seen and (metadata(original) or {}).get("grade"):
            put_back.append(f"{grade_id} (deleted, or its nbgrader metadata removed)")
    _unique_ids(cells)
    said = []
    if put_back:
        said.append(f"cells put back as released: {', '.join(put_back)}")
    if ungraded:
        said.append(f"run ungraded, their nbgrader metadata removed: {', '.join(ungraded)}")
    return dict(submitted, cells=cells), "; ".join(said) or None


def _move_below(cells: list, grade_id: str, exercises: dict[str, str], order: list[str]) -> bool:
    """Move the locked cell ``grade_id`` back below its exercise's solution cell when it
    sits above it: right after the cell that precedes it in the release (``order``: the
    release's grade ids), the solution cell or an earlier test of that exercise; True when
    it moved."""
    exercise = exercises[grade_id]
    where = {cell_grade_id(c): i for i, c in enumerate(cells) if cell_grade_id(c)}
    if grade_id not in where or exercise not in where or where[grade_id] > where[exercise]:
        return False
    before = order[order.index(exercise) : order.index(grade_id)]
    after = next(g for g in reversed(before) if g in where)  # the solution cell at least
    cell = cells.pop(where[grade_id])
    cells.insert(where[after], cell)  # where[after] - 1 once popped, so right after it
    return True


def _unique_ids(cells: list) -> None:
    """Cell ids repeated (a copied cell keeps its id) get new ones: nbformat requires it."""
    taken = set()
    for cell in cells:
        if not isinstance(cell, dict) or "id" not in cell:
            continue
        if cell["id"] in taken:
            cell["id"] = uuid.uuid4().hex[:8]
        taken.add(cell["id"])


def _as_json_4(text: str) -> dict:
    """The notebook whose file holds ``text``, as JSON of nbformat 4: as it is when it is of
    format 4 (restore reads what nbformat would refuse), else converted by nbformat."""
    submitted = json.loads(text)
    if isinstance(submitted, dict) and submitted.get("nbformat") == 4:
        return submitted
    return json.loads(json.dumps(nbformat.reads(text, as_version=4)))


def stage(out: Out, path: Path, student: str, chapter: str, released: dict) -> str | None:
    """Write the submission at ``path`` where nbgrader takes it from, converted to nbformat
    4, its released cells put back as released (:func:`restore`) and the experiment cells
    marked in the release stubbed out (``autograder/experiments.py``), and made inert
    (``autograder/inert.py``: its outputs dropped, for nbgrader runs it afresh); what was
    put back. When that fails, the notebook is staged as handed in but made inert (a
    placeholder notebook when it cannot be read as one), never copied as it is, and the
    line says so."""
    if chapter not in released:
        released[chapter] = json.loads(out.released(chapter).read_text(encoding="utf-8"))
    staged = out.submitted(student, chapter)
    staged.parent.mkdir(parents=True, exist_ok=True)
    course = course_text(released[chapter])
    try:
        submitted = _as_json_4(path.read_text(encoding="utf-8"))
        # the experiments no score depends on, first: the release OUT holds has them as
        # stubs already (a locked one would otherwise be "put back" for every student)
        skip_marked(submitted, released[chapter])
        restored, repaired = restore(submitted, released[chapter])
        for cell in restored["cells"]:
            if isinstance(cell, dict) and cell.get("cell_type") == "code":
                cell["outputs"], cell["execution_count"] = [], None
        make_inert(restored, course)
        text = json.dumps(restored, indent=1, ensure_ascii=False) + "\n"
    except Exception as error:  # staged as handed in, made inert: never copied as it is
        _stage_inert(path, staged, course)
        return (
            f"its cells could not be checked ({type(error).__name__}: {str(error)[:200]}); it is graded "
            "as handed in, its markup made inert"
        )
    staged.write_text(text, encoding="utf-8")
    return repaired


def _stage_inert(path: Path, staged: Path, course: set[str]) -> None:
    """Write the notebook at ``path`` to ``staged`` made inert, its outputs cleared (a
    placeholder notebook when it is not one)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        nb = placeholder_notebook(f"{type(error).__name__}: {error}")
    else:
        nb = made_inert(text, course)
    for cell in nb["cells"]:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            cell["outputs"], cell["execution_count"] = [], None
    staged.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
