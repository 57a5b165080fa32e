"""``grade``: autograde a folder of submissions in grading mode, write grades and feedback.

Input, nbgrader's submitted layout::

    SUBMISSIONS/<student>/<chapter>/<chapter>.ipynb

Output::

    OUT/grades.csv                         a row per student, a column per chapter, the total
    OUT/grades_by_cell.csv                 one row per student, chapter and graded cell
    OUT/feedback/<student>/<chapter>.html  what the student gets back (no hidden tests; on
                                           top, the test cells that lost points after the
                                           notebook ran: the scan's, the outside check's)
    OUT/gradebook.db                       nbgrader's gradebook (unless --db names another,
                                           e.g. PostgreSQL): holds the hidden tests, keep it private
    OUT/graded.json                        what each graded submission was (content hashes), its
                                           status, and how long grading it took
    OUT/backups/gradebook-<UTC time>.db    the gradebook as it was before each run
    OUT/flagged.csv                        what the scan of the submissions flagged for review
    OUT/accepted.csv                       (written by the instructor) flags accepted after review
    OUT/nbgrader/                          nbgrader's working folders (submitted, autograded, feedback)

Before nbgrader sees a submission, its released cells are put back as released
(``autograder/restore.py``: a test cell edited, moved or with its nbgrader metadata changed),
and what was put back is noted. Before the scores are written, each graded submission's
solution cells, and the code cells its student added, are scanned
(``autograder/scan.py``): an exercise whose code uses the reference implementations, calls
the operator it asks the student to write, rebinds what the tests use or writes files is
*flagged for review*, and the points of its test cells are withheld (status
``flagged for review: ...``) until the instructor accepts it with a line
``student,chapter,exercise`` in ``OUT/accepted.csv`` and runs ``grade`` again.

One bad submission never stops the batch: an unreadable notebook, a missing one or one
whose kernel dies gets zero points on every cell, with the reason in the ``status`` column.

Each kernel runs in a sandbox (``autograder/sandbox.py``: bubblewrap, a read-only
filesystem, a private /tmp, no network, memory and CPU-time limits; ``OUT`` and the
submissions hidden), each cell for at most ``cell_timeout`` seconds, and a cell's output
is cut at ``sandbox.MAX_PRINTED_CHARS`` and ``sandbox.MAX_OUTPUT_CHARS``.
``sandbox=False`` (``--no-sandbox``) runs the kernels as plain nbgrader does: unsafe.

Nothing is lost by grading again into the same ``OUT``: the gradebook and the working
folders stay (manual grades and comments included), the gradebook is copied to
``OUT/backups/`` first, and a submission whose notebook and chapter are the same as when it
was last graded (same SHA-256 of the submitted file and of the solution notebook, recorded
in ``OUT/graded.json`` as each job finishes) and whose autograded notebook is still there is
not graded again unless ``regrade=True``. So an interrupted run started again grades only
what was left, and a run over another chapter or other students adds to what is there. The
CSV files are written from everything recorded in ``OUT``, not only this run's jobs; a
chapter missing from this run's submissions never replaces a result recorded earlier.

With ``workers > 1`` the submissions are graded in parallel, one (student, chapter) job per
worker process (``spawn`` start method), each kernel on one thread so that a score does not
depend on the load. With ``scheduler`` (``--scheduler ADDRESS``) the jobs go to the workers
of a Dask cluster instead (``autograder/cluster.py``). The workers share the gradebook (the
SQLite file, or the database ``db_url`` names: ``autograder/gradebook.py``); the scores are
read from it once every job is done, and the rows keep the same order whatever order the
jobs finish in.
"""

import csv
import hashlib
import json
import multiprocessing
import os
import random
import re
import shutil
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import nbformat

from attention_course.runtime import GRADING_ENV
from autograder import gradebook
from autograder.chapters import ALL_CHAPTERS, CourseError, chapters_in, solution_path
from autograder.nbgrader_settings import course_config, grading_settings
from autograder.outside import OutsideCheck, key_cache
from autograder.release import nbgrader_api, validate_solution_notebook
from autograder.restore import restore
from autograder.sandbox import NOT_GRADED, check_sandbox

CSV_COLUMNS = ("student", "chapter", "cell", "points", "max_points", "status")

# File names in OUT. Readers of the per-cell scores use CELLS_CSV (``read_csv`` also accepts
# the path of the wide GRADES_CSV and reads CELLS_CSV beside it).
GRADES_CSV = "grades.csv"  # wide: a row per student, a column per chapter, the total
CELLS_CSV = "grades_by_cell.csv"  # long: CSV_COLUMNS, one row per student, chapter, cell
LEDGER = "graded.json"
BACKUPS = gradebook.BACKUPS
GRADED = "graded"  # the status of a graded submission

# Set in every worker process when grading in parallel, before any kernel starts; kernels
# inherit them, so each runs its numerical libraries (torch included) on one thread.
ONE_THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}

# A job whose nbgrader step fails because another worker holds the gradebook is retried.
LOCK_RETRIES = 4
_LOCKED = re.compile(r"database (table )?is locked|SQLITE_BUSY", re.IGNORECASE)


@dataclass
class GradeRow:
    student: str
    chapter: str
    cell: str
    points: float
    max_points: float
    status: str


@dataclass(frozen=True)
class Job:
    """One submission to autograde (plain values: it travels to a worker process)."""

    student: str
    chapter: str
    notebook: str
    work: str
    out: str

    @property
    def marker(self) -> Path:
        """Exists while a process grades this job; left behind when the process dies."""
        return Path(self.work) / ".running" / self.student / self.chapter


@dataclass
class GradeReport:
    rows: list[GradeRow] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    workers: int = 1
    graded: int = 0  # submissions graded by this run
    up_to_date: int = 0  # submissions skipped: graded by an earlier run, unchanged since

    def totals(self) -> dict[tuple[str, str], tuple[float, float]]:
        """(student, chapter) -> (points, max points)."""
        out: dict[tuple[str, str], tuple[float, float]] = {}
        for r in self.rows:
            p, m = out.get((r.student, r.chapter), (0.0, 0.0))
            out[(r.student, r.chapter)] = (p + r.points, m + r.max_points)
        return out


@contextmanager
def grading_environment():
    """Set grading mode for every kernel started inside the block."""
    previous = os.environ.get(GRADING_ENV)
    os.environ[GRADING_ENV] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(GRADING_ENV, None)
        else:
            os.environ[GRADING_ENV] = previous


def discover(submissions: Path, known: list[str]) -> tuple[dict[str, dict[str, Path]], list[str]]:
    """``{student: {chapter: notebook path}}`` and the problems found on the way."""
    if not submissions.exists():
        raise CourseError(f"submissions folder {submissions} does not exist")
    if not submissions.is_dir():
        raise CourseError(
            f"{submissions} is a file; expected a folder of <student>/<chapter>/ folders"
        )
    found: dict[str, dict[str, Path]] = {}
    problems = []
    for student_dir in sorted(submissions.iterdir()):
        if student_dir.name.startswith("."):
            continue
        if not student_dir.is_dir():
            problems.append(f"{student_dir}: not a student folder, skipped")
            continue
        for chapter_dir in sorted(student_dir.iterdir()):
            if chapter_dir.name.startswith("."):
                continue
            if chapter_dir.name not in known:
                problems.append(
                    f"{chapter_dir}: {chapter_dir.name!r} is not a chapter of this course "
                    f"({', '.join(known)}), skipped"
                )
                continue
            found.setdefault(student_dir.name, {})[chapter_dir.name] = locate_notebook(
                chapter_dir, chapter_dir.name
            )
        if student_dir.name not in found:
            problems.append(f"{student_dir}: no chapter folders inside, skipped")
    if not found:
        raise CourseError(
            f"no submissions found in {submissions}: expected "
            f"{submissions}/<student>/<chapter>/<chapter>.ipynb"
        )
    return found, problems


def _stage(
    path: Path, work: Path, student: str, chapter: str, released: dict[str, dict]
) -> tuple[Path, str | None]:
    """Write the submission at ``path`` where nbgrader takes it from, its released cells put
    back as released (``autograder/restore.py``); the path, and what was put back."""
    if chapter not in released:
        release = work / "release" / chapter / f"{chapter}.ipynb"
        released[chapter] = json.loads(release.read_text(encoding="utf-8"))
    try:
        submitted = json.loads(path.read_text(encoding="utf-8"))
        restored, repaired = restore(submitted, released[chapter])
    except Exception as error:  # nbformat read it: leave it to nbgrader as it is
        return path, f"its cells could not be checked ({type(error).__name__}: {error})"
    staged = work / "submitted" / student / chapter / f"{chapter}.ipynb"
    staged.parent.mkdir(parents=True, exist_ok=True)
    staged.write_text(json.dumps(restored, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return staged, repaired


def _notebooks_in(folder: Path) -> list[Path]:
    """The notebooks directly in ``folder`` (not hidden ones, not checkpoints)."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob("*.ipynb") if p.is_file() and not p.name.startswith("."))


def locate_notebook(chapter_dir: Path, chapter: str) -> Path:
    """The notebook to grade in ``SUBMISSIONS/<student>/<chapter>/``: ``<chapter>.ipynb``,
    or else the only notebook there under another name (``Untitled.ipynb``, ``<chapter>
    (1).ipynb``: a student's download); with several others, the missing one (its reason
    names them)."""
    expected = chapter_dir / f"{chapter}.ipynb"
    others = [p for p in _notebooks_in(chapter_dir) if p != expected]
    if not expected.is_file() and len(others) == 1:
        return others[0]
    return expected


def submission_note(path: Path, chapter: str) -> str | None:
    """What the instructor should know about a submission graded from ``path``: another
    name than ``<chapter>.ipynb``, other notebooks beside it (not graded)."""
    notes = []
    if path.name != f"{chapter}.ipynb":
        notes.append(f"graded {path.name}, the only notebook in its folder, as {chapter}.ipynb")
    extra = [p.name for p in _notebooks_in(path.parent) if p != path]
    if extra:
        notes.append(f"not graded, beside it: {', '.join(extra)}")
    return "; ".join(notes) or None


def read_submission(path: Path) -> str | None:
    """None when ``path`` is a notebook nbgrader can grade, else the reason it is not."""
    if not path.is_file():
        there = [p.name for p in _notebooks_in(path.parent)]
        holds = f" (it holds {', '.join(there)}: which one is the submission?)" if there else ""
        return f"missing: no {path.name} in {path.parent}{holds}"
    if path.stat().st_size == 0:
        return f"unreadable: {path.name} is an empty file (0 bytes)"
    try:
        nb = nbformat.read(path, as_version=4)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        return f"unreadable: {path.name} is not valid JSON ({error})"
    except Exception as error:  # nbformat raises several kinds for a broken notebook
        return f"unreadable: {path.name} is not a notebook ({type(error).__name__}: {error})"
    if not any(c.cell_type == "code" for c in nb.cells):
        return f"unreadable: {path.name} has no code cells"
    return None


def graded_cells(root: Path, chapter: str) -> list[tuple[str, float]]:
    """(grade id, points) of every graded cell of a chapter, in notebook order."""
    nb = nbformat.read(solution_path(root, chapter), as_version=4)
    cells = []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade"):
            cells.append((meta["grade_id"], float(meta.get("points", 0))))
    return cells


def grade(
    root: Path,
    submissions: Path,
    out: Path,
    chapters: list[str] | None = None,
    log=print,
    workers: int | None = None,
    regrade: bool = False,
    sandbox: bool = True,
    cell_timeout: int | None = None,
    db_url: str | None = None,
    scheduler: str | None = None,
) -> GradeReport:
    """Grade every submission under ``submissions`` into ``out``; write the CSV files and
    feedback.

    ``workers`` processes grade at once (default: one per core); 1 grades in this process.
    Submissions already graded into ``out`` and unchanged since are skipped unless
    ``regrade``. Each kernel runs in the sandbox (``autograder/sandbox.py``; a
    ``CourseError`` says what to install when it cannot be made) unless ``sandbox`` is
    False, and a cell may run ``cell_timeout`` seconds (default
    ``nbgrader_settings.CELL_TIMEOUT_S``). ``db_url`` names the gradebook (default: the
    SQLite file ``out/gradebook.db``); ``scheduler``, the address of a Dask scheduler whose
    workers grade the jobs instead of local processes.
    """
    start = time.perf_counter()
    if workers is None:
        workers = os.cpu_count() or 1
    if workers < 1:
        raise CourseError(f"workers must be at least 1, not {workers}")
    if cell_timeout is not None and cell_timeout < 1:
        raise CourseError(f"the cell timeout must be at least 1 s, not {cell_timeout}")
    _ignore_nbgrader_warnings()
    known = chapters_in(root)
    if chapters:
        unknown = [c for c in chapters if c not in ALL_CHAPTERS or c not in known]
        if unknown:
            raise CourseError(f"unknown chapter(s): {', '.join(unknown)}")
        known = list(chapters)
    # Absolute paths: nbgrader joins its step folders to the course root, so a relative
    # --out would be joined twice ("out/nbgrader/out/nbgrader/source/...").
    submissions, out = Path(submissions).resolve(), Path(out).resolve()
    found, problems = discover(submissions, known)
    if sandbox:
        check_sandbox()
    report = GradeReport(problems=problems, workers=workers)
    out.mkdir(parents=True, exist_ok=True)
    work = out / "nbgrader"
    db = gradebook.resolve_url(db_url, out)
    ledger = _Ledger(out / LEDGER)
    if ledger.problem:
        report.problems.append(ledger.problem)
    if ledger.gradebook not in (None, gradebook.redact(db)):
        report.problems.append(
            f"{out} was graded into the gradebook {ledger.gradebook}, this run uses "
            f"{gradebook.redact(db)}: every submission is graded again"
        )
        ledger.forget()
    ledger.gradebook = gradebook.redact(db)
    if gradebook.holds_grades(db):
        backup = gradebook.backup(db, out)
        log(f"backed up the gradebook to {backup}")
    else:
        ledger.forget()  # the scores it recorded are gone with the gradebook
    shutil.rmtree(work / ".running", ignore_errors=True)  # left by an interrupted run
    # What a kernel must not see: the gradebook (it holds the hidden tests) and the other
    # submissions. (The solution notebooks stay: the diagnosis of known mistakes replays
    # their cells in the kernel.)
    keys = key_cache()  # the keys' sketches would let a forged hand_out match them
    keys.mkdir(parents=True, exist_ok=True)
    hidden = _hideable([out, submissions, gradebook.socket_folder(db), keys], [root])
    settings = (sandbox, cell_timeout, tuple(str(h) for h in hidden))
    api = nbgrader_api(grading_config(work, db, *settings))

    wanted = sorted({ch for chs in found.values() for ch in chs}, key=ALL_CHAPTERS.index)
    solution_hashes = {}
    for chapter in wanted:
        solution = solution_path(root, chapter)
        validate_solution_notebook(solution)
        solution_hashes[chapter] = file_hash(solution)
        released = work / "release" / chapter / f"{chapter}.ipynb"
        if ledger.chapters.get(chapter) == solution_hashes[chapter] and released.is_file():
            continue  # prepared by an earlier run from the same solution notebook
        shutil.rmtree(work / "source" / chapter, ignore_errors=True)
        shutil.copytree(root / "solutions" / chapter, work / "source" / chapter)
        result = api.generate_assignment(chapter, force=True, create=True)
        if not result["success"]:
            raise CourseError(
                f"could not prepare {chapter} for grading in {out}:\n{result.get('error')}\n"
                "(when the chapter's graded cells changed since it was graded there, "
                "grade into a new --out folder)"
            )
        ledger.chapters[chapter] = solution_hashes[chapter]
        ledger.save()
    # The key of each chapter: its solution run once in a kernel like the students' (cached)
    outside = OutsideCheck(root, out, grading_config(work, db, *settings), log)
    outside.prepare(wanted)

    reasons: dict[tuple[str, str], str | None] = {}
    notes: dict[tuple[str, str], str | None] = {}
    released: dict[str, dict] = {}  # chapter -> its released notebook, as JSON
    jobs = []
    up_to_date = 0
    for student, chapter_paths in sorted(found.items()):
        for chapter in wanted:
            path = chapter_paths.get(chapter)
            reason = read_submission(path) if path else f"missing: no {chapter}/ folder"
            if reason is not None:
                if not (reason.startswith("missing") and ledger.get(student, chapter)):
                    reasons[(student, chapter)] = reason
                    ledger.record(student, chapter, None, solution_hashes[chapter], reason)
                continue
            digest = file_hash(path)
            autograded = work / "autograded" / student / chapter / f"{chapter}.ipynb"
            entry = ledger.get(student, chapter) or {}
            if (
                not regrade
                and entry.get("status") == GRADED
                and entry.get("sha256") == digest
                and entry.get("solution") == solution_hashes[chapter]
                and autograded.is_file()
            ):
                up_to_date += 1
                reasons[(student, chapter)] = None
                continue
            # what nbgrader grades: the notebook with the released cells put back as released
            staged, repaired = _stage(path, work, student, chapter, released)
            note = "; ".join(filter(None, (submission_note(path, chapter), repaired)))
            notes[(student, chapter)] = note
            if note:
                report.problems.append(f"{student} / {chapter}: {note}")
            jobs.append(Job(student, chapter, str(staged), str(work), str(out)))
            ledger.pending[(student, chapter)] = digest
    ledger.save()
    if up_to_date:
        log(
            f"{up_to_date} submission{'s' if up_to_date != 1 else ''} already graded in {out} "
            "and unchanged since: not graded again (--regrade grades them again)"
        )
    # Students exist before the jobs start: two workers grading one student's chapters
    # would otherwise both try to create the student in the gradebook.
    gradebook.create_students(db, sorted({job.student for job in jobs}))

    done = 0
    progress = _Progress(len(jobs), log)

    def finish(job: Job, reason: str | None, seconds: float) -> None:
        nonlocal done
        done += 1
        reasons[(job.student, job.chapter)] = reason
        digest = ledger.pending.pop((job.student, job.chapter))
        ledger.record(
            job.student,
            job.chapter,
            digest,
            solution_hashes[job.chapter],
            reason or GRADED,
            seconds,
            notes.get((job.student, job.chapter)),
        )
        ledger.save()  # as each job finishes: a run started again skips what is done
        outcome = "graded" if reason is None else "failed"
        line = f"{outcome} {job.student} / {job.chapter} ({done} of {len(jobs)}, {seconds:.1f} s)"
        progress.write(line if reason is None else f"{line}: {reason}")
        progress.update()

    try:
        if scheduler is not None:
            from autograder.cluster import run_on_cluster

            must_see = {"the course": root, "SUBMISSIONS": submissions, "OUT": out}
            worker_args = (str(work), db, *settings)
            run_on_cluster(jobs, scheduler, worker_args, finish, progress.write, must_see, sandbox)
        elif workers == 1:
            for job in jobs:
                reason, seconds = _run_job(api, job)
                finish(job, reason, seconds)
        else:
            _run_in_pools(jobs, workers, (str(work), db, *settings), finish)
    finally:
        progress.close()
    shutil.rmtree(work / ".running", ignore_errors=True)

    for student, chapter in sorted(reasons):
        if reasons[(student, chapter)]:
            report.problems.append(f"{student} / {chapter}: {reasons[(student, chapter)]}")
    report.rows = recorded = _all_rows(root, db, ledger)
    report.rows = _withhold_flagged(root, out, report)
    # values handed out by the tests against the key; an instructor's manual score stands
    pairs = sorted({(r.student, r.chapter) for r in report.rows if r.status == GRADED})
    manual = gradebook.manually_graded(db, pairs) if pairs else set()
    report.rows = outside.verify(report, manual)
    _notify_feedback(root, out, recorded, report.rows)
    report.graded = len(jobs)
    report.up_to_date = up_to_date
    write_csv(report.rows, out / CELLS_CSV)
    write_wide_csv(report.rows, out / GRADES_CSV)
    from autograder.report import write_report  # imported here: it reads grade's CSV

    write_report(out, root)  # OUT/report/: the class's scores and known mistakes
    report.seconds = time.perf_counter() - start
    return report


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


def file_hash(path: Path) -> str:
    """SHA-256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class _Ledger:
    """``OUT/graded.json``: for every (student, chapter) graded into OUT, the SHA-256 of the
    submitted notebook and of the solution notebook it was graded against, and its status
    (``graded`` or the reason it was not); and the solution each chapter was prepared from."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.chapters: dict[str, str] = {}
        self.submissions: dict[str, dict[str, dict]] = {}
        self.pending: dict[tuple[str, str], str] = {}  # jobs of this run: their hash
        self.gradebook: str | None = None  # the gradebook's URL, password hidden
        self.problem = None
        if self.path.is_file():
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
                self.chapters = dict(data.get("chapters", {}))
                self.submissions = dict(data.get("submissions", {}))
                self.gradebook = data.get("gradebook")
            except (json.JSONDecodeError, UnicodeDecodeError, AttributeError, TypeError):
                self.problem = f"{self.path} is unreadable: every submission is graded again"

    def forget(self) -> None:
        self.chapters, self.submissions = {}, {}

    def get(self, student: str, chapter: str) -> dict | None:
        return self.submissions.get(student, {}).get(chapter)

    def record(self, student, chapter, digest, solution, status, seconds=None, note=None):
        """``seconds``: how long its job took (None or 0 when it was not run or not timed);
        ``note``: what the instructor should know about the file graded (``submission_note``)."""
        entry = {
            "sha256": digest,
            "solution": solution,
            "status": status,
            "time": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        if seconds:  # 0: a job whose process died before it said (not timed)
            entry["seconds"] = round(seconds, 2)
        if note:
            entry["note"] = note
        self.submissions.setdefault(student, {})[chapter] = entry

    def save(self) -> None:
        data = {
            "gradebook": self.gradebook,
            "chapters": self.chapters,
            "submissions": self.submissions,
        }
        temporary = self.path.with_name(self.path.name + ".tmp")
        temporary.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(temporary, self.path)  # never half written, even when interrupted


def _all_rows(root: Path, db: str, ledger: _Ledger) -> list[GradeRow]:
    """A row per graded cell of every (student, chapter) recorded in ``ledger``: this run's
    and earlier runs' results, the scores read from the gradebook (manual grades included)."""
    rows = []
    cells: dict[str, list[tuple[str, float]]] = {}
    pairs = [(s, ch) for s, chs in ledger.submissions.items() for ch in chs]
    graded = [p for p in pairs if ledger.get(*p)["status"] == GRADED]
    recorded = gradebook.scores(db, graded) if graded else {}
    order = {ch: i for i, ch in enumerate(ALL_CHAPTERS)}
    for student, chapter in sorted(pairs, key=lambda p: (p[0], order.get(p[1], 99), p[1])):
        if chapter not in cells:
            if not solution_path(root, chapter).is_file():
                continue  # a chapter no longer in the course
            cells[chapter] = graded_cells(root, chapter)
        status = ledger.get(student, chapter)["status"]
        scores = recorded.get((student, chapter), {})
        for cell, max_points in cells[chapter]:
            points = scores.get(cell)
            if status == GRADED and points is None:
                row_status = "not graded: no score recorded"
            else:
                row_status = status
            rows.append(GradeRow(student, chapter, cell, points or 0.0, max_points, row_status))
    return rows


FLAGGED_CSV = "flagged.csv"
ACCEPTED_CSV = "accepted.csv"


def read_accepted(path: Path) -> set[tuple[str, str, str]]:
    """(student, chapter, exercise) lines an instructor accepted after review."""
    if not path.is_file():
        return set()
    accepted = set()
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.reader(f):
            cells = [c.strip() for c in row]
            if len(cells) >= 3 and cells[0] and not cells[0].startswith("#"):
                if cells[:3] != ["student", "chapter", "exercise"]:
                    accepted.add((cells[0], cells[1], cells[2]))
    return accepted


def _withhold_flagged(root: Path, out: Path, report: GradeReport) -> list[GradeRow]:
    """Scan every graded submission; withhold the points of flagged exercises that
    ``OUT/accepted.csv`` does not accept, and list every flag in ``OUT/flagged.csv``."""
    from autograder.scan import scan_notebook, tests_of_exercises

    accepted = read_accepted(out / ACCEPTED_CSV)
    pairs = dict.fromkeys((r.student, r.chapter) for r in report.rows if r.status == GRADED)
    withheld: dict[tuple[str, str, str], str] = {}  # (student, chapter, test cell) -> why
    listed = []
    tests: dict[str, dict[str, list[str]]] = {}
    released: dict[str, object] = {}  # chapter -> its released notebook: the instructor's cells
    for student, chapter in pairs:
        if chapter not in released:
            release = out / "nbgrader" / "release" / chapter / f"{chapter}.ipynb"
            released[chapter] = nbformat.read(release, as_version=4) if release.is_file() else None
        submitted = out / "nbgrader" / "submitted" / student / chapter / f"{chapter}.ipynb"
        try:
            nb = nbformat.read(submitted, as_version=4)
            flags = scan_notebook(nb, chapter, released[chapter])
        except Exception:
            continue  # it was graded, so it was readable; nothing to scan now
        if not flags:
            continue
        if chapter not in tests:
            tests[chapter] = tests_of_exercises(
                nbformat.read(solution_path(root, chapter), as_version=4)
            )
        for flag in flags:
            ok = (student, chapter, flag.cell) in accepted
            cells = tests[chapter].get(flag.cell, [])
            listed.append((student, chapter, flag, ok, cells))
            if not ok:
                for cell in cells:
                    withheld.setdefault((student, chapter, cell), f"flagged for review: {flag}")
                report.problems.append(
                    f"{student} / {chapter}: flagged for review, points of {flag.cell} withheld "
                    f"({flag}); accept it with a line {student},{chapter},{flag.cell} in "
                    f"{out / ACCEPTED_CSV}"
                )
    with open(out / FLAGGED_CSV, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(
            ["student", "chapter", "exercise", "line", "rule", "reason", "accepted", "tests"]
        )
        for student, chapter, flag, ok, cells in listed:
            writer.writerow(
                [student, chapter, flag.cell, flag.line, flag.rule, flag.message]
                + ["yes" if ok else "no", " ".join(cells)]
            )
    rows = []
    for r in report.rows:
        why = withheld.get((r.student, r.chapter, r.cell))
        rows.append(
            r if why is None else GradeRow(r.student, r.chapter, r.cell, 0.0, r.max_points, why)
        )
    return rows


def _notify_feedback(root: Path, out: Path, recorded: list[GradeRow], rows: list[GradeRow]) -> None:
    """Tell each student on their feedback page what the grader decided after their
    notebook ran: which test cells lost points to the scan or to the check outside the
    kernel, and why (``recorded``: the scores of the gradebook, ``rows``: the final ones).
    A page whose cells all kept their points loses any notice an earlier run put there."""
    from autograder.feedback import name_of_test, notice_html, with_notice

    before = {(r.student, r.chapter, r.cell): r.points for r in recorded}
    totals: dict[tuple[str, str], tuple[float, float]] = {}
    lowered: dict[tuple[str, str], list[GradeRow]] = {}
    for r in rows:
        pair = (r.student, r.chapter)
        points, max_points = totals.get(pair, (0.0, 0.0))
        totals[pair] = (points + r.points, max_points + r.max_points)
        if r.points < before.get((r.student, r.chapter, r.cell), r.points):
            lowered.setdefault(pair, []).append(r)
    names: dict[str, dict[str, str]] = {}
    for (student, chapter), total in totals.items():
        page = out / "feedback" / student / f"{chapter}.html"
        if not page.is_file():
            continue
        notice = None
        if (student, chapter) in lowered:
            if chapter not in names:
                solution = nbformat.read(solution_path(root, chapter), as_version=4)
                names[chapter] = {
                    c.metadata.get("nbgrader", {}).get("grade_id"): name_of_test(c.source)
                    for c in solution.cells
                    if c.cell_type == "code"
                }
            cells = [
                (r.cell, names[chapter].get(r.cell) or r.cell, r.points, r.max_points, r.status)
                for r in lowered[(student, chapter)]
            ]
            notice = notice_html(cells, total)
        text = page.read_text(encoding="utf-8")
        changed = with_notice(text, notice)
        if changed != text:
            page.write_text(changed, encoding="utf-8")


def grading_config(
    work: Path,
    db: str,
    sandbox: bool = True,
    cell_timeout: int | None = None,
    hidden: tuple[str, ...] = (),
):
    """The nbgrader configuration for grading in ``work`` with the gradebook ``db`` (a URL), the
    kernels in the sandbox (unless ``sandbox`` is False) with the folders ``hidden`` from
    them; built from plain values so that each worker process can build its own."""
    work = Path(work)
    config = course_config(
        work,
        db_url=db,
        source_directory=work / "source",
        release_directory=work / "release",
        submitted_directory=work / "submitted",
        autograded_directory=work / "autograded",
        feedback_directory=work / "feedback",
    )
    return grading_settings(config, sandbox, cell_timeout, hidden)


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


def _ignore_nbgrader_warnings() -> None:
    # nbgrader's gradebook code triggers harmless SQLAlchemy warnings on every submission
    warnings.filterwarnings("ignore", module="nbgrader")
    warnings.filterwarnings("ignore", message=".*not in session.*")


def _run_job(api, job: Job) -> tuple[str | None, float]:
    """Grade one job with ``api``: (None or the reason it was not graded, seconds taken)."""
    start = time.perf_counter()
    job.marker.parent.mkdir(parents=True, exist_ok=True)
    job.marker.touch()
    try:
        reason = _autograde_one(
            api, Path(job.work), Path(job.notebook), job.student, job.chapter, Path(job.out)
        )
    except Exception as error:  # one submission's trouble never stops the batch
        reason = f"not graded: grader error ({type(error).__name__}: {error})"
    job.marker.unlink(missing_ok=True)
    return reason, time.perf_counter() - start


# The worker process's own nbgrader API, built once by _start_worker.
_worker_api = None


def _start_worker(work: str, db: str, *settings) -> None:
    """Set up a worker process: grading mode and one thread for every kernel it starts;
    ``settings`` are ``grading_config``'s (sandbox, cell timeout, hidden folders)."""
    global _worker_api
    os.environ.update(ONE_THREAD_ENV)
    os.environ[GRADING_ENV] = "1"
    _ignore_nbgrader_warnings()
    _worker_api = nbgrader_api(grading_config(Path(work), db, *settings))


def _work(job: Job) -> tuple[str | None, float]:
    return _run_job(_worker_api, job)


def _run_in_pools(jobs: list[Job], workers: int, worker_args: tuple, finish) -> None:
    """Grade ``jobs`` in ``workers`` processes; ``finish(job, reason, seconds)`` for each.

    A process that dies (a notebook that kills its kernel's parent, memory) breaks the
    pool and every job in it. The jobs that had not started go to a fresh pool; those
    that were running are graded again one by one, each in a pool of its own, where a job
    that breaks its pool is the culprit and is not graded.
    """
    context = multiprocessing.get_context("spawn")
    together, alone = list(jobs), []
    while together or alone:
        if together:
            batch, together = together, []
        else:
            batch = [alone.pop(0)]
        crashed = []
        pool = ProcessPoolExecutor(
            min(workers, len(batch)),
            mp_context=context,
            initializer=_start_worker,
            initargs=worker_args,
        )
        with pool:
            futures = {pool.submit(_work, job): job for job in batch}
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
        if len(batch) == 1:
            for job in crashed:
                job.marker.unlink(missing_ok=True)
                finish(job, "not graded: the grading process died while grading it", 0.0)
            continue
        running = [job for job in crashed if job.marker.exists()]
        if not running:  # died before any job started (e.g. in _start_worker)
            running = crashed
        for job in crashed:
            job.marker.unlink(missing_ok=True)
            (alone if job in running else together).append(job)


def _retrying(step) -> dict:
    """``step()`` (an nbgrader API call), again while it fails on a locked gradebook."""
    for attempt in range(LOCK_RETRIES + 1):
        result = step()
        message = f"{result.get('error') or ''}\n{result.get('log') or ''}"
        if result["success"] or attempt == LOCK_RETRIES or not _LOCKED.search(message):
            return result
        time.sleep(0.5 * (attempt + 1) + random.random())
    return result


def _autograde_one(
    api, work: Path, notebook: Path, student: str, chapter: str, out: Path
) -> str | None:
    """Autograde one submission and copy its feedback; None on success, else the reason."""
    target = work / "submitted" / student / chapter
    target.mkdir(parents=True, exist_ok=True)
    if Path(notebook).resolve() != (target / f"{chapter}.ipynb").resolve():
        shutil.copyfile(notebook, target / f"{chapter}.ipynb")
    with grading_environment():
        result = _retrying(lambda: api.autograde(chapter, student, force=True, create=True))
    if not result["success"]:
        said = f"{result.get('log') or ''}\n{result.get('error') or ''}"
        why = re.search(re.escape(NOT_GRADED) + r".*", said)  # the kernel died, say
        if why:
            return why.group(0).strip()
        last = (result.get("error") or result.get("log") or "").strip().splitlines()[-1:]
        return "not graded: nbgrader failed (" + (last[0] if last else "no message") + ")"
    feedback = _retrying(lambda: api.generate_feedback(chapter, student, force=True))
    html = work / "feedback" / student / chapter / f"{chapter}.html"
    if feedback["success"] and html.is_file():
        destination = out / "feedback" / student / f"{chapter}.html"
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(html, destination)
    return None


def write_csv(rows: list[GradeRow], path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        for r in rows:
            writer.writerow(
                [r.student, r.chapter, r.cell, f"{r.points:g}", f"{r.max_points:g}", r.status]
            )


def write_wide_csv(rows: list[GradeRow], path: Path) -> None:
    """A row per student, a column of points per chapter (course order), ``total``, and
    ``max_total``, the points the chapters in the table are worth. A chapter a student
    has no result for is left empty."""
    order = {ch: i for i, ch in enumerate(ALL_CHAPTERS)}
    chapters = sorted({r.chapter for r in rows}, key=lambda ch: (order.get(ch, 99), ch))
    points: dict[str, dict[str, float]] = {}
    for r in rows:
        by_chapter = points.setdefault(r.student, {})
        by_chapter[r.chapter] = by_chapter.get(r.chapter, 0.0) + r.points
    max_total = 0.0
    for ch in chapters:  # what a chapter is worth: the max points of one student's rows
        first = next(r.student for r in rows if r.chapter == ch)
        max_total += sum(r.max_points for r in rows if r.chapter == ch and r.student == first)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["student", *chapters, "total", "max_total"])
        for student in sorted(points):
            by_chapter = points[student]
            writer.writerow(
                [student]
                + [f"{by_chapter[ch]:g}" if ch in by_chapter else "" for ch in chapters]
                + [f"{sum(by_chapter.values()):g}", f"{max_total:g}"]
            )


def read_csv(path: Path) -> list[GradeRow]:
    """The rows of a per-cell CSV (``OUT/grades_by_cell.csv``). Given the wide
    ``OUT/grades.csv`` instead, reads the per-cell file beside it."""
    path = Path(path)
    with open(path, newline="", encoding="utf-8") as f:
        header = next(csv.reader(f), [])
    if "cell" not in header and (path.parent / CELLS_CSV).is_file():
        path = path.parent / CELLS_CSV
    with open(path, newline="", encoding="utf-8") as f:
        return [
            GradeRow(
                r["student"],
                r["chapter"],
                r["cell"],
                float(r["points"]),
                float(r["max_points"]),
                r["status"],
            )
            for r in csv.DictReader(f)
        ]
