"""The environment a grading kernel inherits: grading mode and one thread.

Kernels are child processes, so what they see is set in the grader's own environment
before they start: ``ATTENTION_COURSE_GRADING=1`` (experiments train for seconds, not a
minute: ``attention_course/runtime.py``) and one thread for every numerical library, so
that a score never depends on how loaded the machine is.
"""

import os
from collections.abc import Iterator
from contextlib import contextmanager

from attention_course.runtime import GRADING_ENV

ONE_THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
GRADING = {GRADING_ENV: "1"}
KERNEL_ENV = {**ONE_THREAD_ENV, **GRADING}  # what a worker process sets for good


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the block (kernels started inside inherit them), and
    put back what was there before."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
