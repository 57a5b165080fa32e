"""The name that notebooks of earlier releases import ``reference_for`` by: the kit's
(:func:`attention_course.recorded.reference_for`), which with the instructor's side installed
swaps in the reference itself."""

from attention_course.recorded import reference_for

__all__ = ["reference_for"]
