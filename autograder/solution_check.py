"""A grading environment that cannot run the notebooks must never look like a graded class.

When the grading kernels cannot import the course (a path the sandbox hides, a broken
package earlier on ``PYTHONPATH``), or a package is missing, a kernel cannot start, another
PyTorch is installed, every setup cell fails and nbgrader scores every submission 0 with
nothing to say it was not the students' fault. Two checks stop that:

- **before** a chapter is graded, :func:`check_solutions` grades the chapter's own solution
  notebook the way a submission is graded: staged with its released cells put back
  (``autograder/restore.py``), autograded by nbgrader in the sandboxed kernel with the run's
  settings (grading mode, one thread, the cell timeout), scored from a gradebook, and
  checked outside the kernel against the chapter's key (``autograder/outside.py``). Short
  of full marks, the run stops with a ``CourseError`` naming the cause: the first cell that
  failed and its error, or why the kernel did not run, and where the kernels import the
  course from (``autograder/kernel_imports.py``). The check grades into a folder and
  gradebook of its own (``OUT/solution-check/``, removed when it passes, kept for the
  instructor to open when it does not), so the class's gradebook, CSV files and report
  never hold it. A pass is cached beside the keys, per solution notebook and grading
  environment (:func:`environment_fingerprint`), so a class pays for it once;
- **after** the jobs ran, :func:`setup_failures` finds a chapter whose setup cell failed
  for every submission this run graded (at least two): an environment problem (a Dask
  worker's, say, which the check on this machine cannot see), not the students'. Those
  submissions are recorded as not graded, their feedback pages withdrawn, and the run
  says so. A setup cell that fails for some submissions only is graded as always.
"""

import hashlib
import importlib.metadata
import json
import shutil
import time
from dataclasses import replace
from pathlib import Path

import nbformat

from autograder import gradebook
from autograder.cells import grade_id, graded_cells
from autograder.chapters import INSTALLED_ROOT, CourseError, solution_path
from autograder.environment import KERNEL_ENV, environment
from autograder.files import file_hash, write_atomically
from autograder.job import GradingSettings, Job, nbgrader_for, run_job
from autograder.kernel_imports import describe, kernel_imports
from autograder.outfolder import GRADED, GradeRow, Ledger, Out
from autograder.outside import OutsideCheck, fingerprint, key_cache
from autograder.restore import stage

CHECK_FOLDER = "solution-check"  # in OUT, while a check runs and after one failed
STUDENT = "solution"  # the check's student id, in the check's own gradebook
SETUP = "setup"  # the grade id of every chapter's setup cell (imports the course)
PACKAGES = ("nbgrader", "nbclient", "nbconvert", "jupyter_client", "ipykernel", "numpy")


def environment_fingerprint(solution_sha256: str, settings: GradingSettings) -> dict:
    """What a verdict on a solution depends on: the solution notebook and the key's
    fingerprint, where and with what the kernels run (their Python and where it imports
    the course from, the packages that run notebooks, the sandbox, the cell timeout), and
    the grader's own code."""
    found = kernel_imports()
    return {
        **fingerprint(solution_sha256),
        "kernel_python": found.python,
        "kernel_imports": found.packages,
        "kernel_path": list(found.path),
        "packages": {name: _version(name) for name in PACKAGES},
        "sandbox": settings.sandbox,
        "cell_timeout": settings.cell_timeout,
        "grader": _grader_hash(),
    }


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _grader_hash() -> str:
    digest = hashlib.sha256()
    for file in sorted((INSTALLED_ROOT / "autograder").glob("*.py")):
        digest.update(file.name.encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()


def verdict_file(chapter: str, solution_sha256: str, settings: GradingSettings) -> Path:
    """Where a pass of ``chapter``'s solution in this environment is cached."""
    text = json.dumps(environment_fingerprint(solution_sha256, settings), sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:32]
    return key_cache() / "solution-checks" / f"{chapter}-{digest}.json"


def check_solutions(
    root: Path, out: Out, settings: GradingSettings, chapters: list[str], outside, log
) -> None:
    """Grade each chapter's solution as a submission (unless a pass is cached for it and
    this environment); a ``CourseError`` naming the cause for one short of full marks."""
    for chapter in chapters:
        solution = solution_path(root, chapter)
        cached = verdict_file(chapter, file_hash(solution), settings)
        if cached.is_file():
            log(f"solution check of {chapter}: full marks in this grading environment (cached)")
            continue
        points, max_points, seconds = _grade_solution(root, out, settings, chapter, outside)
        log(
            f"solution check of {chapter}: {points:g} / {max_points:g} in this grading "
            f"environment, graded as a submission in {seconds:.1f} s"
        )
        verdict = {"chapter": chapter, "points": points, "max_points": max_points}
        try:
            write_atomically(cached, json.dumps(verdict, indent=1))
        except OSError as error:
            log(f"solution check of {chapter}: not cached ({error})")


def _grade_solution(root, out: Out, settings, chapter, outside) -> tuple[float, float, float]:
    """(points, max points, seconds) of the solution graded as a submission in a folder of
    its own; a ``CourseError`` when it falls short."""
    start = time.perf_counter()
    folder = out / CHECK_FOLDER
    shutil.rmtree(folder, ignore_errors=True)
    check = Out(folder)
    mine = replace(settings, out=check, db=f"sqlite:///{folder / 'gradebook.db'}")
    shutil.copytree(out.source(chapter), check.source(chapter))
    api = nbgrader_for(mine)
    result = api.generate_assignment(chapter, force=True, create=True)
    if not result["success"]:
        raise CourseError(f"the solution check of {chapter} could not prepare it: {result}")
    stage(check, solution_path(root, chapter), STUDENT, chapter, {})
    gradebook.create_students(mine.db, [STUDENT])
    with environment(KERNEL_ENV):
        reason, _ = run_job(api, Job(STUDENT, chapter, check))
    rows = _rows(root, mine.db, chapter, reason)
    problems: list[str] = []
    if reason is None and _points(rows) == _max_points(rows):  # then outside the kernel
        verifier = OutsideCheck(root, folder, outside.config, log=lambda *_: None)
        verifier.keys[(chapter, file_hash(solution_path(root, chapter)))] = outside.key(chapter)
        rows = verifier.verify(rows, problems)
    points, max_points = _points(rows), _max_points(rows)
    if reason is not None or points < max_points:
        raise CourseError(_why(chapter, check, rows, reason, problems, points, max_points))
    shutil.rmtree(folder, ignore_errors=True)
    return points, max_points, time.perf_counter() - start


def _points(rows: list[GradeRow]) -> float:
    return sum(r.points for r in rows)


def _max_points(rows: list[GradeRow]) -> float:
    return sum(r.max_points for r in rows)


def _rows(root: Path, db: str, chapter: str, reason: str | None) -> list[GradeRow]:
    cells = graded_cells(nbformat.read(solution_path(root, chapter), 4))
    scores = {} if reason else gradebook.scores(db, [(STUDENT, chapter)])[(STUDENT, chapter)]
    status = reason or GRADED
    return [GradeRow(STUDENT, chapter, cell, scores.get(cell, 0.0), m, status) for cell, m in cells]


def _why(chapter, check: Out, rows, reason, problems, points, max_points) -> str:
    if reason is not None:
        cause = f"the kernel did not run it ({reason.removeprefix('not graded: ')})"
    else:
        cause = first_error(check.autograded(STUDENT, chapter)) or (
            "; ".join(problems)
            or "cells short of full marks: "
            + ", ".join(r.cell for r in rows if r.points < r.max_points)
        )
    return (
        f"the solution of {chapter} scores {points:g}/{max_points:g} in this grading "
        f"environment: {cause}. Nothing was graded: every submission would be scored in "
        f"the same broken environment. The grading kernels import "
        f"{describe(kernel_imports())} (Python {kernel_imports().python}). Fix the "
        f"environment and grade again; the solution graded as a submission is in {check.folder}"
    )


def first_error(notebook: Path) -> str | None:
    """``the <cell> cell failed with <error>`` for the first cell of the (autograded)
    notebook at ``notebook`` that has an error output; None when none has."""
    try:
        nb = json.loads(notebook.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for index, cell in enumerate(nb.get("cells", [])):
        for output in cell.get("outputs", []) if isinstance(cell, dict) else []:
            if isinstance(output, dict) and output.get("output_type") == "error":
                name = grade_id(cell) or f"number {index + 1}"
                error = f"{output.get('ename')}: {output.get('evalue')}"
                return f"the {name} cell failed with {error}"
    return None


def _setup_error(notebook: Path) -> str | None:
    """The error of the setup cell of the autograded notebook at ``notebook``, or None."""
    try:
        nb = json.loads(notebook.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for cell in nb.get("cells", []):
        if isinstance(cell, dict) and grade_id(cell) == SETUP:
            for output in cell.get("outputs", []):
                if isinstance(output, dict) and output.get("output_type") == "error":
                    return f"{output.get('ename')}: {output.get('evalue')}"
    return None


def setup_failures(out: Out, ledger: Ledger, graded: list[tuple[str, str]]) -> list[str]:
    """Among ``graded`` (student, chapter) graded by this run: a chapter whose setup cell
    failed for every one of its submissions (two at least) is an environment problem.
    Each of them is recorded in ``ledger`` as not graded (a run started again grades it),
    its feedback page withdrawn; what was found, in words."""
    by_chapter: dict[str, list[str]] = {}
    for student, chapter in graded:
        by_chapter.setdefault(chapter, []).append(student)
    found = []
    for chapter, students in by_chapter.items():
        errors = {s: _setup_error(out.autograded(s, chapter)) for s in students}
        if len(students) < 2 or not all(errors.values()):
            continue
        example = errors[students[0]]
        why = (
            "not graded: the setup cell failed for every submission of this chapter in this "
            f"run ({example}): a problem of the grading environment, not the student's"
        )
        for student in students:
            ledger.get(student, chapter)["status"] = why
            out.feedback(student, chapter).unlink(missing_ok=True)
        found.append(
            f"{chapter}: the setup cell failed for all {len(students)} submissions graded "
            f"({example}): the grading environment is broken (on a Dask worker, say); they "
            "are recorded as not graded and get no feedback: fix it and grade again"
        )
    ledger.save()
    return found
