"""The grader's speed-ups, each a switch, so that the benchmark can measure each one's share.

Every switch is on when a class is graded; none changes a score, a feedback page's content
or what the sandbox allows (``tests/test_grading_switches.py``). The benchmark
``benchmarks/grading_switches.py`` grades the same class with all of them on and with each
one off in turn, by naming it in the environment variable ``COURSE_GRADER_WITHOUT``
(comma-separated); nothing else reads that variable.
"""

import os

WITHOUT = "COURSE_GRADER_WITHOUT"

SWITCHES = {
    "fork-server": (
        "each submission's kernel is forked, in the sandbox, from a process that has imported "
        "PyTorch and IPython once per worker, instead of starting a new Python that imports "
        "them (autograder/fork_server.py)"
    ),
    "torch-imports-ahead": (
        "the fork server also imports what PyTorch imports only on first use (torch._dynamo, "
        "with torch.fx and SymPy, about 2 s), which every chapter's graded cells reach "
        "(autograder/fork_server.py)"
    ),
    "caches-ahead": (
        "the fork server also fills, before it forks, what every kernel computes for itself "
        "as it starts and at its first traceback: ipykernel's debugger module (debugpy), "
        "inspect's map of module files, pygments' Python lexer (autograder/fork_server.py)"
    ),
    "chapters-ahead": (
        "the fork server also does, before it forks, what each kernel of the run's chapters "
        "(those with two submissions a worker or more) does alike: reads the chapter's recorded values, imports its libraries beyond "
        "PyTorch (num2words, Babel, scikit-learn), draws chapter 01's data set and chapter "
        "07's digits (autograder/kernel_warmup.py)"
    ),
    "workers-ahead": (
        "the worker processes, and each one's fork server, start while the grader prepares "
        "the run (the chapters' releases, the solutions' check), not after it "
        "(autograder/pool.py)"
    ),
    "kernel-ahead": (
        "a worker starts the next submission's kernel, PyTorch imported, while nbgrader "
        "saves the last one's grades and writes its feedback page (autograder/sandbox.py)"
    ),
    "validate-once": (
        "nbconvert checks a notebook against its schema once, after its last step, instead "
        "of after each of its steps (autograder/nbgrader_settings.py)"
    ),
    "metadata-schema-once": (
        "nbgrader's check of each cell's metadata builds its JSON-schema validator, and checks "
        "the schema itself, once per process instead of once per cell "
        "(autograder/metadata_check.py)"
    ),
    "page-parts-once": (
        "on the feedback pages, a code cell's highlighted HTML and a markdown cell's MathML "
        "and HTML are made once per grading process and source, and reused for every page "
        "that shows the same cell (autograder/feedback.py)"
    ),
}


def switched_off() -> set[str]:
    """The switches named in ``COURSE_GRADER_WITHOUT``; a name that is not a switch is an
    error (a typo would measure nothing)."""
    named = {n.strip() for n in os.environ.get(WITHOUT, "").split(",") if n.strip()}
    unknown = named - set(SWITCHES)
    if unknown:
        raise ValueError(
            f"{WITHOUT} names {sorted(unknown)}, which are not switches; "
            f"the switches are {sorted(SWITCHES)}"
        )
    return named


def on(name: str) -> bool:
    """Whether the speed-up ``name`` is on (it is, unless the benchmark turned it off)."""
    if name not in SWITCHES:
        raise KeyError(f"{name!r} is not one of the switches {sorted(SWITCHES)}")
    return name not in switched_off()
