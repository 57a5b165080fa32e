"""The static scan of submissions: the solutions pass it, and each cheap way around the
tests is flagged in the cell that does it (issue 11, hostile submissions)."""

import functools
import re

import nbformat
import pytest
from bwrap import grade_options

from autograder.chapters import ALL_CHAPTERS, release_path, solution_path
from autograder.scan import FORBIDDEN, Flag, scan_cell, scan_notebook
from autograder.submissions import solved_notebook

CH04 = "04_dot_product_attention"
SDPA = "scaled_dot_product_attention"


@pytest.mark.parametrize("chapter", ALL_CHAPTERS)
def test_the_solutions_are_not_flagged(root, chapter):
    assert scan_notebook(solved_notebook(root, chapter), chapter) == []


@pytest.mark.parametrize("chapter", ALL_CHAPTERS)
def test_the_released_cells_and_the_solutions_are_not_flagged(root, chapter):
    """The release's own code cells (experiments, demos) are the instructor's, not added;
    and the names the hidden tests import, followed as when graded, flag no solution."""
    released = nbformat.read(release_path(root, chapter), as_version=4)
    assert scan_notebook(solved_notebook(root, chapter), chapter, released) == []
    solution = nbformat.read(solution_path(root, chapter), as_version=4)
    assert scan_notebook(solved_notebook(root, chapter), chapter, released, solution) == []


def exercise_text(root, chapter: str, exercise: str) -> str:
    """What a student reads of an exercise in the released notebook: the markdown cells
    directly above its solution cell, and the cell itself (its docstring)."""
    cells = nbformat.read(release_path(root, chapter), as_version=4).cells
    at = next(
        i for i, c in enumerate(cells) if c.metadata.get("nbgrader", {}).get("grade_id") == exercise
    )
    text = [cells[at].source]
    for cell in reversed(cells[:at]):
        if cell.cell_type != "markdown":
            break
        text.insert(0, cell.source)
    return "\n\n".join(text)


def stated_as_forbidden(text: str, operator: str) -> bool:
    """Does one sentence of ``text`` name ``operator`` and say "not"?"""
    sentences = re.split(r"(?<=[.!?;])\s+|\n\s*\n", text)
    name = re.compile(rf"(?<![\w.]){re.escape(operator)}(?!\w)")
    return any(name.search(s) and re.search(r"\bnot\b|n't\b", s) for s in sentences)


RULES = [
    (chapter, exercise, operator)
    for chapter, exercises in FORBIDDEN.items()
    for exercise, operators in exercises.items()
    for operator in dict.fromkeys(o.replace("functional.", "F.") for o in operators)
]


@pytest.mark.parametrize(("chapter", "exercise", "operator"), RULES)
def test_every_operator_the_scan_withholds_points_for_is_forbidden_in_its_exercise(
    root, chapter, exercise, operator
):
    """A rule that costs points is stated where the student reads the exercise."""
    text = exercise_text(root, chapter, exercise)
    assert stated_as_forbidden(text, operator), (
        f"{chapter}'s exercise {exercise!r} loses its points when it calls {operator} "
        f"(autograder/scan.py, FORBIDDEN), but no sentence of its text says not to call "
        f"{operator}: state the rule above the exercise, e.g. 'Do not call `{operator}`: "
        "it is what you are writing'"
    )


def test_a_rule_is_stated_only_by_a_sentence_that_forbids():
    assert stated_as_forbidden("Do not call `F.glu`: it is what you write.", "F.glu")
    assert stated_as_forbidden("You may not use nn.GLU here.", "nn.GLU")
    assert not stated_as_forbidden("It works as in PyTorch's `F.glu`. It is not hard.", "F.glu")
    assert not stated_as_forbidden("Do not call `F.glu_` or `nn.GLUE`.", "F.glu")
    assert not stated_as_forbidden("Do not call `nn.TransformerEncoder`.", "nn.Transformer")


def _added(nb, after: str | None, source: str):
    """``nb`` with a code cell of the student's own after the cell ``after`` (None: first)."""
    at = 0
    if after is not None:
        at = 1 + next(
            i
            for i, c in enumerate(nb.cells)
            if c.metadata.get("nbgrader", {}).get("grade_id") == after
        )
    nb.cells.insert(at, nbformat.v4.new_code_cell(source))
    return nb


def test_a_cell_the_student_added_is_scanned_against_the_exercise_above_it(root):
    released = nbformat.read(release_path(root, CH04), as_version=4)
    nb = _added(solved_notebook(root, CH04), "padding_mask", "check_close = print")
    (flag,) = scan_notebook(nb, CH04, released)
    assert (flag.cell, flag.rule) == ("padding_mask", "redefines")
    assert flag.message.startswith("in a code cell the student added below padding_mask: ")
    nb = _added(solved_notebook(root, CH04), None, "import builtins\nbuiltins.print = None")
    assert [(f.cell, f.rule) for f in scan_notebook(nb, CH04, released)] == [
        (SDPA, "redefines")  # above every exercise: the first one
    ]


def test_an_operator_in_an_added_cell_counts_against_the_exercise_that_asks_for_it(root):
    released = nbformat.read(release_path(root, CH04), as_version=4)
    helper = "import torch.nn.functional as F\ndef fast(Q, K, V):\n    return F.scaled_dot_product_attention(Q, K, V)"
    nb = _added(solved_notebook(root, CH04), "causal_mask", helper)
    flags = scan_notebook(nb, CH04, released)
    assert [(f.cell, f.rule) for f in flags] == [(SDPA, "operator")]
    nb = _added(solved_notebook(root, CH04), "causal_mask", "print(F.softmax(torch.ones(3), 0))")
    assert scan_notebook(nb, CH04, released) == []  # an operator no exercise asks for


def test_a_released_cell_the_student_changed_is_scanned(root):
    released = nbformat.read(release_path(root, CH04), as_version=4)
    nb = solved_notebook(root, CH04)
    demo = next(c for c in nb.cells if c.cell_type == "code" and not c.metadata.get("nbgrader"))
    demo.source += "\ntorch.equal = lambda a, b: True"
    assert [f.rule for f in scan_notebook(nb, CH04, released)] == ["redefines"]


def rules(source, chapter=CH04, cell=SDPA) -> list[str]:
    return [f.rule for f in scan_cell(chapter, cell, source)]


@pytest.mark.parametrize(
    "source",
    [
        "from autograder.reference.attention import scaled_dot_product_attention",
        "import autograder.reference.attention as a\nout = a.scaled_dot_product_attention(Q, K, V)",
        "from autograder import reference\nreference.attention.scaled_dot_product_attention",
    ],
)
def test_the_reference_implementations_are_flagged(source):
    assert "reference" in rules(source)


@pytest.mark.parametrize(
    "chapter, cell, source",
    [
        (CH04, SDPA, "return F.scaled_dot_product_attention(Q, K, V), None"),
        (CH04, SDPA, "out = torch.nn.functional.scaled_dot_product_attention(Q, K, V)"),
        (
            CH04,
            SDPA,
            "from torch.nn.functional import scaled_dot_product_attention as s\ns(Q, K, V)",
        ),
        (CH04, SDPA, "f = getattr(F, 'scaled_dot_product_attention')"),
        (CH04, SDPA, "layer = nn.MultiheadAttention(8, 1)"),
        ("03_convs2s", "glu", "return F.glu(x, dim)"),
        ("03_convs2s", "glu", "import torch.nn.functional as G\nG.glu(x)"),
        (
            "05_multi_head_attention",
            "multi_head_attention",
            "self.mha = nn.MultiheadAttention(d, h)",
        ),
        ("06_transformer", "encoder_layer", "self.layer = nn.TransformerEncoderLayer(d, h)"),
        ("07_spatial_transformer", "affine_grid", "return F.affine_grid(theta, size)"),
        ("07_spatial_transformer", "bilinear_sample", "return F.grid_sample(U, grid)"),
    ],
)
def test_the_operator_an_exercise_replaces_is_flagged(chapter, cell, source):
    assert "operator" in rules(source, chapter, cell)


def test_an_operator_is_allowed_where_the_exercise_does_not_replace_it():
    # chapter 05's exercises may call chapter 04's attention, and F.softmax is everywhere
    assert rules("weights = F.softmax(scores, dim=-1)") == []
    assert rules("return F.glu(x)", CH04, SDPA) == []


def test_an_alias_imported_in_an_earlier_cell_is_followed():
    chapter, aliases = "07_spatial_transformer", {}
    first = "from torch.nn.functional import grid_sample as gs\n"
    assert scan_cell(chapter, "affine_grid", first, aliases) == []  # allowed there
    flags = scan_cell(chapter, "bilinear_sample", "return gs(U, grid)", aliases)
    assert [f.rule for f in flags] == ["operator"]


@pytest.mark.parametrize(
    "source",
    [
        "torch.allclose = lambda *a, **k: True",
        "torch.testing.assert_close = lambda *a, **k: None",
        "torch.equal = lambda a, b: True",
        "torch.Tensor.__eq__ = lambda a, b: True",
        "def check_close(*args, **kwargs):\n    pass",
        "check_shape = print",
        "def print(*args):\n    pass",
        "import builtins\nbuiltins.print = lambda *a: None",
        "import sys\nsys.excepthook = lambda *a: None",
        "get_ipython().set_custom_exc((Exception,), lambda *a, **k: None)",
        "globals()['check_close'] = lambda *a, **k: None",
        "__builtins__.print = None",
        "def diagnose(*names):\n    pass",
    ],
)
def test_redefining_what_the_tests_use_is_flagged(source):
    assert "redefines" in rules(source)


@pytest.mark.parametrize(
    "source",
    [
        "open('answers.txt', 'w').write('x')",
        "from pathlib import Path\nPath('x.py').write_text('')",
        "import os\nos.remove('../gradebook.db')",
        "import shutil\nshutil.rmtree('/course')",
    ],
)
def test_writing_files_is_flagged(source):
    assert "files" in rules(source)


@pytest.mark.parametrize(
    "source", ["exec('x = 1')", "eval('1')", "__import__('autograder')", "setattr(torch, 'x', 1)"]
)
def test_code_the_scan_cannot_read_is_flagged(source):
    assert "hidden" in rules(source)


@pytest.mark.parametrize(
    "source",
    [
        "from attention_course.handout import hand_out\nhand_out(output, 'output')",
        "import attention_course.handout as h\nh.hand_out = lambda *a, **k: None",
        "from attention_course import handout",
        "from IPython.display import publish_display_data",
        "get_ipython().display_pub.publish({})",
        "data = {'application/vnd.attention-course.handout+json': {}}",
    ],
)
def test_mentioning_the_handout_protocol_is_flagged(source):
    assert "handout" in rules(source)


def test_the_handout_mime_type_is_recognised():
    from attention_course.handout import MIME_TYPE

    assert rules(f"kind = {MIME_TYPE!r}") == ["handout"]


def test_reading_a_file_and_a_syntax_error_are_not_flagged():
    assert rules("text = open('data.txt').read()") == []
    assert rules("def f(:\n    pass") == []


def test_a_flag_says_where_and_why():
    (flag,) = scan_cell(CH04, SDPA, "x = 1\nreturn F.scaled_dot_product_attention(Q, K, V)")
    assert flag.line == 2 and flag.cell == SDPA
    assert "F.scaled_dot_product_attention" in str(flag) and "line 2" in str(flag)


@pytest.mark.slow
def test_grading_withholds_flagged_points_until_accepted(root, tmp_path):
    """A submission whose attention calls the reference earns full marks from the tests;
    the grader withholds them, lists the flag, and restores them once accepted."""
    import subprocess
    import sys

    from autograder.outfolder import CELLS_CSV, FLAGGED_CSV, read_csv
    from autograder.submissions import mutate, write_submission

    nb = mutate(
        solved_notebook(root, CH04),
        SDPA,
        "    d_k = Q.size(-1)",
        "    from autograder.reference.attention import scaled_dot_product_attention as ref\n"
        "    return ref(Q, K, V, mask)\n    d_k = Q.size(-1)",
    )
    write_submission(nb, tmp_path / "in", "copier", CH04)
    grade = [sys.executable, "-m", "autograder", "grade", str(tmp_path / "in")]
    grade += ["--out", str(tmp_path / "out"), "--workers", "1", *grade_options()]

    def scores():
        subprocess.run(grade, cwd=root, check=True, capture_output=True)
        return {r.cell: r for r in read_csv(tmp_path / "out" / CELLS_CSV)}

    rows = scores()
    for cell in ("test_attention_unmasked", "test_attention_masked"):
        assert rows[cell].points == 0 and rows[cell].status.startswith("flagged for review")
        assert "autograder.reference" in rows[cell].status
    assert rows["test_padding_mask"].points == rows["test_padding_mask"].max_points
    flagged = (tmp_path / "out" / FLAGGED_CSV).read_text(encoding="utf-8")
    assert f"copier,{CH04},{SDPA}" in flagged and ",no," in flagged

    (tmp_path / "out" / "accepted.csv").write_text(
        f"student,chapter,exercise\ncopier,{CH04},{SDPA}\n"
    )
    rows = scores()  # not graded again (unchanged), only the rows are rebuilt
    for cell in ("test_attention_unmasked", "test_attention_masked"):
        assert rows[cell].points == rows[cell].max_points and rows[cell].status == "graded"
    assert ",yes," in (tmp_path / "out" / FLAGGED_CSV).read_text(encoding="utf-8")


def spellings(operator: str) -> list[str]:
    """Every way a solution cell may call ``operator`` (a FORBIDDEN entry: ``functional.x``,
    ``F.x`` or ``nn.X``), each a line of code."""
    kind, name = operator.rsplit(".", 1)
    if kind in ("functional", "F"):
        return [
            f"y = F.{name}(x)",
            f"y = torch.nn.functional.{name}(x)",
            f"y = nn.functional.{name}(x)",
            f"from torch.nn.functional import {name} as renamed\ny = renamed(x)",
            f"from torch.nn import functional as G\ny = G.{name}(x)",
            f"import torch.nn.functional as G\ny = G.{name}(x)",
            f"import torch as T\ny = T.nn.functional.{name}(x)",
            f"y = getattr(F, '{name}')(x)",
            f"op = F.{name}\ny = op(x)",
        ]
    return [
        f"m = nn.{name}(8, 2)",
        f"m = torch.nn.{name}(8, 2)",
        f"from torch.nn import {name} as Renamed\nm = Renamed(8, 2)",
        f"from torch import nn as tnn\nm = tnn.{name}(8, 2)",
        f"import torch.nn as tnn\nm = tnn.{name}(8, 2)",
        f"m = getattr(nn, '{name}')(8, 2)",
    ]


@functools.cache
def _solved_text(root, chapter: str) -> str:
    """The chapter's solved notebook, read once for its many spellings."""
    return nbformat.writes(solved_notebook(root, chapter))


SPELLINGS = [
    (chapter, exercise, operator, spelling)
    for chapter, exercises in FORBIDDEN.items()
    for exercise, operators in exercises.items()
    for operator in operators
    for spelling in spellings(operator)
]


@pytest.mark.parametrize(("chapter", "exercise", "operator", "spelling"), SPELLINGS)
def test_every_forbidden_operator_is_flagged_in_every_spelling(
    root, chapter, exercise, operator, spelling
):
    """In the chapter's own notebook, whose set-up cell imports ``F`` and ``nn`` as it does:
    a call of the operator at the end of the exercise's solution cell is flagged, against
    that exercise (issue 36)."""
    nb = nbformat.reads(_solved_text(root, chapter), as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == exercise)
    cell.source += "\n\n\ndef uses_it(x):\n" + "\n".join(
        "    " + line for line in spelling.splitlines()
    )
    flags = [f for f in scan_notebook(nb, chapter) if f.rule == "operator"]
    assert flags and {f.cell for f in flags} == {exercise}, (spelling, flags)


def test_a_solution_that_borrows_a_name_a_test_cell_bound_is_flagged(root):
    """Chapter 05's test cells bind the grader's measurements as ``measure`` before
    ``attention_weights_bytes``: a solution that returns the measurement is flagged as
    using the reference code (issue 36), though its tests would pass."""
    chapter, exercise = "05_multi_head_attention", "attention_weights_bytes"
    nb = solved_notebook(root, chapter)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == exercise)
    cell.source += "\n\n\ndef borrowed(*args):\n    return measure.saved_attention_bytes(*args)"
    flags = [f for f in scan_notebook(nb, chapter) if f.rule == "reference"]
    assert [f.cell for f in flags] == [exercise] and "recorded answers" in str(flags[0])
    cell.source += "\n\n\ndef asked(*args):\n    return recorded('cost').measured_cost(*args)"
    flags = [f for f in scan_notebook(nb, chapter) if f.rule == "reference"]
    assert [f.cell for f in flags] == [exercise, exercise], flags


def test_a_name_only_a_hidden_test_binds_is_followed_as_when_graded(root):
    """Chapter 04's first test cell binds ``ref`` (the reference attention) in its hidden
    part only: ``ref.padding_mask`` in the next exercise fails in the student's notebook
    and works when graded. Given the solution notebook, as grading gives it, the scan
    follows the hidden import and flags it."""
    nb = solved_notebook(root, CH04)
    cell = next(
        c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "padding_mask"
    )
    cell.source += "\n\n\ndef borrowed(lengths):\n    return ref.padding_mask(lengths)"
    released = nbformat.read(release_path(root, CH04), as_version=4)
    assert scan_notebook(nb, CH04, released) == []  # what the student's notebook binds
    solution = nbformat.read(solution_path(root, CH04), as_version=4)
    flags = scan_notebook(nb, CH04, released, solution)
    assert [(f.cell, f.rule) for f in flags] == [("padding_mask", "reference")]


def test_a_submission_is_scanned_again_only_when_it_or_what_its_flags_depend_on_changed(
    root, tmp_path, monkeypatch
):
    """``OUT/scanned.json`` keeps each graded submission's flags: the next run scans a
    submission again only where the notebook, the chapter's release or the scan's rules
    changed."""
    from autograder import review
    from autograder.outfolder import Out

    chapter = "04_dot_product_attention"
    out = Out(tmp_path / "out")
    for path in (out.submitted("ada", chapter), out.released(chapter)):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(solution_path(root, chapter).read_text(encoding="utf-8"))
    scanned = []
    flag = Flag("attention", 3, "files", "writes a file")
    monkeypatch.setattr(review, "scan_notebook", lambda nb, *a: scanned.append(nb) or [flag])

    def flags():
        scanner = review._Scanner(root, out)
        found = scanner.flags("ada", chapter)
        scanner.save()
        return found

    assert flags() == [flag] and len(scanned) == 1
    assert flags() == [flag] and len(scanned) == 1  # remembered
    out.submitted("ada", chapter).write_text(
        out.submitted("ada", chapter).read_text(encoding="utf-8").replace("Chapter", "chapter")
    )
    assert flags() == [flag] and len(scanned) == 2  # the notebook changed
    assert flags() == [flag] and len(scanned) == 2
    with out.released(chapter).open("a") as released:
        released.write("\n")
    assert flags() == [flag] and len(scanned) == 3  # the release changed
    (out.folder / review.SCANNED).write_text("not JSON")
    assert flags() == [flag] and len(scanned) == 4  # an unreadable record: scanned again
