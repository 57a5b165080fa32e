"""Hints say where to look and what to check, never the solution's lines (issues 36 and 60).

A hint sits in a collapsed ``<details>`` box under an exercise (the first points at the idea,
the second names the API) or in the ``hint=`` of a check in a test cell, which a failing
test prints as its likely cause. Either names concepts and functions: code that stands in
the chapter's solution is the answer handed out. Compared without spaces and comments, a
hint may not hold a whole line of a solution region, nor a run of about a dozen characters
of one that is code (an operator, an index, a call with arguments); API names
(``torch.nan_to_num``, ``Tensor.masked_fill(``) and one keyword switch (``dtype=torch.bool``)
may appear.
"""

import ast
import json
import re

import pytest

from autograder.chapters import ALL_CHAPTERS, solution_path

RUN = 12  # characters of a solution line that make code, when they are code
_CODE = re.compile(r"[@*/+\-\[\]~<>=,(%]")  # an operator, an index, a call with arguments
_ALLOWED = re.compile(r"^[\w.]*\(?\)?$|^\w+=[\w.\-\"']+$")  # a (dotted) name; one switch


def solution_lines(nb) -> list[str]:
    """The chapter's solution regions, line by line, without spaces or comments."""
    lines = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        inside = False
        for line in "".join(cell["source"]).splitlines():
            if "BEGIN SOLUTION" in line or "END SOLUTION" in line:
                inside = "BEGIN" in line
            elif inside:
                lines.append(re.sub(r"\s+", "", line.split("#")[0]))
    return [line for line in lines if line]


def hint_arguments(nb) -> list[tuple[str, str]]:
    """(grade id, text) of every ``hint=`` of the test cells, an f-string's fields left out."""
    found = []
    for cell in nb["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell["cell_type"] != "code" or not meta.get("grade"):
            continue
        for node in ast.walk(ast.parse("".join(cell["source"]))):
            if not (isinstance(node, ast.keyword) and node.arg == "hint"):
                continue
            value = node.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.append((meta["grade_id"], value.value))
            elif isinstance(value, ast.JoinedStr):
                parts = [p.value if isinstance(p, ast.Constant) else "\0" for p in value.values]
                found.append((meta["grade_id"], "".join(parts)))
    return found


def markdown_hints(nb) -> list[tuple[str, str]]:
    """("markdown", code) of every code span and code block of a ``<details>`` box."""
    found = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        for box in re.findall(r"<details>.*?</details>", "".join(cell["source"]), re.S):
            for span in re.findall(r"```.*?```|`[^`\n]+`", box, re.S):
                found.append(("markdown", span.strip("`")))
    return found


def _code(run: str) -> bool:
    return bool(_CODE.search(run.strip("().,"))) and not _ALLOWED.match(run)


def solution_code_in(hint: str, lines: list[str]) -> str | None:
    """The code of a solution line that ``hint`` holds (None if it holds none)."""
    bare = re.sub(r"\s+", "", hint)
    for line in lines:
        if len(line) >= 8 and line in bare and _code(line):
            return line
        i = 0
        while i + RUN <= len(bare):
            if bare[i : i + RUN] not in line:
                i += 1
                continue
            j = i + RUN
            while j < len(bare) and bare[i : j + 1] in line:
                j += 1
            if _code(bare[i:j]):
                return bare[i:j]
            i = j
    return None


def code_in_hints(nb) -> list[tuple[str, str]]:
    """(where, the solution's code) of each hint that holds a line of the solution."""
    lines = solution_lines(nb)
    found = []
    for where, hint in hint_arguments(nb) + markdown_hints(nb):
        code = solution_code_in(hint, lines)
        if code is not None:
            found.append((where, code))
    return found


@pytest.mark.parametrize("chapter", ALL_CHAPTERS)
def test_no_hint_hands_out_a_line_of_the_solution(root, chapter):
    nb = json.loads(solution_path(root, chapter).read_text(encoding="utf-8"))
    assert code_in_hints(nb) == []


def _notebook(solution: str, *hints: str, test_hint: str = "") -> dict:
    test = f"check(x, hint={test_hint!r})" if test_hint else "pass"
    return {
        "cells": [
            {
                "cell_type": "code",
                "source": f"def f(Q, K, mask):\n    ### BEGIN SOLUTION\n{solution}\n    ### END SOLUTION",
            },
            *(
                {
                    "cell_type": "markdown",
                    "source": f"<details><summary>Hint 2</summary>\n\n{h}\n</details>",
                }
                for h in hints
            ),
            {
                "cell_type": "code",
                "source": test,
                "metadata": {"nbgrader": {"grade": True, "grade_id": "test_f"}},
            },
        ]
    }


def test_the_check_finds_a_line_of_the_solution_in_a_hint():
    nb = _notebook(
        "    s = Q @ K.transpose(-2, -1)", "`Q @ K.transpose(-2, -1)`, and `torch.softmax`."
    )
    assert code_in_hints(nb) == [("markdown", "Q@K.transpose(-2,-1)")]


def test_the_check_finds_a_run_of_solution_code_in_a_test_hint():
    nb = _notebook(
        '    s = s.masked_fill(~mask[:, None, :], float("-inf"))',
        test_hint="masked keys: masked_fill(~mask[:, None, :], -inf) before the softmax",
    )
    assert code_in_hints(nb) == [("test_f", "masked_fill(~mask[:,None,:],")]


def test_the_check_lets_a_hint_name_functions_and_switches():
    nb = _notebook(
        "    w = torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0)",
        "`torch.nan_to_num` after `torch.softmax(`, and `dtype=torch.bool`.",
        test_hint="a row of minus infinity gives NaN: torch.nan_to_num",
    )
    assert code_in_hints(nb) == []
