r"""Measurements behind the figures of the multi-head attention page (chapter 05).

What one layer costs (Vaswani et al. 2017, Table 1), for n positions of width d:

    self-attention   O(n^2 d)     operations, O(1) sequential steps
    recurrent        O(n d^2)     operations, O(n) sequential steps
    convolutional    O(k n d^2)   operations, O(1) sequential steps (kernel width k)

On logarithmic axes a cost c n^p d^q is a straight line: its slope against n is p and
against d is q. :func:`loglog_slope` fits that slope to measured times, so the page can set
the measured exponents beside the predicted ones.

What attention holds in memory: softmax(Q K^T / sqrt(d_k)) V, computed as written,
materialises the T_q x T_k scores; blocked attention with an online softmax (Milakov and
Gimelshein 2018; Rabe and Staats 2021) holds T_q x block of them at a time.
:func:`peak_memory_mb` measures the difference as the operating system sees it: the peak
resident memory of this process while a function runs (Linux only).

And what the heads of a trained model look at: :func:`attention_by_offset`.
"""

import ctypes
import ctypes.util
import math
import platform
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from autograder.reference.analysis import median_seconds, table1_layers
from autograder.reference.attention import scaled_dot_product_attention
from autograder.reference.multi_head import MultiHeadAttention, blocked_attention, multi_head_cost

LAYERS = ("self-attention", "recurrent", "convolutional")

# ---------------------------------------------------------------------------------------
# Operation counts and slopes


def multiply_adds(n: int, d: int, kernel_size: int = 3) -> dict[str, int]:
    """Multiply-adds of one forward pass of each layer of :func:`table1_layers`, for one
    sequence of n vectors of width d.

    self-attention:  3 n d^2 (x W_q, x W_k, x W_v) + n^2 d (Q K^T) + n^2 d (weights times V)
    recurrent:       n steps of W_ih x_t and W_hh h_{t-1}: 2 n d^2
    convolutional:   k n d^2
    """
    return {
        "self-attention": 3 * n * d * d + 2 * n * n * d,
        "recurrent": 2 * n * d * d,
        "convolutional": kernel_size * n * d * d,
    }


def loglog_slope(xs: Sequence[float], ys: Sequence[float], last: int | None = None) -> float:
    r"""Least-squares slope p of log y = p log x + c, over the ``last`` points (all by
    default).

    For y = c x^p the slope is p exactly. Measured times follow the power law only once the
    sizes are large enough for the work to dwarf the fixed cost of each call, so the page
    fits the largest few sizes.
    """
    if len(xs) != len(ys):
        raise ValueError(f"{len(xs)} x values but {len(ys)} y values")
    xs, ys = list(xs)[-last if last else 0 :], list(ys)[-last if last else 0 :]
    if len(xs) < 2:
        raise ValueError(f"need at least 2 points to fit a slope, got {len(xs)}")
    if min(xs) <= 0 or min(ys) <= 0:
        raise ValueError("a log-log slope needs positive values")
    u = torch.tensor([math.log(x) for x in xs], dtype=torch.float64)
    v = torch.tensor([math.log(y) for y in ys], dtype=torch.float64)
    u, v = u - u.mean(), v - v.mean()
    # slope = sum (u - mean u)(v - mean v) / sum (u - mean u)^2
    return float((u * v).sum() / (u * u).sum())


def count_slopes(sizes: Sequence[int], vary: str, fixed: int, last: int | None = None):
    """The slope of :func:`multiply_adds` against n (``vary="n"``, d = ``fixed``) or d
    (``vary="d"``, n = ``fixed``), fitted over the same points as the measured times."""
    if vary not in ("n", "d"):
        raise ValueError(f"vary must be 'n' or 'd', got {vary!r}")
    counts = [multiply_adds(s, fixed) if vary == "n" else multiply_adds(fixed, s) for s in sizes]
    return {name: loglog_slope(sizes, [c[name] for c in counts], last) for name in LAYERS}


# ---------------------------------------------------------------------------------------
# Time per layer (Table 1, measured)


def _time_ms(fn, *args, repeats: int) -> float:
    """Milliseconds per call of ``fn(*args)``: the median of ``repeats`` after a warm-up (the
    first call at a new shape pays one-off costs: allocation, dispatch caches)."""
    fn(*args)
    return median_seconds(lambda: fn(*args), repeats) * 1e3


@torch.no_grad()
def cost_vs_length(
    lengths: Sequence[int], d_model: int = 64, batch: int = 8, repeats: int = 3, seed: int = 0
) -> dict[str, list[float]]:
    """Milliseconds per forward pass of each layer of :func:`table1_layers` at width
    ``d_model``, for each sequence length n in ``lengths`` (median of ``repeats`` runs)."""
    torch.manual_seed(seed)
    layers = table1_layers(d_model)
    out = {name: [] for name in LAYERS}
    for n in lengths:
        x = torch.randn(batch, n, d_model)  # (B, n, d)
        for name in LAYERS:
            out[name].append(_time_ms(layers[name], x, repeats=repeats))
    return out


@torch.no_grad()
def cost_vs_width(
    widths: Sequence[int], length: int = 128, batch: int = 8, repeats: int = 3, seed: int = 0
) -> dict[str, list[float]]:
    """Milliseconds per forward pass of each layer of :func:`table1_layers` on sequences of
    ``length`` positions, for each width d in ``widths`` (median of ``repeats`` runs)."""
    torch.manual_seed(seed)
    out = {name: [] for name in LAYERS}
    for d in widths:
        layers = table1_layers(d)
        x = torch.randn(batch, length, d)  # (B, n, d)
        for name in LAYERS:
            out[name].append(_time_ms(layers[name], x, repeats=repeats))
    return out


@torch.no_grad()
def crossover(
    d_model: int,
    batch: int = 8,
    start: int = 16,
    max_length: int = 4096,
    repeats: int = 3,
    seed: int = 0,
) -> dict:
    """Where self-attention becomes slower than the recurrent layer, at width ``d_model``.

    Times both layers at n = start, 2 start, 4 start, ... and stops once attention has been
    the slower one at two lengths in a row (or at ``max_length``). The crossover is
    interpolated on log-log axes between the last length where attention was faster and the
    next: the n where the ratio of the times passes 1. Counting multiply-adds as Table 1
    does (n^2 d against n d^2) it would be n = d.

    Returns ``{"d": d_model, "lengths": [...], "self-attention": [ms...],
    "recurrent": [ms...], "n": crossover}``, ``n`` None if attention was still the faster
    layer at ``max_length`` (see :func:`crossing_length`).
    """
    torch.manual_seed(seed)
    layers = table1_layers(d_model)
    out = {"d": d_model, "lengths": [], "self-attention": [], "recurrent": [], "n": None}
    n, slower_in_a_row = start, 0
    while n <= max_length and slower_in_a_row < 2:
        x = torch.randn(batch, n, d_model)  # (B, n, d)
        out["lengths"].append(n)
        for name in ("self-attention", "recurrent"):
            out[name].append(_time_ms(layers[name], x, repeats=repeats))
        slower_in_a_row = (
            slower_in_a_row + 1 if out["self-attention"][-1] > out["recurrent"][-1] else 0
        )
        n *= 2
    if slower_in_a_row:
        out["n"] = crossing_length(out["lengths"], out["self-attention"], out["recurrent"])
    return out


def crossing_length(lengths: Sequence[float], a: Sequence[float], b: Sequence[float]):
    """The length where curve ``a`` rises above curve ``b`` for good, interpolated on
    log-log axes: between the last length where a <= b and the next, the n where
    log(a / b) passes 0 on a straight line through log n.

    None if a <= b at the last length; ``lengths[0]`` if a > b everywhere (the crossing is
    then at or below the first length).
    """
    ratios = [math.log(x / y) for x, y in zip(a, b, strict=True)]  # > 0 where a is above
    if ratios[-1] <= 0:
        return None
    below = [i for i, r in enumerate(ratios) if r <= 0]
    if not below:
        return float(lengths[0])
    i = below[-1]
    u1, u2 = math.log(lengths[i]), math.log(lengths[i + 1])
    r1, r2 = ratios[i], ratios[i + 1]
    return math.exp(u1 - r1 * (u2 - u1) / (r2 - r1))


# ---------------------------------------------------------------------------------------
# Multi-head cost, counted by PyTorch


def multi_head_flops(length: int, d_model: int, heads: Sequence[int]) -> list[dict[str, int]]:
    """For each number of heads h: :func:`multi_head_cost` of one self-attention layer on a
    sequence of ``length`` positions, beside the FLOPs that PyTorch's FlopCounterMode counts
    when the reference :class:`MultiHeadAttention` runs (a multiply-add counts as 2 FLOPs,
    so ``counted_flops = 2 multiply_adds`` when the two agree)."""
    rows = []
    for h in heads:
        torch.manual_seed(0)
        layer = MultiHeadAttention(d_model, h)
        x = torch.randn(1, length, d_model)  # (1, T, d_model)
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            layer(x, x, x)
        rows.append(
            {
                "num_heads": h,
                "d_k": d_model // h,
                **multi_head_cost(length, length, d_model, h),
                "counted_flops": counter.get_total_flops(),
                "counted_parameters": sum(p.numel() for p in layer.parameters()),
            }
        )
    return rows


# ---------------------------------------------------------------------------------------
# Peak memory (Linux: /proc/self/status and /proc/self/clear_refs)


def _status_bytes(field: str) -> int:
    """A ``kB`` field of /proc/self/status (VmRSS, VmHWM), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field} line")


def _libc_malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    return getattr(libc, "malloc_trim", None)  # glibc only


_MALLOC_TRIM = _libc_malloc_trim() if platform.system() == "Linux" else None


def peak_memory_mb(fn: Callable, *args) -> float:
    """Extra resident memory, in MiB, at the peak of ``fn(*args)``: what the process held at
    its highest while ``fn`` ran, minus what it held just before.

    How: hand the C allocator's free pages back to the system (glibc's ``malloc_trim``), so
    that ``fn`` cannot silently reuse pages freed by earlier work; reset the peak by writing
    5 to /proc/self/clear_refs (VmHWM := VmRSS); read VmRSS; run ``fn``; read VmHWM. The
    peak counts everything ``fn`` kept resident at once, its result included: tensors, and
    the allocator's slack around them. Linux only.
    """
    if platform.system() != "Linux":
        raise RuntimeError(
            f"peak_memory_mb reads /proc/self/status and writes /proc/self/clear_refs, which "
            f"only Linux provides; this is {platform.system() or 'an unknown system'} "
            f"({platform.platform()}). The course's book is built on Linux."
        )
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak resident set size (VmHWM) to the current one
    except OSError as error:
        raise RuntimeError(
            f"cannot reset the peak memory through /proc/self/clear_refs ({error}); "
            "this Linux (or its sandbox) does not allow it, so peaks cannot be measured"
        ) from error
    before = _status_bytes("VmRSS")
    result = fn(*args)
    peak = _status_bytes("VmHWM")
    del result
    return max(0, peak - before) / 2**20


def attention_variants(block_size: int = 128) -> dict[str, Callable]:
    """Three ways to compute softmax(Q K^T / sqrt(d_k)) V, each called as ``fn(Q, K, V)``
    with Q (..., T_q, d_k), K (..., T_k, d_k), V (..., T_k, d_v):

    plain:    the course's reference, which materialises the T_q x T_k scores and weights;
    blocked:  :func:`blocked_attention`, ``block_size`` keys at a time (online softmax);
    F.scaled_dot_product_attention:  PyTorch's fused kernel (on a CPU, a flash-attention
              style kernel that also works through the keys in blocks).
    """
    return {
        "plain": lambda Q, K, V: scaled_dot_product_attention(Q, K, V)[0],
        "blocked": lambda Q, K, V: blocked_attention(Q, K, V, block_size=block_size),
        "F.scaled_dot_product_attention": F.scaled_dot_product_attention,
    }


def _qkv(n: int, d_k: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, 1, n, d_k, generator=g) for _ in range(3)]  # (B=1, h=1, n, d_k)


@torch.no_grad()
def attention_cost(
    lengths: Sequence[int], d_k: int = 64, block_size: int = 128, repeats: int = 3, seed: int = 0
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Peak extra memory (MiB) and time (ms) of each of :func:`attention_variants` on one
    head of self-attention (batch 1, T_q = T_k = n, d_k = d_v), for each n in ``lengths``.

    Each is the median of ``repeats`` calls. The memory calls come first and also warm up
    the shape for the timed calls. Returns ``(memory, time)``, two dicts of lists keyed by
    the variant's name.
    """
    variants = attention_variants(block_size)
    Q, K, V = _qkv(min(lengths), d_k, seed)
    for fn in variants.values():
        fn(Q, K, V)  # warm-up: one-off buffers of the libraries are not the attention's
    memory = {name: [] for name in variants}
    time = {name: [] for name in variants}
    for n in lengths:
        Q, K, V = _qkv(n, d_k, seed)
        for name, fn in variants.items():
            peaks = sorted(peak_memory_mb(fn, Q, K, V) for _ in range(repeats))
            memory[name].append(peaks[len(peaks) // 2])
            time[name].append(
                median_seconds(lambda fn=fn, Q=Q, K=K, V=V: fn(Q, K, V), repeats) * 1e3
            )
    return memory, time


@torch.no_grad()
def blocked_error(n: int = 1000, d_k: int = 64, block_sizes=(1, 7, 64, 128, 1000), seed=0):
    """Largest absolute difference between blocked and plain attention, per block size,
    on one head of n random queries, keys and values (float32)."""
    Q, K, V = _qkv(n, d_k, seed)
    plain = scaled_dot_product_attention(Q, K, V)[0]
    return {
        b: (blocked_attention(Q, K, V, block_size=b) - plain).abs().max().item()
        for b in block_sizes
    }


# ---------------------------------------------------------------------------------------
# What the graded questions of chapter 05 measure


def measured_cost(T_q: int, T_k: int, d_model: int, num_heads: int, seed: int = 0) -> dict:
    """What one reference :class:`MultiHeadAttention` costs on one sequence of ``T_q``
    queries and ``T_k`` keys, measured: its parameters counted, the multiply-adds of its
    matrix products as PyTorch's FlopCounterMode counts them (two FLOPs each), split into
    the four projections (the ``nn.Linear`` layers) and the rest (the products inside
    attention, all heads together), and the attention weights a forward pass returns.

    The keys ``parameters``, ``multiply_adds`` and ``score_entries`` are those of
    :func:`multi_head_cost`; ``projections`` and ``attention`` add up to ``multiply_adds``.
    """
    torch.manual_seed(seed)
    module = MultiHeadAttention(d_model, num_heads)
    query, memory = torch.randn(1, T_q, d_model), torch.randn(1, T_k, d_model)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        _, weights = module(query, memory, memory)
    by_module = {name: sum(ops.values()) // 2 for name, ops in counter.get_flop_counts().items()}
    projections = sum(by_module.get(f"MultiHeadAttention.{w}", 0) for w in LINEARS)
    total = counter.get_total_flops() // 2
    return {
        "parameters": sum(p.numel() for p in module.parameters()),
        "multiply_adds": total,
        "projections": projections,
        "attention": total - projections,
        "score_entries": weights.numel(),
    }


LINEARS = ("W_q", "W_k", "W_v", "W_o")


def saved_attention_bytes(
    batch: int,
    num_heads: int,
    T_q: int,
    T_k: int,
    num_layers: int = 1,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
) -> int:
    """The bytes that training keeps for the backward pass in tensors of T_q x T_k entries
    per head (scores and weights in any form), measured on a stack of ``num_layers``
    reference :class:`MultiHeadAttention` layers, no mask: each layer's queries come from
    the layer below (the first from random inputs), its keys and values from one random
    memory of ``T_k`` positions (with T_q = T_k this is self-attention's cost).

    How: ``torch.autograd.graph.saved_tensors_hooks`` sees every tensor autograd saves for
    the backward pass; those whose last two axes are (T_q, T_k) are counted, each storage
    once (a tensor saved by two operations, or a view of one saved, is stored once). The
    heads are d_k = max(T_q, T_k) + 1 wide, so that no other saved tensor (Q, K^T, V, the
    inputs, the projection matrices) has last axes (T_q, T_k).
    """
    d_k = max(T_q, T_k) + 1
    d_model = num_heads * d_k
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    layers = [MultiHeadAttention(d_model, num_heads).to(dtype) for _ in range(num_layers)]
    x = torch.randn(batch, T_q, d_model, generator=g).to(dtype)
    memory = torch.randn(batch, T_k, d_model, generator=g).to(dtype)
    storages: dict[int, int] = {}

    def keep(t: torch.Tensor) -> torch.Tensor:
        if t.dim() >= 2 and tuple(t.shape[-2:]) == (T_q, T_k):
            storage = t.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        for layer in layers:
            x, _ = layer(x, memory, memory)  # (B, T_q, d_model)
    return sum(storages.values())


def measured_head_score_rank(
    T_q: int, T_k: int, d_model: int, num_heads: int, seed: int = 0
) -> int:
    """The largest rank among the heads' scores Q_i K_i^T of the course's MultiHeadAttention,
    for random weights and inputs, in float64 (``torch.linalg.matrix_rank``)."""
    from autograder.reference.multi_head import split_heads

    torch.manual_seed(seed)
    module = MultiHeadAttention(d_model, num_heads).double()
    query = torch.randn(1, T_q, d_model, dtype=torch.float64)
    key = torch.randn(1, T_k, d_model, dtype=torch.float64)
    with torch.no_grad():
        Q = split_heads(module.W_q(query), num_heads)[0]  # (h, T_q, d_k)
        K = split_heads(module.W_k(key), num_heads)[0]  # (h, T_k, d_k)
    return int(torch.linalg.matrix_rank(Q @ K.transpose(-2, -1)).max())


def measured_blocked_bytes(
    batch: int, num_heads: int, T_q: int, T_k: int, block_size: int, dtype=torch.float32
) -> int:
    """The bytes of the largest tensor that the course's blocked_attention allocates, with
    d_k = d_v = 4 (``attention_course.checks.largest_allocation``)."""
    from attention_course.checks import largest_allocation

    g = torch.Generator().manual_seed(T_q * T_k + block_size)
    Q, K, V = (torch.randn(batch, num_heads, T, 4, generator=g).to(dtype) for T in (T_q, T_k, T_k))
    largest, _, _ = largest_allocation(blocked_attention, Q, K, V, None, block_size)
    return largest


# ---------------------------------------------------------------------------------------
# What the heads look at


def attention_by_offset(weights: torch.Tensor) -> tuple[list[int], torch.Tensor]:
    """How much attention each head gives, on average, to the key at each offset j - i from
    its query, on cyclic sequences of length T (offsets taken modulo T).

    weights (B, h, T, T). Returns the offsets, from -(T - 1) // 2 to T // 2, and the mean
    weight at each, (h, len(offsets)); a row sums to one.
    """
    B, h, T, T_k = weights.shape
    if T != T_k:
        raise ValueError(f"self-attention weights must be square, got shape {tuple(weights.shape)}")
    i = torch.arange(T)
    offsets = list(range(-((T - 1) // 2), T // 2 + 1))
    # share[:, o] = mean over sequences and queries i of weights[:, :, i, (i + o) mod T]
    columns = [weights[:, :, i, (i + o) % T].mean(dim=(0, 2)) for o in offsets]  # each (h,)
    return offsets, torch.stack(columns, dim=-1)  # (h, num_offsets)


@torch.no_grad()
def weight_by_digits(
    model, task, head: int = 0, num_examples: int = 500, seed: int = 2
) -> dict[int, dict[str, float]]:
    """How much one head's weights depend on the digits, at the two offsets the task reads
    (-a and +b): for each, the mean weight a query gives the key at that offset over held-out
    sequences, its standard deviation across sequences (at each query position, then
    averaged over the positions), and its smallest and largest value.

    Weights that depend on the positions only give a standard deviation of 0: the case where
    one head provably cannot return both digits (chapter 05's page).
    """
    x, _ = task.sample(num_examples, generator=torch.Generator().manual_seed(seed))
    weights = model(x)[1][:, head]  # (N, T, T)
    T = weights.size(-1)
    i = torch.arange(T)
    out = {}
    for offset in (-task.a, task.b):
        w = weights[:, i, (i + offset) % T]  # (N, T): query i's weight on key i + offset
        out[offset] = {
            "mean": w.mean().item(),
            "std_over_sequences": w.std(dim=0).mean().item(),
            "min": w.min().item(),
            "max": w.max().item(),
        }
    return out


@torch.no_grad()
def per_output_accuracy(model, task, num_examples: int = 2000, seed: int = 10_000) -> dict:
    """Accuracy of each of the two outputs of a two-lookup model (chapter 05), x[i - a] and
    x[i + b], on held-out sequences (the same ones as ``train_lookup`` measures on)."""
    x, y = task.sample(num_examples, generator=torch.Generator().manual_seed(seed))
    correct = (model(x)[0].argmax(-1) == y).float()  # (N, T, 2)
    return {
        f"x[i-{task.a}]": correct[..., 0].mean().item(),
        f"x[i+{task.b}]": correct[..., 1].mean().item(),
    }
