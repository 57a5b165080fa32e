"""Each chapter page names the graded questions its notebook asks, and no other (issue 60,
part 8): the paragraphs of ``book/<chapter>.md`` that speak of "graded questions" name, in
code spans, exactly the functions that the notebook's header lists in its item of graded
questions; a list the page's code keeps of them (chapter 10's ``QUESTIONS``) is the same."""

import ast
import re

import nbformat
import pytest
from test_graded_messages import graded_questions

from autograder.chapters import ALL_CHAPTERS, solution_path


def named_on_page(text: str) -> set[str]:
    """The identifiers in code spans (not roles such as {cite:p}`key`) of the paragraphs of
    prose (code cells left out) that speak of graded questions."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    names: set[str] = set()
    for paragraph in re.split(r"\n\s*\n", prose):
        if "graded question" in paragraph:
            names |= set(re.findall(r"(?<!\})`([A-Za-z_]\w*)`", paragraph))
    return names


@pytest.mark.parametrize("chapter", ALL_CHAPTERS)
def test_the_page_names_the_notebooks_graded_questions(root, chapter):
    notebook = set(graded_questions(nbformat.read(solution_path(root, chapter), as_version=4)))
    page = (root / "book" / f"{chapter}.md").read_text(encoding="utf-8")
    assert notebook, f"{chapter}: the notebook's header lists no graded question"
    assert named_on_page(page) == notebook, (
        f"book/{chapter}.md names {sorted(named_on_page(page))} as graded questions; the "
        f"notebook asks {sorted(notebook)}"
    )
    for kept in re.findall(r"^QUESTIONS = (\{[^}]*\})", page, re.MULTILINE):
        assert ast.literal_eval(kept) == notebook, f"book/{chapter}.md: QUESTIONS = {kept}"


@pytest.mark.parametrize("chapter", ALL_CHAPTERS)
def test_every_graded_question_is_a_function_of_the_notebook(root, chapter):
    nb = nbformat.read(solution_path(root, chapter), as_version=4)
    defined = {
        m
        for cell in nb.cells
        if cell.metadata.get("nbgrader", {}).get("solution")
        for m in re.findall(r"^def (\w+)\(", cell.source, re.MULTILINE)
    }
    assert set(graded_questions(nb)) <= defined, sorted(set(graded_questions(nb)) - defined)


def test_the_check_reads_the_names_of_the_paragraph_of_graded_questions():
    page = (
        "Intro with `other`.\n\nTo answer two graded questions (the size, `gru_parameters`, "
        "and the steps, `sequential_steps`), open it from\n(`notebooks/x/x.ipynb`), as "
        "{cite:t}`smith2020`.\n\n```{code-cell}\n# graded questions: `not_this`\n```\n\nMore."
    )
    assert named_on_page(page) == {"gru_parameters", "sequential_steps"}
