"""A roster file as a learning-management system exports it, read and written back in the
same dialect: its encoding (UTF-8 with or without a byte-order mark, UTF-16 with one, as
Blackboard's tab-delimited ``.xls``, or Windows-1252, as Excel saves "CSV"), its delimiter
(comma, tab or semicolon), CRLF line ends. A file that cannot be read as such a table is a
:class:`~autograder.chapters.CourseError` that says why."""

import codecs
import csv
import io
from dataclasses import dataclass
from pathlib import Path

from autograder.chapters import CourseError

DELIMITERS = (",", "\t", ";")


@dataclass
class Table:
    """A header and rows of the same width (short rows padded with empty cells)."""

    path: Path
    header: list[str]
    rows: list[list[str]]
    encoding: str  # a Python codec: "utf-8-sig" when the file had a byte-order mark
    delimiter: str

    def index(self, name: str) -> int | None:
        """The position of the column named ``name``, or None."""
        return self.header.index(name) if name in self.header else None

    def columns(self) -> str:
        """The header, for an error message."""
        return ", ".join(repr(name) for name in self.header)


def read_table(path: Path) -> Table:
    """The table in ``path``; a clear error when it is unreadable, empty, has no header, a
    column name twice, or a row longer than its header."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise CourseError(f"cannot read the roster {path}: {error.strerror or error}") from None
    text, encoding = _decode(data, path)
    delimiter = _delimiter(text)
    try:
        records = list(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True))
    except csv.Error as error:
        raise CourseError(f"{path} is not a readable CSV file: {error}") from None
    numbered = [(n, r) for n, r in enumerate(records, start=1) if any(c.strip() for c in r)]
    if not numbered:
        raise CourseError(f"the roster {path} is empty")
    header = [cell.strip() for cell in numbered[0][1]]
    while header and not header[-1]:  # a spreadsheet's trailing delimiters
        header.pop()
    if len(header) < 2:
        raise CourseError(f"{path} has no header row of column names (first row: {header})")
    twice = sorted({name for name in header if header.count(name) > 1})
    if twice:
        raise CourseError(f"{path} names a column twice: {', '.join(map(repr, twice))}")
    rows = []
    for n, row in numbered[1:]:
        if any(cell.strip() for cell in row[len(header) :]):
            raise CourseError(
                f"{path}, record {n}: {len(row)} fields where the header has {len(header)} "
                "(a name with the delimiter in it, not quoted?)"
            )
        rows.append(row[: len(header)] + [""] * (len(header) - len(row)))
    return Table(path, header, rows, encoding, delimiter)


def table_bytes(
    header: list[str], rows: list[list[str]], encoding: str, delimiter: str, quote_all: bool
) -> bytes:
    """A table as a file's bytes, in the given dialect (``quote_all``: every field quoted)."""
    buffer = io.StringIO(newline="")
    quoting = csv.QUOTE_ALL if quote_all else csv.QUOTE_MINIMAL
    writer = csv.writer(buffer, delimiter=delimiter, quoting=quoting, lineterminator="\r\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue().encode(encoding)


def _decode(data: bytes, path: Path) -> tuple[str, str]:
    """The text of a file and the codec to write it back with."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16"), "utf-16"  # writes a byte-order mark back
    if data.startswith(codecs.BOM_UTF8):
        return data.decode("utf-8-sig"), "utf-8-sig"
    if b"\x00" in data[:64]:
        raise CourseError(f"{path} looks like UTF-16 without a byte-order mark: save it again")
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    try:
        return data.decode("cp1252"), "cp1252"
    except UnicodeDecodeError:
        raise CourseError(
            f"{path} is neither UTF-8, UTF-16 nor Windows-1252 text: export it again from the "
            "LMS, or save it as 'CSV UTF-8'"
        ) from None


def _delimiter(text: str) -> str:
    """The delimiter that splits the first line into the most fields (comma on a tie)."""
    first = text.split("\n", 1)[0]
    widths = {d: len(next(csv.reader([first], delimiter=d), [])) for d in DELIMITERS}
    return max(DELIMITERS, key=lambda d: widths[d])  # max keeps the first of equals
