"""The instructor's diagnosis: name the known mistake a failing test's code makes, by
replaying the catalogue.

Every graded test cell runs its checks inside ``diagnose`` (the block itself, and how a
failure is worded: :mod:`attention_course.diagnosis`). Where this package is installed
(grading, and a course's own copy) the notebook's ``diagnose`` is this one: when a block
fails, each catalogued mistake of that exercise (``autograder/mistakes/``) is built from the
solution cell with the mistake's edit and run on the recorded calls. A mistake that gives
the same result as the student's code on *every* recorded call (the same values within
tolerance, the same exception when the student's code raised) is named in the failure
message, with a tag the instructor's report counts. Where no mistake matches, the message
stays as it was: a wrong answer outside the catalogue never gets a diagnosis.

At release (``python -m autograder record``), a block that passes writes each mistake's
results on the block's calls into the chapter's recording: the kit's fingerprints, with
which the student's kernel names a mistake without the catalogue; each call of the
reference recorded inside a block is marked with the block's names. ``record`` then keeps
the graded questions' answers out of what it wrote (:func:`autograder.record.keep_answers`).

The diagnosis only reads: it never turns a failure into a pass, and where it cannot work
(no solution notebook beside the package, a mistake that no longer applies) it says
nothing.
"""

import json
from collections.abc import Callable
from functools import cache
from pathlib import Path

from attention_course import diagnosis as kit
from attention_course.recorded import recording_book
from attention_course.watch import Call, Replay, defines, same
from autograder.cells import grade_id, is_solution
from autograder.chapters import INSTALLED_ROOT
from autograder.mistakes import Mistake, apply, catalogue


def _course_root() -> Path | None:
    """The folder with ``solutions/``: beside the installed package, or above the working
    directory (a student working in a clone of the course)."""
    for folder in (INSTALLED_ROOT, *Path.cwd().resolve().parents):
        if (folder / "solutions").is_dir():
            return folder
    return None


@cache
def _solution_cells(chapter: str) -> dict[str, str]:
    """grade id -> source of each solution cell of the chapter ({} when not found)."""
    root = _course_root()
    path = root / "solutions" / chapter / f"{chapter}.ipynb" if root else None
    if path is None or not path.is_file():
        return {}
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    out = {}
    for cell in cells:
        if is_solution(cell) and cell["cell_type"] == "code":
            source = cell["source"]
            out[grade_id(cell)] = "".join(source) if isinstance(source, list) else source
    return out


def _matches(replay: Replay, calls: list[Call], final: BaseException, reaches: list | None) -> bool:
    """Does the mistake give what the student's code gave, on every recorded call? For a
    module, also: does each output's gradient reach the same parameters (``reaches``, from
    replaying the student's own code the same way)?"""
    for i, call in enumerate(calls):
        kind, result = replay.run(call)
        if call.error is not None:
            if kind != "error" or type(result) is not type(call.error):
                return False
            # the error that ended the test must be the same error, message and all; an
            # error the test expected (and caught) may word its message differently
            if call.error is final and str(result) != str(call.error):
                return False
        elif kind != "ok":
            return False
        elif call.method not in (None, "__init__"):
            output, reached = result
            if not same(output, call.output) or reached != reaches[i]:
                return False
        elif not same(result, call.output):
            return False
    return True


class Diagnosis(kit.Diagnosis):
    """``with diagnose(name, ...)``, naming mistakes by replaying the catalogue."""

    seen = "on every input this test gave it"

    def defines(self) -> dict[str, list[str]]:
        return {cell: sorted(defines(src)) for cell, src in _solution_cells(self.chapter).items()}

    def known_mistakes(self) -> list[Mistake]:
        cells = _solution_cells(self.chapter)
        return [
            m
            for m in catalogue(self.chapter)
            if m.cell in cells and defines(cells[m.cell]) & set(self.names)
        ]

    def __enter__(self):
        book = recording_book()
        if book is not None:  # at release: each call recorded in the block says which block
            book.block = list(self.names)
        return super().__enter__()

    def __exit__(self, kind, error, traceback):
        book = recording_book()
        if book is not None:
            book.block = None
        return super().__exit__(kind, error, traceback)

    def _reaches(self) -> list:
        """For each recorded call of a module's method, the parameters each output's
        gradient reaches in the student's own module, run again the same way."""
        student = Replay(originals=self.recorder.saved, live=self.namespace)
        reaches = []
        for call in self.recorder.calls:
            kind, result = (None, None)
            if call.method not in (None, "__init__") and call.error is None:
                kind, result = student.run(call)
            reaches.append(result[1] if kind == "ok" else None)
        return reaches

    def matching(self, error: BaseException) -> list[Mistake]:
        """The catalogued mistakes that behave like the student's code on every recorded call."""
        calls = self.recorder.calls
        if not calls:
            return []
        cells = _solution_cells(self.chapter)
        mistakes = self.known_mistakes()
        if not mistakes:
            return []
        reaches = self._reaches()
        # Where the solution itself gives what the student's code gave (the failure comes
        # from elsewhere: a missing name, another exercise), no mistake can be blamed.
        for cell in {m.cell for m in mistakes}:
            if _matches(Replay(cells[cell], live=self.namespace), calls, error, reaches):
                return []
        found = []
        for entry in mistakes:
            try:
                replay = Replay(apply(cells[entry.cell], entry), live=self.namespace)
            except ValueError:
                continue  # the catalogue no longer fits the solution; the suite says so
            if _matches(replay, calls, error, reaches):
                found.append(entry)
        return found

    def passed(self) -> None:
        """At release: write what each known mistake gives on this block's calls (the
        kit's fingerprints, :class:`attention_course.diagnosis.Fingerprints`)."""
        book = recording_book()
        if book is None or not self.recorder.calls:
            return
        cells = _solution_cells(self.chapter)
        mistakes = self.known_mistakes()
        prints = book.mistakes
        prints.setdefault("defines", {}).update(self.defines())
        for entry in mistakes:
            prints.setdefault("says", {})[entry.name] = entry.symptom
            prints.setdefault("exercise", {})[entry.name] = entry.cell
        versions = {}
        for entry in mistakes:
            try:
                versions[entry.name] = apply(cells[entry.cell], entry)
            except ValueError:
                continue
        replays = {name: Replay(source, live=self.namespace) for name, source in versions.items()}
        known = kit.Fingerprints(prints)
        for call in self.recorder.calls:
            if known.lookup(call, same_rng=True) is not None:
                continue  # the same call twice (a loop, a test that repeats one): once
            # what the solution gave (this run's code is the solution), then each mistake
            results = {kit.SOLUTION: kit.own_outcome(call, self.recorder, self.namespace)}
            for name, replay in replays.items():
                kind, result = replay.run(call)
                if kind == "ok" and call.method not in (None, "__init__"):
                    results[name] = kit.outcome(kind, *result)
                else:
                    results[name] = kit.outcome(kind, result)
            prints.setdefault("calls", []).append({**kit.call_key(call), "results": results})


def diagnosis_for(chapter: str, namespace: dict) -> Callable[..., Diagnosis]:
    """The ``diagnose`` of a chapter's notebook: ``diagnose("name", ...)`` watches those names
    of ``namespace`` (the notebook's ``globals()``) for the length of a ``with`` block."""
    catalogue(chapter)  # an unknown chapter fails here, at set-up

    def diagnose(*names: str) -> Diagnosis:
        if not names or not all(isinstance(n, str) for n in names):
            raise TypeError('diagnose takes the names of the code to watch, e.g. diagnose("glu")')
        return Diagnosis(chapter, namespace, names)

    return diagnose
