"""``python -m autograder validate NOTEBOOK``: the student's check before handing in.

Two notebooks of chapter 04 run, each once, through the command as a student types it (in
a folder outside the course, which is then the installed one): the solution, and one
notebook that holds a bit of everything the check reports (an exercise not done, a
mistake a visible test catches, an edited and a deleted test cell, code the scan flags, a
kernel that dies). The rest reads what they printed, or needs no kernel."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder import validate as validate_module
from autograder.cells import grade_id
from autograder.chapters import INSTALLED_ROOT, solution_path
from autograder.cli import main
from autograder.nbgrader_settings import CELL_TIMEOUT_S
from autograder.submissions import mutate, solved_notebook, untouched_notebook

pytestmark = pytest.mark.slow

CHAPTER = "04_dot_product_attention"
FILE = f"{CHAPTER}.ipynb"


def run_validate(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "autograder", "validate", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
    )


def a_bit_of_everything(root: Path):
    """The solution with causal_mask not done, padding_mask's off-by-one, an edited and a
    deleted test cell, a cell of the student's own that writes a file, and a last cell that
    kills the kernel."""
    nb = solved_notebook(root, CHAPTER)
    stubs = {grade_id(c): c.source for c in untouched_notebook(root, CHAPTER).cells}
    next(c for c in nb.cells if grade_id(c) == "causal_mask").source = stubs["causal_mask"]
    mutate(nb, "padding_mask", "positions[None, :] < lengths", "positions[None, :] <= lengths")
    mutate(nb, "test_dot_product_variance", '"""Check', 'pass\n"""Check')
    nb.cells = [c for c in nb.cells if grade_id(c) != "test_cross_attention"]
    nb.cells.append(nbformat.v4.new_code_cell("open('answers.txt', 'w').write('42')"))
    nb.cells.append(nbformat.v4.new_code_cell("import os\nos.kill(os.getpid(), 9)"))
    return nb


@pytest.fixture(scope="module")
def runs(root, tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """The command's result on the solution and on a bit of everything, each run once."""
    found = {}
    for name, nb in [
        ("solution", solved_notebook(root, CHAPTER)),
        ("everything", a_bit_of_everything(root)),
    ]:
        folder = tmp_path_factory.mktemp(name)
        nbformat.write(nb, folder / FILE)
        found[name] = run_validate(folder, FILE)
    return found


def sandboxed() -> bool:
    return shutil.which("bwrap") is not None


def test_the_solution_is_ready_to_hand_in(runs):
    result = runs["solution"]
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert out.splitlines()[-1].startswith("READY: all 7 exercises done, every visible test")
    assert "NOT DONE" not in out and "FAILS" not in out and "Flagged" not in out
    assert out.count(" ok ") == 7
    how = "in the grader's sandbox" if sandboxed() else "WITHOUT the grader's sandbox"
    assert how in " ".join(out.split())


def test_the_run_is_timed_against_the_cell_timeout(runs):
    out = " ".join(runs["solution"].stdout.split())
    timing = re.search(
        r"Time: ([\d.]+) s in all.*slowest cell: (.+?), ([\d.]+) s of the (\d+) s", out
    )
    assert timing, out
    total, slowest, limit = float(timing[1]), float(timing[3]), int(timing[4])
    assert 0 < slowest <= total and limit == CELL_TIMEOUT_S


def test_an_exercise_not_done_is_listed(runs):
    result = runs["everything"]
    assert result.returncode == 1
    assert re.search(r"causal_mask +NOT DONE +unchanged from the release", result.stdout)
    assert "test_causal_mask" not in result.stdout  # its failing test is no news


def test_a_failing_visible_test_is_named_with_its_exercise_and_error(runs):
    out = runs["everything"].stdout
    assert re.search(r"padding_mask +FAILS +test_padding_mask", out)
    failing = out.split("Visible tests that fail (1):")[1]
    assert failing.lstrip().startswith("test_padding_mask, of exercise padding_mask:")
    assert "Check that padding_mask is True" in failing
    assert "AssertionError: padding_mask([2, 4], max_len=5) differs" in failing
    assert "padding-off-by-one" in failing  # the diagnosis of the known mistake


def test_changed_and_deleted_test_cells_are_said_to_be_put_back(runs):
    out = runs["everything"].stdout
    put_back = out.split("Changed or deleted cells that grading puts back (2):")[1]
    lines = [line.strip() for line in put_back.strip().splitlines()[:2]]
    assert lines == [
        "test_dot_product_variance (edited)",
        "test_cross_attention (deleted, or its nbgrader metadata removed)",
    ]
    # both ran as released: the deleted one was put back below its exercise, and passes
    assert re.search(r"cross_attention +ok", out) and re.search(r"dot_product_variance +ok", out)


def test_code_the_scan_flags_is_said_to_withhold_points(runs):
    out = " ".join(runs["everything"].stdout.split())
    assert "Flagged for review (1): attention_outgrows_projections, line 1:" in out
    assert "opens a file for writing" in out
    assert "(test_attention_outgrows_projections) are withheld" in out
    assert "until your instructor has read the code and accepted it" in out


def test_a_kernel_that_dies_stops_the_run_as_it_stops_grading(runs):
    out = " ".join(runs["everything"].stdout.split())
    assert "The run stopped: the kernel died running cell" in out
    assert "the notebook would not be graded" in out


def test_the_summary_is_one_line_at_the_end(runs):
    last = runs["everything"].stdout.splitlines()[-1]
    assert last == (
        "NEEDS ATTENTION: 1 exercise not done, 1 visible test cell failing, the run stopped, "
        "2 cells put back, 1 flag for review."
    )


def hidden_test_lines(root: Path) -> list[str]:
    """The lines of the solution notebook's hidden-test blocks that it shows nowhere else."""
    hidden, shown = set(), set()
    for cell in nbformat.read(solution_path(root, CHAPTER), as_version=4).cells:
        inside = False
        for line in cell.source.splitlines():
            if "BEGIN HIDDEN TESTS" in line or "END HIDDEN TESTS" in line:
                inside = "BEGIN" in line
                continue
            (hidden if inside else shown).add(line.strip())
    return sorted(line for line in hidden - shown if len(line) >= 12)


def test_the_hidden_tests_are_never_shown(root, runs):
    lines = hidden_test_lines(root)
    assert len(lines) > 20  # the test sees them
    for result in runs.values():
        out = result.stdout + result.stderr
        assert "HIDDEN TESTS" not in out
        shown = [line for line in lines if line in out]
        assert not shown, f"validate showed hidden tests: {shown}"


# ------------------------------------------------------------------------- no kernel


def test_the_untouched_notebook_lists_every_exercise_as_not_done(
    root, tmp_path, monkeypatch, capsys
):
    """Without running it (its run is that of a bit of everything, every exercise not
    done), and here without bwrap: the check says that it ran unsandboxed."""
    monkeypatch.setattr(validate_module, "execute", lambda nb, sandbox, chapter: ({}, None))
    monkeypatch.setattr(validate_module, "bwrap_path", lambda: None)
    nbformat.write(untouched_notebook(root, CHAPTER), tmp_path / "my attempt.ipynb")
    assert main(["validate", str(tmp_path / "my attempt.ipynb")]) == 1  # chapter from cells
    out = capsys.readouterr().out
    assert len(re.findall(r"NOT DONE +unchanged from the release", out)) == 7
    said = "WITHOUT the grader's sandbox: bwrap (bubblewrap) is not installed here"
    assert said in " ".join(out.split())
    assert out.splitlines()[-1] == "NEEDS ATTENTION: 7 exercises not done."


def test_a_slow_cell_is_said_to_be_close_to_the_timeout():
    found = validate_module.Validation(Path(FILE), CHAPTER, None, ["a"], {"a": []})
    found.seconds, found.slowest = 100.0, ("cell 3 ('train()')", 95.0)
    out = " ".join(validate_module.text(found).split())
    assert "slowest cell: cell 3 ('train()'), 95.0 s of the 180 s a cell may run" in out
    assert "close to the limit" in out and out.endswith("NEEDS ATTENTION: a slow cell.")


def test_outside_the_course_the_installed_course_is_used(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert validate_module.course_root(None) == INSTALLED_ROOT


@pytest.mark.parametrize(
    ("name", "content", "args", "error"),
    [
        ("missing.ipynb", None, [], "no such file"),
        ("notes.ipynb", "not JSON at all", [], "is not a Jupyter notebook"),
        ("list.ipynb", json.dumps([1, 2]), [], "is not a Jupyter notebook"),
        (FILE, "solution", ["--chapter", "99_nonsense"], "unknown chapter '99_nonsense'"),
        ("mine.ipynb", "empty", [], "cannot tell which chapter"),
    ],
)
def test_bad_input_is_a_clear_error(root, tmp_path, capsys, name, content, args, error):
    path = tmp_path / name
    if content == "solution":
        nbformat.write(solved_notebook(root, CHAPTER), path)
    elif content == "empty":
        nbformat.write(nbformat.v4.new_notebook(), path)
    elif content is not None:
        path.write_text(content)
    assert main(["--course-dir", str(root), "validate", str(path), *args]) == 2
    said = capsys.readouterr()
    assert said.err.startswith("error: ") and error in said.err and not said.out
