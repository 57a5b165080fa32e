"""A whole course graded: a class through every chapter, by the course's grader and by
plain nbgrader (issue 29).

    .venv/bin/python -m benchmarks.course_grading [--students 30] [--chapter CH ...]
        [--plain-students N] [--switches [CH ...]] [--measure-class 100] [--write]

The class: ``--students`` students, each handing in every chapter; a chapter's
submissions are its solution and each of its catalogued mistakes in turn
(``benchmarks/grading_throughput.py``'s ``make_class``). For each chapter, in course order:

- the course's grader: ``python -m autograder grade SUBMISSIONS --out OUT --chapter CH``
  with its default workers (one per core, one thread per kernel), the experiment cells
  skipped, feedback pages and the class report included. The chapter's key and solution
  check, paid once per chapter and grading environment whatever the class, are made first
  on a class of one (``warm_up_s``). A submission's job takes ``j`` seconds in its worker
  (``OUT/graded.json``), so ``b = j / workers`` per submission. The run's fixed cost ``a``
  (the grader's start, the workers' and their fork servers' start, the first kernels, the
  results and report written, the workers' end) is measured on a small class of
  ``SMALL_CLASS`` a worker, graded into an OUT of its own: ``a`` = its wall time less its
  submissions' ``b``. A class of n takes ``a + b n``: the model is checked against the
  measured class (predicted ``a + b N`` against the wall time) and gives the figure for a
  class of 100; with ``--measure-class 100`` a class of 100 is also graded, chapter by
  chapter into an OUT of its own, and its wall time set beside the model's;
- plain ``nbgrader autograde CH`` on the same submissions (``--plain-students`` of them,
  default all), in grading mode with nbgrader's defaults: one submission after another,
  every cell run, PyTorch's default threads, no feedback pages;
- the scores: each student's chapter total from the course's ``grades.csv`` against plain
  nbgrader's gradebook: with the experiments skipped, the same;
- the graded test cells' own time (the kernel's, from each autograded notebook's cell
  timing) and the overhead per submission beyond it: the job's time less that.

With ``--switches`` (the chapters named, or every chapter run), each of those chapters'
class is graded again with each of the grader's speed-ups turned off in turn
(``autograder/speedups.py``): each one's share of the time, and the scores the same.

Run it on a quiet machine (on 2026-11-28's: about 20 minutes for 30 students, 10 more for a
measured class of 100, 4 more for each chapter with its switches); ``--write`` writes
``benchmarks/course_grading.md`` and ``.json``.
"""

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date, datetime
from pathlib import Path

from autograder import speedups
from autograder.chapters import ALL_CHAPTERS
from autograder.nbgrader_settings import COURSE_ID
from autograder.outfolder import LEDGER, Ledger, Out
from benchmarks.grading_throughput import make_class, plain_nbgrader
from benchmarks.run import ROOT
from benchmarks.tables import markdown_table

RESULTS = ROOT / "benchmarks" / "course_grading"
ALL_ON = "nothing"  # switch_runs' run with every speed-up on
CLASS_OF = 100  # the class the instructor guide gives the figure for
SMALL_CLASS = 2  # submissions a worker of the small class that measures a run's fixed cost


def ours(submissions: Path, out: Path, chapter: str, without=()) -> tuple[float, float]:
    """(wall seconds of ``grade --chapter CH``, the seconds of its solution check: 0 when
    a pass was cached); ``without``: the speed-ups turned off (``autograder/speedups.py``)."""
    env = {**os.environ, speedups.WITHOUT: ",".join(without)}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", str(submissions), "--out", str(out)]
        + ["--chapter", chapter],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    seconds = time.perf_counter() - start
    check = re.search(
        r"solution check of \S+: .* graded as a submission in ([\d.]+) s", done.stdout
    )
    return seconds, float(check.group(1)) if check else 0.0


def graded_cells_seconds(out: Out, student: str, chapter: str) -> float:
    """The kernel's time in the graded test cells of one autograded notebook."""
    nb = json.loads(out.autograded(student, chapter).read_text(encoding="utf-8"))
    total = 0.0
    for cell in nb["cells"]:
        grading = cell.get("metadata", {}).get("nbgrader", {})
        timing = cell.get("metadata", {}).get("execution", {})
        if grading.get("grade") and not grading.get("solution") and "shell.execute_reply" in timing:
            start = _time(timing.get("iopub.status.busy") or timing["iopub.execute_input"])
            total += _time(timing["shell.execute_reply"]) - start
    return total


def _time(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def our_totals(out: Path, chapter: str) -> dict[str, float]:
    import csv

    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        return {r["student"]: float(r[chapter] or 0) for r in csv.DictReader(f)}


def plain_totals(work: Path, chapter: str) -> dict[str, float]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{work}/gradebook.db", COURSE_ID) as gb:
        return {
            s.student.id: float(s.score)
            for s in gb.find_assignment(chapter).submissions
            if s.student is not None
        }


def switch_runs(chapter: str, subs: Path, folder: Path) -> dict[str, dict]:
    """The class graded again into a fresh OUT with all speed-ups on (``ALL_ON``: the run to
    compare with, its OUT as empty as theirs: the class's own OUT holds the chapters before,
    whose report every run writes again) and with each speed-up turned off in turn:
    {switch: {"wall_s", "job_s", "same_scores"}} (scores against the run with all on,
    ``folder / "out"``)."""
    runs = {}
    for name in (ALL_ON, *speedups.SWITCHES):
        out = folder / f"without-{name}-{chapter}"
        wall = ours(subs, out, chapter, without=[name] if name != ALL_ON else [])[0]
        ledger = Ledger.read(out / LEDGER).submissions
        jobs = [ledger[s][chapter]["seconds"] for s in ledger if chapter in ledger[s]]
        same = our_totals(out, chapter) == our_totals(folder / "out", chapter)
        runs[name] = {"wall_s": wall, "job_s": statistics.fmean(jobs), "same_scores": same}
    return runs


def chapter_run(
    chapter: str, folder: Path, students: int, plain_students: int, switches: bool = False
) -> dict:
    subs, out = folder / "class", folder / "out"
    # once per chapter and grading environment, not per class: the key and the solution
    # check, made here on a class of one, then cached
    make_class(chapter, 1, folder / f"warm-{chapter}")
    warm = ours(folder / f"warm-{chapter}", folder / f"warm-out-{chapter}", chapter)[0]
    wall, check = ours(subs, out, chapter)
    ledger = Ledger.read(out / LEDGER).submissions
    jobs = [ledger[s][chapter]["seconds"] for s in ledger if chapter in ledger[s]]
    cells = [graded_cells_seconds(Out(out), s, chapter) for s in ledger if chapter in ledger[s]]
    workers = os.cpu_count() or 1
    per = statistics.fmean(jobs) / workers
    # the fixed cost: a small class graded into an OUT of its own, as the class's (the
    # chapters before graded there too), less its submissions' share; the solution check,
    # when this run made it (not cached), as it is in the class's run
    small = SMALL_CLASS * workers
    make_class(chapter, small, folder / f"small-class-{chapter}")
    small_wall = ours(folder / f"small-class-{chapter}", folder / "small-out", chapter)[0]
    fixed = small_wall - small * per + check
    plain_subs = subs
    if plain_students < students:
        plain_subs = folder / f"plain-class-{chapter}"
        make_class(chapter, plain_students, plain_subs)
    plain = plain_nbgrader(chapter, plain_subs, folder / f"plain-{chapter}")
    mine, theirs = our_totals(out, chapter), plain_totals(folder / f"plain-{chapter}", chapter)
    differ = sorted(s for s in theirs if mine.get(s) != theirs[s])
    result = {
        "chapter": chapter,
        "students": students,
        "wall_s": wall,
        "warm_up_s": warm,
        "small_class": small,
        "small_class_s": small_wall,
        "fixed_s": fixed,
        "job_s": statistics.fmean(jobs),
        "graded_cells_s": statistics.fmean(cells),
        "per_submission_s": per,
        "predicted_s": fixed + per * students,
        "plain_students": plain_students,
        "plain_s": plain,
        "scores_differ": {s: (mine.get(s), theirs[s]) for s in differ},
    }
    if switches:
        result["without"] = switch_runs(chapter, subs, folder)
    print(json.dumps(result), flush=True)
    return result


def measured_class_run(chapter: str, folder: Path, class_of: int) -> dict:
    """A class of ``class_of`` graded (``class-measured``, made by ``main``) into the OUT
    ``out-measured``, which holds the chapters graded before: {"students", "wall_s",
    "same_scores"}, the scores against those of the class's students of the same names
    (each name has the same notebook in both classes: ``make_class``)."""
    out = folder / "out-measured"
    wall = ours(folder / "class-measured", out, chapter)[0]
    mine, before = our_totals(out, chapter), our_totals(folder / "out", chapter)
    same = len(mine) == class_of and all(mine[s] == before[s] for s in before if s in mine)
    result = {"students": class_of, "wall_s": wall, "same_scores": same}
    print(json.dumps({"chapter": chapter, "measured_class": result}), flush=True)
    return result


def markdown(results: list[dict], command: str) -> str:
    n = results[0]["students"]
    rows, ours_total, plain_total, predicted_100 = [], 0.0, 0.0, 0.0
    measured = all("measured_class" in r for r in results)
    for r in results:
        rate, plain_rate = 60 * n / r["wall_s"], 60 * r["plain_students"] / r["plain_s"]
        ours_total += r["wall_s"]
        plain_total += r["plain_s"] * n / r["plain_students"]
        predicted_100 += r["fixed_s"] + r["per_submission_s"] * CLASS_OF
        row = [
            r["chapter"],
            f"{r['wall_s']:.0f}",
            f"{rate:.1f}",
            f"{plain_rate:.1f}",
            f"**{rate / plain_rate:.2f}x**",
            f"{r['job_s']:.1f}",
            f"{r['graded_cells_s']:.2f}",
            f"{r['job_s'] - r['graded_cells_s']:.1f}",
            f"{r['fixed_s']:.1f}",
            f"{r['predicted_s']:.0f} ({100 * (r['predicted_s'] / r['wall_s'] - 1):+.0f} %)",
            "same" if not r["scores_differ"] else f"{len(r['scores_differ'])} differ",
        ]
        if measured:
            m = r["measured_class"]
            model = r["fixed_s"] + r["per_submission_s"] * m["students"]
            row.append(
                f"{m['wall_s']:.0f} (model {model:.0f}, {100 * (model / m['wall_s'] - 1):+.0f} %)"
                + ("" if m["same_scores"] else ", scores differ")
            )
        rows.append(row)
    worst = min((60 * n / r["wall_s"]) / (60 * r["plain_students"] / r["plain_s"]) for r in results)
    lines = [
        "# A whole course graded",
        "",
        f"A class of {n} through every chapter on main ({len(results)} chapters, {n * len(results)} "
        f"submissions: each chapter's solution and catalogued mistakes in turn), measured "
        f"{date.today()} on {os.cpu_count()} cores, {platform.machine()}, Python "
        f"{platform.python_version()}, with `{command}`. The course's grader: "
        "`python -m autograder grade --chapter CH`, default workers, experiment cells skipped, "
        "feedback pages and report; plain nbgrader: `nbgrader autograde CH` on the same "
        f"submissions ({results[0]['plain_students']} a chapter), grading mode, every cell run. "
        "A job is one submission in its worker; the graded cells' time is the kernel's in the "
        "graded test cells; the overhead is the job's time beyond it (the kernel's start, "
        "PyTorch's import, the exercises' and other cells, nbgrader's steps, the feedback "
        "page). The run's fixed cost: a small class's run (two submissions a worker, into "
        "an OUT of its own) less its submissions' share, the job's time / workers each "
        "(the grader's start, the workers' and fork servers' start, the results and report "
        "written). Predicted: that fixed cost + the class x the job's time / workers.",
        "",
        markdown_table(
            [
                "chapter",
                "ours, s",
                "ours, submissions / min",
                "plain nbgrader, submissions / min",
                "speed-up",
                "job, s",
                "graded cells, s",
                "overhead per submission, s",
                "fixed cost of a run, s",
                "predicted, s (vs measured)",
                "scores vs plain nbgrader",
                *(
                    [f"a class of {results[0]['measured_class']['students']}, s"]
                    if measured
                    else []
                ),
            ],
            rows,
        ),
        "",
        f"The whole course for {n} students: {ours_total:.0f} s ({ours_total / 60:.1f} min) "
        f"with the course's grader, {plain_total:.0f} s ({plain_total / 60:.1f} min) with plain "
        f"nbgrader{' (scaled from its students)' if results[0]['plain_students'] < n else ''}; "
        f"the lowest speed-up of a chapter {worst:.2f}x. A class of {CLASS_OF}, from the "
        f"model: **{predicted_100:.0f} s ({predicted_100 / 60:.1f} min)**.",
        "",
    ]
    if measured:
        m = [r["measured_class"] for r in results]
        total = sum(x["wall_s"] for x in m)
        warm = sum(r.get("warm_up_s", 0.0) for r in results)
        lines[-1:-1] = [
            "",
            f"A class of {m[0]['students']} graded, chapter by chapter, into an OUT of its own "
            f"(each chapter's key and solution check already made, which a grading "
            f"environment makes once: the warm-ups on a class of one took {warm:.0f} s in "
            f"all): **{total:.0f} s ({total / 60:.1f} min)**; every student's score the "
            f"same as that of the class "
            f"of {n}'s student of the same name: "
            + ("yes." if all(x["same_scores"] for x in m) else "**no**, see the table."),
        ]
    if any("without" in r for r in results):
        lines += switches_markdown([r for r in results if "without" in r])
    return "\n".join(lines)


def switches_markdown(results: list[dict]) -> list[str]:
    """Each speed-up's share: the class graded again with it turned off."""
    names = list(speedups.SWITCHES)
    rows = []
    for r in results:
        base = r["without"].get(ALL_ON, r)  # runs before it had none: the class's own run
        row = [r["chapter"], f"{base['wall_s']:.0f} ({base['job_s']:.2f})"]
        for name in names:
            off = r["without"][name]
            share = 1 - base["wall_s"] / off["wall_s"]
            row.append(
                f"{off['wall_s']:.0f} ({off['job_s']:.2f}): {100 * share:+.0f} %"
                + ("" if off["same_scores"] else ", scores differ")
            )
        rows.append(row)
    return [
        "## Each speed-up's share",
        "",
        "The same class graded again into a fresh folder with every speed-up on, and with "
        f"one speed-up turned off (`{speedups.WITHOUT}=NAME`, `autograder/speedups.py`): wall "
        "seconds (a job's mean seconds in brackets), and the share of that run the speed-up "
        "saves. Scores are compared with the run with every speed-up on.",
        "",
        *(f"- `{name}`: {what}." for name, what in speedups.SWITCHES.items()),
        "",
        markdown_table(["chapter", "all on, s (job, s)", *(f"without {n}" for n in names)], rows),
        "",
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--plain-students", type=int, default=None)
    parser.add_argument("--chapter", action="append", dest="chapters", choices=ALL_CHAPTERS)
    parser.add_argument(
        "--switches",
        nargs="*",
        choices=ALL_CHAPTERS,
        metavar="CH",
        help="grade these chapters' classes (every chapter run, when none is named) again "
        "with each speed-up turned off in turn",
    )
    parser.add_argument(
        "--measure-class",
        type=int,
        default=None,
        metavar="N",
        help="also grade a class of N, chapter by chapter, and set its time beside the model's",
    )
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args(argv)
    chapters = args.chapters or list(ALL_CHAPTERS)
    plain_students = min(args.plain_students or args.students, args.students)
    switched = set() if args.switches is None else set(args.switches or chapters)
    results = []
    with tempfile.TemporaryDirectory(prefix="course-grading-") as folder:
        folder = Path(folder)
        for chapter in chapters:
            make_class(chapter, args.students, folder / "class")
        for chapter in chapters:
            results.append(
                chapter_run(chapter, folder, args.students, plain_students, chapter in switched)
            )
        if args.measure_class:
            for chapter in chapters:
                make_class(chapter, args.measure_class, folder / "class-measured")
            for r in results:
                r["measured_class"] = measured_class_run(r["chapter"], folder, args.measure_class)
    command = "python -m benchmarks.course_grading " + " ".join(argv or sys.argv[1:])
    text = markdown(results, command.strip())
    print(text)
    if args.write:
        RESULTS.with_suffix(".md").write_text(text, encoding="utf-8")
        RESULTS.with_suffix(".json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
