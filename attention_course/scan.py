"""Read a submission before it runs: what in its code needs an instructor's eye.

The tests run in the same kernel as the student's code, so code can pass them without
solving the exercise. The cheap ways are visible in the source, and this scan marks a
submission *flagged for review* when a solution cell

- uses the course's reference implementations (``autograder``): the answer key;
- calls the very PyTorch operator its exercise asks the student to write
  (``F.scaled_dot_product_attention`` in chapter 04's attention, ``F.glu`` in chapter 03's
  gate, ``F.affine_grid`` and ``F.grid_sample`` in chapter 07, ``nn.MultiheadAttention``,
  ``nn.TransformerEncoderLayer``, ...);
- redefines what the tests rely on: ``torch.allclose``, ``torch.testing.assert_close``,
  ``torch.equal``, ``torch.Tensor.__eq__`` or any attribute of ``torch``, the course's
  checks (``check_close``, ``diagnose``, ...), ``print`` or ``builtins``, ``sys.excepthook``,
  an IPython exception handler (``set_custom_exc``), or reaches them through ``setattr``,
  ``globals()`` or ``__builtins__``;
- writes files or removes them (``open(..., "w")``, ``Path.write_text``, ``os.remove``,
  ``shutil.rmtree``, ...);
- mentions the protocol by which hidden tests hand values out for the check outside the
  kernel (``hand_out``, ``attention_course.handout``, its MIME type,
  ``publish_display_data``, ``display_pub``): only the tests hand values out, so a solution
  cell that does is forging them (``autograder/outside.py``).

The same rules apply to every code cell the student added (or changed among the release's
plain code cells): such a cell's flag counts against the exercise above it (the first one
when it sits above them all), and its use of an operator an exercise asks for against that
exercise, wherever the cell sits (a helper above the exercise that calls it, say).

A flag is a reason to look, not a verdict: the grader withholds the points of a flagged
exercise until the instructor accepts it (see the instructor guide). What the scan cannot
see (code built from strings and ``exec``, obfuscated imports) it flags as such: a
solution cell has no reason to call ``exec``, ``eval``, ``compile`` or ``__import__``.
"""

import ast
from dataclasses import dataclass

from attention_course.cells import grade_id, is_locked, is_solution

# The operator an exercise replaces, by chapter and solution cell (grade id). A name is
# resolved through every import of the notebook (the set-up cell's ``import
# torch.nn.functional as F`` included) and compared in one spelling (:func:`_canonical`):
# ``F.glu``, ``torch.nn.functional.glu``, ``nn.functional.glu``, ``G.glu`` after ``import
# torch.nn.functional as G`` and ``g`` after ``from torch.nn.functional import glu as g`` are
# all ``functional.glu``; ``torch.nn.GLU`` and ``tnn.GLU`` after ``from torch import nn as
# tnn`` are ``nn.GLU``.
FORBIDDEN: dict[str, dict[str, tuple[str, ...]]] = {
    "03_convs2s": {
        "glu": ("functional.glu", "F.glu", "nn.GLU"),
        "causal_conv": (),
        "multi_step_attention": ("functional.scaled_dot_product_attention",),
    },
    "04_dot_product_attention": {
        "scaled_dot_product_attention": (
            "functional.scaled_dot_product_attention",
            "F.scaled_dot_product_attention",
            "nn.MultiheadAttention",
        ),
        "self_attention": ("nn.MultiheadAttention",),
    },
    "05_multi_head_attention": {
        "multi_head_attention": (
            "nn.MultiheadAttention",
            "functional.multi_head_attention_forward",
        ),
        "blocked_attention": ("functional.scaled_dot_product_attention",),
    },
    "06_transformer": {
        "encoder_layer": ("nn.TransformerEncoderLayer", "nn.TransformerEncoder"),
        "decoder_layer": ("nn.TransformerDecoderLayer", "nn.TransformerDecoder"),
        "transformer": (
            "nn.Transformer",
            "nn.TransformerEncoder",
            "nn.TransformerDecoder",
            "nn.TransformerEncoderLayer",
            "nn.TransformerDecoderLayer",
        ),
    },
    "07_spatial_transformer": {
        "affine_grid": ("functional.affine_grid", "F.affine_grid"),
        "bilinear_sample": ("functional.grid_sample", "F.grid_sample"),
        "spatial_transformer": ("functional.affine_grid", "F.affine_grid", "F.grid_sample"),
    },
    "08_language_models": {
        "grouped_query_attention": (
            "functional.scaled_dot_product_attention",
            "nn.MultiheadAttention",
        ),
    },
    "09_vision_transformer": {
        "patchify": ("functional.unfold", "F.unfold", "nn.Unfold"),
    },
    "10_attention_since_2023": {
        "latent_attention": (
            "functional.scaled_dot_product_attention",
            "nn.MultiheadAttention",
        ),
    },
}

# Names the tests call: a solution cell that binds one of them changes the tests.
TEST_NAMES = frozenset(
    {
        "check_tensor",
        "check_shape",
        "check_dtype",
        "check_close",
        "check_rows_sum_to_one",
        "check_masked_out",
        "check_allocates_less_than",
        "largest_allocation",
        "diagnose",
        "diagnosis_for",
        "reference_for",
        "recorded",
        "print",
        "torch",
        "F",
        "nn",
        "math",
        "AssertionError",
        "isinstance",
        "len",
        "abs",
        "all",
        "any",
    }
)
# The set-up cell's recorded reference (attention_course/recorded.py): what the visible tests
# compare with. A solution that asks it copies the answer for the cases the tests record.
RECORDED_NAMES = frozenset({"recorded", "recorded_values"})
MODULES_OF_TESTS = frozenset({"torch", "builtins", "sys", "math", "F", "nn", "np", "numpy"})
HIDDEN_ACCESS = frozenset({"exec", "eval", "compile", "__import__", "globals", "setattr"})
FILE_WRITES = frozenset(
    {
        "write_text",
        "write_bytes",
        "unlink",
        "rmdir",
        "remove",
        "rmtree",
        "rename",
        "replace",
        "makedirs",
        "mkdir",
        "touch",
        "system",
        "Popen",
        "run",
    }
)

# The handout protocol (attention_course/handout.py): names that publish a handout, and
# strings found in its module's name and its MIME type.
HANDOUT_NAMES = frozenset({"hand_out", "publish_display_data", "display_pub"})
HANDOUT_STRINGS = ("attention_course.handout", "attention-course.handout")


@dataclass(frozen=True)
class Flag:
    cell: str  # grade id of the solution cell
    line: int  # line in the cell, from 1
    rule: str  # "reference", "operator", "redefines", "files", "hidden", "handout"
    message: str

    def __str__(self) -> str:
        return f"{self.cell}, line {self.line}: {self.message}"


def _dotted(node: ast.AST) -> str:
    """``torch.nn.functional.glu`` for the expression ``torch.nn.functional.glu``."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    elif isinstance(node, ast.Call):
        parts.append(_dotted(node.func) + "()")
    return ".".join(reversed(parts))


def _canonical(dotted: str) -> str:
    """One spelling of a resolved dotted name: ``torch.`` dropped, ``nn.functional`` and a
    leading ``F`` (the course's name for it) as ``functional``."""
    dotted = dotted.removeprefix("torch.")
    dotted = dotted.replace("nn.functional.", "functional.")
    if dotted.startswith("F."):
        dotted = "functional." + dotted[2:]
    return dotted


def _matches(dotted: str, pattern: str) -> bool:
    dotted, pattern = _canonical(dotted), _canonical(pattern)
    return dotted == pattern or dotted.endswith("." + pattern)


class _Scanner(ast.NodeVisitor):
    def __init__(self, cell: str, forbidden: tuple[str, ...], aliases: dict[str, str]):
        self.cell, self.forbidden = cell, forbidden
        self.flags: list[Flag] = []
        self.aliases = aliases  # name bound by an import -> dotted origin, across cells

    def flag(self, node: ast.AST, rule: str, message: str) -> None:
        self.flags.append(Flag(self.cell, getattr(node, "lineno", 0), rule, message))

    def _origin(self, dotted: str) -> str:
        head, _, rest = dotted.partition(".")
        base = self.aliases.get(head, head)
        return f"{base}.{rest}" if rest else base

    # imports ---------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.aliases[alias.asname or alias.name.split(".")[0]] = alias.name
            self._check_module(node, alias.name)
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        self._check_module(node, module)
        for alias in node.names:
            full = f"{module}.{alias.name}"
            self.aliases[alias.asname or alias.name] = full
            self._check_operator(node, full)
            if not _mentions_handout(module):
                self._check_handout(node, full)
        self.generic_visit(node)

    def _check_module(self, node: ast.AST, module: str) -> None:
        if module == "autograder" or module.startswith("autograder."):
            self.flag(node, "reference", f"imports {module}: the course's reference code")
        if module == "attention_course.recorded":
            self.flag(node, "reference", f"imports {module}: the reference's recorded answers")
        self._check_handout(node, module)

    def _check_handout(self, node: ast.AST, text: str) -> None:
        """Flag a mention of the handout protocol (a name, a module, a string)."""
        last = text.rsplit(".", 1)[-1]
        if last in HANDOUT_NAMES or _mentions_handout(text):
            what = last if last in HANDOUT_NAMES else text
            self.flag(
                node,
                "handout",
                f"mentions {what!r}, the protocol by which hidden tests hand values out for "
                "the check outside the kernel: only the tests hand values out",
            )

    def _check_operator(self, node: ast.AST, dotted: str) -> None:
        for pattern in self.forbidden:
            if _matches(dotted, pattern):
                shown = _canonical(pattern).replace("functional.", "F.", 1)
                self.flag(
                    node, "operator", f"uses {shown}, the operator this exercise asks you to write"
                )
                return

    # uses ------------------------------------------------------------------------------
    def visit_Attribute(self, node: ast.Attribute) -> None:
        dotted = self._origin(_dotted(node))
        if dotted.startswith("autograder"):
            self.flag(node, "reference", f"uses {dotted}: the course's reference code")
        elif dotted.startswith("attention_course.recorded."):
            name = _dotted(node)
            self.flag(
                node,
                "reference",
                f"uses {name}, the reference's recorded answers to the tests: the answer key",
            )
        self._check_operator(node, dotted)
        if node.attr in HANDOUT_NAMES:
            self._check_handout(node, node.attr)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and _mentions_handout(node.value):
            self._check_handout(node, node.value[:80])

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in HANDOUT_NAMES:
            self._check_handout(node, node.id)
        if isinstance(node.ctx, ast.Load) and node.id in RECORDED_NAMES:
            self.flag(
                node,
                "reference",
                f"uses {node.id}, the reference's recorded answers to the tests: the answer key",
            )
        if isinstance(node.ctx, ast.Load) and node.id in self.aliases:
            origin = self.aliases[node.id]
            if "." in origin:
                self._check_operator(node, origin)
        if node.id == "__builtins__":
            self.flag(node, "redefines", "reaches __builtins__")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = _dotted(node.func)
        last = name.rsplit(".", 1)[-1]
        if name == "getattr" and len(node.args) > 1:
            attr = node.args[1]
            if isinstance(attr, ast.Constant) and isinstance(attr.value, str):
                self._check_operator(node, f"{self._origin(_dotted(node.args[0]))}.{attr.value}")
            else:
                self.flag(node, "hidden", "calls getattr with a computed name")
        if name in HIDDEN_ACCESS:
            self.flag(node, "hidden", f"calls {name}(): code the scan cannot read")
        if last == "set_custom_exc" or name.endswith("excepthook"):
            self.flag(node, "redefines", f"calls {name}: installs an exception handler")
        if name == "open" and _opens_for_writing(node):
            self.flag(node, "files", "opens a file for writing")
        elif last in FILE_WRITES and name.split(".")[0] in {"os", "shutil", "subprocess", "Path"}:
            self.flag(node, "files", f"calls {name}: changes files")
        elif last in {"write_text", "write_bytes", "unlink", "rmtree"}:
            self.flag(node, "files", f"calls {name}: changes files")
        self.generic_visit(node)

    # bindings --------------------------------------------------------------------------
    def _check_target(self, target: ast.AST) -> None:
        if isinstance(target, ast.Name) and target.id in TEST_NAMES:
            self.flag(target, "redefines", f"rebinds {target.id}, which the tests use")
        elif isinstance(target, ast.Attribute):
            dotted = self._origin(_dotted(target))
            if dotted.split(".")[0] in MODULES_OF_TESTS or dotted.startswith("sys."):
                self.flag(target, "redefines", f"assigns {dotted}, which the tests rely on")
        elif isinstance(target, ast.Subscript):
            base = _dotted(target.value)
            if base in {"globals()", "__builtins__", "sys.modules", "vars()"}:
                self.flag(target, "redefines", f"writes into {base}")
        elif isinstance(target, ast.Tuple | ast.List):
            for t in target.elts:
                self._check_target(t)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._check_target(target)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name in TEST_NAMES:
            self.flag(node, "redefines", f"defines {node.name}, which the tests use")
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if node.name in TEST_NAMES:
            self.flag(node, "redefines", f"defines {node.name}, which the tests use")
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        for name in node.names:
            if name in TEST_NAMES:
                self.flag(node, "redefines", f"declares {name} global, which the tests use")
        self.generic_visit(node)


def _mentions_handout(text: str) -> bool:
    return any(marker in text for marker in HANDOUT_STRINGS)


def _opens_for_writing(node: ast.Call) -> bool:
    mode = node.args[1] if len(node.args) > 1 else None
    for kw in node.keywords:
        if kw.arg == "mode":
            mode = kw.value
    if mode is None:
        return False
    if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
        return any(c in mode.value for c in "wax+")
    return True  # a mode the scan cannot read


def scan_cell(
    chapter: str,
    cell: str,
    source: str,
    aliases: dict[str, str] | None = None,
    forbidden: tuple[str, ...] | None = None,
) -> list[Flag]:
    """The flags of one solution cell (``cell`` is its grade id); ``aliases`` carries the
    names that earlier cells imported; ``forbidden``, the operators it must not call
    (default: its exercise's, ``FORBIDDEN``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []  # it fails its tests; nothing to review
    if forbidden is None:
        forbidden = FORBIDDEN.get(chapter, {}).get(cell, ())
    scanner = _Scanner(cell, forbidden, aliases if aliases is not None else {})
    scanner.visit(tree)
    unique = {(f.line, f.rule, f.message): f for f in scanner.flags}
    return sorted(unique.values(), key=lambda f: (f.line, f.rule))


ADDED = "in a code cell the student added below {above}: "


def scan_added_cell(
    chapter: str, above: str, source: str, aliases: dict[str, str] | None = None
) -> list[Flag]:
    """The flags of a code cell the student added below the exercise ``above``: every rule
    against ``above``, an operator an exercise asks for against that exercise."""
    aliases = aliases if aliases is not None else {}
    before = dict(aliases)  # the operator scans start from the same imports
    flags = scan_cell(chapter, above, source, aliases, forbidden=())
    for exercise, operators in FORBIDDEN.get(chapter, {}).items():
        found = scan_cell(chapter, exercise, source, dict(before), forbidden=operators)
        flags += [f for f in found if f.rule == "operator"]
    where = ADDED.format(above=above)
    return [Flag(f.cell, f.line, f.rule, where + f.message) for f in flags]


def imports_of(source: str, aliases: dict[str, str]) -> None:
    """Add the names that ``source`` (a cell the scan does not flag: the set-up cell, say)
    binds by importing to ``aliases``, as a scanned cell's imports are."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                aliases[alias.asname or alias.name.split(".")[0]] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module or ''}.{alias.name}"
        elif (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and _dotted(node.value.func) in RECORDED_NAMES
        ):
            # ``ref = recorded("attention")``: the reference's recorded answers
            for target in node.targets:
                if isinstance(target, ast.Name):
                    aliases[target.id] = "attention_course.recorded"


def _plain(source) -> str:
    return "\n".join(line.rstrip() for line in str(source).strip().splitlines())


def scan_notebook(nb, chapter: str, released=None, solution=None) -> list[Flag]:
    """The flags of every solution cell of a submitted notebook (an nbformat notebook),
    and of every code cell the student added: a code cell that is neither a solution cell,
    nor locked, nor one of the ``released`` notebook's cells as released. The names the
    instructor's cells import are followed; with the chapter's ``solution`` notebook, as
    they are when graded, hidden tests included (a solution that calls ``ref.x``, which only
    a hidden test binds, works when graded, and is flagged)."""
    instructors = set()
    if released is not None:
        instructors = {_plain(c.source) for c in released.cells if c.get("cell_type") == "code"}
    graded_as = {}
    if solution is not None:
        graded_as = {grade_id(c): c.source for c in solution.cells if is_locked(c) and grade_id(c)}
    code = [c for c in nb.cells if c.get("cell_type") == "code"]
    exercises = [grade_id(c) or "?" for c in code if is_solution(c)]
    flags: list[Flag] = []
    aliases: dict[str, str] = {}
    above = None
    for cell in code:
        if is_solution(cell):
            above = grade_id(cell) or "?"
            flags += scan_cell(chapter, above, cell.source, aliases)
        elif not is_locked(cell) and exercises and _plain(cell.source) not in instructors:
            flags += scan_added_cell(chapter, above or exercises[0], cell.source, aliases)
        else:  # the instructor's cells: not scanned, but what they import is followed
            imports_of(graded_as.get(grade_id(cell), cell.source), aliases)
    return flags
