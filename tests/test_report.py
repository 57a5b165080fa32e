"""The instructor's report (``python -m autograder report OUT``), on a made-up graded class:
a grades.csv and a few small autograded notebooks whose failed test cells carry the tags a
diagnosis writes. No grading runs here; the catalogue is a fake one."""

import csv
import html
import json
import re
from dataclasses import dataclass

import nbformat
import pytest

from autograder import mistakes
from autograder.cli import main
from autograder.outfolder import GradeRow, write_csv

CHAPTER = "04_dot_product_attention"
OTHER = "01_rnn_bottleneck"
# test cell -> (exercise, points)
CELLS = {
    "test_attention_unmasked": ("scaled_dot_product_attention", 3.0),
    "test_attention_masked": ("scaled_dot_product_attention", 2.0),
    "test_padding_mask": ("padding_mask", 2.0),
}
SAYS = "the scores are not divided by sqrt(d_k)"


@dataclass(frozen=True)
class FakeMistake:
    name: str
    cell: str
    says: str
    old: str = ""
    new: str = ""
    breaks: frozenset = frozenset()


def fake_catalogue(chapter):
    if chapter != CHAPTER:
        return []
    return [
        FakeMistake("no-scaling", "scaled_dot_product_attention", SAYS),
        FakeMistake("mask-ignored", "padding_mask", "the mask is never applied"),
    ]


def error_output(*tags):
    message = "weights differs from the expected values.\nDiagnosis: ... " + " ".join(
        f"[known mistake: {t}]" for t in tags
    )
    return nbformat.v4.new_output(
        "error",
        ename="AssertionError",
        evalue=message,
        traceback=["\x1b[0;31mAssertionError\x1b[0m: " + message],
    )


def notebook(outputs: dict[str, list]):
    """A small autograded notebook: each exercise's solution cell, then its test cells."""
    cells, seen = [], set()
    for test, (exercise, points) in CELLS.items():
        if exercise not in seen:
            seen.add(exercise)
            cell = nbformat.v4.new_code_cell("def f(): pass")
            cell.metadata.nbgrader = {"grade_id": exercise, "solution": True, "grade": False}
            cells.append(cell)
        cell = nbformat.v4.new_code_cell("assert True", outputs=outputs.get(test, []))
        cell.metadata.nbgrader = {
            "grade_id": test,
            "solution": False,
            "grade": True,
            "points": points,
        }
        cells.append(cell)
    return nbformat.v4.new_notebook(cells=cells)


def write_class(out):
    """alice: full marks. bob: no-scaling, named in two test cells. carol: no-scaling, a tag
    the catalogue does not know, and a point lost on the padding mask with no diagnosis.
    dave: nothing handed in. alice also did chapter 01."""
    points = {
        "alice": {"test_attention_unmasked": 3, "test_attention_masked": 2, "test_padding_mask": 2},
        "bob": {"test_attention_unmasked": 0, "test_attention_masked": 0, "test_padding_mask": 2},
        "carol": {"test_attention_unmasked": 0, "test_attention_masked": 0, "test_padding_mask": 1},
        "dave": dict.fromkeys(CELLS, 0),
    }
    outputs = {
        "alice": {},
        "bob": {
            "test_attention_unmasked": [error_output("no-scaling")],
            "test_attention_masked": [error_output("no-scaling")],
        },
        "carol": {
            "test_attention_unmasked": [error_output("no-scaling")],
            "test_attention_masked": [error_output("made-up-thing")],
            "test_padding_mask": [error_output()],
        },
    }
    rows = []
    for student, scores in points.items():
        status = "graded" if student in outputs else f"missing: no {CHAPTER}/ folder"
        for test, (_, max_points) in CELLS.items():
            rows.append(GradeRow(student, CHAPTER, test, scores[test], max_points, status))
        if student in outputs:
            path = out / "nbgrader" / "autograded" / student / CHAPTER / f"{CHAPTER}.ipynb"
            path.parent.mkdir(parents=True)
            nbformat.write(notebook(outputs[student]), path)
    rows.append(GradeRow("alice", OTHER, "test_encoder", 2, 2, "graded"))
    path = out / "nbgrader" / "autograded" / "alice" / OTHER / f"{OTHER}.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(), path)
    write_csv(rows, out / "grades.csv")
    write_ledger(out)


# How long each submission took to grade, as ``grade`` records it in OUT/graded.json:
# dave's missing notebook ran no job, and erin, graded into OUT once, is no longer in the CSV.
SECONDS = {
    ("alice", CHAPTER): 9.5,
    ("bob", CHAPTER): 31.25,
    ("carol", CHAPTER): 11.0,
    ("alice", OTHER): 20.0,
    ("erin", CHAPTER): 99.0,
}


NOTE = "graded Untitled.ipynb, the only notebook in its folder, as <chapter>.ipynb"


def write_ledger(out):
    submissions = {}
    for (student, chapter), seconds in SECONDS.items():
        entry = {"sha256": "0" * 64, "solution": "1" * 64, "status": "graded", "seconds": seconds}
        submissions.setdefault(student, {})[chapter] = entry | {"time": "2026-11-24T10:00:00+00:00"}
    submissions["dave"] = {CHAPTER: {"status": f"missing: no {CHAPTER}/ folder", "sha256": None}}
    ledger = {"gradebook": "sqlite:///gradebook.db", "chapters": {}, "submissions": submissions}
    (out / "graded.json").write_text(json.dumps(ledger), encoding="utf-8")


def read(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.fixture
def graded(tmp_path, monkeypatch):
    monkeypatch.setattr(mistakes, "catalogue", fake_catalogue)
    monkeypatch.chdir(tmp_path)  # outside the course: the notebooks say which test is whose
    write_class(tmp_path / "out")
    return tmp_path / "out"


def test_report_counts_scores_and_mistakes(graded, capsys):
    assert main(["report", str(graded)]) == 0
    printed = capsys.readouterr().out
    assert "index.html" in printed and CHAPTER in printed

    scores = {
        (r["chapter"], r["cell"], r["score"]): int(r["students"])
        for r in read(graded / "report" / "scores.csv")
    }
    assert scores == {
        (CHAPTER, "test_attention_unmasked", "0"): 2,
        (CHAPTER, "test_attention_unmasked", "3"): 1,
        (CHAPTER, "test_attention_unmasked", "not graded"): 1,
        (CHAPTER, "test_attention_masked", "0"): 2,
        (CHAPTER, "test_attention_masked", "2"): 1,
        (CHAPTER, "test_attention_masked", "not graded"): 1,
        (CHAPTER, "test_padding_mask", "1"): 1,
        (CHAPTER, "test_padding_mask", "2"): 2,
        (CHAPTER, "test_padding_mask", "not graded"): 1,
        (OTHER, "test_encoder", "2"): 1,
    }

    summary = {r["cell"]: r for r in read(graded / "report" / "summary.csv")}
    unmasked = summary["test_attention_unmasked"]
    assert unmasked["exercise"] == "scaled_dot_product_attention"
    assert (unmasked["graded"], unmasked["mean"], unmasked["full_marks"]) == ("3", "1", "1")
    assert (unmasked["zero"], unmasked["not_graded"]) == ("2", "1")
    assert (unmasked["lost_points"], unmasked["diagnosed"]) == ("2", "2")
    padding = summary["test_padding_mask"]
    assert padding["exercise"] == "padding_mask"
    assert (padding["lost_points"], padding["diagnosed"]) == ("1", "0")  # a tagless failure

    found = {r["mistake"]: r for r in read(graded / "report" / "mistakes.csv")}
    assert set(found) == {"no-scaling", "made-up-thing"}  # mask-ignored: nobody
    no_scaling = found["no-scaling"]
    assert no_scaling["chapter"] == CHAPTER
    assert no_scaling["exercise"] == "scaled_dot_product_attention"
    assert no_scaling["says"] == SAYS
    assert no_scaling["count"] == "2"  # bob once, although two of his test cells named it
    assert no_scaling["students"] == "bob carol"
    assert no_scaling["tests"] == "test_attention_masked test_attention_unmasked"
    unknown = found["made-up-thing"]
    assert (unknown["count"], unknown["students"], unknown["says"]) == ("1", "carol", "")
    assert unknown["exercise"] == "scaled_dot_product_attention"  # its test cell's exercise


def test_report_page_is_self_contained(graded):
    assert main(["report", str(graded)]) == 0
    page = (graded / "report" / "index.html").read_text(encoding="utf-8")
    assert "5 submissions from 4 students in 2 chapters" in page
    assert "[known mistake: NAME]" in page
    # chapter 04: scores and mistakes; chapter 01: scores; the slowest submissions
    assert page.count("<table") == 4
    assert page.count('<img alt="" src="data:image/png;base64,') == 4
    assert SAYS in page and "made-up-thing" in page and "not in the catalogue" in page
    assert "bob carol" in page
    text = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", page)
    assert not re.search(r"https?://", text) and 'src="/' not in text and "<script" not in text
    # and it says so: no script, nothing loaded but its own data: URLs (issue 34)
    assert "Content-Security-Policy\" content=\"default-src 'none';" in text
    assert "No failure in this chapter named a known mistake" in text  # chapter 01


def test_report_names_the_slowest_submissions(graded):
    assert main(["report", str(graded)]) == 0
    times = read(graded / "report" / "times.csv")
    assert [(r["student"], r["chapter"], r["seconds"]) for r in times] == [
        ("bob", CHAPTER, "31.2"),
        ("alice", OTHER, "20.0"),
        ("carol", CHAPTER, "11.0"),
        ("alice", CHAPTER, "9.5"),
    ]  # slowest first; no time for dave (nothing ran) nor erin (not in the grades)
    assert {r["status"] for r in times} == {"graded"}
    page = (graded / "report" / "index.html").read_text(encoding="utf-8")
    section = page[page.index('<h2 id="slowest">') :]
    assert "4 submissions timed" in section
    assert f"<code>{CHAPTER}</code> 11.0 s" in section  # the median of 9.5, 11 and 31.25
    assert f"<code>{OTHER}</code> 20.0 s" in section
    rows = re.findall(r"<tr><td class=\"n\">(\d+)</td><td>(\w+)</td>", section)
    assert rows == [("1", "bob"), ("2", "alice"), ("3", "carol"), ("4", "alice")]
    assert "2.8×" in section  # bob: 31.25 s against his chapter's median of 11 s
    assert '<a href="#slowest">' in page


def test_report_lists_what_the_grader_noted_about_a_file(graded, capsys):
    ledger = json.loads((graded / "graded.json").read_text(encoding="utf-8"))
    ledger["submissions"]["carol"][CHAPTER]["note"] = NOTE
    (graded / "graded.json").write_text(json.dumps(ledger), encoding="utf-8")
    assert main(["report", str(graded)]) == 0
    assert f"warning: carol / {CHAPTER}: {NOTE}" in capsys.readouterr().err
    page = (graded / "report" / "index.html").read_text(encoding="utf-8")
    problems = page[page.index("<h2>Problems</h2>") :]
    assert html.escape(f"carol / {CHAPTER}: {NOTE}") in problems


def test_report_without_grading_times_says_so(graded, capsys):
    (graded / "graded.json").unlink()
    assert main(["report", str(graded)]) == 0
    page = (graded / "report" / "index.html").read_text(encoding="utf-8")
    assert "No grading times recorded" in page
    assert read(graded / "report" / "times.csv") == []
    (graded / "graded.json").write_text('{"submissions": [1, 2]}', encoding="utf-8")
    assert main(["report", str(graded)]) == 0
    assert "graded.json is unreadable" in capsys.readouterr().err
    assert read(graded / "report" / "times.csv") == []


def test_report_takes_a_relative_path_from_a_subfolder(graded, monkeypatch, capsys):
    sub = graded.parent / "elsewhere" / "deeper"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    assert main(["report", "../../out"]) == 0
    assert (graded / "report" / "index.html").is_file()
    assert len(read(graded / "report" / "mistakes.csv")) == 2
    monkeypatch.chdir(graded.parent)
    assert main(["report", "out"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_report_warns_about_a_missing_autograded_notebook(graded, capsys):
    (graded / "nbgrader" / "autograded" / "carol" / CHAPTER / f"{CHAPTER}.ipynb").unlink()
    assert main(["report", str(graded)]) == 0
    assert f"carol / {CHAPTER}: no readable autograded notebook" in capsys.readouterr().err
    found = {r["mistake"]: r for r in read(graded / "report" / "mistakes.csv")}
    assert found["no-scaling"]["students"] == "bob" and "made-up-thing" not in found


def test_report_without_grades_is_a_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    assert main(["report", "out"]) == 2
    err = capsys.readouterr().err
    assert "has no grades.csv: run `python -m autograder grade` first" in err
    assert "Traceback" not in err
    assert main(["report", "no-such-folder"]) == 2
    assert not (tmp_path / "out" / "report").exists()


def test_report_lists_what_was_graded_by_hand_and_the_flags_it_reviewed(graded):
    """``OUT/graded_by_hand.csv`` (written by ``grade`` and ``review``): a score given by hand
    to a flagged exercise's test cell is shown as its review, with the instructor's comment."""
    from autograder.outfolder import HandGrade, write_by_hand

    write_by_hand(
        [
            HandGrade("bob", CHAPTER, "scaled_dot_product_attention", None, None, None, "No <b>."),
            HandGrade("bob", CHAPTER, "test_attention_unmasked", 1.0, 3.0, 0.0),
        ],
        graded / "graded_by_hand.csv",
    )
    (graded / "flagged.csv").write_text(
        "student,chapter,exercise,line,rule,reason,accepted,tests\n"
        f"bob,{CHAPTER},scaled_dot_product_attention,4,operator,calls F.softmax,by hand,"
        "test_attention_unmasked test_attention_masked\n",
        encoding="utf-8",
    )
    assert main(["report", str(graded)]) == 0
    page = (graded / "report" / "index.html").read_text(encoding="utf-8")
    section = page[page.index(f'id="{CHAPTER}-by-hand"') : page.index('id="slowest"')]
    assert "No &lt;b&gt;." in section  # the comment, escaped
    assert re.search(
        r"test_attention_unmasked</code></td>\s*<td[^>]*>0</td>\s*<td[^>]*>1 / 3", section
    )
    assert "reviewed: line 4: calls F.softmax" in section
    assert f'id="{OTHER}-by-hand"' not in page  # nothing graded by hand there


def _drawing(monkeypatch) -> list:
    """The plots the report draws from now on (each a matplotlib figure)."""
    from autograder import report

    drawn, png = [], report._png
    monkeypatch.setattr(report, "_png", lambda fig: drawn.append(fig) or png(fig))
    return drawn


def test_a_report_written_again_draws_only_the_plots_whose_numbers_changed(graded, monkeypatch):
    from autograder.outfolder import read_csv

    drawn = _drawing(monkeypatch)
    page, plots = graded / "report" / "index.html", graded / "report" / "plots.json"
    assert main(["report", str(graded)]) == 0
    first = page.read_text(encoding="utf-8")
    titles = [fig.axes[0].get_title() for fig in drawn]
    # each chapter's scores, the mistakes diagnosed in one, the slowest submissions
    assert sorted(titles) == sorted(
        [f"{CHAPTER}: scores per test cell", f"{OTHER}: scores per test cell"]
        + [f"{CHAPTER}: known mistakes diagnosed", "the slowest submissions"]
    )
    assert len(json.loads(plots.read_text())) == len(titles)

    drawn.clear()
    assert main(["report", str(graded)]) == 0
    assert drawn == [] and page.read_text(encoding="utf-8") == first

    # bob's score on one test cell changes: that chapter's scores plot alone is drawn again
    rows = read_csv(graded / "grades.csv")
    bob = next(r for r in rows if r.student == "bob" and r.chapter == CHAPTER)
    bob.points = bob.max_points if bob.points != bob.max_points else 0.0
    write_csv(rows, graded / "grades.csv")
    assert main(["report", str(graded)]) == 0
    assert [fig.axes[0].get_title() for fig in drawn] == [f"{CHAPTER}: scores per test cell"]
    assert page.read_text(encoding="utf-8") != first
    assert len(json.loads(plots.read_text())) == len(titles)  # the old plot is not kept

    # a file that cannot be read: every plot drawn again, as at first
    drawn.clear()
    plots.write_text("{", encoding="utf-8")
    assert main(["report", str(graded)]) == 0
    assert len(drawn) == len(titles)
