"""The instructor's whole loop on one class, scripted: collect, grade, review by hand in
nbgrader's formgrader, export to Canvas, Moodle and Blackboard; timed, and checked that no
grade was lost or given to the wrong student.

    python -m benchmarks.instructor_loop --students 30 [--write]

The class: ``--students`` students of chapter 04, ids their e-mail addresses, names with
accents and commas, two students called Ann Lee. Each hands in the solution with a subset
of the exercises left as released, so each earns a known score: the chapter's points less
those of the test cells of the exercises left undone and of those built on them
(``BUILT_ON``; one student hands in the release untouched, one the whole solution). One student calls the course's reference in her
attention: flagged for review, she is given 3 / 3 and 1 / 2 of the flagged exercise's test
cells by hand in the formgrader (in chromium), and a comment. One hands in a notebook that
is not JSON: zero, and the reason. The class arrives as a zip, as an LMS hands it out.

Each LMS's roster (the file it exports) is written for the class as that system writes it;
each roster lacks the last student and holds one student who handed nothing in, so
``export`` must report both. Checked: every student's score in ``grades.csv`` is the one
their submission earns; every roster row of every file written carries that student's
score and no other; the Moodle feedback zip holds each matched student's own page; both
missing students are reported by every export.
"""

import argparse
import csv
import io
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import nbformat

from autograder.cells import grade_id, graded_cells, is_solution, tests_of_exercises
from autograder.chapters import solution_path
from autograder.formgrader import free_port
from autograder.submissions import mutate, solved_notebook, untouched_notebook
from benchmarks.formgrader_ui import grade_by_hand
from benchmarks.run import ROOT

CHAPTER = "04_dot_product_attention"
TITLE = "04 Dot-product attention"
SDPA = "scaled_dot_product_attention"
UNMASKED, MASKED = "test_attention_unmasked", "test_attention_masked"
COMMENT = "Calling the course's reference is not your own code: 1 of the 2 masked points."
RESULTS = Path(__file__).with_name("instructor_loop.md")
# An exercise whose class is built on another's: CrossAttention subclasses the student's
# SelfAttention, whose __init__ is part of that exercise, so with SelfAttention left as
# released CrossAttention cannot be made and its test fails too.
BUILT_ON = {"cross_attention": "self_attention"}
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]

FIRST = ["Ann", "Jürgen", "Zoë", "François", "Siobhán", "Łukasz", "Ana María", "Björn", "Chloé"]
LAST = ["Lee", "Müller", "Dupont, Jr.", "O'Brien", "García", "Nguyễn", "Kowalski", "Øster"]


def student_names(n: int) -> list[tuple[str, str, str]]:
    """(first, last, e-mail) of n students; the first two are both called Ann Lee."""
    names = [("Ann", "Lee", "ann.lee@example.edu"), ("Ann", "Lee", "ann.lee2@example.edu")]
    i = 0
    while len(names) < n:
        first, last = FIRST[i % len(FIRST)], LAST[(i // len(FIRST) + i) % len(LAST)]
        names.append((first, last, f"student{len(names) + 1:03d}@example.edu"))
        i += 1
    return names


def exercises(root: Path) -> dict[str, float]:
    """Exercise's grade id -> the points of its test cells."""
    nb = nbformat.read(solution_path(root, CHAPTER), as_version=4)
    points = dict(graded_cells(nb))
    return {ex: sum(points[t] for t in tests) for ex, tests in tests_of_exercises(nb).items()}


def submission(root: Path, undone: set[str]):
    """The solution with the exercises in ``undone`` left as released."""
    nb, released = solved_notebook(root, CHAPTER), untouched_notebook(root, CHAPTER)
    stubs = {grade_id(c): c.source for c in released.cells if is_solution(c)}
    for cell in nb.cells:
        if is_solution(cell) and grade_id(cell) in undone:
            cell.source = stubs[grade_id(cell)]
    return nb


def copier(root: Path):
    return mutate(
        solved_notebook(root, CHAPTER),
        SDPA,
        "    d_k = Q.size(-1)",
        "    from autograder.reference.attention import scaled_dot_product_attention as ref\n"
        "    return ref(Q, K, V, mask)\n    d_k = Q.size(-1)",
    )


def build_class(root: Path, n: int, inbox: Path) -> dict[str, float]:
    """The class's zip in ``inbox``; e-mail -> the score each submission must earn."""
    points = exercises(root)
    names = [e for _, _, e in student_names(n)]
    total = sum(points.values())
    order = sorted(points)
    expected: dict[str, float] = {}
    inbox.mkdir(parents=True)
    with zipfile.ZipFile(inbox / "class.zip", "w") as z:
        for i, email in enumerate(names):
            name = f"{email}_{CHAPTER}.ipynb"
            if i == 2:
                z.writestr(name, nbformat.writes(copier(root)))
                expected[email] = total - 3 - 2  # withheld until reviewed
                continue
            if i == 3:
                z.writestr(name, '{"cells": [')
                expected[email] = 0.0
                continue
            # 0: the solution; 1: the release untouched; then subsets of exercises
            mask = (
                0 if i == 0 else (1 << len(order)) - 1 if i == 1 else (i * 37) % (1 << len(order))
            )
            undone = {ex for b, ex in enumerate(order) if mask >> b & 1}
            z.writestr(name, nbformat.writes(submission(root, undone)))
            lost = undone | {ex for ex, base in BUILT_ON.items() if base in undone}
            expected[email] = total - sum(points[ex] for ex in lost)
    return expected


# ---------------------------------------------------------------------------- the rosters


def write_rosters(folder: Path, n: int) -> dict[str, Path]:
    """Each LMS's export of the class: every student but the last, and one who handed
    nothing in (dropped@example.edu)."""
    people = student_names(n)[:-1] + [("Dropped", "Out", "dropped@example.edu")]
    folder.mkdir(parents=True)
    rosters = {}
    rows = [
        ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", f"{TITLE} (1004)"],
        ["    Points Possible", "", "", "", "", "19.00"],
    ]
    for i, (first, last, email) in enumerate(people):
        rows.append([f"{last}, {first}", str(50000 + i), f"s{i:04d}", email, "A", ""])
    rosters["canvas"] = _write(folder / "canvas_gradebook.csv", rows, bom=True)
    rows = [["First name", "Last name", "ID number", "Institution", "Department"]]
    rows[0] += ["Email address", f"Assignment: {TITLE} (Real)", "Last downloaded from this course"]
    for i, (first, last, email) in enumerate(people):
        rows.append([first, last, f"S{i:04d}", "", "", email, "-", "1709287200"])
    rosters["moodle"] = _write(folder / "moodle_grades.csv", rows)
    rows = [["Identifier", "Full name", "Email address", "Status", "Grade", "Maximum Grade"]]
    rows[0] += ["Grade can be changed", "Last modified (submission)", "Feedback comments"]
    for i, (first, last, email) in enumerate(people):
        rows.append([f"Participant {101 + i}", f"{first} {last}", email, "Submitted for grading"])
        rows[-1] += ["", "19.00", "Yes", "Friday, 1 March 2024, 10:22 AM", ""]
    rosters["moodle-worksheet"] = _write(folder / "moodle_worksheet.csv", rows)
    rows = [["Last Name", "First Name", "Username", "Student ID", "Last Access", "Availability"]]
    rows[0] += [f"{TITLE} [Total Pts: 19 Score] |4004"]
    for i, (first, last, email) in enumerate(people):
        rows.append([last, first, email, f"S{i:04d}", "2024-03-01 10:00:00", "Available", ""])
    rosters["blackboard"] = _write(folder / "blackboard_gradecenter.csv", rows, quote=True)
    return rosters


def _write(path: Path, rows: list[list[str]], bom: bool = False, quote: bool = False) -> Path:
    text = io.StringIO()
    csv.writer(text, quoting=csv.QUOTE_ALL if quote else csv.QUOTE_MINIMAL).writerows(rows)
    path.write_text(("\ufeff" if bom else "") + text.getvalue(), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------ the loop


def autograder(*args) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "autograder", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if done.returncode != 0:
        raise SystemExit(
            f"autograder {args[0]} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
    return done


def review(out: Path, email: str) -> float:
    """``review OUT`` started, the flagged student graded by hand in chromium, Ctrl-C (which
    brings OUT up to date); seconds taken."""
    from playwright.sync_api import sync_playwright

    start = time.perf_counter()
    port, token = free_port(), "instructor-loop"
    server = subprocess.Popen(
        [sys.executable, "-m", "autograder", "review", str(out), "--no-browser"]
        + ["--port", str(port)],
        cwd=ROOT,
        env={**os.environ, "JUPYTER_TOKEN": token},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        for line in server.stdout:  # the command prints the formgrader's URL when it answers
            if "/formgrader?token=" in line:
                break
        formgrader = f"http://127.0.0.1:{port}/formgrader?token={token}"
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=chromium, headless=True, args=CHROMIUM_ARGS
            )
            try:
                scores = {UNMASKED: "3", MASKED: "1"}
                grade_by_hand(browser, formgrader, CHAPTER, email, scores, {SDPA: COMMENT})
            finally:
                browser.close()
    finally:
        server.send_signal(signal.SIGINT)
        said = server.communicate(timeout=300)[0]
    if server.returncode != 0:
        raise SystemExit(f"review failed:\n{said[-3000:]}")
    return time.perf_counter() - start


def grades(out: Path) -> dict[str, float | None]:
    """E-mail -> the chapter's points in ``OUT/grades.csv`` (None: no result)."""
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        return {r["student"]: float(r[CHAPTER]) if r[CHAPTER] else None for r in csv.DictReader(f)}


def exported(path: Path, id_column: str, grade_column: str) -> dict[str, str]:
    """Id -> the grade cell of every row of a written file (Canvas's Points Possible row
    left out)."""
    data = path.read_bytes().decode("utf-8-sig")
    rows = list(csv.DictReader(io.StringIO(data)))
    column = next(c for c in rows[0] if c.startswith(grade_column))
    return {r[id_column]: r[column] for r in rows if r[id_column]}


def _number(text: str) -> float | None:
    return float(text) if text not in {"", "-"} else None


def check_export(name, path, id_column, grade_column, graded, warnings, problems) -> int:
    """The file at ``path`` against ``graded``; the number of students it carries."""
    found = exported(path, id_column, grade_column)
    for email, value in found.items():
        if email == "dropped@example.edu":
            if value not in {"", "-"}:
                problems.append(f"{name}: a grade {value!r} for the student who handed nothing in")
        elif email not in graded or _number(value) != graded[email]:
            problems.append(f"{name}: {email} has {value!r}, grades.csv {graded.get(email)}")
    for missing in ("dropped@example.edu", max(graded)):
        if missing not in warnings:
            problems.append(f"{name}: {missing} not reported")
    return sum(1 for e in found if e in graded)


def run(students: int, keep: Path | None = None) -> dict:
    """The loop on a class of ``students`` in a temporary folder (``keep``: in that one,
    which must not exist, left for reading)."""
    times: dict[str, float] = {}
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="instructor-loop-") as temporary:
        folder = Path(keep or temporary)
        expected = build_class(ROOT, students, folder / "inbox")
        rosters = write_rosters(folder / "rosters", students)
        subs, out = folder / "submissions", folder / "out"
        start = time.perf_counter()
        autograder("collect", folder / "inbox", "--chapter", CHAPTER, "--out", subs)
        times["collect"] = time.perf_counter() - start
        start = time.perf_counter()
        autograder("grade", subs, "--out", out)
        times["grade"] = time.perf_counter() - start
        graded = grades(out)
        for email, score in expected.items():
            if graded.get(email) != score:
                problems.append(f"grade: {email} got {graded.get(email)}, expected {score}")
        flagged = student_names(students)[2][2]
        times["review"] = review(out, flagged)
        graded = grades(out)
        expected[flagged] = 18.0  # 19 less the masked point withheld by hand
        if graded.get(flagged) != 18.0:
            problems.append(f"review: {flagged} has {graded.get(flagged)} after review, not 18")
        page = (out / "feedback" / flagged / f"{CHAPTER}.html").read_text(encoding="utf-8")
        if "Reviewed by your instructor" not in page or "1 of the 2 masked points" not in page:
            problems.append("review: the flagged student's feedback page lacks the review")
        carried = {}
        start = time.perf_counter()
        for lms, roster, id_column, column in (
            ("canvas", "canvas", "SIS Login ID", TITLE),
            ("moodle", "moodle", "Email address", f"Assignment: {TITLE}"),
            ("blackboard", "blackboard", "Username", TITLE),
            ("moodle", "moodle-worksheet", "Email address", "Grade"),
        ):
            to = folder / "export" / roster / rosters[roster].name
            done = autograder(
                "export",
                out,
                "--lms",
                lms,
                "--roster",
                rosters[roster],
                "--to",
                to,
                "--id-column",
                id_column,
                "--chapter",
                CHAPTER,
            )
            said = done.stdout + done.stderr
            carried[roster] = check_export(roster, to, id_column, column, graded, said, problems)
        times["export"] = time.perf_counter() - start
        carried["feedback zip"] = check_feedback_zip(
            folder / "export" / "moodle-worksheet", out, problems
        )
        ledger = json.loads((out / "graded.json").read_text(encoding="utf-8"))
        seconds = [e.get("seconds", 0) for s in ledger["submissions"].values() for e in s.values()]
    return {
        "students": students,
        "times": times,
        "graded": len(graded),
        "carried": carried,
        "problems": problems,
        "median_submission_s": sorted(seconds)[len(seconds) // 2],
    }


def check_feedback_zip(folder: Path, out: Path, problems: list[str]) -> int:
    """Each page in the Moodle feedback zip is its student's own page; how many there are."""
    (path,) = folder.glob("feedback_*.zip")
    sheet = exported(next(folder.glob("*.csv")), "Email address", "Grade")
    with open(next(folder.glob("*.csv")), newline="", encoding="utf-8-sig") as f:
        participant = {r["Identifier"].split()[-1]: r["Email address"] for r in csv.DictReader(f)}
    pages = 0
    with zipfile.ZipFile(path) as z:
        for member in z.namelist():
            number = member.split("/")[0].split("_")[1]
            email = participant[number]
            own = out / "feedback" / email / f"{CHAPTER}.html"
            if email not in sheet or not own.is_file() or z.read(member) != own.read_bytes():
                problems.append(f"feedback zip: {member} is not {email}'s page")
            pages += 1
    return pages


def markdown(result: dict) -> str:
    t = result["times"]
    lines = [
        "# The instructor's loop on one class",
        "",
        f"`python -m benchmarks.instructor_loop --students {result['students']}` on "
        f"{platform.machine()}, {os.cpu_count()} cores: a class of {result['students']} "
        f"through chapter 04, collected from a zip, graded (default workers), one flagged "
        "exercise reviewed by hand in nbgrader's formgrader in chromium, exported to "
        "Canvas, Moodle (gradebook import and the assignment's worksheet with its feedback "
        "zip) and Blackboard.",
        "",
        "| step | seconds |",
        "|---|---|",
        *(f"| {step} | {seconds:.1f} |" for step, seconds in t.items()),
        f"| whole loop | {sum(t.values()):.1f} |",
        "",
        f"Median grading time of a submission: {result['median_submission_s']:.1f} s. "
        f"Students graded: {result['graded']}; carried into each file: "
        + ", ".join(f"{k} {v}" for k, v in result["carried"].items())
        + " (each roster lacks one graded student and holds one who handed nothing in: "
        "both reported by every export).",
        "",
        "Lost or misattributed grades: "
        + ("none." if not result["problems"] else "\n\n- " + "\n- ".join(result["problems"])),
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS.name}")
    parser.add_argument("--keep", type=Path, help="work in this new folder and leave it")
    args = parser.parse_args(argv)
    result = run(args.students, args.keep)
    text = markdown(result)
    print(text)
    if args.write:
        RESULTS.write_text(text, encoding="utf-8")
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
