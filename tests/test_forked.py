"""tests/forked.py: each variant's run goes on from its cell in a fork, with the state the
cells before left, and nothing of a fork comes back but its result."""

import pytest
from forked import each_from_its_cell, in_a_fork


def test_each_variant_starts_from_the_cells_before_its_own():
    ran, state = [], {"sum": 0}

    def run_cell(i):
        ran.append(i)
        state["sum"] += i

    def run_rest(i, name):
        state["sum"] += 100  # the variant's change, in its own cell
        for j in range(i + 1, 4):
            state["sum"] += j
        return (name, state["sum"])

    results = each_from_its_cell(4, {"at-0": 0, "at-2": 2}, run_cell, run_rest)
    assert ran == [0, 1, 2, 3] and state["sum"] == 6  # the forks changed nothing here
    assert results == {"at-0": ("at-0", 100 + 1 + 2 + 3), "at-2": ("at-2", 0 + 1 + 100 + 3)}


def test_an_error_in_a_fork_is_raised_here():
    def fails():
        raise ValueError("a cell broke")

    with pytest.raises(RuntimeError, match="ValueError: a cell broke"):
        in_a_fork(fails)


def test_a_fork_that_hangs_is_killed():
    import time

    with pytest.raises(RuntimeError, match="ran past 1 s"):
        in_a_fork(lambda: time.sleep(30), timeout_s=1)


def test_a_variant_of_no_cell_is_an_error():
    with pytest.raises(ValueError, match="no cell"):
        each_from_its_cell(2, {"nowhere": 5}, lambda i: None, lambda i, name: None)
