"""The check outside the kernel (issue 11, ``autograder/outside.py``): the values hidden
tests hand out are compared, in the grader's own process, with the key's (the solution
notebook run once in a grading kernel).

Fast: the comparison itself (a right answer within ``check_close``'s tolerance passes, a
wrong entry, shape, dtype or count fails, malformed data fails without a crash), the key's
cache and a solution notebook that fails.

Slow: one ``grade`` run over a class of chapter 04, with a fresh key cache: the solution;
a wrong attention whose cell rebinds the course's checks through ``__main__.__dict__`` (a
form the scan does not flag), which passes in the kernel and fails outside; a wrong causal
mask whose cell installs an IPython exception handler, built at run time, that swallows
the failure (the hidden tests' hand-outs after the failed check are missing); a forger,
whose cell replaces ``hand_out``. About 100 s on two shared cores, 13 of them the key.
"""

import json
import os
import subprocess
import sys
import time

import nbformat
import pytest
import torch
from bwrap import grade_options

from attention_course.handout import MIME_TYPE, sketch
from autograder.chapters import CourseError
from autograder.feedback import NOTICE_END, NOTICE_START
from autograder.outfolder import CELLS_CSV, FLAGGED_CSV, read_csv
from autograder.outside import (
    FAILED,
    KEY_CACHE_ENV,
    OutsideCheck,
    cache_file,
    compare,
    graded_handouts,
    run_key,
)
from autograder.scan import scan_notebook
from autograder.submissions import mutate, solved_notebook, write_submission

CHAPTER = "04_dot_product_attention"
SDPA_TESTS = ("test_attention_unmasked", "test_attention_masked")


def handed(value, name="value", atol=1e-5, rtol=1e-4) -> dict:
    """What ``hand_out(value, name, atol, rtol)`` publishes."""
    return {**sketch(value, name), "atol": atol, "rtol": rtol}


# ---------------------------------------------------------------------------- comparison


def test_values_within_check_close_tolerance_pass():
    g = torch.Generator().manual_seed(0)
    key = torch.randn(4, 6, 7, generator=g)
    # every entry as far off as check_close allows, nearly
    noise = (torch.rand(key.shape, generator=g) * 2 - 1) * 0.99 * (1e-5 + 1e-4 * key.abs())
    assert compare([handed(key + noise)], [handed(key)]) is None
    assert compare([handed(key.double())], [handed(key)]) is None  # check_close accepts it


@pytest.mark.parametrize("index", range(6))
def test_one_entry_off_by_a_thousandth_fails(index):
    key = torch.tensor([[0.3, -0.2, 0.5], [0.1, -0.4, 0.2]])
    wrong = key.clone()
    wrong.view(-1)[index] += 1e-3
    why = compare([handed(wrong, "output")], [handed(key, "output")])
    assert why is not None and why.startswith("value 1 of 1 (output, shape (2, 3)) differs")


def test_the_keys_tolerance_counts_not_the_submissions():
    key = torch.zeros(3, 4)
    wrong = key + 0.5
    assert compare([handed(wrong, atol=1e9, rtol=1e9)], [handed(key)]) is not None


@pytest.mark.parametrize(
    "got, says",
    [
        ([handed(torch.zeros(3, 4))], "shape (3, 4), expected (4, 3)"),
        ([handed(torch.zeros(4, 3, dtype=torch.int64))], "dtype int64, expected float32"),
        ([handed(torch.zeros(4, 3)), handed(torch.zeros(4, 3))], "2 values handed out"),
        ([], "no value handed out, the key has 1"),
        ([handed(torch.full((4, 3), float("nan")))], "NAN entries"),
        ([handed(0.0)], "a number, the key's is a tensor"),
    ],
)
def test_a_wrong_shape_dtype_count_or_kind_fails(got, says):
    why = compare(got, [handed(torch.zeros(4, 3))])
    assert why is not None and says in why, why


def test_numbers_and_bools():
    assert compare([handed(64.0, atol=0, rtol=0)], [handed(64, atol=0, rtol=0)]) is None
    assert compare([handed(65.0)], [handed(64.0, atol=0, rtol=0)]) is not None
    assert compare([handed(float("nan"))], [handed(float("nan"))]) is None
    assert compare([handed(1.0000001)], [handed(1.0, atol=0, rtol=1e-6)]) is None
    assert compare([handed(True)], [handed(True)]) is None
    assert compare([handed(1)], [handed(True)]) is not None
    items = [torch.ones(2), 3.0]
    assert compare([handed(items)], [handed(items)]) is None
    assert compare([handed([torch.ones(2), 4.0])], [handed(items)]) is not None


MALFORMED = [
    None,
    "sketch",
    [None],
    ["x"],
    [{}],
    [{"kind": "tensor"}],
    [{"kind": "tensor", "shape": "abc", "dtype": "float32"}],
    [{"kind": "tensor", "shape": [10**12], "dtype": "float32", "nan": 0, "inf": 0}],
    [{**handed(torch.zeros(4, 3)), "s": [0.0, 0.0]}],
    [{**handed(torch.zeros(4, 3)), "s": ["0", 0, 0, 0]}],
    [{**handed(torch.zeros(4, 3)), "a": None}],
    [{**handed(torch.zeros(4, 3)), "nan": -1}],
    [{**handed(torch.zeros(4, 3)), "nan": True}],
    [{**handed(torch.zeros(4, 3)), "dtype": ["float32"]}],
    [{"kind": "sequence", "items": "abc"}],
    [{"kind": "number", "value": "1e3"}],
    [{"kind": ["tensor"]}],
]


@pytest.mark.parametrize("got", MALFORMED)
def test_malformed_handouts_fail_without_a_crash(got):
    for key in ([handed(torch.zeros(4, 3))], [handed([torch.ones(2), 3.0])], [handed(2.0)]):
        assert isinstance(compare(got, key), str)


def test_handouts_are_read_from_any_notebook_json():
    good = {"output_type": "display_data", "data": {MIME_TYPE: handed(1.0)}}
    cell = {"metadata": {"nbgrader": {"grade": True, "grade_id": "t"}}, "outputs": [good]}
    assert graded_handouts({"cells": [cell, cell]}) == {"t": [handed(1.0), handed(1.0)]}
    for nb in (None, [], {"cells": "x"}, {"cells": [None, 1, {"metadata": []}]}):
        assert graded_handouts(nb) == {}
    odd = {"metadata": {"nbgrader": {"grade": True, "grade_id": "t"}}, "outputs": [1, {"data": 2}]}
    assert graded_handouts({"cells": [odd]}) == {"t": []}


# ----------------------------------------------------------------------------------- key


def _course(tmp_path, source: str):
    """A course folder with one chapter, ``fake``, whose solution notebook has one graded
    cell of ``source``."""
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": "test_fake", "points": 1}
    nb.cells.append(cell)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    path = tmp_path / "course" / "solutions" / "fake" / "fake.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(nb, path)
    return tmp_path / "course"


def _config(tmp_path):
    from autograder.job import GradingSettings, grading_config
    from autograder.outfolder import Out

    settings = GradingSettings(Out(tmp_path / "out"), f"sqlite:///{tmp_path}/gb.db", False, 60)
    return grading_config(settings)


def test_a_chapter_that_hands_nothing_out_gets_an_empty_key_and_a_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_CACHE_ENV, str(tmp_path / "cache"))
    root = _course(tmp_path, "x = 1")
    said = []
    key = OutsideCheck(root, tmp_path / "out", None, said.append).key("fake")
    assert key["cells"] == {} and (tmp_path / "out" / "keys" / "fake.json").is_file()
    assert "0 values handed out" in said[0]
    again = OutsideCheck(root, tmp_path / "out", None, said.append).key("fake")
    assert again == key and "(cached)" in said[1]
    sha = key["solution_sha256"]
    assert cache_file("fake", sha).is_file() and cache_file("fake", "0" * 64) != cache_file(
        "fake", sha
    )


@pytest.mark.slow
def test_a_key_run_that_fails_says_where(tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_CACHE_ENV, str(tmp_path / "cache"))
    root = _course(tmp_path, "hand_out = None\n1 / 0")
    with pytest.raises(CourseError, match="fails in grading mode in test_fake.*ZeroDivisionError"):
        run_key(root, "fake", _config(tmp_path))


# ------------------------------------------------------------------------ a graded class

# Turns the course's checks into no-ops through the notebook's module, a form the scan
# does not flag.
REBIND = """
import __main__


def _always_passes(*args, **kwargs):
    return None


__main__.__dict__.update(check_close=_always_passes, check_rows_sum_to_one=_always_passes)
"""

# An IPython exception handler, installed through a name built at run time, that swallows
# every error of a cell: no traceback, and a reply that says "ok".
SWALLOW = """
import sys

_shell = get_ipython()


def _swallow(shell, etype, value, tb, tb_offset=None):
    frame = sys._getframe(1)
    while frame is not None:
        found = frame.f_locals.get("result")
        if found is not None and hasattr(found, "error_in_exec"):
            found.error_in_exec = None
        frame = frame.f_back
    return []


_name = "set_custom" + "_exc"
next(vars(k)[_name] for k in type(_shell).__mro__ if _name in vars(k))(
    _shell, (Exception,), _swallow
)
_shell._showtraceback = lambda *args, **kwargs: None
"""

# Replaces hand_out with one that hands out zeros of the value's shape.
FORGE = """
import attention_course.handout as _handout
from attention_course.handout import hand_out as _real

_handout.hand_out = lambda value, name="value", **k: _real(torch.zeros_like(torch.as_tensor(value)), name)
"""


def _no_scale(nb):
    return mutate(
        nb,
        "scaled_dot_product_attention",
        "Q @ K.transpose(-2, -1) / math.sqrt(d_k)",
        "Q @ K.transpose(-2, -1)",
    )


def _append(nb, grade_id: str, code: str):
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    cell.source = f"{cell.source}\n{code}"
    return nb


@pytest.fixture(scope="module")
def graded(root, tmp_path_factory):
    submissions = tmp_path_factory.mktemp("outside-submissions")
    out = tmp_path_factory.mktemp("outside-graded")
    cache = tmp_path_factory.mktemp("outside-keys")
    notebooks = {"solution": solved_notebook(root, CHAPTER)}
    notebooks["rebinder"] = _append(
        _no_scale(solved_notebook(root, CHAPTER)), "scaled_dot_product_attention", REBIND
    )
    wrong_causal = mutate(solved_notebook(root, CHAPTER), "causal_mask", "torch.tril", "torch.triu")
    notebooks["swallower"] = _append(wrong_causal, "causal_mask", SWALLOW)
    forger = _append(
        _no_scale(solved_notebook(root, CHAPTER)), "scaled_dot_product_attention", REBIND
    )
    notebooks["forger"] = _append(forger, "scaled_dot_product_attention", FORGE)
    for student, nb in notebooks.items():
        write_submission(nb, submissions, student, CHAPTER)

    command = [sys.executable, "-m", "autograder", "grade", str(submissions), "--out", str(out)]
    command += ["--workers", "2", *grade_options()]
    start = time.perf_counter()
    result = subprocess.run(
        command,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, KEY_CACHE_ENV: str(cache)},
    )
    seconds = time.perf_counter() - start
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    print(f"graded the class in {seconds:.0f} s")
    rows: dict[str, dict] = {}
    for row in read_csv(out / CELLS_CSV):
        rows.setdefault(row.student, {})[row.cell] = row
    key = json.loads((out / "keys" / f"{CHAPTER}.json").read_text(encoding="utf-8"))
    return {"out": out, "rows": rows, "key": key, "notebooks": notebooks, "log": result.stdout}


def _handouts(graded, student):
    path = graded["out"] / "nbgrader" / "autograded" / student / CHAPTER / f"{CHAPTER}.ipynb"
    return graded_handouts(json.loads(path.read_text(encoding="utf-8")))


def _errors(graded, student, cell_id):
    path = graded["out"] / "nbgrader" / "autograded" / student / CHAPTER / f"{CHAPTER}.ipynb"
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == cell_id)
    return [o for o in cell.outputs if o.output_type == "error"]


def _keeps_the_others(graded, student, lost):
    for cell, row in graded["rows"][student].items():
        if cell not in lost:
            assert row.status == "graded" and row.points == row.max_points > 0, row


@pytest.mark.slow
def test_the_key_is_made_once_and_shown(graded):
    key = graded["key"]
    assert "run in grading mode" in graded["log"], graded["log"]
    assert key["chapter"] == CHAPTER and key["torch"] == torch.__version__
    assert set(graded["rows"]["solution"]) == set(key["cells"])
    assert all(key["cells"].values()), "every graded cell of chapter 04 hands values out"


@pytest.mark.slow
def test_the_solution_earns_full_marks_and_matches_the_key(graded):
    _keeps_the_others(graded, "solution", lost=())
    found = _handouts(graded, "solution")
    for cell, expected in graded["key"]["cells"].items():
        assert compare(found[cell], expected) is None, cell


@pytest.mark.slow
def test_rebound_checks_pass_in_the_kernel_and_fail_outside(graded, root):
    assert scan_notebook(graded["notebooks"]["rebinder"], CHAPTER) == []  # unseen by the scan
    rows = graded["rows"]["rebinder"]
    for cell in SDPA_TESTS:
        assert _errors(graded, "rebinder", cell) == [], "the kernel's checks were fooled"
        assert rows[cell].points == 0 and rows[cell].status.startswith(FAILED), rows[cell]
        assert "differs from the key's" in rows[cell].status
    assert "value 1 of 9 (output, shape (4, 6, 17))" in rows["test_attention_unmasked"].status
    _keeps_the_others(graded, "rebinder", lost=SDPA_TESTS)


@pytest.mark.slow
def test_the_feedback_page_says_which_cells_lost_points_after_the_run(graded):
    """The page shows the notebook as it ran, where the rebound checks passed; its notice
    names each cell the check outside the kernel failed, and the real total."""
    page = (graded["out"] / "feedback" / "rebinder" / f"{CHAPTER}.html").read_text()
    notice = page[page.index(NOTICE_START) : page.index(NOTICE_END)]
    rows = graded["rows"]["rebinder"].values()
    total = f"{sum(r.points for r in rows):g} / {sum(r.max_points for r in rows):g}"
    assert f"Your score: {total}, less than this page shows" in notice
    assert notice.count("<li>") == len(SDPA_TESTS)
    for cell in SDPA_TESTS:
        assert f'href="#{cell}"' in notice and f'id="{cell}"' in page
    assert "differs from the key&#x27;s" in notice
    solution = (graded["out"] / "feedback" / "solution" / f"{CHAPTER}.html").read_text()
    assert NOTICE_START not in solution


@pytest.mark.slow
def test_a_swallowed_failure_hands_out_less_and_loses_its_points(graded):
    assert scan_notebook(graded["notebooks"]["swallower"], CHAPTER) == []
    row = graded["rows"]["swallower"]["test_causal_mask"]
    assert _errors(graded, "swallower", "test_causal_mask") == [], "the failure was swallowed"
    assert row.points == 0 and row.status.startswith(FAILED), row
    assert "no value handed out" in row.status or "values handed out" in row.status, row
    _keeps_the_others(graded, "swallower", lost=("test_causal_mask",))


@pytest.mark.slow
def test_a_forged_handout_is_flagged_and_differs(graded):
    """The forger's hand_out hands out zeros: every test cell that hands values out loses
    its points, those of the flagged exercise withheld for review, the others outside."""
    flags = scan_notebook(graded["notebooks"]["forger"], CHAPTER)
    assert {f.rule for f in flags} == {"handout"}, flags
    found = _handouts(graded, "forger")
    for cell, row in graded["rows"]["forger"].items():
        assert row.points == 0, row
        assert compare(found[cell], graded["key"]["cells"][cell]) is not None, cell
        expected = "flagged for review" if cell in SDPA_TESTS else FAILED
        assert row.status.startswith(expected), row
    assert "handout" in graded["rows"]["forger"]["test_attention_unmasked"].status
    flagged = (graded["out"] / FLAGGED_CSV).read_text(encoding="utf-8")
    assert f"forger,{CHAPTER},scaled_dot_product_attention" in flagged and ",handout," in flagged
