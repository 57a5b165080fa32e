"""No function of a chapter's kit answers an exercise of that chapter or a later one, by what
it does (issue 60).

``tests/test_kit.py`` looks for the solutions' lines in the kit's files; code that computes
the same thing written another way escapes it (chapter 06's positional encoding as chapter
08's sinusoidal table, chapter 07's pose as the digits' generator draws it). This test
looks at behaviour. Each chapter's solution notebook runs, hidden tests included, in
grading mode, and every call its test blocks make of a graded *function* (the names inside
``with diagnose(...)``) is kept with its result: the solution's, which the hidden tests
compare with the reference. Then every public function of the kit of that chapter (the
modules a kit through it holds: not its own or a later chapter's handed-out module) is
called on those arguments, wherever its signature takes them. A function answers the
exercise when it returns the solution's result (or holds it as an element of what it
returns) on every one of the exercise's calls it accepts, at least two of them (not a
coincidence of one case), the calls whose result is one of their own arguments left out.

A kit of a later chapter holds the functions of every earlier kit, so checking the
exercises of chapter C against the kit through C covers every kit that must not answer
them. Modules are exercises (their calls are methods of a built layer): their forward
passes are not checked here; ``tests/test_kit.py``'s line search covers their code. (The
digits' generator renders a pose with the inverse map, written on its own,
``data.digits.canvas_to_digit``: the pose itself, chapter 07's ``undo_distortion``, is the
reference's ``pose_matrix``, outside the kit.)
"""

import contextlib
import functools
import importlib
import inspect
import io
import math
import pkgutil
import signal
from unittest import mock

import pytest
import torch
from test_mistakes import _grading_mode, _run, cells_to_run

import attention_course
from attention_course.watch import Recorder, copy_value
from autograder.chapters import ALL_CHAPTERS
from autograder.kit import handed_out_module

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

# What is not called: command-line entry points and what displays or changes the process
# (threads, seeds, the hand-in check), none of which computes an answer.
NOT_CALLED = {
    "attention_course.validate",
    "attention_course.handin",
    "attention_course.lab",
    "attention_course.widgets",
    "attention_course.explorer",
    "attention_course.plots",
    "attention_course.runtime",
    "attention_course.watch",
    "attention_course.diagnosis",
}
CALL_LIMIT_S = 2  # a kit function that would train a model on the arguments is stopped


@functools.cache
def exercise_calls(root, chapter: str) -> dict[str, list[tuple]]:
    """Graded function -> (args, kwargs, the solution's result) of each call its tests made."""
    calls = []
    original = Recorder.__exit__

    def keep(self, *exc):
        calls.extend(self.calls)
        return original(self, *exc)

    failed: dict[str, str] = {}
    with mock.patch.object(Recorder, "__exit__", keep), _grading_mode():
        _run(cells_to_run(root, chapter), {"__name__": "__main__"}, failed)
    assert not failed, f"the solution of {chapter} failed: {failed}"
    found: dict[str, list[tuple]] = {}
    for call in calls:
        if call.method is None and call.error is None and _telling(call.args, call.output):
            found.setdefault(call.name, []).append((call.args, call.kwargs, call.output))
    return found


def _telling(args, output) -> bool:
    """A result that says something: not one of the call's own arguments, and a tensor of a
    few entries or a number."""
    if any(_same(output, a) for a in args):
        return False
    if isinstance(output, torch.Tensor):
        return output.numel() >= 2
    return isinstance(output, int | float) and not isinstance(output, bool)


def _same(got, expected) -> bool:
    if isinstance(expected, torch.Tensor):
        return (
            isinstance(got, torch.Tensor)
            and got.shape == expected.shape
            and got.dtype.is_floating_point == expected.dtype.is_floating_point
            and torch.allclose(got.double(), expected.double(), atol=1e-6, rtol=1e-5)
        )
    if isinstance(expected, int | float) and not isinstance(expected, bool):
        return (
            isinstance(got, int | float)
            and not isinstance(got, bool)
            and math.isclose(got, expected, rel_tol=1e-9)
        )
    return False


def _holds(got, expected) -> bool:
    """``got`` is ``expected``, or a tuple or list with it as an element, or a batch whose
    first entry it is."""
    if _same(got, expected):
        return True
    if isinstance(got, torch.Tensor) and isinstance(expected, torch.Tensor):
        return got.dim() == expected.dim() + 1 and len(got) >= 1 and _same(got[0], expected)
    return isinstance(got, tuple | list) and any(_same(g, expected) for g in got[:8])


def kit_functions(through: str) -> dict[str, object]:
    """``module.name`` -> each public function defined in a module the kit through
    ``through`` holds (its own and later chapters' handed-out modules left out)."""
    withheld = {
        f"attention_course.handed_out.{handed_out_module(c)}"
        for c in ALL_CHAPTERS[ALL_CHAPTERS.index(through) :]
    }
    functions = {}
    for info in pkgutil.walk_packages(attention_course.__path__, "attention_course."):
        if info.name in withheld or info.name in NOT_CALLED:
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                not name.startswith("_")
                and inspect.isfunction(value)
                and value.__module__ == info.name
            ):
                functions[f"{info.name}.{name}"] = value
    return functions


class _TooLong(Exception):
    pass


def _call(function, args, kwargs):
    """``function(*args, **kwargs)`` on copies, quietly, for at most CALL_LIMIT_S; None when
    it raised or took longer."""

    def stop(*_):
        raise _TooLong

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, CALL_LIMIT_S)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            with torch.no_grad():
                return function(*copy_value(args), **copy_value(kwargs))
    except (Exception, _TooLong):
        return None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def answering(functions: dict, calls: dict[str, list[tuple]]) -> list[str]:
    """``function answers exercise`` for each kit function that gives the solution's result
    on every (at least two) of an exercise's calls that its signature takes."""
    found = []
    for exercise, cases in sorted(calls.items()):
        for name, function in sorted(functions.items()):
            try:
                signature = inspect.signature(function)
            except (TypeError, ValueError):
                continue
            taken = []
            for args, kwargs, expected in cases:
                try:
                    signature.bind(*args, **kwargs)
                except TypeError:
                    continue
                taken.append(_holds(_call(function, args, kwargs), expected))
            if len(taken) >= 2 and all(taken):
                found.append(f"{name} answers {exercise} ({len(taken)} calls)")
    return found


def test_the_check_finds_a_function_that_answers_on_every_call():
    """The positive control: a function that computes an exercise's result, written another
    way, is found; one that agrees on a single call, or on some only, is not."""
    x = torch.randn(3, 4)
    calls = {"double": [((x,), {}, 2 * x), ((x + 1,), {}, 2 * (x + 1)), ((-x,), {}, -2 * x)]}

    def twice(t):
        return t + t

    def once(t):
        return 2 * x  # right on the first call only

    def with_more(t):
        return t.abs(), t * 2  # holds the answer as an element

    found = answering({"kit.twice": twice, "kit.once": once, "kit.more": with_more}, calls)
    assert found == ["kit.more answers double (3 calls)", "kit.twice answers double (3 calls)"]


@pytest.mark.parametrize("chapter", ALL_CHAPTERS)
def test_no_function_of_a_chapters_kit_answers_its_exercises(root, chapter):
    calls = exercise_calls(root, chapter)
    assert calls, f"no graded function of {chapter} was called inside a test block"
    found = answering(kit_functions(chapter), calls)
    assert found == [], found
