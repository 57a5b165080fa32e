"""One job: a submission through nbgrader's autograde in its sandboxed kernel.

A job is one (student, chapter): its notebook is already staged where nbgrader takes it
from (``OUT/nbgrader/submitted/...``, its released cells put back). Running it autogrades
it into the gradebook, then generates its feedback page and copies it to
``OUT/feedback/<student>/<chapter>.html`` (:func:`write_feedback`, which makes it again
after grading by hand). A job never raises: whatever goes wrong comes back as the reason
it was not graded.

Jobs run wherever a process has built nbgrader's API from the run's
:class:`GradingSettings` (plain values): in the grader's own process, in a local worker
process (``autograder/pool.py``) or on a Dask worker (``autograder/cluster.py``). This
module imports neither of those, nor the code that plans the run (``autograder/grade.py``).
"""

import os
import random
import re
import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from autograder import speedups
from autograder.environment import GRADING, KERNEL_ENV, environment
from autograder.nbgrader_settings import course_config, grading_settings
from autograder.outfolder import Out
from autograder.release import nbgrader_api
from autograder.sandbox import KERNEL_NOT_GRADED, SandboxedKernelManager

# A job whose nbgrader step fails because another worker holds the gradebook is retried.
LOCK_RETRIES = 4
_LOCKED = re.compile(r"database (table )?is locked|SQLITE_BUSY", re.IGNORECASE)


@dataclass(frozen=True)
class GradingSettings:
    """How every kernel of a run is set up: the OUT folder, the gradebook ``db`` (a URL),
    the sandbox (unless ``sandbox`` is False) with the folders ``hidden`` from it, the
    cell timeout (None: ``nbgrader_settings.CELL_TIMEOUT_S``), and the ``chapters`` the run
    grades (for the fork server's warm-up: ``autograder/kernel_warmup.py``)."""

    out: Out
    db: str
    sandbox: bool = True
    cell_timeout: int | None = None
    hidden: tuple[str, ...] = ()
    chapters: tuple[str, ...] = ()


@dataclass(frozen=True)
class Job:
    """One submission to autograde (plain values: it travels to a worker process)."""

    student: str
    chapter: str
    out: Out

    @property
    def marker(self) -> Path:
        """Exists while a process grades this job; left behind when the process dies."""
        return self.out.running(self.student, self.chapter)


def grading_config(settings: GradingSettings, prestart: bool = False):
    """nbgrader's configuration for grading into ``settings.out``; ``prestart``: each
    notebook's kernel started while the one before it is saved (a process that grades
    job after job: ``autograder/sandbox.py``'s ``GradingExecute``)."""
    work = settings.out.work
    config = course_config(
        work,
        db_url=settings.db,
        source_directory=work / "source",
        release_directory=work / "release",
        submitted_directory=work / "submitted",
        autograded_directory=work / "autograded",
        feedback_directory=work / "feedback",
    )
    config = grading_settings(
        config, settings.sandbox, settings.cell_timeout, settings.hidden, settings.chapters
    )
    config.GradingExecute.prestart = prestart and speedups.on("kernel-ahead")
    return config


def quiet_nbgrader() -> None:
    """nbgrader's gradebook code triggers harmless SQLAlchemy warnings on every submission."""
    warnings.filterwarnings("ignore", module="nbgrader")
    warnings.filterwarnings("ignore", message=".*not in session.*")


def nbgrader_for(settings: GradingSettings, prestart: bool = False):
    """nbgrader's API for this run, built in the calling process (``prestart``: see
    :func:`grading_config`)."""
    quiet_nbgrader()
    return nbgrader_api(grading_config(settings, prestart))


def run_job(api, job: Job) -> tuple[str | None, float]:
    """Grade one job with ``api``: (None or the reason it was not graded, seconds taken)."""
    start = time.perf_counter()
    job.marker.parent.mkdir(parents=True, exist_ok=True)
    job.marker.touch()
    try:
        reason = autograde(api, job)
    except Exception as error:  # one submission's trouble never stops the batch
        reason = f"not graded: grader error ({type(error).__name__}: {error})"
    job.marker.unlink(missing_ok=True)
    return reason, time.perf_counter() - start


def autograde(api, job: Job) -> str | None:
    """Autograde one staged submission and copy its feedback page; None on success, else
    the reason it was not graded."""
    student, chapter = job.student, job.chapter
    with environment(GRADING):
        result = retrying(lambda: api.autograde(chapter, student, force=True, create=True))
    if not result["success"]:
        return _why_not_graded(result)
    write_feedback(api, job.out, student, chapter)
    return None


def write_feedback(api, out: Out, student: str, chapter: str) -> bool:
    """Make the feedback page of a graded submission from its autograded notebook and the
    gradebook (scores and comments given by hand included) and copy it to
    ``OUT/feedback/<student>/<chapter>.html``; whether it was made."""
    feedback = retrying(lambda: api.generate_feedback(chapter, student, force=True))
    page = out.nbgrader_feedback(student, chapter)
    if not (feedback["success"] and page.is_file()):
        return False
    destination = out.feedback(student, chapter)
    destination.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(page, destination)
    return True


def _why_not_graded(result: dict) -> str:
    said = f"{result.get('log') or ''}\n{result.get('error') or ''}"
    why = re.search(re.escape(KERNEL_NOT_GRADED) + r".*", said)  # the kernel died, say
    if why:
        return why.group(0).strip()
    last = (result.get("error") or result.get("log") or "").strip().splitlines()[-1:]
    return "not graded: nbgrader failed (" + (last[0] if last else "no message") + ")"


def retrying(step) -> dict:
    """``step()`` (an nbgrader API call), again while it fails on a locked gradebook."""
    for attempt in range(LOCK_RETRIES + 1):
        result = step()
        message = f"{result.get('error') or ''}\n{result.get('log') or ''}"
        if result["success"] or attempt == LOCK_RETRIES or not _LOCKED.search(message):
            return result
        time.sleep(0.5 * (attempt + 1) + random.random())
    return result


# ------------------------------------------------------------------- in a worker process

# The worker process's own nbgrader API and the settings it was built from.
_worker: tuple[GradingSettings, object] | None = None


def start_worker(settings: GradingSettings) -> None:
    """Set up a worker process: grading mode and one thread for every kernel it starts (for
    good: the process does nothing else), and nbgrader's API for ``settings``."""
    global _worker
    os.environ.update(KERNEL_ENV)
    _worker = (settings, nbgrader_for(settings, prestart=True))


def warm_up(chapter: str = "") -> None:
    """Start this worker's fork server now, as its first kernel (one of ``chapter``) would
    (``autograder/fork_server.py``), so that it gets ready while the grader still prepares
    the run (``autograder/pool.py``: :func:`start_processes`)."""
    config = grading_config(_worker[0], prestart=True)
    if config.SandboxedKernelManager.fork_server:
        km = SandboxedKernelManager(config=config)
        km.chapter = chapter
        km.fork_server_for_kernels()


def grade_in_worker(job: Job, settings: GradingSettings | None = None) -> tuple[str | None, float]:
    """Grade ``job`` with this worker's API, set up first when it was not (or was for
    other ``settings``)."""
    if settings is not None and (_worker is None or _worker[0] != settings):
        start_worker(settings)
    return run_job(_worker[1], job)
