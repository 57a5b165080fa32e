"""The instructor's commands: release, check, and clear errors for bad input."""

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder import gradebook
from autograder.chapters import CourseError, find_root
from autograder.discover import discover, locate_notebook, read_submission, submission_note
from autograder.leaks import find_leaks
from autograder.outfolder import (
    CELLS_CSV,
    GRADES_CSV,
    GradeRow,
    read_csv,
    write_csv,
    write_wide_csv,
)
from autograder.release import alembic_head, check, release


def run_cli(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "autograder", *args], cwd=cwd, capture_output=True, text=True
    )


@pytest.fixture
def course_copy(root, tmp_path):
    """A copy of the parts of the course the autograder needs."""
    for name in ("solutions", "notebooks"):
        shutil.copytree(root / name, tmp_path / name)
    for name in ("_toc.yml", "nbgrader_config.py"):
        shutil.copyfile(root / name, tmp_path / name)
    return tmp_path


def test_the_gradebook_revision_is_what_alembic_heads_says(tmp_path):
    """``grade`` stamps a new gradebook with the head of nbgrader's alembic scripts, read in
    its own process; nbgrader's own way runs ``alembic heads``."""
    import nbgrader

    ini = tmp_path / "alembic.ini"
    scripts = Path(nbgrader.__file__).parent / "alembic"
    ini.write_text(f"[alembic]\nscript_location = {scripts}\n", encoding="utf-8")
    alembic = Path(sys.executable).parent / "alembic"
    said = subprocess.run([str(alembic), "-c", str(ini), "heads"], capture_output=True, text=True)
    assert said.returncode == 0, said.stderr
    assert said.stdout.split()[0] == alembic_head()


def test_committed_notebooks_are_in_sync(root):
    result = run_cli("check", cwd=root)
    assert result.returncode == 0, result.stderr


def test_check_names_a_drifted_notebook(course_copy):
    path = next((course_copy / "notebooks").glob("*/*.ipynb"))
    nb = nbformat.read(path, as_version=4)
    nb.cells[0].source += "\nAn edit made by hand."
    nbformat.write(nb, path)
    problems = check(course_copy)
    assert any(path.name in p and "drifted" in p for p in problems), problems


def test_check_finds_leaked_solution_code(course_copy):
    path = next((course_copy / "notebooks").glob("*/*.ipynb"))
    solution = course_copy / "solutions" / path.parent.name / path.name
    secret = next(
        line.strip()
        for cell in nbformat.read(solution, as_version=4).cells
        if "BEGIN SOLUTION" in cell.source
        for line in cell.source.split("### BEGIN SOLUTION")[1].splitlines()
        if len(line.strip()) > 20 and not line.strip().startswith("#")
    )
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell(secret))
    nbformat.write(nb, path)
    problems = check(course_copy)
    assert any("contains solution or hidden-test text" in p for p in problems), problems


def test_check_is_not_fooled_by_a_visible_line_that_starts_as_a_hidden_one(course_copy):
    """A hidden test's ``for case in [`` is no leak in a visible ``for case in [(1, 2)]:``,
    nor is a solution's ``"glu",`` in the metadata's ``"grade_id": "glu",``."""
    path = next((course_copy / "notebooks").glob("*/*.ipynb"))
    solution = course_copy / "solutions" / path.parent.name / path.name
    nb = nbformat.read(solution, as_version=4)
    test = next(c for c in nb.cells if "BEGIN HIDDEN TESTS" in c.source)
    test.source = test.source.replace(
        "### BEGIN HIDDEN TESTS", "### BEGIN HIDDEN TESTS\n    cases_for_the_grader = [\n    ]", 1
    )
    nbformat.write(nb, solution)
    released = nbformat.read(path, as_version=4)
    released.cells.append(nbformat.v4.new_code_cell("cases_for_the_grader = [(1, 2)]"))
    nbformat.write(released, path)
    problems = check(course_copy)
    assert not any("contains solution or hidden-test text" in p for p in problems), problems


def test_a_fragment_of_a_secret_statement_leaks_only_as_a_line_of_its_own():
    """``w = torch.softmax(`` opening a hidden call is no leak in a visible
    ``w = torch.softmax(x, -1)``, nor a lone ``"name",`` argument in ``diagnose("name", ...)``
    (the website's check); a whole secret line leaks wherever it stands."""
    secrets = {"w = torch.softmax(", '"attention_weights_bytes",', "scores = Q @ K.T / 8"}
    visible = 'w = torch.softmax(x, -1)\nwith diagnose("attention_weights_bytes", "b"):'
    assert find_leaks(visible, secrets) == []
    assert find_leaks("x = 1\n    w = torch.softmax(\n        s, -1)", secrets) == [
        "w = torch.softmax("
    ]
    assert find_leaks("y = 1; scores = Q @ K.T / 8", secrets) == ["scores = Q @ K.T / 8"]


def test_check_finds_a_stale_chapter_folder(course_copy):
    (course_copy / "notebooks" / "99_unknown").mkdir()
    assert any("99_unknown" in p for p in check(course_copy))


def test_release_reproduces_the_committed_notebooks(course_copy, root):
    shutil.rmtree(course_copy / "notebooks")
    released = release(course_copy)
    for path in released:
        committed = root / path.relative_to(course_copy)
        assert path.read_bytes() == committed.read_bytes(), (
            f"{path.name} differs from the committed release"
        )


def test_unknown_chapter_is_a_clear_error(root):
    result = run_cli("release", "99_nonsense", cwd=root)
    assert (
        result.returncode == 2
        and "unknown chapter" in result.stderr
        and "Traceback" not in result.stderr
    )


def test_outside_the_course_is_a_clear_error(tmp_path):
    result = run_cli("check", cwd=tmp_path)
    assert result.returncode == 2 and "not inside the course" in result.stderr
    with pytest.raises(CourseError):
        find_root(tmp_path)


@pytest.mark.parametrize("how", ["relative", "absolute", "found from a folder below"])
def test_the_course_folder_relative_absolute_or_found(course_copy, tmp_path_factory, how):
    """``--course-dir`` relative to where the command runs or absolute, or no
    ``--course-dir`` in a folder below the course's top folder."""
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    if how == "found from a folder below":
        cwd, args = course_copy / "solutions" / "04_dot_product_attention", []
    else:
        course = os.path.relpath(course_copy, elsewhere) if how == "relative" else course_copy
        cwd, args = elsewhere, ["--course-dir", str(course)]
    result = run_cli(*args, "check", cwd=cwd)
    assert result.returncode == 0, result.stderr
    assert "notebooks/ is in sync" in result.stdout


def test_missing_submissions_folder_is_a_clear_error(root, tmp_path):
    result = run_cli("grade", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out"), cwd=root)
    assert (
        result.returncode == 2
        and "does not exist" in result.stderr
        and "Traceback" not in result.stderr
    )


def test_empty_submissions_folder_is_a_clear_error(root, tmp_path):
    result = run_cli("grade", str(tmp_path), "--out", str(tmp_path / "out"), cwd=root)
    assert result.returncode == 2 and "no submissions found" in result.stderr


def test_discover_reports_what_it_skips(tmp_path):
    (tmp_path / "alice" / "04_dot_product_attention").mkdir(parents=True)
    (tmp_path / "alice" / "homework").mkdir()
    (tmp_path / "notes.txt").write_text("x")
    found, problems = discover(tmp_path, ["04_dot_product_attention"])
    assert list(found) == ["alice"]
    assert any("homework" in p for p in problems) and any("notes.txt" in p for p in problems)


def test_read_submission_explains_bad_notebooks(tmp_path):
    assert read_submission(tmp_path / "missing.ipynb").startswith("missing")
    bad = tmp_path / "bad.ipynb"
    bad.write_text("{")
    assert read_submission(bad).startswith("unreadable")
    empty = tmp_path / "empty.ipynb"
    nbformat.write(nbformat.v4.new_notebook(), empty)
    assert "no code cells" in read_submission(empty)
    nothing = tmp_path / "nothing.ipynb"
    nothing.write_bytes(b"")
    assert read_submission(nothing) == "unreadable: nothing.ipynb is an empty file (0 bytes)"


def test_the_notebook_to_grade_is_found_under_another_name_when_alone(tmp_path):
    chapter = "04_dot_product_attention"
    folder = tmp_path / "alice" / chapter
    folder.mkdir(parents=True)
    expected = folder / f"{chapter}.ipynb"
    assert locate_notebook(folder, chapter) == expected  # nothing there: the missing one
    assert read_submission(expected) == f"missing: no {chapter}.ipynb in {folder}"
    (folder / ".ipynb_checkpoints").mkdir()
    (folder / ".hidden.ipynb").write_text("{}")
    (folder / "Untitled.ipynb").write_text("{}")
    assert locate_notebook(folder, chapter) == folder / "Untitled.ipynb"
    assert submission_note(folder / "Untitled.ipynb", chapter) == (
        f"graded Untitled.ipynb, the only notebook in its folder, as {chapter}.ipynb"
    )
    (folder / "scratch.ipynb").write_text("{}")
    assert locate_notebook(folder, chapter) == expected  # two others: which one?
    assert read_submission(expected).endswith(
        "(it holds Untitled.ipynb, scratch.ipynb: which one is the submission?)"
    )
    expected.write_text("{}")
    assert locate_notebook(folder, chapter) == expected
    assert submission_note(expected, chapter) == (
        "not graded, beside it: Untitled.ipynb, scratch.ipynb"
    )
    (folder / "Untitled.ipynb").unlink()
    (folder / "scratch.ipynb").unlink()
    assert submission_note(expected, chapter) is None


def test_grades_csv_is_a_row_per_student_and_a_column_per_chapter(tmp_path):
    a, b = "04_dot_product_attention", "02_bahdanau_attention"
    rows = [
        GradeRow("alice", b, "t1", 2, 3, "graded"),
        GradeRow("alice", b, "t2", 1, 1, "graded"),
        GradeRow("alice", a, "t1", 0.5, 2, "graded"),
        GradeRow("bob", a, "t1", 2, 2, "graded"),
    ]
    write_wide_csv(rows, tmp_path / GRADES_CSV)
    write_csv(rows, tmp_path / CELLS_CSV)
    lines = (tmp_path / GRADES_CSV).read_text(encoding="utf-8").splitlines()
    assert lines == [
        f"student,{b},{a},total,max_total",  # chapters in course order
        "alice,3,0.5,3.5,6",
        "bob,,2,2,6",  # no result for a chapter: left empty
    ]
    # the wide file's path reads the per-cell file beside it
    assert read_csv(tmp_path / GRADES_CSV) == read_csv(tmp_path / CELLS_CSV) == rows


def test_the_gradebook_is_backed_up_under_a_utc_time(tmp_path):
    with sqlite3.connect(tmp_path / "gradebook.db") as db:
        db.execute("create table grade (score real)")
        db.execute("insert into grade values (1.5)")
    db.close()
    url = gradebook.resolve_url(None, tmp_path)
    first, second = gradebook.backup(url, tmp_path), gradebook.backup(url, tmp_path)
    assert first != second and first.parent == second.parent == tmp_path / "backups"
    assert first.name.startswith("gradebook-") and first.name.endswith(".db")
    with sqlite3.connect(second) as copy:
        assert copy.execute("select score from grade").fetchall() == [(1.5,)]
    copy.close()
