"""Run notebooks as a student's kit runs them, and say which graded test cells failed.

    python kit_runner.py NOTEBOOK ...   (with the kit's interpreter)

Runs each notebook top to bottom in a kernel of this interpreter, in grading mode and in
the notebook's own folder, every cell even after an error, and prints one JSON object:
notebook -> {grade id of each graded test cell: null when it passed, else its error;
"<kernel>": the kernel's interpreter, and whether it could import ``autograder``}.
Only the kit's packages are used: nbformat and nbclient come with the kit.
"""

import json
import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

# The last cell: where the kernel runs, and whether the grader can be imported there.
PROBE = """import sys
try:
    import autograder
    print(sys.executable, "imports autograder")
except ModuleNotFoundError:
    print(sys.executable, "has no autograder")"""


def failures(path: Path) -> dict:
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    found = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and meta.get("grade_id"):
            errors = [o for o in cell.outputs if o.output_type == "error"]
            found[meta["grade_id"]] = f"{errors[0].ename}: {errors[0].evalue}" if errors else None
    probe = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    found["<kernel>"] = probe.strip()
    return found


if __name__ == "__main__":
    os.environ["ATTENTION_COURSE_GRADING"] = "1"
    print(json.dumps({p: failures(Path(p)) for p in sys.argv[1:]}))
