"""End to end through ``python -m autograder grade``: the grader gives honest scores.

Every chapter's batch of submissions is graded in one run, by two worker processes, as a
class hands in several chapters (a run per chapter would pay the grader's start, about 13 s
of two cores, ten times). For each chapter: the solution (full marks), the untouched
student notebook (zero, and the run finishes), a notebook that is not JSON, the catalogued
mistakes (``autograder/mistakes/``) packed several to a notebook (no two on one exercise or
one test cell: ``mutants.packs``), each of which must lose points on its own test cells only
and be named there and in the feedback, and a wrong answer outside the catalogue, which
must lose points and be named as nothing. From one of the packs' notebooks the student
deleted the first graded test cell, which nbgrader must put back and grade (a notebook of
its own only where every pack breaks that cell: no kernel runs a solution twice).
``test_mistakes.py`` checks each mistake alone, in-process.
"""

import json
import os
import re
import subprocess
import sys

import nbformat
import pytest
from bwrap import grade_options
from mutants import MUTANTS, UNCATALOGUED, packs

from autograder.chapters import release_path
from autograder.experiments import STUB, marked_ids
from autograder.outfolder import read_csv
from autograder.report import tags_by_cell
from autograder.submissions import mutate, solved_notebook, untouched_notebook, write_submission

pytestmark = pytest.mark.slow


def _first_test(nb) -> str:
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")).metadata[
        "nbgrader"
    ]["grade_id"]


def _deleted_in(chapter: str, first_test: str) -> str:
    """Whose notebook has the chapter's first graded test cell deleted: the first pack of
    mistakes that does not break that cell (all its other cells are checked as a pack's),
    else a solution of its own."""
    for i, pack in enumerate(packs(MUTANTS[chapter])):
        if all(first_test not in m.breaks for m in pack):
            return f"mistakes-{i + 1}"
    return "deleted-test-cell"


def _write_chapter(root, chapter: str, submissions) -> None:
    """The chapter's submissions, each student's in ``submissions/<student>/<chapter>/``."""
    write_submission(solved_notebook(root, chapter), submissions, "solution", chapter)
    write_submission(untouched_notebook(root, chapter), submissions, "untouched", chapter)
    # a student who deleted a graded test cell: nbgrader must put it back, not skip it
    first_test = _first_test(solved_notebook(root, chapter))
    deleted_in = _deleted_in(chapter, first_test)

    def deleting(nb, student):
        if student == deleted_in:
            nb.cells = [
                c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") != first_test
            ]
        return nb

    for i, pack in enumerate(packs(MUTANTS[chapter])):
        nb = solved_notebook(root, chapter)
        for m in pack:
            nb = mutate(nb, m.cell, m.old, m.new)
        write_submission(
            deleting(nb, f"mistakes-{i + 1}"), submissions, f"mistakes-{i + 1}", chapter
        )
    for m in UNCATALOGUED[chapter]:
        nb = mutate(solved_notebook(root, chapter), m.cell, m.old, m.new)
        write_submission(nb, submissions, f"wrong-{m.name}", chapter)
    if deleted_in == "deleted-test-cell":
        nb = deleting(solved_notebook(root, chapter), deleted_in)
        write_submission(nb, submissions, deleted_in, chapter)
    broken = submissions / "broken" / chapter / f"{chapter}.ipynb"
    broken.parent.mkdir(parents=True)
    broken.write_text('{"cells": [', encoding="utf-8")


@pytest.fixture(scope="module")
def course_graded(root, tmp_path_factory):
    """Every chapter's submissions graded in one run: (chapter -> student who handed it in
    -> cell -> row of grades.csv, the run's output folder)."""
    submissions = tmp_path_factory.mktemp("submitted")
    out = tmp_path_factory.mktemp("graded")
    for chapter in sorted(MUTANTS):
        _write_chapter(root, chapter, submissions)
    # relative paths, as an instructor types them from the course folder
    relative = [os.path.relpath(submissions, root), "--out", os.path.relpath(out, root)]
    result = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", *relative, "--workers", "2"]
        + grade_options(),
        cwd=root,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    by_chapter = {}
    for r in read_csv(out / "grades.csv"):
        # a student who handed in other chapters only has rows here too (missing)
        if (submissions / r.student / r.chapter).is_dir():
            by_chapter.setdefault(r.chapter, {}).setdefault(r.student, {})[r.cell] = r
    return by_chapter, out


@pytest.fixture(params=sorted(MUTANTS))
def graded(request, course_graded):
    """(chapter, student -> cell -> row of grades.csv, the run's output folder)."""
    by_chapter, out = course_graded
    chapter = request.param
    assert chapter in by_chapter, f"grades.csv has no row of {chapter}"
    return chapter, by_chapter[chapter], out


def _tags(graded, student) -> list[str]:
    """The known mistakes the student's feedback page names."""
    chapter, _, out = graded
    page = out / "feedback" / student / f"{chapter}.html"
    return re.findall(r"\[known mistake: ([a-z0-9-]+)\]", page.read_text(encoding="utf-8"))


def _scores(graded, student):
    _, by_student, _ = graded
    assert student in by_student, f"{student} is missing from grades.csv"
    return by_student[student]


def test_solution_earns_full_marks(graded):
    for row in _scores(graded, "solution").values():
        assert row.status == "graded" and row.points == row.max_points > 0, row


def test_chapter_is_worth_at_least_ten_points(graded):
    assert sum(r.max_points for r in _scores(graded, "solution").values()) >= 10


def test_untouched_notebook_earns_zero(graded):
    for row in _scores(graded, "untouched").values():
        assert row.status == "graded" and row.points == 0, row


def test_broken_notebook_gets_zero_with_a_reason(graded):
    rows = _scores(graded, "broken").values()
    assert all(r.points == 0 and r.status.startswith("unreadable") for r in rows)


def test_deleted_test_cell_is_restored_and_graded(graded, root):
    """The cell is graded with full marks (the notebook's other cells are checked as its
    pack's: ``test_each_mistake_loses_points_on_its_own_exercise_only``)."""
    chapter = graded[0]
    first_test = _first_test(solved_notebook(root, chapter))
    student = _deleted_in(chapter, first_test)
    path = graded[2] / "nbgrader" / "submitted" / student / chapter / f"{chapter}.ipynb"
    assert first_test not in {
        c.metadata.get("nbgrader", {}).get("grade_id")
        for c in nbformat.read(path, as_version=4).cells
    }
    scores = _scores(graded, student)
    assert first_test in scores
    for cell, row in scores.items():
        if cell == first_test or student == "deleted-test-cell":
            assert row.points == row.max_points, row


def test_feedback_for_every_graded_submission(graded):
    chapter, by_student, out = graded
    for student in by_student:
        page = out / "feedback" / student / f"{chapter}.html"
        assert page.is_file() == (student != "broken"), page
    text = (out / "feedback" / "untouched" / f"{chapter}.html").read_text(encoding="utf-8")
    assert "HIDDEN TESTS" not in text


def test_the_experiments_are_not_run_and_the_feedback_says_so(graded, root):
    """The cells marked skip-when-grading are stubbed out in the graded notebook, and the
    feedback page says how many were not run and why."""
    chapter, _, out = graded
    marked = marked_ids(json.loads(release_path(root, chapter).read_text(encoding="utf-8")))
    graded_nb = json.loads(
        (out / "nbgrader" / "autograded" / "solution" / chapter / f"{chapter}.ipynb").read_text(
            encoding="utf-8"
        )
    )
    stubbed = [c for c in graded_nb["cells"] if c.get("id") in marked]
    assert len(stubbed) == len(marked)
    assert all("".join(c["source"]) == STUB and not c.get("outputs") for c in stubbed)
    page = (out / "feedback" / "solution" / f"{chapter}.html").read_text(encoding="utf-8")
    said = re.search(r"(\d+) experiment cells? (was|were) not run for grading", page)
    assert (int(said.group(1)) if said else 0) == len(marked)


def test_every_chapter_catalogues_at_least_four_mistakes():
    for chapter, mistakes in MUTANTS.items():
        assert len(mistakes) >= 4, chapter
        assert UNCATALOGUED[chapter], f"{chapter}: no wrong answer outside the catalogue"


def test_solution_and_untouched_notebook_are_never_diagnosed(graded):
    assert _tags(graded, "solution") == []
    assert _tags(graded, "untouched") == []


MAX_PACKS = max(len(packs(v)) for v in MUTANTS.values())


def _pack(graded, index):
    chapter = graded[0]
    groups = packs(MUTANTS[chapter])
    if index >= len(groups):
        pytest.skip(f"{chapter} has {len(groups)} submissions of mistakes")
    return f"mistakes-{index + 1}", groups[index]


def _cell_tags(graded, student) -> dict[str, set[str]]:
    """Graded test cell -> the mistakes its output names, in the autograded notebook."""
    chapter, _, out = graded
    path = out / "nbgrader" / "autograded" / student / chapter / f"{chapter}.ipynb"
    return tags_by_cell(nbformat.read(path, as_version=4))


@pytest.mark.parametrize("index", range(MAX_PACKS))
def test_each_mistake_loses_points_on_its_own_exercise_only(graded, index):
    student, pack = _pack(graded, index)
    scores = _scores(graded, student)
    broken = set().union(*(m.breaks for m in pack))
    assert broken <= set(scores), f"unknown test cells in {broken - set(scores)}"
    for m in pack:
        for cell in m.breaks:
            row = scores[cell]
            assert row.points < row.max_points, f"{m.name}: {cell} still earns full marks"
    for cell, row in scores.items():
        if cell not in broken:
            assert row.points == row.max_points, (
                f"{student} ({', '.join(m.name for m in pack)}): {cell} lost points "
                f"({row.points}/{row.max_points})"
            )


@pytest.mark.parametrize("index", range(MAX_PACKS))
def test_each_mistake_is_named_where_it_fails_and_in_the_feedback(graded, index):
    student, pack = _pack(graded, index)
    tags = _cell_tags(graded, student)
    for m in pack:
        for cell in m.breaks:
            assert tags.get(cell) == {m.name}, f"{m.name}: {cell} names {tags.get(cell)}"
    broken = set().union(*(m.breaks for m in pack))
    assert set(tags) <= broken, f"mistakes named in cells that passed: {tags}"
    assert set(_tags(graded, student)) == {m.name for m in pack}


def test_wrong_answers_outside_the_catalogue_get_no_diagnosis(graded):
    chapter = graded[0]
    for m in UNCATALOGUED[chapter]:
        scores = _scores(graded, f"wrong-{m.name}")
        assert all(scores[cell].points < scores[cell].max_points for cell in m.breaks), m.name
        assert _tags(graded, f"wrong-{m.name}") == [], f"{m.name} got a false diagnosis"
        assert _cell_tags(graded, f"wrong-{m.name}") == {}


def test_the_class_report_counts_each_mistake(graded):
    """The instructor's report: every catalogued mistake counted once, for its submission."""
    import csv

    chapter, _, out = graded
    with open(out / "report" / "mistakes.csv", encoding="utf-8") as f:
        rows = {r["mistake"]: r for r in csv.DictReader(f) if r["chapter"] == chapter}
    for i, pack in enumerate(packs(MUTANTS[chapter])):
        for m in pack:
            assert m.name in rows, f"the report does not count {m.name}"
            assert rows[m.name]["students"].split() == [f"mistakes-{i + 1}"], rows[m.name]
            assert rows[m.name]["says"] == m.says
    assert set(rows) == {m.name for m in MUTANTS[chapter]}
    assert (out / "report" / "index.html").is_file()


def test_the_class_report_times_every_submission_that_ran(graded):
    """The report's slowest submissions: a time for every notebook a kernel ran, slowest
    first (the broken file ran none)."""
    import csv

    chapter, by_student, out = graded
    with open(out / "report" / "times.csv", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["chapter"] == chapter]
    assert {r["student"] for r in rows} == set(by_student) - {"broken"}
    seconds = [float(r["seconds"]) for r in rows]
    assert seconds == sorted(seconds, reverse=True) and seconds[-1] > 0
    with open(out / "report" / "times.csv", encoding="utf-8") as f:
        timed = sum(1 for _ in csv.DictReader(f))  # every chapter's
    page = (out / "report" / "index.html").read_text(encoding="utf-8")
    assert f"{timed} submissions timed" in page


def test_submissions_are_valid_notebooks(root):
    for chapter in MUTANTS:
        nbformat.validate(solved_notebook(root, chapter))
