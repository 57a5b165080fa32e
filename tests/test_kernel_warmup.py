"""The fork server's warm-up of a run's chapters (autograder/kernel_warmup.py): it imports
nothing a kernel must import itself, it draws what the notebooks' cells draw, and a file read
ahead is read again once it changed."""

import json
import subprocess
import sys

import nbformat
import pytest
import torch

from attention_course import recorded
from autograder.chapters import ALL_CHAPTERS, solution_path
from autograder.kernel_warmup import KERNEL_ONLY


def _python(code: str, root) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "ATTENTION_COURSE_GRADING": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def warmed(root) -> dict:
    """In one new process (the warm-ups' imports are for good): every chapter's warm-up,
    then chapter 01's data cell as the notebook has it, counting num2words' calls; then a
    warm-up with a step that fails; then one that imports ipywidgets."""
    nb = nbformat.read(solution_path(root, "01_rnn_bottleneck"), as_version=4)
    (cell,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "data"]
    return _python(
        "import contextlib, io, json, sys\n"
        "from autograder import kernel_warmup\n"
        "from autograder.chapters import ALL_CHAPTERS\n"
        "kernel_warmup.prepare(ALL_CHAPTERS)\n"
        "from attention_course import recorded\n"
        "found = {'imported': [m for m in kernel_warmup.KERNEL_ONLY if m in sys.modules],\n"
        "         'read': len(recorded._READ_AHEAD)}\n"
        "from attention_course.data import numbers\n"
        "calls = []\n"
        "real = numbers.num2words\n"
        "numbers.num2words = lambda *a, **k: calls.append(a) or real(*a, **k)\n"
        "from attention_course.translation import experiment_settings, number_translation_data\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    exec({cell.source!r})\n"
        "found.update(calls=len(calls), train=len(data.train))\n"
        "kernel_warmup.IMPORTS['04_dot_product_attention'] = ('no_such_module', 'ipywidgets')\n"
        "try:\n"
        "    kernel_warmup.prepare(['04_dot_product_attention'])\n"
        "except kernel_warmup.WarmupError as error:\n"
        "    found['said'] = str(error)\n"
        "found['ipywidgets'] = 'ipywidgets' in sys.modules\n"
        "print(json.dumps(found))",
        root,
    )


def test_every_chapters_warm_up_runs_and_leaves_the_kernels_own_imports_to_them(warmed):
    assert warmed["imported"] == [] and warmed["read"] == len(ALL_CHAPTERS)


def test_chapter_01s_data_cell_draws_its_number_words_from_the_warm_up(warmed):
    """The notebook's data cell, run after the warm-up, calls num2words for no number: the
    warm-up draws the data set the cell draws (a change to either shows here)."""
    assert warmed["train"] > 0 and warmed["calls"] == 0


def test_a_failing_step_is_left_to_the_kernels_and_a_kernels_own_import_stops_the_server(
    warmed,
):
    """The step after a failing import still ran (ipywidgets got imported), and importing
    what a kernel must import itself is an error that names it."""
    assert warmed["ipywidgets"]
    assert "ipywidgets" in warmed["said"] and "KERNEL_ONLY" in warmed["said"]
    assert "ipywidgets" in KERNEL_ONLY


@pytest.fixture
def book_file(tmp_path):
    book = recorded.Book("09_vision_transformer", {"m.f": [{"in": 1, "out": 2}]})
    book.save(tmp_path / "09_vision_transformer.pt")
    return tmp_path


def test_recorded_values_read_ahead_are_taken_once_and_read_again_when_changed(
    book_file, monkeypatch
):
    loads = []
    real = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: loads.append(a) or real(*a, **k))
    recorded.read_ahead("09_vision_transformer", book_file)
    assert len(loads) == 1
    assert recorded.Book.load("09_vision_transformer", book_file).calls == {
        "m.f": [{"in": 1, "out": 2}]
    }
    assert len(loads) == 1  # taken from what was read ahead
    recorded.Book.load("09_vision_transformer", book_file)
    assert len(loads) == 2  # once only: the next load reads the file
    recorded.read_ahead("09_vision_transformer", book_file)
    changed = recorded.Book("09_vision_transformer", {"m.f": [{"in": 1, "out": 3}]})
    changed.save(book_file / "09_vision_transformer.pt")
    assert recorded.Book.load("09_vision_transformer", book_file).calls["m.f"][0]["out"] == 3
    recorded._READ_AHEAD.clear()


def test_a_run_warms_up_the_chapters_with_two_submissions_a_worker():
    from autograder.grade import _worth_warming

    found = {f"s{i}": {"01_rnn_bottleneck": 1, **({"07_spatial_transformer": 1} if i < 3 else {})}
             for i in range(4)}  # fmt: skip
    chapters = ["01_rnn_bottleneck", "07_spatial_transformer"]
    assert _worth_warming(found, chapters, workers=2) == ("01_rnn_bottleneck",)
    assert _worth_warming(found, chapters, workers=1) == tuple(chapters)
    assert _worth_warming(found, chapters, workers=3) == ()
