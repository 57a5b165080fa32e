"""Canvas's gradebook CSV (Grades > Export, then Grades > Import of the same file).

Columns ``Student``, ``ID`` (the Canvas user id, the id ``collect`` reads from a
submission's file name), ``SIS User ID``, ``SIS Login ID``, ``Section``, then one column per
assignment named ``<assignment name> (<assignment id>)``, then read-only totals. The row
after the header is ``Points Possible``. A column of the file that names no assignment
creates one on import.
"""

import re

from autograder.lms.sheet import Gradebook, number
from autograder.lms.table import Table

POINTS_POSSIBLE = "Points Possible"


class Canvas(Gradebook):
    lms = "Canvas"
    id_columns = ("ID", "SIS User ID", "SIS Login ID", "Integration ID")
    keep = (
        "Student",
        "ID",
        "SIS User ID",
        "SIS Login ID",
        "Integration ID",
        "Root Account",
        "Section",
    )

    def title(self, column: str) -> str:
        return re.sub(r"\s*\(\d+\)\s*$", "", column).strip()

    def is_student(self, table: Table, row: list[str]) -> bool:
        """Every row but Canvas's own: ``Points Possible`` and rows with neither a name nor
        an id (a posting-policy row)."""
        if _is_points_possible(table, row):
            return False
        return any(row[i].strip() for i in _indices(table, ("Student", "ID")))

    def name(self, table: Table, row: list[str]) -> str:
        i = table.index("Student")
        return row[i].strip() if i is not None else ""

    def worth(self, table: Table, index: int) -> float | None:
        row = next((r for r in table.rows if _is_points_possible(table, r)), None)
        return number(row[index]) if row else None

    def new_cell(self, table: Table, row: list[str], worth: float | None) -> str:
        return f"{worth:g}" if worth is not None and _is_points_possible(table, row) else ""

    def new_column_note(self, name: str) -> str:
        return (
            f"{name!r} is not a column of the gradebook: Canvas's import creates an assignment "
            "of that name, worth its Points Possible"
        )


def _indices(table: Table, names: tuple[str, ...]) -> list[int]:
    return [i for i in map(table.index, names) if i is not None]


def _is_points_possible(table: Table, row: list[str]) -> bool:
    return bool(row) and row[0].strip() == POINTS_POSSIBLE
