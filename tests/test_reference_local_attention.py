"""Tests of chapter 02's reference local-p attention (Luong et al. 2015, eq. 9-10):
the window, the padding, sigma = D / 2, the global limit, the windowed decoder step and
the gradients that reach the position predictor."""

import math

import pytest
import torch

from autograder.reference.bahdanau import (
    AttentionDecoder,
    LocalPPosition,
    Seq2SeqAttention,
    local_p_weights,
    masked_softmax,
)
from autograder.reference.seq2seq import Encoder, lengths_to_mask, sequence_loss


def gaussian(S, p, D):
    j = torch.arange(S, dtype=torch.float)
    return torch.exp(-((j - p) ** 2) / (2 * (D / 2) ** 2))


def test_uniform_scores_give_the_gaussian_inside_the_window():
    scores, mask = torch.zeros(1, 9), torch.ones(1, 9, dtype=torch.bool)
    w = local_p_weights(scores, mask, torch.tensor([4.0]), D=2)[0]
    inside = torch.tensor([0, 0, 1, 1, 1, 1, 1, 0, 0], dtype=torch.bool)
    # the window |j - 4| <= 2 holds 5 positions, endpoints included
    assert torch.equal(w > 0, inside)
    torch.testing.assert_close(w[inside], gaussian(9, 4.0, 2)[inside] / 5)
    # sigma = D / 2: one step from the centre gives exp(-1/2), two give exp(-2)
    torch.testing.assert_close(w[5] / w[4], torch.tensor(math.exp(-0.5)))
    torch.testing.assert_close(w[6] / w[4], torch.tensor(math.exp(-2.0)))


def test_fractional_position_and_window_edges():
    w = local_p_weights(
        torch.zeros(1, 10), torch.ones(1, 10, dtype=torch.bool), torch.tensor([3.4]), 2
    )
    # |j - 3.4| <= 2: j = 2, 3, 4, 5 (1 is 2.4 away, 6 is 2.6 away)
    assert (w[0] > 0).nonzero().flatten().tolist() == [2, 3, 4, 5]
    torch.testing.assert_close(w[0, 2:6], gaussian(10, 3.4, 2)[2:6] / 4)


def test_padding_and_fully_masked_rows_give_zeros():
    scores = torch.randn(3, 6)
    mask = lengths_to_mask(torch.tensor([6, 3, 0]), 6)
    p = torch.tensor([2.0, 2.0, 2.0])
    w = local_p_weights(scores, mask, p, D=3)
    assert (w[~mask] == 0).all()
    assert torch.equal(w[2], torch.zeros(6))
    assert not w.isnan().any()
    # a window with no real token in it gives zeros too
    far = local_p_weights(scores, mask, torch.tensor([0.0, 9.0, 0.0]), D=1)
    assert torch.equal(far[1], torch.zeros(6))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_wide_window_gives_the_global_weights_times_the_gaussian(seed):
    g = torch.Generator().manual_seed(seed)
    B, S, D = 4, 7, 8
    scores = torch.randn(B, S, generator=g) * 2
    mask = lengths_to_mask(torch.randint(1, S + 1, (B,), generator=g), S)
    p = torch.rand(B, generator=g) * S
    expected = masked_softmax(scores, mask) * torch.stack([gaussian(S, q, D) for q in p])
    torch.testing.assert_close(local_p_weights(scores, mask, p, D), expected)


def test_the_softmax_is_over_the_window_only():
    scores = torch.tensor([[5.0, 0.0, 0.0, 0.0, 0.0, 5.0]])
    w = local_p_weights(scores, torch.ones(1, 6, dtype=torch.bool), torch.tensor([2.5]), 1)
    # window |j - 2.5| <= 1: positions 2 and 3, equal scores; the 5.0s outside do not count
    torch.testing.assert_close(w[0, 2], torch.tensor(0.5 * math.exp(-0.5)))


def test_position_uses_the_real_length():
    torch.manual_seed(0)
    position = LocalPPosition(d_query=5, d_attn=4)
    s = torch.randn(3, 5)
    p = position(s, torch.tensor([10, 4, 1]))
    fraction = torch.sigmoid(position.v_p(torch.tanh(position.W_p(s)))).squeeze(-1)
    torch.testing.assert_close(p, torch.tensor([10.0, 4.0, 1.0]) * fraction)
    assert ((p > 0) & (p < torch.tensor([10.0, 4.0, 1.0]))).all()


def make_decoder(window, score="additive", seed=0):
    torch.manual_seed(seed)
    return AttentionDecoder(11, 4, 6, d_attn=5, score=score, attention="local-p", window=window)


@pytest.mark.parametrize("score", ["additive", "dot", "general"])
def test_the_windowed_step_equals_scoring_the_whole_source(score):
    """The decoder scores only 2D + 1 gathered positions; the weights and the context must
    be those of local_p_weights on all S scores."""
    decoder = make_decoder(window=2, score=score)
    B, S = 5, 17
    torch.manual_seed(1)
    mask = lengths_to_mask(torch.tensor([17, 12, 5, 3, 1]), S)
    h = torch.randn(B, S, 6) * mask[:, :, None]
    s, prev = torch.randn(B, 6), torch.randint(0, 11, (B,))
    keys = decoder.score.project_keys(h)
    alpha, c = decoder.attend_local_p(s, h, mask, keys)
    p = decoder.position(s, mask.sum(-1))
    full = local_p_weights(decoder.score(s, h, keys), mask, p, 2)
    torch.testing.assert_close(alpha, full)
    torch.testing.assert_close(c, (full[:, :, None] * h).sum(1))
    logits, hidden, weights = decoder.step(prev, s, h, mask, keys)
    torch.testing.assert_close(weights, full)
    assert logits.shape == (B, 11) and hidden.shape == (B, 6)


def test_the_step_scores_2D_plus_1_positions():
    decoder = make_decoder(window=3)
    seen = []
    forward = decoder.score.forward
    decoder.score.forward = lambda s, h, keys=None: seen.append(h.size(1)) or forward(s, h, keys)
    for S in (4, 7, 8, 30):
        h, mask = torch.randn(2, S, 6), torch.ones(2, S, dtype=torch.bool)
        decoder.step(torch.tensor([1, 2]), torch.randn(2, 6), h, mask)
    assert seen == [4, 7, 7, 7]


def test_gradients_reach_the_position_predictor_and_the_score():
    torch.manual_seed(0)
    decoder = make_decoder(window=2)
    model = Seq2SeqAttention(Encoder(9, 4, 6), decoder)
    src = torch.randint(3, 9, (3, 12))
    lengths = torch.tensor([12, 8, 5])
    src[1, 8:] = 0
    src[2, 5:] = 0
    tgt = torch.randint(3, 11, (3, 6))
    logits, weights = model(src, lengths, tgt)
    assert weights.shape == (3, 6, 12)
    assert (weights[1, :, 8:] == 0).all() and (weights[2, :, 5:] == 0).all()
    sequence_loss(logits, tgt).backward()
    for name in ("position.W_p.weight", "position.v_p.weight", "score.W.weight", "score.v.weight"):
        grad = dict(decoder.named_parameters())[name].grad
        assert grad is not None and grad.abs().sum() > 0, name


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="global"):
        AttentionDecoder(5, 2, 3, attention="local")
    with pytest.raises(ValueError, match="D must be >= 1"):
        AttentionDecoder(5, 2, 3, attention="local-p", window=0)


@pytest.mark.parametrize("kind", ["additive", "general", "dot"])
def test_counted_score_multiply_adds(kind):
    """Chapter 02's second question is checked against these counts: keys projected once
    per source, then one score call per step, as Seq2SeqAttention decodes."""
    from autograder.reference.bahdanau import counted_score_multiply_adds

    T, S, d_query, d_key, d_attn = 6, 11, 8, 8 if kind == "dot" else 10, 3
    expected = {
        "additive": S * d_key * d_attn + T * (d_query * d_attn + S * d_attn),
        "general": T * (d_query * d_key + S * d_key),
        "dot": T * S * d_key,
    }[kind]
    assert counted_score_multiply_adds(kind, T, S, d_query, d_key, d_attn) == expected


def test_the_course_decoder_projects_the_keys_once_per_source():
    torch.manual_seed(0)
    model = Seq2SeqAttention(Encoder(12, 4, 6), AttentionDecoder(12, 4, 6, d_attn=5))
    calls = {"project_keys": 0, "score": 0}
    project, score = model.decoder.score.project_keys, model.decoder.score.forward

    def counted(name, fn):
        def call(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)

        return call

    model.decoder.score.project_keys = counted("project_keys", project)
    model.decoder.score.forward = counted("score", score)
    model(torch.randint(3, 12, (2, 7)), torch.tensor([7, 5]), torch.randint(3, 12, (2, 9)))
    assert calls == {"project_keys": 1, "score": 9}
