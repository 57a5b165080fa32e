"""The Markdown tables of the benchmarks' reports, written one way: ``| a | b |`` rows under a
``|---|---|`` rule, every cell as ``str`` gives it."""

from collections.abc import Iterable


def markdown_row(cells: Iterable) -> str:
    """One row: ``markdown_row(["a", 1])`` is ``"| a | 1 |"`` (an empty cell is ``"|  |"``)."""
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def markdown_table(head: Iterable, rows: Iterable[Iterable]) -> str:
    """The head row, the rule under it and ``rows``, one line each, without a final newline."""
    head = list(head)
    return "\n".join(
        [markdown_row(head), "|" + "---|" * len(head), *(markdown_row(row) for row in rows)]
    )
