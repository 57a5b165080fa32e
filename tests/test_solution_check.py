"""A broken grading environment never looks like a graded class (issue 28, part 1).

The environment is broken the way it was found broken: a copy of ``attention_course``
earlier on ``PYTHONPATH`` whose ``checks`` module cannot be imported, so every kernel's
setup cell fails. Before grading, the chapter's solution, graded as a submission, must earn
full marks (``autograder/solution_check.py``); a pass is cached per solution and
environment, so a copy broken *after* its pass is caught by the second guard: a setup cell
that fails for every submission of a batch.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from bwrap import grade_options

from autograder import kernel_imports as kernel_imports_module
from autograder.chapters import INSTALLED_ROOT, CourseError
from autograder.kernel_imports import _ask, check_kernel_imports, kernel_imports
from autograder.outfolder import read_csv
from autograder.outside import KEY_CACHE_ENV
from autograder.sandbox import sandbox_command
from autograder.submissions import solved_notebook, untouched_notebook, write_submission

CHAPTER = "04_dot_product_attention"
BROKEN = 'raise ImportError("this copy of the course is broken")\n'


def _copy_of_the_course(where: Path) -> Path:
    """A copy of the student package at ``where`` (to put first on PYTHONPATH)."""
    shutil.copytree(
        INSTALLED_ROOT / "attention_course",
        where / "attention_course",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    return where


def _grade(root, submissions, out, pythonpath, cache, *extra):
    env = {**os.environ, "PYTHONPATH": str(pythonpath), KEY_CACHE_ENV: str(cache)}
    return subprocess.run(
        [sys.executable, "-m", "autograder", "grade", str(submissions), "--out", str(out)]
        + ["--workers", "1", *extra, *grade_options()],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def submissions(root, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("submissions")
    write_submission(solved_notebook(root, CHAPTER), folder, "alice", CHAPTER)
    write_submission(untouched_notebook(root, CHAPTER), folder, "bob", CHAPTER)
    return folder


@pytest.mark.slow
def test_a_broken_course_stops_the_run_before_anything_is_graded(root, submissions, tmp_path):
    course = _copy_of_the_course(tmp_path / "broken")
    (course / "attention_course" / "checks.py").write_text(BROKEN, encoding="utf-8")
    out = tmp_path / "out"
    result = _grade(root, submissions, out, course, tmp_path / "cache")
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    said = result.stderr
    assert (
        f"error: the solution of {CHAPTER} scores 0/19 in this grading environment: the setup "
        "cell failed with ImportError: this copy of the course is broken" in said
    ), said
    assert "Nothing was graded" in said
    # where the kernels import the course from: the copy, bound into the sandbox from /tmp
    assert f"attention_course from {course / 'attention_course'}" in said
    assert not (out / "grades.csv").exists() and not (out / "feedback").exists()
    assert not (out / "nbgrader" / "autograded").exists()
    # the solution graded as a submission is kept for the instructor to open
    assert (out / "solution-check" / "nbgrader" / "autograded" / "solution" / CHAPTER).is_dir()


@pytest.mark.slow
def test_a_pass_is_cached_and_a_setup_cell_failing_for_the_whole_batch_is_not_graded(
    root, submissions, tmp_path
):
    course = _copy_of_the_course(tmp_path / "course")
    cache, out = tmp_path / "cache", tmp_path / "out"
    first = _grade(root, submissions, out, course, cache)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    assert f"solution check of {CHAPTER}: 19 / 19 in this grading environment" in first.stdout
    assert not (out / "solution-check").exists()  # removed once passed
    totals: dict[str, float] = {}
    for r in read_csv(out / "grades_by_cell.csv"):
        totals[r.student] = totals.get(r.student, 0.0) + r.points
    assert totals == {"alice": 19.0, "bob": 0.0}
    # the same environment (same interpreter, same folders): the check is not paid again;
    # then the copy breaks without the environment's fingerprint changing
    (course / "attention_course" / "checks.py").write_text(BROKEN, encoding="utf-8")
    second = _grade(root, submissions, out, course, cache, "--regrade")
    said = second.stdout + second.stderr
    assert second.returncode == 1, said[-3000:]
    assert f"solution check of {CHAPTER}: full marks in this grading environment (cached)" in said
    assert (
        f"error: {CHAPTER}: the setup cell failed for all 2 submissions graded (ImportError: "
        "this copy of the course is broken): the grading environment is broken" in said
    )
    ledger = json.loads((out / "graded.json").read_text(encoding="utf-8"))["submissions"]
    for student in ("alice", "bob"):
        status = ledger[student][CHAPTER]["status"]
        assert status.startswith("not graded: the setup cell failed for every submission")
        assert not (out / "feedback" / student / f"{CHAPTER}.html").exists()
    rows = [r for r in read_csv(out / "grades_by_cell.csv") if r.student == "alice"]
    assert rows and all(r.status.startswith("not graded: the setup cell") for r in rows)


def test_the_sandbox_binds_the_course_where_the_kernel_imports_it_through_a_link(
    tmp_path, monkeypatch
):
    real = _copy_of_the_course(tmp_path / "real")
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    monkeypatch.setenv("PYTHONPATH", str(link))
    _ask.cache_clear()
    found = kernel_imports()
    assert found.packages["attention_course"] == str(link / "attention_course")
    command = sandbox_command(["true"], str(tmp_path), [])
    binds = {(command[i + 1], command[i + 2]) for i, a in enumerate(command) if a == "--ro-bind"}
    if str(tmp_path.resolve()).startswith("/tmp/"):
        assert (str(real.resolve()), str(link)) in binds  # the link's path, from its target
    if shutil.which("bwrap"):
        probe = "import attention_course; print(attention_course.__file__)"
        ran = subprocess.run(
            sandbox_command([sys.executable, "-c", probe], str(tmp_path), []),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert ran.stdout.strip() == str(link / "attention_course" / "__init__.py"), ran.stderr


def test_a_course_in_a_hidden_folder_or_not_found_is_said_before_grading(tmp_path, monkeypatch):
    course = _copy_of_the_course(tmp_path / "submissions" / "inside")
    monkeypatch.setenv("PYTHONPATH", str(course))
    _ask.cache_clear()
    with pytest.raises(CourseError, match=r"attention_course is found in .*, inside .*hides"):
        check_kernel_imports([str(tmp_path / "submissions")])
    monkeypatch.setattr(kernel_imports_module, "kernel_python", lambda: "/nonexistent/python")
    with pytest.raises(CourseError, match="the kernel's Python /nonexistent/python could not"):
        check_kernel_imports([])
