"""Command line: ``python -m autograder {release,check,grade,report} ...``."""

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
    p = sub.add_parser("release", help="regenerate notebooks/ from solutions/")
    p.add_argument("chapters", nargs="*", help="chapter ids (default: all)")
    sub.add_parser("check", help="fail when notebooks/ drifted from solutions/ or leaks solutions")
    p = sub.add_parser("grade", help="grade SUBMISSIONS/<student>/<chapter>/<chapter>.ipynb")
    p.add_argument("submissions", type=Path)
    p.add_argument("--out", type=Path, required=True, help="folder for grades.csv and feedback/")
    p.add_argument(
        "--chapter", action="append", dest="chapters", help="grade only this chapter (repeatable)"
    )
    p.add_argument(
        "--workers",
        type=_positive_int,
        default=None,
        metavar="N",
        help="grade N submissions at once, each kernel on one thread; 1 grades them one "
        "after another in this process (default: one per core)",
    )
    p = sub.add_parser(
        "report",
        help="per exercise, the class's scores and known mistakes: OUT/report/index.html and CSV",
    )
    p.add_argument("out", type=Path, help="the --out folder of a `grade` run")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "report":
            return _report(args)
        root = find_root(args.course_dir)
        if args.command == "release":
            from autograder.release import release

            for path in release(root, args.chapters):
                print(f"released {path.relative_to(root)}")
            return 0
        if args.command == "check":
            from autograder.release import check

            problems = check(root)
            for problem in problems:
                print(f"error: {problem}", file=sys.stderr)
            if problems:
                return 1
            print("notebooks/ is in sync with solutions/ and holds no solution or hidden test")
            return 0
        from autograder.grade import grade

        report = grade(root, args.submissions, args.out, args.chapters, workers=args.workers)
        for (student, chapter), (points, max_points) in sorted(report.totals().items()):
            print(f"{student:20s} {chapter:28s} {points:g} / {max_points:g}")
        for problem in report.problems:
            print(f"warning: {problem}", file=sys.stderr)
        print(
            f"wrote {args.out / 'grades.csv'} and {args.out / 'feedback'}/ in "
            f"{report.seconds:.0f} s ({report.workers} worker{'s' if report.workers > 1 else ''})"
        )
        print(f"class report: {args.out / 'report' / 'index.html'} (and CSV beside it)")
        return 0
    except CourseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


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
    print(f"wrote {report.html} and summary.csv, scores.csv, mistakes.csv beside it")
    return 0
