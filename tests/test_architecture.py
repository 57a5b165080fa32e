"""Who may import whom, read from the source (pure AST, nothing imported or run).

- the student package ``attention_course`` imports nothing from the grader ``autograder``;
- notebooks import from ``autograder`` only :data:`autograder.NOTEBOOK_IMPORTS`, whose
  paths released notebooks depend on;
- the modules of ``autograder`` import one another without a cycle.
"""

import ast
import json
from pathlib import Path

from autograder import NOTEBOOK_IMPORTS

ROOT = Path(__file__).resolve().parents[1]
GRADER = "autograder"


def _imported(tree: ast.AST) -> list[tuple[str, list[str], int]]:
    """``(module, names, line)`` of every absolute import in ``tree``, functions' included:
    ``import a.b`` gives ``("a.b", [], line)``, ``from a import b, c`` ``("a", ["b", "c"],
    line)``. Relative imports are left out (:func:`_grader_graph` resolves its own)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, [], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, [alias.name for alias in node.names], node.lineno))
    return found


def _is_within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _notebook_trees(path: Path):
    """The parsed code cells of a notebook, IPython's ``%`` and ``!`` lines dropped; a cell
    that still does not parse is skipped."""
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
        try:
            yield ast.parse("\n".join(lines))
        except SyntaxError:
            continue


def test_the_student_package_imports_nothing_from_the_grader():
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sorted((ROOT / "attention_course").rglob("*.py"))
        for module, _, line in _imported(ast.parse(path.read_text()))
        if _is_within(module, GRADER)
    ]
    assert not found, (
        "attention_course is the students' package and must not import the grader (what the "
        "grader plugs in comes as an entry point, see attention_course/recorded.py):\n"
        + "\n".join(found)
    )


def test_notebooks_import_from_the_grader_only_what_they_may():
    notebooks = sorted(ROOT.glob("solutions/*/*.ipynb")) + sorted(ROOT.glob("notebooks/*/*.ipynb"))
    assert notebooks
    found = []
    for path in notebooks:
        for tree in _notebook_trees(path):
            for module, names, _ in _imported(tree):
                # `from autograder import reference` imports autograder.reference
                targets = [f"{module}.{name}" for name in names] if module == GRADER else [module]
                found += [
                    f"{path.relative_to(ROOT)} imports {target}"
                    for target in targets
                    if _is_within(target, GRADER)
                    and not any(_is_within(target, allowed) for allowed in NOTEBOOK_IMPORTS)
                ]
    assert not found, (
        f"notebooks may import from the grader only {', '.join(NOTEBOOK_IMPORTS)} (listed in "
        "autograder/__init__.py: released notebooks depend on their paths):\n"
        + "\n".join(sorted(set(found)))
    )


def _grader_modules() -> dict[str, Path]:
    """Every module of the grader by dotted name, a package by its ``__init__.py``."""
    modules = {}
    for path in (ROOT / GRADER).rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _grader_graph() -> dict[str, set[str]]:
    """Module -> the grader's modules it imports, anywhere in its file. ``from M import N``
    imports the module ``M.N`` when there is one, else ``M`` (``from autograder import X``
    with no module X is ``autograder/__init__.py``). Importing a submodule runs its
    packages' ``__init__.py`` first, but that edge is left out: a package that imports its
    own submodules would otherwise always be a cycle."""
    modules = _grader_modules()

    def nearest(name: str) -> str:  # the module itself, else its nearest package
        while name not in modules and "." in name:
            name = name.rsplit(".", 1)[0]
        return name

    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {nearest(alias.name) for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package, `level - 1` packages up
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    targets.add(full if full in modules else nearest(base))
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def _a_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or None (depth-first search)."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        if node in path:
            return path[path.index(node) :] + [node]
        if node in done:
            return None
        path.append(node)
        for target in sorted(graph[node]):
            if cycle := visit(target):
                return cycle
        path.pop()
        done.add(node)
        return None

    for node in sorted(graph):
        if cycle := visit(node):
            return cycle
    return None


def test_the_cycle_finder_finds_a_cycle_and_only_a_cycle():
    assert _a_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _a_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_grader_imports_its_modules_without_a_cycle():
    graph = _grader_graph()
    assert "autograder.chapters" in graph["autograder"]  # the graph sees the imports
    cycle = _a_cycle(graph)
    assert cycle is None, (
        "the grader's modules import one another in a cycle (imports inside functions "
        "count): " + " -> ".join(cycle)
    )
