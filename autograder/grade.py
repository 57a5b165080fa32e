"""``grade``: autograde a folder of submissions in grading mode; write the grades, the
feedback pages and the class report.

Input, nbgrader's submitted layout, ``SUBMISSIONS/<student>/<chapter>/<chapter>.ipynb``;
output, the OUT folder (``autograder/outfolder.py`` lists what it holds). :func:`grade`
is a pipeline; each step is a function below it, and each concern lives in its own module:

1. **discover** what is in SUBMISSIONS (``autograder/discover.py``);
2. **open the run** (:func:`open_run`): OUT made, ``OUT/graded.json`` read, the gradebook
   backed up (``autograder/gradebook.py``), the settings every kernel gets (the sandbox of
   ``autograder/sandbox.py``, the folders hidden from it, the cell timeout), and where the
   kernels will import the course from (``autograder/kernel_imports.py``);
3. **prepare the chapters** (:func:`prepare_chapters`): each chapter's release made from
   its solution notebook; the solution itself graded as a submission, which must earn full
   marks in this environment before any submission is graded
   (``autograder/solution_check.py``); and the chapter's *key* for the check outside the
   kernel (``autograder/outside.py``);
4. **plan** (:func:`plan_jobs`): a job per (student, chapter) that is new or changed, its
   released cells put back as released (``autograder/restore.py``); a submission whose
   notebook and solution are as when it was last graded is skipped unless ``regrade``;
5. **run** the jobs (:func:`run_jobs`): one job is a submission through nbgrader in its
   sandboxed kernel (``autograder/job.py``), run here or in worker processes
   (``autograder/pool.py``) or on a Dask cluster (``autograder/cluster.py``); each is
   recorded in ``OUT/graded.json`` as it finishes, so a run started again grades only what
   was left; a chapter whose setup cell failed for every submission is an environment
   problem, recorded as not graded (``autograder/solution_check.py``);
6. **collect the rows** (:func:`collect_rows`): the scores of every submission graded into
   OUT, this run's and earlier ones', read from the gradebook, and what was graded by hand
   there (:func:`graded_by_hand`: nbgrader's formgrader, ``python -m autograder review``);
7. **withhold flagged exercises** (``autograder/review.py``; a test cell scored by hand
   keeps its score), 8. **check outside the kernel** (:func:`check_outside`), 9. **write**
   the feedback pages of submissions graded by hand since their page was made
   (:func:`remake_feedback`), the notices on the feedback pages (``autograder/feedback.py``),
   the CSV files and the class report (``autograder/report.py``).

Steps 6 to 9 are :func:`finish`; :func:`apply_by_hand` runs them alone, grading nothing,
after grading by hand (``python -m autograder review``).

One bad submission never stops the batch: an unreadable notebook, a missing one or one
whose kernel dies gets zero points on every cell, with the reason in the ``status`` column.
With ``workers > 1`` the submissions are graded in parallel, each kernel on one thread so
that a score does not depend on the load; the rows keep the same order whatever order the
jobs finish in. A chapter missing from this run's submissions never replaces a result
recorded earlier.
"""

import hashlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import nbformat

from autograder import gradebook, speedups
from autograder.cells import graded_cells
from autograder.chapters import ALL_CHAPTERS, CourseError, chapters_in, course_order, solution_path
from autograder.cluster import run_on_cluster
from autograder.discover import discover, read_submission, submission_note
from autograder.experiments import stub_marked_in
from autograder.feedback import notify
from autograder.files import file_hash
from autograder.job import (
    GradingSettings,
    Job,
    grading_config,
    nbgrader_for,
    quiet_nbgrader,
    write_feedback,
)
from autograder.kernel_imports import check_kernel_imports
from autograder.outfolder import (
    BY_HAND_CSV,
    CELLS_CSV,
    GRADED,
    GRADES_CSV,
    LEDGER,
    GradeRow,
    HandGrade,
    Ledger,
    Out,
    write_by_hand,
    write_csv,
    write_wide_csv,
)
from autograder.outside import OutsideCheck, key_cache
from autograder.pool import run_here, run_in_processes, start_processes
from autograder.release import validate_solution_notebook
from autograder.report import write_report
from autograder.restore import stage
from autograder.review import FLAGGED, withhold_flagged
from autograder.sandbox import check_sandbox
from autograder.solution_check import check_solutions, setup_failures


@dataclass
class GradeReport:
    """What a run did: every row of OUT's scores, the problems it found, how long it took."""

    rows: list[GradeRow] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    workers: int = 1
    graded: int = 0  # submissions graded by this run
    up_to_date: int = 0  # submissions skipped: graded by an earlier run, unchanged since
    environment: list[str] = field(default_factory=list)  # the environment's faults found

    def totals(self) -> dict[tuple[str, str], tuple[float, float]]:
        """(student, chapter) -> (points, max points)."""
        out: dict[tuple[str, str], tuple[float, float]] = {}
        for r in self.rows:
            p, m = out.get((r.student, r.chapter), (0.0, 0.0))
            out[(r.student, r.chapter)] = (p + r.points, m + r.max_points)
        return out


@dataclass
class Run:
    """What every step of a run shares: where, with which settings, and what went wrong."""

    root: Path
    submissions: Path
    out: Out
    settings: GradingSettings
    ledger: Ledger
    log: object  # print, or a callable like it
    problems: list[str]


@dataclass
class Plan:
    """The jobs of a run, and what is known of every submission before they run."""

    jobs: list[Job] = field(default_factory=list)
    solutions: dict[str, str] = field(default_factory=dict)  # chapter -> solution's SHA-256
    digests: dict[tuple[str, str], str] = field(default_factory=dict)  # the submitted file's
    notes: dict[tuple[str, str], str] = field(default_factory=dict)  # submission_note's
    reasons: dict[tuple[str, str], str | None] = field(default_factory=dict)  # None: graded
    up_to_date: int = 0

    def graded(self) -> list[tuple[str, str]]:
        """The (student, chapter) of every job this run graded."""
        return [
            (j.student, j.chapter)
            for j in self.jobs
            if self.reasons.get((j.student, j.chapter), "") is None
        ]


def grade(
    root: Path,
    submissions: Path,
    out: Path,
    *,
    chapters: list[str] | None = None,
    log=print,
    workers: int | None = None,
    regrade: bool = False,
    sandbox: bool = True,
    cell_timeout: int | None = None,
    db_url: str | None = None,
    scheduler: str | None = None,
) -> GradeReport:
    """Grade every submission under ``submissions`` into ``out``; write the CSV files,
    the feedback and the report.

    ``chapters``: only these (default: every chapter of the course). ``workers`` processes
    grade at once (default: one per core; 1 grades in this process); ``scheduler``, the
    address of a Dask scheduler whose workers grade instead. Submissions graded into
    ``out`` and unchanged since are skipped unless ``regrade``. Each kernel runs in the
    sandbox unless ``sandbox`` is False (a ``CourseError`` says what to install when it
    cannot be made); a cell may run ``cell_timeout`` seconds (default
    ``nbgrader_settings.CELL_TIMEOUT_S``). ``db_url`` names the gradebook (default: the
    SQLite file ``out/gradebook.db``).
    """
    start = time.perf_counter()
    workers = _check_options(workers, cell_timeout)
    quiet_nbgrader()
    # Absolute paths: nbgrader joins its step folders to the course root, so a relative
    # --out would be joined twice ("out/nbgrader/out/nbgrader/source/...").
    submissions, out = Path(submissions).resolve(), Path(out).resolve()
    found, problems = discover(submissions, _chapters(root, chapters))
    if sandbox:
        check_sandbox()
    run = open_run(root, submissions, out, db_url, sandbox, cell_timeout, log, problems)
    check_kernel_imports(list(run.settings.hidden))
    wanted = sorted({ch for chs in found.values() for ch in chs}, key=course_order)
    run.settings = replace(run.settings, chapters=_worth_warming(found, wanted, workers))
    started = workers_ahead(run, found, wanted, regrade, workers, scheduler)
    try:
        api = nbgrader_for(run.settings, prestart=True)  # grades job after job when workers=1
        solutions = prepare_chapters(run, api, wanted)
        outside = OutsideCheck(root, out, grading_config(run.settings), log)
        check_solutions(root, run.out, run.settings, wanted, outside, log)
        outside.prepare(wanted)
        plan = plan_jobs(run, found, solutions, regrade)
        run_jobs(run, plan, api, workers, scheduler, started)
    finally:
        if started is not None:
            started.shutdown(cancel_futures=True)
    broken = setup_failures(run.out, run.ledger, plan.graded())
    rows = finish(run, plan, api, outside)
    seconds = time.perf_counter() - start
    report = GradeReport(rows, run.problems, seconds, workers, len(plan.jobs), plan.up_to_date)
    report.environment = broken
    return report


def _worth_warming(found: dict, chapters: list[str], workers: int) -> tuple[str, ...]:
    """The chapters whose kernels' shared work each fork server does ahead
    (``autograder/kernel_warmup.py``): those with at least two submissions a worker, since
    the warm-up costs a server about what it saves one kernel."""
    count = {ch: sum(ch in paths for paths in found.values()) for ch in chapters}
    return tuple(ch for ch in chapters if count[ch] >= 2 * workers)


def _check_options(workers: int | None, cell_timeout: int | None) -> int:
    """The number of workers (default: one per core); a ``CourseError`` for a bad option."""
    if workers is None:
        workers = os.cpu_count() or 1
    if workers < 1:
        raise CourseError(f"workers must be at least 1, not {workers}")
    if cell_timeout is not None and cell_timeout < 1:
        raise CourseError(f"the cell timeout must be at least 1 s, not {cell_timeout}")
    return workers


def _chapters(root: Path, requested: list[str] | None) -> list[str]:
    """The chapters a run grades: ``requested``, each checked, or every one of the course."""
    known = chapters_in(root)
    if not requested:
        return known
    unknown = [c for c in requested if c not in ALL_CHAPTERS or c not in known]
    if unknown:
        raise CourseError(f"unknown chapter(s): {', '.join(unknown)}")
    return list(requested)


# ---------------------------------------------------------------------- 1. open the run


def open_run(root, submissions, out_folder, db_url, sandbox, cell_timeout, log, problems) -> Run:
    """Make OUT, read what earlier runs recorded in it, back its gradebook up, and settle
    what every kernel gets: the sandbox, the folders hidden from it, the cell timeout."""
    out_folder.mkdir(parents=True, exist_ok=True)
    out = Out(out_folder)
    db = gradebook.resolve_url(db_url, out_folder)
    ledger = _open_ledger(out, db, problems, log)
    shutil.rmtree(out.running_markers, ignore_errors=True)  # left by an interrupted run
    # What a kernel must not see: the gradebook (it holds the hidden tests), the other
    # submissions and the cached keys (their sketches would let a forged hand_out match
    # them). The solution notebooks stay: the diagnosis of known mistakes replays them.
    keys = key_cache()
    keys.mkdir(parents=True, exist_ok=True)
    hidden = _hideable([out_folder, submissions, gradebook.socket_folder(db), keys], [root])
    settings = GradingSettings(out, db, sandbox, cell_timeout, tuple(str(h) for h in hidden))
    return Run(root, submissions, out, settings, ledger, log, problems)


def _open_ledger(out: Out, db: str, problems: list[str], log) -> Ledger:
    """``OUT/graded.json``, forgotten where its scores are gone: another gradebook, or one
    that holds no grades. The gradebook is backed up before anything is graded into it."""
    ledger = Ledger.read(out / LEDGER)
    if ledger.problem:
        problems.append(ledger.problem)
    if ledger.gradebook not in (None, gradebook.redact(db)):
        problems.append(
            f"{out.folder} was graded into the gradebook {ledger.gradebook}, this run uses "
            f"{gradebook.redact(db)}: every submission is graded again"
        )
        ledger.forget()
    ledger.gradebook = gradebook.redact(db)
    if gradebook.holds_grades(db):
        log(f"backed up the gradebook to {gradebook.backup(db, out.folder)}")
    else:
        ledger.forget()  # the scores it recorded are gone with the gradebook
    return ledger


def _hideable(folders: list[Path], needed: list[Path]) -> list[Path]:
    """The ``folders`` that a kernel can do without: none holds the course (``needed``) or
    the Python it runs."""
    needed = [Path(p).resolve() for p in (*needed, sys.prefix, sys.base_prefix)]
    keep = []
    for folder in folders:
        if folder is None:
            continue
        folder = Path(folder).resolve()
        if folder.is_dir() and not any(n == folder or folder in n.parents for n in needed):
            keep.append(folder)
    return keep


# ----------------------------------------------------------------- 3. prepare the chapters


def prepare_chapters(run: Run, api, chapters: list[str]) -> dict[str, str]:
    """Make each chapter's release in OUT from its solution notebook (unless an earlier run
    made it from the same one); chapter -> the solution notebook's SHA-256."""
    solutions = {}
    for chapter in chapters:
        solution = solution_path(run.root, chapter)
        validate_solution_notebook(solution)
        solutions[chapter] = file_hash(solution)
        if (
            run.ledger.chapters.get(chapter) == solutions[chapter]
            and run.out.released(chapter).is_file()
        ):
            continue  # prepared by an earlier run from the same solution notebook
        shutil.rmtree(run.out.source(chapter), ignore_errors=True)
        shutil.copytree(run.root / "solutions" / chapter, run.out.source(chapter))
        stub_marked_in(run.out.source(chapter) / f"{chapter}.ipynb")  # locked ones too
        result = api.generate_assignment(chapter, force=True, create=True)
        if not result["success"]:
            raise CourseError(
                f"could not prepare {chapter} for grading in {run.out.folder}:\n"
                f"{result.get('error')}\n(when the chapter's graded cells changed since it "
                "was graded there, grade into a new --out folder)"
            )
        run.ledger.chapters[chapter] = solutions[chapter]
        run.ledger.save()
    return solutions


# --------------------------------------------------------------------------------- 4. plan


def plan_jobs(run: Run, found: dict, solutions: dict[str, str], regrade: bool) -> Plan:
    """A job for every submission to grade; a reason for every one that cannot be; the
    students created in the gradebook (two workers grading one student's chapters would
    otherwise both try to)."""
    plan = Plan(solutions=solutions)
    released: dict[str, dict] = {}  # chapter -> its released notebook, as JSON
    # Chapter after chapter: a worker's fork server serves one chapter's kernels (each
    # sees only its chapter's material), so it starts again only when the chapter changes.
    for chapter in solutions:
        for student, paths in sorted(found.items()):
            _plan_one(run, plan, student, chapter, paths.get(chapter), regrade, released)
    run.ledger.save()
    if plan.up_to_date:
        n = plan.up_to_date
        run.log(
            f"{n} submission{'s' if n != 1 else ''} already graded in {run.out.folder} "
            "and unchanged since: not graded again (--regrade grades them again)"
        )
    gradebook.create_students(run.settings.db, sorted({job.student for job in plan.jobs}))
    return plan


def workers_ahead(
    run: Run, found: dict, chapters: list[str], regrade: bool, workers: int, scheduler
):
    """The worker processes of the run, started now (``pool.start_processes``), where it
    will grade in more than one of them and the switch ``workers-ahead`` is on; else None."""
    if scheduler is not None or workers == 1 or not speedups.on("workers-ahead"):
        return None
    ahead = _jobs_ahead(run, found, chapters, regrade)
    first = chapters[0] if chapters else ""  # the plan grades chapter after chapter
    return start_processes(min(workers, ahead), run.settings, first) if ahead else None


def _jobs_ahead(run: Run, found: dict, chapters: list[str], regrade: bool) -> int:
    """How many jobs :func:`plan_jobs` will make, at most: every submission found, but
    those graded already and unchanged since (a notebook it cannot read counts too)."""
    solutions = {ch: file_hash(solution_path(run.root, ch)) for ch in chapters}
    return sum(
        1
        for student, paths in found.items()
        for chapter, path in paths.items()
        if chapter in solutions
        and not (
            path.is_file() and _up_to_date(run, student, chapter, path, solutions[chapter], regrade)
        )
    )


def _up_to_date(run: Run, student: str, chapter: str, path, solution: str, regrade: bool) -> bool:
    """Whether the submission at ``path`` was graded into OUT from the same notebook and
    solution, and is not to be graded again (``regrade``)."""
    entry = run.ledger.get(student, chapter) or {}
    return (
        not regrade
        and entry.get("status") == GRADED
        and (entry.get("sha256"), entry.get("solution")) == (file_hash(path), solution)
        and run.out.autograded(student, chapter).is_file()
    )


def _plan_one(run, plan, student, chapter, path, regrade, released) -> None:
    pair, solution = (student, chapter), plan.solutions[chapter]
    if (
        path is not None
        and path.is_file()
        and _up_to_date(run, student, chapter, path, solution, regrade)
    ):
        # the very notebook graded before (its SHA-256), so readable: not read again (10 ms
        # a notebook, each run, for every submission graded into OUT)
        plan.up_to_date += 1
        plan.reasons[pair] = None
        return
    reason = read_submission(path) if path else f"missing: no {chapter}/ folder"
    if reason is not None:
        # a submission graded earlier and missing from this run's keeps its result
        if not (reason.startswith("missing") and run.ledger.get(student, chapter)):
            plan.reasons[pair] = reason
            run.ledger.record(student, chapter, None, solution, reason)
        return
    digest = file_hash(path)
    repaired = stage(run.out, path, student, chapter, released)
    note = "; ".join(filter(None, (submission_note(path, chapter), repaired)))
    plan.notes[pair] = note
    if note:
        run.problems.append(f"{student} / {chapter}: {note}")
    plan.jobs.append(Job(student, chapter, run.out))
    plan.digests[pair] = digest


# ---------------------------------------------------------------------------------- 5. run


def run_jobs(run: Run, plan: Plan, api, workers: int, scheduler: str | None, started=None) -> None:
    """Grade the plan's jobs: on the Dask cluster at ``scheduler``, in this process
    (``workers`` 1, with ``api``) or in ``workers`` processes (the first ones ``started``
    while the run was prepared, when given)."""
    progress = _Progress(len(plan.jobs), run.log)
    finish = _Finish(run, plan, progress)
    try:
        if scheduler is not None:
            must_see = {
                "the course": run.root,
                "SUBMISSIONS": run.submissions,
                "OUT": run.out.folder,
            }
            run_on_cluster(plan.jobs, scheduler, run.settings, finish, progress.write, must_see)
        elif workers == 1:
            run_here(plan.jobs, api, finish)
        else:
            run_in_processes(plan.jobs, workers, run.settings, finish, started)
    finally:
        progress.close()
    shutil.rmtree(run.out.running_markers, ignore_errors=True)


@dataclass
class _Finish:
    """Called as each job ends: records it in ``OUT/graded.json`` at once (a run started
    again skips what is done) and says so."""

    run: Run
    plan: Plan
    progress: "_Progress"
    done: int = 0

    def __call__(self, job: Job, reason: str | None, seconds: float) -> None:
        self.done += 1
        pair = (job.student, job.chapter)
        self.plan.reasons[pair] = reason
        self.run.ledger.record(
            job.student,
            job.chapter,
            self.plan.digests.pop(pair),
            self.plan.solutions[job.chapter],
            reason or GRADED,
            seconds,
            self.plan.notes.get(pair),
        )
        self.run.ledger.save()
        outcome = "graded" if reason is None else "failed"
        line = (
            f"{outcome} {job.student} / {job.chapter} "
            f"({self.done} of {len(self.plan.jobs)}, {seconds:.1f} s)"
        )
        self.progress.write(line if reason is None else f"{line}: {reason}")
        self.progress.update()


class _Progress:
    """A progress bar over the jobs on standard error (tqdm), and a line per finished job
    through ``log``; the line is written above the bar, which stays at the bottom."""

    def __init__(self, jobs: int, log):
        from tqdm import tqdm

        self.log = log
        self.bar = tqdm(
            total=jobs,
            desc="grading",
            unit="submission",
            file=sys.stderr,
            disable=not jobs,
            dynamic_ncols=True,
            mininterval=1.0,
        )

    def write(self, line: str) -> None:
        if self.log is print:
            self.bar.write(line, file=sys.stdout)  # clears the bar, prints, redraws it
        else:
            self.log(line)

    def update(self) -> None:
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


# ----------------------------------------------------------------------- 6 to 9. finish


def finish(run: Run, plan: Plan, api, outside: OutsideCheck) -> list[GradeRow]:
    """Steps 6 to 9, from what OUT and its gradebook hold: the rows of every submission
    graded into OUT, what was graded by hand, the flags and the check outside the kernel
    applied, the feedback pages made again where grading by hand changed them, the
    notices, the CSV files and the report; the final rows."""
    recorded = collect_rows(run, plan)
    by_hand = graded_by_hand(run, recorded)
    scored = {(g.student, g.chapter, g.cell) for g in by_hand if g.points is not None}
    rows = withhold_flagged(run.root, run.out, recorded, run.problems, scored)
    mark_for_review(run, rows)
    rows = check_outside(run, outside, rows, scored)
    remake_feedback(run, api, plan, by_hand)
    notify(run.root, run.out, recorded, rows, by_hand)
    write_results(run, rows, by_hand)
    return rows


def apply_by_hand(root: Path, out: Path, db_url: str | None = None, log=print) -> GradeReport:
    """After grading by hand in the gradebook (nbgrader's formgrader): OUT brought up to date,
    nothing graded: :func:`finish` on every submission graded into ``out``, whose gradebook
    is ``db_url`` (default: the one ``OUT/graded.json`` names, when it can)."""
    start = time.perf_counter()
    quiet_nbgrader()
    out = Path(out).resolve()
    ledger = Ledger.read(out / LEDGER)
    if not ledger.path.is_file() or ledger.problem:
        raise CourseError(f"{out} holds no readable {LEDGER}: nothing was graded into it")
    db = gradebook.of_graded(ledger.gradebook, db_url, out)
    settings = GradingSettings(Out(out), db, hidden=(str(out), str(key_cache())))
    run = Run(root, out, Out(out), settings, ledger, log, [])  # no SUBMISSIONS: none graded
    outside = OutsideCheck(root, out, grading_config(settings), log)
    rows = finish(run, Plan(), nbgrader_for(settings), outside)
    return GradeReport(rows, run.problems, time.perf_counter() - start)


# ---------------------------------------------------------------- 6. collect, 8. check


def collect_rows(run: Run, plan: Plan) -> list[GradeRow]:
    """A row per graded cell of every (student, chapter) recorded in ``OUT/graded.json``:
    this run's and earlier runs' results, the scores read from the gradebook (manual
    grades included); why this run did not grade a submission, added to the problems."""
    for student, chapter in sorted(plan.reasons):
        if plan.reasons[(student, chapter)]:
            run.problems.append(f"{student} / {chapter}: {plan.reasons[(student, chapter)]}")
    ledger, rows = run.ledger, []
    pairs = sorted(ledger.pairs(), key=lambda p: (p[0], *course_order(p[1])))
    graded = [p for p in pairs if ledger.get(*p)["status"] == GRADED]
    recorded = gradebook.scores(run.settings.db, graded) if graded else {}
    cells: dict[str, list[tuple[str, float]]] = {}
    for student, chapter in pairs:
        if chapter not in cells:
            if not solution_path(run.root, chapter).is_file():
                continue  # a chapter no longer in the course
            cells[chapter] = graded_cells(nbformat.read(solution_path(run.root, chapter), 4))
        status = ledger.get(student, chapter)["status"]
        scores = recorded.get((student, chapter), {})
        for cell, max_points in cells[chapter]:
            points = scores.get(cell)
            why = "not graded: no score recorded" if status == GRADED and points is None else status
            rows.append(GradeRow(student, chapter, cell, points or 0.0, max_points, why))
    return rows


def graded_by_hand(run: Run, rows: list[GradeRow]) -> list[HandGrade]:
    """The cells of the graded submissions among ``rows`` that an instructor scored or
    commented by hand in the gradebook, in the rows' order."""
    pairs = list(dict.fromkeys((r.student, r.chapter) for r in rows if r.status == GRADED))
    return gradebook.graded_by_hand(run.settings.db, pairs) if pairs else []


def mark_for_review(run: Run, rows: list[GradeRow]) -> None:
    """The test cells whose points a flag withholds, marked in the gradebook as needing a
    manual grade: nbgrader's formgrader lists their submissions so, and their score boxes
    wait for the instructor's review."""
    flagged = {(r.student, r.chapter, r.cell) for r in rows if r.status.startswith(FLAGGED)}
    gradebook.mark_for_review(run.settings.db, flagged)


def check_outside(
    run: Run, outside: OutsideCheck, rows: list[GradeRow], scored: set[tuple[str, str, str]]
) -> list[GradeRow]:
    """``rows`` checked against the values each hidden test handed out; a score given by
    hand (``scored``: student, chapter, cell) stands."""
    return outside.verify(rows, run.problems, scored)


# -------------------------------------------------------------------------------- 9. write


def remake_feedback(run: Run, api, plan: Plan, by_hand: list[HandGrade]) -> None:
    """Make again, from the gradebook, the feedback page of every graded submission whose
    scores or comments given by hand changed since its page was made (``OUT/graded.json``
    keeps a digest of them): the page then shows them. A page this run's job made already
    does."""
    digests: dict[tuple[str, str], str] = {}
    for pair in dict.fromkeys((g.student, g.chapter) for g in by_hand):
        given = [(g.cell, g.points, g.comment) for g in by_hand if (g.student, g.chapter) == pair]
        digests[pair] = hashlib.sha256(json.dumps(given).encode()).hexdigest()[:16]
    graded_now = {(job.student, job.chapter) for job in plan.jobs}
    for student, chapter in run.ledger.pairs():
        pair = (student, chapter)
        if run.ledger.get(*pair).get("status") != GRADED:
            continue
        digest = digests.get(pair)
        if pair not in graded_now and digest != run.ledger.by_hand(*pair):
            if not write_feedback(api, run.out, student, chapter):
                run.problems.append(f"{student} / {chapter}: its feedback page could not be made")
                continue
            run.log(f"feedback of {student} / {chapter} made again: graded by hand")
        run.ledger.set_by_hand(student, chapter, digest)
    run.ledger.save()


def write_results(run: Run, rows: list[GradeRow], by_hand: list[HandGrade]) -> None:
    """The grades (a row per student, and a row per cell), what was graded by hand, and
    the class report."""
    write_csv(rows, run.out / CELLS_CSV)
    write_wide_csv(rows, run.out / GRADES_CSV)
    write_by_hand(by_hand, run.out / BY_HAND_CSV)
    write_report(run.out.folder, run.root)
