"""Project hygiene: pins agree, notebooks carry no outputs, lint and format are clean,
the README's commands are the ones CI runs, the licence, citation and contributing guide
are there and agree with the project."""

import json
import re
import subprocess
import sys
import tomllib

import jsonschema
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


def _lock(root) -> str:
    return (root / "requirements.lock").read_text(encoding="utf-8")


def test_the_lock_satisfies_every_pin_of_pyproject(root):
    """Each pin of pyproject.toml is the lock's version, and the packages the lock says come
    from pyproject.toml are exactly its pins: a pin changed, added or removed without
    `make lock` fails here."""
    from packaging.requirements import Requirement

    from tools.lock import direct, locked, normalised

    lock = _lock(root)
    pins, versions = {}, locked(lock)
    for spec in map(Requirement, _pins_from_pyproject(root)):
        pins[normalised(spec.name)] = spec
    wrong = {
        name: (str(spec.specifier), versions.get(name))
        for name, spec in pins.items()
        if name not in versions or not spec.specifier.contains(versions[name], prereleases=True)
    }
    assert not wrong, f"pyproject.toml asks for another version than the lock holds: {wrong}"
    assert direct(lock) == set(pins), (
        f"only in pyproject.toml: {sorted(set(pins) - direct(lock))}; "
        f"locked as from pyproject.toml, no longer there: {sorted(direct(lock) - set(pins))}"
    )


def test_every_package_of_the_lock_has_hashes(root):
    blocks = re.split(r"\n(?=[A-Za-z0-9])", _lock(root))
    pins = [b for b in blocks if "==" in b.split("\n", 1)[0]]
    assert len(pins) > 100  # the whole environment, not only pyproject.toml's pins
    bare = [b.split("\n", 1)[0] for b in pins if "--hash=sha256:" not in b]
    assert not bare, f"locked without a hash: {bare}"


def test_the_lock_holds_the_advisories_floors(root):
    from packaging.version import Version

    from tools.lock import FLOORS, locked

    versions = locked(_lock(root))
    for name, floor in FLOORS.items():
        assert Version(versions[name]) >= Version(floor), (name, versions[name], floor)


def test_environment_yml_mirrors_the_lock(root):
    from tools.lock import NOT_IN_ENVIRONMENT, environment_yml, locked, normalised, release

    wanted = {
        f"{name}=={release(v)}"
        for name, v in locked(_lock(root)).items()
        if name not in NOT_IN_ENVIRONMENT
    }
    environment = {
        f"{normalised(p.split('==')[0])}=={p.split('==')[1]}" for p in _pins_from_environment(root)
    }
    assert environment == wanted, (
        f"only in the lock: {sorted(wanted - environment)}; "
        f"only in environment.yml: {sorted(environment - wanted)} (run `make lock`)"
    )
    text = (root / "environment.yml").read_text(encoding="utf-8")
    assert text == environment_yml(locked(_lock(root)))


def test_make_setup_installs_the_lock_with_its_hashes(root):
    makefile = (root / "Makefile").read_text()
    recipe = makefile[makefile.index("$(STAMP): pyproject.toml requirements.lock") :]
    recipe = recipe[: recipe.index("touch $(STAMP)")]
    assert "pip install --quiet --require-hashes -r requirements.lock" in recipe
    assert "pip install --quiet --no-deps -e ." in recipe  # nothing resolved beside the lock


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


def test_licence_citation_and_contributing_guide_are_there(root):
    missing = [
        n for n in ("LICENSE", "CITATION.cff", "CONTRIBUTING.md") if not (root / n).is_file()
    ]
    assert not missing, f"missing at the top level: {missing}"
    licence = (root / "LICENSE").read_text(encoding="utf-8")
    assert "MIT License" in licence, "LICENSE must carry the MIT licence's text (the code's)"
    assert "https://creativecommons.org/licenses/by/4.0/legalcode" in licence, (
        "LICENSE must point to CC BY 4.0's legal code (the text's and figures')"
    )


# The top-level keys of the Citation File Format 1.2.0, and those it requires.
# The Citation File Format's own JSON Schema, version 1.2.0 (published by the format's
# authors, https://citation-file-format.github.io/1.2.0/schema.json, CC BY 4.0).
CFF_SCHEMA = "tests/data/citation-file-format-1.2.0.schema.json"


def test_citation_cff_is_well_formed_and_agrees_with_the_project(root):
    """CITATION.cff is valid against the format's JSON Schema (jsonschema, draft 7, formats
    checked), and states the title, version, repository and licences the project states
    elsewhere."""
    text = (root / "CITATION.cff").read_text(encoding="utf-8")
    # YAML reads an unquoted date as a date; the schema (like cffconvert) wants its text
    cff = json.loads(json.dumps(yaml.safe_load(text), default=str))
    schema = json.loads((root / CFF_SCHEMA).read_text(encoding="utf-8"))
    validator = jsonschema.Draft7Validator(schema, format_checker=jsonschema.FormatChecker())
    errors = [
        f"{'/'.join(map(str, e.path)) or '(top)'}: {e.message}" for e in validator.iter_errors(cff)
    ]
    assert not errors, "CITATION.cff is not valid CFF 1.2.0:\n" + "\n".join(errors)
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert cff["version"] == project["version"], "CITATION.cff's version is pyproject.toml's"
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    assert cff["title"] == config["title"]
    assert cff["repository-code"] == config["repository"]["url"]
    assert sorted(cff["license"]) == ["CC-BY-4.0", "MIT"], "the two licences LICENSE states"


def test_contributing_names_only_make_targets_and_paths_that_exist(root):
    """Every `make X` in CONTRIBUTING.md is a target of the Makefile, every
    `python -m benchmarks.X` a script, and every path it names exists (placeholders such as
    `<id>` and the build's own output aside)."""
    text = (root / "CONTRIBUTING.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```\w*\n(.*?)^```", text, flags=re.M | re.S)
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"^```\w*\n.*?^```", "", text, flags=re.M | re.S))
    code = "\n".join(blocks + spans)
    targets = set(re.findall(r"^([\w-]+):", (root / "Makefile").read_text(), flags=re.M))
    named = set(re.findall(r"(?<![\w/.-])make ([\w-]+)", code))
    assert named, "CONTRIBUTING.md names no make command"
    assert named <= targets, f"not targets of the Makefile: {sorted(named - targets)}"
    scripts = set(re.findall(r"-m benchmarks\.(\w+)", code))
    missing = [s for s in scripts if not (root / "benchmarks" / f"{s}.py").is_file()]
    assert not missing, f"no such benchmark: {missing}"
    paths = {
        token
        for token in code.split()
        if re.fullmatch(r"[\w.-]+(/[\w.-]+)*/?", token)
        and ("/" in token or re.search(r"\.(py|md|yml|toml|cff|bib|ipynb|json)$", token))
        and not token.startswith(("_build", ".venv"))
    }
    assert len(paths) >= 20, sorted(paths)
    absent = sorted(p for p in paths if not (root / p).exists())
    assert not absent, f"CONTRIBUTING.md names paths that do not exist: {absent}"


def test_every_notebook_states_the_rule_on_help_from_ai_assistants(root):
    """The header of every student notebook says the rule, and AGENTS.md beside the
    notebooks tells an assistant the same (issue 35, part 7)."""
    agents = (root / "notebooks" / "AGENTS.md").read_text(encoding="utf-8")
    assert "Never write an exercise's code" in agents and "Explain, do not solve" in agents
    for path in sorted((root / "notebooks").glob("*/*.ipynb")):
        header = "".join(json.loads(path.read_text(encoding="utf-8"))["cells"][0]["source"])
        assert "**Help from AI assistants:**" in header and "`AGENTS.md`" in header, path
