"""Chapter 10's reference parts (autograder/reference/since_2023.py): each against a second
way of computing the same thing."""

import math

import pytest
import torch

from autograder.reference import since_2023 as ref
from autograder.reference.language_model import apply_rotary


def causal(T):
    return torch.ones(T, T, dtype=torch.bool).tril()


@pytest.fixture
def mla():
    torch.manual_seed(0)
    return ref.LatentAttention(d_model=32, num_heads=4, d_head=8, d_latent=12, d_rope=4).double()


def test_latent_attention_absorbed_equals_up_projected(mla):
    x = torch.randn(2, 7, 32, dtype=torch.float64)
    pos = torch.arange(7)
    out, w = mla(x, pos, causal(7))
    out_a, w_a = mla(x, pos, causal(7), absorbed=True)
    torch.testing.assert_close(out_a, out)
    torch.testing.assert_close(w_a, w)
    assert out.shape == (2, 7, 32) and w.shape == (2, 4, 7, 7)


@pytest.mark.parametrize("absorbed", [False, True])
def test_latent_attention_decodes_from_a_cache_of_latents(mla, absorbed):
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    full, _ = mla(x, torch.arange(9), causal(9))
    cache = ref.LatentCache(2, 9, 12, 4)
    cache.c, cache.k_rope = cache.c.double(), cache.k_rope.double()
    first, _ = mla(x[:, :5], torch.arange(5), causal(5), cache=cache, absorbed=absorbed)
    steps = [first]
    for t in range(5, 9):
        out, w = mla(x[:, t : t + 1], torch.arange(t, t + 1), cache=cache, absorbed=absorbed)
        assert w.shape == (2, 4, 1, t + 1)
        steps.append(out)
    torch.testing.assert_close(torch.cat(steps, 1), full)
    assert cache.length == 9 and cache.c.shape[-1] + cache.k_rope.shape[-1] == 16
    with pytest.raises(ValueError):
        cache.update(torch.zeros(2, 1, 12), torch.zeros(2, 1, 4))


def test_latent_cache_bytes_count_the_latent_and_the_rotary_key():
    assert ref.latent_cache_bytes(num_layers=2, d_latent=12, d_rope=4, bytes_per_number=2) == 64


def test_streaming_positions_keep_the_sinks_and_the_window():
    assert ref.streaming_positions(3, 4, 8) == [0, 1, 2]
    assert ref.streaming_positions(20, 4, 8) == [0, 1, 2, 3, *range(12, 20)]
    assert ref.streaming_positions(10, 4, 8) == list(range(10))
    assert ref.streaming_positions(20, 0, 5) == list(range(15, 20))


def test_sink_weight_has_its_closed_form():
    scores = torch.zeros(1, 2, 1, 5)
    sink = torch.tensor([0.0, math.log(3.0)])
    w = ref.softmax_with_sink(scores, sink)
    torch.testing.assert_close(w.sum(-1)[0, :, 0], torch.tensor([5 / 6, 5 / 8]))
    very_negative = ref.softmax_with_sink(torch.randn(2, 2, 3, 4), torch.full((2,), -1e9))
    torch.testing.assert_close(very_negative.sum(-1), torch.ones(2, 2, 3))


def test_linear_attention_parallel_equals_recurrent_with_a_fixed_state():
    torch.manual_seed(1)
    Q, K, V = (torch.randn(2, 3, 11, d, dtype=torch.float64) for d in (6, 6, 5))
    parallel = ref.linear_attention(Q, K, V)
    recurrent, (S, z) = ref.linear_attention_recurrent(Q, K, V)
    torch.testing.assert_close(recurrent, parallel)
    assert S.shape == (2, 3, 6, 5) and z.shape == (2, 3, 6)
    _, (S_long, _) = ref.linear_attention_recurrent(*(torch.cat([t, t], -2) for t in (Q, K, V)))
    assert S_long.shape == S.shape  # twice the sequence, the same state


def test_linear_state_bytes():
    assert ref.linear_state_bytes(2, 4, 16, 16, 4) == 2 * 4 * (256 + 16) * 4


def test_delta_rule_recalls_what_it_wrote_and_matches_its_matrix_form():
    torch.manual_seed(2)
    K = torch.eye(4, dtype=torch.float64)[None]  # orthonormal keys (1, 4, 4)
    V = torch.randn(1, 4, 3, dtype=torch.float64)
    _, S = ref.delta_rule(K, K, V, torch.ones(1, 4))
    torch.testing.assert_close(S[0] @ K[0].T, V[0].T)  # beta = 1: each key reads its value back
    Q, K, V = (torch.randn(2, 6, d, dtype=torch.float64) for d in (4, 4, 3))
    K = torch.nn.functional.normalize(K, dim=-1)
    beta, alpha = torch.rand(2, 6, dtype=torch.float64), torch.rand(2, 6, dtype=torch.float64)
    out, S = ref.delta_rule(Q, K, V, beta, alpha)
    S_ = torch.zeros(2, 3, 4, dtype=torch.float64)
    for t in range(6):
        k, v, b, a = K[:, t], V[:, t], beta[:, t, None, None], alpha[:, t, None, None]
        eye = torch.eye(4, dtype=torch.float64)
        S_ = a * S_ @ (eye - b * k[:, :, None] * k[:, None, :]) + b * v[:, :, None] * k[:, None, :]
        torch.testing.assert_close(out[:, t], (S_ @ Q[:, t, :, None])[..., 0])
    torch.testing.assert_close(S, S_)
    ones = torch.ones(2, 6, dtype=torch.float64)
    torch.testing.assert_close(
        ref.delta_rule(Q, K, V, beta, ones)[0], ref.delta_rule(Q, K, V, beta)[0]
    )


def test_rotary_with_its_frequencies_is_chapter_08s():
    x, pos = torch.randn(3, 10, 8), torch.arange(10)
    theta = ref.rotary_frequencies(8)
    torch.testing.assert_close(ref.apply_rotary_frequencies(x, pos, theta), apply_rotary(x, pos))
    # interpolation: position m at scale s turns as position m / s did
    pi = ref.interpolated_frequencies(theta, 4.0)
    torch.testing.assert_close(
        ref.apply_rotary_frequencies(x, 4 * pos, pi), ref.apply_rotary_frequencies(x, pos, theta)
    )


def test_yarn_keeps_the_fast_pairs_and_interpolates_the_slow_ones():
    theta = ref.rotary_frequencies(64)
    yarn = ref.yarn_frequencies(theta, scale=8.0, train_length=256)
    turns = 256 * theta / (2 * math.pi)
    torch.testing.assert_close(yarn[turns > 32], theta[turns > 32])
    torch.testing.assert_close(yarn[turns < 1], theta[turns < 1] / 8)
    between = (turns > 1) & (turns < 32)
    assert between.any()
    assert ((yarn[between] < theta[between]) & (yarn[between] > theta[between] / 8)).all()
    assert ref.yarn_attention_factor(1.0) == 1.0 and ref.yarn_attention_factor(8.0) > 1


@pytest.mark.parametrize("T, chunk_size", [(10, 1), (10, 3), (10, 4), (10, 10), (10, 16), (64, 8)])
def test_the_chunked_delta_rule_is_the_loop(T, chunk_size):
    g = torch.Generator().manual_seed(T * 100 + chunk_size)
    Q = torch.nn.functional.normalize(torch.randn(2, 3, T, 4, generator=g), dim=-1)
    K = torch.nn.functional.normalize(torch.randn(2, 3, T, 4, generator=g), dim=-1)
    K = K * (0.5 + 0.7 * torch.rand(2, 3, T, 1, generator=g))  # keys of other lengths than 1
    V, beta = torch.randn(2, 3, T, 5, generator=g), torch.rand(2, 3, T, generator=g)
    out, S = ref.delta_rule(Q, K, V, beta)
    chunked, S_chunked = ref.delta_rule_chunked(Q, K, V, beta, chunk_size)
    torch.testing.assert_close(chunked, out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(S_chunked, S, atol=1e-5, rtol=1e-5)


def test_streaming_scores_rotate_by_place_in_the_cache():
    g = torch.Generator().manual_seed(0)
    q, K = torch.randn(8, generator=g), torch.randn(12, 8, generator=g)
    kept = ref.streaming_positions(12, 2, 4)  # [0, 1, 8, 9, 10, 11]
    keys = apply_rotary(K[kept][None, None], torch.arange(6))[0, 0]
    query = apply_rotary(q[None, None, None], torch.tensor([6]))[0, 0, 0]
    torch.testing.assert_close(ref.streaming_scores(q, K, 2, 4), keys @ query / math.sqrt(8))


@pytest.mark.parametrize(
    "d, base, num_kept, beta",
    [(16, 1e4, 1, 32.0), (16, 1e4, 2, 32.0), (64, 5e5, 4, 16.0), (8, 100.0, 3, 32.0)],
)
def test_yarn_shortest_length_is_where_yarn_frequencies_keeps_the_pairs(d, base, num_kept, beta):
    L = ref.yarn_shortest_length(d, base, num_kept, beta)
    theta = ref.rotary_frequencies(d, base)
    assert ref.kept_pairs(theta, 4.0, L, beta) >= num_kept > ref.kept_pairs(theta, 4.0, L - 1, beta)


@pytest.mark.parametrize(
    "dims, num_new",
    [((16, 4, 4, 8, 4), 1), ((16, 4, 4, 8, 4), 4), ((16, 2, 8, 4, 2), 5), ((16, 4, 4, 8, 4), 8)],
)
def test_absorbed_cheaper_from_is_where_the_counted_flops_cross(dims, num_new):
    answer = ref.absorbed_cheaper_from(*dims, num_new=num_new)
    if answer is None:
        for cached in (num_new, 10 * num_new, 100 * num_new):
            counts = ref.decode_step_flops(*dims, num_new, cached)
            assert counts["absorbed"] >= counts["explicit"]
        return
    counts = ref.decode_step_flops(*dims, num_new, answer)
    assert counts["absorbed"] < counts["explicit"]
    if answer > num_new:
        counts = ref.decode_step_flops(*dims, num_new, answer - 1)
        assert counts["absorbed"] >= counts["explicit"]
