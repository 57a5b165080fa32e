"""What every grading kernel of a chapter computes alike, done once by the fork server before
it forks them (the switch ``chapters-ahead``).

A grading run names its chapters to each worker's fork server (``autograder/fork_server.py``,
``--chapter``). Before its first fork, the server, for each of them (:func:`prepare`):

- looks up the instructor's side of the course kit (the reference and the diagnosis of
  known mistakes, through their entry points: 25 ms each a kernel), once for all chapters;
- reads the chapter's recorded values (``attention_course/data/recorded/<chapter>.pt``,
  which the set-up cell loads: 0.1-0.4 s a kernel);
- imports the libraries its cells import beyond PyTorch (:data:`IMPORTS`): num2words and
  Babel for the number words and dates, scikit-learn and SciPy for the digits;
- computes what :data:`DATA` names, the data a cell draws the same in every kernel:
  chapter 01's data set in grading mode (its number words, 1.6 s a kernel, are then in
  ``attention_course/data/numbers.py``'s cache) and chapter 07's digits.

Each forked kernel starts with its own copy of all of it. None of it comes from a student:
the course's files and the libraries' code, the same for every submission, as PyTorch's
import. What must be set up in the kernel's own shell is never imported here
(:data:`KERNEL_ONLY`): :func:`prepare` checks it.
"""

import importlib
import sys

# What a kernel must import itself: pyplot sets up its backend with the kernel's shell,
# tqdm.auto picks its kind of progress bar by whether it runs in a kernel, ipywidgets
# registers its comm target with the kernel as it is imported.
KERNEL_ONLY = ("matplotlib.pyplot", "tqdm.auto", "ipywidgets")

IMPORTS = {
    "01_rnn_bottleneck": ("num2words", "babel.dates"),
    "03_convs2s": ("num2words", "babel.dates"),
    "07_spatial_transformer": ("sklearn.datasets", "num2words"),
    "09_vision_transformer": ("num2words",),
}


def _number_words_of_chapter_01() -> None:
    """The data cell's data set, as the grader's kernels draw it (grading mode)."""
    from attention_course.data.translation import GRADING_SETTINGS as cfg
    from attention_course.data.translation import number_translation_data

    number_translation_data(cfg.tgt_lang, cfg.num_train, cfg.test_per_bucket, seed=0)


def _digits_of_chapter_07() -> None:
    """The digits the tests draw (``digit_split``'s cache)."""
    from attention_course.data.digits import digit_split

    digit_split("test")


DATA = {
    "01_rnn_bottleneck": _number_words_of_chapter_01,
    "07_spatial_transformer": _digits_of_chapter_07,
}


class WarmupError(RuntimeError):
    """A warm-up imported what only a kernel may import."""


def prepare(chapters) -> None:
    """Read, import and compute ahead what the kernels of ``chapters`` share (see the
    module's docstring); a step that fails is left to the kernels (which then fail there
    themselves, in a cell whose error the student sees); a :class:`WarmupError` if that
    imported a module of :data:`KERNEL_ONLY`."""
    from attention_course.recorded import instructor_entry, read_ahead

    before = {name for name in KERNEL_ONLY if name in sys.modules}
    steps = [lambda: instructor_entry("reference"), lambda: instructor_entry("diagnosis")]
    for chapter in chapters:
        steps.append(lambda chapter=chapter: read_ahead(chapter))
        steps += [lambda n=name: importlib.import_module(n) for name in IMPORTS.get(chapter, ())]
        steps += [DATA[chapter]] if chapter in DATA else []
    for step in steps if chapters else ():
        try:
            step()
        except Exception:  # only time is lost: each kernel does it itself, and says what failed
            pass
    imported = sorted(name for name in KERNEL_ONLY if name in sys.modules and name not in before)
    if imported:
        raise WarmupError(
            f"warming up {', '.join(chapters)} imported {', '.join(imported)}, which a "
            "kernel must import itself (autograder/kernel_warmup.py: KERNEL_ONLY)"
        )
