"""What instructors run: reference implementations, hidden-test helpers, nbgrader
configuration, and the ``release`` / ``check`` / ``grade`` commands::

    python -m autograder release [CHAPTER ...]    # solutions/ -> notebooks/
    python -m autograder check                    # notebooks/ in sync, no solutions leaked
    python -m autograder grade SUBMISSIONS --out OUT
"""

from autograder.chapters import ALL_CHAPTERS

__all__ = ["ALL_CHAPTERS"]
