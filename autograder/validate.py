"""``validate NOTEBOOK``: the student's check before handing in, run the way ``grade`` runs.

The notebook's released cells are put back as released (``autograder/restore.py``; a
deleted test cell is added back below the cell it followed, as nbgrader does), and it runs
top to bottom in grading mode on one thread (``autograder/environment.py``), in the
sandbox when bwrap can make one (``GradingExecute``, the same cell timeout), in a kernel of
its own. What it says, in plain text: the exercises not done, the visible tests that fail,
the test cells that grading puts back, what the scan flags for review (points withheld
until the instructor accepts), the other cells that raise an error, and the time taken.

It runs only the released test cells, which hold the visible tests alone: the hidden tests
are not in a student's notebook, and nothing here reads them.
"""

import copy
import logging
import re
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from traitlets.config import Config

from autograder.cells import exercise_of_tests, grade_id, is_graded, is_solution
from autograder.cells import tests_of_exercises as tests_of
from autograder.chapters import (
    ALL_CHAPTERS,
    INSTALLED_ROOT,
    CourseError,
    find_root,
    release_path,
    solution_path,
)
from autograder.environment import KERNEL_ENV, environment
from autograder.experiments import skip_marked
from autograder.feedback import name_of_test
from autograder.nbgrader_settings import CELL_TIMEOUT_S, CODE_STUB, configure, grading_settings
from autograder.restore import restore
from autograder.sandbox import (
    CHAPTER_KEY,
    KERNEL_NOT_GRADED,
    GradingExecute,
    bwrap_path,
    check_sandbox,
)
from autograder.scan import Flag, scan_notebook

STUB = CODE_STUB.splitlines()[-1]  # the line a solution cell raises NotImplementedError with
ERROR_LINES = 6  # of an error's message, at most
PUT_BACK = "cells put back as released"  # how restore's line begins
WIDTH = 88  # of the text, in characters


@dataclass(frozen=True)
class Failure:
    """A cell that raised: a test cell (``cell`` its grade id), or another (its place)."""

    cell: str
    exercise: str | None
    error: str  # "ErrorName: message"
    test: str | None = None  # the test's "Check that ..." line


@dataclass
class Validation:
    notebook: Path
    chapter: str
    unsandboxed: str | None  # why the kernel ran without the sandbox
    exercises: list[str]
    tests: dict[str, list[str]]  # exercise -> its test cells
    not_done: dict[str, str] = field(default_factory=dict)  # exercise -> why
    failures: list[Failure] = field(default_factory=list)  # test cells that raised
    errors: list[Failure] = field(default_factory=list)  # other cells that raised
    put_back: list[str] = field(default_factory=list)  # what restore says it put back
    flags: list[Flag] = field(default_factory=list)
    stopped: str | None = None  # why the run stopped before the last cell
    not_run: list[str] = field(default_factory=list)  # test cells after it stopped
    seconds: float = 0.0
    slowest: tuple[str, float] | None = None
    timeout: int = CELL_TIMEOUT_S

    @property
    def needs_attention(self) -> bool:
        return bool(
            self.not_done
            or self.failures
            or self.errors
            or self.put_back
            or self.flags
            or self.stopped
            or self.slow
        )

    @property
    def slow(self) -> bool:
        """The slowest cell took more than half the cell timeout."""
        return self.slowest is not None and self.slowest[1] > self.timeout / 2


def validate(
    notebook: Path, chapter: str | None = None, course_dir: Path | None = None
) -> Validation:
    """Run ``notebook`` as ``grade`` would and say what needs the student's attention.

    Raises ``CourseError`` for a missing file, a file that is not a notebook, or a chapter
    that is unknown or cannot be told from the notebook."""
    notebook = Path(notebook)
    submitted = read_notebook(notebook)
    root = course_root(course_dir)
    chapter = chapter or infer_chapter(notebook, submitted, root)
    if chapter not in ALL_CHAPTERS or not release_path(root, chapter).is_file():
        raise CourseError(f"unknown chapter {chapter!r}; the chapters: {', '.join(ALL_CHAPTERS)}")
    released = nbformat.read(release_path(root, chapter), as_version=4)
    nb, put_back = prepare(submitted, released)
    unsandboxed = sandbox_problem()
    found = Validation(
        notebook,
        chapter,
        unsandboxed,
        exercises=[grade_id(c) for c in released.cells if is_solution(c)],
        tests=tests_of(released),
        put_back=put_back,
        flags=scan_notebook(nb, chapter, released, _solution(root, chapter)),
    )
    start = time.perf_counter()
    seconds, found.stopped = execute(nb, sandbox=unsandboxed is None, chapter=chapter)
    found.seconds = time.perf_counter() - start
    if seconds:
        index = max(seconds, key=seconds.get)
        found.slowest = (_place(nb.cells[index], index), seconds[index])
    _read_outputs(found, nb, released)
    ran = {grade_id(nb.cells[i]) for i in seconds}
    found.not_run = [t for tests in found.tests.values() for t in tests if t not in ran]
    return found


def read_notebook(path: Path):
    if not path.is_file():
        raise CourseError(f"{path}: no such file")
    try:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
    except Exception as error:  # JSON, nbformat's schema, an unreadable file
        raise CourseError(f"{path} is not a Jupyter notebook ({error})") from error
    return nb


def course_root(course_dir: Path | None) -> Path:
    """The course found from ``course_dir`` or the working directory, else the installed
    one (a student may run the command in the folder they downloaded the notebook to)."""
    try:
        return find_root(course_dir)
    except CourseError:
        if course_dir is not None or not (INSTALLED_ROOT / "notebooks").is_dir():
            raise
        return INSTALLED_ROOT


def infer_chapter(path: Path, nb, root: Path) -> str:
    """The chapter named in the file's name, else the one whose released cells the
    notebook shares the most of."""
    named = [ch for ch in ALL_CHAPTERS if ch in path.name]
    if len(named) == 1:
        return named[0]
    ids = {grade_id(c) for c in nb.cells} - {None, "header", "setup"}
    shared = {
        ch: len(ids & {grade_id(c) for c in nbformat.read(release_path(root, ch), 4).cells})
        for ch in ALL_CHAPTERS
        if release_path(root, ch).is_file()
    }
    best = max(shared.values(), default=0)
    if best == 0 or list(shared.values()).count(best) > 1:
        raise CourseError(
            f"cannot tell which chapter {path} answers: pass --chapter (one of "
            f"{', '.join(ALL_CHAPTERS)})"
        )
    return next(ch for ch, n in shared.items() if n == best)


def prepare(submitted, released) -> tuple[object, list[str]]:
    """The notebook that grading runs (its released cells put back, the experiment cells
    grading skips stubbed out, outputs cleared) and
    what was put back; a deleted test cell goes back below the graded or solution cell it
    followed in the release, as nbgrader's ``add_missing_cells`` puts it."""
    restored, said = restore(submitted, released)
    skip_marked(restored, released)  # as grading does: the experiments no score needs
    nb = nbformat.from_dict(restored)
    present = {grade_id(c) for c in nb.cells}
    anchors: list[str] = []  # the release's graded and solution cells so far
    for cell in released.cells:
        if is_graded(cell) and grade_id(cell) not in present:
            after = next((a for a in reversed(anchors) if a in present), None)
            at = 1 + next((i for i, c in enumerate(nb.cells) if grade_id(c) == after), -1)
            nb.cells.insert(at if after else len(nb.cells), copy.deepcopy(cell))
            present.add(grade_id(cell))
        if is_graded(cell) or is_solution(cell):
            anchors.append(grade_id(cell))
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb, _items(said)


def _items(said: str | None) -> list[str]:
    """What ``restore`` said, one cell a line: "test_x (edited)"."""
    items = []
    for part in (said or "").split("; "):
        head, _, rest = part.partition(": ")
        if head == PUT_BACK:
            items += re.split(r", (?=[\w.-]+ \()", rest)
        elif part:
            items.append(part)
    return items


def sandbox_problem() -> str | None:
    """None when the kernel can run in the grader's sandbox here, else why it cannot."""
    if bwrap_path() is None:
        return "bwrap (bubblewrap) is not installed here"
    try:
        check_sandbox()
    except CourseError as error:
        return f"bwrap could not make a sandbox here ({error})"
    return None


class _TimedExecute(GradingExecute):
    """``GradingExecute`` that keeps each cell's running time."""

    def preprocess(self, nb, resources=None, km=None):
        self.seconds: dict[int, float] = {}
        return super().preprocess(nb, resources, km)

    def preprocess_cell(self, cell, resources, index):
        start = time.perf_counter()
        try:
            return super().preprocess_cell(cell, resources, index)
        finally:
            if cell.cell_type == "code":
                self.seconds[index] = time.perf_counter() - start


class _Said(logging.Handler):
    def __init__(self):
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def execute(nb, sandbox: bool, chapter: str = "") -> tuple[dict[int, float], str | None]:
    """Run ``nb`` (a notebook of ``chapter``) in place as ``grade`` runs a submission:
    (seconds per code cell, why it stopped before its last cell or None)."""
    log = logging.getLogger(__name__)
    said = _Said()
    log.addHandler(said)
    log.propagate = False
    config = grading_settings(configure(Config()), sandbox=sandbox)
    runner = _TimedExecute(config=config, log=log)
    stopped = None
    try:
        with environment(KERNEL_ENV), tempfile.TemporaryDirectory() as folder:
            runner.preprocess(nb, {"metadata": {"path": folder}, CHAPTER_KEY: chapter})
    except (DeadKernelError, CellTimeoutError) as error:
        why = [line for line in said.lines if line.startswith(KERNEL_NOT_GRADED)]
        stopped = why[-1].removeprefix(KERNEL_NOT_GRADED) if why else str(error)
    finally:
        log.removeHandler(said)
    return getattr(runner, "seconds", {}), stopped


def _read_outputs(found: Validation, nb, released) -> None:
    """Fill ``found`` from the cells as they ran: exercises not done, cells that raised."""
    exercise_of = exercise_of_tests(released)
    stubs = {grade_id(c): _plain(c.source) for c in released.cells if is_solution(c)}
    sources = {grade_id(c): c.source for c in nb.cells if is_solution(c)}
    for exercise in found.exercises:
        source = sources.get(exercise)
        if source is None:
            found.not_done[exercise] = "its cell is missing (deleted, or its metadata removed)"
        elif _plain(source) == stubs[exercise]:
            found.not_done[exercise] = "unchanged from the release"
        elif STUB in source:
            found.not_done[exercise] = "still raises NotImplementedError"
    for index, cell in enumerate(nb.cells):
        error = _error(cell)
        if error is None:
            continue
        if is_graded(cell) and grade_id(cell) in exercise_of:
            cell_id = grade_id(cell)
            failure = Failure(cell_id, exercise_of[cell_id], error, name_of_test(cell.source))
            found.failures.append(failure)
        else:
            found.errors.append(Failure(_place(cell, index), grade_id(cell), error))


def _error(cell) -> str | None:
    """``ErrorName: message`` of the cell's error, its message cut to ``ERROR_LINES``."""
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            lines = str(output.get("evalue", "")).strip().splitlines() or [""]
            if len(lines) > ERROR_LINES:
                lines = lines[:ERROR_LINES] + ["..."]
            return f"{output.get('ename', 'Error')}: " + "\n".join(lines).strip()
    return None


def _plain(source: str) -> str:
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


def _solution(root: Path, chapter: str):
    """The chapter's solution notebook where the course has it (the scan then follows what
    the hidden tests import, as grading does), else None."""
    path = solution_path(root, chapter)
    return nbformat.read(path, as_version=4) if path.is_file() else None


def _place(cell, index: int) -> str:
    """A cell as a student finds it: its grade id, else its place and its first line."""
    if grade_id(cell):
        return grade_id(cell)
    first = next((line.strip() for line in cell.source.splitlines() if line.strip()), "")
    first = first if len(first) <= 40 else first[:37] + "..."
    return f"cell {index + 1} ({first!r})" if first else f"cell {index + 1}"


# --------------------------------------------------------------------------- the text


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _indent(text: str, by: str = "      ") -> str:
    return "\n".join(by + line for line in text.splitlines())


def text(found: Validation) -> str:
    """What ``validate`` prints: plain text for a terminal, the summary on the last line."""
    how = (
        "in the grader's sandbox"
        if found.unsandboxed is None
        else f"WITHOUT the grader's sandbox: {found.unsandboxed}"
    )
    out = [
        f"Checked {found.notebook} (chapter {found.chapter}) the way `grade` runs it: the test "
        f"cells as released, grading mode, one thread, {how}.",
        "",
    ]
    failing = {f.exercise for f in found.failures}
    width = max(map(len, found.exercises), default=0)
    out.append(f"Exercises ({len(found.exercises)}):")
    for exercise in found.exercises:
        tests = found.tests.get(exercise, [])
        if exercise in found.not_done:
            state = f"NOT DONE  {found.not_done[exercise]}"
        elif set(tests) & set(found.not_run):
            state = "NOT RUN   the run stopped before its tests"
        elif exercise in failing:
            fails = [f.cell for f in found.failures if f.exercise == exercise]
            state = f"FAILS     {', '.join(fails)}"
        else:
            state = "ok        " + (
                f"its {len(tests)} visible test cells pass"
                if len(tests) > 1
                else "its visible test passes"
                if tests
                else "done (no test cell)"
            )
        flagged = " [flagged for review]" if any(f.cell == exercise for f in found.flags) else ""
        out.append(f"  {exercise:{width}s}  {state}{flagged}")
    if found.not_done:
        out += [
            "",
            f"Not done ({len(found.not_done)}): replace the lines `raise NotImplementedError(...)` "
            "with your code; their tests fail until then.",
        ]
    shown = [f for f in found.failures if f.exercise not in found.not_done]
    if shown:
        out += ["", f"Visible tests that fail ({len(shown)}):"]
        for f in shown:
            named = f' "{f.test.rstrip(".")}"' if f.test else ""
            out += [f"  {f.cell}, of exercise {f.exercise}:{named}", _indent(f.error)]
    if found.errors:
        out += ["", f"Other cells that raise an error ({len(found.errors)}):"]
        for f in found.errors:
            out += [f"  {f.cell}:", _indent(f.error)]
        out.append("  Grading runs every cell from the top: make each one run.")
    if found.stopped:
        out += [
            "",
            f"The run stopped: {found.stopped}.",
            "  Grading would stop there too, and the notebook would not be graded.",
        ]
    if found.put_back:
        out += ["", f"Changed or deleted cells that grading puts back ({len(found.put_back)}):"]
        out += [f"  {part}" for part in found.put_back]
        out.append(
            "  Grading runs the test cells as released, not your changes; the results above "
            "are theirs."
        )
    if found.flags:
        out += ["", f"Flagged for review ({len(found.flags)}):"]
        out += [f"  {flag}" for flag in found.flags]
        withheld = sorted({t for f in found.flags for t in found.tests.get(f.cell, [])})
        out.append(
            "  The points of a flagged exercise"
            + (f" ({', '.join(withheld)})" if withheld else "")
            + " are withheld, whatever its tests say, until your instructor has read the code "
            "and accepted it. Unless you mean it, remove the code."
        )
    out += ["", _timing(found)]
    out += [
        "",
        "The hidden tests are not in your notebook: they run only when it is graded, and may "
        "still fail where the visible ones pass.",
    ]
    body = "\n".join(_wrap(line) for line in "\n".join(out).splitlines())
    return body + "\n" + _summary(found)


def _wrap(line: str) -> str:
    """``line`` folded at ``WIDTH``; an indented line's continuation two spaces more."""
    lead = line[: len(line) - len(line.lstrip())]
    lead += "  " if lead else ""
    return (
        textwrap.fill(
            line,
            WIDTH,
            subsequent_indent=lead,
            break_long_words=False,
            break_on_hyphens=False,
        )
        if line.strip()
        else ""
    )


def _timing(found: Validation) -> str:
    line = f"Time: {found.seconds:.1f} s in all, the kernel's start included"
    if found.slowest is None:
        return line + "."
    where, seconds = found.slowest
    line += (
        f"; slowest cell: {where}, {seconds:.1f} s of the {found.timeout} s a cell may run "
        "before grading interrupts it."
    )
    if found.slow:
        line += " That is close to the limit: make it faster (a grading machine may be slower)."
    return line


def _summary(found: Validation) -> str:
    if not found.needs_attention:
        return (
            f"READY: all {_n(len(found.exercises), 'exercise')} done, every visible test "
            f"passes, nothing put back or flagged ({found.seconds:.0f} s)."
        )
    shown = [f for f in found.failures if f.exercise not in found.not_done]
    parts = [
        _n(len(found.not_done), "exercise") + " not done" if found.not_done else "",
        _n(len(shown), "visible test cell") + " failing" if shown else "",
        _n(len(found.errors), "other cell") + " raising an error" if found.errors else "",
        "the run stopped" if found.stopped else "",
        _n(len(found.put_back), "cell") + " put back" if found.put_back else "",
        _n(len(found.flags), "flag") + " for review" if found.flags else "",
        "a slow cell" if found.slow else "",
    ]
    return "NEEDS ATTENTION: " + ", ".join(p for p in parts if p) + "."
