"""The student kit (``make kit``, ``tools/kit.py``): everything a student needs, no answer.

The kit is built, then installed into a fresh virtual environment where ``autograder`` (the
reference, the hidden tests, the mistakes, the grader) cannot be imported: the environment
reaches the course's installed packages, not the repository. There, for every chapter, the
released notebook with every solution filled in passes every visible test, and the untouched
notebook fails every one. Every file of the kit is searched for the lines of the solution
regions, the hidden tests, the reference modules and the mistakes' edits.
"""

import ast
import io
import json
import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import kit  # noqa: E402

from autograder.chapters import ALL_CHAPTERS, solution_path  # noqa: E402
from autograder.leaks import MARKERS, course_secret_lines  # noqa: E402
from autograder.mistakes import catalogue  # noqa: E402
from autograder.submissions import solved_notebook, untouched_notebook  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
RUNNER = Path(__file__).with_name("kit_runner.py")

# Chapters whose released notebooks still ask the reference itself (issue 35, in progress):
# their visible tests import ``autograder.reference`` and cannot run from the kit yet.
ON_THE_REFERENCE = {
    "01_rnn_bottleneck",
    "02_bahdanau_attention",
    "03_convs2s",
}
KIT_CHAPTERS = [c for c in ALL_CHAPTERS if c not in ON_THE_REFERENCE]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return kit.build(tmp_path_factory.mktemp("kit") / "kit")


@pytest.fixture(scope="module")
def kit_python(built, tmp_path_factory):
    """A fresh venv with the kit's wheel installed, and the course's third-party packages
    reachable (a path in a .pth file, so the editable install of the repository in them is
    not), but not the repository: ``import autograder`` fails there."""
    venv = tmp_path_factory.mktemp("venv") / "kit"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "course-packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--target",
            str(site),
            str(built["wheel"]),
        ],
        check=True,
    )
    probe = subprocess.run(
        [str(python), "-c", "import attention_course, autograder"],
        capture_output=True,
        text=True,
        cwd=venv,
    )
    assert "No module named 'autograder'" in probe.stderr, probe.stderr
    return python


def test_the_kit_depends_on_the_students_packages_only(built):
    with zipfile.ZipFile(built["wheel"]) as z:
        metadata = next(n for n in z.namelist() if n.endswith("METADATA"))
        requires = [
            line.split(":", 1)[1].strip().split("==")[0]
            for line in z.read(metadata).decode().splitlines()
            if line.startswith("Requires-Dist:")
        ]
        names = z.namelist()
    assert sorted(requires) == sorted(kit.STUDENT)
    for instructor in ("nbgrader", "dask", "distributed", "psycopg", "jupyter-book", "nh3"):
        assert instructor not in requires
    assert not [n for n in names if n.startswith(("autograder", "solutions"))]
    assert built["wheel"].stat().st_size < 5e6, "the kit's wheel, data included, is over 5 MB"


def _exercise_names() -> set[str]:
    names = set()
    for chapter in ALL_CHAPTERS:
        for cell in nbformat.read(solution_path(ROOT, chapter), 4).cells:
            if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
                try:
                    body = ast.parse(cell.source).body
                except SyntaxError:
                    continue
                names |= {n.name for n in body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    return names


def _code_lines(node) -> set[str]:
    """The stripped lines of a function's or class's code, its docstrings and comments left
    out, distinctive ones only (20 characters or more)."""
    lines = set()
    for line in ast.unparse(node).splitlines():
        text = line.strip()
        if len(text) >= 20 and not text.startswith(("'", '"', "#", "def ", "class ", "@")):
            lines.add(text)
    return lines


def _secrets() -> set[str]:
    """Lines that must not be in the kit: the solution regions' and hidden tests' (of the
    whole course, less what any notebook shows on purpose), the code of the reference's
    version of every exercise, and the mistakes' edits; less every line that a released
    notebook shows (a given skeleton line such as ``self.out = nn.Linear(...)``)."""
    secrets = course_secret_lines(solution_path(ROOT, c) for c in ALL_CHAPTERS)
    exercises = _exercise_names()
    reference = set()
    for path in (ROOT / "autograder" / "reference").glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name in exercises:
                reference |= _code_lines(node)
    edits = {
        line.strip()
        for chapter in ALL_CHAPTERS
        for m in catalogue(chapter)
        for line in m.new.splitlines()
        if len(line.strip()) >= 20
    }
    public = set()
    for chapter in ALL_CHAPTERS:
        for cell in nbformat.read(ROOT / "notebooks" / chapter / f"{chapter}.ipynb", 4).cells:
            public |= {line.strip() for line in cell.source.splitlines()}
            if cell.cell_type == "code":
                try:
                    public |= {
                        line.strip() for line in ast.unparse(ast.parse(cell.source)).splitlines()
                    }
                except SyntaxError:
                    pass
    return secrets | ((reference | edits) - public)


def _kit_files(built):
    """(name, text) of every file of the kit's zip, the wheel's files included."""
    with zipfile.ZipFile(built["zip"]) as outer:
        for name in outer.namelist():
            data = outer.read(name)
            if name.endswith(".whl"):
                with zipfile.ZipFile(io.BytesIO(data)) as wheel:
                    for inner in wheel.namelist():
                        yield f"{name}!{inner}", wheel.read(inner)
            else:
                yield name, data


def _lines(name: str, data: bytes) -> set[str]:
    text = data.decode("utf-8", errors="replace")
    if name.endswith(".ipynb"):
        cells = nbformat.reads(text, as_version=4).cells
        lines = {line.strip() for c in cells for line in c.source.splitlines()}
        for cell in cells:
            if cell.cell_type == "code":
                try:
                    lines |= {
                        line.strip() for line in ast.unparse(ast.parse(cell.source)).splitlines()
                    }
                except SyntaxError:
                    pass
        return lines
    lines = {line.strip() for line in text.splitlines()}
    if name.endswith(".py"):
        lines |= {line.strip() for line in ast.unparse(ast.parse(text)).splitlines()}
    return lines


# Lines of the kit that are also a secret line, each for a reason: what a chapter gives as
# its own tool, or a line too common to tell anything.
SHARED = {
    # chapter 08's language model, a tool of the kit, has its own sinusoidal table (the
    # equation that chapter 06's page states, and a baseline for chapter 08's comparison)
    "pe = torch.zeros(max_len, d_model)": "language_model.py",
    "pos = torch.arange(max_len, dtype=torch.float32)[:, None]": "language_model.py",
    "pos = torch.arange(max_len, dtype=torch.float32)[:, None]  # (T, 1)": "language_model.py",
    # common lines
    "g = torch.Generator().manual_seed(seed)": "language_model.py",
    "torch.manual_seed(seed)": "runtime.py",
    "y = x.clone()": "data/toy.py",
    "self.norm1, self.norm2 = (nn.LayerNorm(d_model), nn.LayerNorm(d_model))": "vision_transformer.py",
    # the docstring's example of hand_out
    "out, w = scaled_dot_product_attention(Q, K, V)": "handout.py",
}


def test_no_answer_is_in_the_kit(built):
    secrets = _secrets()
    assert len(secrets) > 500
    leaks, scanned = {}, 0
    for name, data in _kit_files(built):
        if name.endswith(".pt") or name.endswith(".whl"):
            continue  # recorded tensors: the visible tests' own values
        scanned += 1
        found = sorted(
            line
            for line in _lines(name, data) & secrets
            if not name.endswith(f"attention_course/{SHARED.get(line, '-')}")
        )
        found += [m for m in MARKERS if m.encode() in data]
        if found:
            leaks[name] = found[:5]
    assert scanned > 20
    assert not leaks, f"the kit holds answers: {leaks}"


def test_the_released_notebooks_of_the_kit_import_only_the_kit(built):
    found = []
    for chapter in KIT_CHAPTERS:
        path = built["notebooks"] / chapter / f"{chapter}.ipynb"
        for cell in nbformat.read(path, 4).cells:
            if cell.cell_type == "code" and re.search(
                r"^\s*(from|import)\s+autograder\b", cell.source, re.M
            ):
                found.append(f"{chapter}: {cell.source.splitlines()[0]}")
    assert not found, found


@pytest.mark.parametrize("chapter", ALL_CHAPTERS)
def test_every_chapter_runs_from_the_kit(chapter, kit_python, tmp_path):
    if chapter in ON_THE_REFERENCE:
        pytest.xfail("its visible tests still import autograder.reference (issue 35)")
    paths = []
    for name, nb in (
        ("solved", solved_notebook(ROOT, chapter)),
        ("untouched", untouched_notebook(ROOT, chapter)),
    ):
        folder = tmp_path / name
        folder.mkdir()
        for extra in (ROOT / "notebooks" / chapter).iterdir():
            if extra.suffix != ".ipynb" and extra.is_file():
                (folder / extra.name).write_bytes(extra.read_bytes())
        nbformat.write(nb, folder / f"{chapter}.ipynb")
        paths.append(folder / f"{chapter}.ipynb")
    # the two notebooks at once, one on each core
    runs = [
        subprocess.Popen(
            [str(kit_python), str(RUNNER), str(p)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        )
        for p in paths
    ]
    results = {}
    for run in runs:
        out, err = run.communicate(timeout=900)
        assert run.returncode == 0, err[-3000:]
        results.update(json.loads(out))
    solved, untouched = (results[str(p)] for p in paths)
    for result in (solved, untouched):
        assert result.pop("<kernel>").endswith("has no autograder")
    assert solved and not {k: v for k, v in solved.items() if v}, solved
    assert all(untouched.values()), {k for k, v in untouched.items() if not v}
