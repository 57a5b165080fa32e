"""``python -m attention_course.validate NOTEBOOK``: check a notebook before handing it in,
from the student kit alone, the way grading runs its visible tests.

What grading does to a notebook, this does to a copy of it: the test cells and the other
locked cells are put back as the chapter released them (the kit keeps the released
notebooks, ``attention_course/data/released/``), the cells marked ``skip-when-grading``
(experiments no score depends on) are left out, and the notebook runs top to bottom in a
fresh kernel, in grading mode (``ATTENTION_COURSE_GRADING=1``), in its own folder. Then it
says, in plain text: the exercises not done, the visible tests that fail (and the first
lines of their errors), the cells it put back, the other cells that raise an error, and the
time taken. It exits 0 when every visible test passes, 1 when one fails, 2 when the
notebook cannot be read.

The hidden tests are not in the kit: a notebook that passes here can still lose points
there, and the flags of the grader's scan (an operator an exercise asks you to write
yourself) are the instructor's.
"""

import argparse
import copy
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from attention_course.runtime import without_iri_grammar

# The released notebooks: in the kit, beside the package's data (autograder/kit.py puts them
# there); in a copy of the course's repository, its notebooks/ folder.
RELEASED = Path(__file__).resolve().parent / "data" / "released"
REPOSITORY = Path(__file__).resolve().parents[1] / "notebooks"


def released_path(chapter: str) -> Path:
    kit = RELEASED / f"{chapter}.ipynb"
    return kit if kit.is_file() else REPOSITORY / chapter / f"{chapter}.ipynb"


def chapters() -> list[str]:
    found = {p.stem for p in RELEASED.glob("*.ipynb")}
    found |= {p.stem for p in REPOSITORY.glob("*/*.ipynb")}
    return sorted(found)


SKIP_TAG = "skip-when-grading"
SKIPPED = (
    "# Not run when grading: an experiment no score depends on (training, plots or an\n"
    "# explorer), left out to grade faster. It runs in full when you run the notebook.\n"
)


def _grading(cell) -> dict:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta if isinstance(meta, dict) else {}


def _source(cell) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def chapter_of(nb: dict, path: Path) -> str | None:
    """The chapter the notebook is: the one its set-up cell names, else its file's name."""
    for cell in nb.get("cells", []):
        found = re.search(r'recorded_values\("([0-9a-z_]+)"', _source(cell))
        if found:
            return found.group(1)
    return path.stem if path.stem in chapters() else None


def prepare(nb: dict, released: dict) -> tuple[dict, list[str]]:
    """The notebook as grading runs it, and the names of the cells put back as released."""
    nb = copy.deepcopy(nb)
    by_id = {_grading(c).get("grade_id"): c for c in nb.get("cells", []) if _grading(c)}
    put_back, cells = [], []
    for cell in released["cells"]:
        meta = _grading(cell)
        name = meta.get("grade_id")
        if meta.get("solution"):
            cells.append(by_id.get(name, cell))  # the student's answer (or the stub)
            continue
        if name and (meta.get("locked") or meta.get("grade")):
            mine = by_id.get(name)
            if mine is None or _source(mine) != _source(cell):
                put_back.append(name)
            cells.append(copy.deepcopy(cell))
            continue
        cells.append(copy.deepcopy(by_id.get(name, cell)) if name else copy.deepcopy(cell))
    for cell in cells:
        if cell.get("cell_type") == "code" and SKIP_TAG in (
            cell.get("metadata", {}).get("tags") or []
        ):
            cell["source"] = SKIPPED
        if cell.get("cell_type") == "code":
            cell["outputs"], cell["execution_count"] = [], None
    nb["cells"] = cells
    return nb, put_back


def _kernel_transport(sockets: Path) -> dict:
    """How the kernel talks to this process: over Unix sockets in ``sockets`` (a private
    folder), except on Windows, where ZeroMQ has none.

    Over TCP, ipykernel warns on every start that the traffic is not encrypted: a student
    can do nothing about it, and it sat above every report. Its sockets in a folder of this
    process's own is what the warning asks for; on Windows the kernel's warnings alone are
    left out (``log_level`` ERROR: its errors still show, and a cell's errors are in the
    report)."""
    if os.name == "nt":
        return {"extra_arguments": ["--IPKernelApp.log_level=ERROR"]}
    from traitlets.config import Config

    return {"config": Config({"KernelManager": {"transport": "ipc", "ip": str(sockets / "k")}})}


def run(nb: dict, folder: Path) -> dict:
    """Run ``nb`` top to bottom in a fresh kernel (grading mode, in ``folder``)."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.from_dict(nb)
    saved = os.environ.get("ATTENTION_COURSE_GRADING")
    os.environ["ATTENTION_COURSE_GRADING"] = "1"
    try:
        with tempfile.TemporaryDirectory(prefix="attention-course-kernel-") as sockets:
            NotebookClient(
                notebook,
                timeout=300,
                kernel_name="python3",
                allow_errors=True,
                resources={"metadata": {"path": str(folder)}},
                **_kernel_transport(Path(sockets)),
            ).execute()
    finally:
        if saved is None:
            os.environ.pop("ATTENTION_COURSE_GRADING", None)
        else:
            os.environ["ATTENTION_COURSE_GRADING"] = saved
    return notebook


def _error(cell) -> str | None:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return f"{output.get('ename')}: {output.get('evalue')}"
    return None


def report(ran, put_back: list[str], seconds: float, flags=()) -> tuple[str, bool]:
    """The text, and whether every visible test passed and nothing is flagged."""
    not_done, failing, others = [], [], []
    exercise = None
    passed = total = 0
    for index, cell in enumerate(ran.cells):
        meta = _grading(cell)
        if meta.get("solution"):
            exercise = meta.get("grade_id")
        error = _error(cell) if cell.cell_type == "code" else None
        if meta.get("grade"):
            total += 1
            if error is None:
                passed += 1
            elif error.startswith("NotImplementedError"):
                if exercise not in not_done:
                    not_done.append(exercise)
            else:
                lines = error.splitlines()[:6]
                failing.append(
                    f"{meta.get('grade_id')} (exercise {exercise}): " + "\n      ".join(lines)
                )
        elif error is not None and not meta.get("solution"):
            others.append(f"cell {index + 1}: {error.splitlines()[0]}")
        elif error is not None and not error.startswith("NotImplementedError"):
            others.append(f"cell {index + 1} ({meta.get('grade_id')}): {error.splitlines()[0]}")
    lines = [f"Visible tests: {passed} of {total} pass ({seconds:.0f} s in grading mode)."]
    if not_done:
        lines.append("Exercises not done yet: " + ", ".join(str(e) for e in not_done) + ".")
    if failing:
        lines.append("Visible tests that fail:")
        lines += [f"  - {f}" for f in failing]
    if put_back:
        lines.append(
            "Cells that grading puts back as released (your changes to them are not graded): "
            + ", ".join(put_back)
            + "."
        )
    if flags:
        lines.append(
            "Flagged for review when graded (the exercise's points are withheld until your "
            "instructor has read the cell):"
        )
        lines += [f"  - {flag}" for flag in flags]
    if others:
        lines.append("Other cells that raise an error:")
        lines += [f"  - {o}" for o in others]
    ready = passed == total and not flags
    lines.append(
        "READY: every visible test passes (the hidden tests run when your notebook is graded)."
        if ready
        else "NOT READY: see what is listed above, then run this again."
    )
    return "\n".join(lines), ready


def validate(path: Path) -> tuple[str, bool]:
    import nbformat

    try:
        nb = nbformat.reads(Path(path).read_text(encoding="utf-8"), as_version=4)
        assert isinstance(nb.get("cells"), list)
    except (OSError, ValueError, AssertionError, AttributeError, KeyError) as error:
        raise SystemExit(f"error: {path} is not a notebook that can be read: {error}") from None
    chapter = chapter_of(nb, Path(path))
    if chapter is None or not released_path(chapter).is_file():
        raise SystemExit(
            f"error: {path} is not one of the chapters of this kit ({', '.join(chapters())})"
        )
    released = nbformat.read(released_path(chapter), as_version=4)
    from attention_course.scan import scan_notebook

    flags = scan_notebook(nb, chapter, released=released)  # the grader's scan, as it reads
    prepared, put_back = prepare(nb, released)
    start = time.perf_counter()
    ran = run(prepared, Path(path).resolve().parent)
    return report(ran, put_back, time.perf_counter() - start, flags)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m attention_course.validate", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("notebook", type=Path)
    args = parser.parse_args(argv)
    without_iri_grammar()  # 2.6 s less before the kernel starts
    try:
        text, ready = validate(args.notebook)
    except SystemExit as stop:
        print(stop, file=sys.stderr)
        return 2
    print(text)
    return 0 if ready else 1


if __name__ == "__main__":
    sys.exit(main())
