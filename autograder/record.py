"""``record``: the reference's answers to each chapter's visible tests, for the student kit.

The released notebooks' visible tests ask the reference for the values they compare with
(``ref = recorded("attention")``, :mod:`attention_course.recorded`). The kit holds no
reference: it holds what the reference answered when this command ran the chapter's
solution notebook, its hidden tests taken out (:func:`autograder.solutions_out.solutions_notebook`),
in grading mode, with ``ATTENTION_COURSE_RECORD`` set: every call a visible test made of
the reference, its inputs and its result, written to
``attention_course/data/recorded/<chapter>.pt``.

A graded question keeps its answer (:func:`keep_answers`, run on what the notebook wrote):
the known mistakes' results (the kit's fingerprints) keep one case of each question's
functions, the one that tells the most of its mistakes apart, none of its mistakes' texts,
and for names a number (:func:`question_tags`); a value that the visible test compares
within 10 % is kept on a grid of that step, no more precise than the test. What the
reference measured inside a question's test block is kept as the test asks it, at one case:
a question's visible test measures its other cases in the notebook
(``tests/test_recordings_keep_answers.py`` checks it). The cells that grading skips
(training, plots, explorers) are not run.

A recording that no longer fits the tests shows itself: the solution notebooks run against
the recorded values in the test suite, and a test whose inputs or reference changed fails
there (``NotRecorded``, or values that differ); run ``python -m autograder record`` again.
"""

import itertools
import math
import os
from pathlib import Path

import nbformat
import torch
from nbclient import NotebookClient

from attention_course import GRADING_ENV
from attention_course.diagnosis import SOLUTION
from attention_course.recorded import DATA, RECORD_ENV, close, quantised, rounded
from autograder.chapters import CourseError, solution_path, validate_chapters
from autograder.experiments import is_marked
from autograder.solutions_out import solutions_notebook

SAVE = "from attention_course.recorded import save_recording\n\nsave_recording()"

# The graded questions of each chapter: the grade ids of their solution cells (a number to
# compute, a prediction checked against a measurement; the instructor guide's table lists
# them as the chapter's "questions").
QUESTIONS: dict[str, tuple[str, ...]] = {
    "01_rnn_bottleneck": ("gru_parameters", "sequential_steps"),
    "02_bahdanau_attention": ("scores_per_step", "score_multiply_adds"),
    "03_convs2s": ("dilated_receptive_field", "dilated_layers_to_connect"),
    "04_dot_product_attention": ("dot_product_variance", "attention_outgrows_projections"),
    "05_multi_head_attention": ("multi_head_cost", "head_score_rank", "attention_weights_bytes"),
    "06_transformer": ("encoder_layer_parameters", "relative_shift"),
    "07_spatial_transformer": ("compose_theta", "reinforce_mse"),
    "08_language_models": ("window_layers_to_reach", "kv_cache_max_len", "prefix_matching_score"),
    "09_vision_transformer": ("smallest_patch_within", "patch_embedding_multiply_adds"),
    "10_attention_since_2023": ("yarn_shortest_length", "absorbed_cheaper_from"),
}

# Questions whose visible test accepts an answer within 10 % of a measurement: the answers'
# and the mistakes' results are kept on a grid of that relative step (grade id -> step).
ROUNDED: dict[str, dict[str, float]] = {
    "04_dot_product_attention": {"dot_product_variance": 0.1},
    "07_spatial_transformer": {"reinforce_mse": 0.1},
}
# Measurements of the reference that a visible test compares within 10 %: kept on a grid of
# half that step (module.function -> step), so that the solution's answer, within about 2 %
# of the measurement, stays well inside the test's 10 %, and a mistake stays outside.
ROUNDED_CALLS: dict[str, dict[str, float]] = {
    "07_spatial_transformer": {"hard_attention.reinforce_error": 0.05},
}


def record(root: Path, chapters: list[str] | None = None, out: Path = DATA) -> list[Path]:
    """Run each chapter's solution notebook (no hidden tests) recording the reference's
    answers; write ``out/<chapter>.pt``, the graded questions' answers kept out
    (:func:`keep_answers`). Returns the files written."""
    written = []
    for chapter in validate_chapters(root, chapters):
        nb = solutions_notebook(root, chapter)
        # the cells grading skips (training, plots, explorers) are left out here too: no
        # visible test reads them, and an explorer's widget cell leaves nbclient waiting for
        # an execute reply until the cell's timeout (ipywidgets' interactive drawing through
        # matplotlib, 2026-11-29)
        nb.cells = [c for c in nb.cells if not is_marked(c)]
        nb.cells.append(nbformat.v4.new_code_cell(SAVE))
        target = Path(out) / f"{chapter}.pt"
        saved = {k: os.environ.get(k) for k in (RECORD_ENV, GRADING_ENV)}
        os.environ[RECORD_ENV], os.environ[GRADING_ENV] = str(target), "1"
        try:
            client = NotebookClient(
                nb,
                timeout=600,
                kernel_name="python3",
                resources={"metadata": {"path": str(solution_path(root, chapter).parent)}},
            )
            client.execute()
        except Exception as error:
            raise CourseError(f"recording {chapter} failed: {error}") from error
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        data = torch.load(target, weights_only=True)
        unnamed = keep_answers(data, chapter)
        torch.save(data, target)
        for mistake, why in unnamed.items():
            print(f"{chapter}: the kit cannot name {mistake} from one case ({why})")
        written.append(target)
    return written


# ---------------------------------------------------------------- keeping the answers out


def question_tags(cell: str, mistakes) -> dict[str, str]:
    """What the kit calls each known mistake of the graded question ``cell``: the question
    and a number (``scores-per-step-2``), in the order of the mistakes' names. A mistake's
    own name reads like its text ("local-window-without-centre"), and the recording a
    student can read would list them as a checklist of the answer; the grader names them."""
    stem = cell.replace("_", "-")
    return {m: f"{stem}-{i}" for i, m in enumerate(sorted(mistakes), start=1)}


def chapter_question_tags(chapter: str, exercise_of: dict[str, str]) -> dict[str, str]:
    """:func:`question_tags` of every graded question of ``chapter``, for the mistakes of
    ``exercise_of`` (mistake -> the grade id of its exercise)."""
    tags = {}
    for cell in QUESTIONS.get(chapter, ()):
        tags |= question_tags(cell, [m for m, c in exercise_of.items() if c == cell])
    return tags


def question_names(prints: dict, chapter: str) -> dict[str, str]:
    """Name of each function a graded question's cell defines -> the cell's grade id."""
    defines = prints.get("defines", {})
    return {name: cell for cell in QUESTIONS.get(chapter, ()) for name in defines.get(cell, ())}


def _same(a: dict | None, b: dict | None) -> bool:
    """Two versions' results on one call look alike to the kit's diagnosis."""
    if a is None or b is None or a["kind"] != b["kind"]:
        return a is None and b is None
    if a["kind"] == "error":
        return a["type"] == b["type"]
    return close(a["out"], b["out"])


def _first_apart(calls: list[dict], m: str) -> float:
    """Where the visible test stops for mistake ``m``: the index of the first call on which
    it gives other than the solution (inf: none). The kit sees only the calls made before."""
    for i, e in enumerate(calls):
        if not _same(e["results"].get(m), e["results"].get(SOLUTION)):
            return i
    return math.inf


def _nameable(kept: list[tuple[int, dict]], m: str, others: list[str], stop: float) -> bool:
    """Does the kit name ``m`` (alone) from the kept calls that its test reaches?"""
    reached = [e for i, e in kept if i <= stop]

    def alike(other: str) -> bool:
        return all(_same(e["results"].get(m), e["results"].get(other)) for e in reached)

    return bool(reached) and not alike(SOLUTION) and not any(alike(o) for o in others)


def _choose(calls: list[dict], names: list[str], mistakes: list[str]) -> list[int]:
    """The indices (in ``calls``) of one call of each of a question's functions: those from
    which the kit names the most of its mistakes, each from the calls its test reaches
    before it fails there; of equals, the earliest."""
    stops = {m: _first_apart(calls, m) for m in mistakes}
    options = [[i for i, e in enumerate(calls) if e["name"] == n] for n in names]
    best, chosen = None, []
    for combo in itertools.product(*[o for o in options if o]):
        kept = [(i, calls[i]) for i in combo]
        named = sum(_nameable(kept, m, [o for o in mistakes if o != m], stops[m]) for m in mistakes)
        score = (named, -sum(combo))
        if best is None or score > best:
            best, chosen = score, list(combo)
    return chosen


def keep_answers(data: dict, chapter: str) -> dict[str, str]:
    """Keep the graded questions' answers out of a chapter's recording (``data``, as
    ``torch.load`` reads it; changed in place): of the known mistakes' results on each
    question's functions, one call (:func:`_choose`), the mistakes' texts left empty (the
    kit then says "a known mistake of this question") and their names replaced by
    :func:`question_tags`; the values a
    visible test compares within 10 % on a grid (:data:`ROUNDED`, :data:`ROUNDED_CALLS`).
    Returns the questions' mistakes the kit can no longer name from that one case, with why."""
    prints = data.get("mistakes") or {}
    names = question_names(prints, chapter)
    cells = set(QUESTIONS.get(chapter, ()))
    mistakes = {m: cell for m, cell in prints.get("exercise", {}).items() if cell in cells}
    for m in mistakes:
        prints["says"][m] = ""
    steps = ROUNDED.get(chapter, {})
    calls = prints.get("calls", [])
    for entry in calls:
        step = steps.get(names.get(entry["name"], ""))
        if step:
            for result in entry["results"].values():
                if result["kind"] == "ok":
                    result["out"] = rounded(result["out"], step)
    unnamed = {}
    drop = set()
    for cell in QUESTIONS.get(chapter, ()):
        own = [n for n, c in names.items() if c == cell]
        ms = [m for m, c in mistakes.items() if c == cell]
        order = [i for i, e in enumerate(calls) if e["name"] in own]
        cell_calls = [calls[i] for i in order]
        chosen = _choose(cell_calls, own, ms)
        drop |= {order[j] for j in range(len(order)) if j not in chosen}
        kept = [(j, cell_calls[j]) for j in chosen]
        for m in ms:
            stop = _first_apart(cell_calls, m)
            if not _nameable(kept, m, [o for o in ms if o != m], stop):
                unnamed[m] = (
                    "the test stops before the kept case"
                    if not any(j <= stop for j, _ in kept)
                    else "the kept case does not tell it apart"
                )
    prints["calls"] = [e for i, e in enumerate(calls) if i not in drop]
    for key, step in ROUNDED_CALLS.get(chapter, {}).items():
        for entry in data["calls"].get(key, []):
            if isinstance(entry["out"], int | float) and not isinstance(entry["out"], bool):
                entry["out"] = quantised(entry["out"], step)
    _rename(prints, chapter_question_tags(chapter, mistakes))
    return unnamed


def _rename(prints: dict, tags: dict[str, str]) -> None:
    """Call the graded questions' mistakes by their :func:`question_tags` in ``prints``
    (``data["mistakes"]``, changed in place)."""
    for key in ("says", "exercise"):
        prints[key] = {tags.get(m, m): v for m, v in prints.get(key, {}).items()}
    for entry in prints.get("calls", []):
        entry["results"] = {tags.get(m, m): r for m, r in entry["results"].items()}
