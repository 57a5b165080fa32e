"""The benchmarks of the chapters' findings run on any seeds and any number of threads
(issue 38): each one's ``--help`` offers both."""

import contextlib
import importlib
import io

import pytest

FINDINGS = (
    "figure2",
    "local_attention",
    "convs2s",
    "chapter05",
    "transformer",
    "spatial",
    "language_models",
    "vision_transformer",
)


@pytest.mark.parametrize("name", FINDINGS)
def test_a_benchmark_takes_any_seeds_and_threads(name):
    main = importlib.import_module(f"benchmarks.{name}").main
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stopped:
        main(["--help"])
    assert stopped.value.code == 0
    assert "--seeds" in out.getvalue() and "--threads" in out.getvalue(), out.getvalue()


def test_the_chapter05_finding_is_judged_by_one_function():
    from attention_course.lookup import heads_separate

    rows = [{"heads": 1, "both_right": 0.3}, {"heads": 2, "both_right": 0.99}]
    assert heads_separate(rows) == (True, 0.3, 0.99)
    rows.append({"heads": 4, "both_right": 0.2})
    assert heads_separate(rows)[0] is False
    with pytest.raises(ValueError):
        heads_separate(rows[1:])
