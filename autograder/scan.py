"""The grader's name for :mod:`attention_course.scan`, which lives with the student kit so
that its ``validate`` says what grading's scan will (the rules are the students' to read)."""

import sys

from attention_course import scan

sys.modules[__name__] = scan
