"""``python -m autograder kit`` (``make kit``): what a student installs, and nothing of the
instructor's side.

    python -m autograder kit [--out _build/kit] [--through CHAPTER]

writes, in ``--out``:

- ``attention_course_kit-<version>-py3-none-any.whl``: the student package
  ``attention_course`` (data, vocabularies, the training loop, plots, widgets, the checks,
  the recorded values the visible tests compare with), depending on the student's packages
  only (:data:`STUDENT`, pinned as ``pyproject.toml`` pins them);
- ``notebooks/``: every chapter's student notebook, and ``AGENTS.md``;
- ``attention-course-kit-<version>.zip``: both, with a README, for an LMS.

The reference implementations, the hidden tests, the mistake catalogue, the solution
notebooks and the grader (``autograder/``, ``solutions/``) are not in it. Some chapters
build on earlier ones, and the course hands those the earlier chapters' code
(``attention_course/handed_out/<chapter>.py``, as chapter 05's notebook gives chapter 04's
attention): ``--through CHAPTER`` builds the kit of the chapters up to CHAPTER, without the
later notebooks, recorded values and handed-out modules, so that a class receives no
chapter's answers before it is handed in (build a new kit as each chapter opens);
``tests/test_kit.py`` builds it, installs it where ``autograder`` cannot be imported, runs
every chapter there and searches every file of it for their lines.
"""

import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

from autograder.chapters import ALL_CHAPTERS

ROOT = Path(__file__).resolve().parents[1]

PACKAGE = "attention_course"
DISTRIBUTION = "attention-course-kit"

# The project's dependencies a student's machine needs: the course's own and a Jupyter to
# run the notebooks in. Not nbgrader, Dask, the PostgreSQL driver, nh3 or Jupyter Book.
STUDENT = (
    "torch",
    "matplotlib",
    "ipywidgets",
    "tqdm",
    "num2words",
    "babel",
    "sacrebleu",
    "scikit-learn",
    "einops",
    "ipykernel",
    "jupyterlab",
    "nbformat",
    "nbclient",
)

README = """\
# The attention course: student kit {version}

1. Make a virtual environment with Python 3.11 and install the kit in it:

       python3.11 -m venv course
       course/bin/pip install {wheel}          (on Windows: course\\Scripts\\pip ...)

2. Open the notebooks:  course/bin/jupyter lab notebooks/

3. Before you hand a notebook in, check it as the grader will run its visible tests:

       course/bin/python -m attention_course.validate notebooks/<chapter>/<chapter>.ipynb

The notebooks go with the course's website; AGENTS.md says what AI assistants may do.
"""


def version() -> str:
    namespace: dict = {}
    init = (ROOT / PACKAGE / "__init__.py").read_text()
    line = next(line for line in init.splitlines() if line.startswith("__version__"))
    exec(line, namespace)
    return namespace["__version__"]


def student_pins() -> list[str]:
    """The pins of :data:`STUDENT` from ``pyproject.toml``'s dependencies."""
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    by_name = {pin.split("==")[0].strip().lower(): pin for pin in pins}
    missing = [name for name in STUDENT if name not in by_name]
    if missing:
        raise SystemExit(f"pyproject.toml pins none of {missing}: the kit needs them")
    return [by_name[name] for name in STUDENT]


def pyproject(kit_version: str) -> str:
    requires = "".join(f'    "{pin}",\n' for pin in student_pins())
    return f"""[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{DISTRIBUTION}"
version = "{kit_version}"
description = "The student kit of an open course on attention mechanisms."
requires-python = ">=3.11,<3.12"
license = "MIT"
dependencies = [
{requires}]

[tool.setuptools.packages.find]
include = ["{PACKAGE}*"]

[tool.setuptools.package-data]
"{PACKAGE}.data" = ["recorded/*.pt", "released/*.ipynb"]
"""


def later(through: str) -> tuple[list[str], list[str]]:
    """The chapters after ``through``, and those from ``through`` on (whose answers a kit
    through it must not hold)."""
    if through not in ALL_CHAPTERS:
        raise SystemExit(f"--through {through}: not a chapter ({', '.join(ALL_CHAPTERS)})")
    i = ALL_CHAPTERS.index(through)
    return list(ALL_CHAPTERS[i + 1 :]), list(ALL_CHAPTERS[i:])


def handed_out_module(chapter: str) -> str:
    """``01_rnn_bottleneck`` -> ``rnn_bottleneck``: the module that hands its code out."""
    return re.sub(r"^\d+_", "", chapter)


def build_wheel(out: Path, through: str = ALL_CHAPTERS[-1]) -> Path:
    kit_version = version()
    after, unanswered = later(through)
    recorded = {f"{c}.pt" for c in after}
    handed_out = {f"{handed_out_module(c)}.py" for c in unanswered}

    def ignore(folder, names):
        folder = Path(folder)
        left_out = {"__pycache__"}
        if folder.name == "recorded":
            left_out |= recorded
        if folder.name == "handed_out":
            left_out |= handed_out
        return {n for n in names if n in left_out}

    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "kit"
        shutil.copytree(ROOT / PACKAGE, source / PACKAGE, ignore=ignore)
        # the released notebooks, that validate puts a notebook's locked cells back from
        released = source / PACKAGE / "data" / "released"
        released.mkdir()
        for chapter in ALL_CHAPTERS[: len(ALL_CHAPTERS) - len(after)]:
            shutil.copy(ROOT / "notebooks" / chapter / f"{chapter}.ipynb", released)
        (source / "pyproject.toml").write_text(pyproject(kit_version))
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--no-deps",
                "--no-build-isolation",
                "--wheel-dir",
                str(out),
                str(source),
            ],
            check=True,
        )
    return out / f"{DISTRIBUTION.replace('-', '_')}-{kit_version}-py3-none-any.whl"


def build(out: Path, through: str = ALL_CHAPTERS[-1]) -> dict[str, Path]:
    """Build the kit of the chapters up to ``through`` in ``out`` (emptied first); returns
    the wheel, notebooks and zip."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    wheel = build_wheel(out, through)
    after, _ = later(through)
    notebooks = out / "notebooks"
    shutil.copytree(
        ROOT / "notebooks",
        notebooks,
        ignore=shutil.ignore_patterns(".ipynb_checkpoints", *after),
    )
    suffix = "" if through == ALL_CHAPTERS[-1] else f"-through-{through}"
    archive = out / f"{DISTRIBUTION}-{version()}{suffix}.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        z.write(wheel, wheel.name)
        for path in sorted(notebooks.rglob("*")):
            if path.is_file():
                z.write(path, path.relative_to(out).as_posix())
        z.writestr("README.md", README.format(version=version(), wheel=wheel.name))
    return {"wheel": wheel, "notebooks": notebooks, "zip": archive}
