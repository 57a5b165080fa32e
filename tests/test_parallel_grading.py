"""``grade --workers N``, ``--db URL`` and ``--scheduler ADDRESS``: parallel grading, into a
PostgreSQL gradebook and on a Dask cluster, gives the same grades as grading one by one;
it survives a worker process that dies and retries a step that met a locked gradebook."""

import csv
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from bwrap import grade_options
from mutants import MUTANTS
from postgres import postgres_server

from autograder import gradebook, outfolder
from autograder import job as grading_job
from autograder.chapters import CourseError
from autograder.nbgrader_settings import COURSE_ID
from autograder.submissions import mutate, solved_notebook, untouched_notebook, write_submission

CHAPTER = "04_dot_product_attention"  # the fastest chapter to grade


def grade_cli(root, submissions, out, workers, *options):
    result = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", str(submissions), "--out", str(out)]
        + ["--workers", str(workers), *options, *grade_options()],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # the progress bar (tqdm, on standard error) reached every job of the run
    jobs = re.search(r"^graded (\d+) submission", result.stdout, re.MULTILINE)
    assert jobs, result.stdout[-3000:]
    if int(jobs.group(1)):
        bar = "grading: 100%|"
        assert bar in result.stderr and f"| {jobs.group(1)}/{jobs.group(1)} [" in result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def graded_serially(root, tmp_path_factory):
    """A class of chapter 04 (the solution, the untouched notebook, a catalogued mistake
    and a broken file), graded one by one: what every other way of grading must equal."""
    tmp = tmp_path_factory.mktemp("class")
    submissions = tmp / "submissions"
    write_submission(solved_notebook(root, CHAPTER), submissions, "solution", CHAPTER)
    write_submission(untouched_notebook(root, CHAPTER), submissions, "untouched", CHAPTER)
    m = MUTANTS[CHAPTER][0]
    nb = mutate(solved_notebook(root, CHAPTER), m.cell, m.old, m.new)
    write_submission(nb, submissions, f"mutant-{m.name}", CHAPTER)
    broken = submissions / "broken" / CHAPTER / f"{CHAPTER}.ipynb"
    broken.parent.mkdir(parents=True)
    broken.write_text('{"cells": [', encoding="utf-8")
    output = grade_cli(root, submissions, tmp / "serial", workers=1)
    return submissions, tmp / "serial", output, m


def assert_same_grades(serial, other):
    for name in (outfolder.CELLS_CSV, outfolder.GRADES_CSV):
        rows = (serial / name).read_text(encoding="utf-8")
        assert rows == (other / name).read_text(encoding="utf-8"), name


@pytest.fixture(scope="module")
def postgres_url():
    with postgres_server() as url:
        yield url


@pytest.mark.slow
def test_parallel_grades_equal_serial_grades(root, tmp_path, graded_serially):
    submissions, serial, serial_output, m = graded_serially
    parallel_output = grade_cli(root, submissions, tmp_path / "parallel", workers=2)
    assert_same_grades(serial, tmp_path / "parallel")
    totals = {}
    for r in outfolder.read_csv(tmp_path / "parallel" / outfolder.CELLS_CSV):
        points, max_points = totals.get(r.student, (0, 0))
        totals[r.student] = (points + r.points, max_points + r.max_points)
    assert totals["solution"][0] == totals["solution"][1] > totals[f"mutant-{m.name}"][0] > 0
    assert totals["untouched"][0] == totals["broken"][0] == 0
    for output in (serial_output, parallel_output):  # one progress line per graded submission
        assert output.count(f" / {CHAPTER} (") == 3 and "(3 of 3, " in output


@pytest.mark.slow
def test_a_dask_cluster_grades_into_a_postgresql_gradebook_like_local_workers(
    root, tmp_path, graded_serially, postgres_url
):
    """``--scheduler`` and ``--db``: a local Dask cluster of two worker processes (the
    set-up for several machines) grades the class into a real PostgreSQL server, both
    workers writing to it; the grades equal the serial SQLite run's, the scores are in the
    server, and a second run, by local workers, keeps them, after a backup of the server's
    gradebook into an SQLite file nbgrader can open. (One run for both: a grading run's
    start costs about 25 s of CPU, and a worker writes its grades the same way wherever it
    runs.)"""
    from distributed import LocalCluster
    from nbgrader.api import Gradebook

    submissions, serial, _, _ = graded_serially
    out = tmp_path / "out"
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        output = grade_cli(
            root,
            submissions,
            out,
            1,
            "--db",
            postgres_url,
            "--scheduler",
            cluster.scheduler_address,
        )
    assert f"on the Dask cluster at {cluster.scheduler_address}" in output
    assert "(3 of 3, " in output
    assert_same_grades(serial, out)
    assert not (out / "gradebook.db").exists()  # the gradebook is the server's
    url = gradebook.resolve_url(postgres_url, out)
    expected = {
        (r.student, r.cell): r.points
        for r in outfolder.read_csv(out / outfolder.CELLS_CSV)
        if r.status == "graded"
    }
    assert len(expected) > 10
    with Gradebook(url, COURSE_ID) as gb:
        notebooks = {
            s: gb.find_submission_notebook(CHAPTER, CHAPTER, s)
            for s in {student for student, _ in expected}
        }
        stored = {(s, g.name): g.score for s, nb in notebooks.items() for g in nb.grades}
    assert {k: stored[k] for k in expected} == expected

    again = grade_cli(root, submissions, out, 2, "--db", postgres_url)
    assert "graded 0 submissions (3 already graded and unchanged)" in again
    assert_same_grades(serial, out)
    (backup,) = sorted((out / "backups").glob("gradebook-*.db"))
    with Gradebook(f"sqlite:///{backup}", COURSE_ID) as gb:
        copied = gb.find_submission_notebook(CHAPTER, CHAPTER, "solution")
        assert {g.name: g.score for g in copied.grades} == {
            cell: points for (s, cell), points in expected.items() if s == "solution"
        }


def test_a_dask_worker_that_cannot_see_the_course_is_named(tmp_path):
    from autograder.cluster import _worker_problems

    (tmp_path / "out").mkdir()
    problems = _worker_problems(
        {"the course": str(tmp_path / "nowhere"), "OUT": str(tmp_path / "out")}, sandbox=False
    )
    assert problems == [f"the course {tmp_path / 'nowhere'} is not there"]


def test_an_unreachable_scheduler_or_gradebook_is_a_clear_error(root, tmp_path):
    submissions = tmp_path / "submissions"
    write_submission(solved_notebook(root, CHAPTER), submissions, "solution", CHAPTER)
    cases = [
        (["--db", "mysql://someone@somewhere/grades"], "can be PostgreSQL or SQLite, not 'mysql'"),
        (
            ["--db", f"postgresql://nobody:secret@/nothing?host={tmp_path}"],
            "cannot open the gradebook postgresql+psycopg://nobody:***@/nothing",
        ),
    ]
    for options, message in cases:
        result = subprocess.run(
            [sys.executable, "-m", "autograder", "grade", str(submissions), "--out"]
            + [str(tmp_path / "out"), *options],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 2, result.stderr
        assert message in result.stderr and "secret" not in result.stderr, result.stderr
        assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_a_dying_worker_costs_only_its_own_submission(root, tmp_path):
    submissions = tmp_path / "submissions"
    write_submission(solved_notebook(root, CHAPTER), submissions, "solution", CHAPTER)
    # a notebook that kills the process running its kernel: the grader's worker. Only
    # without the sandbox: in it, the kernel's parent is bwrap, in a PID namespace of its
    # own, and the worker is out of reach (a worker can still die, of memory say).
    nb = solved_notebook(root, CHAPTER)
    kill = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)"
    nb.cells.insert(0, nbformat.v4.new_code_cell(kill))
    write_submission(nb, submissions, "killer", CHAPTER)

    grade_cli(root, submissions, tmp_path / "out", 2, "--no-sandbox")
    by_student = {}
    for row in outfolder.read_csv(tmp_path / "out" / outfolder.CELLS_CSV):
        by_student.setdefault(row.student, []).append(row)
    assert all(r.status == "graded" and r.points == r.max_points for r in by_student["solution"])
    assert all(
        r.points == 0 and r.status.startswith("not graded: the grading process died")
        for r in by_student["killer"]
    )
    # the report times the solution's job, not the one whose process died before it said
    with open(tmp_path / "out" / "report" / "times.csv", encoding="utf-8") as f:
        assert [r["student"] for r in csv.DictReader(f)] == ["solution"]


@pytest.mark.slow
def test_workers_started_ahead_and_dead_before_their_first_job_are_replaced(
    root, tmp_path, graded_serially, monkeypatch
):
    """The worker processes start while the run is prepared (``pool.start_processes``);
    where they died before the first job (killed here once their fork servers were up),
    a fresh pool grades the class, with the same grades."""
    import os
    import signal

    from autograder import grade as grading
    from autograder import pool

    killed = []

    def started_then_killed(count, settings, chapter=""):
        started = pool.start_processes(count, settings, chapter)
        started.submit(int).result()  # the warm-ups have run before this
        for process in list(started._processes.values()):
            os.kill(process.pid, signal.SIGKILL)
            killed.append(process.pid)
        return started

    monkeypatch.setattr(grading, "start_processes", started_then_killed)
    submissions, serial, _, _ = graded_serially
    out = tmp_path / "out"
    grading.grade(
        root, submissions, out, workers=2, sandbox=not grade_options(), log=lambda *a: None
    )
    assert killed
    assert_same_grades(serial, out)


class LockedOnce:
    """An nbgrader API whose first autograde meets a gradebook locked by another worker."""

    def __init__(self):
        self.calls = []

    def autograde(self, chapter, student, force, create):
        self.calls.append("autograde")
        if self.calls.count("autograde") == 1:
            error = "sqlite3.OperationalError: database is locked"
            return {"success": False, "error": error, "log": ""}
        return {"success": True, "log": ""}

    def generate_feedback(self, chapter, student, force):
        self.calls.append("feedback")
        return {"success": True, "log": ""}


def test_a_locked_gradebook_is_retried(tmp_path, monkeypatch):
    monkeypatch.setattr(grading_job.time, "sleep", lambda seconds: None)
    api = LockedOnce()
    job = grading_job.Job("alice", CHAPTER, outfolder.Out(tmp_path))
    reason = grading_job.autograde(api, job)
    assert reason is None and api.calls == ["autograde", "autograde", "feedback"]


def test_workers_must_be_positive(root, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", str(tmp_path), "--out", str(tmp_path)]
        + ["--workers", "0"],
        cwd=root,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and "--workers" in result.stderr


def test_an_unreachable_scheduler_is_a_clear_error(monkeypatch):
    from autograder import cluster

    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 1)
    with pytest.raises(CourseError, match="cannot reach the Dask scheduler at tcp://127.0.0.1:9"):
        settings = grading_job.GradingSettings(outfolder.Out(Path("out")), "sqlite://", False)
        cluster.run_on_cluster([], "tcp://127.0.0.1:9", settings, None, print, {})
