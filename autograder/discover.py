"""What is in SUBMISSIONS: which notebook to grade for each student and chapter.

nbgrader's submitted layout::

    SUBMISSIONS/<student>/<chapter>/<chapter>.ipynb

Students hand in what their browser saved: ``Untitled.ipynb``, ``<chapter> (1).ipynb``,
an empty file, a notebook beside another. ``discover`` maps the folder and says what it
skipped; ``read_submission`` says why a notebook cannot be graded; ``submission_note``
what the instructor should know about the one that was.
"""

import json
from pathlib import Path

import nbformat

from autograder.chapters import CourseError


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
