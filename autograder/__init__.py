"""What instructors run: reference implementations, hidden-test helpers, nbgrader
configuration, and the ``release`` / ``check`` / ``grade`` commands::

    python -m autograder release [CHAPTER ...]    # solutions/ -> notebooks/
    python -m autograder check                    # notebooks/ in sync, no solutions leaked
    python -m autograder grade SUBMISSIONS --out OUT
"""

import sys

# jsonschema, which nbformat imports, imports rfc3987_syntax when it is installed (it is:
# jupyter-events asks for jsonschema[format-nongpl]) to check the "iri" string format,
# which no notebook schema uses; the import compiles a grammar, 2 s at the start of every
# grading process and command. Marked absent, jsonschema leaves that one format unchecked.
sys.modules.setdefault("rfc3987_syntax", None)

from autograder.chapters import ALL_CHAPTERS  # noqa: E402

__all__ = ["ALL_CHAPTERS"]
