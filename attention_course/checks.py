"""Checks that visible tests call. Each failure says what it saw, what it expected and
the likely cause, for example::

    AssertionError: output has shape (2, 5, 8), expected (2, 3, 8) = (batch, queries, d_v).
    Likely cause: did you multiply the weights by V?

They raise ``AssertionError`` so that nbgrader counts a failed check as a failed test.
"""

from collections.abc import Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


def _fail(what: str, hint: str | None) -> None:
    raise AssertionError(what + (f"\nLikely cause: {hint}" if hint else ""))


def check_tensor(x, name: str = "result", hint: str | None = None) -> None:
    """Check that ``x`` is a ``torch.Tensor`` (not None, a list or a NumPy array)."""
    if not isinstance(x, torch.Tensor):
        _fail(
            f"{name} is a {type(x).__name__}, expected a torch.Tensor.",
            hint or "did you forget a `return`, or return a tuple where a tensor was expected?",
        )


def check_shape(
    x, expected: Sequence[int], name: str = "result", dims: str = "", hint: str | None = None
) -> None:
    """Check ``x.shape == expected``; ``dims`` names the axes, e.g. ``"(batch, queries, d_v)"``."""
    check_tensor(x, name)
    if tuple(x.shape) != tuple(expected):
        _fail(
            f"{name} has shape {tuple(x.shape)}, expected {tuple(expected)}"
            + (f" = {dims}" if dims else "")
            + ".",
            hint,
        )


def check_dtype(x, dtype: torch.dtype, name: str = "result", hint: str | None = None) -> None:
    """Check the dtype, e.g. that a mask is ``torch.bool``."""
    check_tensor(x, name)
    if x.dtype != dtype:
        _fail(f"{name} has dtype {x.dtype}, expected {dtype}.", hint)


def _kind(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "bool"
    if dtype.is_floating_point or dtype.is_complex:
        return "float"
    return "integer"


def _dtype_cause(expected: torch.dtype) -> str:
    """The likely cause of a result in another dtype than ``expected``."""
    if expected == torch.bool:
        return (
            "a mask is torch.bool: build it with a comparison (==, <, ...) or .bool(), "
            "not from 0/1 numbers"
        )
    if _kind(expected) == "integer":
        return (
            "positions, counts and indices are integers: / and float tensors make floats "
            "(use //, or .long())"
        )
    return (
        "a tensor made without dtype= (torch.zeros, torch.ones, torch.tensor, torch.arange) "
        "is float32, and .float() or .double() converts: make new tensors in the inputs' dtype "
        "(x.new_zeros(...), torch.zeros(..., dtype=x.dtype)), or convert with .to(x.dtype)"
    )


def check_close(
    actual,
    expected,
    name: str = "result",
    hint: str | None = None,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    same_dtype: bool = True,
) -> None:
    """Compare floats with tolerances (never exact equality); report the worst entry.

    An ``expected`` tensor also states the dtype: a floating result must have exactly its
    dtype (a float32 result does not pass a float64 check), an integer result an integer
    dtype, a bool result bool. ``same_dtype=False`` where the exercise leaves the dtype open
    (then any floating dtype is compared with the expected values). A Python number or list
    states no dtype."""
    check_tensor(actual, name)
    states_dtype = isinstance(expected, torch.Tensor) and same_dtype
    if not states_dtype:
        expected = torch.as_tensor(
            expected, dtype=actual.dtype if actual.is_floating_point() else None
        )
    if actual.shape != expected.shape:
        _fail(f"{name} has shape {tuple(actual.shape)}, expected {tuple(expected.shape)}.", hint)
    stated = expected.dtype
    if states_dtype and (
        actual.dtype != stated if _kind(stated) == "float" else _kind(actual.dtype) != _kind(stated)
    ):
        _fail(f"{name} has dtype {actual.dtype}, expected {stated}.", _dtype_cause(stated))
    if actual.dtype == torch.bool or expected.dtype == torch.bool:
        if not torch.equal(actual.bool(), expected.bool()):
            where = (actual.bool() != expected.bool()).nonzero()[0].tolist()
            _fail(
                f"{name} differs at index {tuple(where)}: saw {actual[tuple(where)].item()}, "
                f"expected {expected[tuple(where)].item()}.",
                hint,
            )
        return
    a, e = actual.detach().double().cpu(), expected.detach().double().cpu()
    if torch.isnan(a).any() and not torch.isnan(e).any():
        where = torch.isnan(a).nonzero()[0].tolist()
        _fail(
            f"{name} contains NaN (first at index {tuple(where)}), expected finite values.",
            hint
            or "NaN comes out of 0 / 0, inf - inf, or a softmax over a row that is all -inf: "
            "find where the first NaN appears",
        )
    bad = ~torch.isclose(a, e, atol=atol, rtol=rtol, equal_nan=True)
    if bad.any():
        diff = (a - e).abs().nan_to_num(0.0)
        worst = (diff * bad).flatten().argmax()
        idx = tuple(int(i) for i in torch.unravel_index(worst, a.shape))
        _fail(
            f"{name} differs from the expected values in {int(bad.sum())} of {bad.numel()} "
            f"entries; the largest difference is at index {idx}: saw {a[idx].item():.6g}, "
            f"expected {e[idx].item():.6g}.",
            hint,
        )


def check_rows_sum_to_one(
    weights,
    name: str = "attention weights",
    dim: int = -1,
    hint: str | None = None,
    atol: float = 1e-5,
) -> None:
    """Check that weights are non-negative and sum to one along ``dim`` (a distribution)."""
    check_tensor(weights, name)
    if (weights < 0).any():
        _fail(
            f"{name} has negative entries (min {weights.min().item():.4g}); "
            "expected probabilities.",
            hint or "did you apply the softmax?",
        )
    sums = weights.sum(dim=dim)
    if not torch.allclose(sums, torch.ones_like(sums), atol=atol):
        worst = (sums - 1).abs().flatten().argmax()
        _fail(
            f"{name} sum to {sums.flatten()[worst].item():.4g} along dim {dim} "
            f"(somewhere), expected 1 for every query.",
            hint or "is the softmax taken over the key axis (the last one)?",
        )


def check_masked_out(
    weights, allowed, name: str = "attention weights", hint: str | None = None
) -> None:
    """Check that ``weights`` are zero wherever ``allowed`` is False."""
    check_tensor(weights, name)
    allowed = torch.as_tensor(allowed).bool().expand_as(weights)
    leaked = weights.masked_fill(allowed, 0.0).abs()
    if (leaked > 1e-6).any():
        idx = tuple(int(i) for i in torch.unravel_index(leaked.flatten().argmax(), weights.shape))
        _fail(
            f"{name} at index {idx} is {weights[idx].item():.4g}, but the mask forbids that "
            "position; expected 0.",
            hint or "is the mask inverted, or applied after the softmax instead of before?",
        )


class _NewStorageTracker(TorchDispatchMode):
    """Records the largest storage that any operation allocates (views of existing
    tensors, such as an ``expand`` or a slice, allocate nothing and are not counted)."""

    def __init__(self, known: set[int]):
        super().__init__()
        self.known = known
        self.largest = 0
        self.op = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                if storage.data_ptr() not in self.known and storage.nbytes() > self.largest:
                    self.largest, self.op = storage.nbytes(), str(func)
        return out


def largest_allocation(fn, *args, **kwargs) -> tuple[int, str | None, object]:
    """Run ``fn(*args, **kwargs)`` and return ``(bytes, op, result)``: the largest tensor
    storage that one of its operations allocated, the operation that did, and the result."""
    known = {
        a.untyped_storage().data_ptr()
        for a in tree_leaves((args, kwargs))
        if isinstance(a, torch.Tensor)
    }
    with _NewStorageTracker(known) as tracker:
        result = fn(*args, **kwargs)
    return tracker.largest, tracker.op, result


def check_allocates_less_than(
    fn, args: Sequence, limit_bytes: int, name: str, hint: str | None = None
):
    """Check that no single tensor allocated while running ``fn(*args)`` reaches
    ``limit_bytes`` (for example: a blocked attention never builds the full T_q x T_k
    matrix of scores). Returns ``fn(*args)``."""
    largest, op, result = largest_allocation(fn, *args)
    if largest >= limit_bytes:
        _fail(
            f"{name} allocated a tensor of {largest:,} bytes (in {op}); expected every tensor "
            f"to stay below {limit_bytes:,} bytes.",
            hint,
        )
    return result
