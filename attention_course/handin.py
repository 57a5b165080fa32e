"""Check a notebook before handing it in, from a cell of the notebook itself::

    from attention_course.handin import check
    check("04_dot_product_attention.ipynb")

runs ``python -m attention_course.validate`` on the notebook as last saved, with the
kernel's own interpreter (the kit's, whatever the terminal's ``PATH`` says), in a process
of its own, and prints its report as it comes. The same check from a terminal is
``course-validate NOTEBOOK`` (a command the kit installs beside its ``python``; JupyterLab's
terminal finds it, :mod:`attention_course.lab`) or ``course/bin/python -m
attention_course.validate NOTEBOOK`` from the kit's folder.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

from attention_course.runtime import grading_mode


def this_notebook() -> Path | None:
    """The notebook this kernel runs, as Jupyter told the kernel (``JPY_SESSION_NAME``, set by
    jupyter_server; VS Code's ``__vsc_ipynb_file__``), or ``None``."""
    names = [os.environ.get("JPY_SESSION_NAME", "")]
    try:
        from IPython import get_ipython

        shell = get_ipython()
        if shell is not None:
            names.append(str(shell.user_ns.get("__vsc_ipynb_file__", "")))
    except ImportError:
        pass
    for name in names:
        if name.endswith(".ipynb") and Path(name).is_file():
            return Path(name)
    return None


def _notebook(notebook) -> Path:
    if notebook is not None:
        path = Path(notebook).expanduser()
        if not path.is_file():
            raise FileNotFoundError(
                f"no notebook {path} in {Path.cwd()}: give its file name, as the file browser "
                "shows it, for example check('04_dot_product_attention.ipynb')"
            )
        return path
    path = this_notebook()
    if path is None:
        raise ValueError(
            "cannot tell which notebook this is: give its file name, for example "
            "check('04_dot_product_attention.ipynb')"
        )
    return path


def check(notebook: str | os.PathLike | None = None) -> None:
    """Run the hand-in check on ``notebook`` (default: the notebook of this kernel) as saved
    on disk: save it first. Prints the report, which ends READY or NOT READY.

    It does nothing when grading (the grader runs the visible tests itself)."""
    if grading_mode():
        print("The hand-in check does not run when grading.")
        return
    path = _notebook(notebook).resolve()
    saved = time.strftime("%H:%M:%S", time.localtime(path.stat().st_mtime))
    print(
        f"Checking {path.name} as it was saved at {saved} (save it first: File > Save "
        "Notebook); this takes about as long as running it in grading mode.",
        flush=True,
    )
    command = [sys.executable, "-m", "attention_course.validate", str(path)]
    with subprocess.Popen(
        command,
        cwd=path.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        encoding="utf-8",
        errors="replace",
    ) as process:
        for line in process.stdout:
            print(line, end="", flush=True)
