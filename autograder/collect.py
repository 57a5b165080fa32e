"""``collect``: import the submissions of one chapter as a learning-management system
exports them into the submitted layout that ``grade`` reads::

    INBOX (a folder, searched recursively, or a .zip)  ->  SUBMISSIONS/<student>/<chapter>/<chapter>.ipynb

INBOX is a folder or a zip file; every ``.zip`` found in the folder (or inside a zip) is
opened and searched too. Every ``.ipynb`` file is a submission; the student id is found in
its name by the first rule that matches:

1. ``--pattern REGEX``, when given, replaces rules 2 and 3: the regular expression, with a
   named group ``student``, is searched (``re.search``) in the file's path relative to
   INBOX with ``/`` between folders (inside a zip: the zip's path, ``/``, then the path in
   the zip), e.g. ``--pattern '(?P<student>[^/]+)/[^/]+\\.ipynb$'`` for one folder per
   student.
2. An LMS's export name, tried on the file name, then on each folder above it, innermost
   first (Moodle may put each student's files in a folder of that name):

   - Moodle: ``Full Name_12345_assignsubmission_file_<name>.ipynb``: the id is ``12345``
     (Moodle's participant id);
   - Blackboard: ``<Assignment>_<username>_attempt_<YYYY-MM-DD-HH-MM-SS>_<name>.ipynb``:
     the id is ``<username>``;
   - Canvas: ``lastfirst_12345_67890_<name>.ipynb`` or ``lastfirst_LATE_12345_67890_...``
     (``lastfirst`` starts with a letter): the id is ``12345`` (Canvas's user id;
     ``67890`` grows with each upload).
3. A plain name, on the file name only: ``<studentid>.ipynb`` or
   ``<studentid>_<anything>.ipynb``, where the id is letters, digits, ``.``, ``-`` and
   ``@``. A name that starts with a chapter's number and an underscore (``04_...``) is the
   notebook's own name, not an id: such a file is reported as not placed.

A student id must be letters, digits, ``.``, ``_``, ``-`` or ``@`` and not start with a
dot (it becomes a folder name). Two notebooks for one student: the newer is kept, by the
LMS's order when both names carry one (Canvas's upload number, Blackboard's attempt time),
else by the file's modification time; the other is reported.

Nothing is dropped silently: every file that is not placed (not a notebook, no student id
in its name, an older duplicate, a zip that cannot be read, a submission that would
overwrite a different one already in SUBMISSIONS, which needs ``force``) is reported. An
``.ipynb`` that is not a valid notebook is placed all the same, with a warning: ``grade``
then gives it zero with the reason.
"""

import io
import json
import os
import re
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from autograder.chapters import ALL_CHAPTERS, CourseError
from autograder.files import write_atomically

MOODLE = re.compile(r"_(?P<student>\d+)_assignsubmission_[a-z]+")
CANVAS = re.compile(r"^[A-Za-z][A-Za-z0-9-]*_(?:LATE_)?(?P<student>\d+)_(?P<order>\d+)_.")
BLACKBOARD = re.compile(r"_(?P<student>[^_/]+)_attempt_(?P<order>\d{4}(?:-\d{2}){5})(?:_|$)")
LMS_RULES = (("Moodle", MOODLE), ("Blackboard", BLACKBOARD), ("Canvas", CANVAS))
PLAIN = re.compile(r"^(?P<student>[A-Za-z0-9@][A-Za-z0-9.@-]*)(?:_.*)?$")
CHAPTER_NAME = re.compile(r"^\d{2}_")
STUDENT_ID = re.compile(r"^[A-Za-z0-9@_-][A-Za-z0-9.@_-]*$")

# Files an operating system or Jupyter leaves behind: reported in one line, not one each.
_JUNK = re.compile(r"(^|/)(__MACOSX/|\.DS_Store$|\._|Thumbs\.db$|desktop\.ini$)")
_CHECKPOINT = re.compile(r"(^|/)\.ipynb_checkpoints/")


@dataclass
class Found:
    """A notebook found in the inbox."""

    where: str  # its path relative to INBOX, "/" between folders, zips included
    data: bytes
    mtime: float
    student: str | None = None
    order: str = ""  # the LMS's order in the name (Canvas upload id, Blackboard time)
    rule: str = ""


@dataclass
class CollectReport:
    placed: list[tuple[str, str]] = field(default_factory=list)  # (student, where)
    unchanged: list[tuple[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def student_of(where: str, pattern: re.Pattern | None = None) -> tuple[str | None, str, str]:
    """(student id or None, the LMS's order or "", the rule's name) for a path in INBOX."""
    if pattern is not None:
        m = pattern.search(where)
        return (m.group("student") if m else None), "", "--pattern"
    parts = where.split("/")
    name = parts[-1]
    stem = name[: -len(".ipynb")] if name.lower().endswith(".ipynb") else name
    for part in [name, *reversed(parts[:-1])]:
        for rule, regex in LMS_RULES:
            m = regex.search(part)
            if m:
                order = m.groupdict().get("order") or ""
                if rule == "Canvas":
                    order = order.zfill(20)
                return m.group("student"), order, rule
    m = PLAIN.match(stem)
    if m and not CHAPTER_NAME.match(stem):
        return m.group("student"), "", "plain"
    return None, "", ""


def _walk(inbox: Path, report: CollectReport):
    """Every file in ``inbox`` (a folder or a zip), zips opened: (where, data, mtime)."""
    if inbox.is_file():
        yield from _walk_zip(inbox.name, inbox.read_bytes(), report)
        return
    for path in sorted(inbox.rglob("*")):
        if not path.is_file():
            continue
        where = path.relative_to(inbox).as_posix()
        if path.suffix.lower() == ".zip":
            try:
                data = path.read_bytes()
            except OSError as error:
                report.problems.append(f"{where}: unreadable ({error}), nothing taken from it")
                continue
            yield from _walk_zip(where, data, report)
        else:
            yield where, path, path.stat().st_mtime


def _walk_zip(where: str, data: bytes, report: CollectReport):
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = [m for m in archive.infolist() if not m.is_dir()]
    except (zipfile.BadZipFile, OSError, ValueError) as error:
        report.problems.append(f"{where}: not a readable zip ({error}), nothing taken from it")
        return
    for member in sorted(members, key=lambda m: m.filename):
        inner = f"{where}/{member.filename}"
        try:
            content = archive.read(member)
        except (zipfile.BadZipFile, OSError, ValueError, RuntimeError) as error:
            report.problems.append(f"{inner}: cannot be read from the zip ({error}), skipped")
            continue
        mtime = time.mktime((*member.date_time, 0, 0, -1))
        if member.filename.lower().endswith(".zip"):
            yield from _walk_zip(inner, content, report)
        else:
            yield inner, content, mtime


def _valid_notebook(data: bytes) -> bool:
    try:
        nb = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(nb, dict) and isinstance(nb.get("cells"), list)


def collect(
    inbox: Path,
    chapter: str,
    submissions: Path,
    pattern: str | None = None,
    force: bool = False,
) -> CollectReport:
    """Place every notebook of ``inbox`` as ``submissions/<student>/<chapter>/<chapter>.ipynb``
    (rules in the module's docstring); what was placed and every problem, in the report."""
    if chapter not in ALL_CHAPTERS:
        raise CourseError(f"unknown chapter {chapter!r}; chapters: {', '.join(ALL_CHAPTERS)}")
    regex = _student_pattern(pattern)
    inbox, submissions = Path(inbox).resolve(), Path(submissions).resolve()
    if not inbox.exists():
        raise CourseError(f"inbox {inbox} does not exist")
    if inbox.is_relative_to(submissions) or submissions.is_relative_to(inbox):
        raise CourseError(f"the inbox {inbox} and --out {submissions} must not contain each other")
    report = CollectReport()
    by_student = _notebooks_by_student(inbox, regex, report)
    for student, candidates in sorted(by_student.items()):
        target = submissions / student / chapter / f"{chapter}.ipynb"
        _place_newest(student, candidates, target, force, report)
    return report


def _student_pattern(pattern: str | None) -> re.Pattern | None:
    """``--pattern`` compiled, or None; a clear error when it cannot find a student id."""
    if pattern is None:
        return None
    try:
        regex = re.compile(pattern)
    except re.error as error:
        raise CourseError(f"--pattern {pattern!r} is not a regular expression: {error}") from None
    if "student" not in regex.groupindex:
        raise CourseError(f"--pattern {pattern!r} has no named group (?P<student>...)")
    return regex


def _notebooks_by_student(
    inbox: Path, regex: re.Pattern | None, report: CollectReport
) -> dict[str, list[Found]]:
    """Every notebook of ``inbox`` whose name gives a student id, by student; every other
    file, in ``report.problems``."""
    junk: list[str] = []
    by_student: dict[str, list[Found]] = {}
    for where, source, mtime in _walk(inbox, report):
        if _JUNK.search(where):
            junk.append(where)
            continue
        if not where.lower().endswith(".ipynb"):
            report.problems.append(f"{where}: not a notebook (.ipynb), skipped")
            continue
        if _CHECKPOINT.search(where):
            report.problems.append(f"{where}: a Jupyter checkpoint copy, skipped")
            continue
        student, order, rule = student_of(where, regex)
        if student is None:
            how = f"--pattern {regex.pattern!r} does not match" if regex else "no student id found"
            report.problems.append(f"{where}: {how} in its name, not placed")
            continue
        if not STUDENT_ID.match(student) or student in (".", ".."):
            report.problems.append(
                f"{where}: {student!r} cannot be a student id (letters, digits, . _ - @), "
                "not placed"
            )
            continue
        data = source if isinstance(source, bytes) else source.read_bytes()
        found = Found(where, data, mtime, student, order, rule)
        by_student.setdefault(student, []).append(found)
    if junk:
        report.problems.append(
            f"skipped {len(junk)} system file{'s' if len(junk) != 1 else ''} "
            f"(__MACOSX, .DS_Store, ._*, ...): {', '.join(junk[:3])}"
            + (", ..." if len(junk) > 3 else "")
        )
    return by_student


def _place_newest(
    student: str, candidates: list[Found], target: Path, force: bool, report: CollectReport
) -> None:
    """Write the newest of a student's notebooks to ``target``, unless a different one is
    there and ``force`` is off; the older ones are reported."""
    if all(c.order for c in candidates):
        candidates.sort(key=lambda c: (c.order, c.mtime, c.where))
    else:
        candidates.sort(key=lambda c: (c.mtime, c.where))
    keep = candidates[-1]
    for older in candidates[:-1]:
        report.problems.append(
            f"{older.where}: {student} has a newer notebook ({keep.where}), not placed"
        )
    if target.is_file():
        if target.read_bytes() == keep.data:
            report.unchanged.append((student, keep.where))
            return
        if not force:
            report.problems.append(
                f"{keep.where}: {target} exists and differs; not replaced (--force replaces it)"
            )
            return
    if not _valid_notebook(keep.data):
        report.problems.append(
            f"{keep.where}: not a valid notebook; placed for {student} all the same "
            "(grade gives it zero with the reason)"
        )
    write_atomically(target, keep.data)
    os.utime(target, (keep.mtime, keep.mtime))
    report.placed.append((student, keep.where))
