"""``python -m autograder kit`` (``make kit``): what a student installs, and nothing of the
instructor's side.

    python -m autograder kit --through CHAPTER [--out _build/kit]    (make kit THROUGH=CHAPTER)

writes, in ``--out``:

- ``attention_course_kit-<kit version>-py3-none-any.whl``: the student package
  ``attention_course`` (data, vocabularies, the training loop, plots, widgets, the checks,
  the recorded values the visible tests compare with), depending on the student's packages
  only (:data:`STUDENT`, pinned as ``pyproject.toml`` pins them);
- ``notebooks/``: the student notebooks of the chapters up to CHAPTER, and ``AGENTS.md``;
- ``attention-course-kit-<kit version>-through-<CHAPTER>.zip``: both, with a README, for an
  LMS.

Each kit has a version of its own, :func:`kit_version`: the release (``attention_course``'s
``__version__``, which a notebook names and ``attention_course/recorded.py`` compares) and
the number of its last chapter, ``0.1.0.4`` for the kit through ``04_dot_product_attention``.
pip orders them, so installing a later chapter's kit into the environment of an earlier
one replaces it (the same command for every chapter; torch, already satisfied, stays), as
pip installs any other version of it; one version for every kit made pip keep the first
("already satisfied"). There is no default chapter: ``--through all`` is the kit of every
chapter, for self-study, and holds the answers of every chapter that a later one builds on.

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

import json
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

from autograder.chapters import ALL_CHAPTERS, CourseError

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

# PyTorch's own index of its CPU builds: pip takes torch from there, the rest from PyPI (on
# Linux, PyPI's torch is the CUDA build, gigabytes that a laptop's CPU does not use).
TORCH_CPU = "https://download.pytorch.org/whl/cpu"

README = """\
# The attention course: student kit {kit_version} (chapters up to {through})

Unzip each kit your instructor hands out into a folder of its own: it holds fresh copies of
the earlier chapters' notebooks, which must never overwrite your work. The commands below
run in the kit's folder.

1. The first time, make a virtual environment with Python 3.11 (on Windows, course\\Scripts\\
   instead of course/bin/ below):

       python3.11 -m venv course

   Then install the kit (the CPU build of torch comes from PyTorch's own index); every
   chapter's kit installs with this command, its own wheel's name in it:

       course/bin/pip install --extra-index-url {torch_cpu} {wheel}

   For a later chapter's kit, course/ is the environment you made the first time (for
   example ../<your first kit's folder>/course/bin/pip): the later kit replaces the earlier
   one in seconds, torch and the rest stay as they are.

2. Open the notebooks:  course/bin/jupyter lab notebooks/

3. Before you hand a notebook in, save it and check it as the grader will run its visible
   tests. In a cell of the notebook:

       from attention_course.handin import check
       check("<chapter>.ipynb")

   or in a terminal, JupyterLab's own included, in the notebook's folder:

       course-validate <chapter>.ipynb

   or from the kit's folder, in any terminal:

       course/bin/course-validate notebooks/<chapter>/<chapter>.ipynb

The notebooks go with the course's website; AGENTS.md says what AI assistants may do.
"""

# A command for the hand-in check beside the environment's python (course/bin/course-validate):
# the name a terminal finds wherever the environment's bin is on its PATH.
COMMANDS = {"course-validate": "attention_course.validate:main"}

# What the kit sets in the student's Jupyter, as files the wheel installs into the
# environment (<environment>/<folder>/<name>): JupyterLab's terminal finds the kit's commands
# (the server extension attention_course.lab); JupyterLab saves the widgets' state with a
# notebook, so that a reopened notebook shows its explorers as they were left rather than
# "Loading widget..."; and it does not offer to fetch Jupyter's news from the web. Defaults
# (overrides.d), which the student's own settings override; another environment's Jupyter
# is left as it is.
JUPYTER_FILES = {
    ("etc/jupyter/jupyter_server_config.d", "attention_course.json"): {
        "ServerApp": {"jpserver_extensions": {"attention_course.lab": True}}
    },
    ("share/jupyter/lab/settings/overrides.d", "attention_course.json"): {
        "@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": True},
        "@jupyterlab/apputils-extension:notification": {"fetchNews": "false"},
    },
}

NO_THROUGH = (
    "say which chapters the kit holds: --through CHAPTER (make kit THROUGH=CHAPTER), the last "
    "chapter open to the class, for example --through 04_dot_product_attention; or "
    "--through all for a self-study kit of every chapter (it holds the answers of the "
    "earlier chapters that later ones build on). Chapters: {chapters}"
)


def version() -> str:
    namespace: dict = {}
    init = (ROOT / PACKAGE / "__init__.py").read_text()
    line = next(line for line in init.splitlines() if line.startswith("__version__"))
    exec(line, namespace)
    return namespace["__version__"]


def chapter_through(value: str | None) -> str:
    """The last chapter of the kit that ``--through value`` asks for: a chapter id, or
    ``all`` (the last chapter). No value is an error that says what to pass."""
    if not value:
        raise CourseError(NO_THROUGH.format(chapters=", ".join(ALL_CHAPTERS)))
    if value == "all":
        return ALL_CHAPTERS[-1]
    if value not in ALL_CHAPTERS:
        raise CourseError(f"--through {value}: not a chapter ({', '.join(ALL_CHAPTERS)}, all)")
    return value


def kit_version(through: str) -> str:
    """The version of the kit through ``through``: the release, then the chapter's number
    (``0.1.0`` and ``04_dot_product_attention`` give ``0.1.0.4``), so that pip takes a later
    chapter's kit for an upgrade of an earlier one's."""
    return f"{version()}.{int(through.split('_', 1)[0])}"


def wheel_name(through: str) -> str:
    return f"{DISTRIBUTION.replace('-', '_')}-{kit_version(through)}-py3-none-any.whl"


def zip_name(through: str) -> str:
    """The kit's zip, named by its version and its last chapter."""
    return f"{DISTRIBUTION}-{kit_version(through)}-through-{through}.zip"


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
    scripts = "".join(f'{name} = "{target}"\n' for name, target in COMMANDS.items())
    data_files = "".join(
        f'"{folder}" = ["{_jupyter_source(folder, name)}"]\n' for folder, name in JUPYTER_FILES
    )
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

[project.scripts]
{scripts}
[tool.setuptools.packages.find]
include = ["{PACKAGE}*"]

[tool.setuptools.data-files]
{data_files}
[tool.setuptools.package-data]
"{PACKAGE}.data" = ["recorded/*.pt", "released/*.ipynb"]
"""


def _jupyter_source(folder: str, name: str) -> str:
    """Where the wheel's source holds the Jupyter file that goes to ``folder/name``."""
    return f"jupyter/{folder.replace('/', '-')}/{name}"


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
        (source / "pyproject.toml").write_text(pyproject(kit_version(through)))
        for (folder, name), settings in JUPYTER_FILES.items():
            path = source / _jupyter_source(folder, name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(settings, indent=2) + "\n")
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
    return out / wheel_name(through)


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
    archive = out / zip_name(through)
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        z.write(wheel, wheel.name)
        for path in sorted(notebooks.rglob("*")):
            if path.is_file():
                z.write(path, path.relative_to(out).as_posix())
        z.writestr(
            "README.md",
            README.format(
                kit_version=kit_version(through),
                through=through,
                torch_cpu=TORCH_CPU,
                wheel=wheel.name,
            ),
        )
    return {"wheel": wheel, "notebooks": notebooks, "zip": archive}
