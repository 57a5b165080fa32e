"""``report``: what a graded class got right and wrong, per exercise, for the instructor.

Input, what ``python -m autograder grade SUBMISSIONS --out OUT`` leaves::

    OUT/grades_by_cell.csv                                    one row per student, chapter, graded cell
    OUT/nbgrader/autograded/<student>/<chapter>/<chapter>.ipynb  the notebooks as graded
    OUT/graded.json                                           how long each submission took to grade
    OUT/graded_by_hand.csv, OUT/flagged.csv                   what was scored or commented by hand,
                                                              and what the scan flagged

Output::

    OUT/report/index.html    per chapter: the scores of every test cell (table and plot) and the
                             known mistakes diagnosed across the class (table and plot), and
                             what the instructor graded by hand (table); then
                             the slowest submissions to grade (table and plot); self-contained
                             (inline CSS, plots as inline PNG); the Jinja template
                             ``autograder/templates/report/index.html.j2`` lays it out
    OUT/report/summary.csv   one row per chapter and test cell: graded, mean, full marks, zero,
                             not graded, lost points, of which with a diagnosis
    OUT/report/scores.csv    one row per chapter, test cell and score: how many students got it
                             (score ``not graded`` counts the submissions that were not graded)
    OUT/report/mistakes.csv  one row per chapter and diagnosed mistake: how many students, who
    OUT/report/times.csv     one row per graded submission, slowest first: seconds to grade it
    OUT/report/plots.json    each plot of the page as a PNG, under a digest of what it draws and
                             of this module: a report written again draws only the plots whose
                             numbers changed (:class:`Plots`)

A test cell belongs to the exercise whose solution cell comes before it in the notebook.
A diagnosed mistake is a tag ``[known mistake: NAME]`` in the error message of a failed test
cell (``autograder/diagnosis.py`` writes it); its line comes from the chapter's catalogue
(``autograder/mistakes/``). A student counts once per mistake and chapter, however many of
the exercise's test cells named it; a tag the catalogue does not know is counted all the same.
"""

import base64
import csv
import functools
import hashlib
import io
import json
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from autograder.cells import exercise_of_tests, grade_id, is_graded
from autograder.chapters import CourseError, course_order, solution_path
from autograder.files import write_atomically
from autograder.outfolder import (
    BY_HAND_CSV,
    CELLS_CSV,
    FLAGGED_CSV,
    GRADES_CSV,
    LEDGER,
    REPORT,
    GradeRow,
    HandGrade,
    Ledger,
    Out,
    read_by_hand,
    read_csv,
    read_flagged,
)

TAG = re.compile(r"\[known mistake: ([a-z0-9-]+)\]")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
NOT_GRADED = "not graded"
SLOWEST_SHOWN = 15  # submissions named in the report's table and plot of grading times
TEMPLATES = Path(__file__).resolve().parent / "templates" / "report"  # index.html.j2


@dataclass
class CellStats:
    """The class's scores on one graded test cell."""

    chapter: str
    exercise: str
    cell: str
    max_points: float
    scores: Counter = field(default_factory=Counter)  # points -> students (graded ones only)
    not_graded: int = 0  # missing, unreadable or not graded submissions
    lost: set = field(default_factory=set)  # graded students below full marks
    diagnosed: set = field(default_factory=set)  # ... of whom the failure named a mistake

    @property
    def graded(self) -> int:
        return sum(self.scores.values())

    @property
    def mean(self) -> float | None:
        if not self.graded:
            return None
        return statistics.fmean(self.scores.elements())

    @property
    def full(self) -> int:
        return sum(n for p, n in self.scores.items() if p >= self.max_points)

    @property
    def zero(self) -> int:
        return self.scores.get(0.0, 0)


@dataclass
class MistakeCount:
    """One mistake diagnosed in a chapter, and who made it."""

    chapter: str
    exercise: str
    name: str
    says: str  # "" when the catalogue does not know the tag
    students: set = field(default_factory=set)
    tests: set = field(default_factory=set)  # test cells whose failure named it


@dataclass
class ByHand:
    """A cell the instructor scored or commented by hand (nbgrader's formgrader)."""

    grade: HandGrade
    exercise: str
    flagged: str  # what the scan flagged in its exercise ("" when nothing): it was reviewed


@dataclass
class ChapterReport:
    chapter: str
    students: int
    submissions_graded: int
    cells: list[CellStats]
    mistakes: list[MistakeCount]
    catalogued: int  # how many mistakes the chapter's catalogue lists
    by_hand: list[ByHand] = field(default_factory=list)  # in student, then notebook order


@dataclass
class Timing:
    """How long one submission took to grade (its kernel, tests and feedback page)."""

    student: str
    chapter: str
    seconds: float
    status: str  # "graded", or why it was not
    graded_at: str  # UTC, ISO 8601


@dataclass
class Report:
    out: Path
    students: int
    chapters: list[ChapterReport]
    problems: list[str]
    timings: list[Timing] = field(default_factory=list)  # slowest first

    @property
    def slowest(self) -> list[Timing]:
        return self.timings[:SLOWEST_SHOWN]

    @property
    def html(self) -> Path:
        return self.out / REPORT / "index.html"


# ------------------------------------------------------------------------------- reading


def known_mistakes(chapter: str) -> dict:
    """The chapter's catalogue, name -> entry; empty when there is none to read."""
    try:
        from autograder import mistakes

        return {m.name: m for m in mistakes.catalogue(chapter)}
    except (ImportError, CourseError):
        return {}


def exercises_of(nb) -> dict[str, str]:
    """Graded test cell -> the exercise it tests (itself, for a test above every exercise)."""
    return {test: exercise or test for test, exercise in exercise_of_tests(nb).items()}


def tags_by_cell(nb) -> dict[str, set[str]]:
    """Graded test cell -> the mistakes its error output names."""
    found = {}
    for cell in nb.cells:
        if cell.cell_type != "code" or not is_graded(cell):
            continue
        names = set()
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                text = f"{output.get('evalue', '')}\n" + "\n".join(output.get("traceback", []))
                names.update(TAG.findall(_ANSI.sub("", text)))
        if names:
            found[grade_id(cell)] = names
    return found


def _read(path: Path):
    """The notebook at ``path``, None when it cannot be read. A version 4 notebook (what
    nbgrader writes) is taken as it is, without nbformat's validation of every cell: 10 ms
    a notebook, and the report reads every graded one at each run; another version is
    converted by nbformat."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if isinstance(data, dict) and data.get("nbformat") == 4:
            if not isinstance(data.get("cells"), list):
                return None
            return nbformat.from_dict(data)
        return nbformat.read(path, as_version=4)
    except Exception:  # a broken notebook is reported, never fatal
        return None


def build(out: Path, root: Path | None = None) -> Report:
    """Read ``out/grades_by_cell.csv`` and the autograded notebooks; count scores and mistakes."""
    out = Path(out).resolve()
    grades = out / CELLS_CSV
    if not grades.is_file() and (out / GRADES_CSV).is_file():
        grades = out / GRADES_CSV  # written by an earlier version of the grader
    if not grades.is_file():
        raise CourseError(
            f"{out} has no grades.csv: run `python -m autograder grade` first "
            f"(python -m autograder grade SUBMISSIONS --out {out})"
        )
    try:
        rows = read_csv(grades)
    except (KeyError, ValueError, csv.Error) as error:
        raise CourseError(f"{grades} is not a grades.csv written by the grader ({error})") from None
    by_chapter: dict[str, list[GradeRow]] = {}
    for row in rows:
        by_chapter.setdefault(row.chapter, []).append(row)
    problems: list[str] = []
    chapters = [
        _chapter(out, root, chapter, by_chapter[chapter], problems)
        for chapter in sorted(by_chapter, key=course_order)
    ]
    _add_by_hand(out, chapters)
    timings = read_ledger(out, {(r.student, r.chapter) for r in rows}, problems)
    return Report(out, len({r.student for r in rows}), chapters, problems, timings)


def read_ledger(out: Path, pairs: set[tuple[str, str]], problems: list[str]) -> list[Timing]:
    """From ``OUT/graded.json``, for every (student, chapter) in ``pairs``: its grading time
    (a job that ran; not a missing or unreadable notebook), slowest first; and, added to
    ``problems``, what the grader noted about the file it graded (another name, notebooks
    beside it)."""
    ledger = Ledger.read(out / LEDGER)
    if ledger.problem:
        problems.append(f"{ledger.path} is unreadable: no grading times")
        return []
    try:
        submissions = ledger.submissions
        entries = sorted(
            (student, chapter, e)
            for student, chapters in submissions.items()
            for chapter, e in chapters.items()
            if (student, chapter) in pairs
        )
        timings = [
            Timing(student, chapter, float(e["seconds"]), str(e["status"]), str(e.get("time")))
            for student, chapter, e in entries
            if e.get("seconds") is not None
        ]
        notes = [f"{s} / {ch}: {e['note']}" for s, ch, e in entries if e.get("note")]
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        problems.append(f"{ledger.path} is unreadable ({type(error).__name__}): no grading times")
        return []
    problems.extend(notes)
    return sorted(timings, key=lambda t: (-t.seconds, t.student, t.chapter))


def _chapter(
    out: Path, root: Path | None, chapter: str, rows: list[GradeRow], problems: list[str]
) -> ChapterReport:
    """One chapter's report, in steps: read the graded notebooks, map each test cell to its
    exercise, count the scores per test cell, count the mistakes the notebooks name, and
    order those mistakes as the exercises come in the notebook."""
    students = list(dict.fromkeys(r.student for r in rows))
    failed = {r.student for r in rows if r.status != "graded"}
    graded_students = [s for s in students if s not in failed]
    notebooks = _autograded_notebooks(out, chapter, rows, problems)
    exercise = _exercise_of_tests(root, chapter, notebooks)
    cells = _cell_stats(chapter, rows, exercise)
    catalogue = known_mistakes(chapter)
    counts = _count_mistakes(chapter, notebooks, exercise, catalogue, cells)
    mistakes = _in_exercise_order(counts, cells, catalogue)
    return ChapterReport(
        chapter, len(students), len(graded_students), list(cells.values()), mistakes, len(catalogue)
    )


def _add_by_hand(out: Path, chapters: list[ChapterReport]) -> None:
    """Give each chapter the cells its students were graded by hand in
    (``OUT/graded_by_hand.csv``), each with the flag of the scan it reviewed
    (``OUT/flagged.csv``), if any."""
    flags: dict[tuple[str, str, str], str] = {}  # (student, chapter, cell) -> the flag's reason
    for row in read_flagged(out / FLAGGED_CSV):
        reason = f"line {row.get('line', '')}: {row.get('reason', '')}"
        for cell in [row.get("exercise", ""), *row.get("tests", "").split()]:
            flags.setdefault((row.get("student", ""), row.get("chapter", ""), cell), reason)
    by_chapter = {ch.chapter: ch for ch in chapters}
    for grade in read_by_hand(out / BY_HAND_CSV):
        ch = by_chapter.get(grade.chapter)
        if ch is None:
            continue
        exercise = next((c.exercise for c in ch.cells if c.cell == grade.cell), grade.cell)
        flagged = flags.get((grade.student, grade.chapter, grade.cell), "")
        ch.by_hand.append(ByHand(grade, exercise, flagged))


def _autograded_notebooks(out: Path, chapter: str, rows: list[GradeRow], problems: list[str]):
    """Student -> the chapter's autograded notebook, for every graded submission; one that
    cannot be read is added to ``problems``."""
    notebooks = {}
    for student in dict.fromkeys(r.student for r in rows if r.status == "graded"):
        path = Out(out).autograded(student, chapter)
        nb = _read(path) if path.is_file() else None
        if nb is None:
            problems.append(f"{student} / {chapter}: no readable autograded notebook at {path}")
        else:
            notebooks[student] = nb
    return notebooks


def _exercise_of_tests(root: Path | None, chapter: str, notebooks: dict) -> dict[str, str]:
    """Test cell -> its exercise, from the course's solution notebook when there is one, else
    from the first graded notebook that has test cells."""
    solution = solution_path(root, chapter) if root else None
    if solution is not None and solution.is_file() and (nb := _read(solution)) is not None:
        if exercise := exercises_of(nb):
            return exercise
    for nb in notebooks.values():
        if exercise := exercises_of(nb):
            return exercise
    return {}


def _cell_stats(chapter: str, rows: list[GradeRow], exercise: dict) -> dict[str, CellStats]:
    """Test cell -> the class's scores on it, in the order of the grades' rows."""
    cells: dict[str, CellStats] = {}
    for r in rows:
        stats = cells.setdefault(
            r.cell, CellStats(chapter, exercise.get(r.cell, r.cell), r.cell, r.max_points)
        )
        if r.status != "graded":
            stats.not_graded += 1
            continue
        stats.scores[r.points] += 1
        if r.points < r.max_points:
            stats.lost.add(r.student)
    return cells


def _count_mistakes(
    chapter: str, notebooks: dict, exercise: dict, catalogue: dict, cells: dict[str, CellStats]
) -> dict[str, MistakeCount]:
    """Mistake -> who made it, from the tags of the graded notebooks; and, in ``cells``, which
    of the students who lost points on a test cell got a diagnosis there."""
    counts: dict[str, MistakeCount] = {}
    for student, nb in notebooks.items():
        for cell, names in tags_by_cell(nb).items():
            for name in names:
                entry = catalogue.get(name)
                count = counts.setdefault(
                    name,
                    MistakeCount(
                        chapter,
                        entry.cell if entry else exercise.get(cell, cell),
                        name,
                        entry.says if entry else "",
                    ),
                )
                count.students.add(student)
                count.tests.add(cell)
            if cell in cells and student in cells[cell].lost:
                cells[cell].diagnosed.add(student)
    return counts


def _in_exercise_order(
    counts: dict[str, MistakeCount], cells: dict[str, CellStats], catalogue: dict
) -> list[MistakeCount]:
    """The mistakes by exercise (as the test cells, then the catalogue, name them), the most
    common first within an exercise."""
    position = {}
    for stats in cells.values():
        position.setdefault(stats.exercise, len(position))
    for entry in catalogue.values():
        position.setdefault(entry.cell, len(position))
    return sorted(
        counts.values(),
        key=lambda m: (position.get(m.exercise, len(position)), -len(m.students), m.name),
    )


# ------------------------------------------------------------------------------- writing


def write_report(out: Path, root: Path | None = None) -> Report:
    """Build the report of ``out`` and write ``out/report/`` (HTML and CSV files)."""
    report = build(out, root)
    folder = report.out / REPORT
    folder.mkdir(parents=True, exist_ok=True)
    _write_csvs(report, folder)
    plots = Plots(folder / PLOTS)
    report.html.write_text(_page(report, plots), encoding="utf-8")
    plots.save()
    return report


PLOTS = "plots.json"


class Plots:
    """The page's plots, remembered in ``OUT/report/plots.json``: each PNG under a digest of
    the numbers it draws (``data``, all that its drawing function reads), of the function's
    name and of this module's source and matplotlib's version. Grading writes the report
    again after every run, for every chapter graded into OUT: matplotlib took about 0.6 s a
    plot, more than half of a run with nothing to grade once ten chapters were there. Now
    only the plots whose numbers changed are drawn; the others are read back. The file
    keeps the plots of the last page written only; one that cannot be read is drawn anew."""

    def __init__(self, path: Path):
        self.path = path
        try:
            kept = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            kept = {}
        self.kept = kept if isinstance(kept, dict) else {}
        self.used: dict[str, str] = {}

    def png(self, draw, data) -> str:
        """The base64 PNG of ``draw(data)`` (a matplotlib Figure), drawn or read back."""
        key = hashlib.sha256(json.dumps([draw.__name__, _code(), data]).encode()).hexdigest()
        if key not in self.used:
            kept = self.kept.get(key)
            if not isinstance(kept, str):
                kept = _png(draw(data))
            self.used[key] = kept
        return self.used[key]

    def save(self) -> None:
        """Write the plots of this page (and no others), atomically."""
        write_atomically(self.path, json.dumps(self.used))


@functools.cache
def _code() -> str:
    """What a remembered plot depends on beside its numbers: this module (its drawing
    functions) and matplotlib."""
    import matplotlib

    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest() + matplotlib.__version__


def _number(x: float) -> str:
    return f"{x:g}"


def _write_csvs(report: Report, folder: Path) -> None:
    with open(folder / "summary.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(
            (
                "chapter",
                "exercise",
                "cell",
                "max_points",
                "graded",
                "mean",
                "full_marks",
                "zero",
                "not_graded",
                "lost_points",
                "diagnosed",
            )
        )
        for ch in report.chapters:
            for c in ch.cells:
                mean = "" if c.mean is None else f"{c.mean:.3g}"
                w.writerow(
                    (ch.chapter, c.exercise, c.cell, _number(c.max_points), c.graded, mean)
                    + (c.full, c.zero, c.not_graded, len(c.lost), len(c.diagnosed))
                )
    with open(folder / "scores.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(("chapter", "exercise", "cell", "max_points", "score", "students"))
        for ch in report.chapters:
            for c in ch.cells:
                head = (ch.chapter, c.exercise, c.cell, _number(c.max_points))
                for points in sorted(c.scores):
                    w.writerow(head + (_number(points), c.scores[points]))
                if c.not_graded:
                    w.writerow(head + (NOT_GRADED, c.not_graded))
    with open(folder / "mistakes.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(("chapter", "exercise", "mistake", "says", "tests", "count", "students"))
        for ch in report.chapters:
            for m in ch.mistakes:
                w.writerow(
                    (ch.chapter, m.exercise, m.name, m.says, " ".join(sorted(m.tests)))
                    + (len(m.students), " ".join(sorted(m.students)))
                )
    with open(folder / "times.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(("student", "chapter", "seconds", "status", "graded_at"))
        for t in report.timings:
            w.writerow((t.student, t.chapter, f"{t.seconds:.1f}", t.status, t.graded_at))


def _png(fig) -> str:
    """The figure as a PNG, base64-encoded (the page shows it as a data: URL)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight", metadata={"Software": None})
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _scores_data(ch: ChapterReport) -> dict:
    """What :func:`_scores_figure` draws of a chapter: per test cell its label, its points,
    the submissions not graded and how many got each score."""
    return {
        "chapter": ch.chapter,
        "cells": [
            {
                "label": c.cell if c.cell == c.exercise else f"{c.exercise} · {c.cell}",
                "max_points": c.max_points,
                "not_graded": c.not_graded,
                "scores": sorted(c.scores.items()),
            }
            for c in ch.cells
        ],
    }


def _scores_figure(data: dict):
    """One horizontal bar per test cell, split by score: red (zero) to green (full marks),
    grey for the submissions that were not graded."""
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    cmap = colormaps["RdYlGn"]
    cells = data["cells"]
    fig = Figure(figsize=(8, 0.5 * len(cells) + 1.2))
    ax = fig.add_subplot()
    labels = []
    for y, c in enumerate(cells):
        labels.append(c["label"])
        left, max_points = 0, c["max_points"]
        segments = [(NOT_GRADED, c["not_graded"])] + [tuple(s) for s in c["scores"]]
        for points, n in segments:
            if not n:
                continue
            if points == NOT_GRADED:
                color = "0.75"
            else:
                color = cmap(points / max_points if max_points else 1.0)
            ax.barh(y, n, left=left, color=color, edgecolor="white")
            text = str(n) if points == NOT_GRADED else f"{_number(points)} pts: {n}"
            dark = points != NOT_GRADED and not 0.2 < points / (max_points or 1) < 0.8
            ax.text(
                left + n / 2,
                y,
                text,
                ha="center",
                va="center",
                fontsize=8,
                color="white" if dark else "black",
            )
            left += n
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("students")
    ax.xaxis.get_major_locator().set_params(integer=True)
    bar = fig.colorbar(ScalarMappable(Normalize(0, 1), cmap), ax=ax, pad=0.02)
    bar.set_label("score / the cell's points")
    if any(c["not_graded"] for c in cells):
        ax.legend(
            handles=[Patch(color="0.75", label=NOT_GRADED)],
            loc="upper right",
            bbox_to_anchor=(1.0, -0.08),
            fontsize=8,
            frameon=False,
        )
    ax.set_title(f"{data['chapter']}: scores per test cell")
    return fig


def _mistakes_data(ch: ChapterReport) -> dict:
    """What :func:`_mistakes_figure` draws of a chapter: each diagnosed mistake's label,
    whether the catalogue knows it and how many students it named, fewest first."""
    shown = sorted(ch.mistakes, key=lambda m: len(m.students))
    return {
        "chapter": ch.chapter,
        "mistakes": [[f"{m.exercise}: {m.name}", bool(m.says), len(m.students)] for m in shown],
    }


def _mistakes_figure(data: dict):
    from matplotlib.figure import Figure

    shown = data["mistakes"]
    fig = Figure(figsize=(8, 0.4 * len(shown) + 1.2))
    ax = fig.add_subplot()
    y = range(len(shown))
    counts = [n for _, _, n in shown]
    ax.barh(y, counts, color=["#c0504d" if known else "0.6" for _, known, _ in shown])
    for i, n in zip(y, counts, strict=True):
        ax.text(n, i, f" {n}", va="center", fontsize=8)
    ax.set_yticks(list(y), [label for label, _, _ in shown])
    ax.set_xlabel("students whose failure named the mistake")
    ax.set_xlim(0, max(counts) * 1.1 + 0.5)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_title(f"{data['chapter']}: known mistakes diagnosed")
    return fig


def _times_data(report: Report) -> list:
    """What :func:`_times_figure` draws: each of the slowest submissions' label, seconds,
    whether it was graded, and its chapter's median time."""
    medians = _chapter_medians(report)
    return [
        [f"{t.student} · {t.chapter}", t.seconds, t.status == "graded", medians[t.chapter]]
        for t in report.slowest
    ]


def _times_figure(shown: list):
    """The slowest submissions as horizontal bars (red: not graded), and a dashed line at
    the median time of its chapter for each, so an outlier stands out."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 0.35 * len(shown) + 1.3))
    ax = fig.add_subplot()
    for y, (_, seconds, graded, median) in enumerate(shown):
        ax.barh(y, seconds, color="#4f81bd" if graded else "#c0504d")
        ax.plot([median] * 2, [y - 0.4, y + 0.4], color="black", ls="--", lw=1)
        ax.text(seconds, y, f" {seconds:.1f} s", va="center", fontsize=8)
    ax.set_yticks(range(len(shown)), [label for label, _, _, _ in shown])
    ax.invert_yaxis()
    ax.set_xlim(0, max(max(seconds for _, seconds, _, _ in shown) * 1.15, 1.0))
    ax.set_xlabel("seconds to grade (dashed: the chapter's median)")
    ax.set_title("the slowest submissions")
    return fig


def _chapter_medians(report: Report) -> dict[str, float]:
    by_chapter: dict[str, list[float]] = {}
    for t in report.timings:
        by_chapter.setdefault(t.chapter, []).append(t.seconds)
    return {ch: statistics.median(s) for ch, s in by_chapter.items()}


def _page(report: Report, plots: Plots) -> str:
    """``index.html``: the template ``templates/report/index.html.j2`` given what it shows."""
    return _template().render(
        report=report,
        submissions=sum(ch.students for ch in report.chapters),
        chapters=[_chapter_page(ch, plots) for ch in report.chapters],
        times=_times_page(report, plots),
    )


def _chapter_page(ch: ChapterReport, plots: Plots) -> dict:
    """What the page shows of one chapter, beside its ChapterReport: how many of the mistakes
    diagnosed the catalogue knows, and the plots ("" when there is nothing to plot)."""
    known = sum(1 for m in ch.mistakes if m.says)
    return {
        "ch": ch,
        "known": known,
        "unknown": len(ch.mistakes) - known,
        "scores_png": plots.png(_scores_figure, _scores_data(ch)) if ch.cells else "",
        "mistakes_png": plots.png(_mistakes_figure, _mistakes_data(ch)) if ch.mistakes else "",
    }


def _times_page(report: Report, plots: Plots) -> dict:
    """What the page shows of the grading times: the medians per chapter in course order, and
    each of the slowest submissions with its time over its chapter's median (None when that
    median is 0)."""
    if not report.timings:
        return {"timed": 0}
    medians = _chapter_medians(report)
    return {
        "timed": len(report.timings),
        "medians": [(ch, medians[ch]) for ch in sorted(medians, key=course_order)],
        "rows": [
            (t, t.seconds / medians[t.chapter] if medians[t.chapter] else None)
            for t in report.slowest
        ],
        "png": plots.png(_times_figure, _times_data(report)),
    }


def _counted(n: int, noun: str) -> str:
    """``5 students``, ``1 student``."""
    return f"{n} {noun}{'s' if n != 1 else ''}"


@functools.cache
def _template():
    """The report's template, autoescaped: every value the page shows is escaped as HTML."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["number"] = _number
    env.filters["counted"] = _counted
    return env.get_template("index.html.j2")
