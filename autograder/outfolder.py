"""The OUT folder of a grading run: where everything is, and the formats of its files.

``python -m autograder grade SUBMISSIONS --out OUT`` writes::

    OUT/grades.csv                         a row per student, a column per chapter, the total
    OUT/grades_by_cell.csv                 one row per student, chapter and graded cell
    OUT/feedback/<student>/<chapter>.html  what the student gets back
    OUT/graded.json                        what each graded submission was (content hashes),
                                           its status and how long grading it took
    OUT/flagged.csv                        what the scan flagged for review
    OUT/accepted.csv                       (written by the instructor) flags accepted after review
    OUT/graded_by_hand.csv                 the scores and comments given by hand (nbgrader's
                                           formgrader, ``python -m autograder review``)
    OUT/keys/<chapter>.json                the key each chapter was checked against outside the kernel
    OUT/report/                            the class report
    OUT/gradebook.db                       nbgrader's gradebook (unless --db names another)
    OUT/backups/gradebook-<UTC time>.db    the gradebook as it was before each run
    OUT/nbgrader/                          nbgrader's working folders: source, release,
                                           submitted, autograded, feedback

This module is the one place those names and formats are written down: every other module
asks it for a path, reads the CSV files and ``graded.json`` through it, and writes them
through it (whole or not at all). Instructors grade again into existing folders, so none of
this may change.
"""

import csv
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from autograder.chapters import course_order
from autograder.files import write_atomically

GRADES_CSV = "grades.csv"  # wide: a row per student, a column per chapter, the total
CELLS_CSV = "grades_by_cell.csv"  # long: CSV_COLUMNS, one row per student, chapter, cell
CSV_COLUMNS = ("student", "chapter", "cell", "points", "max_points", "status")
LEDGER = "graded.json"
FLAGGED_CSV = "flagged.csv"
ACCEPTED_CSV = "accepted.csv"
FLAGGED_COLUMNS = ("student", "chapter", "exercise", "line", "rule", "reason", "accepted", "tests")
BY_HAND_CSV = "graded_by_hand.csv"
BY_HAND_COLUMNS = ("student", "chapter", "cell", "points", "max_points", "autograded", "comment")
BY_HAND = "by hand"  # flagged.csv's ``accepted``: each test cell of the flag scored by hand
GRADEBOOK_DB = "gradebook.db"
BACKUPS = "backups"
KEYS = "keys"
REPORT = "report"

GRADED = "graded"  # the status of a graded submission (else: why it was not graded)


@dataclass(frozen=True)
class Out:
    """The paths of an OUT folder (plain values: it travels to worker processes)."""

    folder: Path

    @property
    def work(self) -> Path:
        """nbgrader's course folder for this run: its steps' folders live under it."""
        return self.folder / "nbgrader"

    def source(self, chapter: str) -> Path:
        return self.work / "source" / chapter

    def released(self, chapter: str) -> Path:
        return self.work / "release" / chapter / f"{chapter}.ipynb"

    def submitted(self, student: str, chapter: str) -> Path:
        """Where nbgrader takes a submission from (its released cells put back)."""
        return self.work / "submitted" / student / chapter / f"{chapter}.ipynb"

    def autograded(self, student: str, chapter: str) -> Path:
        """The notebook as nbgrader ran it, outputs included."""
        return self.work / "autograded" / student / chapter / f"{chapter}.ipynb"

    def nbgrader_feedback(self, student: str, chapter: str) -> Path:
        return self.work / "feedback" / student / chapter / f"{chapter}.html"

    def feedback(self, student: str, chapter: str) -> Path:
        """The feedback page the student gets back."""
        return self.folder / "feedback" / student / f"{chapter}.html"

    def running(self, student: str, chapter: str) -> Path:
        """A marker that exists while a process grades this submission."""
        return self.work / ".running" / student / chapter

    @property
    def running_markers(self) -> Path:
        return self.work / ".running"

    def key(self, chapter: str) -> Path:
        return self.folder / KEYS / f"{chapter}.json"

    def __truediv__(self, name: str) -> Path:
        return self.folder / name


# ------------------------------------------------------------------------- the CSV files


@dataclass
class GradeRow:
    student: str
    chapter: str
    cell: str
    points: float
    max_points: float
    status: str


def write_csv(rows: list[GradeRow], path: Path) -> None:
    """The per-cell scores (``OUT/grades_by_cell.csv``)."""
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
    chapters = sorted({r.chapter for r in rows}, key=course_order)
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


def read_accepted(path: Path) -> set[tuple[str, str, str]]:
    """(student, chapter, exercise) lines an instructor accepted after review
    (``OUT/accepted.csv``; a header line and ``#`` comments are allowed)."""
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


def write_flagged(path: Path, listed: list[tuple]) -> None:
    """``OUT/flagged.csv``: a row per flag, ``listed`` as (student, chapter, flag, accepted,
    the test cells whose points it withholds); accepted is ``yes`` (in ``OUT/accepted.csv``),
    ``by hand`` (each of its test cells scored by hand) or ``no``."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(FLAGGED_COLUMNS)
        for student, chapter, flag, accepted, cells in listed:
            writer.writerow(
                [student, chapter, flag.cell, flag.line, flag.rule, flag.message]
                + [accepted, " ".join(cells)]
            )


def read_flagged(path: Path) -> list[dict[str, str]]:
    """The rows of ``OUT/flagged.csv`` (none when there is no such file)."""
    if not Path(path).is_file():
        return []
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


# ---------------------------------------------------------------------- graded by hand


@dataclass(frozen=True)
class HandGrade:
    """A graded or answer cell an instructor scored or commented by hand in the gradebook
    (nbgrader's formgrader): ``points`` the score given (None: only a comment), ``autograded``
    the score the tests gave, ``comment`` the instructor's ("" when none)."""

    student: str
    chapter: str
    cell: str
    points: float | None
    max_points: float | None
    autograded: float | None
    comment: str = ""


def write_by_hand(grades: list[HandGrade], path: Path) -> None:
    """``OUT/graded_by_hand.csv``: a row per cell scored or commented by hand."""

    def number(x: float | None) -> str:
        return "" if x is None else f"{x:g}"

    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(BY_HAND_COLUMNS)
        for g in grades:
            writer.writerow(
                [g.student, g.chapter, g.cell, number(g.points), number(g.max_points)]
                + [number(g.autograded), g.comment]
            )


def read_by_hand(path: Path) -> list[HandGrade]:
    """The rows of ``OUT/graded_by_hand.csv`` (none when there is no such file)."""
    if not Path(path).is_file():
        return []

    def number(text: str) -> float | None:
        return float(text) if text.strip() else None

    with open(path, newline="", encoding="utf-8") as f:
        return [
            HandGrade(
                r["student"],
                r["chapter"],
                r["cell"],
                number(r["points"]),
                number(r["max_points"]),
                number(r["autograded"]),
                r["comment"],
            )
            for r in csv.DictReader(f)
        ]


# --------------------------------------------------------------------------- graded.json


@dataclass
class Ledger:
    """``OUT/graded.json``: for every (student, chapter) graded into OUT, the SHA-256 of the
    submitted notebook and of the solution notebook it was graded against, its status
    (``graded`` or the reason it was not), when, how long it took, what the grader noted
    about the file and what had been graded by hand when its feedback page was last made;
    the solution each chapter was prepared from; and the gradebook used."""

    path: Path
    chapters: dict[str, str] = field(default_factory=dict)
    submissions: dict[str, dict[str, dict]] = field(default_factory=dict)
    gradebook: str | None = None  # the gradebook's URL, password hidden
    problem: str | None = None  # why the file could not be read, when it could not

    @classmethod
    def read(cls, path: Path) -> "Ledger":
        """The ledger at ``path``; empty (with ``problem`` set) when it is unreadable."""
        ledger = cls(Path(path))
        if not ledger.path.is_file():
            return ledger
        try:
            data = json.loads(ledger.path.read_text(encoding="utf-8"))
            ledger.chapters = dict(data.get("chapters", {}))
            ledger.submissions = dict(data.get("submissions", {}))
            ledger.gradebook = data.get("gradebook")
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError, TypeError, ValueError):
            ledger.chapters, ledger.submissions = {}, {}
            ledger.problem = f"{ledger.path} is unreadable: every submission is graded again"
        return ledger

    def forget(self) -> None:
        self.chapters, self.submissions = {}, {}

    def get(self, student: str, chapter: str) -> dict | None:
        return self.submissions.get(student, {}).get(chapter)

    def pairs(self) -> list[tuple[str, str]]:
        """Every (student, chapter) recorded."""
        return [(s, ch) for s, chs in self.submissions.items() for ch in chs]

    def record(self, student, chapter, digest, solution, status, seconds=None, note=None):
        """``seconds``: how long its job took (None or 0 when it was not run or not timed);
        ``note``: what the instructor should know about the file graded."""
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

    def by_hand(self, student: str, chapter: str) -> str | None:
        """What was graded by hand in this submission (a digest) when its feedback page was
        last made; None for nothing."""
        return (self.get(student, chapter) or {}).get("by_hand")

    def set_by_hand(self, student: str, chapter: str, digest: str | None) -> None:
        entry = self.get(student, chapter)
        if entry is None:
            return
        if digest:
            entry["by_hand"] = digest
        else:
            entry.pop("by_hand", None)

    def solutions(self) -> dict[tuple[str, str], str]:
        """(student, chapter) -> SHA-256 of the solution notebook it was graded against."""
        return {
            (student, chapter): entry["solution"]
            for student, chapters in self.submissions.items()
            if isinstance(chapters, dict)
            for chapter, entry in chapters.items()
            if isinstance(entry, dict) and isinstance(entry.get("solution"), str)
        }

    def save(self) -> None:
        data = {
            "gradebook": self.gradebook,
            "chapters": self.chapters,
            "submissions": self.submissions,
        }
        write_atomically(self.path, json.dumps(data, indent=1, sort_keys=True))
