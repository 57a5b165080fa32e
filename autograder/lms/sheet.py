"""Filling a gradebook file: which roster row is which graded student, which column is which
chapter, and what goes in each cell. Students are matched on ids only, never on names.
Everything that does not match is reported, nothing is dropped silently: a roster row
without a result keeps its cells as they were, a graded student the roster lacks is not
written, a chapter without a column is not written, and each gets a line in the report."""

import re
from dataclasses import dataclass, field
from pathlib import Path

from autograder.chapters import CourseError
from autograder.lms.table import Table


@dataclass
class Grades:
    """What OUT says: ``points[student][chapter]`` for each chapter a student has a result
    in, the chapters in course order, and ``worth[chapter]``, the points a chapter is worth
    (absent when OUT does not say)."""

    points: dict[str, dict[str, float]]
    chapters: list[str]
    worth: dict[str, float] = field(default_factory=dict)


@dataclass
class Column:
    """Where a chapter's points go: an existing column (``index``) or a new one (None)."""

    chapter: str
    index: int | None
    name: str
    how: str  # how it was chosen, for the report


@dataclass
class Report:
    lms: str
    id_column: str = ""
    columns: list[Column] = field(default_factory=list)
    written: list[Path] = field(default_factory=list)
    filled: int = 0  # cells written with a grade
    matched: list[str] = field(default_factory=list)  # graded students found in the roster
    no_result: list[str] = field(default_factory=list)  # roster students without a result
    not_in_roster: list[str] = field(default_factory=list)  # graded students not in it
    no_column: list[str] = field(default_factory=list)  # chapters not written
    problems: list[str] = field(default_factory=list)  # every other warning
    notes: list[str] = field(default_factory=list)  # what to do next, not a warning


class Gradebook:
    """What one system's gradebook file looks like. Each system's module subclasses it."""

    lms = ""
    id_columns: tuple[str, ...] = ()  # where student ids may be, the likeliest first
    keep: tuple[str, ...] = ()  # columns written back besides the ids' and the chapters'
    quote_all = False  # quote every field (Blackboard's comma files)
    no_match_hint = ""  # said when no graded student is in the roster

    def title(self, column: str) -> str:
        """A grade column's name without the system's decorations (ids, point totals)."""
        return column.strip()

    def worth(self, table: Table, index: int) -> float | None:
        """The points the column is worth, when the file says."""
        return None

    def is_student(self, table: Table, row: list[str]) -> bool:
        return True

    def student_id(self, table: Table, row: list[str], id_index: int) -> str:
        return row[id_index].strip()

    def name(self, table: Table, row: list[str]) -> str:
        """A student's name as the roster spells it, for the report."""
        return ""

    def kept(self, table: Table, id_index: int) -> set[int]:
        return {i for i, name in enumerate(table.header) if name in self.keep} | {id_index}

    def new_cell(self, table: Table, row: list[str], worth: float | None) -> str:
        """A new column's cell in a row that is not a student's."""
        return ""

    def new_column_note(self, name: str) -> str:
        return f"{name!r} is a new column"

    def chapter_columns(
        self, table: Table, chapters: list[str], named: dict[str, str], report: Report
    ) -> list[Column]:
        """Each chapter's column: the one ``--column`` names, else the only one whose name
        holds the chapter's id (``04 Dot-product attention`` holds
        ``04_dot_product_attention`` once lowercased, its punctuation and spaces as ``_``),
        else the only one whose name starts with its number (``4``, ``04``, ``Chapter 4``).
        A chapter with none, or two alike, is in ``report.no_column``."""
        columns = [self._named(table, ch, named[ch]) for ch in chapters if ch in named]
        taken = {c.index for c in columns}
        for ch in chapters:
            if ch in named:
                continue
            found = self._found(table, ch, taken)
            if len(found) == 1:
                columns.append(found[0])
                taken.add(found[0].index)
            elif found:
                names = " and ".join(repr(c.name) for c in found)
                report.no_column.append(
                    f"{ch}: columns {names} both look like it; not written (say which with "
                    f"--column {ch}='NAME')"
                )
            else:
                report.no_column.append(
                    f"{ch}: no column of the roster has its number or id in its name; not "
                    f"written (name one with --column {ch}='NAME')"
                )
        return sorted(columns, key=lambda c: chapters.index(c.chapter))

    def _named(self, table: Table, chapter: str, name: str) -> Column:
        """The column ``--column CHAPTER=NAME`` names: its whole name, else its title."""
        if name in table.header:
            return Column(chapter, table.header.index(name), name, "--column")
        alike = [i for i, h in enumerate(table.header) if self.title(h) == name]
        if len(alike) > 1:
            names = ", ".join(repr(table.header[i]) for i in alike)
            raise CourseError(f"--column {chapter}={name!r} could be any of {names}: name one")
        if alike:
            return Column(chapter, alike[0], table.header[alike[0]], "--column")
        return Column(chapter, None, name, "--column, a new column")

    def _found(self, table: Table, chapter: str, taken: set) -> list[Column]:
        by_id, by_number = [], []
        for i, header in enumerate(table.header):
            if i in taken or header in self.keep or header in self.id_columns:
                continue
            title = self.title(header)
            if f"_{chapter}_" in "_" + re.sub(r"[^0-9a-z]+", "_", title.lower()) + "_":
                by_id.append(Column(chapter, i, header, "its name holds the chapter's id"))
            elif _leading_number(title) == _number(chapter):
                by_number.append(Column(chapter, i, header, "its name starts with its number"))
        return by_id or by_number


def fill(
    table: Table,
    book: Gradebook,
    grades: Grades,
    chapters: list[str],
    named: dict[str, str],
    id_column: str | None,
    report: Report,
) -> tuple[list[str], list[list[str]], list[tuple[str, list[str]]]]:
    """The header and rows to write (the roster's id and name columns, then its chapter
    columns filled with the points in ``grades``), and each matched student with its row."""
    id_index = _id_column(table, book, grades, id_column, report)
    students = _students(table, book, id_index, report)
    report.columns = book.chapter_columns(table, chapters, named, report)
    _check_worth(table, book, grades, report)
    existing = {c.index: c for c in report.columns if c.index is not None}
    new = [c for c in report.columns if c.index is None]
    kept = sorted(book.kept(table, id_index) | set(existing))
    header = [table.header[i] for i in kept] + [c.name for c in new]
    rows, matched = [], []
    for r, row in enumerate(table.rows):
        if r not in students:  # a row of the system's own (Canvas's points possible)
            extra = [book.new_cell(table, row, grades.worth.get(c.chapter)) for c in new]
            rows.append([row[i] for i in kept] + extra)
            continue
        student, values = students[r], {c.chapter: "" for c in new}
        values |= {c.chapter: row[c.index] for c in existing.values()}
        result = grades.points.get(student)
        who = f"{book.name(table, row) or 'row ' + str(r + 2)} ({report.id_column} {student})"
        if result is None:
            report.no_result.append(f"{who}: no result in OUT; left as it was")
        else:
            matched.append((student, row))
            for c in report.columns:
                if c.chapter in result:
                    values[c.chapter] = f"{result[c.chapter]:g}"
                    report.filled += 1
                else:
                    report.problems.append(
                        f"{who}: no result for {c.chapter} in OUT; {c.name!r} left as it was"
                    )
        cells = [values[existing[i].chapter] if i in existing else row[i] for i in kept]
        rows.append(cells + [values[c.chapter] for c in new])
    _unmatched(grades, chapters, set(students.values()), matched, book, report)
    report.notes += [book.new_column_note(c.name) for c in new]
    return header, rows, matched


def _id_column(
    table: Table, book: Gradebook, grades: Grades, id_column: str | None, report: Report
) -> int:
    """The column of student ids: ``--id-column``, else the one of the system's that holds
    the most of OUT's students (the likeliest on a tie)."""
    if id_column is not None:
        if id_column not in table.header:
            raise CourseError(
                f"--id-column {id_column!r} is not a column of {table.path} "
                f"(its columns: {table.columns()})"
            )
        report.id_column = id_column
        return table.header.index(id_column)
    present = [name for name in book.id_columns if name in table.header]
    if not present:
        raise CourseError(
            f"{table.path} is not a {book.lms} file: it has none of the columns "
            f"{', '.join(map(repr, book.id_columns))} that say who each student is (its "
            f"columns: {table.columns()}); name the one with OUT's student ids in --id-column"
        )

    def hits(name: str) -> int:
        i = table.header.index(name)
        rows = [row for row in table.rows if book.is_student(table, row)]
        return len({book.student_id(table, row, i) for row in rows} & set(grades.points))

    report.id_column = max(present, key=hits)  # max keeps the first of equals
    return table.header.index(report.id_column)


def _students(table: Table, book: Gradebook, id_index: int, report: Report) -> dict[int, str]:
    """Row number -> student id, for the rows that are students'; a row without an id is
    reported; an id on two rows is an error (the roster cannot say who is who)."""
    students, rows_of = {}, {}
    for r, row in enumerate(table.rows):
        if not book.is_student(table, row):
            continue
        student = book.student_id(table, row, id_index)
        if not student:
            who = book.name(table, row) or f"row {r + 2}"
            report.no_result.append(f"{who}: no {report.id_column}; left as it was")
            continue
        students[r] = student
        rows_of.setdefault(student, []).append(r + 2)
    twice = {s: rows for s, rows in rows_of.items() if len(rows) > 1}
    if twice:
        listed = "; ".join(f"{s} on rows {', '.join(map(str, rows))}" for s, rows in twice.items())
        raise CourseError(f"{table.path}: the same {report.id_column} on two rows ({listed})")
    return students


def _check_worth(table: Table, book: Gradebook, grades: Grades, report: Report) -> None:
    for c in report.columns:
        worth = book.worth(table, c.index) if c.index is not None else None
        ours = grades.worth.get(c.chapter)
        if worth is not None and ours is not None and abs(worth - ours) > 1e-9:
            report.problems.append(
                f"{c.name!r} is worth {worth:g} points in {book.lms}, {c.chapter} {ours:g}: "
                f"{book.lms} will count the points out of {worth:g}"
            )


def _unmatched(
    grades: Grades,
    chapters: list[str],
    in_roster: set[str],
    matched: list[tuple[str, list[str]]],
    book: Gradebook,
    report: Report,
) -> None:
    for student in sorted(grades.points):
        results = [ch for ch in chapters if ch in grades.points[student]]
        if results and student not in in_roster:
            report.not_in_roster.append(
                f"graded student {student} ({', '.join(results)}) is not in the roster's "
                f"{report.id_column!r} column; not written"
            )
    report.matched = [student for student, _ in matched]
    if not matched and grades.points and book.no_match_hint:
        report.notes.append(book.no_match_hint)


def _leading_number(title: str) -> int | None:
    """4 for ``04 Dot-product``, ``4. Dot-product``, ``Chapter 4: ...``; else None."""
    m = re.match(r"\s*(?:chapter|chap|ch)?\.?\s*0*(\d+)(?!\d)(?!\.\d)", title, re.IGNORECASE)
    return int(m.group(1)) if m else None


def _number(chapter: str) -> int | None:
    return int(chapter[:2]) if chapter[:2].isdigit() else None


def number(text: str) -> float | None:
    """A cell's number (``19``, ``19.0``), or None for anything else."""
    try:
        return float(text.strip())
    except ValueError:
        return None
