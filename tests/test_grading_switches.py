"""The grader's speed-ups (autograder/speedups.py): each can be turned off for the benchmark
by name, a wrong name is an error, and turning one off changes what it names only."""

import copy

import nbformat
import pytest
from jinja2 import pass_context
from nbconvert import HTMLExporter
from nbconvert.filters.highlight import Highlight2HTML

from autograder import feedback, speedups
from autograder.chapters import solution_path
from autograder.job import GradingSettings, grading_config
from autograder.outfolder import Out


@pytest.fixture
def without(monkeypatch):
    def turn_off(*names):
        monkeypatch.setenv(speedups.WITHOUT, ",".join(names))

    monkeypatch.delenv(speedups.WITHOUT, raising=False)
    return turn_off


def test_every_switch_is_on_unless_named(without):
    assert all(speedups.on(name) for name in speedups.SWITCHES)
    without("validate-once", " kernel-ahead ")
    assert not speedups.on("validate-once") and not speedups.on("kernel-ahead")
    assert speedups.on("page-parts-once")


def test_a_name_that_is_no_switch_is_an_error(without):
    without("validate-twice")
    with pytest.raises(ValueError, match="validate-twice.*the switches are"):
        speedups.on("validate-once")
    with pytest.raises(KeyError, match="not one of the switches"):
        speedups.on("warp-drive")


def test_the_grading_configuration_follows_the_switches(without, tmp_path):
    settings = GradingSettings(Out(tmp_path / "out"), "sqlite://", False, chapters=("03_convs2s",))
    config = grading_config(settings, prestart=True)
    assert config.GradingExecute.prestart and config.Exporter.optimistic_validation
    assert config.SandboxedKernelManager.torch_imports_ahead
    assert config.SandboxedKernelManager.caches_ahead
    assert config.SandboxedKernelManager.chapters_ahead == ["03_convs2s"]
    without(
        "kernel-ahead", "validate-once", "torch-imports-ahead", "caches-ahead", "chapters-ahead"
    )
    config = grading_config(settings, prestart=True)
    assert not config.GradingExecute.prestart and not config.Exporter.optimistic_validation
    assert not config.SandboxedKernelManager.torch_imports_ahead
    assert not config.SandboxedKernelManager.caches_ahead
    assert config.SandboxedKernelManager.chapters_ahead == []
    assert not grading_config(settings, prestart=False).GradingExecute.prestart


def test_remembered_highlighting_is_the_highlighting_of_every_cell(root):
    """What the feedback page shows of each code cell, with its metadata (nbgrader's, and a
    cell magic's language), is the same whether the HTML was remembered or made."""
    nb = nbformat.read(solution_path(root, "04_dot_product_attention"), as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code"]
    cells[0].metadata["magics_language"] = "bash"
    make = Highlight2HTML(pygments_lexer="ipython3")
    remembered = feedback._remembered(make, "ipython3")
    for cell in cells:
        made = make(cell.source, None, cell.metadata)
        assert remembered(cell.source, None, cell.metadata) == made
        assert remembered(cell.source, None, dict(cell.metadata)) == made  # remembered now
    bash = remembered(cells[0].source, None, cells[0].metadata)
    assert "hl-ipython3" in remembered(cells[0].source) and remembered(cells[0].source) != bash


def test_the_benchmark_gives_each_switchs_share_and_says_when_scores_differ():
    from benchmarks.course_grading import ALL_ON, markdown

    run = {"chapter": "04_dot_product_attention", "students": 10, "wall_s": 30.0,
           "fixed_s": 5.0, "job_s": 2.0, "graded_cells_s": 0.5, "per_submission_s": 1.0,
           "predicted_s": 15.0, "plain_students": 5, "plain_s": 60.0, "scores_differ": {},
           "without": {name: {"wall_s": 40.0, "job_s": 2.5, "same_scores": True}
                       for name in speedups.SWITCHES}}  # fmt: skip
    run["without"]["validate-once"]["same_scores"] = False
    text = markdown([run], "python -m benchmarks.course_grading --switches")
    table = text[text.index("## Each speed-up's share") :]
    assert "| 04_dot_product_attention | 30 (2.00) | 40 (2.50): +25 %" in table
    assert table.count("scores differ") == 1
    assert all(f"`{name}`" in table for name in speedups.SWITCHES)
    # with a run of its own with all on, in a fresh folder as the others, the share is its
    run["without"][ALL_ON] = {"wall_s": 20.0, "job_s": 1.5, "same_scores": True}
    table = markdown([run], "python -m benchmarks.course_grading --switches")
    assert "| 04_dot_product_attention | 20 (1.50) | 40 (2.50): +50 %" in table


def test_the_benchmark_sets_a_measured_class_beside_the_model():
    from benchmarks.course_grading import markdown

    run = {"chapter": "04_dot_product_attention", "students": 10, "wall_s": 30.0,
           "fixed_s": 5.0, "job_s": 2.0, "graded_cells_s": 0.5, "per_submission_s": 1.0,
           "predicted_s": 15.0, "plain_students": 5, "plain_s": 60.0, "scores_differ": {},
           "measured_class": {"students": 100, "wall_s": 126.0, "same_scores": True}}  # fmt: skip
    text = markdown([run], "python -m benchmarks.course_grading --measure-class 100")
    assert "| a class of 100, s |" in text
    assert "| 126 (model 105, -17 %) |" in text  # 5 s + 100 x 1 s, against 126 s measured
    assert "**126 s (2.1 min)**" in text and "student of the same name: yes." in text
    run["measured_class"]["same_scores"] = False
    text = markdown([run], "python -m benchmarks.course_grading --measure-class 100")
    assert "-17 %), scores differ |" in text and "same name: **no**" in text
    del run["measured_class"]
    assert "a class of 100, s" not in markdown([run], "python -m benchmarks.course_grading")


def test_the_sanitizing_steps_are_nbgraders_own():
    from nbgrader.converters.autograde import Autograde

    from autograder.nbgrader_settings import SANITIZE_PREPROCESSORS

    names = [f"nbgrader.preprocessors.{p.__name__}" for p in Autograde().sanitize_preprocessors]
    assert names == SANITIZE_PREPROCESSORS


def _corrupted(nb, how):
    nb = copy.deepcopy(nb)
    graded = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    meta = graded[0].metadata["nbgrader"]
    if how == "points":
        meta["points"] = "all of them"
    elif how == "duplicate id":
        graded[1].metadata["nbgrader"]["grade_id"] = meta["grade_id"]
    elif how == "old schema":
        meta["schema_version"] = 1
    elif how == "new schema":
        meta["schema_version"] = 99
    elif how == "unknown key":
        meta["bonus"] = True
    return nb


@pytest.mark.parametrize(
    "how", [None, "points", "duplicate id", "old schema", "new schema", "unknown key"]
)
def test_the_metadata_check_checked_once_decides_as_nbgraders(root, how):
    from nbgrader.preprocessors import CheckCellMetadata

    from autograder.metadata_check import CheckCellMetadataOnce

    nb = nbformat.read(solution_path(root, "04_dot_product_attention"), as_version=4)
    if how is not None:
        nb = _corrupted(nb, how)
    outcomes = []
    for check in (CheckCellMetadata(), CheckCellMetadataOnce()):
        try:
            check.preprocess(copy.deepcopy(nb), {})
            outcomes.append("passed")
        except Exception as error:
            outcomes.append(f"{type(error).__name__}: {error}")
    assert outcomes[0] == outcomes[1]
    assert (outcomes[0] == "passed") == (how is None)


def test_markdown_math_is_the_same_remembered_or_made(root, without):
    nb = nbformat.read(solution_path(root, "04_dot_product_attention"), as_version=4)

    def converted():
        copied = copy.deepcopy(nb)
        feedback.MarkdownMath().preprocess(copied, {})
        return [c.source for c in copied.cells if c.cell_type == "markdown"]

    remembered, again = converted(), converted()
    without("page-parts-once")
    made = converted()
    assert remembered == again == made and any("<math" in s for s in made)


def test_the_workers_start_ahead_only_with_the_switch_and_more_than_one_worker(
    without, monkeypatch, tmp_path
):
    from autograder import grade

    started = []
    monkeypatch.setattr(
        grade, "start_processes", lambda count, settings, chapter="": started.append(count)
    )
    monkeypatch.setattr(grade, "_jobs_ahead", lambda *args: 3)
    run = grade.Run(tmp_path, tmp_path, Out(tmp_path / "out"), None, None, print, [])
    grade.workers_ahead(run, {}, [], False, 2, None)
    grade.workers_ahead(run, {}, [], False, 8, None)
    assert started == [2, 3]  # never more than the jobs
    grade.workers_ahead(run, {}, [], False, 1, None)  # one worker grades in this process
    grade.workers_ahead(run, {}, [], False, 2, "tcp://scheduler:8786")  # Dask's workers
    without("workers-ahead")
    grade.workers_ahead(run, {}, [], False, 2, None)
    assert started == [2, 3]


def test_a_markdown_cells_html_is_the_same_remembered_or_made(root, without, monkeypatch):
    """The feedback page, its markdown cells' HTML remembered by source, is the page made
    anew; a cell with attachments is made anew every time."""
    nb = nbformat.read(solution_path(root, "04_dot_product_attention"), as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "markdown"]
    cells[0].attachments = {"a.png": {"image/png": "iVBORw0KGgo="}}
    made = []
    real = HTMLExporter.markdown2html
    monkeypatch.setattr(
        HTMLExporter,
        "markdown2html",
        pass_context(
            lambda self, context, source: made.append(source) or real(self, context, source)
        ),
    )

    def page():
        return feedback.FeedbackExporter().from_notebook_node(copy.deepcopy(nb))[0]

    remembered, again = page(), page()
    assert remembered == again and "<h2" in remembered
    assert made.count(cells[0].source) == 2 and made.count(cells[1].source) == 1
    without("page-parts-once")
    assert page() == remembered
    assert made.count(cells[1].source) == 2
