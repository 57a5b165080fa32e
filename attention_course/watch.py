"""Watch the code a test calls, and run it again: what the diagnosis of a failing test reads.

Inside ``with diagnose("name")`` (:mod:`attention_course.diagnosis`) the notebook's names
are swapped for recording versions (:class:`Recorder`): every call of a watched function,
or of a watched module's methods (its construction included), is written down as a
:class:`Call` with its arguments, the random state, the module's parameters and the result.
:class:`Replay` runs a version of the code on those calls again: the student's own, or
(on the instructor's side) a catalogued mistake built from the solution cell.
"""

import ast
import contextlib
import copy
import dataclasses
import inspect
import io
import linecache
import math
import types
from collections.abc import Callable
from functools import wraps

import torch
from torch import nn
from torch.utils._pytree import tree_leaves

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
    # parameters of the module's recorded stand-ins (a test gave the module a layer of the
    # recorded reference, :class:`attention_course.recorded.Standin`): no gradient reaches
    # them in the kit, whatever the code
    standin: frozenset = frozenset()


def copy_value(x):
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
        return [copy_value(v) for v in x]
    if isinstance(x, tuple):
        copied = [copy_value(v) for v in x]
        return type(x)(*copied) if hasattr(x, "_fields") else tuple(copied)
    if isinstance(x, dict):
        return {k: copy_value(v) for k, v in x.items()}
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        try:
            return dataclasses.replace(
                x,
                **{f.name: copy_value(getattr(x, f.name)) for f in dataclasses.fields(x) if f.init},
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


def reaches(module: nn.Module, output) -> tuple | None:
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


class Recorder:
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
        call.output = copy_value(output)
        return output

    def _new_call(self, name, args, kwargs, **more) -> Call:
        return Call(
            name,
            copy_value(args),
            copy_value(kwargs),
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
                    standin=_standin_parameters(self),
                    signature=_signature(getattr(cls, m), skip_self=True),
                )
                return recorder._run(call, getattr(cls, m).__get__(self), args, kwargs)

            return watched

        body = {"__init__": __init__, "__doc__": cls.__doc__, "__module__": cls.__module__}
        body.update({m: method(m) for m in methods})
        watched = type(cls.__name__, (cls,), body)
        watched.__qualname__ = cls.__qualname__
        return watched


def _standin_parameters(module: nn.Module) -> frozenset:
    from attention_course.recorded import Standin

    return frozenset(
        f"{path}.{name}" if path else name
        for path, sub in module.named_modules()
        if isinstance(sub, Standin)
        for name, _ in sub.named_parameters()
    )


def _signature(fn, skip_self: bool = False) -> inspect.Signature | None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    if skip_self:
        sig = sig.replace(parameters=list(sig.parameters.values())[1:])
    return sig


# ---------------------------------------------------------------- the mistakes, replayed


def same(a, b) -> bool:
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
        return type(a) is type(b) and repr(a) == repr(b) and same(a.state_dict(), b.state_dict())
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if dataclasses.is_dataclass(a) and dataclasses.is_dataclass(b):
        return type(a).__name__ == type(b).__name__ and same(
            [getattr(a, f.name) for f in dataclasses.fields(a)],
            [getattr(b, f.name) for f in dataclasses.fields(b)],
        )
    if isinstance(a, bool | int | float) and isinstance(b, bool | int | float):
        return math.isclose(a, b, rel_tol=RTOL, abs_tol=ATOL) or (a != a and b != b)
    try:
        return bool(a == b)
    except Exception:
        return False


def defines(source: str) -> set[str]:
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
        return copy_value(x)


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


class Replay:
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
        args, kwargs = copy_value(call.args), copy_value(call.kwargs)
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
                return "ok", (output, reaches(module, output))
        except Exception as error:
            return "error", error


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {str(value.dtype).removeprefix('torch.')} tensor of shape {tuple(value.shape)}"
    if isinstance(value, nn.Module):
        return f"a {type(value).__name__}"
    if isinstance(value, list | tuple) and len(value) > 6:
        return f"a {type(value).__name__} of {len(value)} items"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def given(call: Call) -> str:
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


def add_to_message(error: BaseException, text: str) -> None:
    """Append ``text`` to the error's message (what the notebook and the feedback show)."""
    if error.args and isinstance(error.args[0], str) and str(error) == error.args[0]:
        error.args = (f"{error.args[0]}\n{text}", *error.args[1:])
    elif not error.args:
        error.args = (text,)
    else:
        error.add_note(text)


def cell_source(obj) -> str | None:
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
