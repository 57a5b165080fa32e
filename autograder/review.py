"""Flagged for review: the scan's verdict on a graded class, applied to its scores.

Each graded submission's solution cells, and the code cells its student added, are
scanned (``autograder/scan.py``). An exercise whose code uses the reference
implementations, calls the operator it asks the student to write, rebinds what the tests
use or writes files is *flagged*: the points of its test cells are withheld (status
``flagged for review: ...``) until the instructor accepts it with a line
``student,chapter,exercise`` in ``OUT/accepted.csv`` and runs ``grade`` again, or reviews it
in nbgrader's formgrader (``python -m autograder review OUT``): a test cell given a score
by hand there keeps that score. Every flag, accepted or not, is listed in
``OUT/flagged.csv``.
"""

import dataclasses
import hashlib
import json
from pathlib import Path

import nbformat

from attention_course import scan
from autograder.cells import tests_of_exercises
from autograder.chapters import solution_path
from autograder.files import file_hash, write_atomically
from autograder.outfolder import (
    ACCEPTED_CSV,
    BY_HAND,
    FLAGGED_CSV,
    GRADED,
    GradeRow,
    Out,
    read_accepted,
    write_flagged,
)
from autograder.scan import scan_notebook

FLAGGED = "flagged for review: "  # the status of a withheld test cell, before the flag
# Each graded submission's flags, by what they depend on (:meth:`_Scanner.flags`): every run
# settles the flags of every submission in OUT, and most of them have not changed since.
SCANNED = "scanned.json"


def withhold_flagged(
    root: Path,
    out: Out,
    rows: list[GradeRow],
    problems: list[str],
    scored: set[tuple[str, str, str]] = frozenset(),
) -> list[GradeRow]:
    """``rows`` with the points of flagged exercises that ``OUT/accepted.csv`` does not
    accept taken away, but for the test cells in ``scored`` (student, chapter, cell), which
    an instructor scored by hand after reading them; each flag still withholding points
    said in ``problems``; ``OUT/flagged.csv`` written."""
    accepted = read_accepted(out / ACCEPTED_CSV)
    graded = dict.fromkeys((r.student, r.chapter) for r in rows if r.status == GRADED)
    withheld: dict[tuple[str, str, str], str] = {}  # (student, chapter, test cell) -> why
    listed = []
    scanner = _Scanner(root, out)
    for student, chapter in graded:
        for flag in scanner.flags(student, chapter):
            cells = scanner.tests(chapter).get(flag.cell, [])
            waiting = [c for c in cells if (student, chapter, c) not in scored]
            if (student, chapter, flag.cell) in accepted:
                listed.append((student, chapter, flag, "yes", cells))
                continue
            listed.append((student, chapter, flag, "no" if waiting else BY_HAND, cells))
            for cell in waiting:
                withheld.setdefault((student, chapter, cell), f"{FLAGGED}{flag}")
            if waiting:
                problems.append(
                    f"{student} / {chapter}: flagged for review, points of {flag.cell} withheld "
                    f"({flag}); accept it with a line {student},{chapter},{flag.cell} in "
                    f"{out / ACCEPTED_CSV}, or score its test cells by hand "
                    f"(python -m autograder review {out.folder})"
                )
    write_flagged(out / FLAGGED_CSV, listed)
    scanner.save()
    return [
        r
        if (why := withheld.get((r.student, r.chapter, r.cell))) is None
        else dataclasses.replace(r, points=0.0, status=why)
        for r in rows
    ]


class _Scanner:
    """The flags of a run's submissions, each chapter's notebooks read once, and each
    submission scanned again only where it, its chapter's release or solution, or the scan's
    rules changed since it was last scanned (``OUT/scanned.json``)."""

    def __init__(self, root: Path, out: Out):
        self.root, self.out = root, out
        self.released: dict[str, object] = {}  # chapter -> its release: the instructor's cells
        self.solutions: dict[str, object] = {}  # chapter -> its solution: the cells as graded
        self.exercises: dict[str, dict[str, list[str]]] = {}
        self.hashes: dict[Path, str] = {}
        try:
            self.before = json.loads((out / SCANNED).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self.before = {}
        self.now: dict[str, list[dict]] = {}

    def _hash(self, path: Path) -> str:
        if path not in self.hashes:
            self.hashes[path] = file_hash(path) if path.is_file() else "missing"
        return self.hashes[path]

    def flags(self, student: str, chapter: str) -> list:
        parts = (
            self.out.submitted(student, chapter),
            self.out.released(chapter),
            solution_path(self.root, chapter),
            Path(scan.__file__),
        )
        key = hashlib.sha256((chapter + "".join(self._hash(p) for p in parts)).encode()).hexdigest()
        if isinstance(self.before.get(key), list):
            try:
                found = [scan.Flag(**flag) for flag in self.before[key]]
                self.now[key] = self.before[key]
                return found
            except TypeError:
                pass  # written by another version of the scan: scan again
        found = self._scan(student, chapter)
        self.now[key] = [dataclasses.asdict(flag) for flag in found]
        return found

    def save(self) -> None:
        """Keep the flags of this run's submissions for the next run."""
        write_atomically(self.out / SCANNED, json.dumps(self.now, sort_keys=True))

    def _scan(self, student: str, chapter: str) -> list:
        if chapter not in self.released:
            release = self.out.released(chapter)
            self.released[chapter] = (
                nbformat.read(release, as_version=4) if release.is_file() else None
            )
        if chapter not in self.solutions:
            path = solution_path(self.root, chapter)
            self.solutions[chapter] = nbformat.read(path, as_version=4) if path.is_file() else None
        try:
            nb = nbformat.read(self.out.submitted(student, chapter), as_version=4)
            return scan_notebook(nb, chapter, self.released[chapter], self.solutions[chapter])
        except Exception:
            return []  # it was graded, so it was readable; nothing to scan now

    def tests(self, chapter: str) -> dict[str, list[str]]:
        """Exercise -> its test cells, from the chapter's solution notebook."""
        if chapter not in self.exercises:
            solution = nbformat.read(solution_path(self.root, chapter), as_version=4)
            self.exercises[chapter] = tests_of_exercises(solution)
        return self.exercises[chapter]
