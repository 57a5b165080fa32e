"""The course's reference models that a chapter's experiment races against, found by name.

Chapter 03 races the student's ConvS2S against chapter 02's GRU with attention. That model
is the course's reference, so the race does not depend on how chapter 02's exercises went,
and the reference lives with the grader (``autograder.reference``). The student package
never imports the grader: the grader plugs its models in instead, as Python entry points of
the group :data:`GROUP`, declared in ``pyproject.toml``::

    [project.entry-points."attention_course.baselines"]
    gru_with_attention = "autograder.reference.experiments:gru_with_attention"

and installed with the course (``pip install -e .``).
"""

from collections.abc import Callable
from importlib.metadata import entry_points

GROUP = "attention_course.baselines"


def baseline(name: str) -> Callable:
    """The builder registered as ``name`` in the entry-point group :data:`GROUP`."""
    found = entry_points(group=GROUP, name=name)
    if not found:
        raise LookupError(
            f"no baseline {name!r} in the entry points {GROUP!r}: chapter 03's race needs the "
            "course's reference GRU with attention, provided by the `autograder` package of "
            "this repository: run `pip install -e .` in the course's folder"
        )
    return next(iter(found)).load()
