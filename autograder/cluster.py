"""``grade --scheduler ADDRESS``: grade on the workers of a Dask cluster.

The grader stays where it was started: it prepares the chapters, decides which
submissions to grade, and writes the CSV files, the feedback and the report. Only the jobs
(one per student and chapter, as with local workers) go to the cluster, through Dask
distributed's ``Client.submit``. A Dask worker process grades one job at a time; each
job runs nbgrader's autograde with the same settings as a local worker (grading mode, one
thread per kernel, the sandbox, the cell timeout), built once per worker process.

What the workers need (checked on every worker before a job is sent, with a clear error
naming the worker otherwise):

- the course, ``SUBMISSIONS`` and ``OUT`` at the same absolute paths as on the machine that
  runs ``grade`` (a shared filesystem: NFS, say), ``OUT`` writable;
- the course's Python environment (the same ``pip install -e .``), and ``bwrap`` unless
  ``--no-sandbox``;
- a gradebook every worker can write to: with workers on other machines, a PostgreSQL
  server (``--db postgresql://...``); SQLite's locking is not safe over a network filesystem.

A job whose worker dies is handed to another worker by Dask, up to the scheduler's
``distributed.scheduler.allowed-failures`` times; then it is reported as not graded.
"""

import sys
import threading
from pathlib import Path

from autograder.chapters import CourseError
from autograder.job import GradingSettings, Job, grade_in_worker

CONNECT_TIMEOUT_S = 30
WORKERS_TIMEOUT_S = 60

# A worker started with several threads still grades one job at a time (start
# `dask worker --nworkers N --nthreads 1`): the worker's nbgrader API is not shared.
_one_job_at_a_time = threading.Lock()


def run_on_cluster(
    jobs: list[Job],
    scheduler: str,
    settings: GradingSettings,
    finish,
    log,
    must_see: dict[str, Path],
) -> None:
    """Grade ``jobs`` on the cluster at ``scheduler``; ``finish(job, reason, seconds)`` as
    each one ends. ``settings`` are the run's (each worker builds its nbgrader from them);
    ``must_see`` the folders (by what they are) every worker must find at the same path."""
    from distributed import Client, KilledWorker, as_completed

    try:
        client = Client(scheduler, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError) as error:
        raise CourseError(f"cannot reach the Dask scheduler at {scheduler}: {error}") from None
    with client:
        try:
            client.wait_for_workers(1, timeout=WORKERS_TIMEOUT_S)
        except TimeoutError:
            raise CourseError(
                f"the Dask scheduler at {scheduler} has no worker (waited "
                f"{WORKERS_TIMEOUT_S} s): start some with `dask worker {scheduler}`"
            ) from None
        paths = {k: str(v) for k, v in must_see.items()}
        found = client.run(_worker_problems, paths, settings.sandbox)
        problems = [f"{worker}: {p}" for worker, ps in sorted(found.items()) for p in ps]
        if problems:
            raise CourseError(
                "these Dask workers cannot grade:\n  " + "\n  ".join(problems) + "\n(every "
                "worker needs the course, SUBMISSIONS and OUT at the same paths, the course's "
                "Python environment and bubblewrap)"
            )
        log(f"grading on the Dask cluster at {scheduler}: {len(found)} workers")
        futures = {
            client.submit(_grade_job, job, settings, pure=False, key=_key(job)): job for job in jobs
        }
        for future in as_completed(futures):
            job = futures[future]
            try:
                reason, seconds = future.result()
            except KilledWorker:
                reason = "not graded: the grading process died while grading it (Dask worker)"
                seconds = 0.0
            except Exception as error:
                reason = f"not graded: grader error ({type(error).__name__}: {error})"
                seconds = 0.0
            finish(job, reason, seconds)


def _key(job) -> str:
    """A task name Dask shows on its dashboard, unique per run."""
    import uuid

    return f"grade-{job.student}-{job.chapter}-{uuid.uuid4().hex[:8]}"


def _worker_problems(paths: dict[str, str], sandbox: bool) -> list[str]:
    """On a worker: what keeps it from grading (empty when nothing does)."""
    import os

    problems = []
    for what, path in paths.items():
        if not Path(path).is_dir():
            problems.append(f"{what} {path} is not there")
        elif what == "OUT" and not os.access(path, os.W_OK):
            problems.append(f"{what} {path} is not writable")
    if sys.version_info[:2] != (3, 11):
        problems.append(f"runs Python {sys.version.split()[0]}, the course needs 3.11")
    if sandbox:
        from autograder.sandbox import check_sandbox

        try:
            check_sandbox()
        except CourseError as error:
            problems.append(str(error).splitlines()[0])
    return problems


def _grade_job(job: Job, settings: GradingSettings) -> tuple[str | None, float]:
    """On a worker: grade one job, the worker's nbgrader API built on first use."""
    with _one_job_at_a_time:
        return grade_in_worker(job, settings)
