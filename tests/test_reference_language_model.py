"""Chapter 08's reference implementations against PyTorch's own operators and against their
defining properties, and the model built from them (decoding with the cache equals a full
recomputation, padding included)."""

import math

import pytest
import torch
import torch.nn.functional as F

from attention_course.language_model import (
    DecoderLM,
    LMConfig,
    counting_text,
    counting_vocab,
    decode_step_flops,
    greedy_decode,
    in_context_losses,
    log_log_slope,
    periodic_tokens,
)
from autograder.reference.language_model import (
    PARTS,
    GroupedQueryAttention,
    KVCache,
    alibi_bias,
    alibi_slopes,
    apply_rotary,
    kv_cache_bytes,
    kv_cache_max_len,
    measured_window_field,
    prefix_matching_score,
    sliding_window_mask,
    window_layers_to_reach,
    window_receptive_field,
)
from autograder.reference.multi_head import MultiHeadAttention

pytestmark = pytest.mark.usefixtures("one_thread")


def test_rotary_keeps_norms_and_scores_depend_on_the_offset_only():
    q, k = torch.randn(32), torch.randn(32)
    pos = torch.arange(20)
    rq, rk = apply_rotary(q.expand(20, 32), pos), apply_rotary(k.expand(20, 32), pos)
    torch.testing.assert_close(rq.norm(dim=-1), q.norm().expand(20))
    scores = rq @ rk.T
    for offset in (-7, 0, 4):
        diag = torch.diagonal(scores, offset)
        torch.testing.assert_close(diag, diag[0].expand_as(diag), atol=1e-4, rtol=1e-4)


def test_rotary_pairs_neighbours_as_a_complex_product():
    """RoFormer eq. 34 is the complex product (x_{2i} + i x_{2i+1}) e^{i m theta_i}."""
    x, pos = torch.randn(3, 7, 16), torch.arange(7)
    theta = 10000 ** (-torch.arange(0, 16, 2) / 16)
    z = torch.view_as_complex(x.view(3, 7, 8, 2)) * torch.polar(
        torch.ones(7, 8), pos[:, None] * theta
    )
    torch.testing.assert_close(apply_rotary(x, pos), torch.view_as_real(z).flatten(-2))


def test_alibi_slopes_are_the_papers_sequence():
    torch.testing.assert_close(alibi_slopes(8), 1 / 2 ** torch.arange(1, 9.0))
    bias = alibi_bias(alibi_slopes(2), 3, 5)
    assert bias.shape == (2, 3, 5)
    assert torch.isinf(bias[0, 0, 3:]).all() and not torch.isinf(bias[:, 2]).any()
    torch.testing.assert_close(bias[1, 2], -alibi_slopes(2)[1] * torch.tensor([4.0, 3, 2, 1, 0]))


def test_sliding_window_mask_and_the_receptive_field_measured():
    assert sliding_window_mask(5, 2).sum(-1).tolist() == [1, 2, 2, 2, 2]
    for layers, window in [(1, 3), (3, 3), (2, 5)]:
        torch.manual_seed(0)
        mods = [GroupedQueryAttention(8, 2, 2).double() for _ in range(layers)]
        x = torch.randn(1, 30, 8, dtype=torch.float64, requires_grad=True)
        h = x
        for m in mods:
            h = h + m(h, sliding_window_mask(30, window))[0]
        h[0, -1].sum().backward()
        assert int((x.grad[0].abs().sum(-1) > 0).sum()) == window_receptive_field(layers, window)


@pytest.mark.parametrize("context, window", [(2, 2), (20, 4), (21, 4), (22, 4), (6, 9)])
def test_the_layers_to_reach_a_context_are_the_fewest_measured(context, window):
    layers = window_layers_to_reach(context, window)
    assert measured_window_field(layers, window, context, 0) == context
    assert layers == 1 or measured_window_field(layers - 1, window, context, 0) < context


@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])
def test_grouped_query_attention_against_pytorch(num_kv_heads):
    torch.manual_seed(num_kv_heads)
    gqa = GroupedQueryAttention(32, 4, num_kv_heads)
    x = torch.randn(2, 6, 32)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    out, _ = gqa(x, causal)
    Q = gqa.W_q(x).view(2, 6, 4, 8).transpose(1, 2)
    K = gqa.W_k(x).view(2, 6, num_kv_heads, 8).transpose(1, 2)
    V = gqa.W_v(x).view(2, 6, num_kv_heads, 8).transpose(1, 2)
    expected = F.scaled_dot_product_attention(Q, K, V, attn_mask=causal, enable_gqa=True)
    torch.testing.assert_close(out, gqa.W_o(expected.transpose(1, 2).reshape(2, 6, 32)))


def test_multi_head_attention_is_grouped_query_attention_with_every_head():
    gqa, mha = GroupedQueryAttention(16, 4, 4), MultiHeadAttention(16, 4)
    mha.load_state_dict(gqa.state_dict())
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(gqa(x)[0], mha(x, x, x)[0])


def test_cache_returns_the_past_and_the_new():
    cache = KVCache(1, 1, 4, 2)
    cache.update(torch.ones(1, 1, 2, 2), torch.ones(1, 1, 2, 2))
    K, _ = cache.update(2 * torch.ones(1, 1, 1, 2), torch.ones(1, 1, 1, 2))
    assert K[0, 0, :, 0].tolist() == [1, 1, 2] and cache.length == 3
    with pytest.raises(ValueError):
        cache.update(torch.ones(1, 1, 2, 2), torch.ones(1, 1, 2, 2))


@pytest.mark.parametrize("position", ["rotary", "alibi", "sinusoidal", "learned", "none"])
def test_decoding_with_the_cache_equals_recomputing_with_padding(position):
    torch.manual_seed(0)
    cfg = LMConfig(
        vocab_size=11, d_model=16, num_heads=4, num_kv_heads=2, d_ff=32, position=position, window=4
    )
    model = DecoderLM(cfg, PARTS).eval()
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10], [3, 3]]
    tokens, cached = greedy_decode(model, prompts, 6, use_cache=True)
    same, full = greedy_decode(model, prompts, 6, use_cache=False)
    torch.testing.assert_close(cached, full, atol=1e-5, rtol=1e-4)
    assert torch.equal(tokens, same)
    for b, prompt in enumerate(prompts):  # padding changes nothing: each prompt alone
        torch.testing.assert_close(
            greedy_decode(model, [prompt], 6, False)[1][0], full[b], atol=1e-5, rtol=1e-4
        )


def test_cache_bytes_and_flops_per_token():
    torch.manual_seed(0)
    model = DecoderLM(LMConfig(vocab_size=len(counting_vocab()), num_kv_heads=2), PARTS).eval()
    caches = model.new_caches(3, 10)
    assert sum(c.K.nbytes + c.V.nbytes for c in caches) == kv_cache_bytes(2, 3, 2, 16, 10)
    longest = kv_cache_max_len(kv_cache_bytes(2, 3, 2, 16, 10) + 1, 2, 3, 2, 16)
    assert longest == 10 and kv_cache_bytes(2, 3, 2, 16, 11) > kv_cache_bytes(2, 3, 2, 16, 10) + 1
    contexts = [128, 256, 512]
    cached = [decode_step_flops(model, n, True) for n in contexts]
    full = [decode_step_flops(model, n, False) for n in contexts]
    assert all(c < f / 50 for c, f in zip(cached, full, strict=True))
    assert log_log_slope(contexts, full) > 1.0 and log_log_slope(contexts, cached) < 0.5


def test_prefix_matching_score_of_an_exact_induction_head_and_the_data():
    x, y, periods = periodic_tokens(
        4, 30, 1000, torch.Generator().manual_seed(0)
    )  # no repeats by chance
    assert torch.equal(x[:, 1:], y[:, :-1])
    for b in range(4):
        p = int(periods[b])
        assert torch.equal(x[b, p:], x[b, : 30 - p])
    T = 30
    weights = torch.zeros(4, 1, T, T)
    for b in range(4):
        p = int(periods[b])
        for i in range(p, T):
            weights[b, 0, i, i - p + 1] = 1.0
    assert prefix_matching_score(weights, x).item() > 0.9
    uniform = torch.ones(T, T).tril() / torch.arange(1, T + 1.0)[:, None]
    assert prefix_matching_score(uniform.expand(4, 1, T, T), x).item() < 0.3


def test_counting_text_counts():
    vocab = counting_vocab()
    x, y = counting_text(2, 40, torch.Generator().manual_seed(1))
    assert x.shape == y.shape == (2, 40) and torch.equal(x[:, 1:], y[:, :-1])
    words = " ".join(vocab[i] for i in x[0].tolist())
    assert words.count(",") >= 3


def test_in_context_losses_are_finite():
    torch.manual_seed(0)
    model = DecoderLM(
        LMConfig(vocab_size=20, num_heads=1, num_kv_heads=1, d_ff=0, norm=False), PARTS
    )
    x, y, p = periodic_tokens(8, 30, 20, torch.Generator().manual_seed(0))
    first, after = in_context_losses(model, x, y, p)
    assert math.isfinite(first) and math.isfinite(after)
