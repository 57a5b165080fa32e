"""The nbgrader configuration of the course, in one place.

Used by the course's own commands and, through the top-level ``nbgrader_config.py``, by
plain ``nbgrader`` commands run from the repository root.
"""

import tempfile
from pathlib import Path

from traitlets.config import Config

from autograder import speedups

COURSE_ID = "attention-course"

# What a student sees in place of a solution region. Hints are not in the code: they sit
# in collapsed markdown cells under the exercise, a first that points at the idea and a
# second that names the API, so a student who wants to think can.
CODE_STUB = (
    "# YOUR CODE HERE\n"
    'raise NotImplementedError("Exercise not done yet: replace these two lines with your code.")'
)

# A cell may run this long before the kernel is interrupted. Generous, because a loaded
# machine can take 10 s just to import torch; grading mode keeps training short.
# ``grade --cell-timeout`` sets another.
CELL_TIMEOUT_S = 180

# What ``grade`` runs on each submission: nbgrader's autograde steps, with its Execute
# replaced by the course's (autograder/sandbox.py: the kernel in a sandbox, each cell's
# output capped while it runs); then the notebook the formgrader shows is made inert
# (autograder/inert.py: no output or markdown of the student's renders as markup). LimitOutput (at most 1000 lines of a cell's text, 100 of a
# traceback) is nbgrader's own and stays.
AUTOGRADE_PREPROCESSORS = [
    "autograder.sandbox.GradingExecute",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "autograder.inert.InertNotebook",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]

# nbgrader's own first pass over a submission (its default), before it runs.
SANITIZE_PREPROCESSORS = [
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.DeduplicateIds",
    "nbgrader.preprocessors.OverwriteKernelspec",
    "nbgrader.preprocessors.OverwriteCells",
    "nbgrader.preprocessors.CheckCellMetadata",
]

# The feedback page's template, autograder/templates/course_feedback: nbgrader's, with the
# tests named and nothing loaded from another host.
FEEDBACK_TEMPLATES = Path(__file__).resolve().parent / "templates"
FEEDBACK_TEMPLATE = "course_feedback"


def configure(c: Config) -> Config:
    """Fill ``c`` with the course's nbgrader settings and return it."""
    c.CourseDirectory.course_id = COURSE_ID
    c.CourseDirectory.source_directory = "solutions"
    c.CourseDirectory.release_directory = "notebooks"
    # The release's markdown is the course's own: what a student wrote is held to
    # autograder/inert.py's allowlist (a path relative to the course root, as nbgrader's).
    c.InertNotebook.release_directory = "notebooks"
    c.ClearSolutions.code_stub = {"python": CODE_STUB}
    c.ClearSolutions.enforce_metadata = True
    c.Execute.timeout = CELL_TIMEOUT_S
    # Waits for a cell's reply in short slices: pyzmq can miss the reply's wake-up, and
    # nbclient would then sit out the whole cell timeout (autograder/kernel_client.py).
    c.AsyncKernelManager.client_class = "autograder.kernel_client.GradingKernelClient"
    # A student who deletes a graded cell gets it back instead of a silent "needs manual grade".
    c.OverwriteCells.add_missing_cells = True
    # Feedback shows the visible tests and their results, never the hidden tests' code
    # (not even in a traceback). Each test is named by its docstring's "Check that ..." line,
    # and the math is MathML, so that the page loads nothing from another host
    # (autograder/feedback.py).
    c.GenerateFeedback.preprocessors = [
        "autograder.inert.InertNotebook",  # again: a notebook graded before it existed
        "nbgrader.preprocessors.GetGrades",
        "nbgrader.preprocessors.ClearHiddenTests",
        "autograder.feedback.ShortTracebacks",
        "autograder.feedback.TestNames",
        "autograder.feedback.MarkdownMath",
        "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
    ]
    # nbgrader's API sets HTMLExporter.template_name = "feedback" (its own template) on every
    # call; the settings of the exporter that GenerateFeedback makes, given here, win over it.
    c.GenerateFeedback.exporter_class = "autograder.feedback.FeedbackExporter"  # faster, same page
    c.GenerateFeedback.HTMLExporter.template_name = FEEDBACK_TEMPLATE
    c.GenerateFeedback.HTMLExporter.extra_template_basedirs = [str(FEEDBACK_TEMPLATES)]
    return c


def grading_settings(
    c: Config,
    sandbox: bool = True,
    cell_timeout: int | None = None,
    hidden: list[str] | tuple[str, ...] = (),
    chapters: list[str] | tuple[str, ...] = (),
) -> Config:
    """Add to ``c`` how ``grade`` runs a submission: in the sandbox (unless ``sandbox`` is
    False), with the folders ``hidden`` from it, and ``cell_timeout`` seconds per cell
    (default ``CELL_TIMEOUT_S``); ``chapters``, those the run grades (their kernels' shared
    work done ahead by the fork server)."""
    c.Autograde.autograde_preprocessors = list(AUTOGRADE_PREPROCESSORS)
    if speedups.on("metadata-schema-once"):  # the same checks, the schema checked once
        check = "autograder.metadata_check.CheckCellMetadataOnce"
        c.Autograde.autograde_preprocessors[-1] = check
        c.Autograde.sanitize_preprocessors = [*SANITIZE_PREPROCESSORS[:-1], check]
    c.GradingExecute.sandbox = sandbox
    # Each submission's kernel is killed once its last cell has answered, not asked to exit:
    # a graceful exit would wait for the kernel to tear down PyTorch (a few tenths of a
    # second per submission), and nothing of it is read after the last cell.
    c.GradingExecute.shutdown_kernel = "immediate"
    # nbconvert validates the whole notebook against its schema after every preprocessor
    # (eight in autograde, seven in the feedback page's), a tenth of a second or more per
    # submission; once, after the last, still refuses a notebook the steps left invalid.
    c.Exporter.optimistic_validation = speedups.on("validate-once")
    c.SandboxedKernelManager.hidden = [str(folder) for folder in hidden]
    # Each kernel forked from a process of the same sandbox that imported PyTorch once
    # (autograder/fork_server.py says what stays isolated and how).
    c.SandboxedKernelManager.fork_server = sandbox and speedups.on("fork-server")
    c.SandboxedKernelManager.torch_imports_ahead = speedups.on("torch-imports-ahead")
    c.SandboxedKernelManager.caches_ahead = speedups.on("caches-ahead")
    c.SandboxedKernelManager.chapters_ahead = (
        list(chapters) if speedups.on("chapters-ahead") else []
    )
    if cell_timeout is not None:
        c.Execute.timeout = int(cell_timeout)
    return c


def course_config(root, db_url: str | None = None, **directories: str) -> Config:
    """The configuration for a course rooted at ``root`` (optionally with another gradebook
    or other step directories, e.g. ``release_directory="/tmp/x"``)."""
    c = configure(Config())
    root = Path(root)
    c.CourseDirectory.root = str(root)
    # The course never uses nbgrader's exchange; point it somewhere writable so nbgrader
    # does not log a CRITICAL "unwritable directory" on every command.
    c.Exchange.root = tempfile.gettempdir()
    if db_url:
        c.CourseDirectory.db_url = db_url
    for name, value in directories.items():
        setattr(c.CourseDirectory, name, str(value))
    release = Path(c.CourseDirectory.release_directory)
    c.InertNotebook.release_directory = str(release if release.is_absolute() else root / release)
    return c
