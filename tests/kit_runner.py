"""Run a chapter's notebook as a student's kit runs it, once per run of mistakes, and say
which graded test cells failed and what their messages named.

    python kit_runner.py --mistakes SPEC.json NOTEBOOK      (with the kit's interpreter)

The notebook (its exercises solved) runs in-process once per run of SPEC (a JSON list of
{"name", "edits"}, each edit a {"cell", "old", "new"}: the cell's text ``old`` becomes
``new``; a run makes one mistake, or a pack of them in different cells), in grading mode
and the notebook's own folder, without its experiments, as ``tests/test_mistakes.py`` runs
a chapter; it prints one JSON object: run -> {grade id of each failed graded test cell:
the known mistakes its message names}. Only the kit's packages are used.
"""

import contextlib
import io
import json
import os
import re
import sys
from pathlib import Path

from attention_course.runtime import without_iri_grammar

without_iri_grammar()  # before nbformat: 2.6 s less in each runner
import nbformat  # noqa: E402

TAG = re.compile(r"\[known mistake: ([a-z0-9-]+)\]")


def named(path: Path, runs: list[dict]) -> dict:
    """run -> {failed graded test cell: the mistakes its message names}."""
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
    for run in runs:
        namespace: dict = {"__name__": "__main__"}
        failed = {}
        edits = {edit["cell"]: edit for edit in run["edits"]}
        assert len(edits) == len(run["edits"]), f"{run['name']}: two edits of one cell"
        for grade_id, graded, source in cells:
            if grade_id in edits:
                edit = edits[grade_id]
                assert source.count(edit["old"]) == 1, (run["name"], grade_id)
                source = source.replace(edit["old"], edit["new"])
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    exec(compile(source, grade_id or "<cell>", "exec"), namespace)
            except Exception as error:
                if graded:
                    failed[grade_id] = TAG.findall(str(error))
        out[run["name"]] = failed
        torch.manual_seed(0)
    return out


if __name__ == "__main__":
    os.environ["ATTENTION_COURSE_GRADING"] = "1"
    if len(sys.argv) != 4 or sys.argv[1] != "--mistakes":
        sys.exit(f"usage: {sys.argv[0]} --mistakes SPEC.json NOTEBOOK")
    spec = json.loads(Path(sys.argv[2]).read_text())
    print(json.dumps(named(Path(sys.argv[3]).resolve(), spec)))
