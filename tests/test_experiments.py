"""The finding chapters 01 and 02 reproduce (Bahdanau et al. 2015, Figure 2, small scale),
checked with the reference models at the chapters' full settings: the claim the book and
the notebooks make must stay true when the code or the data change."""

import pytest

from attention_course.translation import FULL_SETTINGS, GRADING_SETTINGS, experiment_settings
from autograder.reference.experiments import check_targets, run


def test_settings_follow_grading_mode(monkeypatch):
    monkeypatch.delenv("ATTENTION_COURSE_GRADING", raising=False)
    assert experiment_settings() == FULL_SETTINGS
    monkeypatch.setenv("ATTENTION_COURSE_GRADING", "1")
    assert experiment_settings() == GRADING_SETTINGS
    assert GRADING_SETTINGS.max_steps < FULL_SETTINGS.max_steps


def row(model, accuracy, overall=None):
    overall = sum(accuracy) / len(accuracy) if overall is None else overall
    return dict(model=model, seed=0, accuracy=accuracy, overall=overall)


def test_check_targets_names_each_missed_target():
    good = [
        row("no attention", [0.95, 0.8, 0.4, 0.1, 0.0]),
        row("attention", [1.0, 1.0, 0.99, 0.97, 0.95]),
    ]
    assert check_targets(good) == []
    missed = check_targets(
        [
            row("no attention", [0.9, 0.9, 0.9, 0.8, 0.7]),
            row("attention", [1.0, 1.0, 0.9, 0.85, 0.8]),
        ]
    )
    assert any("drop 0.20 < 0.30" in m for m in missed)
    assert any("spread 0.20 > 0.10" in m for m in missed)
    assert any("overall" in m for m in missed)


@pytest.mark.slow
def test_attention_keeps_its_accuracy_on_long_sources_and_the_bottleneck_does_not():
    trained = run(FULL_SETTINGS, seeds=(0,), models=("no attention", "attention"), verbose=False)
    rows = [t.row() for t in trained]
    assert check_targets(rows) == [], rows
