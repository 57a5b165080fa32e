"""Grading again into the same OUT loses nothing: the gradebook is backed up, what was
graded and has not changed is not graded again (an interrupted run finishes the rest),
manual grades and comments stay, and grades.csv keeps every student graded there. Each
command runs with relative or absolute paths, from the course folder or one below it."""

import csv
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
from bwrap import grade_options
from mutants import MUTANTS

from autograder.nbgrader_settings import COURSE_ID
from autograder.outfolder import CELLS_CSV, GRADES_CSV, read_csv
from autograder.submissions import mutate, solved_notebook, untouched_notebook, write_submission

pytestmark = pytest.mark.slow

CHAPTER = "04_dot_product_attention"  # the fastest chapter to grade


def grade_cli(cwd, submissions, out, *options):
    result = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", str(submissions), "--out", str(out)]
        + list(options)
        + grade_options(),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def wide(out):
    with open(out / GRADES_CSV, newline="", encoding="utf-8") as f:
        return {r["student"]: r for r in csv.DictReader(f)}


def set_manual_grade(out, student, cell, score, comment):
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{out / 'gradebook.db'}", COURSE_ID) as gb:
        grade = gb.find_grade(cell, CHAPTER, CHAPTER, student)
        grade.manual_score = score
        solution_cell = gb.find_notebook(CHAPTER, CHAPTER).solution_cells[0].name
        gb.find_comment(solution_cell, CHAPTER, CHAPTER, student).manual_comment = comment
        gb.db.commit()
    return solution_cell


def manual_comment(out, student, solution_cell):
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{out / 'gradebook.db'}", COURSE_ID) as gb:
        return gb.find_comment(solution_cell, CHAPTER, CHAPTER, student).manual_comment


def test_grading_again_keeps_what_was_there_and_grades_only_the_rest(root, tmp_path):
    submissions = tmp_path / "submissions"
    out = tmp_path / "out"
    write_submission(solved_notebook(root, CHAPTER), submissions, "alice", CHAPTER)
    write_submission(untouched_notebook(root, CHAPTER), submissions, "bob", CHAPTER)
    m = MUTANTS[CHAPTER][0]
    nb = mutate(solved_notebook(root, CHAPTER), m.cell, m.old, m.new)
    write_submission(nb, submissions, "carol", CHAPTER)

    # 1. relative paths from the course's top folder, two workers
    relative = [os.path.relpath(p, root) for p in (submissions, out)]
    first = grade_cli(root, *relative, "--workers", "2")
    assert "(3 of 3, " in first and not (out / "backups").exists()
    rows = read_csv(out / CELLS_CSV)
    assert read_csv(out / GRADES_CSV) == rows  # the wide file's path reads the long one
    table = wide(out)
    assert sorted(table) == ["alice", "bob", "carol"]
    assert table["alice"]["total"] == table["alice"]["max_total"] == table["alice"][CHAPTER]
    assert float(table["bob"]["total"]) == 0
    assert 0 < float(table["carol"]["total"]) < float(table["carol"]["max_total"])
    assert (
        json.loads((out / "graded.json").read_text())["submissions"]["carol"][CHAPTER]["status"]
        == "graded"
    )

    # an instructor's manual grade and comment for bob; carol's run as if interrupted
    cell = rows[0].cell
    solution_cell = set_manual_grade(out, "bob", cell, 1.0, "Nearly: see the mask.")
    shutil.rmtree(out / "nbgrader" / "autograded" / "carol")
    carol_before = [r for r in rows if r.student == "carol"]

    # 2. absolute paths from a folder below the course's top folder, one worker
    second = grade_cli(root / "autograder" / "mistakes", submissions, out, "--workers", "1")
    assert "graded carol / " in second and "(1 of 1, " in second
    assert "graded alice" not in second and "graded bob" not in second
    assert "2 submissions already graded" in second
    assert len(list((out / "backups").glob("gradebook-*.db"))) == 1
    rows = read_csv(out / CELLS_CSV)
    assert [r for r in rows if r.student == "carol"] == carol_before
    bob = {r.cell: r for r in rows if r.student == "bob"}
    assert bob[cell].points == 1.0 and bob[cell].status == "graded"
    assert float(wide(out)["bob"]["total"]) == 1.0
    assert manual_comment(out, "bob", solution_cell) == "Nearly: see the mask."

    # 3. another submissions folder (a late student), relative paths from below the top
    late = tmp_path / "late"
    write_submission(solved_notebook(root, CHAPTER), late, "dave", CHAPTER)
    below = root / "autograder"
    third = grade_cli(below, os.path.relpath(late, below), os.path.relpath(out, below))
    assert "graded dave / " in third and "(1 of 1, " in third
    table = wide(out)
    assert sorted(table) == ["alice", "bob", "carol", "dave"]
    assert float(table["bob"]["total"]) == 1.0  # still the manual grade
    assert table["dave"]["total"] == table["dave"]["max_total"]
    assert len(list((out / "backups").glob("gradebook-*.db"))) == 2

    # 4. --regrade grades an unchanged submission again
    fourth = grade_cli(root, late, out, "--regrade", "--workers", "1")
    assert "graded dave / " in fourth and "already graded in" not in fourth
    assert sorted(wide(out)) == ["alice", "bob", "carol", "dave"]

    # the report command, with a relative OUT from below the course's top folder
    result = subprocess.run(
        [sys.executable, "-m", "autograder", "report", os.path.relpath(out, below)],
        cwd=below,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert (out / "report" / "index.html").is_file()


def test_an_interrupted_run_started_again_grades_only_the_rest(root, tmp_path):
    submissions, out = tmp_path / "submissions", tmp_path / "out"
    for student in ("alice", "bob", "carol"):
        write_submission(solved_notebook(root, CHAPTER), submissions, student, CHAPTER)
    command = [sys.executable, "-m", "autograder", "grade", str(submissions), "--out", str(out)]
    command += grade_options()
    run = subprocess.Popen(
        [*command, "--workers", "1"],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        for line in run.stdout:  # stopped as soon as the first submission is done
            if line.startswith("graded alice / "):
                run.send_signal(signal.SIGTERM)
                break
        run.wait(timeout=60)
    finally:
        run.kill()
        run.stdout.close()
    assert run.returncode != 0 and not (out / GRADES_CSV).exists()

    again = grade_cli(root, submissions, out, "--workers", "1")
    assert "1 submission already graded" in again and "graded alice" not in again
    assert "graded bob / " in again and "graded carol / " in again and "(2 of 2, " in again
    table = wide(out)
    assert sorted(table) == ["alice", "bob", "carol"]
    assert all(r["total"] == r["max_total"] for r in table.values())
