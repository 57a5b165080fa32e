"""Chapter 04's reference implementations against PyTorch's own operators."""

import math

import pytest
import torch
import torch.nn.functional as F

from autograder.reference import analysis
from autograder.reference.attention import (
    CrossAttention,
    SelfAttention,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
)


@pytest.mark.parametrize("shape", [(5, 7, 8), (2, 5, 7, 8), (2, 3, 4, 6, 16)])
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_torch_unmasked(shape, seed):
    g = torch.Generator().manual_seed(seed)
    *lead, T_q, T_k, d = shape
    Q, K, V = (torch.randn(*lead, n, d, generator=g) for n in (T_q, T_k, T_k))
    out, w = scaled_dot_product_attention(Q, K, V)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(Q, K, V))
    torch.testing.assert_close(w.sum(-1), torch.ones(*lead, T_q))


@pytest.mark.parametrize("mask_shape", [(2, 5, 7), (2, 1, 7), (5, 7), (7,)])
def test_matches_torch_masked(mask_shape):
    g = torch.Generator().manual_seed(0)
    Q, K, V = (
        torch.randn(2, 5, 8, generator=g),
        torch.randn(2, 7, 8, generator=g),
        torch.randn(2, 7, 3, generator=g),
    )
    mask = torch.rand(mask_shape, generator=g) > 0.5
    mask[..., 0] = True
    out, w = scaled_dot_product_attention(Q, K, V, mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(Q, K, V, attn_mask=mask))
    assert (w.masked_fill(mask, 0) == 0).all()


def test_fully_masked_row_gives_zeros():
    Q, K, V = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 2)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False
    out, w = scaled_dot_product_attention(Q, K, V, mask)
    assert torch.equal(w[1], torch.zeros(5)) and torch.equal(out[1], torch.zeros(2))
    assert torch.isfinite(out).all()


def test_masks():
    assert padding_mask(torch.tensor([1, 3]), 4).tolist() == [
        [[True, False, False, False]],
        [[True, True, True, False]],
    ]
    assert padding_mask(torch.tensor([2, 2])).shape == (2, 1, 2)
    assert torch.equal(causal_mask(4), torch.ones(4, 4).tril().bool())


def test_causal_attention_matches_torch_is_causal():
    x = torch.randn(2, 6, 8)
    out, _ = scaled_dot_product_attention(x, x, x, causal_mask(6))
    torch.testing.assert_close(out, F.scaled_dot_product_attention(x, x, x, is_causal=True))


def test_self_and_cross_attention_layers():
    torch.manual_seed(0)
    layer = SelfAttention(d_model=12, d_k=6, d_v=4)
    x = torch.randn(3, 5, 12)
    out, w = layer(x)
    expected = F.scaled_dot_product_attention(layer.W_q(x), layer.W_k(x), layer.W_v(x))
    torch.testing.assert_close(out, expected)
    assert w.shape == (3, 5, 5)
    cross = CrossAttention(d_model=12, d_k=6)
    memory = torch.randn(3, 9, 12)
    out, w = cross(x, memory)
    assert out.shape == (3, 5, 6) and w.shape == (3, 5, 9)


def test_analysis_measures_what_the_paper_says():
    var = analysis.dot_product_variance([4, 256], num_samples=20000)
    assert var["q.k"][1] == pytest.approx(256, rel=0.1)  # Var(q.k) = d_k
    assert all(v == pytest.approx(1, rel=0.1) for v in var["q.k / sqrt(d_k)"])
    sat = analysis.softmax_saturation([4, 512], num_queries=500)
    assert sat["max weight, unscaled"][1] > 0.8 > sat["max weight, scaled"][1]
    assert sat["grad norm, unscaled"][1] < sat["grad norm, scaled"][1]
    cost = analysis.layer_cost([8, 32], d_model=16, batch=2)
    assert all(t > 0 and math.isfinite(t) for ts in cost.values() for t in ts)


def test_counted_multiply_adds_of_a_layer():
    """Chapter 04's second question is checked against these counts: the projections grow
    like n, attention's two products like n^2, on the meta device as on the CPU."""
    from torch.utils.flop_counter import FlopCounterMode

    from autograder.reference.attention import counted_multiply_adds

    d_model, d_k, d_v = 12, 6, 3
    counted = counted_multiply_adds(d_model, d_k, d_v, [1, 5, 9])
    assert counted["projections"] == [n * d_model * (2 * d_k + d_v) for n in (1, 5, 9)]
    assert counted["attention"] == [n * n * (d_k + d_v) for n in (1, 5, 9)]
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        SelfAttention(d_model, d_k, d_v)(torch.randn(1, 9, d_model))
    assert counter.get_total_flops() // 2 == counted["projections"][2] + counted["attention"][2]
