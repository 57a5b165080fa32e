"""Blackboard Learn's Grade Center file (Work Offline > Download, then Work Offline >
Upload of the same file).

Columns ``Last Name``, ``First Name``, ``Username`` (what students are matched on, and the
id ``collect`` reads from a submission's file name), ``Student ID``, ``Last Access``,
``Availability``, then one per Grade Center column, named ``<name> [Total Pts: 19 Score]
|<column id>``: the column id says which column the upload updates. A column without an id
is created by the upload as a text column worth 0 points. The file is tab-delimited
(``.xls``) or comma-delimited (``.csv``, every field in quotes); it is written back in the
delimiter and encoding it came in.
"""

import re

from autograder.lms.sheet import Gradebook
from autograder.lms.table import Table


class Blackboard(Gradebook):
    lms = "Blackboard"
    id_columns = ("Username", "Student ID")
    keep = ("Last Name", "First Name", "Username", "Student ID", "Child Course ID")
    quote_all = True

    def title(self, column: str) -> str:
        column = re.sub(r"\s*\|\s*\d+\s*$", "", column)
        return re.sub(r"\s*\[Total Pts:.*\]\s*$", "", column).strip()

    def worth(self, table: Table, index: int) -> float | None:
        m = re.search(r"\[Total Pts:\s*([0-9]+(?:\.[0-9]+)?)\b", table.header[index])
        return float(m.group(1)) if m else None  # "up to 100": a calculated column

    def name(self, table: Table, row: list[str]) -> str:
        parts = [
            row[i].strip() for i in map(table.index, ("First Name", "Last Name")) if i is not None
        ]
        return " ".join(p for p in parts if p)

    def new_column_note(self, name: str) -> str:
        return (
            f"{name!r} has no Grade Center column id: the upload creates it as a text column "
            "worth 0 points (edit it into a score column afterwards)"
        )
