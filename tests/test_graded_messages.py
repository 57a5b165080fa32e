"""A graded question's failure says that the answer differs, never by how much, which way,
or what the answer is (issue 60, part 5; DESIGN.md, "How an exercise reads").

Each graded question's function, solved, is swapped for one that answers wrong (the right
answer plus one, then minus one; a tensor shifted by one, a flag flipped), and the
question's test cells run on it in-process, as ``test_mistakes.py`` runs a chapter: once as
released (every answer wrong), once whole with only the cases the visible tests do not ask
wrong (so that the hidden tests' own messages are read). The message must hold neither the
right answer of the call that failed (numbers the question was asked with aside) nor a word
that tells the direction ("more", "too high", ...), nor, for a tensor, an expected entry. A
student who reads it cannot bisect. A known mistake's diagnosis is left out here: its text
is the catalogue's (``autograder/mistakes/``).

The graded questions of a chapter are the functions its notebook's header names in the item
"... graded questions ...", and the predictions of ``PREDICTIONS``.
"""

import contextlib
import functools
import io
import re

import nbformat
import pytest
import torch
from conftest import ROOT
from test_mistakes import _grading_mode, _visible, cells_to_run

from autograder.chapters import ALL_CHAPTERS, solution_path

pytestmark = pytest.mark.usefixtures("one_thread")

# Graded exercises the header lists as exercises, but that ask for a prediction checked
# against a measurement (a number to compute): held to the same rule.
PREDICTIONS = {"05_multi_head_attention": ("multi_head_cost",)}

DIRECTION = re.compile(
    r"\b(more|fewer|too high|too low|too many|too few|larger|smaller|greater|less|lower|"
    r"higher|bigger|above|below|exceeds?|short by|over by|overshoots?|undershoots?)\b",
    re.IGNORECASE,
)


def graded_questions(nb) -> list[str]:
    """The functions the header's item "... graded question(s) ..." names, in its order."""
    header = nb.cells[0].source
    items = [line for line in header.splitlines() if re.match(r"\d+\.\s", line)]
    (item,) = [line for line in items if "graded question" in line]
    return re.findall(r"`(\w+)`", item)


def questions(root, chapter) -> list[str]:
    nb = nbformat.read(solution_path(root, chapter), as_version=4)
    return graded_questions(nb) + list(PREDICTIONS.get(chapter, ()))


@functools.cache
def solved(root, chapter) -> dict:
    """The chapter's namespace after its exercises and test cells ran, solved."""
    namespace: dict = {"__name__": "__main__"}
    with _grading_mode():
        for grade_id, _graded, source, _counts in cells_to_run(root, chapter):
            with contextlib.suppress(Exception), contextlib.redirect_stdout(io.StringIO()):
                exec(compile(source, grade_id or "<cell>", "exec"), namespace)
    return namespace


def perturb(value, delta: int):
    """A wrong answer near ``value``."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + delta
    if isinstance(value, float):
        return value + delta * max(1.0, 0.5 * abs(value))
    if isinstance(value, torch.Tensor):
        return value + delta
    if isinstance(value, dict):
        first = next(iter(value))
        return {**value, first: perturb(value[first], delta)}
    if isinstance(value, tuple | list):
        return type(value)([perturb(value[0], delta), *value[1:]])
    raise TypeError(f"no wrong answer for {value!r}")


def wrong_part(value):
    """The part of an answer that ``perturb`` makes wrong."""
    if isinstance(value, dict):
        return value[next(iter(value))]
    if isinstance(value, tuple | list):
        return value[0]
    return value


def spellings(value) -> set[str]:
    """How a message could print ``value``."""
    if isinstance(value, dict):
        return set().union(*(spellings(v) for v in value.values()))
    if isinstance(value, tuple | list):
        return set().union(*(spellings(v) for v in value))
    if isinstance(value, bool) or isinstance(value, torch.Tensor):
        return set()
    if isinstance(value, int):
        return {str(value), f"{value:,}"}
    out = {repr(value), f"{value:.3f}", f"{value:.4g}", f"{value:.6g}", f"{value:.2f}"}
    if float(value).is_integer():
        out |= spellings(int(value))
    return out


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def printed(message: str, value) -> list[str]:
    return [
        s
        for s in spellings(value)
        if re.search(rf"(?<![\d.,]){re.escape(s)}(?![\d]|\.\d|,\d)", message)
    ]


CASES = [
    (ch, name, part, delta)
    for ch in ALL_CHAPTERS
    for name in questions(ROOT, ch)
    for part in ("visible", "hidden")
    for delta in (1, -1)
]


def _message(namespace, grade_id, source, name, answer) -> str | None:
    """The failure of ``source`` run with ``answer`` in place of ``name`` (None: it passed)."""
    right = namespace[name]
    namespace[name] = answer
    try:
        with _grading_mode(), contextlib.redirect_stdout(io.StringIO()):
            exec(compile(source, grade_id, "exec"), namespace)
    except Exception as error:
        return str(error)
    finally:
        namespace[name] = right
    return None


@pytest.mark.parametrize("chapter, name, part, delta", CASES)
def test_a_wrong_answer_is_told_only_that_it_differs(root, chapter, name, part, delta):
    """``visible``: every answer wrong, the test cell as released; ``hidden``: the answers
    to the cases the visible tests ask right, the others wrong, the whole cell."""
    namespace = solved(root, chapter)
    right = namespace[name]
    asked: set[str] = set()
    calls: list[tuple[str, tuple, object]] = []

    def recording(*args, **kwargs):
        asked.add(repr((args, kwargs)))
        return right(*args, **kwargs)

    def wrong(*args, **kwargs):
        answer = right(*args, **kwargs)
        key = repr((args, kwargs))
        if part == "hidden" and key in asked:
            return answer
        calls.append((key, (*args, *kwargs.values()), answer))
        return perturb(answer, delta)

    cells = [
        (grade_id, source)
        for grade_id, graded, source, _ in cells_to_run(root, chapter)
        if graded and re.search(rf"\b{name}\(", source)
    ]
    assert cells, f"no test cell calls {name}"
    for grade_id, source in cells:
        asked.clear()
        calls.clear()
        if part == "hidden":
            if "BEGIN HIDDEN TESTS" not in source:
                continue
            _message(namespace, grade_id, _visible(source), name, recording)
        else:
            source = _visible(source)
        message = _message(namespace, grade_id, source, name, wrong)
        if message is None:
            own = grade_id.startswith(f"test_{name}") or len(cells) == 1
            assert part == "hidden" or not own, (
                f"{grade_id} passes {name} answering wrong ({delta:+d})"
            )
            continue
        if not calls:
            continue  # failed before it asked: not this question's message
        # a known mistake's diagnosis is the catalogue's text, checked where it is written
        message = re.sub(r"Diagnosis: .*", "", message)
        last = calls[-1][0]
        answers = [answer for key, _, answer in calls if key == last]
        # a number the question was asked with may be printed with the question
        asked_with = set().union(*(spellings(a) for c in calls for a in c[1] if _number(a)))
        leaked = [
            s
            for answer in answers
            for s in printed(message, wrong_part(answer))
            if s not in asked_with
        ]
        assert not leaked, f"{grade_id} prints the right answer {leaked}:\n{message}"
        assert not DIRECTION.findall(message), f"{grade_id} tells the direction:\n{message}"
        if any(isinstance(a, torch.Tensor) for a in answers):
            assert not re.search(r"expected -?\d", message), (
                f"{grade_id} prints an expected entry:\n{message}"
            )


def test_the_check_finds_a_printed_answer_and_a_direction():
    assert printed("gru_parameters(6, 5) = 196, expected 195", 195) == ["195"]
    assert printed("a count of 74,496 parameters", 74496) == ["74,496"]
    assert printed("differs from the count of nn.GRU(6, 5)", 195) == []
    assert DIRECTION.findall("196, more than nn.GRU holds")
