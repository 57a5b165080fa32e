"""Every catalogued mistake, one at a time, in-process: it fails exactly the test cells it
names (visible and hidden tests) and each of them names it; a wrong answer outside the
catalogue fails and is named as nothing. Seconds per chapter, so every entry is checked on
its own; ``test_grading.py`` then submits them, several to a notebook, through the grader.
The cells before a mistake's cell are the solution's: they run once per chapter, and each
mistake's run goes on from there in a fork of the test process (``tests/forked.py``).

A chapter's notebook runs here without its experiments: the set-up, every exercise and
every graded test cell, and the other cells before the first ``experiment*`` cell (their
errors do not count: some need an experiment's results).
"""

import contextlib
import functools
import io
import os
import re

import matplotlib
import nbformat
import pytest
import torch
from forked import each_from_its_cell
from mutants import ALTERNATIVES, MUTANTS, UNCATALOGUED

from autograder.chapters import ALL_CHAPTERS, solution_path
from autograder.mistakes import apply

matplotlib.use("Agg")
pytestmark = pytest.mark.usefixtures("one_thread")
TAG = re.compile(r"\[known mistake: ([a-z0-9-]+)\]")


def cells_to_run(root, chapter):
    """(grade id, graded, source) of the cells this module runs, in notebook order."""
    out, experiments = [], False
    for cell in nbformat.read(solution_path(root, chapter), as_version=4).cells:
        if cell.cell_type != "code":
            continue
        meta = cell.metadata.get("nbgrader", {})
        grade_id = meta.get("grade_id", "")
        experiments |= grade_id.startswith("experiment")
        exercise_or_test = meta.get("solution") or meta.get("grade") or grade_id == "setup"
        if exercise_or_test or not experiments:
            out.append((grade_id, bool(meta.get("grade")), cell.source, bool(exercise_or_test)))
    return out


def _visible(source: str) -> str:
    """A test cell as the student has it: its hidden tests left out."""
    kept, hidden = [], False
    for line in source.splitlines():
        if "BEGIN HIDDEN TESTS" in line or "END HIDDEN TESTS" in line:
            hidden = "BEGIN" in line
            continue
        if not hidden:
            kept.append(line)
    return "\n".join(kept)


def _run(cells, namespace: dict, failed: dict, entry=None, visible_only=False) -> None:
    """Run ``cells`` in ``namespace`` with ``entry``'s mistake made; the failed graded cells'
    messages go to ``failed``."""
    for grade_id, graded, source, counts in cells:
        if entry is not None and grade_id == entry.cell:
            source = apply(source, entry)
        if visible_only:
            source = _visible(source)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(source, grade_id or "<cell>", "exec"), namespace)
        except Exception as error:
            if graded:
                failed[grade_id] = f"{type(error).__name__}: {error}"
            elif counts:
                failed[grade_id] = f"(not a test) {type(error).__name__}: {error}"


@contextlib.contextmanager
def _grading_mode():
    previous = os.environ.get("ATTENTION_COURSE_GRADING")
    os.environ["ATTENTION_COURSE_GRADING"] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("ATTENTION_COURSE_GRADING", None)
        else:
            os.environ["ATTENTION_COURSE_GRADING"] = previous
        torch.manual_seed(0)


def failures(root, chapter, entry=None, visible_only=False) -> dict[str, str]:
    """Run the chapter with ``entry``'s mistake made; the failed graded cells' messages
    (``visible_only``: the test cells as released, without their hidden tests)."""
    failed: dict[str, str] = {}
    with _grading_mode():
        _run(cells_to_run(root, chapter), {"__name__": "__main__"}, failed, entry, visible_only)
    return failed


@functools.cache
def failures_of_each(root, chapter) -> dict[str | None, dict[str, str]]:
    """``failures(root, chapter, entry)`` of every entry of the chapter (catalogued,
    uncatalogued, alternatives; ``None``: the solution), in one run of the chapter: the
    cells before an entry's cell run once, for all, and each entry's run goes on from its
    cell in a fork (``tests/forked.py``)."""
    cells = cells_to_run(root, chapter)
    at = {grade_id: i for i, (grade_id, *_) in enumerate(cells) if grade_id}
    listed = MUTANTS[chapter] + UNCATALOGUED[chapter] + ALTERNATIVES.get(chapter, [])
    entries = {e.name: e for e in listed}
    assert len(entries) == len(listed), f"{chapter}: two entries with one name"
    missing = [name for name, e in entries.items() if e.cell not in at]
    assert not missing, f"{chapter}: no cell of these mistakes' runs: {missing}"
    namespace: dict = {"__name__": "__main__"}
    failed: dict[str, str] = {}
    solution: dict[str, str] = {}

    def rest(i: int, name: str) -> dict[str, str]:
        _run(cells[i:], namespace, failed, entries[name])
        return failed

    with _grading_mode():
        # the solution's own run first, in a namespace of its own: it also fills what the
        # cells keep for the process (the recorded answers, what is imported on first use),
        # before the forks, as the runs one after the other did for the runs after them
        _run(cells, {"__name__": "__main__"}, solution)
        result = each_from_its_cell(
            len(cells),
            {name: at[e.cell] for name, e in entries.items()},
            lambda i: _run(cells[i : i + 1], namespace, failed),
            rest,
        )
    return {None: solution, **result}


@pytest.mark.parametrize("chapter", ALL_CHAPTERS)
def test_the_solution_passes_every_test(root, chapter):
    assert failures_of_each(root, chapter)[None] == {}


CATALOGUED = [(ch, m.name) for ch in ALL_CHAPTERS for m in MUTANTS[ch]]


@pytest.mark.parametrize("chapter, name", CATALOGUED)
def test_a_mistake_fails_its_own_tests_and_is_named_there(root, chapter, name):
    entry = next(m for m in MUTANTS[chapter] if m.name == name)
    failed = failures_of_each(root, chapter)[name]
    assert set(failed) == set(entry.breaks), (
        f"{name} failed {sorted(failed)}, expected {sorted(entry.breaks)}:\n"
        + "\n".join(f"{k}: {v[:400]}" for k, v in failed.items())
    )
    for cell, message in failed.items():
        assert TAG.findall(message) == [name], f"{cell} names {TAG.findall(message)}:\n{message}"


UNKNOWN = [(ch, m.name) for ch in ALL_CHAPTERS for m in UNCATALOGUED[ch]]


@pytest.mark.parametrize("chapter, name", UNKNOWN)
def test_a_wrong_answer_outside_the_catalogue_is_named_as_nothing(root, chapter, name):
    entry = next(m for m in UNCATALOGUED[chapter] if m.name == name)
    failed = failures_of_each(root, chapter)[name]
    assert set(failed) == set(entry.breaks), sorted(failed)
    for cell, message in failed.items():
        assert TAG.findall(message) == [], f"{cell}: a false diagnosis:\n{message}"


# That every catalogued mistake fails a visible test (every rule a hidden test enforces is
# checked by a visible one, issue 36) is checked where the student meets it: in the kit,
# by ``tests/test_kit.py``, which also checks that the kit names it there.


OTHER_WAYS = [(ch, m.name) for ch, entries in ALTERNATIVES.items() for m in entries]


@pytest.mark.parametrize("chapter, name", OTHER_WAYS)
def test_a_right_answer_written_another_way_passes_every_test(root, chapter, name):
    """A convention the exercise leaves open costs nothing (issue 36)."""
    assert failures_of_each(root, chapter)[name] == {}


# A wrong count and the numbers its failure must not print: the right counts of the cases
# the visible test asks about (issue 36: a message that prints the count tests transcription).
COUNTS = [
    ("01_rnn_bottleneck", "gru-one-bias", ("195", "74496")),
    ("02_bahdanau_attention", "local-window-without-centre", ("7", "21")),
    ("02_bahdanau_attention", "additive-keys-every-step", ("1128", "4208", "900", "384")),
    ("04_dot_product_attention", "outgrows-counting-scores-only", ("25", "44", "19", "31")),
    ("06_transformer", "parameters-without-layernorm", ("3216", "7376", "49728")),
]


@pytest.mark.parametrize("chapter, name, counts", COUNTS)
def test_a_wrong_count_is_not_told_the_right_one(root, chapter, name, counts):
    entry = next(m for m in MUTANTS[chapter] if m.name == name)
    failed = failures(root, chapter, entry, visible_only=True)
    (message,) = (failed[cell] for cell in entry.breaks)
    assert not [c for c in counts if re.search(rf"(?<![\d.]){c}(?![\d.])", message)], message
