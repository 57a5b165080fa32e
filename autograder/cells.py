"""The grader's name for :mod:`attention_course.cells`, which lives with the student kit so
that its ``validate`` says what grading's scan will (the rules are the students' to read)."""

import sys

from attention_course import cells

sys.modules[__name__] = cells
