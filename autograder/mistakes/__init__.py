"""The catalogue of known mistakes: one module per chapter, one entry per mistake.

An entry is a wrong implementation of one exercise, written as a text edit of the
exercise's solution cell (``old`` must occur exactly once in it and becomes ``new``), with
a line in the student's words that says what is wrong::

    mistake(
        "no-scaling",                          # name, unique within the chapter
        "scaled_dot_product_attention",        # grade id of the exercise's solution cell
        "the scores are not divided by sqrt(d_k)",
        "Q @ K.transpose(-2, -1) / math.sqrt(d_k)",
        "Q @ K.transpose(-2, -1)",
        "test_attention_unmasked",             # the test cells it must lose points on
        "test_attention_masked",
    )

Three things read the catalogue, so they cannot drift apart:

- the test suite submits every entry as a student notebook and checks that it loses points
  on the test cells it names and only there (``tests/test_grading.py``);
- a failing test cell compares the student's code with every entry of its exercise on the
  inputs the test gave it and names the one that behaves the same (``autograder/diagnosis.py``);
- the instructor's report counts the diagnosed mistakes across a class
  (``autograder/report.py``).

The instructor guide says how to add an entry when a class shows a new mistake.
"""

import importlib
import re
from dataclasses import dataclass

from autograder.chapters import ALL_CHAPTERS, CourseError


@dataclass(frozen=True)
class Mistake:
    name: str  # short id, unique within the chapter, e.g. "no-scaling"
    cell: str  # grade id of the exercise's solution cell
    says: str  # what is wrong, one line in the student's words
    old: str  # text of the solution cell ...
    new: str  # ... and what the mistake writes instead
    breaks: frozenset  # grade ids of the test cells that must lose points

    @property
    def symptom(self) -> str:
        """What is wrong, without what fixes it: ``says`` up to its first "instead of" or
        colon. The kit names a mistake by this (its fingerprints, ``autograder/diagnosis.py``),
        in the student's kernel before the work is handed in; the grader's feedback gives
        the whole line."""
        return re.split(r": |,? instead of ", self.says)[0].rstrip(" ,")

    @property
    def tag(self) -> str:
        """How a diagnosis names the mistake in a failure message (the report counts these)."""
        return f"[known mistake: {self.name}]"


def mistake(name: str, cell: str, says: str, old: str, new: str, *breaks: str) -> Mistake:
    return Mistake(name, cell, says, old, new, frozenset(breaks))


def _module(chapter: str) -> str:
    return chapter.split("_", 1)[1]  # "04_dot_product_attention" -> "dot_product_attention"


def catalogue(chapter: str) -> list[Mistake]:
    """The known mistakes of ``chapter``, in the order of its exercises."""
    if chapter not in ALL_CHAPTERS:
        raise CourseError(f"unknown chapter {chapter!r}; chapters: {', '.join(ALL_CHAPTERS)}")
    return list(importlib.import_module(f"autograder.mistakes.{_module(chapter)}").MISTAKES)


def all_mistakes() -> dict[str, list[Mistake]]:
    """Every chapter's catalogue, by chapter id."""
    return {chapter: catalogue(chapter) for chapter in ALL_CHAPTERS}


def apply(source: str, entry: Mistake) -> str:
    """The exercise's code with the mistake made: ``entry.old`` replaced by ``entry.new``."""
    count = source.count(entry.old)
    if count != 1:
        raise ValueError(
            f"mistake {entry.name!r}: its text occurs {count} times in cell {entry.cell!r}, "
            "expected once; update the catalogue entry to match the solution"
        )
    return source.replace(entry.old, entry.new)
