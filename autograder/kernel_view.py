"""What a grading kernel sees of the course and of the grader's environment: its own
chapter's grading material, and variables from an allowlist.

A submission is code of the student's, and whatever it prints comes back on its feedback
page. So a kernel grading chapter 04 must not find chapter 10's solution notebook, hidden
tests, reference implementation or catalogue of mistakes on the disk, and no password or
token of the grader's in its environment. Both are allowlists, so that what is added to the
course or to the grader's environment later stays out of the kernel unless it is named here.

**The course's folders.** Each checkout of the course a kernel could import from (the
grader's own, and the one the kernel's interpreter finds: ``autograder/kernel_imports.py``)
is replaced in the sandbox (``autograder/sandbox.py``) by an empty, read-only folder into
which only this is bound, read-only:

- ``attention_course/``: the student kit, which every student holds;
- ``autograder/``, with ``reference/`` and ``mistakes/`` cut down to what the chapter's
  grading imports (:func:`chapter_material`): the reference modules its solution notebook
  imports, and those they import in turn, and the chapter's own catalogue of mistakes;
- ``solutions/<chapter>/``: the chapter's solution notebook, whose solution cells the
  diagnosis of known mistakes replays;
- the folders of the kernel's Python that lie inside the checkout (a ``.venv``, say).

Nothing else of the checkout is there: not the other chapters' solutions, not ``tests/``,
``benchmarks/``, ``_build/`` (the kits and the site) or ``.git`` (which holds every version
of every solution). A package installed into site-packages (not a checkout) keeps its
folder, with ``reference/`` and ``mistakes/`` cut down the same way. A kernel whose chapter
is not known (one JupyterLab starts in ``review``) gets no chapter's material at all.

**The environment** (:func:`kernel_environment`): only the variables of
:data:`ALLOWED_VARIABLES` (the interpreter's search path and locale, the thread counts,
grading mode) pass, and ``HOME`` and ``TMPDIR`` are the sandbox's private ``/tmp``. A
password in ``PGPASSWORD``, a gradebook URL in ``ATTENTION_COURSE_GRADEBOOK``, a cloud token:
none of them reaches a kernel, nor the fork server the kernels are forked from (whose
starting environment a forked process could read in ``/proc/self/environ``).
"""

import ast
import json
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

from attention_course.runtime import GRADING_ENV, RECORD_ENV
from autograder.chapters import ALL_CHAPTERS, INSTALLED_ROOT

# The variables a kernel may inherit, by name: what Python, the numerical libraries and
# matplotlib read, and the course's grading switches. Nothing that names a server, a user
# or a secret.
ALLOWED_VARIABLES = frozenset(
    {
        "PATH",
        "LANG",
        "LANGUAGE",
        "TZ",
        "PYTHONPATH",
        "PYTHONHASHSEED",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONIOENCODING",
        "PYTHONUTF8",
        "PYTHONWARNINGS",
        "LD_LIBRARY_PATH",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "MPLBACKEND",
        "CUDA_VISIBLE_DEVICES",
        "NBGRADER_EXECUTION",
        "JPY_PARENT_PID",
        GRADING_ENV,
        RECORD_ENV,
    }
)
ALLOWED_PREFIXES = ("LC_",)  # the locale's categories
PRIVATE = {"HOME": "/tmp", "TMPDIR": "/tmp"}  # the sandbox's private, empty /tmp

# The folders of the instructor's package whose modules are cut down to a chapter's own.
REFERENCE, MISTAKES = "reference", "mistakes"
# The top-level entries of a checkout that a kernel sees (besides its chapter's solutions
# and its Python's folders).
KIT, GRADER, SOLUTIONS = "attention_course", "autograder", "solutions"


def kernel_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment a kernel gets from the grader's ``environ``: the allowed variables
    only, ``HOME`` and ``TMPDIR`` private."""
    kept = {
        name: value
        for name, value in environ.items()
        if name in ALLOWED_VARIABLES or name.startswith(ALLOWED_PREFIXES)
    }
    return {**kept, **PRIVATE}


# ------------------------------------------------------------------ a chapter's material

# ``from autograder.reference import a as x, b``, ``from autograder.reference.a import f``,
# ``import autograder.reference.a``: the module names after ``autograder.reference``.
_FROM_PACKAGE = re.compile(r"from\s+autograder\.reference\s+import\s+\(?([\w\s,]+)")
_DOTTED = re.compile(r"autograder\.reference\.(\w+)")


def _reference_modules_named(source: str) -> set[str]:
    """The reference modules that ``source`` (notebook code, possibly with magics) names."""
    names = set(_DOTTED.findall(source))
    for group in _FROM_PACKAGE.findall(source):
        for item in group.split(","):
            words = item.split()
            if words:
                names.add(words[0])
    return names


def _package_folder(root: Path, name: str) -> Path:
    return root / GRADER / name


def _module_imports(path: Path, package: str) -> set[str]:
    """The modules of ``autograder.<package>`` that the module at ``path`` imports,
    anywhere in it (a function's own import included)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return set()
    prefix = f"autograder.{package}"
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == prefix:
                found.update(alias.name for alias in node.names)
            elif node.module.startswith(prefix + "."):
                found.add(node.module[len(prefix) + 1 :].split(".")[0])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(prefix + "."):
                    found.add(alias.name[len(prefix) + 1 :].split(".")[0])
    return found


def _closure(folder: Path, package: str, start: set[str]) -> set[str]:
    """``start`` and every module of the package folder ``folder`` they import, in turn."""
    seen, todo = set(), [m for m in start if (folder / f"{m}.py").is_file()]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += [
            m
            for m in _module_imports(folder / f"{name}.py", package)
            if (folder / f"{m}.py").is_file() and m not in seen
        ]
    return seen


def _notebook_code(path: Path) -> str:
    try:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    return "\n".join(
        "".join(c["source"]) if isinstance(c.get("source"), list) else str(c.get("source", ""))
        for c in cells
        if c.get("cell_type") == "code"
    )


@lru_cache(maxsize=64)
def chapter_material(root: Path, chapter: str) -> dict[str, frozenset[str]]:
    """The modules of ``reference/`` and ``mistakes/`` (names without ``.py``) that grading
    ``chapter`` imports, read from the course at ``root``: the reference modules its
    solution notebook names, with those they import; the chapter's catalogue of mistakes,
    with what it imports. Nothing for a chapter that is not the course's."""
    if chapter not in ALL_CHAPTERS:
        return {REFERENCE: frozenset(), MISTAKES: frozenset()}
    code = _notebook_code(root / SOLUTIONS / chapter / f"{chapter}.ipynb")
    reference = _closure(
        _package_folder(root, REFERENCE), REFERENCE, _reference_modules_named(code)
    )
    mistakes = _closure(_package_folder(root, MISTAKES), MISTAKES, {chapter.split("_", 1)[1]})
    return {REFERENCE: frozenset(reference), MISTAKES: frozenset(mistakes)}


# --------------------------------------------------------------------- the sandbox's view


def _is_checkout(folder: Path) -> bool:
    return (folder / SOLUTIONS).is_dir() and (folder / GRADER).is_dir()


def _bind(source: Path, destination: Path | None = None) -> list[str]:
    destination = source if destination is None else destination
    return ["--ro-bind", str(source), str(destination)]


def _cut_down(package: Path, root: Path, chapter: str | None) -> list[str]:
    """bwrap's arguments that leave of ``package``'s ``reference/`` and ``mistakes/`` only
    the chapter's modules (read from the course at ``root``), their compiled copies and the
    packages' ``__init__``."""
    material = chapter_material(root, chapter) if chapter else {}
    args = []
    for name in (REFERENCE, MISTAKES):
        folder = package / name
        if not folder.is_dir():
            continue
        args += ["--tmpfs", str(folder)]
        for module in sorted({"__init__", *material.get(name, ())}):
            if (folder / f"{module}.py").is_file():
                args += _bind(folder / f"{module}.py")
            for compiled in sorted((folder / "__pycache__").glob(f"{module}.*.pyc")):
                args += _bind(compiled)
        args += ["--remount-ro", str(folder)]
    return args


def _checkout_view(root: Path, chapter: str | None, needed: list[Path]) -> list[str]:
    """bwrap's arguments that replace the checkout ``root`` with what a kernel of
    ``chapter`` may see (the module's docstring), ``needed`` being the folders the
    kernel's Python reads."""
    keep = {root / KIT, root / GRADER}
    if chapter in ALL_CHAPTERS:
        keep.add(root / SOLUTIONS / chapter)
    for folder in needed:  # a virtual environment in the checkout, say
        if folder != root and folder.is_relative_to(root):
            top = root / folder.relative_to(root).parts[0]
            if top.name not in (KIT, GRADER, SOLUTIONS):
                keep.add(top)
    args = ["--tmpfs", str(root)]
    for path in sorted(keep):
        if path.exists():
            args += _bind(path)
    args += _cut_down(root / GRADER, root, chapter)
    return args + ["--remount-ro", str(root)]


def view_args(chapter: str | None, packages: list[str], needed: list[str]) -> list[str]:
    """bwrap's arguments (after ``--ro-bind / /`` and the binds under ``/tmp``) that leave a
    kernel grading ``chapter`` (None: not known) only its own grading material, of every
    checkout of the course that ``packages`` (the folders the kernel imports the course's
    packages from) or the grader itself lie in; ``needed``, the folders the kernel's Python
    reads."""
    needed_paths = [Path(p).resolve() for p in needed]
    roots, installed = set(), set()
    for folder in [*packages, INSTALLED_ROOT / GRADER]:
        folder = Path(folder).resolve()
        if _is_checkout(folder.parent):
            roots.add(folder.parent)
        elif folder.name == GRADER and folder.is_dir():
            installed.add(folder)
    args = []
    for root in sorted(roots):
        args += _checkout_view(root, chapter, needed_paths)
    # installed, not a checkout: the chapter's modules as a checkout's solution names them
    course = min(roots) if roots else INSTALLED_ROOT.resolve()
    for package in sorted(installed):
        args += _cut_down(package, course, chapter)
    return args
