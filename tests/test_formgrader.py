"""Grading by hand in nbgrader's formgrader, on a class graded by the course (issue 28).

``python -m autograder review OUT`` starts JupyterLab with nbgrader's formgrader on a graded
OUT; an instructor scores and comments cells there; ``review OUT --apply`` (or stopping the
server) brings the grades, the feedback pages and the report up to date. The slow test
drives the formgrader in Debian's chromium as an instructor would: it reviews a flagged
exercise by giving its test cells points, and comments on the student's answer.
"""

import csv
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from browser import chromium, launch
from bwrap import grade_options

from autograder.chapters import CourseError
from autograder.formgrader import GRADEBOOK_ENV, formgrader_config, free_port, write_config
from autograder.gradebook import of_graded, redact, resolve_url
from autograder.outfolder import LEDGER, Ledger, Out
from autograder.submissions import mutate, solved_notebook, write_submission
from benchmarks.formgrader_ui import grade_by_hand

CH04 = "04_dot_product_attention"
SDPA = "scaled_dot_product_attention"
UNMASKED, MASKED = "test_attention_unmasked", "test_attention_masked"  # SDPA's test cells
COMMENT = "Calling the course's reference is not your own code: 1 of the 2 masked points."
TOKEN = "test-formgrader-token"


def copier_notebook(root):
    """Chapter 04 solved, but its attention calls the reference: flagged for review."""
    return mutate(
        solved_notebook(root, CH04),
        SDPA,
        "    d_k = Q.size(-1)",
        "    from autograder.reference.attention import scaled_dot_product_attention as ref\n"
        "    return ref(Q, K, V, mask)\n    d_k = Q.size(-1)",
    )


def autograder(root, *args, check=True) -> subprocess.CompletedProcess:
    """``python -m autograder ARGS`` from the course's folder."""
    return subprocess.run(
        [sys.executable, "-m", "autograder", *map(str, args)],
        cwd=root,
        capture_output=True,
        text=True,
        check=check,
        timeout=300,
    )


def rows(path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def cell_row(out, student: str, cell: str) -> dict:
    """The row of ``OUT/grades_by_cell.csv`` of this student's test cell."""
    found = [
        r for r in rows(out / "grades_by_cell.csv") if (r["student"], r["cell"]) == (student, cell)
    ]
    (row,) = found
    return row


# --- fast: the gradebook of a graded OUT, and the config file ------------------------------


def test_a_hidden_password_is_asked_for_and_a_wrong_gradebook_refused(tmp_path):
    recorded = "postgresql+psycopg://grader:***@db.example.org/attention"
    with pytest.raises(CourseError, match="--db"):
        of_graded(recorded, None, tmp_path)
    url = "postgresql://grader:secret@db.example.org/attention"
    assert of_graded(recorded, url, tmp_path) == (
        "postgresql+psycopg://grader:secret@db.example.org/attention"
    )
    with pytest.raises(CourseError, match="was graded into the gradebook"):
        of_graded(recorded, "postgresql://grader:secret@db.example.org/other", tmp_path)
    # a Unix socket and no password: graded.json holds the whole URL
    socket = redact(resolve_url("postgresql://grader@/attention?host=/run/postgresql", tmp_path))
    assert of_graded(socket, None, tmp_path) == socket
    assert of_graded(None, None, tmp_path) == f"sqlite:///{tmp_path.resolve()}/gradebook.db"


def test_the_config_file_makes_out_an_nbgrader_course(tmp_path, monkeypatch):
    out = Out(tmp_path / "out")
    ledger = Ledger(out / LEDGER)
    ledger.gradebook = f"sqlite:///{out.folder}/gradebook.db"
    ledger.record("alice", CH04, "0" * 64, "1" * 64, "graded")
    out.folder.mkdir()
    ledger.save()
    path = write_config(out)
    assert path == out.work / "nbgrader_config.py" and "formgrader_config" in path.read_text()
    monkeypatch.delenv(GRADEBOOK_ENV, raising=False)
    config = formgrader_config(out.work)
    assert config.CourseDirectory.course_id == "attention-course"
    assert config.CourseDirectory.root == str(out.work)
    assert config.CourseDirectory.db_url == ledger.gradebook
    assert config.GradingExecute.sandbox is True  # a kernel the formgrader starts
    monkeypatch.setenv(GRADEBOOK_ENV, "postgresql+psycopg://grader:secret@/attention")
    assert formgrader_config(out.work).CourseDirectory.db_url.endswith(":secret@/attention")


def test_review_of_a_folder_with_nothing_graded_is_a_clear_error(root, tmp_path):
    done = autograder(root, "review", tmp_path, "--apply", check=False)
    assert done.returncode == 2 and "nothing is graded" in done.stderr


# --- slow: the formgrader in a browser ----------------------------------------------------


def wait_until_it_answers(url: str, server: subprocess.Popen, log) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert server.poll() is None, f"review stopped:\n{log.read_text()}"
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            time.sleep(0.3)
    raise AssertionError(f"the formgrader did not answer in 90 s:\n{log.read_text()}")


def stop(server: subprocess.Popen) -> None:
    """Stop ``review`` as Ctrl-C would; kill it (its session: the server) if it hangs."""
    if server.poll() is None:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def review_in_the_browser(path: str, formgrader: str) -> None:
    """As an instructor: Manual Grading, the chapter, carol's submission; give the flagged
    exercise's test cells 3 / 3 and 1 / 2 and comment on her answer."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch(playwright, path)
        try:
            scores, comments = {UNMASKED: "3", MASKED: "1"}, {SDPA: COMMENT}
            saved = grade_by_hand(browser, formgrader, CH04, "carol", scores, comments)
        finally:
            browser.close()
    assert saved[UNMASKED]["manual_score"] == 3.0 and saved[MASKED]["manual_score"] == 1.0
    assert saved[f"{SDPA}-comment"]["manual_comment"] == COMMENT


@pytest.mark.slow
def test_a_flagged_exercise_reviewed_in_the_formgrader_counts_everywhere(root, tmp_path):
    path = chromium()  # skips without chromium (fails under CI) before anything is graded
    out = tmp_path / "out"
    submissions = tmp_path / "in"
    write_submission(solved_notebook(root, CH04), submissions, "alice", CH04)
    write_submission(copier_notebook(root), submissions, "carol", CH04)
    autograder(root, "grade", submissions, "--out", out, "--workers", 2, *grade_options())
    assert cell_row(out, "carol", UNMASKED)["status"].startswith("flagged for review")
    assert cell_row(out, "carol", MASKED)["points"] == "0"

    port, log = free_port(), tmp_path / "review.log"
    env = {**os.environ, "JUPYTER_TOKEN": TOKEN}
    with open(log, "w") as output:
        server = subprocess.Popen(
            [sys.executable, "-m", "autograder", "review", out, "--no-browser"]
            + ["--port", str(port)],
            cwd=root,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        formgrader = f"http://127.0.0.1:{port}/formgrader?token={TOKEN}"
        wait_until_it_answers(formgrader, server, log)
        # the command says where, once its own check that the server answers is done
        deadline = time.monotonic() + 30
        while formgrader not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert formgrader in log.read_text()
        review_in_the_browser(path, formgrader)

        applied = autograder(root, "review", out, "--apply")
        assert "graded by hand: 2 scores and 1 comment in 1 submission" in applied.stdout
    finally:
        stop(server)
    assert server.returncode == 0, log.read_text()
    assert "bringing OUT up to date" in log.read_text()  # stopping it applies them too

    # the CSV files: the scores given by hand stand, flag or not
    for cell, points in ((UNMASKED, "3"), (MASKED, "1")):
        row = cell_row(out, "carol", cell)
        assert (row["points"], row["status"]) == (points, "graded")
    (carol,) = [r for r in rows(out / "grades.csv") if r["student"] == "carol"]
    assert carol[CH04] == "18" and carol["max_total"] == "19"
    by_hand = {r["cell"]: r for r in rows(out / "graded_by_hand.csv")}
    assert by_hand[MASKED]["points"] == "1" and by_hand[MASKED]["autograded"] == "2"
    assert by_hand[SDPA]["comment"] == COMMENT
    (flag,) = rows(out / "flagged.csv")
    assert flag["accepted"] == "by hand"

    # the student's page: the score and the comment, and that the instructor reviewed it
    page = (out / "feedback" / "carol" / f"{CH04}.html").read_text(encoding="utf-8")
    assert "Reviewed by your instructor" in page and "1 / 2 points, given by" in page
    assert "Score: 18.0 / 19.0" in page and "Score: 1.0 / 2.0" in page  # nbgrader's own
    assert f"Comments:</b> <p>{COMMENT}</p>" in page  # the comment, under her answer
    assert "less than this page shows" not in page  # no points withheld any more

    # the class report
    report = (out / "report" / "index.html").read_text(encoding="utf-8")
    assert "Graded by hand" in report and "reviewed: line 16" in report
    assert "Calling the course&#39;s reference" in report


@pytest.mark.slow
def test_a_postgresql_gradebook_is_reviewed_and_applied_from_out(root, tmp_path):
    """Graded into PostgreSQL (a socket, no password: graded.json holds the whole URL), the
    formgrader reads that gradebook, and a score given there reaches OUT."""
    import json

    from nbgrader.api import Gradebook
    from postgres import postgres_server

    from autograder.formgrader import Server
    from autograder.nbgrader_settings import COURSE_ID

    out = tmp_path / "out"
    write_submission(copier_notebook(root), tmp_path / "in", "carol", CH04)
    with postgres_server("review") as db:
        autograder(root, "grade", tmp_path / "in", "--out", out, "--db", db, "--workers", 1)
        url = resolve_url(db, out)
        with Server(Out(out), url, token=TOKEN) as server:
            api = f"{server.base}/formgrader/api/submissions/{CH04}?token={TOKEN}"
            with urllib.request.urlopen(api, timeout=30) as answer:
                (carol,) = json.load(answer)
            assert carol["student"] == "carol" and carol["needs_manual_grade"] is True
        with Gradebook(url, COURSE_ID) as gb:  # what the formgrader's handler does on a save
            grade = gb.find_grade(UNMASKED, CH04, CH04, "carol")
            grade.manual_score, grade.needs_manual_grade = 2.0, False
            gb.db.commit()
        applied = autograder(root, "review", out, "--apply")
    assert "graded by hand: 1 score and 0 comments in 1 submission" in applied.stdout
    reviewed = cell_row(out, "carol", UNMASKED)
    assert (reviewed["points"], reviewed["status"]) == ("2", "graded")
    assert cell_row(out, "carol", MASKED)["status"].startswith("flagged for review")
    page = (out / "feedback" / "carol" / f"{CH04}.html").read_text(encoding="utf-8")
    assert "Reviewed by your instructor" in page and "2 / 3 points, given by" in page


def test_review_serves_a_class_with_a_broken_submission_and_never_one_raw(tmp_path, monkeypatch):
    """One notebook that cannot be made inert (here: unreadable) stops nothing: it is renamed
    so that no page renders it, and every other notebook of the class is made inert; one
    that is not JSON at all is served as a placeholder (autograder/inert.py)."""
    import nbformat

    from autograder import formgrader

    out = Out(tmp_path / "out")
    folder = out.work / "autograded"
    payload = '<img src=x onerror="alert(1)">'
    paths = {}
    for student in ("alice", "bob", "carol"):
        path = folder / student / CH04 / f"{CH04}.ipynb"
        path.parent.mkdir(parents=True)
        nb = nbformat.v4.new_notebook()
        nb.cells.append(nbformat.v4.new_markdown_cell(payload))
        nbformat.write(nb, path)
        paths[student] = path
    paths["carol"].write_text("{ not json")
    real = formgrader.make_inert_file

    def unreadable_for_bob(path, *args):
        if "bob" in str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args)

    monkeypatch.setattr(formgrader, "make_inert_file", unreadable_for_bob)
    said = []
    formgrader.make_served_inert(out, log=said.append)
    assert not paths["bob"].exists()
    assert paths["bob"].with_name(paths["bob"].name + formgrader.UNSERVED).is_file()
    assert len(said) == 1 and "bob" in said[0] and "not served" in said[0]
    alice = nbformat.read(paths["alice"], as_version=4)
    assert alice.cells[0].source != payload and "```" in alice.cells[0].source  # as text
    carol = nbformat.read(paths["carol"], as_version=4)  # a placeholder, valid
    nbformat.validate(carol)
