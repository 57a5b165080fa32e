"""A notebook cell's nbgrader metadata, and which test cells belong to which exercise.

nbgrader marks cells in ``cell.metadata.nbgrader``: ``solution: true`` for a cell the
student fills in (an *exercise*, named by its ``grade_id``), ``grade: true`` and
``points`` for a graded test cell, ``locked: true`` for a cell the student must not
change. A test cell belongs to the exercise whose solution cell comes before it in the
notebook; the report, the restore of a submission and the scan all read that one map.

Every function takes a notebook or a cell as nbformat's objects or as plain JSON (a
submission is student-controlled: malformed metadata is read as none, never a crash).
"""


def metadata(cell) -> dict | None:
    """The cell's nbgrader metadata: None when it has none, ``{}`` when it is malformed."""
    meta = cell.get("metadata") if isinstance(cell, dict) else None
    nbgrader = meta.get("nbgrader") if isinstance(meta, dict) else None
    return nbgrader if isinstance(nbgrader, dict) else (None if nbgrader is None else {})


def grade_id(cell) -> str | None:
    found = (metadata(cell) or {}).get("grade_id")
    return found if isinstance(found, str) else None


def is_solution(cell) -> bool:
    """An exercise: a cell the student fills in."""
    return bool((metadata(cell) or {}).get("solution"))


def is_graded(cell) -> bool:
    """A graded test cell: it has points."""
    return bool((metadata(cell) or {}).get("grade"))


def is_locked(cell) -> bool:
    """A cell the student must not change (nbgrader puts it back when grading)."""
    return bool((metadata(cell) or {}).get("locked"))


def cells_of(nb) -> list:
    cells = nb.get("cells") if isinstance(nb, dict) else None
    return cells if isinstance(cells, list) else []


def exercise_above(nb) -> dict[str, str | None]:
    """Every cell with a grade id that is not an exercise -> the exercise above it (the
    grade id of the last solution cell before it; None before the first exercise)."""
    found: dict[str, str | None] = {}
    exercise = None
    for cell in cells_of(nb):
        if is_solution(cell):
            exercise = grade_id(cell)
        elif grade_id(cell) is not None:
            found[grade_id(cell)] = exercise
    return found


def exercise_of_tests(nb) -> dict[str, str | None]:
    """Graded test cell -> the exercise it tests (None: a test above every exercise)."""
    above = exercise_above(nb)
    return {grade_id(c): above[grade_id(c)] for c in cells_of(nb) if is_graded(c) and grade_id(c)}


def tests_of_exercises(nb) -> dict[str, list[str]]:
    """Exercise -> the graded test cells that follow it, up to the next exercise (the
    points a flag on the exercise withholds); an exercise without tests maps to []."""
    tests: dict[str, list[str]] = {grade_id(c): [] for c in cells_of(nb) if is_solution(c)}
    for test, exercise in exercise_of_tests(nb).items():
        if exercise is not None:
            tests[exercise].append(test)
    return tests


def graded_cells(nb) -> list[tuple[str, float]]:
    """(grade id, points) of every graded test cell, in notebook order."""
    return [
        (grade_id(c), float((metadata(c) or {}).get("points", 0)))
        for c in cells_of(nb)
        if is_graded(c) and grade_id(c)
    ]
