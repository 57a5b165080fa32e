"""The instructor's experiment cells: run by students, not run when grading.

Most of a chapter's grading time went to cells no score depends on: the training runs,
plots and explorers that follow the exercises (chapter 01's solution spent 10.1 of its
14.5 s in them in grading mode). The instructor marks such a code cell in the solution
notebook with the tag ``skip-when-grading`` (cell metadata ``tags``; the release keeps
it). When ``grade`` stages a submission (``autograder/restore.py``'s ``stage``), each of its
cells with the id of a marked cell of the release gets a one-line stub instead of its
source, so the kernel does not run it (a locked cell, which nbgrader puts back from the
gradebook, is stubbed in the copy of the solution that ``grade`` releases and fills the
gradebook from: :func:`stub_marked_in`); the student's own cells, the exercises, the test
cells (hidden tests included), the scan, the diagnosis and the check outside the kernel are
unchanged, and the key of that check is made the same way (``autograder/outside.py``). The
stub says, on the student's feedback page, that the cell was not run for grading and why.

A marked cell must be one no score can depend on, and :func:`check_marked` proves it
before a release or a grading run (else a ``CourseError`` naming the cell): it is no
exercise and no test cell, and no name it binds (assigns, defines, imports, or changes
through an attribute or an item) is read by any later cell that is run when grading.
"""

import ast
import copy
import json
import re

from autograder.cells import grade_id, is_graded, is_solution
from autograder.chapters import CourseError

TAG = "skip-when-grading"
STUB = (
    "# Not run when grading: an experiment no score depends on (training, plots or an\n"
    "# explorer), left out to grade faster. It runs in full when you run the notebook.\n"
)
_MAGIC = re.compile(r"^\s*[%!]")


def _source(cell) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def _tags(cell) -> list:
    tags = (cell.get("metadata") or {}).get("tags") or []
    return tags if isinstance(tags, list) else []


def is_marked(cell) -> bool:
    """Whether a cell is marked ``skip-when-grading`` (a notebook's cell, as JSON or nbformat's)."""
    return isinstance(cell, dict) and cell.get("cell_type") == "code" and TAG in _tags(cell)


def marked_ids(nb) -> set[str]:
    """The cell ids of a notebook's marked cells."""
    return {c["id"] for c in nb["cells"] if is_marked(c) and c.get("id")}


def _tree(cell) -> ast.Module | None:
    text = "\n".join("" if _MAGIC.match(line) else line for line in _source(cell).splitlines())
    try:
        return ast.parse(text)
    except SyntaxError:
        return None


def _base(node) -> str | None:
    """The name at the root of ``a``, ``a.b[c].d``."""
    while isinstance(node, ast.Attribute | ast.Subscript | ast.Starred):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def bound_names(cell) -> set[str]:
    """What running a cell binds or changes at the top level: names assigned (attributes
    and items included, by their root name), functions, classes and imports. Names bound
    only inside a function or class body are left out: they are not the notebook's."""
    tree = _tree(cell)
    if tree is None:
        return set()
    names: set[str] = set()
    for node in _top_level(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Name | ast.Attribute | ast.Subscript) and isinstance(
            node.ctx, ast.Store | ast.Del
        ):
            if (name := _base(node)) is not None:
                names.add(name)
    return names


def _top_level(tree: ast.Module):
    """Every node of the module outside function and class bodies (their names count)."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        stack.extend(ast.iter_child_nodes(node))


def read_names(cell) -> set[str]:
    """Every name a cell reads, anywhere in it (function bodies included: they run later)."""
    tree = _tree(cell)
    if tree is None:
        return set()
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def check_marked(nb, where: str) -> None:
    """A ``CourseError`` for a marked cell that a score could depend on (see the module's
    docstring); ``where`` names the notebook in the message."""
    cells = nb["cells"]
    for index, cell in enumerate(cells):
        if not is_marked(cell):
            continue
        name = f"cell {index + 1} ({cell.get('id')})"
        if is_solution(cell) or is_graded(cell):
            raise CourseError(
                f"{where}: {name} is marked {TAG} but is {grade_id(cell)!r}, an exercise or "
                "a test cell: it must run when grading"
            )
        bound = bound_names(cell)
        for later_index, later in enumerate(cells[index + 1 :], start=index + 2):
            if later.get("cell_type") != "code" or is_marked(later):
                continue
            used = sorted(bound & read_names(later))
            if used:
                what = grade_id(later) or f"cell {later_index}"
                raise CourseError(
                    f"{where}: {name} is marked {TAG}, but {what}, which runs when grading, "
                    f"reads {', '.join(used)} that it sets: a score could depend on it. "
                    "Unmark it, or move what the later cell needs into a cell that runs"
                )


def stub_marked_in(path) -> None:
    """Stub out the marked cells of the notebook file at ``path`` (the copy of a solution
    notebook that ``grade`` makes its release and gradebook from): nbgrader puts a locked
    cell's source back from the gradebook when it grades, so a locked experiment cell is
    skipped only if the gradebook holds its stub."""
    from pathlib import Path

    path = Path(path)
    nb = json.loads(path.read_text(encoding="utf-8"))
    if skip_marked(nb, nb):
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def skip_marked(nb: dict, released: dict) -> int:
    """Give each cell of ``nb`` (a submission, as JSON) that has the id of a marked cell of
    ``released`` the stub instead of its source, its outputs cleared; how many."""
    marked = {c["id"]: c for c in released["cells"] if is_marked(c) and c.get("id")}
    skipped = 0
    for cell in nb.get("cells", []):
        if isinstance(cell, dict) and cell.get("cell_type") == "code" and cell.get("id") in marked:
            cell["source"] = STUB
            cell["outputs"], cell["execution_count"] = [], None
            grading = (marked[cell["id"]].get("metadata") or {}).get("nbgrader")
            if grading is not None:  # a locked cell: as released (its checksum the stub's)
                cell.setdefault("metadata", {})["nbgrader"] = copy.deepcopy(grading)
            skipped += 1
    return skipped
