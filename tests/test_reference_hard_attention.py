"""Soft against hard attention: the exact gradient of the expected loss, the REINFORCE
estimate (unbiased, variance 1/K, smaller with a baseline), and the two ways to learn where
to look (autograder/reference/hard_attention.py)."""

import pytest
import torch

from autograder.reference.hard_attention import (
    expected_loss_gradient,
    reinforce_error,
    reinforce_gradient,
    train_scores,
)


@pytest.fixture
def problem():
    g = torch.Generator().manual_seed(0)
    values = torch.randn(16, 8, generator=g)
    target = values[3] + 0.3 * torch.randn(8, generator=g)
    scores = torch.randn(16, generator=g)
    losses = ((values - target) ** 2).sum(-1)
    return values, target, scores, losses


def test_exact_gradient_matches_autograd(problem):
    _, _, scores, losses = problem
    s = scores.clone().requires_grad_()
    (torch.softmax(s, -1) * losses).sum().backward()
    torch.testing.assert_close(expected_loss_gradient(scores, losses), s.grad)


def test_reinforce_is_unbiased_with_and_without_a_baseline(problem):
    _, _, scores, losses = problem
    g = torch.Generator().manual_seed(1)
    samples = torch.multinomial(torch.softmax(scores, -1), 200_000, True, generator=g)
    exact = expected_loss_gradient(scores, losses)
    for baseline in (0.0, losses.mean().item()):
        estimate = reinforce_gradient(scores, losses, samples, baseline=baseline)
        assert (estimate - exact).norm() < 0.05 * losses.max(), baseline


def test_reinforce_variance_falls_as_one_over_the_samples(problem):
    _, _, scores, losses = problem
    errors = [
        reinforce_error(scores, losses, k, generator=torch.Generator().manual_seed(2))
        for k in (1, 16)
    ]
    assert 10 < errors[0] / errors[1] < 25  # 16 in expectation


def test_a_baseline_reduces_the_variance(problem):
    _, _, scores, losses = problem
    g = torch.Generator().manual_seed(3)
    plain = reinforce_error(scores, losses, 4, generator=g)
    with_mean = reinforce_error(scores, losses, 4, baseline=losses.mean().item(), generator=g)
    assert with_mean < plain / 2


def test_one_sample_is_far_noisier_than_the_gradient_is_large(problem):
    _, _, scores, losses = problem
    exact = expected_loss_gradient(scores, losses)
    error = reinforce_error(scores, losses, 1, generator=torch.Generator().manual_seed(4))
    assert error > 3 * exact.pow(2).sum().item()


def test_soft_training_is_deterministic_and_hard_training_finds_the_best_location(problem):
    values, target, _, losses = problem
    soft = [train_scores(values, target, "soft", steps=100, lr=0.1) for _ in range(2)]
    assert soft[0] == soft[1] and soft[0][-1] < soft[0][0]
    found = 0
    for seed in range(5):
        hard = train_scores(
            values, target, "hard", steps=600, lr=0.1, generator=torch.Generator().manual_seed(seed)
        )
        found += hard[-1] < 1.1 * losses.min().item()
    assert found >= 3  # most runs; a run can also commit early to a poor location


def test_unknown_mode_is_refused(problem):
    values, target, _, _ = problem
    with pytest.raises(ValueError, match="'soft' or 'hard'"):
        train_scores(values, target, "medium")
