"""``python -m autograder release-solutions``: the worked solutions a class gets once it is
graded hold every solution and no hidden test (autograder/solutions_out.py)."""

import subprocess
import sys

import nbformat
import pytest

from attention_course import GRADING_ENV
from autograder.chapters import ALL_CHAPTERS, solution_path
from autograder.leaks import MARKERS
from autograder.solutions_out import solutions_notebook


def regions(root, chapter: str, begin: str, end: str) -> set[str]:
    """The distinctive lines inside the solution notebook's ``begin`` .. ``end`` regions that
    occur nowhere outside them."""
    inside_lines, outside = set(), set()
    for cell in nbformat.read(solution_path(root, chapter), as_version=4).cells:
        inside = False
        for line in cell.source.splitlines():
            if begin in line or end in line:
                inside = begin in line
                continue
            (inside_lines if inside else outside).add(line.strip())
    return {line for line in inside_lines - outside if len(line) >= 12}


@pytest.mark.parametrize("chapter", ALL_CHAPTERS)
def test_the_solutions_are_there_and_the_hidden_tests_are_not(root, chapter):
    nb = solutions_notebook(root, chapter)
    text = "\n".join(c.source for c in nb.cells)
    lines = {line.strip() for line in text.splitlines()}
    hidden = regions(root, chapter, "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
    solutions = regions(root, chapter, "BEGIN SOLUTION", "END SOLUTION")
    assert hidden and solutions
    assert not hidden & lines, sorted(hidden & lines)[:3]
    assert solutions <= lines, sorted(solutions - lines)[:3]
    assert not any(m in text for m in MARKERS)
    assert not any("nbgrader" in c.metadata for c in nb.cells)
    assert not any(c.get("outputs") for c in nb.cells)
    assert nb.cells[0].source.startswith(f"**Worked solutions of chapter {chapter}**")


@pytest.mark.slow
def test_the_worked_solutions_run_top_to_bottom(root, tmp_path, monkeypatch):
    """Chapter 04's, in grading mode: no cell fails."""
    from nbclient import NotebookClient

    chapter = "04_dot_product_attention"
    command = [sys.executable, "-m", "autograder", "release-solutions", chapter]
    done = subprocess.run(
        command + ["--out", str(tmp_path)], cwd=root, capture_output=True, text=True, check=True
    )
    path = tmp_path / chapter / f"{chapter}-solutions.ipynb"
    assert str(path) in done.stdout
    nb = nbformat.read(path, as_version=4)
    monkeypatch.setenv(GRADING_ENV, "1")
    NotebookClient(nb, timeout=300, resources={"metadata": {"path": str(tmp_path)}}).execute()


def test_an_unknown_chapter_is_a_clear_error(root, tmp_path):
    command = [sys.executable, "-m", "autograder", "release-solutions", "04_dot_product"]
    done = subprocess.run(command, cwd=root, capture_output=True, text=True)
    assert done.returncode == 2
    assert "unknown chapter(s) 04_dot_product" in done.stderr
    assert not (root / "released-solutions").exists()
