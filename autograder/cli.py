"""Command line: ``python -m autograder {release,check,grade} ...``."""

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
        description="Release, check and grade the course's notebooks (nbgrader underneath).",
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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
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
        return 0
    except CourseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
