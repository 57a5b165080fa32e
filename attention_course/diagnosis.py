"""``diagnose``: a failing test names the known mistake your code makes, if it makes one.

The set-up cell makes it, ``diagnose = diagnosis_for("04_dot_product_attention", globals())``,
and every graded test cell runs its checks inside ``with diagnose("name"):``. While the
block runs, every call of the named code is written down (:mod:`attention_course.watch`).
When the block fails, the diagnosis compares what your code gave with what each known
mistake of that exercise gives on the same inputs; a mistake that gives the same result
on *every* call the test made is named, by what is wrong, never by the code that fixes it::

    AssertionError: weights differs from the expected values ...
    Diagnosis: your scaled_dot_product_attention behaves like a known mistake on every
    input this test gave it: the scores are not divided by sqrt(d_k). [known mistake: no-scaling]

Two sides answer this:

- **The kit** holds no mistake's code. When the course is released, each catalogued
  mistake is run on the inputs the visible tests give, and its results are recorded beside
  the recorded values (a *fingerprint*, :class:`Fingerprints`). Your code's results are
  compared with those. A call with inputs the release did not record (a test that feeds
  your code what your other code made, and that differs) names nothing. Of a graded
  question, the release records one case and no mistake's text: the kit names its mistake
  as "a known mistake of this question", and only where that case tells it apart.
- **The instructor's side**, where installed (grading, a course's own copy), replays each
  mistake from the catalogue on whatever inputs the test gave (``autograder/diagnosis.py``,
  plugged in as the entry point ``diagnosis`` of the group
  :data:`attention_course.recorded.GROUP`). It also writes the fingerprints at release.

The diagnosis only reads: it never turns a failure into a pass, and where it cannot tell
it says nothing. Entering the block also warns when the watched code calls the operator
its exercise asks you to write (the rule that grading checks, ``attention_course.scan``).
"""

import dataclasses
import hashlib
import sys
import types
from collections.abc import Callable

import torch

from attention_course.recorded import (
    Book,
    _current_book,
    close,
    digest,
    instructor_entry,
    pack,
    pack_state,
)
from attention_course.scan import FORBIDDEN, scan_cell
from attention_course.watch import Call, Recorder, Replay, add_to_message, cell_source, given

SOLUTION = "<solution>"  # the fingerprints' name for what the solution itself gives
# What the kit says of a graded question's known mistake: the release records no text of it
# (its ``says`` is empty), since read as a checklist the texts would give the answer away.
QUESTION = "a known mistake of this question"


@dataclasses.dataclass(frozen=True)
class Named:
    """A known mistake as a diagnosis names it."""

    name: str
    says: str

    @property
    def tag(self) -> str:
        """How a diagnosis names the mistake in a failure message (the report counts these)."""
        return f"[known mistake: {self.name}]"


# ---------------------------------------------------------------- fingerprints


def outcome(kind: str, result, reached=None) -> dict:
    """One version's result on one call, as data: ("ok", output, the parameters each
    output's gradient reaches) or ("error", the exception)."""
    if kind == "error":
        return {"kind": "error", "type": type(result).__name__, "message": str(result)}
    return {
        "kind": "ok",
        "out": digest(pack(result)),
        "reaches": None if reached is None else [sorted(r) for r in reached],
    }


def call_key(call: Call) -> dict:
    """What a call was given, as data: the inputs a fingerprint is looked up by."""
    return {
        "name": call.name,
        "in": digest(pack((call.args, call.kwargs))),
        "init": digest(pack(call.init)) if call.init is not None else None,
        "state": digest(pack_state(call.state)) if call.state is not None else None,
        "training": call.training,
        "rng": hashlib.sha1(call.rng.numpy().tobytes()).hexdigest()[:16],
    }


def _informative(entry: dict) -> list[set]:
    """For each output of a recorded call, the parameters whose reach tells the versions
    apart (some versions' gradients reach it, others' do not). Only those are compared: the
    rest reach alike whatever the code (the kit's recorded stand-ins, whose parameters no
    gradient reaches, or a recorded reference that was run without a gradient)."""
    sets: dict[int, list[set]] = {}
    for result in entry["results"].values():
        for i, r in enumerate(result.get("reaches") or []):
            sets.setdefault(i, []).append(set(r))
    return [
        set.union(*sets[i]) - set.intersection(*sets[i]) if i in sets else set()
        for i in range(max(sets, default=-1) + 1)
    ]


def _same_outcome(
    recorded: dict | None, mine: dict, final: bool, informative: list[set], standin: frozenset
) -> bool:
    if recorded is None or recorded["kind"] != mine["kind"]:
        return False
    if mine["kind"] == "error":
        # the error that ended the test must be the same, message and all; an error the
        # test expected (and caught) may word its message differently
        same_type = recorded["type"] == mine["type"]
        return same_type and (not final or recorded["message"] == mine["message"])
    if not close(recorded["out"], mine["out"]):
        return False
    theirs, ours = recorded["reaches"] or [], mine["reaches"] or []
    if len(theirs) != len(ours):
        return not informative or not any(informative)
    return all(
        (set(a) & (told - standin)) == (set(b) & (told - standin))
        for a, b, told in zip(theirs, ours, informative + [set()] * len(ours), strict=False)
    )


class Fingerprints:
    """A chapter's recorded results of its known mistakes on the visible tests' inputs:
    ``says`` (mistake -> what is wrong; empty for a graded question's), ``exercise`` (mistake
    -> grade id), ``defines``
    (grade id -> the names its cell defines), ``calls`` (one entry per recorded call: its
    :func:`call_key` and ``results``, version -> :func:`outcome`)."""

    def __init__(self, data: dict | None):
        data = data or {}
        self.says: dict[str, str] = data.get("says", {})
        self.exercise: dict[str, str] = data.get("exercise", {})
        self.defines: dict[str, list[str]] = data.get("defines", {})
        self.calls: list[dict] = data.get("calls", [])

    def mistakes_of(self, names: tuple[str, ...]) -> list[str]:
        return [
            m for m, cell in self.exercise.items() if set(self.defines.get(cell, ())) & set(names)
        ]

    def lookup(self, call: Call, same_rng: bool = False) -> dict | None:
        """The recorded entry of a call given the same inputs (within the checks'
        tolerances), or None. Of several (a layer built twice with the same sizes), the one
        called from the same random state; else the first (``same_rng``: only that one)."""
        key = call_key(call)
        found = [
            entry
            for entry in self.calls
            if entry["name"] == key["name"]
            and entry["training"] == key["training"]
            and all(close(entry[k], key[k]) for k in ("in", "init", "state"))
        ]
        found.sort(key=lambda entry: entry["rng"] != key["rng"])
        if same_rng:
            found = [entry for entry in found if entry["rng"] == key["rng"]]
        return found[0] if found else None

    def matching(self, recorder: Recorder, namespace: dict, error: BaseException) -> list[Named]:
        """The mistakes that give what the student's code gave on every call of the test that
        the release recorded (a call fed by the student's own earlier results, which differ,
        is not: at least one call must be). ``[]`` where the solution gives it too."""
        candidates = self.mistakes_of(recorder.names)
        found = [(call, self.lookup(call)) for call in recorder.calls]
        found = [(call, entry) for call, entry in found if entry is not None]
        if not found or not candidates:
            return []
        mine = [own_outcome(call, recorder, namespace) for call, _ in found]

        informative = [_informative(entry) for _, entry in found]

        def behaves_as(version: str) -> bool:
            return all(
                _same_outcome(
                    entry["results"].get(version), m, call.error is error, told, call.standin
                )
                for (call, entry), m, told in zip(found, mine, informative, strict=True)
            )

        if behaves_as(SOLUTION):
            return []  # the failure comes from elsewhere: no mistake can be blamed
        return [Named(m, self.says[m]) for m in candidates if behaves_as(m)]


def own_outcome(call: Call, recorder: Recorder, namespace: dict) -> dict:
    """What the student's code gave on ``call``; for a module's method, with the parameters
    each output's gradient reaches (found by running the student's module again)."""
    if call.error is not None:
        return outcome("error", call.error)
    if call.method in (None, "__init__"):
        return outcome("ok", call.output)
    kind, result = Replay(originals=recorder.saved, live=namespace).run(call)
    reached = result[1] if kind == "ok" else None
    return outcome("ok", call.output, reached)


def _fingerprints(chapter: str) -> Fingerprints:
    book = _current_book()
    if book is None or book.chapter != chapter:
        try:
            book = Book.load(chapter)
        except Exception:
            return Fingerprints(None)
    return Fingerprints(book.mistakes)


# ---------------------------------------------------------------- the rule, before grading


def forbidden_calls(
    chapter: str, namespace: dict, names: tuple[str, ...], defines: dict[str, list[str]]
) -> list[str]:
    """What the grader's scan will say of the exercises that define ``names`` (``defines``:
    grade id -> the names its cell defines), for the one rule that costs points although
    the tests may pass: calling the operator the exercise asks the student to write
    (``FORBIDDEN``). The same scan, run in the student's kernel, so that the rule is learned
    before handing in."""
    exercises = FORBIDDEN.get(chapter, {})
    aliases = {
        name: value.__name__
        for name, value in namespace.items()
        if isinstance(value, types.ModuleType)
    }  # ``F`` -> torch.nn.functional, as the set-up cell imported it
    found = []
    for name in names:
        source = cell_source(namespace.get(name))
        if source is None:
            continue
        for exercise, operators in exercises.items():
            if operators and name in defines.get(exercise, ()):
                flags = scan_cell(chapter, exercise, source, dict(aliases), forbidden=operators)
                found += [
                    f"your {name} {f.message.replace('uses', 'calls', 1)} (line {f.line} of its "
                    "cell). The tests may pass, but when your notebook is graded this exercise is "
                    "flagged for review and its points are withheld until your instructor has "
                    "looked at it: write it from the equation instead."
                    for f in flags
                    if f.rule == "operator"
                ]
    return found


# ---------------------------------------------------------------- the block


class Diagnosis:
    """``with diagnose(name, ...)``: see the module's docstring. This is the kit's: it
    names mistakes from the release's fingerprints. The instructor's side subclasses it
    and replays the catalogue instead."""

    # where the mistake was seen to behave as the student's code: in the kit, on the calls
    # of the test that the release recorded (a call fed by the student's own results is not)
    seen = "on the inputs of this test that the course recorded"

    def __init__(self, chapter: str, namespace: dict, names: tuple[str, ...]):
        self.chapter, self.namespace, self.names = chapter, namespace, names
        self.recorder = Recorder(namespace, names)

    def defines(self) -> dict[str, list[str]]:
        """Grade id of each exercise -> the names its cell defines."""
        return _fingerprints(self.chapter).defines

    def matching(self, error: BaseException) -> list[Named]:
        """The known mistakes that behave like the student's code on every recorded call."""
        return _fingerprints(self.chapter).matching(self.recorder, self.namespace, error)

    def __enter__(self):
        try:
            warnings = forbidden_calls(self.chapter, self.namespace, self.names, self.defines())
        except Exception:  # a warning must never stop a test
            warnings = []
        for warning in warnings:
            print(f"Warning: {warning}", file=sys.stderr)
        self.recorder.__enter__()
        return self

    def __exit__(self, kind, error, traceback):
        self.recorder.__exit__()
        if error is None:
            self.passed()
            return False
        if not isinstance(error, Exception) or isinstance(error, NotImplementedError):
            return False  # interrupted, or the exercise is not done yet: its message says so
        rng = torch.get_rng_state()
        try:
            text = self.explain(error)
        except Exception:  # the diagnosis must never hide the student's failure
            text = None
        finally:
            torch.set_rng_state(rng)
        if text:
            add_to_message(error, text)
        return False  # never turns a failure into a pass

    def passed(self) -> None:
        """Called when the block passed (the instructor's side records fingerprints here)."""

    def explain(self, error: BaseException) -> str | None:
        lines = []
        raised = [c for c in self.recorder.calls if c.error is error]
        if raised and not isinstance(error, AssertionError):
            call = raised[-1]  # the innermost watched call the error came out of
            lines.append(
                f"Your {call.name} raised {type(error).__name__} when it was given {given(call)}."
            )
        found = self.matching(error)
        exercise = " / ".join(self.names)
        if len(found) == 1 and not found[0].says:
            lines.append(
                f"Diagnosis: your {exercise} behaves like {QUESTION} {self.seen}. {found[0].tag}"
            )
        elif len(found) == 1:
            lines.append(
                f"Diagnosis: your {exercise} behaves like a known mistake {self.seen}: "
                f"{found[0].says}. {found[0].tag}"
            )
        elif found:
            lines.append(
                f"Diagnosis: your {exercise} behaves like these known mistakes {self.seen}: "
                + "; or ".join(f"{m.says or QUESTION} {m.tag}" for m in found)
                + "."
            )
        elif lines and isinstance(error, RuntimeError | ValueError | IndexError):
            lines.append(
                "Likely cause: compare the shapes above with those in the exercise's docstring, "
                "and check that each operation combines the axes it should (a matrix product "
                "@ or an elementwise *, which dimension a softmax or a sum runs over)."
            )
        return "\n".join(lines) or None


def diagnosis_for(chapter: str, namespace: dict) -> Callable[..., Diagnosis]:
    """The notebook's ``diagnose``: ``diagnose("name", ...)`` watches those names of
    ``namespace`` (the notebook's ``globals()``) for the length of a ``with`` block."""
    instructor = instructor_entry("diagnosis")
    if instructor is not None:
        return instructor(chapter, namespace)

    def diagnose(*names: str) -> Diagnosis:
        if not names or not all(isinstance(n, str) for n in names):
            raise TypeError('diagnose takes the names of the code to watch, e.g. diagnose("glu")')
        return Diagnosis(chapter, namespace, names)

    return diagnose
