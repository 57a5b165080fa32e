"""The experiment cells grading skips (``autograder/experiments.py``, issue 29): a marked
cell is stubbed out when a submission is staged, and a cell a score could depend on can
never be marked: the release (and grading) fails with an error naming it."""

import copy
import json

import nbformat
import pytest

from autograder.cells import grade_id, is_graded
from autograder.chapters import CourseError, release_path, solution_path
from autograder.experiments import (
    STUB,
    TAG,
    bound_names,
    check_marked,
    read_names,
    skip_marked,
    stub_marked_in,
)
from autograder.outfolder import Out
from autograder.release import validate_solution_notebook
from autograder.restore import stage

CHAPTER = "01_rnn_bottleneck"


def code(source: str, tags=(), **nbgrader):
    cell = nbformat.v4.new_code_cell(source)
    if tags:
        cell.metadata["tags"] = list(tags)
    if nbgrader:
        cell.metadata["nbgrader"] = {"grade_id": nbgrader.pop("grade_id"), **nbgrader}
    return cell


def notebook(*cells):
    return nbformat.v4.new_notebook(cells=list(cells))


def test_what_a_cell_binds_and_reads():
    cell = code(
        "import numpy as np\nfrom torch import nn\nmodel, history = train()\n"
        "cfg.steps = 3\nresults['a'] = 1\nfor step in range(3):\n    pass\n"
        "def plot(x):\n    inner = x\n    return inner\nclass Box: pass\n%matplotlib inline\n"
    )
    assert bound_names(cell) == {"np", "nn", "model", "history", "cfg", "results", "step"} | {
        "plot",
        "Box",
    }  # `inner` is the function's own; the magic line is ignored
    assert read_names(code("def f():\n    return model.x + cfg\n")) == {"model", "cfg"}


def test_a_trailing_experiment_may_be_marked_and_a_later_experiment_may_read_it():
    nb = notebook(
        code("x = 1", grade_id="setup", locked=True),
        code("def f(): return x", grade_id="f", solution=True),
        code("assert f() == 1", grade_id="test_f", grade=True, points=1, locked=True),
        code("model = train()", tags=[TAG]),
        code("plot(model)", tags=[TAG]),
    )
    check_marked(nb, "nb")


def test_a_marked_cell_a_later_graded_cell_reads_is_refused():
    nb = notebook(
        code("history = train()", tags=[TAG]),
        code("assert history[-1] < 1", grade_id="test_loss", grade=True, points=1, locked=True),
    )
    with pytest.raises(CourseError, match=r"test_loss, which runs when grading, reads history"):
        check_marked(nb, "nb")


def test_a_marked_cell_that_changes_what_a_later_cell_reads_is_refused():
    nb = notebook(
        code("cfg.steps = 10", tags=[TAG]),
        code("def run():\n    return cfg.steps", grade_id="run", solution=True),
    )
    with pytest.raises(CourseError, match="run, which runs when grading, reads cfg"):
        check_marked(nb, "nb")


@pytest.mark.parametrize(
    "cell",
    [
        code("def f(): pass", tags=[TAG], grade_id="f", solution=True),
        code("assert True", tags=[TAG], grade_id="test_f", grade=True, points=1, locked=True),
    ],
)
def test_an_exercise_or_a_test_cell_is_never_marked(cell):
    with pytest.raises(CourseError, match="an exercise or a test cell: it must run"):
        check_marked(notebook(cell), "nb")


def test_the_release_refuses_a_marked_cell_a_graded_test_depends_on(root, tmp_path):
    """The chapter's ``data`` cell (the settings and data every test and exercise uses),
    marked: the release fails, naming the cell and the first graded cell that reads it."""
    nb = nbformat.read(solution_path(root, CHAPTER), as_version=4)
    data = next(c for c in nb.cells if grade_id(c) == "data")
    data.metadata.setdefault("tags", []).append(TAG)
    path = tmp_path / f"{CHAPTER}.ipynb"
    nbformat.write(nb, path)
    with pytest.raises(CourseError, match=rf"{path}: cell \d+ \(data\) is marked {TAG}, but "):
        validate_solution_notebook(path)


def test_the_chapters_marked_cells_are_ones_no_score_needs(root):
    """Every chapter's solution passes the check as committed; no exercise or test cell is
    marked in any of them."""
    for path in sorted((root / "solutions").glob("*/*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        check_marked(nb, str(path))
        released = nbformat.read(release_path(root, path.stem), as_version=4)
        assert {c.id for c in nb.cells if TAG in c.metadata.get("tags", [])} == {
            c.id for c in released.cells if TAG in c.metadata.get("tags", [])
        }, f"{path.stem}: the release does not keep the marks"
        assert not any(is_graded(c) and TAG in c.metadata.get("tags", []) for c in nb.cells)


def test_staging_stubs_the_marked_cells_out_and_keeps_the_students_cells(tmp_path):
    released = notebook(
        code("x = 1", grade_id="setup", locked=True),
        code("def f(): return x", grade_id="f", solution=True),
        code("model = train()", tags=[TAG]),
    )
    for i, cell in enumerate(released.cells):
        cell.id = f"c{i}"
    out = Out(tmp_path / "out")
    out.released("ch").parent.mkdir(parents=True)
    nbformat.write(released, out.released("ch"))
    submitted = copy.deepcopy(released)
    submitted.cells[2].source = "model = train(steps=10**9)  # the student's own change"
    submitted.cells[2].outputs = [nbformat.v4.new_output("stream", text="step 1")]
    submitted.cells.append(code("print('mine')"))  # a cell of the student's own
    path = tmp_path / "submitted.ipynb"
    nbformat.write(submitted, path)
    stage(out, path, "alice", "ch", {})
    staged = json.loads(out.submitted("alice", "ch").read_text(encoding="utf-8"))
    sources = ["".join(c["source"]) for c in staged["cells"]]
    assert sources[2] == STUB and staged["cells"][2]["outputs"] == []
    assert sources[1] == "def f(): return x" and sources[3] == "print('mine')"
    assert skip_marked(staged, json.loads(out.released("ch").read_text())) == 1


def test_a_locked_experiment_is_stubbed_and_not_said_to_be_put_back(tmp_path):
    """A locked marked cell is a stub in the release ``grade`` makes (nbgrader puts locked
    cells back from there); the student's copy of it, as released to them, is no edit."""
    released = notebook(
        code("x = 1", grade_id="setup", locked=True),
        code("model = train()", tags=[TAG], grade_id="experiment_train", locked=True),
    )
    for i, cell in enumerate(released.cells):
        cell.id = f"c{i}"
    released.cells[1].metadata.nbgrader["checksum"] = "of the source"
    path = tmp_path / "submitted.ipynb"
    nbformat.write(released, path)  # the student's notebook: the cell as released to them
    out = Out(tmp_path / "out")
    out.released("ch").parent.mkdir(parents=True)
    released.cells[1].metadata.nbgrader["checksum"] = "of the stub"  # nbgrader's, of the stub
    nbformat.write(released, out.released("ch"))
    stub_marked_in(out.released("ch"))  # as grade prepares its release
    assert stage(out, path, "alice", "ch", {}) is None  # nothing put back
    staged = json.loads(out.submitted("alice", "ch").read_text(encoding="utf-8"))
    assert "".join(staged["cells"][1]["source"]) == STUB


@pytest.mark.slow
def test_the_next_kernel_is_started_ahead_and_taken_by_the_next_notebook(tmp_path):
    """With ``prestart`` (grading jobs), the kernel of the next notebook starts as soon as a
    notebook has run, importing PyTorch before it answers; the next notebook takes it, and
    a notebook that needs another kernel (other limits) does not."""
    from bwrap import require_bwrap
    from traitlets.config import Config

    from autograder import sandbox
    from autograder.sandbox import GradingExecute

    require_bwrap()
    probe = notebook(code("import sys\nprint('torch' in sys.modules, 'torch' in dir())"))
    probe.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    config = Config()
    config.GradingExecute.prestart = True
    config.GradingExecute.shutdown_kernel = "immediate"

    def run(config) -> str:
        nb, _ = GradingExecute(config=config).preprocess(
            copy.deepcopy(probe), {"metadata": {"path": str(tmp_path)}}
        )
        return nb.cells[0].outputs[0]["text"].strip()

    try:
        assert run(config) == "False False"  # a kernel started for it: nothing imported
        spare = sandbox._Spare.km
        assert spare is not None and run_sync_alive(spare)
        assert run(config) == "True False"  # the spare: PyTorch imported, no name bound
        assert sandbox._Spare.km is not spare and not run_sync_alive(spare)  # used, shut
        other = Config(config)
        other.SandboxedKernelManager.tmp_size = 64 * 2**20  # another sandbox: not the spare
        assert run(other) == "False False"
    finally:
        sandbox._Spare.discard()


def run_sync_alive(km) -> bool:
    from jupyter_core.utils import run_sync

    return run_sync(km.is_alive)()
