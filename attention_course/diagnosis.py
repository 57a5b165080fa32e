"""``diagnose``: a failing test names the known mistake your code makes, if it makes one.

The set-up cell makes it, ``diagnose = diagnosis_for("04_dot_product_attention", globals())``,
and every graded test cell runs its checks inside ``with diagnose("name"):``. Naming a
mistake needs the course's catalogue of mistakes, which stays with the instructor: where
the instructor's package is installed (grading, and a course's own copy) its diagnosis
answers, plugged in as the entry point ``diagnosis`` of the group
:data:`attention_course.recorded.GROUP`; in the kit the block only runs the checks.
"""

import contextlib
from collections.abc import Callable

from attention_course.recorded import instructor_entry


def diagnosis_for(chapter: str, namespace: dict) -> Callable:
    """The notebook's ``diagnose``: ``diagnose("name", ...)`` is a context manager."""
    instructor = instructor_entry("diagnosis")
    if instructor is not None:
        return instructor(chapter, namespace)

    def diagnose(*names: str):
        if not names or not all(isinstance(n, str) for n in names):
            raise TypeError('diagnose takes the names of the code to watch, e.g. diagnose("glu")')
        return contextlib.nullcontext()

    return diagnose
