"""The gradebook: nbgrader's database of students, submissions and scores.

By default it is a SQLite file, ``OUT/gradebook.db``. ``grade --db URL`` takes another
SQLAlchemy URL instead; the course supports PostgreSQL (``postgresql://user:password@host/db``
or, on a Unix socket, ``postgresql://user@/db?host=/run/postgresql``), which parallel
workers on one or several machines can all write to. A URL given without a driver uses
psycopg 3 (``postgresql+psycopg://``).

The gradebook holds the hidden tests: it is never visible to a grading kernel (the SQLite
file's folder is hidden by the sandbox, which also has no network; a PostgreSQL socket in
``/run`` or ``/tmp`` is out of the sandbox's sight too).

Before each run the gradebook is backed up to ``OUT/backups/``. A SQLite gradebook is
copied with SQLite's own backup; any other is copied, table by table, into a new SQLite
file: a complete nbgrader gradebook that ``--db sqlite:///PATH`` (or nbgrader itself)
can open.
"""

from datetime import UTC, datetime
from pathlib import Path

from autograder.chapters import CourseError
from autograder.nbgrader_settings import COURSE_ID
from autograder.outfolder import HandGrade

DEFAULT_FILE = "gradebook.db"
BACKUPS = "backups"
SUPPORTED = ("sqlite", "postgresql")


def resolve_url(db: str | None, out: Path) -> str:
    """The SQLAlchemy URL of the gradebook: ``db``, or the SQLite file in ``out``.

    A relative SQLite path is taken from the working directory (``sqlite:///grades.db``);
    ``postgres://`` and ``postgresql://`` get the psycopg driver.
    """
    if db is None:
        return f"sqlite:///{(Path(out) / DEFAULT_FILE).resolve()}"
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(db)
    except ArgumentError:
        raise CourseError(
            f"--db {db!r} is not a database URL; expected e.g. "
            "postgresql://USER:PASSWORD@HOST/DATABASE or sqlite:///PATH"
        ) from None
    backend = url.get_backend_name()
    if backend == "postgres":  # Heroku's and others' spelling
        url = url.set(drivername="postgresql")
        backend = "postgresql"
    if backend not in SUPPORTED:
        raise CourseError(
            f"--db: the gradebook can be PostgreSQL or SQLite, not {backend!r} ({redact(db)})"
        )
    if backend == "postgresql" and url.drivername == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
    if backend == "sqlite":
        if not url.database or url.database == ":memory:":
            raise CourseError("--db: an SQLite gradebook needs a file: sqlite:///PATH")
        url = url.set(database=str(Path(url.database).resolve()))
    return url.render_as_string(hide_password=False)


def redact(url: str) -> str:
    """``url`` with its password hidden, for messages and the ledger."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<not a URL>"


def of_graded(recorded: str | None, db: str | None, out: Path) -> str:
    """The URL of the gradebook an OUT folder was graded into, whose ``graded.json`` recorded
    ``recorded`` (password hidden): ``db`` when given, which must be that gradebook; else the
    recorded URL when it holds no hidden password; else a ``CourseError`` asking for ``--db``."""
    if db is not None:
        url = resolve_url(db, out)
        if recorded is not None and redact(url) != recorded:
            raise CourseError(f"{out} was graded into the gradebook {recorded}, not {redact(url)}")
        return url
    if recorded is None:
        return resolve_url(None, out)
    from sqlalchemy.engine import make_url

    if make_url(recorded).password is not None:  # hidden as *** in graded.json
        raise CourseError(
            f"{out} was graded into {recorded}, whose password is not kept in {out}: "
            "give the gradebook's whole URL with --db"
        )
    return resolve_url(recorded, out)


def sqlite_file(url: str) -> Path | None:
    """The file of an SQLite gradebook, else None."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    return Path(parsed.database) if parsed.get_backend_name() == "sqlite" else None


def socket_folder(url: str) -> Path | None:
    """The Unix-socket folder of a PostgreSQL URL (``?host=/path``), else None."""
    from sqlalchemy.engine import make_url

    host = make_url(url).query.get("host")
    if isinstance(host, tuple):
        host = host[0] if host else None
    return Path(host) if host and host.startswith("/") else None


def _engine(url: str):
    from sqlalchemy import create_engine

    return create_engine(url, future=True)


def holds_grades(url: str) -> bool:
    """Whether the gradebook exists and has nbgrader's tables (a run has graded into it).

    Raises a ``CourseError`` when a server gradebook cannot be reached."""
    path = sqlite_file(url)
    if path is not None:
        if not path.is_file():
            return False
    from sqlalchemy import inspect
    from sqlalchemy.exc import SQLAlchemyError

    engine = _engine(url)
    try:
        return "submitted_assignment" in inspect(engine).get_table_names()
    except SQLAlchemyError as error:
        raise CourseError(
            f"cannot open the gradebook {redact(url)}: {str(error).splitlines()[0]}"
        ) from None
    finally:
        engine.dispose()


def backup(url: str, out: Path) -> Path:
    """Copy the gradebook to ``out/backups/gradebook-<UTC time>.db`` (SQLite); its path."""
    folder = Path(out) / BACKUPS
    folder.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    target = folder / f"gradebook-{stamp}.db"
    n = 1
    while target.exists():  # two runs within a second
        target = folder / f"gradebook-{stamp}-{n}.db"
        n += 1
    path = sqlite_file(url)
    if path is not None:
        _sqlite_backup(path, target)
    else:
        _copy_tables(url, f"sqlite:///{target}")
    return target


def _sqlite_backup(source_path: Path, target: Path) -> None:
    """SQLite's own backup: a consistent copy even while the file is open elsewhere."""
    import sqlite3

    source = sqlite3.connect(source_path)
    try:
        copy = sqlite3.connect(target)
        with copy:
            source.backup(copy)
        copy.close()
    finally:
        source.close()


def _copy_tables(source_url: str, target_url: str) -> None:
    """Copy every table of nbgrader's gradebook (and its schema version) to another
    database, parents before children, in one read transaction."""
    from nbgrader.api import Base
    from sqlalchemy import MetaData, Table, select

    source, target = _engine(source_url), _engine(target_url)
    try:
        Base.metadata.create_all(target)
        with source.connect() as read, target.begin() as write:
            for table in Base.metadata.sorted_tables:
                rows = [dict(r) for r in read.execute(select(table)).mappings()]
                if rows:
                    write.execute(table.insert(), rows)
            version = Table("alembic_version", MetaData(), autoload_with=read)
            version.create(write, checkfirst=True)
            rows = [dict(r) for r in read.execute(select(version)).mappings()]
            if rows:
                write.execute(version.insert(), rows)
    finally:
        source.dispose()
        target.dispose()


def create_students(url: str, students: list[str]) -> None:
    """Add the students (those already there stay as they are), in one transaction
    (nbgrader's ``update_or_create_student`` commits each one: a class of 100, 100 commits)."""
    from nbgrader.api import Gradebook, Student

    with Gradebook(url, COURSE_ID) as gb:
        there = {student_id for (student_id,) in gb.db.query(Student.id)}
        new = [Student(id=s) for s in dict.fromkeys(students) if s not in there]
        if new:
            gb.db.add_all(new)
            gb.db.commit()


def scores(url: str, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], dict[str, float]]:
    """For each (student, chapter), the points per graded cell (None scores are left out;
    a submission the gradebook does not hold gets ``{}``): one query for all (nbgrader's
    objects, one submission at a time, took about 20 queries each: seconds a run for a
    class, which grading reads after every run)."""
    from nbgrader.api import (
        Assignment,
        BaseCell,
        Grade,
        Gradebook,
        Notebook,
        SubmittedAssignment,
        SubmittedNotebook,
    )

    out: dict[tuple[str, str], dict[str, float]] = {pair: {} for pair in pairs}
    with Gradebook(url, COURSE_ID) as gb:
        # the joins of nbgrader's find_submission_notebook, and each grade's cell
        query = (
            gb.db.query(
                SubmittedAssignment.student_id, Assignment.name, Notebook.name, BaseCell.name
            )
            .add_columns(Grade.score)
            .select_from(Grade)
            .join(SubmittedNotebook, SubmittedNotebook.id == Grade.notebook_id)
            .join(Notebook, Notebook.id == SubmittedNotebook.notebook_id)
            .join(SubmittedAssignment, SubmittedAssignment.id == SubmittedNotebook.assignment_id)
            .join(Assignment, Assignment.id == SubmittedAssignment.assignment_id)
            .join(BaseCell, BaseCell.id == Grade.cell_id)
        )
        for student, chapter, notebook, cell, score in query:
            # a chapter is an assignment of one notebook of its name
            if notebook == chapter and (student, chapter) in out and score is not None:
                out[(student, chapter)][cell] = float(score)
    return out


def graded_by_hand(url: str, pairs: list[tuple[str, str]]) -> list[HandGrade]:
    """Every cell of the submissions ``pairs`` (student, chapter) that an instructor scored
    (a manual score) or commented by hand, in the notebook's order; one connection for all."""
    from nbgrader.api import Gradebook, MissingEntry

    found = []
    with Gradebook(url, COURSE_ID) as gb:
        touched = _touched_by_hand(gb)
        for student, chapter in pairs:
            if (student, chapter) not in touched:
                continue
            try:
                notebook = gb.find_submission_notebook(chapter, chapter, student)
            except MissingEntry:
                continue
            grades = {g.name: g for g in notebook.grades}
            comments = {
                c.name: c.manual_comment.strip()
                for c in notebook.comments
                if c.manual_comment and c.manual_comment.strip()
            }
            for name in _in_notebook_order(notebook, grades, comments):
                grade = grades.get(name)
                score = _number(grade.manual_score) if grade is not None else None
                if score is None and name not in comments:
                    continue
                max_points = _number(grade.max_score) if grade is not None else None
                autograded = _number(grade.auto_score) if grade is not None else None
                comment = comments.get(name, "")
                found.append(
                    HandGrade(student, chapter, name, score, max_points, autograded, comment)
                )
    return found


def _number(x) -> float | None:
    return None if x is None else float(x)


def _touched_by_hand(gb) -> set[tuple[str, str]]:
    """The (student, chapter) of every submission with a score or a comment given by hand
    (a comment perhaps only blank), in two queries: :func:`graded_by_hand` reads only those
    through nbgrader's objects, about 20 queries each."""
    from nbgrader.api import Assignment, Comment, Grade, SubmittedAssignment, SubmittedNotebook

    touched = set()
    for entry, by_hand in (
        (Grade, Grade.manual_score.isnot(None)),
        (Comment, Comment.manual_comment.isnot(None) & (Comment.manual_comment != "")),
    ):
        query = (
            gb.db.query(SubmittedAssignment.student_id, Assignment.name)
            .select_from(entry)
            .join(SubmittedNotebook, SubmittedNotebook.id == entry.notebook_id)
            .join(SubmittedAssignment, SubmittedAssignment.id == SubmittedNotebook.assignment_id)
            .join(Assignment, Assignment.id == SubmittedAssignment.assignment_id)
            .filter(by_hand)
        )
        touched.update((student, chapter) for student, chapter in query)
    return touched


def _in_notebook_order(notebook, grades: dict, comments: dict) -> list[str]:
    """The names of ``grades`` and ``comments``, in the order of the notebook's cells."""
    order = {}
    for cell in notebook.notebook.source_cells:
        order.setdefault(cell.name, len(order))
    names = set(grades) | set(comments)
    return sorted(names, key=lambda name: (order.get(name, len(order)), name))


def mark_for_review(url: str, cells: set[tuple[str, str, str]]) -> None:
    """Mark each graded cell (student, chapter, cell) as needing a manual grade, as
    nbgrader's formgrader shows it: the cells of flagged exercises, whose points wait for
    the instructor."""
    from nbgrader.api import Gradebook, MissingEntry

    if not cells:
        return
    with Gradebook(url, COURSE_ID) as gb:
        for student, chapter, cell in sorted(cells):
            try:
                grade = gb.find_grade(cell, chapter, chapter, student)
            except MissingEntry:
                continue
            if grade.manual_score is None and not grade.needs_manual_grade:
                grade.needs_manual_grade = True
        gb.db.commit()
