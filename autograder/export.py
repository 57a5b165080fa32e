"""``export``: a grading run's grades into the file a learning-management system imports
for its gradebook, written from that system's own export of the class (the roster)::

    python -m autograder export OUT --lms canvas|moodle|blackboard --roster FILE [--to PATH]

What goes where: each chapter's cell gets the student's points for the chapter, the
chapter's column of ``OUT/grades.csv`` (the sum of its test cells' points, after review),
as a number such as ``12.5``. The roster's rows are matched to OUT's students on ids only,
never on names: the id ``collect`` read from the LMS's file names (Canvas's user id,
Blackboard's username, the Moodle assignment's participant id), in the column the LMS
puts it in (``--id-column`` names another). A chapter's column is the one whose name holds
the chapter's id or starts with its number, or the one ``--column CHAPTER=NAME`` names.

- Canvas: the gradebook export, written back with its id columns and the chapters'
  columns (the other columns are left out, so an import changes nothing else).
- Moodle: the gradebook's CSV export (or the participants' list), written as the
  gradebook's CSV import; or an assignment's grading worksheet (one chapter, ``--chapter``),
  written back with its ``Grade`` filled, and beside it the assignment's feedback zip
  (``feedback_<chapter>.zip``, each student's ``OUT/feedback/<student>/<chapter>.html``).
- Blackboard: the Grade Center's Work Offline download, written back with its user columns
  and the chapters' columns, in its delimiter and encoding.

The file is written in the roster's encoding and delimiter, to ``--to`` (default
``OUT/export/<lms>/<the roster's name>``), whole or not at all. Nothing is dropped
silently: a roster student without a result (cells left as they were), a graded student
the roster lacks, a chapter without a column, a column worth other points than the chapter
are each reported.
"""

import csv
from pathlib import Path

from autograder.chapters import CourseError, course_order
from autograder.files import write_atomically
from autograder.lms import moodle
from autograder.lms.blackboard import Blackboard
from autograder.lms.canvas import Canvas
from autograder.lms.sheet import Gradebook, Grades, Report, fill
from autograder.lms.table import Table, read_table, table_bytes
from autograder.outfolder import CELLS_CSV, GRADES_CSV, Out, read_csv

LMS = ("canvas", "moodle", "blackboard")
EXPORT = "export"  # OUT/export/<lms>/: the files written for the LMS


def export(
    out: Path,
    lms: str,
    roster: Path,
    to: Path | None = None,
    columns: list[str] = (),
    chapters: list[str] | None = None,
    id_column: str | None = None,
) -> Report:
    """Write OUT's grades into ``lms``'s import file made from ``roster``.

    Args:
        out: the ``--out`` folder of a ``grade`` run.
        lms: ``canvas``, ``moodle`` or ``blackboard``.
        roster: the LMS's export of the class (see the module's docstring).
        to: the file to write (default ``OUT/export/<lms>/<roster's name>``).
        columns: ``CHAPTER=COLUMN NAME`` pairs, a chapter by its id or number.
        chapters: only these chapters (default: every chapter in ``OUT/grades.csv``).
        id_column: the roster's column that holds OUT's student ids.

    Returns:
        What was written and matched, and every warning.

    Raises:
        CourseError: OUT has no grades, the roster cannot be read or is not the LMS's file,
        an option names an unknown chapter or column.
    """
    if lms not in LMS:
        raise CourseError(f"unknown LMS {lms!r}; one of {', '.join(LMS)}")
    out, roster = Path(out), Path(roster)
    grades = read_grades(out)
    chosen = _chapters(grades, chapters)
    named = _named_columns(columns, grades.chapters)
    table = read_table(roster)
    book = _gradebook(lms, table, chosen)
    if isinstance(book, moodle.MoodleWorksheet):
        chosen = [book.chapter]
    target = _target(out, lms, roster, to)
    report = Report(lms=book.lms)
    header, rows, matched = fill(table, book, grades, chosen, named, id_column, report)
    write_atomically(
        target, table_bytes(header, rows, table.encoding, table.delimiter, book.quote_all)
    )
    report.written.append(target)
    if isinstance(book, moodle.MoodleWorksheet):
        _feedback_zip(out, table, book, matched, target.parent, report)
    elif lms == "moodle":
        report.notes.append(moodle.import_note(report.id_column))
        report.notes.append(
            "no feedback zip: Moodle's needs each student's participant id in the assignment, "
            "which only the assignment's grading worksheet gives (--roster WORKSHEET.csv)"
        )
    return report


def read_grades(out: Path) -> Grades:
    """``OUT/grades.csv``'s points, and what each chapter is worth (``grades_by_cell.csv``)."""
    path = Out(out) / GRADES_CSV
    if not path.is_file():
        raise CourseError(
            f"{path} does not exist: grade into {out} first (python -m autograder grade "
            f"SUBMISSIONS --out {out})"
        )
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader, [])
        if header[:1] != ["student"]:
            raise CourseError(f"{path} is not a grading run's grades.csv (its header: {header})")
        chapters = [h for h in header[1:] if h not in ("total", "max_total")]
        points: dict[str, dict[str, float]] = {}
        for n, row in enumerate(reader, start=2):
            if not row or not row[0].strip():
                continue
            cells = dict(zip(header[1:], row[1:], strict=False))
            try:
                points[row[0]] = {ch: float(cells[ch]) for ch in chapters if cells.get(ch, "")}
            except ValueError:
                raise CourseError(
                    f"{path}, line {n}: a chapter's points are not a number"
                ) from None
    return Grades(points, sorted(chapters, key=course_order), _worth(out))


def _worth(out: Path) -> dict[str, float]:
    """chapter -> the points it is worth: the largest sum of one student's ``max_points``."""
    path = Out(out) / CELLS_CSV
    if not path.is_file():
        return {}
    sums: dict[tuple[str, str], float] = {}
    for r in read_csv(path):
        sums[r.chapter, r.student] = sums.get((r.chapter, r.student), 0.0) + r.max_points
    worth: dict[str, float] = {}
    for (chapter, _), total in sums.items():
        worth[chapter] = max(worth.get(chapter, 0.0), total)
    return worth


def _chapter(text: str, known: list[str], what: str) -> str:
    """The chapter ``text`` names, by its id or its number (``04``, ``4``)."""
    text = text.strip()
    found = [ch for ch in known if text == ch or (text.isdigit() and _number(ch) == int(text))]
    if len(found) != 1:
        listed = ", ".join(known) or "none"
        raise CourseError(f"{what}: {text!r} is not a chapter of OUT/grades.csv ({listed})")
    return found[0]


def _number(chapter: str) -> int | None:
    return int(chapter[:2]) if chapter[:2].isdigit() else None


def _chapters(grades: Grades, chapters: list[str] | None) -> list[str]:
    if not grades.chapters:
        raise CourseError("OUT/grades.csv has no chapter columns: nothing to export")
    if not chapters:
        return list(grades.chapters)
    chosen = {_chapter(ch, grades.chapters, "--chapter") for ch in chapters}
    return sorted(chosen, key=course_order)


def _named_columns(columns: list[str], chapters: list[str]) -> dict[str, str]:
    """``--column CHAPTER=NAME`` options as chapter -> column name."""
    named = {}
    for option in columns:
        chapter, sep, name = option.partition("=")
        if not sep or not name.strip():
            raise CourseError(f"--column {option!r}: expected CHAPTER=COLUMN NAME")
        named[_chapter(chapter, chapters, f"--column {option!r}")] = name.strip()
    return named


def _gradebook(lms: str, table: Table, chapters: list[str]) -> Gradebook:
    if lms == "canvas":
        return Canvas()
    if lms == "blackboard":
        return Blackboard()
    if not moodle.is_worksheet(table):
        return moodle.MoodleGrades()
    if len(chapters) != 1:
        raise CourseError(
            f"{table.path} is a Moodle assignment's grading worksheet, which holds one "
            f"chapter: say which with --chapter (OUT has {', '.join(chapters)})"
        )
    return moodle.MoodleWorksheet(chapters[0])


def _target(out: Path, lms: str, roster: Path, to: Path | None) -> Path:
    target = Path(to) if to is not None else Out(out) / EXPORT / lms / roster.name
    if target.resolve() == roster.resolve():
        raise CourseError(f"--to {target} is the roster itself: write somewhere else")
    return target


def _feedback_zip(out, table, book, matched, folder: Path, report: Report) -> None:
    """The assignment's feedback zip, ``feedback_<chapter>.zip`` beside the worksheet."""
    students = [
        (student, book.participant(table, row), book.name(table, row)) for student, row in matched
    ]
    data = moodle.feedback_zip(
        students, book.chapter, lambda s: Out(out).feedback(s, book.chapter), report
    )
    if data is None:
        report.problems.append(f"no feedback page for {book.chapter}: no feedback zip written")
        return
    path = folder / f"feedback_{book.chapter}.zip"
    write_atomically(path, data)
    report.written.append(path)
