"""Name the mistake: when a test cell fails, say which known mistake the student's code makes.

Every graded test cell runs its checks inside ``diagnose``::

    diagnose = diagnosis_for("04_dot_product_attention", globals())   # in the set-up cell

    with diagnose("scaled_dot_product_attention"):                   # in a test cell
        output, weights = scaled_dot_product_attention(Q, K, V)
        check_close(weights, expected, "weights")

While the block runs, every call of the named function (or of the named module's methods,
its construction included) is recorded: the arguments, the random state and the result.
When the block fails, each catalogued mistake of that exercise (``autograder/mistakes/``)
is built from the solution cell with the mistake's edit and run on the recorded inputs.
A mistake that gives the same result as the student's code on *every* recorded call (the
same values within tolerance, the same exception when the student's code raised) is named
in the failure message, with a tag the instructor's report counts::

    AssertionError: weights differs from the expected values ...
    Diagnosis: your scaled_dot_product_attention behaves like a known mistake on every
    input this test gave it: the scores are not divided by sqrt(d_k). [known mistake: no-scaling]

When the student's code raised an error (not a failed check), the message also says which
exercise raised and what it was given. Where no mistake matches, the message stays as it
was: a wrong answer outside the catalogue never gets a diagnosis.

The diagnosis only reads: it never turns a failure into a pass, and where it cannot work
(no solution notebook beside the package, a mistake that no longer applies) it says
nothing.
"""

import contextlib
import copy
import dataclasses
import inspect
import io
import json
import linecache
import math
import sys
import types
from collections.abc import Callable
from functools import cache, wraps
from pathlib import Path

import torch
from torch import nn
from torch.utils._pytree import tree_leaves

from autograder.cells import grade_id, is_solution
from autograder.chapters import INSTALLED_ROOT
from autograder.mistakes import Mistake, apply, catalogue
from autograder.scan import FORBIDDEN, scan_cell

ATOL, RTOL = 1e-5, 1e-4


# ---------------------------------------------------------------- what a test gave the code


@dataclasses.dataclass
class Call:
    """One recorded call of the watched code."""

    name: str  # "scaled_dot_product_attention", or "SelfAttention.__init__" / ".forward"
    args: tuple
    kwargs: dict
    rng: torch.Tensor  # torch's random state before the call
    grad: bool  # was autograd on
    namespace: dict  # the notebook's names at the time of the call
    method: str | None = None  # a module's method; None for a function
    init: tuple | None = None  # (args, kwargs) the module was built with
    state: dict | None = None  # the module's parameters and buffers at the call
    training: bool = False
    output: object = None
    error: BaseException | None = None
    signature: inspect.Signature | None = None


def _copy(x):
    """A copy of ``x`` that later in-place changes cannot alter (tensors and generators are
    copied, and so is a plain object that holds state, such as a KV cache handed to a layer,
    so that a replay starts from its state at the call; modules, functions and classes are
    kept by reference)."""
    if isinstance(x, torch.Tensor):
        c = x.detach().clone()
        return c.requires_grad_() if x.requires_grad and c.is_floating_point() else c
    if isinstance(x, torch.Generator):
        g = torch.Generator(device=x.device)
        g.set_state(x.get_state())
        return g
    if isinstance(x, list):
        return [_copy(v) for v in x]
    if isinstance(x, tuple):
        copied = [_copy(v) for v in x]
        return type(x)(*copied) if hasattr(x, "_fields") else tuple(copied)
    if isinstance(x, dict):
        return {k: _copy(v) for k, v in x.items()}
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        try:
            return dataclasses.replace(
                x, **{f.name: _copy(getattr(x, f.name)) for f in dataclasses.fields(x) if f.init}
            )
        except (TypeError, ValueError):
            return x
    if _holds_state(x):
        try:
            return copy.deepcopy(x)
        except Exception:
            return x
    return x


def _holds_state(x) -> bool:
    """An instance of a plain class (not a module, a function, a class or a builtin) with
    attributes of its own: a cache, a counter."""
    if isinstance(x, nn.Module | type | types.FunctionType | types.MethodType | types.ModuleType):
        return False
    return type(x).__module__ != "builtins" and bool(getattr(x, "__dict__", None))


def _state(module: nn.Module) -> dict:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _reaches(module: nn.Module, output) -> tuple | None:
    """For each tensor of the output, the names of the module's parameters that its
    gradient reaches (a ``.detach()`` or a ``torch.no_grad()`` changes no value, only
    this). None when the output carries no gradient. Uses ``autograd.grad``, so no
    parameter's ``.grad`` is touched."""
    named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
    tensors = [t for t in tree_leaves(output) if isinstance(t, torch.Tensor)]
    if not named or not any(t.requires_grad for t in tensors):
        return None
    reached = []
    for t in tensors:
        if not t.requires_grad:
            reached.append(frozenset())
            continue
        # A fixed random projection, not a plain sum: a softmax's outputs sum to one, so
        # the gradient of their sum is zero (up to rounding) whatever they depend on.
        probe = torch.randn(t.shape, generator=torch.Generator().manual_seed(0))
        grads = torch.autograd.grad(
            (t.float() * probe).sum(),
            [p for _, p in named],
            allow_unused=True,
            retain_graph=True,
        )
        reached.append(
            frozenset(
                n
                for (n, _), g in zip(named, grads, strict=True)
                if g is not None and bool(g.abs().max() > 1e-6)
            )
        )
    return tuple(reached)


class _Recorder:
    """Swaps the watched names of a notebook for recording versions, and back."""

    def __init__(self, namespace: dict, names: tuple[str, ...]):
        self.namespace, self.names = namespace, names
        self.calls: list[Call] = []
        self.saved: dict[str, object] = {}
        self._snapshot: dict | None = None

    def snapshot(self) -> dict:
        """The notebook's names now (shared between calls while nothing changed)."""
        current = self._snapshot
        if (
            current is None
            or len(current) != len(self.namespace)
            or any(current.get(k, current) is not v for k, v in self.namespace.items())
        ):
            self._snapshot = dict(self.namespace)
        return self._snapshot

    def __enter__(self):
        for name in self.names:
            original = self.namespace.get(name)
            if isinstance(original, type) and issubclass(original, nn.Module):
                self.saved[name] = original
                self.namespace[name] = self._watch_module(original, name)
            elif inspect.isfunction(original):
                self.saved[name] = original
                self.namespace[name] = self._watch_function(original, name)
        return self

    def __exit__(self, *exc):
        for name, original in self.saved.items():
            self.namespace[name] = original
        return False

    def _run(self, call: Call, fn: Callable, args, kwargs):
        self.calls.append(call)
        try:
            output = fn(*args, **kwargs)
        except BaseException as error:
            call.error = error
            raise
        call.output = _copy(output)
        return output

    def _new_call(self, name, args, kwargs, **more) -> Call:
        return Call(
            name,
            _copy(args),
            _copy(kwargs),
            torch.get_rng_state(),
            torch.is_grad_enabled(),
            self.snapshot(),
            **more,
        )

    def _watch_function(self, fn: Callable, name: str) -> Callable:
        recorder = self

        @wraps(fn)
        def watched(*args, **kwargs):
            call = recorder._new_call(name, args, kwargs, signature=_signature(fn))
            return recorder._run(call, fn, args, kwargs)

        return watched

    def _watch_module(self, cls: type, name: str) -> type:
        """A subclass of the student's module that records its construction and every call
        of the methods its class defines (``forward``, ``encode``, ...)."""
        recorder = self
        methods = [
            m
            for m, v in vars(cls).items()
            if inspect.isfunction(v) and (m == "forward" or not m.startswith("_"))
        ]

        def __init__(self, *args, **kwargs):
            call = recorder._new_call(
                f"{name}.__init__", args, kwargs, method="__init__", signature=_signature(cls)
            )
            recorder._run(call, lambda *a, **k: cls.__init__(self, *a, **k), args, kwargs)
            call.output = _state(self)
            self.__dict__["_diagnosis_init"] = (call.args, call.kwargs)

        def method(m: str):
            def watched(self, *args, **kwargs):
                call = recorder._new_call(
                    f"{name}.{m}",
                    args,
                    kwargs,
                    method=m,
                    init=self.__dict__.get("_diagnosis_init"),
                    state=_state(self),
                    training=self.training,
                    signature=_signature(getattr(cls, m), skip_self=True),
                )
                return recorder._run(call, getattr(cls, m).__get__(self), args, kwargs)

            return watched

        body = {"__init__": __init__, "__doc__": cls.__doc__, "__module__": cls.__module__}
        body.update({m: method(m) for m in methods})
        watched = type(cls.__name__, (cls,), body)
        watched.__qualname__ = cls.__qualname__
        return watched


def _signature(fn, skip_self: bool = False) -> inspect.Signature | None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    if skip_self:
        sig = sig.replace(parameters=list(sig.parameters.values())[1:])
    return sig


# ---------------------------------------------------------------- the mistakes, replayed


def _same(a, b) -> bool:
    """Equal within the checks' tolerances, recursively (tensors also by shape, dtype kind and
    whether they carry a gradient)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.shape != b.shape or a.is_floating_point() != b.is_floating_point():
            return False
        if a.requires_grad != b.requires_grad or (a.dtype == torch.bool) != (b.dtype == torch.bool):
            return False
        a, b = a.detach().double().cpu(), b.detach().double().cpu()
        return bool(torch.isclose(a, b, atol=ATOL, rtol=RTOL, equal_nan=True).all())
    if isinstance(a, nn.Module) or isinstance(b, nn.Module):
        # a module an exercise builds (chapter 09's convolution): the same layer (its repr
        # gives its sizes, stride and padding) with the same weights
        return type(a) is type(b) and repr(a) == repr(b) and _same(a.state_dict(), b.state_dict())
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if dataclasses.is_dataclass(a) and dataclasses.is_dataclass(b):
        return type(a).__name__ == type(b).__name__ and _same(
            [getattr(a, f.name) for f in dataclasses.fields(a)],
            [getattr(b, f.name) for f in dataclasses.fields(b)],
        )
    if isinstance(a, bool | int | float) and isinstance(b, bool | int | float):
        return math.isclose(a, b, rel_tol=RTOL, abs_tol=ATOL) or (a != a and b != b)
    try:
        return bool(a == b)
    except Exception:
        return False


def _course_root() -> Path | None:
    """The folder with ``solutions/``: beside the installed package, or above the working
    directory (a student working in a clone of the course)."""
    for folder in (INSTALLED_ROOT, *Path.cwd().resolve().parents):
        if (folder / "solutions").is_dir():
            return folder
    return None


@cache
def _solution_cells(chapter: str) -> dict[str, str]:
    """grade id -> source of each solution cell of the chapter ({} when not found)."""
    root = _course_root()
    path = root / "solutions" / chapter / f"{chapter}.ipynb" if root else None
    if path is None or not path.is_file():
        return {}
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    out = {}
    for cell in cells:
        if is_solution(cell) and cell["cell_type"] == "code":
            source = cell["source"]
            out[grade_id(cell)] = "".join(source) if isinstance(source, list) else source
    return out


def _defines(source: str) -> set[str]:
    import ast

    try:
        body = ast.parse(source).body
    except SyntaxError:
        return set()
    return {n.name for n in body if isinstance(n, ast.FunctionDef | ast.ClassDef)}


def _private(x):
    """A deep copy where one can be made (modules handed to a constructor, such as a
    localisation network, are then not changed by the replay), else ``_copy``."""
    try:
        return copy.deepcopy(x)
    except Exception:
        return _copy(x)


@contextlib.contextmanager
def _names_as(live: dict | None, names: dict):
    """Within the block, ``live`` (a notebook's globals) holds exactly ``names``."""
    if live is None:
        yield
        return
    saved = dict(live)
    live.clear()
    live.update(names)
    try:
        yield
    finally:
        live.clear()
        live.update(saved)


class _Replay:
    """Runs a version of the exercise on the recorded calls: a mistake or the solution
    (``source``, the cell's code), or the student's own code (``originals``)."""

    def __init__(
        self, source: str | None = None, originals: dict | None = None, live: dict | None = None
    ):
        self.source, self.originals = source, originals or {}
        # Code defined in the notebook (the student's, and helpers that a replayed cell calls)
        # looks its names up in the notebook's own namespace, ``live``: while a call is
        # replayed, that namespace holds the replay's names, as they were at the call.
        self.live = live
        self.built: dict[int, dict] = {}  # id(namespace snapshot) -> namespace with the code

    def namespace(self, snapshot: dict) -> dict:
        key = id(snapshot)
        if key not in self.built:
            ns = dict(snapshot)
            ns.update(self.originals)
            if self.source is not None:
                with contextlib.redirect_stdout(io.StringIO()):
                    exec(compile(self.source, "<known mistake>", "exec"), ns)
            self.built[key] = ns
        return self.built[key]

    def run(self, call: Call):
        """What the mistaken code gives on ``call``: ("ok", output) or ("error", exception)."""
        owner = call.name.split(".")[0]
        names = self.namespace(call.namespace)
        target = names[owner]
        args, kwargs = _copy(call.args), _copy(call.kwargs)
        try:
            with (
                torch.set_grad_enabled(call.grad),
                contextlib.redirect_stdout(io.StringIO()),
                _names_as(self.live, names),
            ):
                if call.method is None:
                    torch.set_rng_state(call.rng)
                    return "ok", target(*args, **kwargs)
                if call.method == "__init__":
                    torch.set_rng_state(call.rng)
                    return "ok", _state(target(*args, **kwargs))
                init_args, init_kwargs = _private(call.init) if call.init else ((), {})
                module = target(*init_args, **init_kwargs)
                module.load_state_dict(call.state)
                module.train(call.training)
                torch.set_rng_state(call.rng)  # the same dropout masks as the student's call
                output = getattr(module, call.method)(*args, **kwargs)
                return "ok", (output, _reaches(module, output))
        except Exception as error:
            return "error", error


def _matches(
    replay: _Replay, calls: list[Call], final: BaseException, reaches: list | None
) -> bool:
    """Does the mistake give what the student's code gave, on every recorded call? For a
    module, also: does each output's gradient reach the same parameters (``reaches``, from
    replaying the student's own code the same way)?"""
    for i, call in enumerate(calls):
        kind, result = replay.run(call)
        if call.error is not None:
            if kind != "error" or type(result) is not type(call.error):
                return False
            # the error that ended the test must be the same error, message and all; an
            # error the test expected (and caught) may word its message differently
            if call.error is final and str(result) != str(call.error):
                return False
        elif kind != "ok":
            return False
        elif call.method not in (None, "__init__"):
            output, reached = result
            if not _same(output, call.output) or reached != reaches[i]:
                return False
        elif not _same(result, call.output):
            return False
    return True


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {str(value.dtype).removeprefix('torch.')} tensor of shape {tuple(value.shape)}"
    if isinstance(value, nn.Module):
        return f"a {type(value).__name__}"
    if isinstance(value, list | tuple) and len(value) > 6:
        return f"a {type(value).__name__} of {len(value)} items"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _given(call: Call) -> str:
    try:
        bound = call.signature.bind(*call.args, **call.kwargs) if call.signature else None
    except TypeError:
        bound = None
    if bound is None:
        parts = [_describe(a) for a in call.args]
        parts += [f"{k}={_describe(v)}" for k, v in call.kwargs.items()]
    else:
        parts = [f"{k} = {_describe(v)}" for k, v in bound.arguments.items()]
    return ", ".join(parts) if parts else "no arguments"


def _add_to_message(error: BaseException, text: str) -> None:
    """Append ``text`` to the error's message (what the notebook and the feedback show)."""
    if error.args and isinstance(error.args[0], str) and str(error) == error.args[0]:
        error.args = (f"{error.args[0]}\n{text}", *error.args[1:])
    elif not error.args:
        error.args = (text,)
    else:
        error.add_note(text)


# ---------------------------------------------------------------- the rule, before grading


def _cell_source(obj) -> str | None:
    """The source of the whole notebook cell that defined ``obj`` (a function, or a class
    through its methods), from the cache in which IPython keeps every cell it ran; None
    when it cannot be found (code built by ``exec``, say)."""
    functions = [obj] if inspect.isfunction(obj) else []
    if isinstance(obj, type):
        functions = [inspect.unwrap(f) for f in vars(obj).values() if inspect.isfunction(f)]
    for function in functions:
        code = getattr(function, "__code__", None)
        if isinstance(code, types.CodeType):
            lines = linecache.getlines(code.co_filename)
            if lines:
                return "".join(lines)
    return None


def forbidden_calls(chapter: str, namespace: dict, names: tuple[str, ...]) -> list[str]:
    """What the grader's scan (``autograder/scan.py``) will say of the exercises that define
    ``names``, for the one rule that costs points although the tests may pass: calling the
    operator the exercise asks the student to write (``FORBIDDEN``). The same scan, run in
    the student's kernel, so that the rule is learned before handing in."""
    exercises = FORBIDDEN.get(chapter, {})
    cells = _solution_cells(chapter)
    aliases = {
        name: value.__name__
        for name, value in namespace.items()
        if isinstance(value, types.ModuleType)
    }  # ``F`` -> torch.nn.functional, as the set-up cell imported it
    found = []
    for name in names:
        source = _cell_source(namespace.get(name))
        if source is None:
            continue
        for exercise, operators in exercises.items():
            if operators and name in _defines(cells.get(exercise, "")):
                flags = scan_cell(chapter, exercise, source, dict(aliases), forbidden=operators)
                found += [
                    f"your {name} {f.message.replace('uses', 'calls', 1)} (line {f.line} of its "
                    "cell). The tests may pass, but when your notebook is graded this exercise is "
                    "flagged for review and its points are withheld until your instructor has "
                    "looked at it: write it from the equation instead."
                    for f in flags
                    if f.rule == "operator"
                ]
    return found


class Diagnosis:
    """``with diagnose(name, ...)``: see the module's docstring. On entering, it also warns
    (on standard error) when the watched code calls the operator its exercise asks for."""

    def __init__(self, chapter: str, namespace: dict, names: tuple[str, ...]):
        self.chapter, self.namespace, self.names = chapter, namespace, names
        self.recorder = _Recorder(namespace, names)

    def __enter__(self):
        try:
            warnings = forbidden_calls(self.chapter, self.namespace, self.names)
        except Exception:  # a warning must never stop a test
            warnings = []
        for warning in warnings:
            print(f"Warning: {warning}", file=sys.stderr)
        self.recorder.__enter__()
        return self

    def __exit__(self, kind, error, traceback):
        self.recorder.__exit__()
        if error is None or not isinstance(error, Exception):
            return False  # passed, or interrupted: nothing to say
        if isinstance(error, NotImplementedError):
            return False  # the exercise is not done yet; its message says so
        rng = torch.get_rng_state()
        try:
            text = self.explain(error)
        except Exception:  # the diagnosis must never hide the student's failure
            text = None
        finally:
            torch.set_rng_state(rng)
        if text:
            _add_to_message(error, text)
        return False  # never turns a failure into a pass

    def known_mistakes(self) -> list[Mistake]:
        cells = _solution_cells(self.chapter)
        return [
            m
            for m in catalogue(self.chapter)
            if m.cell in cells and _defines(cells[m.cell]) & set(self.names)
        ]

    def matching(self, error: BaseException) -> list[Mistake]:
        """The catalogued mistakes that behave like the student's code on every recorded call."""
        calls = self.recorder.calls
        if not calls:
            return []
        cells = _solution_cells(self.chapter)
        mistakes = self.known_mistakes()
        # Where the solution itself gives what the student's code gave (the failure comes
        # from elsewhere: a missing name, another exercise), no mistake can be blamed.
        if not mistakes:
            return []
        student = _Replay(originals=self.recorder.saved, live=self.namespace)
        reaches = []
        for call in calls:
            kind, result = (None, None)
            if call.method not in (None, "__init__") and call.error is None:
                kind, result = student.run(call)
            reaches.append(result[1] if kind == "ok" else None)
        for cell in {m.cell for m in mistakes}:
            if _matches(_Replay(cells[cell], live=self.namespace), calls, error, reaches):
                return []
        found = []
        for entry in mistakes:
            try:
                replay = _Replay(apply(cells[entry.cell], entry), live=self.namespace)
            except ValueError:
                continue  # the catalogue no longer fits the solution; the suite says so
            if _matches(replay, calls, error, reaches):
                found.append(entry)
        return found

    def explain(self, error: BaseException) -> str | None:
        lines = []
        raised = [c for c in self.recorder.calls if c.error is error]
        if raised and not isinstance(error, AssertionError):
            call = raised[-1]  # the innermost watched call the error came out of
            lines.append(
                f"Your {call.name} raised {type(error).__name__} when it was given {_given(call)}."
            )
        found = self.matching(error)
        exercise = " / ".join(self.names)
        if len(found) == 1:
            lines.append(
                f"Diagnosis: your {exercise} behaves like a known mistake on every input this "
                f"test gave it: {found[0].says}. {found[0].tag}"
            )
        elif found:
            lines.append(
                f"Diagnosis: your {exercise} behaves like these known mistakes on every input "
                "this test gave it: " + "; or ".join(f"{m.says} {m.tag}" for m in found) + "."
            )
        elif lines and isinstance(error, RuntimeError | ValueError | IndexError):
            lines.append(
                "Likely cause: compare the shapes above with those in the exercise's docstring, "
                "and check that each operation combines the axes it should (a matrix product "
                "@ or an elementwise *, which dimension a softmax or a sum runs over)."
            )
        return "\n".join(lines) or None


def diagnosis_for(chapter: str, namespace: dict) -> Callable[..., Diagnosis]:
    """The ``diagnose`` of a chapter's notebook: ``diagnose("name", ...)`` watches those names
    of ``namespace`` (the notebook's ``globals()``) for the length of a ``with`` block."""
    catalogue(chapter)  # an unknown chapter fails here, at set-up

    def diagnose(*names: str) -> Diagnosis:
        if not names or not all(isinstance(n, str) for n in names):
            raise TypeError('diagnose takes the names of the code to watch, e.g. diagnose("glu")')
        return Diagnosis(chapter, namespace, names)

    return diagnose
