"""Where a grading kernel will import the course from, found before any kernel starts.

A kernel is another process. Its interpreter (the kernel spec's), its environment
(``PYTHONPATH``) and its working directory (``/tmp`` in the sandbox, no checkout) decide
where ``import attention_course`` goes, and that need not be where the grader's own import
went: an editable install's finder may point at another checkout, a folder earlier on
``PYTHONPATH`` may shadow the course, ``python -m autograder`` run from a checkout imports
that checkout while the kernel does not. So the kernel's interpreter is asked, in a process
started as the kernel will be (same executable and environment, an empty working
directory), where it finds the course's packages and what its ``sys.path`` holds. The
sandbox binds those folders, links resolved (``autograder/sandbox.py``), and
:func:`check_kernel_imports` says, before anything is graded, what it cannot bind.
"""

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from autograder.chapters import CourseError

# The packages a chapter's notebook imports from the course (its setup cell, its tests).
COURSE_PACKAGES = ("attention_course", "autograder")

# Run by the kernel's interpreter: its sys.path, and where each package is found (without
# importing it: find_spec of a top-level package runs no code of the package).
_ASK = """
import importlib.util, json, sys
found = {}
for name in sys.argv[1:]:
    try:
        spec = importlib.util.find_spec(name)
    except Exception as error:
        found[name] = {"error": f"{type(error).__name__}: {error}"}
        continue
    if spec is None:
        found[name] = {"error": "not found"}
    elif spec.submodule_search_locations:
        found[name] = {"folder": list(spec.submodule_search_locations)[0]}
    else:
        found[name] = {"error": f"a module ({spec.origin}), not a package"}
print(json.dumps({"path": [p for p in sys.path if p], "packages": found}))
"""


@dataclass(frozen=True)
class KernelImports:
    """What the kernel's interpreter ``python`` imports from: each course package's folder
    as the kernel names it (None when it cannot find it, with ``errors[name]`` saying why),
    and the folders of its ``sys.path`` that exist."""

    python: str
    packages: dict[str, str | None]
    errors: dict[str, str]
    path: tuple[str, ...]

    def folders(self) -> list[str]:
        """Every folder the kernel may import from: the packages' and ``sys.path``'s."""
        return sorted({*(f for f in self.packages.values() if f), *self.path})


def kernel_python() -> str:
    """The interpreter of the ``python3`` kernel spec (the notebooks' kernel), else this one."""
    try:
        from jupyter_client.kernelspec import KernelSpecManager

        argv = KernelSpecManager().get_kernel_spec("python3").argv
    except Exception:
        return sys.executable
    python = argv[0] if argv else sys.executable
    if python in {"python", "python3", "{python}"}:
        return sys.executable
    return python


def kernel_imports() -> KernelImports:
    """Where a kernel started now would import the course from (asked once per
    interpreter and ``PYTHONPATH``)."""
    return _ask(kernel_python(), os.environ.get("PYTHONPATH", ""))


@lru_cache(maxsize=8)
def _ask(python: str, pythonpath: str) -> KernelImports:
    with tempfile.TemporaryDirectory(prefix="kernel-imports-") as empty:
        try:
            result = subprocess.run(
                [python, "-c", _ASK, *COURSE_PACKAGES],
                cwd=empty,
                capture_output=True,
                text=True,
                timeout=60,
            )
            said = json.loads(result.stdout)
        except (OSError, ValueError, subprocess.TimeoutExpired) as error:
            why = f"the kernel's Python {python} could not be asked ({type(error).__name__})"
            return KernelImports(python, dict.fromkeys(COURSE_PACKAGES), {"*": why}, ())
    packages, errors = {}, {}
    for name in COURSE_PACKAGES:
        entry = said["packages"].get(name, {})
        folder = entry.get("folder")
        packages[name] = os.path.abspath(folder) if folder else None
        if not folder:
            errors[name] = entry.get("error", "not found")
    path = tuple(os.path.abspath(p) for p in said["path"] if Path(p).is_dir())
    return KernelImports(python, packages, errors, path)


def check_kernel_imports(hidden: list[str]) -> KernelImports:
    """Raise ``CourseError`` naming what the sandbox cannot give a kernel: a course package
    its interpreter does not find, or finds in a folder the sandbox hides (``hidden``);
    else what it imports from."""
    found = kernel_imports()
    problems = [
        f"{name}: {why}" if name != "*" else why for name, why in sorted(found.errors.items())
    ]
    for name, folder in found.packages.items():
        for secret in hidden:
            if folder and Path(folder).resolve().is_relative_to(Path(secret).resolve()):
                problems.append(
                    f"{name} is found in {folder}, inside {secret}, which the sandbox hides "
                    "from the kernels"
                )
    if problems:
        raise CourseError(
            f"the grading kernels (Python {found.python}) cannot import the course, so "
            "the sandbox has nothing to bind for it: " + "; ".join(problems) + ". Install "
            "the course into the environment that grades (`pip install -e .` from the "
            "course's folder) and check PYTHONPATH."
        )
    return found


def describe(found: KernelImports) -> str:
    """Where the kernel imports each course package from, in words."""
    return ", ".join(
        f"{name} from {folder}" if folder else f"{name} not found ({found.errors.get(name)})"
        for name, folder in found.packages.items()
    )
