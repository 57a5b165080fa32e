"""The finding chapters 01 and 02 reproduce (Bahdanau et al. 2015, Figure 2, small scale):
the settings, the targets' check and the matched control.

The finding itself, trained at the chapters' full settings, is checked by
``python -m benchmarks.figure2`` (it exits 1 when a target is missed, judged by the same
``check_targets``): seven minutes of training beside the book's build, it took a quarter of
``make test``'s 30-minute budget, and the chapter's page is built from that benchmark's
results."""

from dataclasses import replace

import pytest

from attention_course.translation import FULL_SETTINGS, GRADING_SETTINGS, experiment_settings
from autograder.reference.experiments import check_targets


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
            row("no attention, matched parameters", [0.95, 0.95, 0.9, 0.85, 0.8]),
        ]
    )
    assert any("drop 0.20 < 0.30" in m for m in missed)
    assert any("matched parameters, seed 0: drop 0.15 < 0.30" in m for m in missed)
    assert any("spread 0.20 > 0.10" in m for m in missed)
    assert any("overall" in m for m in missed)


@pytest.fixture(scope="module")
def small_data():
    """Number words with the full data's vocabularies (37 English, 36 German tokens), fast."""
    from attention_course.translation import number_translation_data

    data = number_translation_data(FULL_SETTINGS.tgt_lang, 1000, 2, seed=0)
    assert (len(data.src_vocab), len(data.tgt_vocab)) == (37, 36)
    return data


def test_matched_model_has_as_many_parameters_as_the_attention_model(small_data):

    from autograder.reference.experiments import (
        MATCHED,
        PARAMETER_TOLERANCE,
        matched_hidden,
        parameter_count,
        parameter_counts,
    )

    cfg = FULL_SETTINGS
    counts = parameter_counts(small_data, cfg)
    target = counts["attention"]
    assert counts["no attention"] < target  # the comparison the control is for
    assert abs(counts[MATCHED] - target) <= PARAMETER_TOLERANCE * target, counts
    # the closest hidden size: one unit less or more is no closer
    H = matched_hidden(small_data, cfg)
    assert H > cfg.d_hidden
    for other in (H - 1, H + 1):
        count = parameter_count("no attention", small_data, replace(cfg, d_hidden=other))
        assert abs(count - target) >= abs(counts[MATCHED] - target)


def test_matched_model_trains_for_the_steps_of_the_model_without_attention(small_data):

    from autograder.reference.experiments import MATCHED, matched_hidden, train_reference

    cfg = replace(GRADING_SETTINGS, max_steps=3, max_steps_attention=2, seconds=60.0)
    row = train_reference(MATCHED, small_data, cfg, seed=0).row()
    assert row["planned_steps"] == row["steps"] == 3
    assert row["d_hidden"] == matched_hidden(small_data, cfg)


def test_figure2_json_has_what_chapter_02_reads(small_data):
    """benchmarks/figure2.json (``python -m benchmarks.figure2 ... --write``): the rows the
    page's table reads, at the chapters' settings, every run at its planned steps."""
    import json
    from dataclasses import asdict
    from pathlib import Path

    from autograder.reference.experiments import MATCHED, parameter_counts

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "figure2.json"
    table = json.loads(path.read_text())
    config = {k: v for k, v in table["config"].items() if k != "seconds"}
    assert config == {k: v for k, v in asdict(FULL_SETTINGS).items() if k != "seconds"}
    assert table["parameters"] == parameter_counts(small_data, FULL_SETTINGS)
    assert table["stopped_short"] == []
    for model in ("no attention", "attention", MATCHED):
        rows = [r for r in table["rows"] if r["model"] == model]
        assert sorted(r["seed"] for r in rows) == [0, 1, 2], model
        for r in rows:
            assert r["params"] == table["parameters"][model]
            assert r["steps"] == r["planned_steps"]
            assert len(r["accuracy"]) == len(r["buckets"]) == 5
            assert {"overall", "d_hidden", "train_s"} <= r.keys()
