"""Project hygiene: pins agree, notebooks carry no outputs, lint and format are clean,
the README's commands are the ones CI runs."""

import json
import re
import subprocess
import sys
import tomllib

import pytest
import yaml


def _pins_from_pyproject(root):
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    deps = list(project["dependencies"]) + [
        d for ds in project["optional-dependencies"].values() for d in ds
    ]
    return {d.replace(" ", "") for d in deps}


def _pins_from_environment(root):
    env = yaml.safe_load((root / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    return {d.replace(" ", "") for d in pip if not d.startswith("-e")}


def test_environment_yml_has_the_same_pins_as_pyproject(root):
    pyproject, environment = _pins_from_pyproject(root), _pins_from_environment(root)
    assert pyproject == environment, (
        f"only in pyproject.toml: {sorted(pyproject - environment)}; "
        f"only in environment.yml: {sorted(environment - pyproject)}"
    )


def test_every_dependency_is_pinned_exactly(root):
    loose = [
        d
        for d in _pins_from_pyproject(root)
        if not re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[\w.]+", d)
    ]
    assert not loose, f"pin these exactly (torch especially: a range pulls a CUDA build): {loose}"


def _tracked_notebooks(root):
    out = subprocess.run(["git", "ls-files", "*.ipynb"], cwd=root, capture_output=True, text=True)
    files = [root / f for f in out.stdout.split()] if out.returncode == 0 else []
    # untracked notebooks about to be committed count too
    files += [p for p in root.glob("*/*/*.ipynb") if p.parts[-3] in ("solutions", "notebooks")]
    return sorted(set(files))


def test_committed_notebooks_carry_no_outputs_or_execution_counts(root):
    notebooks = _tracked_notebooks(root)
    assert notebooks, "no notebooks found"
    dirty = []
    for path in notebooks:
        nb = json.loads(path.read_text(encoding="utf-8"))
        for i, cell in enumerate(nb["cells"]):
            if cell["cell_type"] == "code" and (cell.get("outputs") or cell.get("execution_count")):
                dirty.append(f"{path.relative_to(root)} cell {i}")
    assert not dirty, (
        "notebooks with outputs or execution counts (clear them before committing): "
        + ", ".join(dirty)
    )


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_ruff(root, command):
    result = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "."], cwd=root, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_readme_commands_are_what_ci_runs(root):
    readme = (root / "README.md").read_text()
    assert "make book" in readme and "make test" in readme
    ci = (root / ".ci" / "run").read_text()
    commands = [
        line.strip()
        for line in ci.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    assert "make test" in commands, "CI must call the README's test command"
    assert not any("pytest" in c for c in commands), "CI calls the README's command, nothing else"


def test_torch_is_the_pinned_cpu_build():
    import torch

    assert torch.__version__.startswith("2.13.0"), torch.__version__
