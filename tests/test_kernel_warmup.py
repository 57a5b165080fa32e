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


def test_every_chapters_warm_up_runs_and_leaves_the_kernels_own_imports_to_them(root):
    found = _python(
        "import json, sys\n"
        "from autograder.kernel_warmup import prepare, KERNEL_ONLY\n"
        "from autograder.chapters import ALL_CHAPTERS\n"
        "prepare(ALL_CHAPTERS)\n"
        "from attention_course import recorded\n"
        "print(json.dumps({'imported': [m for m in KERNEL_ONLY if m in sys.modules],\n"
        "                  'read': len(recorded._READ_AHEAD)}))",
        root,
    )
    assert found == {"imported": [], "read": len(ALL_CHAPTERS)}


def test_a_warm_up_that_imports_a_kernels_own_module_stops_the_server(root):
    found = _python(
        "import json\n"
        "from autograder import kernel_warmup\n"
        "kernel_warmup.IMPORTS['04_dot_product_attention'] = ('ipywidgets',)\n"
        "try:\n"
        "    kernel_warmup.prepare(['04_dot_product_attention'])\n"
        "    said = None\n"
        "except kernel_warmup.WarmupError as error:\n"
        "    said = str(error)\n"
        "print(json.dumps({'said': said}))",
        root,
    )
    assert "ipywidgets" in found["said"] and "KERNEL_ONLY" in found["said"]
    assert "ipywidgets" in KERNEL_ONLY


def test_chapter_01s_data_cell_draws_its_number_words_from_the_warm_up(root):
    """The notebook's data cell, run after the warm-up, calls num2words for no number: the
    warm-up draws the data set the cell draws (a change to either shows here)."""
    nb = nbformat.read(solution_path(root, "01_rnn_bottleneck"), as_version=4)
    (cell,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "data"]
    found = _python(
        "import contextlib, io, json\n"
        "from autograder.kernel_warmup import prepare\n"
        "prepare(['01_rnn_bottleneck'])\n"
        "from attention_course.data import numbers\n"
        "calls = []\n"
        "real = numbers.num2words\n"
        "numbers.num2words = lambda *a, **k: calls.append(a) or real(*a, **k)\n"
        "from attention_course.translation import experiment_settings, number_translation_data\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    exec({cell.source!r})\n"
        "print(json.dumps({'calls': len(calls), 'train': len(data.train)}))",
        root,
    )
    assert found["train"] > 0 and found["calls"] == 0


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


def test_a_warm_up_step_that_fails_is_left_to_the_kernels(root):
    found = _python(
        "import json\n"
        "from autograder import kernel_warmup\n"
        "kernel_warmup.IMPORTS['04_dot_product_attention'] = ('no_such_module', 'num2words')\n"
        "kernel_warmup.prepare(['04_dot_product_attention'])\n"
        "import sys\n"
        "print(json.dumps({'num2words': 'num2words' in sys.modules}))",
        root,
    )
    assert found == {"num2words": True}  # the steps after the failed one still ran
