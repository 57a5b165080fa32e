"""Hints say where to look and what to check, never the solution's lines (issue 36).

A hint sits in a collapsed ``<details>`` box under an exercise: the first points at the idea,
the second names the API. A code span of a hint that holds code (an operator, an
assignment, an index, a call with arguments) and that stands in the chapter's solution is
the answer handed out. API names (``torch.nan_to_num``, ``dtype=torch.bool``) may appear.
"""

import json
import re

import pytest

from autograder.chapters import solution_path

# The chapters whose hints were rewritten to this rule; the others' are still to review
# (issue 36 lists chapters 04 and 08 first).
REVIEWED = ("04_dot_product_attention", "08_language_models")

_CODE = re.compile(r"[@=*,\[]|\(\s*[^)\s]")  # an operator, an index, a call with arguments
_KEYWORD = re.compile(r"^\w+=[\w.]+$")  # one keyword argument: an API's switch


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


def code_in_hints(nb) -> list[str]:
    """The code spans of the hints that hold code and stand in a solution line."""
    lines = solution_lines(nb)
    found = []
    for cell in nb["cells"]:
        text = "".join(cell["source"])
        if cell["cell_type"] != "markdown" or "<details>" not in text:
            continue
        for span in re.findall(r"`([^`\n]+)`", text):
            bare = re.sub(r"\s+", "", span)
            if len(bare) < 8 or _KEYWORD.match(bare) or not _CODE.search(span):
                continue
            if any(bare in line for line in lines):
                found.append(span)
    return found


@pytest.mark.parametrize("chapter", REVIEWED)
def test_no_hint_hands_out_a_line_of_the_solution(root, chapter):
    nb = json.loads(solution_path(root, chapter).read_text(encoding="utf-8"))
    assert code_in_hints(nb) == []


def test_the_check_finds_a_line_of_the_solution_in_a_hint():
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "source": "def f(Q, K):\n    ### BEGIN SOLUTION\n    s = Q @ K.transpose(-2, -1)\n    ### END SOLUTION",
            },
            {
                "cell_type": "markdown",
                "source": "<details><summary>Hint 2</summary>\n\n`Q @ K.transpose(-2, -1)`, and `torch.softmax`.\n</details>",
            },
        ]
    }
    assert code_in_hints(nb) == ["Q @ K.transpose(-2, -1)"]
