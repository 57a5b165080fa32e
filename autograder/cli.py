"""Command line: ``python -m autograder {release,record,kit,check,release-solutions,collect,
grade,report,validate,export} ...`` (``release`` also records the reference's answers to the
visible tests, ``record`` does that alone; ``kit`` builds what students install; ``validate``
is the check of a notebook before it is handed in, which the kit also has as
``python -m attention_course.validate``; ``export`` writes the grades into the file Canvas,
Moodle or Blackboard imports).

``review OUT`` opens a graded class in nbgrader's formgrader (JupyterLab) to grade by hand,
then brings OUT's grades, feedback pages and report up to date with what was graded there
(``review OUT --apply`` does only that).

Every path argument may be relative (to the working directory, which may be the course's
top folder or any folder below it) or absolute."""

import argparse
import sys
from pathlib import Path

from autograder.chapters import CourseError, find_root


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, not {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m autograder",
        description="Release, check and grade the course's notebooks (nbgrader underneath), "
        "and report on a graded class.",
    )
    parser.add_argument(
        "--course-dir",
        type=Path,
        default=None,
        help="the course's top folder (default: found from the working directory)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "release",
        help="regenerate notebooks/ from solutions/, and record the reference's answers to "
        "their visible tests for the student kit",
    )
    p.add_argument("chapters", nargs="*", help="chapter ids (default: all)")
    p.add_argument(
        "--no-record",
        action="store_true",
        help="only regenerate notebooks/ (the recorded values stay as they are)",
    )
    p = sub.add_parser(
        "kit",
        help="build the student kit: the student package's wheel, the notebooks, one zip",
    )
    p.add_argument("--out", type=Path, default=Path("_build/kit"), help="default: _build/kit")
    p.add_argument(
        "--through",
        default=None,
        help="the last chapter the kit holds, the last one open to the class (needed; 'all' "
        "for a self-study kit of every chapter, which holds the earlier chapters' answers); "
        "later chapters' notebooks, and the earlier chapters' code handed out from this one "
        "on, are left out",
    )
    p = sub.add_parser(
        "record",
        help="run the solution notebooks and record the reference's answers to their "
        "visible tests (attention_course/data/recorded/), as release does",
    )
    p.add_argument("chapters", nargs="*", help="chapter ids (default: all)")
    sub.add_parser("check", help="fail when notebooks/ drifted from solutions/ or leaks solutions")
    p = sub.add_parser(
        "release-solutions",
        help="write chapters' worked solutions without the hidden tests, for the students "
        "once the class is graded",
    )
    p.add_argument("chapters", nargs="+", help="chapter ids")
    p.add_argument(
        "--out",
        type=Path,
        default=Path("released-solutions"),
        help="where to write <chapter>/<chapter>-solutions.ipynb (default: released-solutions)",
    )
    _collect_arguments(
        sub.add_parser(
            "collect",
            help="import an LMS's export (a folder or .zip of notebooks) into "
            "SUBMISSIONS/<student>/<chapter>/<chapter>.ipynb",
        )
    )
    p = sub.add_parser("grade", help="grade SUBMISSIONS/<student>/<chapter>/<chapter>.ipynb")
    _grade_arguments(p)
    _grading_run_arguments(p)
    _review_arguments(
        sub.add_parser(
            "review",
            help="grade OUT by hand in nbgrader's formgrader (JupyterLab), then bring its "
            "grades, feedback and report up to date; --apply: only the latter",
        )
    )
    p = sub.add_parser(
        "report",
        help="per exercise, the class's scores and known mistakes: OUT/report/index.html and CSV",
    )
    p.add_argument("out", type=Path, help="the --out folder of a `grade` run")
    _export_arguments(
        sub.add_parser(
            "export",
            help="write OUT's grades into the file Canvas, Moodle or Blackboard imports, "
            "from its export of the class (and Moodle's feedback zip)",
        )
    )
    p = sub.add_parser(
        "validate",
        help="a student's check before handing in: run NOTEBOOK as `grade` will and say what "
        "is not done, which visible tests fail, what is put back or flagged",
    )
    p.add_argument("notebook", type=Path, help="the notebook to hand in (.ipynb)")
    p.add_argument(
        "--chapter", default=None, help="the chapter it answers (default: from its name or cells)"
    )
    return parser


def _collect_arguments(p: argparse.ArgumentParser) -> None:
    """``collect``'s arguments: the LMS's export, the chapter, where to put it."""
    p.add_argument("inbox", type=Path, help="a folder (searched with the zips in it) or a .zip")
    p.add_argument("--chapter", required=True, help="the chapter these notebooks answer")
    p.add_argument("--out", type=Path, required=True, help="the SUBMISSIONS folder to fill")
    p.add_argument(
        "--pattern",
        default=None,
        metavar="REGEX",
        help="find the student id with this regular expression, which has a named group "
        "(?P<student>...), searched in each file's path relative to INBOX (default: Moodle, "
        "Canvas, Blackboard names, then <studentid>.ipynb or <studentid>_<anything>.ipynb)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="replace a student's notebook already in SUBMISSIONS that differs",
    )


def _export_arguments(p: argparse.ArgumentParser) -> None:
    """``export``'s arguments: OUT, the LMS and its roster, where to write, which columns."""
    p.add_argument("out", type=Path, help="the --out folder of a `grade` run")
    p.add_argument("--lms", required=True, choices=("canvas", "moodle", "blackboard"))
    p.add_argument(
        "--roster",
        type=Path,
        required=True,
        metavar="FILE",
        help="the LMS's export of the class: Canvas's gradebook export; Moodle's gradebook "
        "export or an assignment's grading worksheet; Blackboard's Work Offline download",
    )
    p.add_argument(
        "--to",
        type=Path,
        default=None,
        metavar="PATH",
        help="the file to write (default: OUT/export/<lms>/<the roster's name>)",
    )
    p.add_argument(
        "--column",
        action="append",
        default=[],
        metavar="CHAPTER=COLUMN NAME",
        help="put CHAPTER's points (its id or number) in this column of the roster, or in a "
        "new column of that name (repeatable; default: the column whose name holds the "
        "chapter's id or starts with its number)",
    )
    p.add_argument(
        "--chapter",
        action="append",
        dest="chapters",
        help="export only this chapter (repeatable); a Moodle grading worksheet holds one",
    )
    p.add_argument(
        "--id-column",
        default=None,
        metavar="NAME",
        help="the roster's column that holds OUT's student ids (default: Canvas's ID, "
        "Blackboard's Username, Moodle's participant id, or ID number, Username, Email "
        "address: the one that holds the most graded students)",
    )


def _grade_arguments(p: argparse.ArgumentParser) -> None:
    """``grade``'s arguments: what to grade, and where to."""
    p.add_argument("submissions", type=Path)
    p.add_argument(
        "--out",
        type=Path,
        required=True,
        help="folder for grades.csv, feedback/ and the gradebook; grading into it again "
        "keeps what is there",
    )
    p.add_argument(
        "--regrade",
        action="store_true",
        help="grade again the submissions already graded in OUT and unchanged since",
    )
    p.add_argument(
        "--chapter", action="append", dest="chapters", help="grade only this chapter (repeatable)"
    )


def _grading_run_arguments(p: argparse.ArgumentParser) -> None:
    """``grade``'s arguments: how the kernels run, where the gradebook lives."""
    p.add_argument(
        "--workers",
        type=_positive_int,
        default=None,
        metavar="N",
        help="grade N submissions at once, each kernel on one thread; 1 grades them one "
        "after another in this process (default: one per core)",
    )
    p.add_argument(
        "--cell-timeout",
        type=_positive_int,
        default=None,
        metavar="SECONDS",
        help="interrupt a cell that runs longer (default: 180); the next cells still run",
    )
    p.add_argument(
        "--no-sandbox",
        dest="sandbox",
        action="store_false",
        help="run the kernels without bubblewrap's sandbox and its limits: UNSAFE, student "
        "code then runs with your permissions (only for a machine without bwrap that holds "
        "nothing else)",
    )
    p.add_argument(
        "--db",
        default=None,
        metavar="URL",
        help="the gradebook: a PostgreSQL URL (postgresql://USER:PASSWORD@HOST/DATABASE, or "
        "postgresql://USER@/DATABASE?host=/SOCKET/FOLDER) or sqlite:///PATH (default: "
        "OUT/gradebook.db)",
    )
    p.add_argument(
        "--scheduler",
        default=None,
        metavar="ADDRESS",
        help="grade on the workers of a running Dask cluster (e.g. tcp://10.0.0.5:8786) "
        "instead of local processes; the course, SUBMISSIONS and OUT must be at the same "
        "paths on every worker (see the instructor guide)",
    )


def _review_arguments(p: argparse.ArgumentParser) -> None:
    """``review``'s arguments: OUT, its gradebook, and the server's port."""
    p.add_argument("out", type=Path, help="the --out folder of a `grade` run")
    p.add_argument(
        "--apply",
        action="store_true",
        help="start no formgrader: bring OUT's grades, feedback pages and report up to date "
        "with what was graded by hand in its gradebook",
    )
    p.add_argument(
        "--db",
        default=None,
        metavar="URL",
        help="the gradebook OUT was graded into, when graded.json cannot say it whole (a "
        "PostgreSQL password is never kept in OUT)",
    )
    p.add_argument(
        "--port",
        type=_positive_int,
        default=None,
        metavar="N",
        help="serve JupyterLab on this port of 127.0.0.1 (default: a free one)",
    )
    p.add_argument(
        "--no-browser",
        dest="browser",
        action="store_false",
        help="print the formgrader's address without opening it in a browser",
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    command = {
        "release": _release,
        "check": _check,
        "collect": _collect,
        "grade": _grade,
        "report": _report,
        "review": _review,
        "export": _export,
        "validate": _validate,
        "release-solutions": _release_solutions,
        "record": _record,
        "kit": _kit,
    }[args.command]
    try:
        return command(args)
    except CourseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def _release(args) -> int:
    """``release [CHAPTER ...]``: solutions/ -> notebooks/."""
    root = find_root(args.course_dir)
    from autograder.release import release

    for path in release(root, args.chapters):
        print(f"released {path.relative_to(root)}")
    return 0 if args.no_record else _record(args)


def _kit(args) -> int:
    """``kit --through CHAPTER|all [--out DIR]``: what students install (autograder/kit.py);
    no silent kit of every chapter: ``--through`` is needed."""
    from autograder.kit import build, chapter_through

    through = chapter_through(args.through)
    for name, path in build(args.out, through).items():
        size = f" ({path.stat().st_size / 1e6:.2f} MB)" if path.is_file() else ""
        print(f"{name}: {path}{size}")
    return 0


def _record(args) -> int:
    """``record [CHAPTER ...]``: the reference's answers to the visible tests, for the kit."""
    root = find_root(args.course_dir)
    from autograder.record import record

    for path in record(root, args.chapters):
        print(f"recorded {path.name}: the reference's answers to its visible tests")
    return 0


def _release_solutions(args) -> int:
    """``release-solutions CHAPTER ... [--out DIR]``: the worked solutions for students."""
    root = find_root(args.course_dir)
    from autograder.solutions_out import release_solutions

    for path in release_solutions(root, args.chapters, args.out):
        print(f"wrote {path}: the solutions and visible tests, no hidden test")
    return 0


def _check(args) -> int:
    """``check``: 1 when notebooks/ drifted from solutions/ or leaks one."""
    root = find_root(args.course_dir)
    from autograder.release import check

    problems = check(root)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if problems:
        return 1
    print("notebooks/ is in sync with solutions/ and holds no solution or hidden test")
    return 0


def _grade(args) -> int:
    """``grade SUBMISSIONS --out OUT``: the grades, then where they were written."""
    root = find_root(args.course_dir)
    from autograder.grade import grade
    from autograder.outfolder import CELLS_CSV, GRADES_CSV

    if not args.sandbox:
        print(
            "warning: --no-sandbox: the submissions' code runs with your permissions, "
            "network and files, without memory or CPU limits",
            file=sys.stderr,
        )
    report = grade(
        root,
        args.submissions,
        args.out,
        chapters=args.chapters,
        workers=args.workers,
        regrade=args.regrade,
        sandbox=args.sandbox,
        cell_timeout=args.cell_timeout,
        db_url=args.db,
        scheduler=args.scheduler,
    )
    for (student, chapter), (points, max_points) in sorted(report.totals().items()):
        print(f"{student:20s} {chapter:28s} {points:g} / {max_points:g}")
    for problem in report.problems:
        print(f"warning: {problem}", file=sys.stderr)
    for fault in report.environment:
        print(f"error: {fault}", file=sys.stderr)
    where = (
        f"on the Dask cluster at {args.scheduler}"
        if args.scheduler
        else f"({report.workers} worker{'s' if report.workers > 1 else ''})"
    )
    print(
        f"graded {report.graded} submission{'s' if report.graded != 1 else ''}"
        f" ({report.up_to_date} already graded and unchanged) in {report.seconds:.0f} s "
        f"{where}"
    )
    print(
        f"wrote {args.out / GRADES_CSV} (a column per chapter), {args.out / CELLS_CSV} "
        f"(a row per graded cell) and {args.out / 'feedback'}/"
    )
    print(f"class report: {args.out / 'report' / 'index.html'} (and CSV beside it)")
    return 1 if report.environment else 0


def _report(args) -> int:
    """``report OUT``: needs only OUT; the course (when found) says which exercise a test
    cell belongs to, else the graded notebooks do."""
    from autograder.report import write_report

    try:
        root = find_root(args.course_dir)
    except CourseError:
        if args.course_dir is not None:
            raise
        root = None
    report = write_report(args.out, root)
    for ch in report.chapters:
        named = sum(len(m.students) for m in ch.mistakes)
        print(
            f"{ch.chapter:28s} {ch.students} submission{'s' if ch.students != 1 else ''}, "
            f"{len(ch.cells)} test cells, {len(ch.mistakes)} known mistake"
            f"{'s' if len(ch.mistakes) != 1 else ''} named {named} time{'s' if named != 1 else ''}"
        )
    for problem in report.problems:
        print(f"warning: {problem}", file=sys.stderr)
    print(f"wrote {report.html} and summary.csv, scores.csv, mistakes.csv, times.csv beside it")
    return 0


def _collect(args) -> int:
    """``collect INBOX --chapter CH --out SUBMISSIONS``: needs no course folder. 1 when
    notebooks of different submissions claimed one student id (none of them placed)."""
    from autograder.collect import collect

    report = collect(args.inbox, args.chapter, args.out, args.pattern, args.force)
    for student, where in report.placed:
        print(f"placed {student:20s} <- {where}")
    for problem in report.problems:
        print(f"warning: {problem}", file=sys.stderr)
    print(
        f"placed {len(report.placed)} notebook{'s' if len(report.placed) != 1 else ''} in "
        f"{args.out}/<student>/{args.chapter}/ ({len(report.unchanged)} already there and "
        f"unchanged, {len(report.problems)} warning{'s' if len(report.problems) != 1 else ''})"
    )
    # a conflict leaves a student without a notebook until the instructor places one
    return 1 if report.conflicts else 0


def _export(args) -> int:
    """``export OUT --lms LMS --roster FILE``: needs no course folder. 0 when the file was
    written, whatever was reported."""
    from autograder.export import export

    report = export(
        args.out, args.lms, args.roster, args.to, args.column, args.chapters, args.id_column
    )
    for c in report.columns:
        print(f"{c.chapter:28s} -> {c.name!r} ({c.how})")
    matched = len(report.matched)
    print(f"students matched on the roster's {report.id_column!r} column: {matched}")
    for line in report.no_column + report.no_result + report.not_in_roster + report.problems:
        print(f"warning: {line}", file=sys.stderr)
    for note in report.notes:
        print(f"note: {note}")
    for path in report.written:
        print(f"wrote {path}")
    others = len(report.problems)
    print(
        f"exported {report.filled} grade{'s' if report.filled != 1 else ''} of {matched} "
        f"student{'s' if matched != 1 else ''} to {report.lms}; "
        f"{len(report.no_result)} roster student(s) without a result, "
        f"{len(report.not_in_roster)} graded student(s) not in the roster, "
        f"{len(report.no_column)} chapter(s) without a column, {others} other warning(s)"
    )
    return 0


def _validate(args) -> int:
    """``validate NOTEBOOK [--chapter CH]``: 0 when it is ready to hand in, 1 when something
    needs the student's attention."""
    from autograder.validate import text, validate

    found = validate(args.notebook, args.chapter, args.course_dir)
    print(text(found))
    return 1 if found.needs_attention else 0


def _review(args) -> int:
    """``review OUT``: the formgrader until Ctrl-C, then OUT brought up to date with what was
    graded by hand; ``review OUT --apply``: only the latter."""
    root = find_root(args.course_dir)
    from autograder.formgrader import Server, gradebook_url
    from autograder.grade import apply_by_hand
    from autograder.outfolder import BY_HAND_CSV, CELLS_CSV, GRADES_CSV, Out, read_by_hand

    out = Out(args.out.resolve())
    url = gradebook_url(out, args.db)
    if not args.apply:
        with Server(out, url, args.port) as server:
            print(f"nbgrader's formgrader on {out.work}: {server.formgrader}")
            print(f"JupyterLab (menu Nbgrader > Formgrader): {server.lab}")
            print("grade by hand there, then press Ctrl-C here to stop it and update OUT")
            sys.stdout.flush()
            if args.browser:
                import webbrowser

                webbrowser.open(server.formgrader)
            server.wait()
        print("the formgrader stopped: bringing OUT up to date with what was graded by hand")
    report = apply_by_hand(root, out.folder, url)
    for problem in report.problems:
        print(f"warning: {problem}", file=sys.stderr)
    graded = read_by_hand(out / BY_HAND_CSV)
    scored = sum(1 for g in graded if g.points is not None)
    commented = sum(1 for g in graded if g.comment)
    submissions = len({(g.student, g.chapter) for g in graded})
    print(
        f"graded by hand: {scored} score{'s' if scored != 1 else ''} and {commented} "
        f"comment{'s' if commented != 1 else ''} in {submissions} submission"
        f"{'s' if submissions != 1 else ''} ({out / BY_HAND_CSV})"
    )
    print(
        f"wrote {out / GRADES_CSV}, {out / CELLS_CSV}, {out / 'feedback'}/ and "
        f"{out / 'report' / 'index.html'}"
    )
    return 0
