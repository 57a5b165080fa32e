"""The measurements behind chapter 05's page (autograder/reference/cost.py): slope fitting,
crossings, operation counts, peak memory and the heads' offsets. Tiny sizes only, and no
assertion on a wall-clock time."""

import math
import platform

import pytest
import torch

from attention_course.lookup import LookupModel, LookupTask
from autograder.reference import cost
from autograder.reference.analysis import table1_layers
from autograder.reference.multi_head import (
    MultiHeadAttention,
    attention_weights_bytes,
    multi_head_cost,
)

linux_only = pytest.mark.skipif(
    platform.system() != "Linux", reason="peak memory is read from /proc (Linux)"
)


def test_loglog_slope_recovers_power_laws():
    xs = [16, 32, 64, 128, 256]
    assert cost.loglog_slope(xs, [3 * x**2.5 for x in xs]) == pytest.approx(2.5)
    # a fixed cost bends the small sizes; the largest points still give the exponent
    bent = [1e5 + x**3 for x in xs]
    assert cost.loglog_slope(xs, bent) < 2
    assert cost.loglog_slope(xs, bent, last=2) == pytest.approx(3, abs=0.1)
    with pytest.raises(ValueError, match="x values"):
        cost.loglog_slope([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="at least 2"):
        cost.loglog_slope(xs, xs, last=1)
    with pytest.raises(ValueError, match="positive"):
        cost.loglog_slope([1, 2], [0, 1])


def test_counts_give_table_1_slopes():
    n, d = 10, 7
    ops = cost.multiply_adds(n, d)
    assert ops == {
        "self-attention": 3 * n * d * d + 2 * n * n * d,
        "recurrent": 2 * n * d * d,
        "convolutional": 3 * n * d * d,
    }
    sizes = [256, 512, 1024]
    by_n = cost.count_slopes(sizes, "n", fixed=8)
    by_d = cost.count_slopes(sizes, "d", fixed=8)
    assert by_n["recurrent"] == pytest.approx(1) and by_n["convolutional"] == pytest.approx(1)
    assert by_d["recurrent"] == pytest.approx(2) and by_d["convolutional"] == pytest.approx(2)
    # attention with its projections: n^2 d dominates for n >> d, n d^2 for d >> n
    assert 1.95 < by_n["self-attention"] < 2 and 1.95 < by_d["self-attention"] < 2
    with pytest.raises(ValueError, match="vary"):
        cost.count_slopes(sizes, "h", fixed=8)


def test_crossing_length_interpolates_on_log_axes():
    lengths = [16, 32, 64, 128]
    # a = n^2 / 64 and b = n cross at n = 64 exactly
    a = [n * n / 64 for n in lengths]
    b = [float(n) for n in lengths]
    assert cost.crossing_length(lengths, a, b) == pytest.approx(64)
    a = [n * n / 48 for n in lengths]  # crosses at n = 48, between 32 and 64
    assert cost.crossing_length(lengths, a, b) == pytest.approx(48)
    assert cost.crossing_length(lengths, b, a) is None  # b stays below a at the end
    assert cost.crossing_length(lengths, [2 * x for x in b], b) == 16  # above everywhere


def test_table1_layers_map_n_vectors_to_n_vectors():
    x = torch.randn(2, 5, 8)
    for name, layer in table1_layers(8).items():
        with torch.no_grad():
            assert layer(x).shape == (2, 5, 8), name


def test_timing_sweeps_return_one_time_per_size():
    by_length = cost.cost_vs_length([4, 8], d_model=8, batch=2, repeats=1)
    by_width = cost.cost_vs_width([4, 8, 16], length=4, batch=2, repeats=1)
    for result, size in ((by_length, 2), (by_width, 3)):
        assert set(result) == set(cost.LAYERS)
        assert all(len(v) == size and min(v) > 0 for v in result.values())
    c = cost.crossover(8, batch=2, start=4, max_length=16, repeats=1)
    assert set(c) == {"d", "lengths", "self-attention", "recurrent", "n"}
    assert c["d"] == 8 and c["lengths"][0] == 4 and max(c["lengths"]) <= 16
    assert len(c["self-attention"]) == len(c["recurrent"]) == len(c["lengths"])
    assert c["n"] is None or 0 < c["n"] <= max(c["lengths"])


def test_flop_counter_agrees_with_multi_head_cost():
    rows = cost.multi_head_flops(length=7, d_model=24, heads=[1, 2, 3, 8])
    assert [r["num_heads"] for r in rows] == [1, 2, 3, 8]
    for r in rows:
        assert r["counted_flops"] == 2 * r["multiply_adds"], r
        assert r["counted_parameters"] == r["parameters"] == 4 * 24 * 24
        assert r["d_k"] * r["num_heads"] == 24
        assert r["score_entries"] == r["num_heads"] * 7 * 7
        assert r["multiply_adds"] == multi_head_cost(7, 7, 24, r["num_heads"])["multiply_adds"]


def test_blocked_error_is_float32_rounding():
    errors = cost.blocked_error(n=100, d_k=16, block_sizes=(1, 30, 100))
    assert set(errors) == {1, 30, 100}
    assert max(errors.values()) < 1e-5


@linux_only
def test_peak_memory_plain_attention_holds_the_scores_blocked_does_not(one_thread):
    n = 4096
    Q, K, V = (torch.randn(1, 1, n, 64) for _ in range(3))
    variants = cost.attention_variants(block_size=128)
    for fn in variants.values():
        fn(Q[..., :64, :], K[..., :64, :], V[..., :64, :])  # warm-up
    plain = cost.peak_memory_mb(variants["plain"], Q, K, V)
    blocked = cost.peak_memory_mb(variants["blocked"], Q, K, V)
    scores_mib = n * n * 4 / 2**20  # 64 MiB
    assert plain >= scores_mib, f"plain attention peaked at {plain:.1f} MiB"
    assert blocked < plain / 4, f"blocked {blocked:.1f} MiB, plain {plain:.1f} MiB"


@linux_only
def test_attention_cost_returns_memory_and_time_per_length():
    memory, time = cost.attention_cost([64, 128], d_k=8, block_size=32, repeats=1)
    assert set(memory) == set(time) == set(cost.attention_variants())
    assert all(len(v) == 2 and min(v) >= 0 for v in memory.values())
    assert all(len(v) == 2 and min(v) > 0 for v in time.values())


def test_peak_memory_names_the_platform_where_proc_is_missing(monkeypatch):
    monkeypatch.setattr(cost.platform, "system", lambda: "Darwin")
    with pytest.raises(RuntimeError, match="only Linux.*Darwin"):
        cost.peak_memory_mb(lambda: None)


def test_attention_by_offset_finds_each_heads_offset():
    T = 6
    weights = torch.zeros(3, 2, T, T)  # (B, h, T, T)
    for i in range(T):
        weights[:, 0, i, (i - 1) % T] = 1.0  # head 0: one place before
        weights[:, 1, i, (i + 2) % T] = 0.5  # head 1: half two after, half on itself
        weights[:, 1, i, i] = 0.5
    offsets, share = cost.attention_by_offset(weights)
    assert offsets == [-2, -1, 0, 1, 2, 3]
    assert share.shape == (2, 6)
    torch.testing.assert_close(share.sum(-1), torch.ones(2))
    assert share[0, offsets.index(-1)] == 1
    assert share[1, offsets.index(2)] == 0.5 and share[1, offsets.index(0)] == 0.5
    with pytest.raises(ValueError, match="square"):
        cost.attention_by_offset(torch.zeros(1, 1, 3, 4))


def test_per_output_accuracy_scores_each_lookup():
    task = LookupTask(length=6, vocab_size=4, a=1, b=2)
    torch.manual_seed(0)
    model = LookupModel(MultiHeadAttention(8, 2), task, d_model=8)
    acc = cost.per_output_accuracy(model, task, num_examples=50)
    assert set(acc) == {"x[i-1]", "x[i+2]"}
    assert all(0 <= v <= 1 and not math.isnan(v) for v in acc.values())


def test_measured_cost_agrees_with_multi_head_cost_and_splits_the_projections():
    for args in [(6, 10, 16, 4), (1, 1, 8, 1), (7, 3, 24, 3)]:
        measured = cost.measured_cost(*args)
        assert {k: measured[k] for k in multi_head_cost(*args)} == multi_head_cost(*args)
        T_q, T_k, d_model, _ = args
        assert measured["projections"] == (2 * T_q + 2 * T_k) * d_model**2
        assert measured["projections"] + measured["attention"] == measured["multiply_adds"]


@pytest.mark.parametrize(
    ("batch", "h", "T_q", "T_k", "layers", "dtype"),
    [
        (2, 3, 5, 7, 1, torch.float32),
        (1, 2, 10, 12, 3, torch.float64),
        (2, 1, 4, 4, 2, torch.bfloat16),
        (1, 4, 6, 3, 1, torch.float16),
    ],
)
def test_saved_attention_bytes_counts_two_weight_tensors_per_head(
    batch, h, T_q, T_k, layers, dtype
):
    """The softmax keeps its output, the product with V keeps nan_to_num's: two tensors."""
    measured = cost.saved_attention_bytes(batch, h, T_q, T_k, layers, dtype)
    assert measured == attention_weights_bytes(batch, h, T_q, T_k, layers, dtype)
    assert measured == 2 * layers * batch * h * T_q * T_k * dtype.itemsize


def test_weight_by_digits_is_zero_for_weights_of_positions_only():
    task = LookupTask(length=6, vocab_size=4, a=1, b=2)
    i = torch.arange(6)
    fixed = torch.zeros(6, 6)
    fixed[i, (i - 1) % 6], fixed[i, (i + 2) % 6] = 0.7, 0.3  # rows sum to one

    def positions_only(x):
        return None, fixed.expand(len(x), 1, 6, 6)  # (N, 1, T, T), the same for every x

    out = cost.weight_by_digits(positions_only, task, num_examples=20)
    assert out[-1]["mean"] == pytest.approx(0.7) and out[-1]["std_over_sequences"] == 0.0
    assert out[2]["mean"] == pytest.approx(0.3) and out[2]["std_over_sequences"] == 0.0
    torch.manual_seed(0)
    model = LookupModel(MultiHeadAttention(8, 1), task, d_model=8)  # sees the digits
    assert cost.weight_by_digits(model, task, num_examples=50)[-1]["std_over_sequences"] > 0
