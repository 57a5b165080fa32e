"""Seeds, the device, and grading mode.

Grading mode is switched on by the environment variable ``ATTENTION_COURSE_GRADING=1``,
which ``python -m autograder grade`` sets for every kernel it starts. Experiments read it
through :func:`budget` to train for a few seconds instead of a minute, so a whole class
grades quickly while the graded exercises are checked in full.
"""

from __future__ import annotations

import os
import random
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

GRADING_ENV = "ATTENTION_COURSE_GRADING"
# Set by the release while it records the reference's answers (attention_course/recorded.py);
# here, where the grader can name it without importing PyTorch.
RECORD_ENV = "ATTENTION_COURSE_RECORD"


def set_seed(seed: int = 0) -> None:
    """Seed Python, NumPy and PyTorch so a notebook gives the same numbers on every run."""
    # NumPy and PyTorch are imported where they are used: the grader's worker processes
    # import this module for GRADING_ENV and never need them (torch alone takes 2 s).
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def use_one_thread() -> None:
    """Run PyTorch's CPU operations on one thread, as every notebook's set-up cell does.

    With PyTorch's default of one thread per core, a two-core laptop where another program
    keeps one core busy runs the notebooks several times slower: each operation's threads
    wait for the one that has no core. Measured on two cores with one kept busy
    (``python -m benchmarks.run --busy``): chapter 03's notebook in grading mode took 278 s
    on two threads and 11 s on one; chapter 02's whole notebook 200 s and 56 s. On an idle
    machine one thread costs about a tenth more (chapter 02: 51 s against 56 s). One
    thread also gives the same numbers on a laptop of any number of cores.
    """
    import torch

    torch.set_num_threads(1)


def without_iri_grammar() -> None:
    """Keep jsonschema from compiling its IRI grammar in this process: call before the
    first import of nbformat (``python -m attention_course.validate``, the grader's
    commands and worker processes).

    jsonschema, which nbformat imports, imports ``rfc3987_syntax`` when it is installed (it
    is: jupyter-events asks for ``jsonschema[format-nongpl]``) to check the "iri" string
    format, which no notebook schema uses. That import compiles a grammar: about 2.6 s of
    CPU in every process that reads a notebook. Marked absent, jsonschema leaves that one
    format unchecked (python-jsonschema/jsonschema#1428).
    """
    sys.modules.setdefault("rfc3987_syntax", None)


def grading_mode() -> bool:
    """True while the autograder runs this notebook (``ATTENTION_COURSE_GRADING=1``)."""
    return os.environ.get(GRADING_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def budget(full, grading):
    """Pick a value (seconds, steps, examples) for the current mode: ``full`` normally,
    ``grading`` when the autograder runs the notebook."""
    return grading if grading_mode() else full


def device() -> torch.device:
    """The device exercises run on: CUDA where there is one, else the CPU.

    The course is sized for a laptop CPU; a GPU only makes it faster.
    """
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
