"""Moodle's two files for grades, and its zip of feedback files.

- The gradebook's CSV import (Grades > Import > CSV file), from the gradebook's CSV export
  (Grades > Export > Plain text file) or the participants page's: columns ``First name``,
  ``Last name``, ``ID number``, ``Email address`` (or ``Username``), then one per grade
  item, ``Assignment: <name> (Real)``. On import, "Identify user by" maps the id column to
  Moodle's field, and each chapter column to its grade item.
- An assignment's grading worksheet (Download grading worksheet, then Upload grading
  worksheet; the assignment's "Offline grading worksheet" feedback type): columns
  ``Identifier`` (``Participant 12345``: the participant id ``collect`` reads from a
  submission's folder name, which is the assignment's own), ``Full name``, ..., ``Grade``,
  ``Maximum Grade``, ..., ``Last modified (grade)``, ``Feedback comments``. One assignment,
  so one chapter.
- Upload multiple feedback files in a zip (the assignment's "Feedback files" type): one
  folder per student, named as the submissions download names them,
  ``<Full name>_<participant id>_assignsubmission_file_``, holding the feedback page.
"""

import re
import zipfile
from io import BytesIO
from pathlib import Path

from autograder.chapters import CourseError
from autograder.lms.sheet import Column, Gradebook, Report, number
from autograder.lms.table import Table

IDENTIFIER, FULL_NAME, GRADE, MAXIMUM = "Identifier", "Full name", "Grade", "Maximum Grade"
IMPORT_FIELDS = {"ID number": "useridnumber", "Username": "username", "Email address": "useremail"}


class MoodleGrades(Gradebook):
    """The gradebook's CSV export and import."""

    lms = "Moodle"
    id_columns = tuple(IMPORT_FIELDS)
    keep = ("First name", "Last name", *IMPORT_FIELDS)
    no_match_hint = (
        "no graded student's id is in this file. Students collected from Moodle's "
        "submissions download are known by their participant id in that assignment, which "
        "only the assignment's grading worksheet lists: export each chapter with --roster "
        "WORKSHEET.csv --chapter CHAPTER"
    )

    def title(self, column: str) -> str:
        column = re.sub(r"^[^\d:]+:\s*", "", column)  # the activity's type, "Assignment: "
        return re.sub(r"\s*\([^()]*\)\s*$", "", column).strip()  # the display type, " (Real)"

    def name(self, table: Table, row: list[str]) -> str:
        parts = [
            row[i].strip() for i in map(table.index, ("First name", "Last name")) if i is not None
        ]
        return " ".join(p for p in parts if p)

    def new_column_note(self, name: str) -> str:
        return f"{name!r} is not a grade item of the export: map it to one in Moodle's import"


class MoodleWorksheet(Gradebook):
    """An assignment's grading worksheet: the chapter's points go in ``Grade``."""

    lms = "Moodle"
    id_columns = (IDENTIFIER,)
    no_match_hint = (
        "no participant of the worksheet is a student in OUT: were this chapter's "
        "notebooks collected from this assignment's submissions download?"
    )

    def __init__(self, chapter: str):
        self.chapter = chapter

    def student_id(self, table: Table, row: list[str], id_index: int) -> str:
        """``12345`` for ``Participant 12345`` (the word is in the site's language); the
        cell as it is in another column (``--id-column 'Email address'``, say)."""
        if table.header[id_index] != IDENTIFIER:
            return row[id_index].strip()
        m = re.search(r"(\d+)\s*$", row[id_index])
        return m.group(1) if m else ""

    def participant(self, table: Table, row: list[str]) -> str:
        """The row's participant id (its ``Identifier``), which the feedback zip's folders
        carry whatever column matched the students."""
        return self.student_id(table, row, table.header.index(IDENTIFIER))

    def name(self, table: Table, row: list[str]) -> str:
        i = table.index(FULL_NAME)
        return row[i].strip() if i is not None else ""

    def kept(self, table: Table, id_index: int) -> set[int]:
        return set(range(len(table.header)))  # Moodle reads the worksheet's own columns

    def worth(self, table: Table, index: int) -> float | None:
        i = table.index(MAXIMUM)
        values = {number(row[i]) for row in table.rows} - {None} if i is not None else set()
        return values.pop() if len(values) == 1 else None

    def chapter_columns(
        self, table: Table, chapters: list[str], named: dict[str, str], report: Report
    ) -> list[Column]:
        if named:
            raise CourseError(
                "--column does not apply to a grading worksheet: grades go in 'Grade'"
            )
        return [Column(self.chapter, table.header.index(GRADE), GRADE, "the worksheet's grade")]


def is_worksheet(table: Table) -> bool:
    return IDENTIFIER in table.header and GRADE in table.header


def import_note(id_column: str) -> str:
    field = IMPORT_FIELDS.get(id_column, "the user field it holds")
    return (
        f"in Moodle: Grades > Import > CSV file; Identify user by: map from {id_column!r} to "
        f"{field!r}; map each chapter's column to its grade item"
    )


def folder_name(full_name: str, participant: str) -> str:
    """The folder Moodle's submissions download gives a student, and its feedback zip reads
    the participant id from: underscores in the name become spaces, characters a file name
    cannot hold are dropped."""
    name = re.sub(r'[\x00-\x1f/\\:*?"<>|]', "", full_name.replace("_", " ")).strip()
    return f"{name or 'Participant'}_{participant}_assignsubmission_file_"


def feedback_zip(
    students: list[tuple[str, str, str]], chapter: str, page_of, report: Report
) -> bytes | None:
    """A zip of each (student id, participant id, full name)'s feedback page
    ``page_of(student)``, in its participant's folder; a student without a page is
    reported. None when no page was found."""
    buffer, pages = BytesIO(), 0
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for student, participant, full_name in students:
            page: Path = page_of(student)
            if not page.is_file():
                report.problems.append(f"{full_name} ({student}): no feedback page {page}")
                continue
            archive.write(page, f"{folder_name(full_name, participant)}/{chapter}.html")
            pages += 1
    return buffer.getvalue() if pages else None
