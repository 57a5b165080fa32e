"""What students import: data, vocabularies and batching, training, plots and checks.

The pieces live in small modules; the most used names are re-exported here::

    from attention_course import set_seed, use_one_thread, grading_mode, budget
"""

from attention_course.runtime import (
    GRADING_ENV,
    budget,
    device,
    grading_mode,
    set_seed,
    use_one_thread,
)

# The release of the course: a notebook names the kit it needs (attention_course/recorded.py).
__version__ = "0.1.0"

__all__ = ["GRADING_ENV", "budget", "device", "grading_mode", "set_seed", "use_one_thread"]
