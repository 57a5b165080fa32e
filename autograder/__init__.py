"""What instructors run: reference implementations, hidden-test helpers, nbgrader
configuration, and the commands of ``python -m autograder --help`` (``autograder/cli.py``)::

    python -m autograder release [CHAPTER ...]    # solutions/ -> notebooks/
    python -m autograder check                    # notebooks/ in sync, no solutions leaked
    python -m autograder collect INBOX --chapter CHAPTER --out SUBMISSIONS  # an LMS's export
    python -m autograder grade SUBMISSIONS --out OUT    # grades, feedback, the class report
    python -m autograder report OUT               # the class report again, from OUT alone
"""

from attention_course.runtime import without_iri_grammar

# Before anything of the grader imports nbformat: 2.6 s less at the start of every grading
# process and command (see there).
without_iri_grammar()

from autograder.chapters import ALL_CHAPTERS  # noqa: E402

# The modules that notebooks import (with their submodules): released notebooks, in
# students' hands and in submissions, import them by these paths, which must therefore
# never change. Everything else in the package is the grader's own and free to move
# (tests/test_architecture.py checks that the notebooks import nothing else).
NOTEBOOK_IMPORTS = ("autograder.diagnosis", "autograder.hidden", "autograder.reference")

__all__ = ["ALL_CHAPTERS", "NOTEBOOK_IMPORTS"]
