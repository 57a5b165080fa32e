"""What grading reads back from the gradebook after every run (``autograder/gradebook.py``):
each submission's scores in one query, and the cells scored or commented by hand, the same
as nbgrader's own objects give them one submission at a time."""

import pytest

from autograder import gradebook
from autograder.nbgrader_settings import COURSE_ID

# nbgrader's add_submission warns, from SQLAlchemy's autoflush, as it builds a submission
pytestmark = pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")

CHAPTERS = ("01_rnn_bottleneck", "04_dot_product_attention")
CELLS = ("encoder", "test_encoder", "test_decoder")  # a solution cell, then two test cells


@pytest.fixture
def url(tmp_path, monkeypatch):
    import nbgrader.api
    from nbgrader.api import Gradebook

    from autograder.release import alembic_head

    # a new gradebook is stamped with nbgrader's schema revision, read here as grading does
    monkeypatch.setattr(nbgrader.api, "get_alembic_version", alembic_head)
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with Gradebook(url, COURSE_ID) as gb:
        for chapter in CHAPTERS:
            gb.add_assignment(chapter)
            gb.add_notebook(chapter, chapter)
            gb.add_solution_cell(CELLS[0], chapter, chapter)
            gb.add_grade_cell(CELLS[1], chapter, chapter, max_score=2, cell_type="code")
            gb.add_grade_cell(CELLS[2], chapter, chapter, max_score=3, cell_type="code")
        for student in ("alice", "bob", "carol"):
            gb.add_student(student)
        for student, chapter in (
            ("alice", CHAPTERS[0]),
            ("alice", CHAPTERS[1]),
            ("bob", CHAPTERS[0]),
        ):
            gb.add_submission(chapter, student)
        # autograded scores; bob's second test scored by hand, alice's chapter 04 commented
        for student, chapter, points in (
            ("alice", CHAPTERS[0], (2, 3)),
            ("alice", CHAPTERS[1], (0, 3)),
            ("bob", CHAPTERS[0], (2, 0)),
        ):
            for cell, score in zip(CELLS[1:], points, strict=True):
                gb.find_grade(cell, chapter, chapter, student).auto_score = score
        gb.find_grade(CELLS[2], CHAPTERS[0], CHAPTERS[0], "bob").manual_score = 1.5
        gb.find_comment(CELLS[0], CHAPTERS[1], CHAPTERS[1], "alice").manual_comment = "the mask"
        gb.find_comment(CELLS[0], CHAPTERS[0], CHAPTERS[0], "alice").manual_comment = "  "
        gb.db.commit()
    return url


PAIRS = [
    ("alice", CHAPTERS[0]),
    ("alice", CHAPTERS[1]),
    ("bob", CHAPTERS[0]),
    ("carol", CHAPTERS[0]),
]


def _one_at_a_time(url):
    """What nbgrader's objects say, a submission at a time."""
    from nbgrader.api import Gradebook, MissingEntry

    out = {}
    with Gradebook(url, COURSE_ID) as gb:
        for student, chapter in PAIRS:
            try:
                notebook = gb.find_submission_notebook(chapter, chapter, student)
            except MissingEntry:
                out[(student, chapter)] = {}
                continue
            out[(student, chapter)] = {
                g.name: float(g.score) for g in notebook.grades if g.score is not None
            }
    return out


def test_scores_in_one_query_are_nbgraders_with_the_hand_given_score_first(url):
    scores = gradebook.scores(url, PAIRS)
    assert scores == _one_at_a_time(url)
    assert scores[("bob", CHAPTERS[0])] == {CELLS[1]: 2.0, CELLS[2]: 1.5}  # by hand
    assert scores[("carol", CHAPTERS[0])] == {}  # not in the gradebook
    assert gradebook.scores(url, PAIRS[:1]) == {PAIRS[0]: {CELLS[1]: 2.0, CELLS[2]: 3.0}}


def test_only_the_cells_scored_or_commented_by_hand_are_read_back(url):
    found = gradebook.graded_by_hand(url, PAIRS)
    assert [(g.student, g.chapter, g.cell, g.points, g.comment) for g in found] == [
        ("alice", CHAPTERS[1], CELLS[0], None, "the mask"),
        ("bob", CHAPTERS[0], CELLS[2], 1.5, ""),
    ]
    bob = found[1]
    assert (bob.max_points, bob.autograded) == (3.0, 0.0)


def test_the_students_are_added_at_once_and_those_there_kept(url):
    from nbgrader.api import Gradebook

    with Gradebook(url, COURSE_ID) as gb:
        there = {s.id for s in gb.students}
        gb.update_or_create_student("ada", first_name="Ada")
    gradebook.create_students(url, ["ada", "new-1", "new-2", "new-1"])
    gradebook.create_students(url, ["new-2"])  # again: nothing to add
    with Gradebook(url, COURSE_ID) as gb:
        assert {s.id for s in gb.students} == there | {"ada", "new-1", "new-2"}
        assert gb.find_student("ada").first_name == "Ada"
