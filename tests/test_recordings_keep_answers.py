"""The kit's recordings keep the graded questions' answers (issue 60, part 4): read as a
student reads them (``torch.load(weights_only=True)``, nothing of the instructor's side),
each chapter's recording holds at most one case of each graded question, none of its known
mistakes' texts, no value more precise than its visible test needs; and a notebook that
answers the graded questions from the recording alone fails their visible tests.

What the reference measured inside a question's visible test is kept as the test reads it, at
one case; the test measures its other cases in the notebook, on the student's own code or
with given code (torch's counters). :data:`PENDING` lists a question whose test does not yet.
"""

import contextlib
import io
import math
import os
import re
from pathlib import Path

import nbformat
import pytest
import torch
from test_mistakes import _visible

from attention_course import diagnosis as kit_diagnosis
from attention_course import recorded as R
from attention_course.diagnosis import SOLUTION
from autograder.chapters import ALL_CHAPTERS, solution_path
from autograder.mistakes import catalogue
from autograder.record import (
    QUESTIONS,
    ROUNDED,
    ROUNDED_CALLS,
    chapter_question_tags,
    question_names,
)

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("one_thread")

# Questions whose visible test reads the reference's measurements at more than one case, or a
# curve from which the answer can be read (the kit must answer those calls for the test to
# pass, so the recording keeps them): (chapter, grade id) -> what the test cell must change.
# Empty since issue 60: every such test measures its other cases in the notebook. The test
# below fails while this list and the recordings differ.
PENDING: dict[tuple[str, str], str] = {}


@pytest.fixture(scope="module", params=ALL_CHAPTERS)
def recording(request):
    """(chapter, its recording as a student's torch.load reads it)."""
    chapter = request.param
    return chapter, torch.load(R.DATA / f"{chapter}.pt", weights_only=True)


def _strings(x):
    """Every string in a recording's data."""
    if isinstance(x, str):
        yield x
    elif isinstance(x, dict):
        for k, v in x.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(x, list | tuple):
        for v in x:
            yield from _strings(v)


def _numbers(x):
    """The numbers of a packed value (a tensor's count as one)."""
    if isinstance(x, bool):
        return 0
    if isinstance(x, int | float | torch.Tensor):
        return 1
    if isinstance(x, dict):
        return sum(_numbers(v) for k, v in x.items() if k != "~")
    if isinstance(x, list | tuple):
        return sum(_numbers(v) for v in x)
    return 0


def _curves(x):
    """The lists of three or more plain numbers in a packed value: a measurement at every
    point of a range, from which the point where it turns can be read."""
    if isinstance(x, dict) and x.get("~") == "dict":  # a packed dict: its values, each alone
        for v in x["v"]:
            yield from _curves(v)
    elif isinstance(x, list):
        if len(x) >= 3 and all(isinstance(v, int | float) and not isinstance(v, bool) for v in x):
            yield x
        for v in x:
            yield from _curves(v)
    elif isinstance(x, dict):
        for v in x.values():
            yield from _curves(v)


def test_the_questions_are_those_the_instructor_guide_counts():
    guide = (ROOT / "book" / "instructor_guide.md").read_text()
    words = {"one": 1, "two": 2, "three": 3, "four": 4}
    assert set(QUESTIONS) == set(ALL_CHAPTERS)
    for chapter, cells in QUESTIONS.items():
        (row,) = [line for line in guide.splitlines() if line.startswith(f"| `{chapter}` |")]
        (count,) = re.findall(r"\b(one|two|three|four) questions\b", row)
        assert len(cells) == words[count], chapter
        solution_cells = {
            c.metadata.get("nbgrader", {}).get("grade_id")
            for c in nbformat.read(solution_path(ROOT, chapter), 4).cells
            if c.metadata.get("nbgrader", {}).get("solution")
        }
        assert set(cells) <= solution_cells, (chapter, set(cells) - solution_cells)


def test_one_case_of_each_question_and_none_of_its_mistakes_texts(recording):
    chapter, data = recording
    prints = data["mistakes"]
    names = question_names(prints, chapter)
    assert set(names.values()) == set(QUESTIONS[chapter]), "a question's cell defines nothing?"
    cases = {}
    for entry in prints["calls"]:
        if entry["name"] in names:
            cases[entry["name"]] = cases.get(entry["name"], 0) + 1
    assert cases and all(n == 1 for n in cases.values()), cases
    questions = [m for m in catalogue(chapter) if m.cell in QUESTIONS[chapter]]
    assert questions, chapter
    tags = chapter_question_tags(chapter, {m.name: m.cell for m in questions})
    for m in questions:  # called by a number, without text: their names read like texts
        assert prints["says"].get(tags[m.name]) == "", m.name
        assert all(m.name not in entry["results"] for entry in prints["calls"]), m.name
    texts = [t for m in questions for t in (m.says, m.symptom, m.name) if len(t) > 12]
    found = [s for s in _strings(data) for t in texts if t in s]
    assert not found, f"a graded question's mistake text is in the recording: {found[:3]}"


def test_values_are_no_more_precise_than_the_visible_test(recording):
    chapter, data = recording
    prints = data["mistakes"]
    names = question_names(prints, chapter)
    for cell, step in ROUNDED.get(chapter, {}).items():
        outs = [
            result["out"]
            for entry in prints["calls"]
            if names.get(entry["name"]) == cell
            for result in entry["results"].values()
            if result["kind"] == "ok"
        ]
        assert outs, cell
        for out in outs:
            assert isinstance(out, dict) and out["~"] == "rounded" and out["step"] == step, out
            assert R.quantised(out["v"], step) == out["v"]
    for key, step in ROUNDED_CALLS.get(chapter, {}).items():
        values = [entry["out"] for entry in data["calls"][key]]
        assert values, key
        for value in values:
            assert isinstance(value, float) and R.quantised(value, step) == value, value


def test_the_measurements_of_a_question_hold_one_case_and_no_curve(recording):
    """Each reference function called inside a question's test block answers one case, and
    no answer is a curve; except the questions :data:`PENDING` lists, until their tests
    measure in the notebook."""
    chapter, data = recording
    entries = [e for es in data["calls"].values() for e in es]
    assert entries and all("block" in e for e in entries), (
        f"run python -m autograder record {chapter}"
    )
    names = question_names(data["mistakes"], chapter)
    # the chapter's exercises, which a question's test may run as the course's (so that an
    # exercise's mistake costs its own points only): their results are no measurement
    exercises = {n for ns in data["mistakes"]["defines"].values() for n in ns} - set(names)
    found = {}
    for key, es in data["calls"].items():
        if set(key.split(".")) & exercises:  # a function, or a layer's method
            continue
        for cell in QUESTIONS[chapter]:
            inside = [
                e for e in es if set(e["block"] or ()) & {n for n, c in names.items() if c == cell}
            ]
            cases = {repr(e["in"]) for e in inside}  # a call made twice is one case
            curves = [c for e in inside for c in _curves(e["out"])]
            if len(cases) > 1 or curves:
                found.setdefault((chapter, cell), []).append(
                    f"{key}: {len(cases)} cases" + (f", {len(curves)} curves" if curves else "")
                )
    pending = {k for k in PENDING if k[0] == chapter}
    assert set(found) == pending, (
        f"found {found}; PENDING lists {sorted(pending)}: a test that reads measured cases "
        "or curves of a question must measure in the notebook (or PENDING is out of date)"
    )


def test_a_withheld_mistake_is_named_without_its_text():
    book = R.Book("00_test", mistakes={"says": {"off-by-one": ""}, "exercise": {}, "defines": {}})
    diagnosis = kit_diagnosis.Diagnosis("00_test", {}, ("answer",))
    diagnosis.matching = lambda error: [
        kit_diagnosis.Named("off-by-one", book.mistakes["says"]["off-by-one"])
    ]
    text = diagnosis.explain(AssertionError("answer = 3, but ..."))
    assert kit_diagnosis.QUESTION in text and "[known mistake: off-by-one]" in text
    assert ": ." not in text and "  " not in text


def test_a_rounded_value_matches_on_its_grid_only():
    packed = R.rounded(72.0, 0.1)
    assert packed["v"] != 72.0 and abs(packed["v"] - 72.0) < 0.05 * 72
    assert R.close(packed, 72.0) and R.close(72, packed) and R.close(packed, R.rounded(72, 0.1))
    assert not R.close(packed, 8.0) and not R.close(packed, 0.85 * 72)
    assert R.unpack(packed) == packed["v"]
    assert R.rounded(0.0, 0.1)["v"] == 0.0 and math.isnan(R.quantised(float("nan"), 0.1))


# ---------------------------------------------------------------- the lookup table


def _lookup(name: str, prints: dict):
    """``name`` answered from the recording alone: the recorded answer of the call with the
    same inputs, else the one answer recorded (the best a table can do)."""
    entries = [e for e in prints["calls"] if e["name"] == name]

    def answer(*args, **kwargs):
        asked = R.digest(R.pack((args, kwargs)))
        same = [e for e in entries if R.close(e["in"], asked)] or entries
        if not same:
            raise LookupError(f"the recording holds no answer of {name}")
        result = same[0]["results"][SOLUTION]
        if result["kind"] == "error":
            raise ValueError(result["message"])
        return R.unpack(result["out"])

    return answer


@pytest.mark.parametrize("chapter", ALL_CHAPTERS)
def test_a_notebook_of_recorded_answers_fails_the_questions_visible_tests(chapter, monkeypatch):
    """The solution notebook, as a student has it from the kit (visible tests, the kit's
    diagnosis, the recorded reference), with each graded question answered by a lookup in
    the recording: every question's visible test fails."""
    monkeypatch.setattr(R, "instructor_entry", lambda name: None)
    monkeypatch.setattr(kit_diagnosis, "instructor_entry", lambda name: None)
    monkeypatch.setenv("ATTENTION_COURSE_GRADING", "1")
    monkeypatch.delenv(R.RECORD_ENV, raising=False)
    monkeypatch.chdir(solution_path(ROOT, chapter).parent)
    prints = torch.load(R.DATA / f"{chapter}.pt", weights_only=True)["mistakes"]
    namespace: dict = {"__name__": "__main__"}
    questions, tests, failed, test_of = set(QUESTIONS[chapter]), {}, {}, None
    experiments = False  # as tests/test_mistakes.py: after the first experiment, only exercises
    for cell in nbformat.read(solution_path(ROOT, chapter), 4).cells:
        meta = cell.metadata.get("nbgrader", {})
        grade_id = meta.get("grade_id", "")
        experiments |= grade_id.startswith("experiment")
        counts = meta.get("solution") or meta.get("grade") or grade_id == "setup"
        if cell.cell_type != "code" or (experiments and not counts):
            continue
        if meta.get("grade") and test_of:
            tests[grade_id], test_of = test_of, None
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(_visible(cell.source), grade_id or "<cell>", "exec"), namespace)
        except Exception as error:
            failed[grade_id] = f"{type(error).__name__}: {error}"
        if grade_id in questions:
            for name in prints["defines"][grade_id]:
                namespace[name] = _lookup(name, prints)
            test_of = grade_id
    torch.manual_seed(0)
    assert set(tests.values()) == questions, tests
    assert not {c: m for c, m in failed.items() if c not in tests}, (
        "the rest of the notebook failed"
    )
    passed = sorted(q for t, q in tests.items() if t not in failed)
    assert not passed, (
        f"answered from the recording alone, these pass their visible tests: {passed}"
    )
    assert "ATTENTION_COURSE_RECORD" not in os.environ
