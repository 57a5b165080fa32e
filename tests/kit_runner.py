"""Run notebooks as a student's kit runs them, and say which graded test cells failed.

    python kit_runner.py NOTEBOOK ...                  (with the kit's interpreter)
    python kit_runner.py --mistakes SPEC.json NOTEBOOK

Runs each notebook top to bottom in a kernel of this interpreter, in grading mode and in
the notebook's own folder, every cell even after an error, and prints one JSON object:
notebook -> {grade id of each graded test cell: null when it passed, else its error;
"<kernel>": the kernel's interpreter, and whether it could import ``autograder``}.
Only the kit's packages are used: nbformat and nbclient come with the kit.

With ``--mistakes``, the notebook (its exercises solved) runs in-process once per mistake
of SPEC (a JSON list of {"name", "cell", "old", "new"}: the cell's text ``old`` becomes
``new``), without its experiments, as ``tests/test_mistakes.py`` runs a chapter; it prints
mistake -> {grade id of each failed graded test cell: the known mistakes its message names}.
"""

import contextlib
import io
import json
import os
import re
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError

# The last cell: where the kernel runs, and whether the grader can be imported there.
PROBE = """import sys
try:
    import autograder
    print(sys.executable, "imports autograder")
except ModuleNotFoundError:
    print(sys.executable, "has no autograder")"""


# In grading mode a chapter's cell runs in seconds (the whole notebook within 45 s). Under
# load, ipykernel 7 now and then loses a cell's reply: the kernel sits idle while the client
# waits for it (seen in CI on chapter 07; vscode-jupyter#17228). A cell past this many
# seconds is taken for that, and the notebook runs once more in a new kernel.
CELL_TIMEOUT_S = 300


def failures(path: Path) -> dict:
    for attempt in (1, 2):
        nb = nbformat.read(path, as_version=4)
        nb.cells.append(nbformat.v4.new_code_cell(PROBE))
        try:
            NotebookClient(
                nb,
                timeout=CELL_TIMEOUT_S,
                kernel_name="python3",
                allow_errors=True,
                resources={"metadata": {"path": str(path.parent)}},
            ).execute()
        except CellTimeoutError as error:
            if attempt == 2:
                raise
            print(f"{path.name}: {error}; running it again in a new kernel", file=sys.stderr)
            continue
        break
    found = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and meta.get("grade_id"):
            errors = [o for o in cell.outputs if o.output_type == "error"]
            found[meta["grade_id"]] = f"{errors[0].ename}: {errors[0].evalue}" if errors else None
    probe = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    found["<kernel>"] = probe.strip()
    return found


TAG = re.compile(r"\[known mistake: ([a-z0-9-]+)\]")


def named(path: Path, mistakes: list[dict]) -> dict:
    """mistake -> {failed graded test cell: the mistakes its message names}."""
    import matplotlib
    import torch

    matplotlib.use("Agg")
    torch.set_num_threads(1)
    cells, experiments = [], False
    for cell in nbformat.read(path, as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        grade_id = meta.get("grade_id", "")
        experiments |= grade_id.startswith("experiment")
        counts = meta.get("solution") or meta.get("grade") or grade_id == "setup"
        if cell.cell_type == "code" and (counts or not experiments):
            cells.append((grade_id, bool(meta.get("grade")), cell.source))
    os.chdir(path.parent)
    out = {}
    for mistake in mistakes:
        namespace: dict = {"__name__": "__main__"}
        failed = {}
        for grade_id, graded, source in cells:
            if grade_id == mistake["cell"]:
                assert source.count(mistake["old"]) == 1, (mistake["name"], grade_id)
                source = source.replace(mistake["old"], mistake["new"])
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    exec(compile(source, grade_id or "<cell>", "exec"), namespace)
            except Exception as error:
                if graded:
                    failed[grade_id] = TAG.findall(str(error))
        out[mistake["name"]] = failed
        torch.manual_seed(0)
    return out


if __name__ == "__main__":
    os.environ["ATTENTION_COURSE_GRADING"] = "1"
    if sys.argv[1] == "--mistakes":
        spec = json.loads(Path(sys.argv[2]).read_text())
        print(json.dumps(named(Path(sys.argv[3]).resolve(), spec)))
    else:
        print(json.dumps({p: failures(Path(p)) for p in sys.argv[1:]}))
