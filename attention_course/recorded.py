r"""The reference's answers to a notebook's visible tests, recorded when the chapter is released.

A test compares your code with what the course's reference implementation gives on the same
inputs. The reference stays with the instructor: the kit holds only its answers to the
tests' own questions, recorded by ``python -m autograder record`` when the chapter is
released, in ``attention_course/data/recorded/<chapter>.pt``::

    recorded = recorded_values("04_dot_product_attention", kit="0.1.0")   # the set-up cell
    ref = recorded("attention")                                            # a test cell
    expected = ref.scaled_dot_product_attention(Q, K, V, mask)   # what the reference gave

Each call is looked up by its arguments (tensors within the checks' tolerances): a call the
release recorded returns the recorded result; any other call raises :class:`NotRecorded`, a
failed check. The recorded reference is not the reference: it answers only the calls the
release made, so calling it on other inputs (your own, or a test's that your code changed on
the way) is not supported. A class gives a stand-in module:
the recorded parameters under the reference's names (so a test can load them into your
layer, or count them), whose methods answer the recorded calls.

:func:`reference_for` swaps an earlier exercise of the notebook for the recorded reference
during a test, so that a mistake there costs points once: where the test's call was not
recorded (your code calls it differently), your own version answers.

The instructor's side records: with ``ATTENTION_COURSE_RECORD`` naming a file, the names
are the reference's own (found through the entry point ``reference`` of the group
:data:`GROUP`, which the course's ``autograder`` package declares; the kit has none), every
call is written down, and :func:`save_recording` writes the file.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import importlib
import math
import os
import types
from contextlib import contextmanager
from importlib.metadata import entry_points
from pathlib import Path

import torch
from torch import nn

from attention_course import __version__
from attention_course.runtime import RECORD_ENV

GROUP = "attention_course.instructor"
DATA = Path(__file__).resolve().parent / "data" / "recorded"
ATOL, RTOL = 1e-5, 1e-4


class NotRecorded(AssertionError):
    """A test asked the recorded reference for a call the release did not record."""


def quantised(value: float, step: float) -> float:
    """``value`` on a grid of relative ``step`` (0.1: neighbours 10 % apart): how a recorded
    value is kept where the visible test accepts that much (a measurement it compares with
    within 10 %), so that the recording is no more precise than the test. 0, infinities and
    NaN are kept as they are."""
    value = float(value)
    if value == 0 or not math.isfinite(value):
        return value
    grid = math.log1p(step)
    return math.copysign(math.exp(round(math.log(abs(value)) / grid) * grid), value)


def rounded(x, step: float):
    """Packed data with each number replaced by its :func:`quantised` value, tagged so that
    :func:`close` compares another number with it on the same grid."""
    if isinstance(x, bool) or x is None:
        return x
    if isinstance(x, int | float):
        return {"~": "rounded", "v": quantised(x, step), "step": step}
    if isinstance(x, list):
        return [rounded(v, step) for v in x]
    if isinstance(x, dict) and x.get("~") in (None, "tuple", "dict", "namedtuple"):
        return {k: rounded(v, step) if k == "v" or x.get("~") is None else v for k, v in x.items()}
    return x


def _close_rounded(a: dict, b) -> bool:
    """A rounded number (:func:`rounded`) against another: on the same grid, the same point."""
    if isinstance(b, dict) and b.get("~") == "rounded":
        return a["step"] == b["step"] and math.isclose(a["v"], b["v"], rel_tol=1e-9)
    if isinstance(b, bool) or not isinstance(b, int | float):
        return False
    return math.isclose(a["v"], quantised(b, a["step"]), rel_tol=1e-9) or (
        a["v"] != a["v"] and b != b
    )


class KitMismatch(RuntimeError):
    """The notebook comes from another release of the course than the installed kit."""


@functools.cache
def instructor_entry(name: str):
    """The object the instructor's package registers as ``name`` in :data:`GROUP`; None in the
    kit (no such entry point, or one whose package is not installed). Looked up once a
    process: reading every installed package's entry points takes about 25 ms, and a
    notebook's test cells ask again and again."""
    for entry in entry_points(group=GROUP, name=name):
        try:
            return entry.load()
        except ImportError:
            return None
    return None


# ---------------------------------------------------------------- values as plain data

_SIMPLE = (bool, int, float, str, type(None))


def _simple(v) -> bool:
    if isinstance(v, _SIMPLE):
        return True
    return isinstance(v, tuple) and all(isinstance(x, _SIMPLE) for x in v)


def _type_name(x) -> str:
    cls = x if isinstance(x, type) else type(x)
    return f"{cls.__module__}.{cls.__qualname__}"


def _module_tree(module: nn.Module) -> dict:
    """A module as data: its parameters and buffers by name, and for each submodule its class
    and plain attributes (what a ``torch.nn`` layer's forward reads)."""
    params = dict(module.named_parameters())
    tree = {}
    for path, sub in module.named_modules():
        attrs = {k: v for k, v in vars(sub).items() if _simple(v) and not k.startswith("_recorded")}
        unset = [k for k, v in sub._parameters.items() if v is None]  # Linear(bias=False)
        tree[path] = {"cls": _type_name(sub), "attrs": attrs, "unset": unset}
    return {
        "~": "module",
        "name": _type_name(module),
        "state": _state(module),
        "params": sorted(params),
        "grad": sorted(k for k, p in params.items() if p.requires_grad),
        "tree": tree,
    }


def pack(x, full: bool = False):
    """``x`` as data ``torch.load(weights_only=True)`` reads back: tensors, numbers, strings
    and containers, with a tag for the rest. Modules are kept whole when ``full`` (an output),
    else by class and state (an argument)."""
    if isinstance(x, torch.Tensor):
        return {"~": "tensor", "v": x.detach().clone(), "grad": x.requires_grad}
    if isinstance(x, nn.Module):
        if full:
            return _module_tree(x)
        name = x._recorded_type if isinstance(x, Standin) else _type_name(x)
        return {"~": "module", "name": name, "state": _state(x)}
    if isinstance(x, _SIMPLE):
        return x
    if isinstance(x, torch.dtype):
        return {"~": "dtype", "v": str(x).removeprefix("torch.")}
    if isinstance(x, torch.Size):
        return {"~": "tuple", "v": list(x)}
    if isinstance(x, torch.Generator):
        return {"~": "generator", "v": x.get_state()}
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return {
            "~": "namedtuple",
            "name": type(x).__name__,
            "fields": list(x._fields),
            "v": [pack(v, full) for v in x],
        }
    if isinstance(x, tuple):
        return {"~": "tuple", "v": [pack(v, full) for v in x]}
    if isinstance(x, list):
        return [pack(v, full) for v in x]
    if isinstance(x, dict):
        return {"~": "dict", "k": [pack(k) for k in x], "v": [pack(v, full) for v in x.values()]}
    if isinstance(x, set | frozenset):
        return {"~": "set", "v": [pack(v) for v in sorted(x)]}
    if isinstance(x, slice):
        return {"~": "slice", "v": [x.start, x.stop, x.step]}
    if isinstance(x, range):
        return {"~": "range", "v": [x.start, x.stop, x.step]}
    if isinstance(x, type | types.FunctionType | types.BuiltinFunctionType | functools.partial):
        return {"~": "callable", "name": getattr(x, "__qualname__", type(x).__name__)}
    if dataclasses.is_dataclass(x):
        fields = {f.name: pack(getattr(x, f.name), full) for f in dataclasses.fields(x)}
        return {"~": "object", "name": type(x).__name__, "v": fields}
    if hasattr(x, "__dict__"):
        fields = {k: pack(v, full) for k, v in vars(x).items() if not callable(v)}
        return {"~": "object", "name": type(x).__name__, "v": fields}
    return {"~": "repr", "v": repr(x)}


# A parameter larger than this is recorded by its shape alone: a test that only counts a
# layer's parameters (d_model = 512) must not put megabytes of numbers into the kit. A
# stand-in holds fixed numbers of that shape, and its calls compare shapes there.
BIG = 16384


def _state(module: nn.Module) -> dict:
    """The module's parameters and buffers as data (a big one by its shape)."""
    state = {}
    for k, v in module.state_dict().items():
        if v.numel() > BIG:
            state[k] = {"~": "shape", "shape": list(v.shape), "dtype": str(v.dtype)[6:]}
        else:
            state[k] = v.detach().clone()
    return state


def _value(data) -> torch.Tensor:
    """A state entry as a tensor (fixed small numbers for one recorded by its shape)."""
    if isinstance(data, torch.Tensor):
        return data.clone()
    g = torch.Generator().manual_seed(math.prod(data["shape"]))
    return (0.02 * torch.randn(data["shape"], generator=g)).to(getattr(torch, data["dtype"]))


@functools.cache
def _namedtuple(name: str, fields: tuple[str, ...]):
    return collections.namedtuple(name, fields)


def unpack(x):
    """A live value from :func:`pack`'s data (a module becomes a :class:`Standin`)."""
    if isinstance(x, list):
        return [unpack(v) for v in x]
    if not isinstance(x, dict):
        return x
    kind = x.get("~")
    if kind == "tensor":
        t = x["v"].clone()
        return t.requires_grad_() if x["grad"] and t.is_floating_point() else t
    if kind == "module":
        return _rebuild(x)
    if kind == "dtype":
        return getattr(torch, x["v"])
    if kind == "tuple":
        return tuple(unpack(v) for v in x["v"])
    if kind == "namedtuple":
        return _namedtuple(x["name"], tuple(x["fields"]))(*(unpack(v) for v in x["v"]))
    if kind == "dict":
        return {unpack(k): unpack(v) for k, v in zip(x["k"], x["v"], strict=True)}
    if kind == "set":
        return {unpack(v) for v in x["v"]}
    if kind == "generator":
        g = torch.Generator()
        g.set_state(x["v"])
        return g
    if kind in ("slice", "range"):
        return (slice if kind == "slice" else range)(*x["v"])
    if kind == "object":
        return types.SimpleNamespace(**{k: unpack(v) for k, v in x["v"].items()})
    return x.get("v")


def close(a, b) -> bool:
    """Two packed values agree: tensors by dtype, shape and values within the checks'
    tolerances, modules by class and state, the rest exactly (numbers within tolerance; a
    rounded number, :func:`rounded`, on its grid)."""
    if isinstance(a, dict) and a.get("~") == "rounded":
        return _close_rounded(a, b)
    if isinstance(b, dict) and b.get("~") == "rounded":
        return _close_rounded(b, a)
    if isinstance(a, dict) and isinstance(b, dict):
        if a.get("~") != b.get("~"):
            return False
        kind = a.get("~")
        if kind == "tensor":
            x, y = a["v"], b["v"]
            if x.dtype != y.dtype or x.shape != y.shape:
                return False
            if x.dtype == torch.bool or not (x.is_floating_point() or x.is_complex()):
                return bool(torch.equal(x, y))
            return bool(torch.isclose(x, y, atol=ATOL, rtol=RTOL, equal_nan=True).all())
        if kind == "module":
            same_class = a["name"].split(".")[-1] == b["name"].split(".")[-1]
            x, y = a["state"], b["state"]
            return (
                same_class
                and x.keys() == y.keys()
                and all(close(_data(x[k]), _data(y[k])) for k in x)
            )
        if kind == "generator":
            return bool(torch.equal(a["v"], b["v"]))
        if kind == "shape":
            return a["shape"] == b["shape"] and a["dtype"] == b["dtype"]
        if kind == "digest":
            return _close_digests(a, b)
        if a.keys() != b.keys():
            return False
        return all(close(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return close(pack(a), pack(b))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(a, b, rel_tol=RTOL, abs_tol=ATOL) or (a != a and b != b)
    return type(a) is type(b) and a == b


# A tensor larger than this is kept in a fingerprint as a digest (:func:`digest`).
DIGEST = 16


@functools.lru_cache(maxsize=8)
def _projections(n: int) -> torch.Tensor:
    """Fixed random directions for a digest of ``n`` numbers: (16, n) of +-1/sqrt(n)."""
    g = torch.Generator().manual_seed(n)
    signs = torch.randint(0, 2, (16, n), generator=g, dtype=torch.float64) * 2 - 1
    return signs / math.sqrt(n)


def digest(x):
    """Packed data with each large tensor replaced by its digest: its shape, dtype, the sum of
    its magnitudes and 16 fixed random projections. Two tensors that agree within the
    checks' tolerances have digests that agree (:func:`close`); two that differ by more than
    rounding almost surely do not. Used where only agreement is asked (the fingerprints of
    known mistakes), never where a test needs the values."""
    if isinstance(x, torch.Tensor):
        x = pack(x)
    if isinstance(x, list):
        return [digest(v) for v in x]
    if not isinstance(x, dict):
        return x
    if x.get("~") in ("generator", "shape", "digest", "dtype", "callable", "repr", "rounded"):
        return x  # leaves
    if x.get("~") == "tensor":
        if x["v"].numel() <= DIGEST or not x["v"].is_floating_point():
            return x
        v = x["v"].detach().double().flatten()
        # where the values are not finite (a mask's -inf, a NaN), as codes, kept apart
        odd = torch.where(v.isnan(), 3.0, torch.where(v.isinf(), v.sign(), 0.0))
        v = torch.where(v.isfinite(), v, 0.0)
        return {
            "odd": (_projections(v.numel()) @ odd).tolist(),
            "~": "digest",
            "shape": list(x["v"].shape),
            "dtype": str(x["v"].dtype)[6:],
            "l1": float(v.abs().sum()),
            "p": (_projections(v.numel()) @ v).tolist(),  # numbers, not a tensor: a few bytes
        }
    return {k: digest(v) for k, v in x.items()}


def _close_digests(a: dict, b: dict) -> bool:
    if a["shape"] != b["shape"] or a["dtype"] != b["dtype"]:
        return False
    if max(abs(x - y) for x, y in zip(a["odd"], b["odd"], strict=True)) > 1e-9:
        return False
    n = math.prod(a["shape"])
    # |x - y| <= atol + rtol |y| elementwise bounds each projection's difference by this
    tol = (n * ATOL + RTOL * max(a["l1"], b["l1"])) / math.sqrt(n) + 1e-12
    apart = max(abs(x - y) for x, y in zip(a["p"], b["p"], strict=True))
    return apart <= tol and math.isclose(a["l1"], b["l1"], rel_tol=RTOL, abs_tol=n * ATOL)


def pack_state(state: dict):
    """A module's state (from :func:`_state`) as packed data, for :func:`close`."""
    return {"~": "state", "k": list(state), "v": [_data(v) for v in state.values()]}


def _data(entry):
    return pack(entry) if isinstance(entry, torch.Tensor) else entry


# ---------------------------------------------------------------- the recorded calls


def _same_rng(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return bool(torch.equal(a, b))


class Book:
    """One chapter's recorded calls: key ("attention.scaled_dot_product_attention",
    "attention.SelfAttention.forward", ...) -> entries {"in", "out", "rng", "state"}."""

    def __init__(
        self,
        chapter: str,
        calls: dict | None = None,
        kit: str = __version__,
        mistakes: dict | None = None,
    ):
        self.chapter, self.kit = chapter, kit
        self.calls: dict[str, list[dict]] = calls or {}
        # the known mistakes' fingerprints (:mod:`attention_course.diagnosis`)
        self.mistakes: dict = mistakes or {}
        # while recording: the names the test block now running watches (``diagnose``'s),
        # written beside each call it records (the release keeps graded answers out by them)
        self.block: list[str] | None = None

    @classmethod
    def load(cls, chapter: str, folder: Path = DATA) -> Book:
        path = folder / f"{chapter}.pt"
        if not path.is_file():
            raise KitMismatch(
                f"the installed course kit (release {__version__}) has no recorded values for "
                f"{chapter}: install the kit that came with this notebook"
            )
        stamp, data = _READ_AHEAD.pop(path, (None, None))
        if stamp != _stamp(path):  # none read ahead, or the file changed since
            data = torch.load(path, weights_only=True)
        return cls(data["chapter"], data["calls"], data["kit"], data.get("mistakes"))

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(
            {
                "chapter": self.chapter,
                "kit": self.kit,
                "calls": self.calls,
                "mistakes": self.mistakes,
            },
            path,
        )

    def add(self, key: str, entry: dict) -> None:
        entries = self.calls.setdefault(key, [])
        for old in entries:
            if (
                close(old["in"], entry["in"])
                and close(old.get("state"), entry.get("state"))
                and _same_rng(old.get("before"), entry.get("before"))
            ):
                return  # the same question twice (a loop, a re-run cell): one answer
        entries.append(entry)

    def answer(self, key: str, args: tuple, kwargs: dict, state: dict | None = None):
        asked = pack((args, kwargs))
        now = torch.get_rng_state()
        found = [
            entry
            for entry in self.calls.get(key, [])
            if close(entry["in"], asked)
            and (state is None or close(entry["state"], pack_state(state)))
        ]
        # of the same question asked from several random states (a layer built twice with
        # the same sizes), the one asked from this state; else the first, and the random
        # state then goes on as it did in the recorded run
        found.sort(key=lambda e: e.get("before") is None or not torch.equal(e["before"], now))
        for entry in found[:1]:
            if entry["rng"] is not None:
                torch.set_rng_state(entry["rng"])  # as the reference's call drew numbers
            for generator, drawn in zip(
                _generators((args, kwargs)), entry.get("generators", []), strict=False
            ):
                generator.set_state(drawn)
            return unpack(entry["out"])
        name = key.split(".", 1)[1]
        if key not in self.calls:
            raise NotRecorded(
                f"the recorded reference has no {name}: does this notebook come from another "
                f"release of the course than the installed kit ({__version__})?"
            )
        raise NotRecorded(
            f"the recorded reference has no answer for this call of {name}: it holds only the "
            "reference's answers to the calls the course's release made, on those exact inputs, "
            "and these inputs differ from all of them. Calling the recorded reference on other "
            "inputs is not supported. In a test, this means the inputs it passed on came out "
            "of your own code and differ from what the reference computed at this point: check "
            "what your code returns in this test (an earlier check may say more). Outside a "
            "test, compute what you need with your own code."
        )


def _rebuild(data: dict) -> nn.Module:
    """A module from :func:`_module_tree`'s data: ``torch.nn`` layers as themselves (their
    forward needs only their attributes and parameters), the reference's own classes as
    :class:`Standin`\\ s, whose methods answer recorded calls."""
    built: dict[str, nn.Module] = {}
    for path, node in data["tree"].items():
        module_name, _, qualname = node["cls"].rpartition(".")
        if module_name.startswith("torch.nn"):
            cls = getattr(importlib.import_module(module_name), qualname)
            m = cls.__new__(cls)
            nn.Module.__init__(m)
        else:
            m = Standin(node["cls"])
        for k, v in node["attrs"].items():
            setattr(m, k, v)
        for k in node["unset"]:
            m.register_parameter(k, None)
        built[path] = m
        if path:
            parent, _, name = path.rpartition(".")
            built[parent].add_module(name, m)
    root = built[""]
    for name, value in data["state"].items():
        owner_path, _, leaf = name.rpartition(".")
        owner = built[owner_path]
        if name in data["params"]:
            owner.register_parameter(leaf, nn.Parameter(_value(value), name in data["grad"]))
        else:
            owner.register_buffer(leaf, _value(value))
    return root


class Standin(nn.Module):
    """A recorded module of the reference: its parameters and attributes, and its methods
    answering the calls the release recorded (with the parameters as they were then)."""

    def __init__(self, type_name: str):
        super().__init__()
        object.__setattr__(self, "_recorded_type", type_name)

    def _key(self, method: str) -> str:
        module, _, name = self._recorded_type.rpartition(".")
        return f"{module.rpartition('.')[2]}.{name}.{method}"

    def _answer(self, method: str, args, kwargs):
        return _current_book().answer(self._key(method), args, kwargs, state=_state(self))

    def forward(self, *args, **kwargs):
        return self._answer("forward", args, kwargs)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            book = _current_book()
            if book is not None and self._key(name) in book.calls:
                return lambda *args, **kwargs: self._answer(name, args, kwargs)
            raise

    def extra_repr(self) -> str:
        return f"recorded {self._recorded_type.split('.')[-1]}"


_BOOK: Book | None = None  # the notebook's chapter (one chapter per kernel)


def _current_book() -> Book | None:
    return _BOOK


def recording_book() -> Book | None:
    """The book this kernel is recording (the instructor's ``record``), else None."""
    return _BOOK if _BOOK is not None and hasattr(_BOOK, "path") else None


# ---------------------------------------------------------------- replay (the kit) and record


class Recorded:
    """``ref = recorded("attention")``: the reference module's names, answering from the book."""

    def __init__(self, book: Book, module: str):
        self._book, self._module = book, module

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        prefix = f"{self._module}.{name}"
        if f"{prefix}.__init__" in self._book.calls:

            def build(*args, **kwargs):
                return self._book.answer(f"{prefix}.__init__", args, kwargs)

            build.__name__ = build.__qualname__ = name
            build._recorded = prefix
            build._recorded_class = True
            return build
        if prefix in self._book.calls:

            def answer(*args, **kwargs):
                return self._book.answer(prefix, args, kwargs)

            answer.__name__ = answer.__qualname__ = name
            answer._recorded = prefix
            return answer
        raise AttributeError(
            f"the recorded reference of {self._module} has no {name}: does this notebook come "
            f"from another release of the course than the installed kit ({__version__})?"
        )

    def __dir__(self):
        prefix = self._module + "."
        return sorted(
            {k[len(prefix) :].split(".")[0] for k in self._book.calls if k.startswith(prefix)}
        )

    def __repr__(self) -> str:
        return f"<the reference's recorded answers: {self._module}>"


class Recording:
    """``ref`` on the instructor's side while recording: the reference module itself, each
    call of a function, a class or a method of the modules they return written down."""

    def __init__(self, book: Book, module: str, real: types.ModuleType):
        self._book, self._module, self._real = book, module, real

    def __getattr__(self, name: str):
        real = getattr(self._real, name)
        if isinstance(real, type) and issubclass(real, nn.Module):
            return self._wrap(real, f"{self._module}.{name}.__init__")
        if callable(real):
            return self._wrap(real, f"{self._module}.{name}")
        return real

    def _wrap(self, fn, key: str):
        book = self._book

        @functools.wraps(fn)
        def recorded(*args, **kwargs):
            asked = pack((args, kwargs))
            before = torch.get_rng_state()
            out = fn(*args, **kwargs)
            book.add(key, _entry(asked, out, before, given=(args, kwargs), block=book.block))
            _watch_modules(book, out)
            return out

        return recorded


def _generators(x) -> list[torch.Generator]:
    """The generators among a call's arguments, in order."""
    if isinstance(x, torch.Generator):
        return [x]
    if isinstance(x, list | tuple):
        return [g for v in x for g in _generators(v)]
    if isinstance(x, dict):
        return [g for v in x.values() for g in _generators(v)]
    return []


def _entry(asked, out, before, state=None, given=(), block=None) -> dict:
    after = torch.get_rng_state()
    drew = not torch.equal(before, after)
    return {
        "in": asked,
        "out": pack(out, full=True),
        # a call that drew random numbers (a layer's initial weights) answers as it did from
        # the random state it started from: the same arguments later give other numbers
        "before": before if drew else None,
        "rng": after if drew else None,
        "state": state,
        # a generator handed to the call has drawn numbers: its state after the call
        "generators": [g.get_state() for g in _generators(given)],
        # the names the test block that made the call watches (None: outside a block)
        "block": None if block is None else list(block),
    }


def _watch_modules(book: Book, out) -> None:
    """Record the later calls of every module of the reference in ``out`` (its methods)."""
    modules = [out] if isinstance(out, nn.Module) else []
    if isinstance(out, tuple | list):
        modules = [m for m in out if isinstance(m, nn.Module)]
    for module in modules:
        cls = type(module)
        if cls.__module__.startswith("torch."):
            continue
        key = f"{cls.__module__.split('.')[-1]}.{cls.__qualname__}"
        for name in _methods(cls):
            bound = getattr(module, name)

            def watched(*args, _bound=bound, _name=f"{key}.{name}", _module=module, **kwargs):
                asked, state = pack((args, kwargs)), pack_state(_state(_module))
                before = torch.get_rng_state()
                result = _bound(*args, **kwargs)
                entry = _entry(asked, result, before, state, (args, kwargs), book.block)
                book.add(_name, entry)
                return result

            object.__setattr__(module, name, watched)


def _methods(cls: type) -> list[str]:
    names = set()
    for klass in cls.__mro__:
        if klass in (nn.Module, object) or klass.__module__.startswith("torch."):
            continue
        names |= {
            n
            for n, v in vars(klass).items()
            if callable(v) and (n == "forward" or not n.startswith("_"))
        }
    return sorted(names)


# Files read ahead (:func:`read_ahead`): path -> (the file's size and time, its data).
_READ_AHEAD: dict[Path, tuple[tuple[int, int], dict]] = {}


def _stamp(path: Path) -> tuple[int, int]:
    status = path.stat()
    return status.st_size, status.st_mtime_ns


def read_ahead(chapter: str, folder: Path = DATA) -> None:
    """Read ``chapter``'s recorded values now, for the next :meth:`Book.load` of this process
    (which takes them, once, if the file has not changed since). The grader's fork server
    reads them before it forks the chapter's kernels (``autograder/kernel_warmup.py``): each
    kernel then starts with its own copy instead of reading the file, a few tenths of a
    second for the larger chapters."""
    path = folder / f"{chapter}.pt"
    if path.is_file():  # else the load says which kit is missing, as without it
        _READ_AHEAD[path] = (_stamp(path), torch.load(path, weights_only=True))


def recorded_values(chapter: str, kit: str):
    """The set-up cell's ``recorded``: ``recorded("attention")`` answers as the reference
    module ``attention`` did in the release's run. ``kit`` is the release the notebook comes
    from: another installed kit stops here, with one line that says which it needs."""
    global _BOOK
    target = os.environ.get(RECORD_ENV)
    reference = instructor_entry("reference") if target else None
    if target and reference is not None:
        _BOOK = Book(chapter)
        _BOOK.path = Path(target)

        def recording(module: str) -> Recording:
            real = importlib.import_module(f"{reference.__name__}.{module}")
            return Recording(_BOOK, module, real)

        return recording
    if kit != __version__:
        raise KitMismatch(
            f"This notebook needs the course kit of release {kit}; the installed kit is release "
            f"{__version__}: install the kit that came with the notebook "
            f"(pip install attention_course_kit-{kit}-py3-none-any.whl)."
        )
    _BOOK = Book.load(chapter)
    book = _BOOK

    def recorded(module: str) -> Recorded:
        prefix = module + "."
        if not any(k.startswith(prefix) for k in book.calls):
            raise KitMismatch(
                f"the installed course kit ({__version__}) recorded nothing of {module} for "
                f"{chapter}: does this notebook come from another release?"
            )
        return Recorded(book, module)

    return recorded


def save_recording() -> Path:
    """Write the book recorded in this kernel (the instructor's ``record`` runs it last)."""
    if _BOOK is None or not hasattr(_BOOK, "path"):
        raise RuntimeError(f"nothing recorded: set {RECORD_ENV} and install the instructor's side")
    _BOOK.save(_BOOK.path)
    return _BOOK.path


@contextmanager
def reference_for(namespace: dict, **replacements):
    """Run a block with some of the notebook's own names swapped for the recorded reference,
    so that a mistake in an earlier exercise costs points once, on its own test::

        with reference_for(globals(), scaled_dot_product_attention=ref.scaled_dot_product_attention):
            check_close(SelfAttention(...)(x)[0], ...)

    In the kit, a function's call the release did not record (your code calls the earlier
    exercise another way) is answered by your own version; a recorded one by the
    reference's answer, through which the gradient of your own version flows. A layer (a
    class) stays your own in the kit. When grading, where the instructor's side is installed
    (and the hidden tests run inside the same blocks), the reference itself: there a mistake
    in your earlier layer is counted on its own test only, where the kit may also fail the
    later test.
    """
    missing = object()
    saved = {name: namespace.get(name, missing) for name in replacements}
    swapped = {}
    for name, value in replacements.items():
        own = saved[name]
        if getattr(value, "_recorded", None) and own is not missing:
            swapped[name] = _recorded_or_own(value, own)
        else:
            swapped[name] = value
    namespace.update(swapped)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is missing:
                namespace.pop(name, None)
            else:
                namespace[name] = value


def _real(prefix: str):
    """The reference's own ``module.name``, where the instructor's side is installed (when
    grading: the hidden tests run inside the visible tests' blocks); else None."""
    reference = instructor_entry("reference")
    if reference is None:
        return None
    module, _, name = prefix.partition(".")
    return getattr(importlib.import_module(f"{reference.__name__}.{module}"), name, None)


def _recorded_or_own(recorded, own):
    real = _real(recorded._recorded)
    if real is not None:
        return real  # grading: the reference itself, as the hidden tests inside the block need
    if getattr(recorded, "_recorded_class", False):
        # a recorded layer only answers the calls the release made of it: inside your model
        # it would hide how your other code uses it, so your own layer runs in the kit
        return own

    @functools.wraps(own)
    def either(*args, **kwargs):
        try:
            answer = recorded(*args, **kwargs)
        except NotRecorded:
            return own(*args, **kwargs)
        if isinstance(answer, nn.Module):
            return answer
        rng = torch.get_rng_state()
        try:
            mine = own(*args, **kwargs)
        except Exception:
            return answer
        finally:
            torch.set_rng_state(rng)
        return _straight_through(answer, mine)

    return either


def _straight_through(answer, mine):
    """The recorded values, with the gradient of your own computation of them: where your
    version is right, exactly yours; where it is off, the reference's values (so that the
    test of a later exercise does not count the earlier mistake) and still a gradient."""
    if isinstance(answer, torch.Tensor) and isinstance(mine, torch.Tensor):
        if answer.shape != mine.shape or not mine.requires_grad:
            return answer
        if close(pack(answer), pack(mine)):
            return mine
        return answer.detach().to(mine.dtype) + (mine - mine.detach())
    if (
        isinstance(answer, tuple | list)
        and isinstance(mine, tuple | list)
        and len(answer) == len(mine)
    ):
        parts = [_straight_through(a, m) for a, m in zip(answer, mine, strict=True)]
        return type(answer)(*parts) if hasattr(answer, "_fields") else type(answer)(parts)
    return mine if close(pack(answer), pack(mine)) else answer
