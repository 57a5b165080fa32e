"""Running a run's jobs on this machine: in this process, or in worker processes.

Both ways call ``finish(job, reason, seconds)`` as each job ends (``reason`` None for a
graded submission). The Dask cluster (``autograder/cluster.py``) is the third way of
running the same jobs.
"""

import multiprocessing
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool

from autograder.job import (
    GradingSettings,
    Job,
    grade_in_worker,
    run_job,
    start_worker,
    warm_up,
)

DIED = "not graded: the grading process died while grading it"


def run_here(jobs: list[Job], api, finish) -> None:
    """Grade ``jobs`` one after another in this process, with its nbgrader ``api``."""
    for job in jobs:
        finish(job, *run_job(api, job))


def start_processes(
    count: int, settings: GradingSettings, chapter: str = ""
) -> ProcessPoolExecutor:
    """``count`` worker processes, started now, each of which starts its kernels' fork
    server at once (``job.warm_up``): Python's start, nbgrader's and PyTorch's imports take
    seconds, which they then spend while the grader prepares the run (the chapters'
    releases, the solutions' check) instead of after it; ``chapter``, that of the first
    jobs (a fork server serves the kernels of one chapter). For :func:`run_in_processes`."""
    pool = _new_pool(count, settings)
    for _ in range(count):  # each warm-up keeps its process busy: the next one starts another
        pool.submit(warm_up, chapter)
    return pool


def _new_pool(count: int, settings: GradingSettings) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(
        count,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=start_worker,
        initargs=(settings,),
    )


def run_in_processes(
    jobs: list[Job],
    workers: int,
    settings: GradingSettings,
    finish,
    started: ProcessPoolExecutor | None = None,
) -> None:
    """Grade ``jobs`` in ``workers`` processes (``spawn``: each builds its own nbgrader);
    the first ones those of ``started`` (:func:`start_processes`), when given.

    A process that dies (a notebook that kills its kernel's parent, memory) breaks the
    pool and every job in it. The jobs that had not started go to a fresh pool; those
    that were running are graded again one by one, each in a pool of its own, where a job
    that breaks its pool is the culprit and is not graded.
    """
    together, alone = list(jobs), []
    while together or alone:
        if together:
            batch, together = together, []
        else:
            batch = [alone.pop(0)]
        crashed = _run_pool(batch, workers, settings, finish, started)
        started = None
        if len(batch) == 1:
            for job in crashed:
                job.marker.unlink(missing_ok=True)
                finish(job, DIED, 0.0)
            continue
        running = [job for job in crashed if job.marker.exists()]
        if not running:  # died before any job started (e.g. in start_worker)
            running = crashed
        for job in crashed:
            job.marker.unlink(missing_ok=True)
            (alone if job in running else together).append(job)


def _run_pool(
    batch: list[Job], workers: int, settings: GradingSettings, finish, started=None
) -> list[Job]:
    """Grade ``batch`` in one pool of processes (``started``, else a new one); the jobs
    lost when the pool broke."""
    crashed = []
    pool = started or _new_pool(min(workers, len(batch)), settings)
    try:
        futures = {pool.submit(grade_in_worker, job): job for job in batch}
    except BrokenProcessPool:
        pool.shutdown(cancel_futures=True)
        if started is None:
            raise
        return _run_pool(batch, workers, settings, finish)  # it broke before its first job
    with pool:
        for future in as_completed(futures):
            job = futures[future]
            try:
                reason, seconds = future.result()
            except BrokenProcessPool:
                crashed.append(job)
                continue
            except Exception as error:
                reason = f"not graded: grader error ({type(error).__name__}: {error})"
                seconds = 0.0
            finish(job, reason, seconds)
    return crashed
