"""Grading throughput: a class of submissions of one chapter, graded by plain nbgrader and
by the course's grader (issue 11).

    .venv/bin/python -m benchmarks.grading_throughput [--chapter 04_dot_product_attention]
        [--students 30] [--workers 2 3] [--repeat 3] [--write]

The class is the solution and every catalogued mistake of the chapter, in turn, until there
are ``--students`` submissions. Both graders run in grading mode
(``ATTENTION_COURSE_GRADING=1``) with the course's nbgrader settings:

- plain nbgrader: ``nbgrader autograde CHAPTER`` in a fresh course folder, which grades
  the submissions one after another in one process (no feedback pages);
- the course's grader: ``python -m autograder grade`` with its default workers (one per
  core), feedback pages and the class report included.

Each grader grades the class ``--repeat`` times, alternately, and the table gives the median
wall time. It also times the class's notebooks alone (each distinct one once, nbclient,
grading mode, every cell run as nbgrader runs them), with the threads each grader's kernels
get: PyTorch's default for plain nbgrader, one thread for the course's grader. A grader's
overhead per submission beyond the notebook's own run is then its wall time x processes /
submissions - the mean notebook time; for the course's grader also split, from the seconds
each job took in its worker (``OUT/graded.json``), into the part in the job (the sandbox,
nbgrader's steps, the feedback page) and the part outside every job (starting the workers,
the scan, the check outside the kernel, the report). Run it on a quiet machine; ``--write``
writes benchmarks/grading.md.
"""

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import nbformat

from attention_course.runtime import GRADING_ENV
from autograder.chapters import release_path, solution_path
from autograder.environment import ONE_THREAD_ENV
from autograder.mistakes import catalogue
from autograder.outfolder import LEDGER, Ledger
from autograder.submissions import mutate, solved_notebook, write_submission
from benchmarks.run import ROOT, run_notebook
from benchmarks.tables import markdown_table

PLAIN_CONFIG = """\
from autograder.nbgrader_settings import configure

c = get_config()  # noqa: F821
configure(c)
c.CourseDirectory.root = {root!r}
c.CourseDirectory.db_url = "sqlite:///{root}/gradebook.db"
c.Exchange.root = {root!r}
"""


def make_class(chapter: str, students: int, folder: Path) -> list[str]:
    """``students`` submissions: the solution and the chapter's mistakes, in turn."""
    versions = [None, *catalogue(chapter)]
    names = []
    for i in range(students):
        entry = versions[i % len(versions)]
        nb = solved_notebook(ROOT, chapter)
        if entry is not None:
            nb = mutate(nb, entry.cell, entry.old, entry.new)
        name = f"s{i:03d}"
        write_submission(nb, folder, name, chapter)
        names.append(name)
    return names


def class_notebook_seconds(
    chapter: str, submissions: Path, env: dict | None = None
) -> tuple[float, float]:
    """(the mean over the class of a notebook's own run time, the solution's): each
    distinct notebook of ``make_class`` run once by nbclient in grading mode, its kernel
    with ``env`` (``ONE_THREAD_ENV``, say)."""
    versions = 1 + len(catalogue(chapter))
    students = sorted(p.name for p in submissions.iterdir())
    tests = {  # the test cells as graded: hidden tests included, as nbgrader restores them
        c.metadata["nbgrader"]["grade_id"]: c.source
        for c in nbformat.read(solution_path(ROOT, chapter), as_version=4).cells
        if c.metadata.get("nbgrader", {}).get("grade")
        and not c.metadata["nbgrader"].get("solution")
    }
    seconds = []
    for name in students[:versions]:
        path = submissions / name / chapter / f"{chapter}.ipynb"
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            cell.source = tests.get(cell.metadata.get("nbgrader", {}).get("grade_id"), cell.source)
        graded = path.with_name(f"graded-{path.name}")
        nbformat.write(nb, graded)
        seconds.append(
            _timed(lambda p=graded: run_notebook(p, grading=True, allow_errors=True, env=env))
        )
        graded.unlink()
    mean = sum(seconds[i % len(seconds)] for i in range(len(students))) / len(students)
    return mean, seconds[0]


def grading_env() -> dict:
    """Grading mode, and the venv's scripts on the PATH (nbgrader runs ``alembic``)."""
    env = dict(os.environ)
    env[GRADING_ENV] = "1"
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def plain_nbgrader(chapter: str, submissions: Path, work: Path) -> float:
    """Seconds for ``nbgrader autograde`` over the class, set-up excluded."""
    work.mkdir(parents=True)
    (work / "nbgrader_config.py").write_text(PLAIN_CONFIG.format(root=str(work)))
    for step, src in (("solutions", solution_path), ("notebooks", release_path)):
        target = work / step / chapter / f"{chapter}.ipynb"
        target.parent.mkdir(parents=True)
        shutil.copy(src(ROOT, chapter), target)
    shutil.copytree(submissions, work / "submitted")
    nbgrader = [sys.executable, "-m", "nbgrader"]
    subprocess.run(
        [*nbgrader, "generate_assignment", chapter, "--force"],
        cwd=work,
        check=True,
        capture_output=True,
        env=grading_env(),
    )
    for student in sorted(p.name for p in (work / "submitted").iterdir()):
        subprocess.run(
            [*nbgrader, "db", "student", "add", student],
            cwd=work,
            check=True,
            capture_output=True,
            env=grading_env(),
        )
    start = time.perf_counter()
    subprocess.run(
        [*nbgrader, "autograde", chapter],
        cwd=work,
        check=True,
        capture_output=True,
        env=grading_env(),
    )
    return time.perf_counter() - start


def course_grader(submissions: Path, out: Path, workers: int) -> tuple[float, float]:
    """(seconds for ``python -m autograder grade`` over the class, the mean seconds of one
    submission's job in its worker, as ``OUT/graded.json`` records it)."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "autograder", "grade", str(submissions), "--out", str(out)]
        + ["--workers", str(workers)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    seconds = time.perf_counter() - start
    recorded = Ledger.read(out / LEDGER).submissions
    jobs = [e["seconds"] for chapters in recorded.values() for e in chapters.values()]
    return seconds, statistics.fmean(jobs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chapter", default="04_dot_product_attention")
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each grader (median)")
    parser.add_argument("--write", action="store_true", help="write benchmarks/grading.md")
    parser.add_argument(
        "--workers",
        type=int,
        nargs="+",
        default=None,
        help="the course grader's worker counts to measure (default: one per core)",
    )
    args = parser.parse_args(argv)
    cores = os.cpu_count() or 1
    counts = args.workers or [cores]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        make_class(args.chapter, args.students, tmp / "class")
        notebook, solution = class_notebook_seconds(args.chapter, tmp / "class")
        notebook_1, solution_1 = class_notebook_seconds(args.chapter, tmp / "class", ONE_THREAD_ENV)
        plains, runs = [], {workers: [] for workers in counts}
        jobs = {workers: [] for workers in counts}
        for run in range(args.repeat):  # alternately, so that a change of load hits both
            plains.append(plain_nbgrader(args.chapter, tmp / "class", tmp / f"plain-{run}"))
            for workers in counts:
                out = tmp / f"out-{workers}-{run}"
                seconds, job = course_grader(tmp / "class", out, workers)
                runs[workers].append(seconds)
                jobs[workers].append(job)
            print(f"run {run + 1}: plain {plains[-1]:.0f} s, ours", runs, flush=True)
        plain = statistics.median(plains)
        ours = {workers: statistics.median(seconds) for workers, seconds in runs.items()}
    n = args.students
    rows = [("plain nbgrader autograde (serial, no feedback)", plain, 1, notebook)]
    for workers, seconds in ours.items():
        default = " (the default)" if workers == cores else ""
        rows.append(
            (
                f"python -m autograder grade --workers {workers}{default} (feedback and report)",
                seconds,
                workers,
                notebook_1,
            )
        )
    lines = [
        "# Grading throughput",
        "",
        f"{n} submissions of `{args.chapter}` (the solution and each catalogued mistake in "
        f"turn), grading mode, measured {date.today()} on {cores} cores, {platform.machine()}, "
        f"Python {platform.python_version()}, with "
        f"`python -m benchmarks.grading_throughput --chapter {args.chapter} --students {n}"
        f"{' --workers ' + ' '.join(map(str, counts)) if args.workers else ''}"
        f"{f' --repeat {args.repeat}' if args.repeat > 1 else ''}`"
        f"{f': the median of {args.repeat} runs of each grader' if args.repeat > 1 else ''}. "
        f"A notebook of the class alone runs in {notebook:.1f} s on average with PyTorch's "
        f"default threads, as plain nbgrader's kernels run, and in {notebook_1:.1f} s on one "
        f"thread, as the course's grader runs each kernel (each distinct notebook run once by "
        f"nbclient in grading mode; the solution {solution:.1f} s and {solution_1:.1f} s: a "
        f"failing test also replays the solution's cells to name the mistake). A grader's "
        f"overhead per submission is its wall time x processes / submissions - the notebook's "
        f"own time with the same threads. nbclient's time includes starting the kernel and "
        f"asking it to shut down, which waits for PyTorch's teardown; the course's grader "
        f"kills each kernel once its last cell has answered: an overhead below zero is that.",
        "",
        markdown_table(
            ["grader", "wall s", "submissions / min", "notebook alone, s"]
            + ["overhead per submission beyond the notebook, s"],
            (
                [name, f"{seconds:.0f}", f"{60 * n / seconds:.1f}", f"{alone:.1f}"]
                + [f"{seconds * processes / n - alone:.1f}"]
                for name, seconds, processes, alone in rows
            ),
        ),
        "",
    ]
    for workers, seconds in ours.items():
        job = statistics.median(jobs[workers])
        outside = seconds - job * n / workers
        lines.append(
            f"Where the course's grader with {workers} workers spends it: a submission's job "
            f"took {job:.1f} s in its worker on average ({job - notebook_1:.1f} s beyond the "
            f"notebook on one thread: the sandbox, nbgrader's steps, the feedback page; "
            f"`OUT/graded.json`, median of the runs), and {outside:.0f} s of the wall time "
            f"({outside / n:.1f} s per submission) went to what no job does: starting the "
            f"workers, preparing the chapter, the scan, the check outside the kernel, the "
            f"report. A job's time includes running beside {workers - 1} other job(s) on "
            f"{cores} cores."
        )
        lines.append("")
    if args.repeat > 1:
        lines.append(f"Each run, plain nbgrader: {', '.join(f'{x:.0f}' for x in plains)} s.")
        for workers, seconds in runs.items():
            lines.append(
                f"Each run, the course's grader with {workers} workers: "
                f"{', '.join(f'{x:.0f}' for x in seconds)} s."
            )
        lines.append("")
    for workers, seconds in ours.items():
        lines.append(
            f"Speed-up of the course's grader with {workers} workers: **{plain / seconds:.2f}x**."
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        (ROOT / "benchmarks" / "grading.md").write_text(text, encoding="utf-8")
    return 0


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


if __name__ == "__main__":
    raise SystemExit(main())
