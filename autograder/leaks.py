"""Finding solution code and hidden tests where they must not be (released notebooks, the
built website).

A *secret line* is a line of a solution region (``### BEGIN SOLUTION`` ..
``### END SOLUTION``) or of a hidden-test region (``### BEGIN HIDDEN TESTS`` ..
``### END HIDDEN TESTS``) of a solution notebook, long enough to be distinctive, that occurs
nowhere else in the notebook (a visible test may share an import with a hidden one).
"""

import re
from pathlib import Path

import nbformat

MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
_REGIONS = (("BEGIN SOLUTION", "END SOLUTION"), ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS"))
MIN_SECRET_CHARS = 12  # shorter lines (`return out`, `)`) also occur in the released text
# Fragments of a statement that goes on below: a line that opens a bracket
# (``w = torch.softmax(``) or a lone string argument (``"attention_weights_bytes",``).
# Visible code may start with or contain the same text (``w = torch.softmax(x, -1)``,
# ``diagnose("attention_weights_bytes", ...)``), so a fragment leaks only as a line of its own.
FRAGMENT = re.compile(r"""^(?:.*[(\[{]|[rbf]?("|')[^"']*\1,)$""")
# Lines that tell nothing of an answer wherever they stand: an import (a hidden test imports
# the reference, as the book's pages do) and seeding the random numbers.
UNTELLING = re.compile(r"^(?:from \S+ import |import \S+|torch\.manual_seed\(\w+\)$)")


def _split_lines(solution_notebook: Path) -> tuple[set[str], set[str]]:
    """(distinctive stripped lines inside solution and hidden-test regions, every stripped
    line outside them, markdown included)."""
    nb = nbformat.read(solution_notebook, as_version=4)
    secrets, public = set(), set()
    for cell in nb.cells:
        if cell.cell_type != "code":
            public.update(line.strip() for line in cell.source.splitlines())
            continue
        inside = False
        for line in cell.source.splitlines():
            if any(begin in line for begin, _ in _REGIONS):
                inside = True
                continue
            if any(end in line for _, end in _REGIONS):
                inside = False
                continue
            text = line.strip()
            if not inside:
                public.add(text)
            elif len(text) >= MIN_SECRET_CHARS and re.search(r"[A-Za-z]", text):
                if not text.startswith("#") and not UNTELLING.match(text):
                    secrets.add(text)
    return secrets, public


def secret_lines(solution_notebook: Path) -> set[str]:
    """Distinctive stripped lines inside solution and hidden-test regions."""
    secrets, public = _split_lines(solution_notebook)
    return secrets - public


def course_secret_lines(solution_notebooks) -> set[str]:
    """The secret lines of a whole course: those of every notebook, less the lines that
    any notebook shows on purpose. A later chapter may hand out an earlier chapter's
    solution as given code (chapter 05 gives chapter 04's attention), and a line such as
    ``if mask is not None:`` may be a solution in one chapter and scaffolding in another."""
    secrets, public = set(), set()
    for path in solution_notebooks:
        s, p = _split_lines(path)
        secrets |= s
        public |= p
    return secrets - public


def find_leaks(text: str, secrets: set[str]) -> list[str]:
    """Markers and secret lines that occur in ``text`` (a web page, where lines may be
    wrapped or run together: any occurrence counts)."""
    found = [m for m in MARKERS if m in text]
    found += sorted(s for s in secrets if _occurs(s, text))
    return found


def _occurs(secret: str, text: str) -> bool:
    if FRAGMENT.match(secret):  # only as a line of its own
        return re.search(rf"(?m)^[ \t]*{re.escape(secret)}[ \t]*$", text) is not None
    return secret in text


def find_leaks_in_notebook(path: Path, secrets: set[str]) -> list[str]:
    """Markers and secret lines in a released notebook, line by line: a secret line leaks
    when a cell has it as one of its lines. (A visible line that merely starts as a hidden
    one does, ``for x in [(1, 2), (3, 4)]:`` against ``for x in [``, and a grade id in the
    cells' metadata, are not leaks; the raw JSON would match both.)"""
    text = path.read_text(encoding="utf-8")
    lines = {
        line.strip()
        for cell in nbformat.reads(text, as_version=4).cells
        for line in cell.source.splitlines()
    }
    return [m for m in MARKERS if m in text] + sorted(secrets & lines)
