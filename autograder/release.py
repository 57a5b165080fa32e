"""``release`` regenerates notebooks/ from solutions/; ``check`` proves they agree.

Release runs nbgrader's generate_assignment with solutions/ as the source: solution
regions become a stub that raises ``NotImplementedError``, hidden tests are removed and
outputs cleared. The gradebook it writes is thrown away: the grader builds its own.
"""

import filecmp
import functools
import json
import os
import sys
import tempfile
from pathlib import Path

import nbformat

from autograder.cells import grade_id
from autograder.chapters import CourseError, release_path, solution_path, validate_chapters
from autograder.experiments import check_marked
from autograder.leaks import find_leaks_in_notebook, secret_lines
from autograder.nbgrader_settings import course_config


def nbgrader_api(config):
    """nbgrader's Python API for a course configuration.

    nbgrader stamps a new gradebook with its schema's revision, which it asks of a
    subprocess, ``alembic heads`` (4 s); the API made here reads it in this process instead
    (:func:`alembic_head`). Other nbgrader commands run the ``alembic`` executable from
    PATH, which fails in a virtual environment that is used without being activated; so put
    this interpreter's own bin folder first on PATH.
    """
    import nbgrader.api
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    nbgrader.api.get_alembic_version = alembic_head
    bin_dir = str(Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    return NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)


@functools.cache
def alembic_head() -> str:
    """The revision of nbgrader's gradebook schema: the head of its alembic scripts, the
    answer of ``alembic heads`` (``tests/test_autograder_cli.py`` checks they agree)."""
    import nbgrader
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(Path(nbgrader.__file__).parent / "alembic")).get_current_head()


def validate_solution_notebook(path: Path) -> None:
    """A clear error for a solution notebook nbgrader would choke on."""
    try:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
    except (OSError, json.JSONDecodeError, nbformat.ValidationError) as error:
        raise CourseError(f"{path} is not a valid notebook: {error}") from error
    ids = [grade_id(c) for c in nb.cells]
    ids = [i for i in ids if i]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise CourseError(f"{path}: grade ids used twice: {', '.join(duplicates)}")
    check_marked(nb, str(path))  # the experiment cells grading skips: none a score needs


def generate(root: Path, chapters: list[str], release_dir: Path) -> None:
    """Write the student versions of ``chapters`` into ``release_dir/<chapter>/``."""
    for chapter in chapters:
        validate_solution_notebook(solution_path(root, chapter))
    with tempfile.TemporaryDirectory() as tmp:
        config = course_config(
            root, db_url=f"sqlite:///{tmp}/gradebook.db", release_directory=release_dir
        )
        api = nbgrader_api(config)
        for chapter in chapters:
            result = api.generate_assignment(chapter, force=True, create=True)
            if not result["success"]:
                raise CourseError(
                    f"nbgrader could not release {chapter}:\n{result.get('error') or result.get('log')}"
                )


def release(root: Path, chapters: list[str] | None = None) -> list[Path]:
    """Regenerate notebooks/<chapter>/ for ``chapters`` (all when empty)."""
    chapters = validate_chapters(root, chapters)
    generate(root, chapters, root / "notebooks")
    return [release_path(root, ch) for ch in chapters]


def check(root: Path) -> list[str]:
    """Problems with notebooks/: drift from solutions/, stale files, leaked secrets.
    An empty list means all is well."""
    chapters = validate_chapters(root, None)
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "release"
        generate(root, chapters, fresh)
        for chapter in chapters:
            committed, expected = root / "notebooks" / chapter, fresh / chapter
            if not committed.is_dir():
                problems.append(
                    f"notebooks/{chapter}/ is missing: run `python -m autograder release {chapter}`"
                )
                continue
            new = {p.relative_to(expected) for p in expected.rglob("*") if p.is_file()}
            old = {p.relative_to(committed) for p in committed.rglob("*") if p.is_file()}
            for rel in sorted(new - old):
                problems.append(
                    f"notebooks/{chapter}/{rel} is missing: run `python -m autograder release {chapter}`"
                )
            for rel in sorted(old - new):
                problems.append(
                    f"notebooks/{chapter}/{rel} does not come from solutions/{chapter}/: remove it"
                )
            for rel in sorted(new & old):
                if not filecmp.cmp(expected / rel, committed / rel, shallow=False):
                    problems.append(
                        f"notebooks/{chapter}/{rel} has drifted from solutions/{chapter}/: edit the "
                        f"solution notebook, then run `python -m autograder release {chapter}`"
                    )
            secrets = secret_lines(solution_path(root, chapter))
            for path in sorted(committed.rglob("*.ipynb")):
                leaks = find_leaks_in_notebook(path, secrets)
                for leak in leaks:
                    problems.append(
                        f"{path.relative_to(root)} contains solution or hidden-test text: {leak!r}"
                    )
    for folder in sorted((root / "notebooks").glob("*")):
        if folder.is_dir() and folder.name not in chapters:
            problems.append(f"notebooks/{folder.name}/ has no solution notebook in solutions/")
    return problems
