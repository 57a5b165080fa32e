"""``collect``: import the submissions of one chapter as a learning-management system
exports them into the submitted layout that ``grade`` reads::

    INBOX (a folder, searched recursively, or a .zip)  ->  SUBMISSIONS/<student>/<chapter>/<chapter>.ipynb

INBOX is a folder or a zip file; every ``.zip`` found in the folder (or inside a zip) is
opened and searched too. Every ``.ipynb`` file is a submission. Its student id is read from
its path relative to INBOX (``/`` between folders; inside a zip: the zip's path, ``/``,
then the path in the zip), and only from the part of it that the LMS wrote:

1. ``--pattern REGEX``, when given, replaces rules 2 and 3: the regular expression, with a
   named group ``student``, is searched (``re.search``) in the path, e.g.
   ``--pattern '(?P<student>[^/]+)/[^/]+\\.ipynb$'`` for one folder per student.
2. An LMS's export name, read from the start of a name, never from the middle:

   - Moodle: ``Full Name_12345_assignsubmission_file_<name>.ipynb``, or a folder
     ``Full Name_12345_assignsubmission_file_/`` (Moodle's *download in folders*): the id is
     ``12345`` (Moodle's participant id). ``Full Name`` holds no ``_`` (Moodle writes its
     underscores as spaces), so the id is the name's second field.
   - Canvas: ``lastfirst_12345_67890_<name>.ipynb`` or ``lastfirst_LATE_12345_67890_...``
     (``lastfirst`` starts with a letter and holds letters, digits and ``-``): the id is
     ``12345`` (Canvas's user id; ``67890`` grows with each upload). Read from a file's
     name (a notebook's or a zip's), never a folder's: Canvas makes no folders.
   - Blackboard: ``<Assignment>_<username>_attempt_<YYYY-MM-DD-HH-MM-SS>_<name>.ipynb``:
     the id is ``<username>``, the field before the *first* ``_attempt_<time>``. Read from a
     file's name, never a folder's.

   The names in the path are tried outermost first, and the first one that is an LMS's
   name gives the id: what lies inside it (``<name>`` above, the files in a Moodle folder,
   the members of a zip a student handed in) was chosen by the student and never gives or
   changes an id. A name that two LMSs read as two different ids (a Canvas name whose
   ``<name>`` holds ``_jdoe7_attempt_2024-...``, or a Blackboard assignment called
   ``hw_12_34``) is ambiguous: reported, not placed.
3. A plain name, on the file name only, when no name in the path is an LMS's:
   ``<studentid>.ipynb`` or ``<studentid>_<anything>.ipynb``, where the id is letters,
   digits, ``.``, ``-`` and ``@``. A name that starts with a chapter's number and an
   underscore (``04_...``) is the notebook's own name, not an id: such a file is reported
   as not placed.

A student id must be letters, digits, ``.``, ``_``, ``-`` or ``@`` and not start with a
dot (it becomes a folder name).

Two or more notebooks for one student id:

- from one LMS submission (the same LMS, and the same name before the id: Canvas's
  ``lastfirst``, Moodle's full name, Blackboard's assignment), e.g. a resubmission: the
  newer is kept, by the LMS's order when both names carry one (Canvas's upload number,
  Blackboard's attempt time), else by the file's modification time; the others are
  reported as older;
- otherwise (two Canvas names with one user id, a plain name or ``--pattern`` beside
  anything else): a *conflict*. None of them is placed (a notebook already in SUBMISSIONS
  for that student stays as it is), and the report names every file involved, in
  ``problems`` and in ``conflicts``: check which notebook is the student's and place it
  by hand, or collect again without the wrong file.

Nothing is dropped silently: every file that is not placed (not a notebook, no student id
in its name, an ambiguous name, an older duplicate, a conflict, a zip that cannot be read, a
submission that would overwrite a different one already in SUBMISSIONS, which needs
``force``) is reported. An ``.ipynb`` that is not a valid notebook is placed all the same,
with a warning: ``grade`` then gives it zero with the reason.
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


@dataclass(frozen=True)
class LmsRule:
    """How one LMS names what it exports: a regular expression anchored at the start of a
    name, with groups ``entry`` (the LMS's name before the id), ``student`` and, where the
    LMS orders uploads, ``order``."""

    lms: str
    regex: re.Pattern
    folders: bool  # also a folder's name (else only a file's: a notebook's or a zip's)
    numeric_order: bool = False  # order compared as a number (Canvas's upload id)


MOODLE = LmsRule(
    "Moodle",
    re.compile(r"^(?P<entry>[^_/]+)_(?P<student>\d+)_assignsubmission_[a-z]+(?![A-Za-z])"),
    folders=True,
)
CANVAS = LmsRule(
    "Canvas",
    re.compile(r"^(?P<entry>[A-Za-z][A-Za-z0-9-]*)_(?:LATE_)?(?P<student>\d+)_(?P<order>\d+)_."),
    folders=False,
    numeric_order=True,
)
BLACKBOARD = LmsRule(
    "Blackboard",
    re.compile(
        r"^(?P<entry>.+?)_(?P<student>[^_/]+)_attempt_(?P<order>\d{4}(?:-\d{2}){5})(?![^_.])"
    ),
    folders=False,
)
LMS_RULES = (MOODLE, CANVAS, BLACKBOARD)  # anchored where the LMS's name starts
PLAIN = re.compile(r"^(?P<student>[A-Za-z0-9@][A-Za-z0-9.@-]*)(?:_.*)?$")
CHAPTER_NAME = re.compile(r"^\d{2}_")
STUDENT_ID = re.compile(r"^[A-Za-z0-9@_-][A-Za-z0-9.@_-]*$")

# Files an operating system or Jupyter leaves behind: reported in one line, not one each.
_JUNK = re.compile(r"(^|/)(__MACOSX/|\.DS_Store$|\._|Thumbs\.db$|desktop\.ini$)")
_CHECKPOINT = re.compile(r"(^|/)\.ipynb_checkpoints/")


@dataclass(frozen=True)
class Claim:
    """Whose notebook a path says it is. ``student`` is None when it says nothing, and
    ``why`` then says why. Two claims with one ``submission`` come from one LMS submission
    (its resubmissions); a plain name or ``--pattern`` is a submission of its own."""

    student: str | None
    rule: str = ""  # "Moodle", "Canvas", "Blackboard", "plain" or "--pattern"
    entry: str = ""  # the LMS's name before the id; the path for a plain name or --pattern
    order: str = ""  # the LMS's order of uploads (Canvas upload id, Blackboard time)
    why: str = ""

    @property
    def submission(self) -> tuple[str, str, str | None]:
        return self.rule, self.entry, self.student

    @property
    def source(self) -> str:
        """Where the id was read, for a report: ``Canvas 'doejohn'``."""
        if self.rule in ("plain", "--pattern"):
            return "a plain name" if self.rule == "plain" else "--pattern"
        return f"{self.rule} {self.entry!r}"


@dataclass
class Found:
    """A notebook found in the inbox, with whose it says it is."""

    where: str  # its path relative to INBOX, "/" between folders, zips included
    data: bytes
    mtime: float
    claim: Claim


@dataclass
class CollectReport:
    placed: list[tuple[str, str]] = field(default_factory=list)  # (student, where)
    unchanged: list[tuple[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    conflicts: dict[str, list[str]] = field(default_factory=dict)  # student: the wheres


def claim_of(where: str, pattern: re.Pattern | None = None) -> Claim:
    """Whose notebook ``where`` (a path in INBOX, ``/`` between names) is, by the rules of
    the module's docstring."""
    if pattern is not None:
        m = pattern.search(where)
        if m is None:
            return Claim(None, why=f"--pattern {pattern.pattern!r} does not match in its name")
        return Claim(m.group("student"), "--pattern", where)
    lms = _lms_claim(where)
    if lms is not None:
        return lms
    stem = re.sub(r"\.ipynb$", "", where.rsplit("/", 1)[-1], flags=re.IGNORECASE)
    m = PLAIN.match(stem)
    if m and not CHAPTER_NAME.match(stem):
        return Claim(m.group("student"), "plain", where)
    return Claim(None, why="no student id found in its name")


def _names(where: str):
    """Each name in ``where``, outermost first, with whether it names a file (the notebook
    or a zip) rather than a folder."""
    parts = where.split("/")
    for i, part in enumerate(parts):
        yield part, i == len(parts) - 1 or part.lower().endswith(".zip")


def _lms_claim(where: str) -> Claim | None:
    """The claim of the outermost name in ``where`` that is an LMS's, or None when none is;
    a claim without a student when two LMSs read that name as two ids."""
    for name, is_file in _names(where):
        readings = [
            claim
            for rule in LMS_RULES
            if is_file or rule.folders
            if (claim := _read(rule, name)) is not None
        ]
        if len({c.student for c in readings}) > 1:
            ways = " and as ".join(f"{c.rule} id {c.student!r}" for c in readings)
            what = "its name" if name == where.rsplit("/", 1)[-1] else f"the name {name!r}"
            return Claim(None, why=f"{what} reads as {ways}: ambiguous (--pattern says which)")
        if readings:
            return readings[0]
    return None


def _read(rule: LmsRule, name: str) -> Claim | None:
    """``rule``'s claim on one name, or None when the name is not that LMS's."""
    m = rule.regex.match(name)
    if m is None:
        return None
    order = m.groupdict().get("order") or ""
    if rule.numeric_order:
        order = order.zfill(20)
    return Claim(m.group("student"), rule.lms, m.group("entry"), order)


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
        if len({c.claim.submission for c in candidates}) > 1:
            _report_conflict(student, candidates, report)
            continue
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
        claim = claim_of(where, regex)
        if claim.student is None:
            report.problems.append(f"{where}: {claim.why}, not placed")
            continue
        student = claim.student
        if not STUDENT_ID.match(student) or student in (".", ".."):
            report.problems.append(
                f"{where}: {student!r} cannot be a student id (letters, digits, . _ - @), "
                "not placed"
            )
            continue
        data = source if isinstance(source, bytes) else source.read_bytes()
        by_student.setdefault(student, []).append(Found(where, data, mtime, claim))
    if junk:
        report.problems.append(
            f"skipped {len(junk)} system file{'s' if len(junk) != 1 else ''} "
            f"(__MACOSX, .DS_Store, ._*, ...): {', '.join(junk[:3])}"
            + (", ..." if len(junk) > 3 else "")
        )
    return by_student


def _report_conflict(student: str, candidates: list[Found], report: CollectReport) -> None:
    """Notebooks of different submissions that claim one student id: none is placed, and
    every one is named, with where its id was read."""
    candidates = sorted(candidates, key=lambda c: c.where)
    report.conflicts[student] = [c.where for c in candidates]
    files = "; ".join(f"{c.where} (id read from {c.claim.source})" for c in candidates)
    report.problems.append(
        f"conflict: {len(candidates)} notebooks from different submissions claim student id "
        f"{student}, none of them placed: {files}. Check which is {student}'s and place it "
        "by hand, or collect again without the others"
    )


def _place_newest(
    student: str, candidates: list[Found], target: Path, force: bool, report: CollectReport
) -> None:
    """Write the newest of a student's notebooks (all from one submission) to ``target``,
    unless a different one is there and ``force`` is off; the older ones are reported."""
    if all(c.claim.order for c in candidates):
        candidates.sort(key=lambda c: (c.claim.order, c.mtime, c.where))
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
