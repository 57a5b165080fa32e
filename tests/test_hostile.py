"""Hostile submissions, graded in one batch in the sandbox (``autograder/sandbox.py``).

One run of ``python -m autograder grade --workers 2 --cell-timeout 20`` over a class of
chapter 04 made from the solution notebook with hostile edits in solution cells:

- ``hostile``: several edits, each in its own exercise, none of which kills the kernel:
  an endless loop (``causal_mask``), a 30 GB memory bomb (``padding_mask``), 20 MB of
  printing (``dot_product_variance``), a connection to an outside address
  (``attention_outgrows_projections``), and files written next to the notebook, into the course
  folder, into the grader's folders and into /tmp, and reads of the gradebook and of
  another student's notebook (``cross_attention``);
- ``exit`` (``os._exit(1)``) and ``segfault`` (``ctypes.string_at(0)``), which kill their
  kernels;
- ``correct`` (the solution) and ``untouched`` (the student notebook as released), which
  must score exactly what they score on their own: full marks and zero; ``correct``'s folder
  also holds an extra notebook (the untouched one), which must not be graded;
- ``tampered``: its test cells edited (to ``pass``), their nbgrader metadata changed
  (``grade: false``, another grade id, 100 points), copied, and moved above their exercise,
  next to wrong answers where that would earn points: each test is put back as released
  and scores what the code earns (``autograder/restore.py``);
- ``added-cells``: the solution with two code cells of its own, a helper above every
  exercise that calls ``F.scaled_dot_product_attention`` and a cell below
  ``dot_product_variance`` that rebinds ``check_close``: both flagged for review, against
  the exercise whose operator it is and the exercise above;
- ``snoop``: the solution with a cell of its own at the end that looks for every later
  chapter's answer key from where ``attention_course`` lies (chapter 10's solution
  notebook, reference and mistakes, the tests, the git history) and prints the grader's
  secrets from its environment (``PGPASSWORD``, the gradebook's URL, a token, and
  ``/proc/self/environ``) and its ``HOME``: it finds only its own chapter's material and
  none of the secrets (``autograder/kernel_view.py``);
- ``huge-markdown``: the solution with a markdown cell of 2 MB built to make a parser
  backtrack (``\\begin{``, ``$``, backticks, ``<![``, unclosed tags): graded with full
  marks, and the cell shown cut, as text, on its feedback page (every per-submission step is
  linear in the cell's length: the run's timeout would stop a quadratic one);
- broken hand-ins: ``misnamed`` (the solution as ``<chapter> (1).ipynb``, the only notebook
  in its folder: graded, and said so), ``empty`` (a file of 0 bytes), ``two-notebooks``
  (two notebooks, neither of the chapter's name).

About 36 s on two idle cores, 34 of them the batch (the endless loop costs its 20 s
timeout). Without bwrap the module is skipped, except under CI (``CI=true``), where it
fails.
"""

import copy
import os
import re
import subprocess
import sys
import time
import uuid

import nbformat
import pytest
from bwrap import require_bwrap
from mutants import MUTANTS

from autograder.chapters import solution_path
from autograder.outfolder import CELLS_CSV, read_csv
from autograder.submissions import mutate, solved_notebook, untouched_notebook, write_submission

pytestmark = pytest.mark.slow

CHAPTER = "04_dot_product_attention"
CELL_TIMEOUT_S = 20  # the endless loop costs this; every other cell takes a few seconds
MEGABYTE = 2**20
EXTRA = "scratch.ipynb"  # beside correct's notebook: the untouched one, never graded
MISNAMED = f"{CHAPTER} (1).ipynb"  # a browser's name for a second download


def _append(nb, grade_id: str, code: str, before: bool = False):
    """Add ``code`` at the top (``before``) or the end of the solution cell ``grade_id``."""
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    cell.source = f"{code}\n{cell.source}" if before else f"{cell.source}\n{code}"
    return nb


def _grade_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def _cell(nb, grade_id: str):
    return next(c for c in nb.cells if _grade_id(c) == grade_id)


HELPER = "import torch.nn.functional as F\n\ndef fast(Q, K, V):\n    return F.scaled_dot_product_attention(Q, K, V)"
REBIND = "check_close = lambda *args, **kwargs: None"


def _tampered(root):
    """Wrong answers whose tests were changed to pass them, and right ones whose tests were
    changed to earn more: every test cell scores what the code earns."""
    nb = solved_notebook(root, CHAPTER)
    for m in MUTANTS[CHAPTER]:
        if m.name in ("no-scaling", "padding-off-by-one", "causal-future-leak"):
            nb = mutate(nb, m.cell, m.old, m.new)
    _cell(nb, "test_attention_unmasked").source = "pass"  # edited
    _cell(nb, "test_attention_masked").metadata.nbgrader["grade"] = False
    renamed = _cell(nb, "test_padding_mask")
    renamed.metadata.nbgrader["grade_id"], renamed.source = "mine", "pass"
    test = _cell(nb, "test_causal_mask")
    test.metadata.nbgrader["locked"], test.source = False, "pass"
    _cell(nb, "test_self_attention").metadata.nbgrader["points"] = 100
    test = _cell(nb, "test_cross_attention")  # a copy, as Jupyter makes one: a new cell id
    duplicate = copy.deepcopy(test)
    duplicate.id = "a-copy"
    nb.cells.insert(nb.cells.index(test), duplicate)
    test = _cell(nb, "test_dot_product_variance")  # dragged to the top, a right answer
    nb.cells.remove(test)
    nb.cells.insert(0, test)
    return nb


def _targets(root, out, submissions, marker) -> dict[str, str]:
    """Where the hostile notebook tries to write: what a student might aim at."""
    return {
        "next to itself": f"notes-{marker}.txt",
        "course folder": str(root / f"hostile-{marker}.txt"),
        "its autograded folder": str(
            out / "nbgrader" / "autograded" / "hostile" / CHAPTER / f"hostile-{marker}.txt"
        ),
        "its submission folder": str(submissions / "hostile" / CHAPTER / f"hostile-{marker}.txt"),
        "another student's submission": str(submissions / "correct" / CHAPTER / f"{CHAPTER}.ipynb"),
        "/tmp": f"/tmp/hostile-{marker}.txt",
    }


WRITE = """
for where, target in {targets!r}.items():
    try:
        with open(target, "w") as f:
            f.write("hostile")
        print("WROTE", where, target)
    except OSError as error:
        print("FAILED", where, target, error)
for secret in {secrets!r}:
    try:
        print("READ", secret, len(open(secret, "rb").read()))
    except OSError as error:
        print("COULD NOT READ", secret, error)
"""


# What the grader's environment holds (set for the grading run) and a kernel must not see.
SECRET = "hunter2-" + uuid.uuid4().hex[:8]
GRADER_SECRETS = {
    "PGPASSWORD": SECRET,
    "ATTENTION_COURSE_GRADEBOOK": f"postgresql://grader:{SECRET}@localhost/course",
    "SOME_CLOUD_TOKEN": SECRET,
}
# The later chapter whose answer key the snoop looks for.
LATER = "10_attention_since_2023"

SNOOP = """
import os, pathlib, attention_course
course = pathlib.Path(attention_course.__file__).resolve().parents[1]
print("COURSE", sorted(os.listdir(course)))
print("SOLUTIONS", sorted(os.listdir(course / "solutions")))
print("REFERENCE", sorted(p.name for p in (course / "autograder" / "reference").glob("*.py")))
print("MISTAKES", sorted(p.name for p in (course / "autograder" / "mistakes").glob("*.py")))
for name in {wanted!r}:
    try:
        print("READ", name, open(course / name, encoding="utf-8", errors="replace").read())
    except OSError as error:
        print("COULD NOT READ", name, type(error).__name__)
for name in {variables!r}:
    print("ENV", name, os.environ.get(name, "<unset>"))
print("PROC ENVIRON", open("/proc/self/environ", "rb").read().decode(errors="replace"))
print("HOME", os.environ.get("HOME"), os.path.expanduser("~"))
"""
# 2 MB of what made the grader's parsers take time in the square of a cell's length.
HUGE_MARKDOWN = "".join(
    part * (2**21 // (5 * len(part))) for part in ("<![ x", "<a\n", "\\begin{", "$", "`` ")
)
SNOOPED = [
    f"solutions/{LATER}/{LATER}.ipynb",
    "autograder/reference/since_2023.py",
    "autograder/mistakes/attention_since_2023.py",
    "tests/mutants.py",
    ".git/HEAD",
]


@pytest.fixture(scope="module")
def graded(root, tmp_path_factory):
    require_bwrap()
    submissions = tmp_path_factory.mktemp("hostile-submissions")
    out = tmp_path_factory.mktemp("hostile-graded")
    marker = uuid.uuid4().hex[:12]
    targets = _targets(root, out, submissions, marker)

    write_submission(solved_notebook(root, CHAPTER), submissions, "correct", CHAPTER)
    nbformat.write(untouched_notebook(root, CHAPTER), submissions / "correct" / CHAPTER / EXTRA)
    write_submission(untouched_notebook(root, CHAPTER), submissions, "untouched", CHAPTER)
    folder = submissions / "misnamed" / CHAPTER
    folder.mkdir(parents=True)
    nbformat.write(solved_notebook(root, CHAPTER), folder / MISNAMED)
    (submissions / "empty" / CHAPTER).mkdir(parents=True)
    (submissions / "empty" / CHAPTER / f"{CHAPTER}.ipynb").write_bytes(b"")
    (submissions / "two-notebooks" / CHAPTER).mkdir(parents=True)
    for name in ("a.ipynb", "b.ipynb"):
        nbformat.write(
            solved_notebook(root, CHAPTER), submissions / "two-notebooks" / CHAPTER / name
        )

    nb = solved_notebook(root, CHAPTER)
    _append(nb, "causal_mask", "while True:\n    pass", before=True)
    bomb = "bomb = [torch.empty(2**30, dtype=torch.uint8) for _ in range(30)]  # 30 GiB"
    _append(nb, "padding_mask", bomb, before=True)
    _append(nb, "dot_product_variance", 'print("x" * 20_000_000)')
    connect = 'import socket\nsocket.create_connection(("1.1.1.1", 80), timeout=60)'
    _append(nb, "attention_outgrows_projections", connect)
    # what it must not read: the gradebook (the hidden tests), another student's notebook
    secrets = [str(out / "gradebook.db"), targets["another student's submission"]]
    _append(nb, "cross_attention", WRITE.format(targets=targets, secrets=secrets))
    write_submission(nb, submissions, "hostile", CHAPTER)

    write_submission(_tampered(root), submissions, "tampered", CHAPTER)
    nb = solved_notebook(root, CHAPTER)
    nb.cells.insert(2, nbformat.v4.new_code_cell(HELPER))
    at = next(i for i, c in enumerate(nb.cells) if _grade_id(c) == "dot_product_variance")
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell(REBIND))
    write_submission(nb, submissions, "added-cells", CHAPTER)

    nb = solved_notebook(root, CHAPTER)
    snoop = SNOOP.format(wanted=SNOOPED, variables=sorted(GRADER_SECRETS))
    nb.cells.append(nbformat.v4.new_code_cell(snoop))
    write_submission(nb, submissions, "snoop", CHAPTER)

    nb = solved_notebook(root, CHAPTER)
    nb.cells.append(nbformat.v4.new_markdown_cell(HUGE_MARKDOWN))
    write_submission(nb, submissions, "huge-markdown", CHAPTER)

    nb = _append(solved_notebook(root, CHAPTER), "padding_mask", "import os\nos._exit(1)")
    write_submission(nb, submissions, "exit", CHAPTER)
    segfault = "import ctypes\nctypes.string_at(0)"
    nb = _append(solved_notebook(root, CHAPTER), "padding_mask", segfault)
    write_submission(nb, submissions, "segfault", CHAPTER)

    command = [sys.executable, "-m", "autograder", "grade", str(submissions), "--out", str(out)]
    command += ["--workers", "2", "--cell-timeout", str(CELL_TIMEOUT_S)]
    start = time.perf_counter()
    env = {**os.environ, **GRADER_SECRETS}
    result = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=600, env=env)
    seconds = time.perf_counter() - start
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    by_student = {}
    for row in read_csv(out / CELLS_CSV):
        by_student.setdefault(row.student, {})[row.cell] = row
    print(f"graded the hostile class in {seconds:.0f} s")
    return {
        "root": root,
        "out": out,
        "submissions": submissions,
        "targets": targets,
        "secrets": secrets,
        "rows": by_student,
        "stdout": result.stdout,
        "stderr": result.stderr,
        "seconds": seconds,
    }


def _rows(graded, student):
    assert student in graded["rows"], f"{student} is missing from {CELLS_CSV}"
    return graded["rows"][student]


def _autograded(graded, student):
    path = graded["out"] / "nbgrader" / "autograded" / student / CHAPTER / f"{CHAPTER}.ipynb"
    return path, nbformat.read(path, as_version=4)


def _cell_text(nb, grade_id: str) -> str:
    """Everything a cell showed: its text output and its errors."""
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    parts = []
    for output in cell.get("outputs", []):
        parts.append(output.get("text", ""))
        if output.output_type == "error":
            parts.append(f"{output.ename}: {output.evalue}")
    return "\n".join(parts)


def test_the_batch_finishes_and_grades_everyone(graded):
    assert set(graded["rows"]) == {
        "correct",
        "untouched",
        "hostile",
        "exit",
        "segfault",
        "misnamed",
        "empty",
        "two-notebooks",
        "tampered",
        "added-cells",
        "snoop",
        "huge-markdown",
    }
    assert "graded 10 submissions" in graded["stdout"]  # empty, two-notebooks: nothing to run


def test_tampered_test_cells_score_what_the_code_earns(graded):
    rows = _rows(graded, "tampered")
    wrong = {"test_attention_unmasked", "test_attention_masked", "test_padding_mask"}
    wrong.add("test_causal_mask")
    assert "mine" not in rows
    for cell, row in rows.items():
        assert row.status == "graded", row
        if cell in wrong:
            assert row.points == 0, row
        else:  # test_self_attention: 3 of 3, not 100; the copy and the dragged cell count once
            assert row.points == row.max_points, row
    assert rows["test_self_attention"].max_points == 3
    said = (
        f"warning: tampered / {CHAPTER}: cells put back as released: test_attention_unmasked "
        "(edited), test_attention_masked (nbgrader metadata changed), test_causal_mask "
        "(nbgrader metadata changed), test_self_attention (nbgrader metadata changed), "
        "test_dot_product_variance (moved above its exercise), test_padding_mask (deleted, or "
        "its nbgrader metadata removed); run ungraded, their nbgrader metadata removed: a cell "
        "with the grade id 'mine', a copy of test_cross_attention"
    )
    assert said in graded["stderr"]


def test_added_cells_are_scanned(graded):
    rows = _rows(graded, "added-cells")
    flagged = {"test_attention_unmasked", "test_attention_masked", "test_dot_product_variance"}
    for cell, row in rows.items():
        if cell in flagged:
            assert row.points == 0 and row.status.startswith("flagged for review: "), row
            assert "in a code cell the student added below " in row.status, row
        else:
            assert row.status == "graded" and row.points == row.max_points, row


def test_broken_hand_ins_get_a_clear_status(graded):
    for row in _rows(graded, "misnamed").values():  # the only notebook in its folder
        assert row.status == "graded" and row.points == row.max_points > 0, row
    for row in _rows(graded, "empty").values():
        assert row.points == 0 and row.status.startswith("unreadable: "), row
        assert "is an empty file (0 bytes)" in row.status, row
    for row in _rows(graded, "two-notebooks").values():
        assert row.points == 0 and row.status.startswith("missing: "), row
        assert "it holds a.ipynb, b.ipynb: which one is the submission?" in row.status, row


def test_a_misnamed_or_extra_notebook_is_said_in_the_warnings_and_the_report(graded):
    said = {
        "misnamed": f"graded {MISNAMED}, the only notebook in its folder, as {CHAPTER}.ipynb",
        "correct": f"not graded, beside it: {EXTRA}",
    }
    page = (graded["out"] / "report" / "index.html").read_text(encoding="utf-8")
    for student, note in said.items():
        assert f"warning: {student} / {CHAPTER}: {note}" in graded["stderr"]
        assert f"{student} / {CHAPTER}: {note}" in page


def test_the_correct_and_the_untouched_notebook_score_as_alone(graded):
    for row in _rows(graded, "correct").values():
        assert row.status == "graded" and row.points == row.max_points > 0, row
    for row in _rows(graded, "untouched").values():
        assert row.status == "graded" and row.points == 0, row


@pytest.mark.parametrize("student", ["exit", "segfault"])
def test_a_killed_kernel_gets_zero_on_every_cell_with_a_reason(graded, student):
    for row in _rows(graded, student).values():
        assert row.points == 0 and row.status.startswith("not graded: the kernel died"), row


def test_each_hostile_edit_costs_its_own_exercise_only(graded):
    rows = _rows(graded, "hostile")
    lost = {
        "test_causal_mask": "graded",  # the endless loop: interrupted, causal_mask undefined
        "test_padding_mask": "graded",  # the memory bomb: the allocation failed
        "test_cross_attention": "flagged for review",  # it writes files (the scan)
    }
    for cell, row in rows.items():
        if cell in lost:
            assert row.points == 0 and row.status.startswith(lost[cell]), row
        else:
            assert row.status == "graded" and row.points == row.max_points, row


def test_an_endless_loop_is_interrupted_and_later_cells_run(graded):
    _, nb = _autograded(graded, "hostile")
    shown = _cell_text(nb, "causal_mask")
    assert "KeyboardInterrupt" in shown and "CellTimeoutError" in shown, shown
    assert "NameError" in _cell_text(nb, "test_causal_mask")


def test_a_memory_bomb_fails_to_allocate(graded):
    _, nb = _autograded(graded, "hostile")
    shown = _cell_text(nb, "padding_mask")
    assert "can't allocate memory" in shown or "MemoryError" in shown, shown


def test_megabytes_of_output_are_cut(graded):
    path, nb = _autograded(graded, "hostile")
    feedback = graded["out"] / "feedback" / "hostile" / f"{CHAPTER}.html"
    assert path.stat().st_size < MEGABYTE, f"{path} has {path.stat().st_size} bytes"
    assert feedback.stat().st_size < MEGABYTE, f"{feedback} has {feedback.stat().st_size} bytes"
    shown = _cell_text(nb, "dot_product_variance")
    assert "output cut by the grader" in shown and "x" * 1000 in shown


def test_the_network_is_unreachable(graded):
    _, nb = _autograded(graded, "hostile")
    shown = _cell_text(nb, "attention_outgrows_projections")
    assert "Network is unreachable" in shown, shown  # at once: no timeout, no hang


def test_files_written_stay_in_the_sandbox(graded):
    _, nb = _autograded(graded, "hostile")
    shown = _cell_text(nb, "cross_attention")
    for where, target in graded["targets"].items():
        if where in ("next to itself", "/tmp"):  # the kernel's private folder: thrown away
            assert f"WROTE {where} {target}" in shown, shown
        else:
            assert f"FAILED {where} {target}" in shown, shown
    assert "Read-only file system" in shown
    for secret in graded["secrets"]:
        assert f"COULD NOT READ {secret}" in shown, shown
    root, out, submissions = graded["root"], graded["out"], graded["submissions"]
    name = os.path.basename(graded["targets"]["/tmp"])
    assert not (root / name).exists() and not os.path.exists(graded["targets"]["/tmp"])
    for folder in (out, submissions):
        found = [p for p in folder.rglob("*") if "hostile-" in p.name or "notes-" in p.name]
        assert found == [], found
    other = submissions / "correct" / CHAPTER / f"{CHAPTER}.ipynb"
    nbformat.validate(nbformat.read(other, as_version=4))


def test_grade_without_bwrap_says_what_to_install(root, tmp_path):
    write_submission(untouched_notebook(root, CHAPTER), tmp_path / "in", "alice", CHAPTER)
    command = [sys.executable, "-m", "autograder", "grade", str(tmp_path / "in")]
    command += ["--out", str(tmp_path / "out")]
    no_bwrap = dict(os.environ, PATH=os.path.dirname(sys.executable))
    result = subprocess.run(command, cwd=root, capture_output=True, text=True, env=no_bwrap)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "bwrap is missing" in result.stderr
    assert "apt-get install -y bubblewrap" in result.stderr and "--no-sandbox" in result.stderr
    assert not (tmp_path / "out" / "nbgrader").exists()  # nothing graded


def _snooped(graded) -> str:
    """What the snoop's last cell printed."""
    _, nb = _autograded(graded, "snoop")
    return "\n".join(o.get("text", "") for o in nb.cells[-1].get("outputs", []))


def test_a_kernel_sees_only_its_own_chapters_material(graded):
    shown = _snooped(graded)
    assert "SOLUTIONS ['04_dot_product_attention']" in shown, shown
    assert "REFERENCE ['__init__.py', 'attention.py']" in shown, shown
    assert "MISTAKES ['__init__.py', 'dot_product_attention.py']" in shown, shown
    listed = re.search(r"COURSE (\[.*\])", shown).group(1)
    for name in ("tests", "benchmarks", "book", ".git", "notebooks", "_build"):
        assert repr(name) not in listed, listed
    for name in SNOOPED:
        assert f"COULD NOT READ {name} FileNotFoundError" in shown, shown


def test_no_later_chapters_file_reaches_a_feedback_page(graded, root):
    page = (graded["out"] / "feedback" / "snoop" / f"{CHAPTER}.html").read_text(encoding="utf-8")
    assert "COULD NOT READ" in page  # the cell's output is on the page ...

    def code_lines(path) -> set[str]:
        nb = nbformat.read(path, as_version=4)
        return {
            line.strip()
            for cell in nb.cells
            if cell.cell_type == "code"
            for line in cell.source.splitlines()
            if len(line.strip()) > 30
        }

    # chapter 10's code (solutions, hidden tests) but for the set-up lines every chapter has
    solution_lines = code_lines(root / SNOOPED[0]) - code_lines(solution_path(root, CHAPTER))
    leaked = [line for line in solution_lines if line in page]  # ... but nothing of chapter 10
    assert leaked == [], leaked[:5]


def test_no_secret_of_the_graders_environment_reaches_a_kernel(graded):
    shown = _snooped(graded)
    for name in GRADER_SECRETS:
        assert f"ENV {name} <unset>" in shown, shown
    assert SECRET not in shown
    assert "PROC ENVIRON" in shown and "HOME /tmp /tmp" in shown, shown
    page = (graded["out"] / "feedback" / "snoop" / f"{CHAPTER}.html").read_text(encoding="utf-8")
    assert SECRET not in page


def test_a_2_mb_markdown_cell_is_graded_and_shown_cut_as_text(graded):
    rows = _rows(graded, "huge-markdown")
    assert all(r.status == "graded" and r.points == r.max_points for r in rows.values()), rows
    page = graded["out"] / "feedback" / "huge-markdown" / f"{CHAPTER}.html"
    assert page.stat().st_size < 2**21  # cut, not copied whole
    text = page.read_text(encoding="utf-8")
    assert "&lt;![ x" in text and "<![ x" not in text  # the student's text, as text
