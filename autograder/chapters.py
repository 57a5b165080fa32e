"""Chapter ids and where a chapter's files live.

A chapter id is the nbgrader assignment id and also names the folder, the notebook and the
book page: ``solutions/<id>/<id>.ipynb``, ``notebooks/<id>/<id>.ipynb``, ``book/<id>.md``.
"""

from pathlib import Path

# The folder the grader is installed from: the course's repository (``pip install -e .``).
INSTALLED_ROOT = Path(__file__).resolve().parents[1]

# In course order. A chapter is listed once its solution notebook exists.
ALL_CHAPTERS = (
    "01_rnn_bottleneck",
    "02_bahdanau_attention",
    "03_convs2s",
    "04_dot_product_attention",
    "05_multi_head_attention",
    "06_transformer",
    "07_spatial_transformer",
    "08_language_models",
    "09_vision_transformer",
    "10_attention_since_2023",
)


def course_order(chapter: str) -> tuple[int, str]:
    """A sort key: the course's chapters in course order, then any other name (a chapter
    no longer in the course) alphabetically."""
    if chapter in ALL_CHAPTERS:
        return ALL_CHAPTERS.index(chapter), chapter
    return len(ALL_CHAPTERS), chapter


class CourseError(Exception):
    """A problem an instructor can fix (a missing folder, an unknown chapter): the CLI
    prints the message alone, without a traceback."""


def find_root(start: Path | None = None) -> Path:
    """The course's top folder: ``start`` (default: the working directory) or the first
    parent that has both ``solutions/`` and ``_toc.yml``."""
    start = Path(start or Path.cwd()).resolve()
    for folder in (start, *start.parents):
        if (folder / "solutions").is_dir() and (folder / "_toc.yml").is_file():
            return folder
    raise CourseError(
        f"{start} is not inside the course: no parent folder has both solutions/ and "
        "_toc.yml. Run the command from the course's top folder or pass --course-dir."
    )


def chapters_in(root: Path) -> list[str]:
    """The chapters that have a solution notebook, in course order."""
    return [ch for ch in ALL_CHAPTERS if (root / "solutions" / ch / f"{ch}.ipynb").is_file()]


def solution_path(root: Path, chapter: str) -> Path:
    return root / "solutions" / chapter / f"{chapter}.ipynb"


def release_path(root: Path, chapter: str) -> Path:
    return root / "notebooks" / chapter / f"{chapter}.ipynb"


def validate_chapters(root: Path, requested: list[str] | None) -> list[str]:
    """``requested`` chapters (all of them when empty), each checked to exist."""
    available = chapters_in(root)
    if not available:
        raise CourseError(f"no solution notebooks found under {root / 'solutions'}")
    if not requested:
        return available
    unknown = [ch for ch in requested if ch not in available]
    if unknown:
        raise CourseError(
            f"unknown chapter(s) {', '.join(unknown)}; chapters with a solution notebook: "
            + ", ".join(available)
        )
    return list(requested)
