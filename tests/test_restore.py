"""``autograder/restore.py``: the released cells of a submission put back as released before
nbgrader grades it, each repair said. Fast: JSON only, no kernel (``test_hostile.py`` grades
a tampered notebook end to end)."""

import copy
import json
import re

import nbformat
import pytest

from autograder.chapters import release_path
from autograder.restore import exercises_of_locked_cells, restore
from autograder.submissions import solved_notebook

CHAPTER = "04_dot_product_attention"


@pytest.fixture(scope="module")
def released(root):
    return json.loads(release_path(root, CHAPTER).read_text(encoding="utf-8"))


@pytest.fixture
def solved(root):
    """The solved student notebook, as JSON."""
    return json.loads(nbformat.writes(solved_notebook(root, CHAPTER)))


def ids(nb) -> list[str | None]:
    return [c["metadata"].get("nbgrader", {}).get("grade_id") for c in nb["cells"]]


def cell(nb, grade_id):
    return next(
        c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id
    )


def test_a_notebook_as_released_is_left_as_it_is(released, solved):
    assert restore(copy.deepcopy(released), released) == (released, None)
    restored, note = restore(copy.deepcopy(solved), released)
    assert note is None and restored == solved


def test_an_edited_test_cell_is_put_back(released, solved):
    cell(solved, "test_padding_mask")["source"] = "pass"
    restored, note = restore(solved, released)
    assert cell(restored, "test_padding_mask") == cell(released, "test_padding_mask")
    assert note == "cells put back as released: test_padding_mask (edited)"


@pytest.mark.parametrize(
    "change",
    [
        {"grade": False},
        {"points": 100},
        {"locked": False},
        {"solution": True},
    ],
)
def test_a_test_cells_changed_metadata_is_put_back(released, solved, change):
    test = cell(solved, "test_causal_mask")
    test["metadata"]["nbgrader"].update(change)
    test["source"] = "pass"
    restored, note = restore(solved, released)
    assert cell(restored, "test_causal_mask") == cell(released, "test_causal_mask")
    assert note == "cells put back as released: test_causal_mask (nbgrader metadata changed)"


def test_a_test_cell_turned_into_markdown_is_code_again(released, solved):
    test = cell(solved, "test_causal_mask")
    test["cell_type"] = "markdown"
    del test["outputs"], test["execution_count"]
    restored, note = restore(solved, released)
    assert cell(restored, "test_causal_mask")["cell_type"] == "code"
    nbformat.validate(nbformat.reads(json.dumps(restored), as_version=4))
    assert "test_causal_mask (nbgrader metadata changed)" in note


def test_a_solution_cell_keeps_its_code_and_gets_its_metadata_back(released, solved):
    answer = cell(solved, "padding_mask")
    code = answer["source"]
    answer["metadata"]["nbgrader"]["solution"] = False
    answer["metadata"]["nbgrader"]["grade"] = True
    answer["metadata"]["nbgrader"]["points"] = 50
    restored, note = restore(solved, released)
    again = cell(restored, "padding_mask")
    assert again["source"] == code
    assert again["metadata"]["nbgrader"] == cell(released, "padding_mask")["metadata"]["nbgrader"]
    assert note == "cells put back as released: padding_mask (its nbgrader metadata)"


def test_a_copy_or_a_grade_id_of_its_own_runs_ungraded(released, solved):
    test = cell(solved, "test_self_attention")
    at = solved["cells"].index(test)
    solved["cells"].insert(at + 1, copy.deepcopy(test))  # same grade id, same cell id
    own = copy.deepcopy(test)
    own["metadata"]["nbgrader"]["grade_id"] = "mine"
    own["id"] = "mine"
    solved["cells"].insert(at + 2, own)
    restored, note = restore(solved, released)
    assert ids(restored).count("test_self_attention") == 1 and "mine" not in ids(restored)
    copies = [c for c in restored["cells"] if c["source"] == test["source"]]
    assert len(copies) == 3 and sum("nbgrader" in c["metadata"] for c in copies) == 1
    assert len({c["id"] for c in restored["cells"]}) == len(restored["cells"])  # ids unique
    nbformat.validate(nbformat.reads(json.dumps(restored), as_version=4))
    assert note == (
        "run ungraded, their nbgrader metadata removed: a copy of test_self_attention, "
        "a cell with the grade id 'mine'"
    )


def test_a_test_cell_moved_above_its_exercise_goes_back_below_it(released, solved):
    test = cell(solved, "test_attention_masked")
    solved["cells"].remove(test)
    solved["cells"].insert(0, test)
    restored, note = restore(solved, released)
    order = [i for i in ids(restored) if i]
    solution = order.index("scaled_dot_product_attention")
    assert order[solution + 1 : solution + 3] == [
        "test_attention_unmasked",
        "test_attention_masked",
    ]
    assert note == "cells put back as released: test_attention_masked (moved above its exercise)"


def test_a_test_cell_moved_below_later_exercises_stays_there(released, solved):
    test = cell(solved, "test_padding_mask")
    solved["cells"].remove(test)
    solved["cells"].append(test)
    restored, note = restore(solved, released)
    assert ids(restored)[-1] == "test_padding_mask" and note is None


def test_a_deleted_test_cell_is_said(released, solved):
    solved["cells"].remove(cell(solved, "test_cross_attention"))
    _, note = restore(solved, released)
    assert note == (
        "cells put back as released: test_cross_attention (deleted, or its nbgrader metadata "
        "removed)"
    )


def test_the_exercise_of_each_locked_cell(released):
    exercises = exercises_of_locked_cells(released)
    assert exercises["test_attention_masked"] == "scaled_dot_product_attention"
    assert exercises["test_attention_outgrows_projections"] == "attention_outgrows_projections"
    assert "setup" not in exercises and "header" not in exercises  # above every exercise


def test_another_nbformat_is_left_to_nbgrader(released):
    old = {"nbformat": 3, "nbformat_minor": 0, "worksheets": [{"cells": []}], "metadata": {}}
    assert restore(old, released) == (old, None)


def test_a_malformed_notebook_does_not_stop_it(released):
    """nbgrader reads what nbformat reads; whatever else is in the cells, restore goes on."""
    odd = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [1, "x"]}
    odd["cells"] += [{"cell_type": "code", "metadata": "bad", "source": ""}]
    odd["cells"] += [{"cell_type": "code", "metadata": {"nbgrader": "bad"}, "source": ""}]
    restored, note = restore(odd, released)
    assert restored["cells"][:3] == odd["cells"][:3]
    assert "nbgrader" not in restored["cells"][3]["metadata"]
    assert note.startswith("cells put back as released: test_attention_unmasked (deleted")
    assert note.endswith("run ungraded, their nbgrader metadata removed: a cell")


PAYLOAD = '<img src="x" onerror="alert(1)"><div class="full-credit">x</div>'


def _staged(root, tmp_path, text: str):
    """``text`` staged as a submission of ``CHAPTER`` into a fresh OUT: (note, notebook)."""
    from autograder.chapters import release_path
    from autograder.outfolder import Out
    from autograder.restore import stage

    out = Out(tmp_path / "out")
    path = tmp_path / "handed-in.ipynb"
    path.write_text(text, encoding="utf-8")
    released = {CHAPTER: json.loads(release_path(root, CHAPTER).read_text(encoding="utf-8"))}
    note = stage(out, path, "student", CHAPTER, released)
    staged = out.submitted("student", CHAPTER).read_text(encoding="utf-8")
    return note, json.loads(staged)


def _no_markup(nb) -> None:
    from autograder.inert import rendered_markdown

    for c in nb["cells"]:
        assert c["cell_type"] != "raw" or c["source"] == ""  # none in this chapter's release
        source = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        if c["cell_type"] == "markdown":
            tags = re.findall(r"<[^>]*>", rendered_markdown(source))
            assert not any("onerror" in t or "full-credit" in t for t in tags), tags
        assert c.get("outputs", []) == []


def test_an_nbformat_3_submission_is_converted_restored_and_made_inert(root, tmp_path, solved):
    nb = nbformat.reads(json.dumps(solved), as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell(PAYLOAD))
    v3 = nbformat.writes(nbformat.convert(nb, 3), version=3)
    assert json.loads(v3)["nbformat"] == 3
    note, staged = _staged(root, tmp_path, v3)
    assert staged["nbformat"] == 4
    assert "could not be checked" not in (note or ""), note
    assert cell(staged, "test_attention_masked")["source"]  # restored: the tests are there
    _no_markup(staged)
    assert "a markdown cell was shown as text" in " ".join(
        staged["metadata"]["autograder"]["inert"]
    )


def test_a_submission_that_cannot_be_restored_is_staged_inert_never_as_it_is(
    root, tmp_path, solved, monkeypatch
):
    from autograder import restore as module

    def broken(*args):
        raise RuntimeError("boom")

    monkeypatch.setattr(module, "restore", broken)
    solved["cells"].append(nbformat.v4.new_markdown_cell(PAYLOAD))
    solved["cells"].append(nbformat.v4.new_raw_cell(PAYLOAD))
    text = json.dumps(solved)
    note, staged = _staged(root, tmp_path, text)
    assert note.startswith("its cells could not be checked (RuntimeError: boom)")
    assert note.endswith("it is graded as handed in, its markup made inert")
    _no_markup(staged)
    assert staged["cells"][-1]["cell_type"] == "markdown"  # the raw cell: text


def test_a_submission_that_is_not_a_notebook_is_staged_as_a_placeholder(root, tmp_path):
    note, staged = _staged(root, tmp_path, '{"nbformat": 9, "cells": "<script>"}')
    assert note.startswith("its cells could not be checked")
    assert "<script>" not in json.dumps(staged)
    assert "could not be read" in staged["metadata"]["autograder"]["inert"][0]
