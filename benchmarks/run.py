"""Runtime table of the course, against the budgets of DESIGN.md (medians of a few runs).

    .venv/bin/python -m benchmarks.run                    # notebooks and grading (a few minutes)
    .venv/bin/python -m benchmarks.run --book --suite     # also the book from clean and `make test`
    .venv/bin/python -m benchmarks.run --busy             # with one core kept busy meanwhile

Prints a Markdown table and writes it to benchmarks/results.md. Timings are not asserted
in tests: these machines are noisy. Run it on a quiet machine; ``--busy`` measures what a
student meets on a laptop where another program keeps a core busy (one process spinning on
one core for the whole run), the load under which the notebooks' promised times must hold.
Each notebook's full run also gives the time of its experiments (the cells marked
``skip-when-grading``), the times the notebooks' "Expected time" lines promise.
"""

import argparse
import contextlib
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from attention_course.runtime import GRADING_ENV
from autograder.chapters import chapters_in, solution_path
from autograder.experiments import is_marked
from autograder.submissions import solved_notebook, write_submission
from benchmarks.pages import PAGE_BUDGET_BYTES, course_page_weights
from benchmarks.tables import markdown_table

ROOT = Path(__file__).resolve().parents[1]
BUDGETS = {"notebook": 120, "grading-mode notebook": 45, "book from clean": 600, "test suite": 1800}


def read_rows(path: Path) -> dict[str, tuple[str, ...]]:
    """The rows of an earlier results table, by their first cell (with a date column)."""
    if not path.is_file():
        return {}
    rows = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = tuple(c.strip() for c in line.strip().strip("|").split("|"))
        if line.startswith("| ") and len(cells) == 7 and cells[0] != "what":
            rows[cells[0]] = cells
    return rows


def row_order(row: tuple[str, ...]) -> tuple[int, str]:
    """Chapters in course order, then the book, then the test suite."""
    what = row[0]
    if what.startswith("book"):
        return (1, what)
    if what.startswith("whole"):
        return (2, what)
    return (0, what)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run_notebook(
    path: Path,
    grading: bool,
    allow_errors: bool = False,
    env: dict | None = None,
    experiments: list[float] | None = None,
) -> None:
    """Run the notebook at ``path`` with nbclient, in grading mode or not; with
    ``allow_errors``, every cell runs, as nbgrader runs a submission; ``env``: more
    environment variables for its kernel (``OMP_NUM_THREADS``, say); ``experiments``, a
    list that gets the seconds the cells marked ``skip-when-grading`` took, together."""
    nb = nbformat.read(path, as_version=4)
    env = {**os.environ, **(env or {})}
    env.pop(GRADING_ENV, None)
    if grading:
        env[GRADING_ENV] = "1"
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    started: dict[int, float] = {}
    spent = []

    def cell_started(cell, cell_index, **_):
        started[cell_index] = time.perf_counter()

    def cell_done(cell, cell_index, **_):
        if is_marked(cell):
            spent.append(time.perf_counter() - started[cell_index])

    try:
        NotebookClient(
            nb,
            timeout=600,
            kernel_name="python3",
            allow_errors=allow_errors,
            resources={"metadata": {"path": str(path.parent)}},
            on_cell_execute=cell_started,
            on_cell_executed=cell_done,
        ).execute()
        if experiments is not None:
            experiments.append(sum(spent))
    finally:
        os.environ.clear()
        os.environ.update(old)


def grade_one(chapter: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        write_submission(solved_notebook(ROOT, chapter), Path(tmp) / "in", "student", chapter)
        subprocess.run(
            [sys.executable, "-m", "autograder", "grade", f"{tmp}/in", "--out", f"{tmp}/out"],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )


# Where --book builds the site (kept after the build, for its pages' weights).
BOOK_OUT = Path(tempfile.gettempdir()) / "attention-course-benchmark-book"


def build_book() -> None:
    shutil.rmtree(BOOK_OUT, ignore_errors=True)
    jb = Path(sys.executable).parent / "jupyter-book"
    subprocess.run(
        [str(jb), "build", str(ROOT), "--path-output", str(BOOK_OUT), "-W", "-n", "--keep-going"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )


def page_weights_row(site: Path) -> tuple[str, ...]:
    """The heaviest course page of a built site against the budget; every page's weight
    written to benchmarks/page-sizes.md."""
    weights = course_page_weights(site)
    rows = [[rel, f"{size / 1024:.0f}"] for rel, size in sorted(weights.items())]
    (ROOT / "benchmarks" / "page-sizes.md").write_text(
        "# Page sizes\n\nEach page of the course's website from a clean build (`python -m "
        "benchmarks.run --book`): its HTML and the images it shows, in KiB (the theme's "
        f"shared files not counted; budget {PAGE_BUDGET_BYTES // 1024} KiB a page), measured "
        f"{time.strftime('%Y-%m-%d')}.\n\n" + markdown_table(["page", "KiB"], rows) + "\n",
        encoding="utf-8",
    )
    heaviest = max(weights, key=weights.get)
    kib, budget = weights[heaviest] / 1024, PAGE_BUDGET_BYTES // 1024
    return (
        "heaviest page of the book, KiB",
        f"{kib:.0f}",
        f"{heaviest}; {len(weights)} pages, {sum(weights.values()) / 1024**2:.1f} MiB in all",
        f"{budget} KiB",
        "within" if kib <= budget else "OVER",
        "its HTML and the images it shows (benchmarks/page-sizes.md)",
    )


@contextlib.contextmanager
def one_core_busy(busy: bool):
    """With ``busy``, a process that spins on one core for as long as the block runs."""
    if not busy:
        yield
        return
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


def run_suite() -> None:
    proc = subprocess.run(["make", "test"], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-80:])
        raise SystemExit(f"`make test` failed (exit status {proc.returncode}):\n{tail}")


def write_table(rows: list[tuple[str, ...]]) -> str:
    """Merge ``rows`` (measured today) into benchmarks/results.md and return the table."""
    out = ROOT / "benchmarks" / "results.md"
    today = time.strftime("%Y-%m-%d")
    measured = {row[0]: (*row, today) for row in rows}
    # Rows measured now replace their old versions; the others are kept with their dates,
    # so that `--chapter` re-measures one chapter without losing the rest of the table.
    table = {**read_rows(out), **measured}
    cpu = f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}"
    lines = [
        "# Benchmarks",
        "",
        f"Measured on {cpu}, Python {platform.python_version()}, with "
        "`python -m benchmarks.run [--chapter ID ...] [--book] [--suite]`; each row says when. "
        "Seconds.",
        "",
        markdown_table(
            ["what", "median", "runs", "budget", "verdict", "command", "measured"],
            sorted(table.values(), key=row_order),
        ),
        "",
    ]
    out.write_text("\n".join(lines))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--book", action="store_true", help="also time the book build from clean (once)"
    )
    parser.add_argument("--suite", action="store_true", help="also time `make test` (once)")
    parser.add_argument(
        "--chapter",
        action="append",
        help="only these chapters (default: every chapter, unless --book or --suite is given)",
    )
    parser.add_argument(
        "--busy",
        action="store_true",
        help="keep one core busy while the notebooks and grading are timed (rows say so)",
    )
    args = parser.parse_args(argv)
    load = ", other core busy" if args.busy else ""
    # `--book` or `--suite` alone times just that: re-timing every chapter takes half an hour.
    chapters = args.chapter or ([] if args.book or args.suite else chapters_in(ROOT))
    rows = []

    def record(what, budget_key, command, fn, repeats, times=None):
        times = times if times is not None else [timed(fn) for _ in range(repeats)]
        median = statistics.median(times)
        budget = BUDGETS.get(budget_key)
        verdict = "" if budget is None else ("within" if median <= budget else "OVER")
        rows.append(
            (
                what,
                f"{median:.1f}",
                " / ".join(f"{t:.1f}" for t in times),
                f"{budget} s" if budget else "",
                verdict,
                command,
            )
        )
        print(f"{what}: median {median:.1f} s ({times})", flush=True)
        write_table(rows)  # what is measured is kept, even if a later step fails

    for ch in chapters:
        path = solution_path(ROOT, ch)
        experiments: list[float] = []
        with one_core_busy(args.busy):
            record(
                f"{ch} solution notebook, full{load}",
                "notebook",
                f"nbclient on solutions/{ch}/{ch}.ipynb",
                lambda p=path, e=experiments: run_notebook(p, False, experiments=e),
                args.repeats,
            )
            record(
                f"{ch} experiments (cells marked skip-when-grading){load}",
                None,
                "the same full runs, those cells' time",
                None,
                args.repeats,
                times=experiments,
            )
            record(
                f"{ch} solution notebook, grading mode{load}",
                "grading-mode notebook",
                f"{GRADING_ENV}=1, nbclient",
                lambda p=path: run_notebook(p, True),
                args.repeats,
            )
            record(
                f"{ch} grading one submission (CLI included){load}",
                None,
                "python -m autograder grade (1 student)",
                lambda c=ch: grade_one(c),
                args.repeats,
            )
    if args.book:
        record(
            "book from clean, pages executed",
            "book from clean",
            "jupyter-book build . -W -n --keep-going (fresh output folder)",
            build_book,
            1,
        )
        rows.append(page_weights_row(BOOK_OUT / "_build" / "html"))
        write_table(rows)
    if args.suite:
        record("whole test suite", "test suite", "make test", run_suite, 1)

    print(write_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
