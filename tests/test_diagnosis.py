"""The diagnosis in-process: a failing check names the catalogued mistake the code makes,
and nothing else (the end-to-end version, through the grader's feedback, is in
``test_grading.py``)."""

import linecache
import re

import nbformat
import pytest
import torch
from mutants import MUTANTS, UNCATALOGUED

from autograder.chapters import solution_path
from autograder.mistakes import apply, catalogue

CH04 = "04_dot_product_attention"


def notebook_namespace(root, chapter, entry=None) -> dict:
    """The names a student's kernel has after the set-up and exercise cells ran, with
    ``entry``'s mistake made."""
    ns: dict = {}
    for cell in nbformat.read(solution_path(root, chapter), as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and (meta.get("grade_id") == "setup" or meta.get("solution")):
            source = (
                apply(cell.source, entry)
                if entry and entry.cell == meta["grade_id"]
                else cell.source
            )
            exec(compile(source, meta["grade_id"], "exec"), ns)
    return ns


def entry(name, chapter=CH04):
    return next(m for m in MUTANTS[chapter] + UNCATALOGUED[chapter] if m.name == name)


def tags(error: BaseException) -> list[str]:
    return re.findall(r"\[known mistake: ([a-z0-9-]+)\]", str(error))


def worked_example(ns):
    """The worked example of the visible test: one query, two keys, d_k = 2."""
    q, k, v = torch.tensor([[1.0, 0.0]]), torch.eye(2), torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    _, w = ns["scaled_dot_product_attention"](q, k, v)
    ns["check_close"](w, torch.softmax(torch.tensor([[2**-0.5, 0.0]]), -1), "weights")


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)


def test_a_catalogued_mistake_is_named(root):
    ns = notebook_namespace(root, CH04, entry("no-scaling"))
    with pytest.raises(AssertionError) as failure:
        with ns["diagnose"]("scaled_dot_product_attention"):
            worked_example(ns)
    assert tags(failure.value) == ["no-scaling"]
    assert "the scores are not divided by sqrt(d_k)" in str(failure.value)


def test_correct_code_passes_and_the_names_are_restored(root):
    ns = notebook_namespace(root, CH04)
    original = ns["scaled_dot_product_attention"]
    with ns["diagnose"]("scaled_dot_product_attention"):
        assert ns["scaled_dot_product_attention"] is not original  # watched inside
        worked_example(ns)
    assert ns["scaled_dot_product_attention"] is original


def test_the_names_are_restored_after_a_failure(root):
    ns = notebook_namespace(root, CH04, entry("no-scaling"))
    original = ns["scaled_dot_product_attention"]
    with pytest.raises(AssertionError), ns["diagnose"]("scaled_dot_product_attention"):
        worked_example(ns)
    assert ns["scaled_dot_product_attention"] is original


def test_a_wrong_answer_outside_the_catalogue_is_not_named(root):
    ns = notebook_namespace(root, CH04, entry("scaled-by-d_k"))
    with pytest.raises(AssertionError) as failure:
        with ns["diagnose"]("scaled_dot_product_attention"):
            worked_example(ns)
    assert tags(failure.value) == []
    assert "Diagnosis" not in str(failure.value)


def test_a_failure_the_solution_shares_blames_no_mistake(root):
    """The check fails for a reason outside the exercise: the solution would fail it too."""
    ns = notebook_namespace(root, CH04)
    with pytest.raises(AssertionError) as failure:
        with ns["diagnose"]("scaled_dot_product_attention"):
            _, w = ns["scaled_dot_product_attention"](*torch.randn(3, 1, 4, 8))
            ns["check_close"](w, torch.zeros_like(w), "weights")
    assert tags(failure.value) == []


def test_an_error_says_what_raised_it_and_what_it_was_given(root):
    ns = notebook_namespace(root, CH04, entry("weights-times-values-elementwise"))
    Q, K, V = torch.randn(2, 3, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 4)
    with pytest.raises(RuntimeError) as failure:
        with ns["diagnose"]("scaled_dot_product_attention"):
            ns["scaled_dot_product_attention"](Q, K, V)
    message = str(failure.value)
    assert "must match the size of tensor b" in message  # PyTorch's own words stay
    assert "Your scaled_dot_product_attention raised RuntimeError" in message
    assert "Q = a float32 tensor of shape (2, 3, 8)" in message
    assert "V = a float32 tensor of shape (2, 5, 4)" in message
    assert tags(failure.value) == ["weights-times-values-elementwise"]


def test_an_unfinished_exercise_keeps_its_message(root):
    ns = notebook_namespace(root, CH04)

    def scaled_dot_product_attention(Q, K, V, mask=None):
        raise NotImplementedError("Exercise not done yet")

    ns["scaled_dot_product_attention"] = scaled_dot_product_attention
    with pytest.raises(NotImplementedError) as failure:
        with ns["diagnose"]("scaled_dot_product_attention"):
            worked_example(ns)
    assert str(failure.value) == "Exercise not done yet"


def test_a_module_mistake_is_named(root):
    ns = notebook_namespace(root, CH04, entry("values-from-keys"))
    with pytest.raises(AssertionError) as failure:
        with ns["diagnose"]("SelfAttention"):
            layer = ns["SelfAttention"](d_model=16, d_k=8, d_v=4)
            assert isinstance(layer, torch.nn.Module)
            output, _ = layer(torch.randn(2, 5, 16))
            ns["check_shape"](output, (2, 5, 4), "output")
    assert tags(failure.value) == ["values-from-keys"]


def test_a_mistake_seen_only_in_the_gradient_is_named(root):
    """theta.detach() changes no value, only which parameters a gradient reaches."""
    chapter = "07_spatial_transformer"
    ns = notebook_namespace(root, chapter, entry("theta-detached", chapter))
    with pytest.raises(AssertionError) as failure:
        with ns["diagnose"]("SpatialTransformer"):
            st = ns["SpatialTransformer"](ns["LocalisationNet"](in_size=16), out_size=8)
            V, theta = st(torch.randn(2, 1, 16, 16, requires_grad=True))
            V.sum().backward()
            grads = [p.grad for p in st.parameters() if p.grad is not None]
            assert grads, "no gradient reached the localisation network"
    assert tags(failure.value) == ["theta-detached"]


def test_a_mistake_in_a_function_that_builds_a_module_is_named(root):
    """Chapter 09's patch_embedding_as_conv returns an nn.Conv2d: the mistake's convolution
    and the student's are compared by their sizes and weights, not by identity."""
    chapter = "09_vision_transformer"
    ns = notebook_namespace(root, chapter, entry("conv-kernel-without-permute", chapter))
    with pytest.raises(AssertionError) as failure:
        with ns["diagnose"]("PatchEmbedding", "patch_embedding_as_conv"):
            embedding = ns["PatchEmbedding"](2, 3, 4)
            conv = ns["patch_embedding_as_conv"](embedding)
            images = torch.randn(1, 3, 4, 4)
            ns["check_close"](conv(images).flatten(2).transpose(1, 2), embedding(images))
    assert tags(failure.value) == ["conv-kernel-without-permute"]


def test_catalogue_names_and_lines():
    for chapter, mistakes in MUTANTS.items():
        names = [m.name for m in mistakes]
        assert len(names) == len(set(names)) >= 4, chapter
        for m in mistakes:
            assert re.fullmatch(r"[a-z0-9-]+", m.name), m.name
            assert m.says and "\n" not in m.says and not m.says.endswith("."), m.name
            assert m.breaks, m.name
    assert catalogue(CH04) == MUTANTS[CH04]


def test_diagnose_needs_names(root):
    ns = notebook_namespace(root, CH04)
    with pytest.raises(TypeError, match="names of the code"):
        ns["diagnose"](ns["scaled_dot_product_attention"])


def run_cell(ns: dict, source: str, name: str) -> None:
    """Run ``source`` in ``ns`` as IPython runs a cell: its lines kept in ``linecache``."""
    filename = f"<cell {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), ns)


@pytest.mark.parametrize(
    ("exercise", "source"),
    [
        (
            "scaled_dot_product_attention",
            "def scaled_dot_product_attention(Q, K, V, mask=None):\n"
            "    return F.scaled_dot_product_attention(Q, K, V), None\n",
        ),
        (
            "SelfAttention",
            "class SelfAttention(nn.Module):\n"
            "    def __init__(self, d_model, d_k, d_v=None):\n"
            "        super().__init__()\n"
            "        self.attn = nn.MultiheadAttention(d_model, 1)\n",
        ),
    ],
)
def test_calling_the_operator_an_exercise_asks_for_is_warned_before_grading(
    root, exercise, source, capsys
):
    ns = notebook_namespace(root, CH04)
    run_cell(ns, source, exercise)
    with ns["diagnose"](exercise):
        pass
    warning = capsys.readouterr().err
    assert f"your {exercise} calls" in warning and "flagged for review" in warning, warning


def test_the_solution_is_not_warned(root, capsys):
    ns = notebook_namespace(root, CH04)
    for cell in nbformat.read(solution_path(root, CH04), as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("solution"):
            run_cell(ns, cell.source, meta["grade_id"])
    with ns["diagnose"]("scaled_dot_product_attention", "SelfAttention", "CrossAttention"):
        pass
    assert capsys.readouterr().err == ""
