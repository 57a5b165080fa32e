"""``grade --workers N``: parallel grading gives the same grades as grading one by one,
survives a worker process that dies, and retries a step that met a locked gradebook."""

import subprocess
import sys

import nbformat
import pytest
from bwrap import grade_options
from mutants import MUTANTS

from autograder import grade as grading
from autograder.submissions import mutate, solved_notebook, untouched_notebook, write_submission

CHAPTER = "04_dot_product_attention"  # the fastest chapter to grade


def grade_cli(root, submissions, out, workers, *options):
    result = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", str(submissions), "--out", str(out)]
        + ["--workers", str(workers), *options, *grade_options()],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


@pytest.mark.slow
def test_parallel_grades_equal_serial_grades(root, tmp_path):
    submissions = tmp_path / "submissions"
    write_submission(solved_notebook(root, CHAPTER), submissions, "solution", CHAPTER)
    write_submission(untouched_notebook(root, CHAPTER), submissions, "untouched", CHAPTER)
    m = MUTANTS[CHAPTER][0]
    nb = mutate(solved_notebook(root, CHAPTER), m.cell, m.old, m.new)
    write_submission(nb, submissions, f"mutant-{m.name}", CHAPTER)
    broken = submissions / "broken" / CHAPTER / f"{CHAPTER}.ipynb"
    broken.parent.mkdir(parents=True)
    broken.write_text('{"cells": [', encoding="utf-8")

    serial = grade_cli(root, submissions, tmp_path / "serial", workers=1)
    parallel = grade_cli(root, submissions, tmp_path / "parallel", workers=2)
    for name in (grading.CELLS_CSV, grading.GRADES_CSV):
        rows = (tmp_path / "serial" / name).read_text(encoding="utf-8")
        assert rows == (tmp_path / "parallel" / name).read_text(encoding="utf-8"), name
    totals = {}
    for r in grading.read_csv(tmp_path / "parallel" / grading.CELLS_CSV):
        points, max_points = totals.get(r.student, (0, 0))
        totals[r.student] = (points + r.points, max_points + r.max_points)
    assert totals["solution"][0] == totals["solution"][1] > totals[f"mutant-{m.name}"][0] > 0
    assert totals["untouched"][0] == totals["broken"][0] == 0
    for output in (serial, parallel):  # one progress line per graded submission
        assert output.count(f" / {CHAPTER} (") == 3 and "(3 of 3, " in output


@pytest.mark.slow
def test_a_dying_worker_costs_only_its_own_submission(root, tmp_path):
    submissions = tmp_path / "submissions"
    write_submission(solved_notebook(root, CHAPTER), submissions, "solution", CHAPTER)
    # a notebook that kills the process running its kernel: the grader's worker. Only
    # without the sandbox: in it, the kernel's parent is bwrap, in a PID namespace of its
    # own, and the worker is out of reach (a worker can still die, of memory say).
    nb = solved_notebook(root, CHAPTER)
    kill = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)"
    nb.cells.insert(0, nbformat.v4.new_code_cell(kill))
    write_submission(nb, submissions, "killer", CHAPTER)

    grade_cli(root, submissions, tmp_path / "out", 2, "--no-sandbox")
    by_student = {}
    for row in grading.read_csv(tmp_path / "out" / grading.CELLS_CSV):
        by_student.setdefault(row.student, []).append(row)
    assert all(r.status == "graded" and r.points == r.max_points for r in by_student["solution"])
    assert all(
        r.points == 0 and r.status.startswith("not graded: the grading process died")
        for r in by_student["killer"]
    )


class LockedOnce:
    """An nbgrader API whose first autograde meets a gradebook locked by another worker."""

    def __init__(self):
        self.calls = []

    def autograde(self, chapter, student, force, create):
        self.calls.append("autograde")
        if self.calls.count("autograde") == 1:
            error = "sqlite3.OperationalError: database is locked"
            return {"success": False, "error": error, "log": ""}
        return {"success": True, "log": ""}

    def generate_feedback(self, chapter, student, force):
        self.calls.append("feedback")
        return {"success": True, "log": ""}


def test_a_locked_gradebook_is_retried(tmp_path, monkeypatch):
    monkeypatch.setattr(grading.time, "sleep", lambda seconds: None)
    notebook = tmp_path / "in.ipynb"
    nbformat.write(nbformat.v4.new_notebook(), notebook)
    api = LockedOnce()
    reason = grading._autograde_one(api, tmp_path / "work", notebook, "alice", CHAPTER, tmp_path)
    assert reason is None and api.calls == ["autograde", "autograde", "feedback"]


def test_workers_must_be_positive(root, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", str(tmp_path), "--out", str(tmp_path)]
        + ["--workers", "0"],
        cwd=root,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and "--workers" in result.stderr
