"""Soft against hard attention (Xu et al. 2015), measured on the smallest case there is.

A query scores ``n`` locations, ``alpha = softmax(s)``, and each location ``j`` would give a
loss ``L_j`` if read (for example the error of the caption word predicted from it).

- Hard attention samples one location ``j ~ alpha`` and pays ``L_j``. Its objective is the
  expected loss ``E_alpha[L] = sum_j alpha_j L_j``, whose exact gradient is

      dE/ds_k = alpha_k (L_k - E_alpha[L]).

  Training only sees samples, so it follows the REINFORCE (score-function) estimate

      g = (L_j - b) * d log alpha_j / ds = (L_j - b) (e_j - alpha),   j ~ alpha,

  unbiased for any baseline ``b`` that does not depend on the sample, and noisy: its
  variance falls only as 1 / (number of samples), and a good baseline shrinks it.
- Soft attention reads the expectation of the values, ``c = sum_j alpha_j v_j``, and is
  trained through it with exact gradients: a different objective (the loss of the average,
  not the average loss), with no sampling noise.

All functions are batch-free and small; the chapter 07 page plots what they measure.
"""

import torch


def expected_loss_gradient(scores: torch.Tensor, losses: torch.Tensor) -> torch.Tensor:
    """Exact d E_alpha[L] / ds for alpha = softmax(scores): alpha * (L - alpha . L).

    scores, losses: (n,). Returns (n,).
    """
    alpha = torch.softmax(scores, dim=-1)
    return alpha * (losses - (alpha * losses).sum())


def reinforce_gradient(
    scores: torch.Tensor, losses: torch.Tensor, samples: torch.Tensor, baseline: float = 0.0
) -> torch.Tensor:
    """REINFORCE estimate of d E_alpha[L] / ds from sampled locations, averaged over them.

    g = mean_k (L_{j_k} - b) (e_{j_k} - alpha)   (Williams 1992; Xu et al. 2015, eq. 12).
    scores, losses: (n,); samples: (..., K) sampled location indices, any leading dims (one
    estimate each). Returns (..., n).
    """
    alpha = torch.softmax(scores, dim=-1)
    one_hot = torch.nn.functional.one_hot(samples, scores.numel()).to(scores.dtype)  # (..., K, n)
    weights = (losses[samples] - baseline)[..., None]  # (..., K, 1)
    return (weights * (one_hot - alpha)).mean(dim=-2)


def reinforce_error(
    scores: torch.Tensor,
    losses: torch.Tensor,
    num_samples: int,
    trials: int = 2000,
    baseline: float = 0.0,
    generator: torch.Generator | None = None,
) -> float:
    """Mean squared error of the REINFORCE estimate with ``num_samples`` samples against the
    exact gradient, over ``trials`` independent estimates (its variance, since it is
    unbiased)."""
    alpha = torch.softmax(scores, dim=-1)
    exact = expected_loss_gradient(scores, losses)
    draws = torch.multinomial(
        alpha.expand(trials, -1), num_samples, replacement=True, generator=generator
    )  # (trials, K)
    estimates = reinforce_gradient(scores, losses, draws, baseline)  # (trials, n)
    return ((estimates - exact) ** 2).sum(dim=-1).mean().item()


def train_scores(
    values: torch.Tensor,
    target: torch.Tensor,
    mode: str,
    steps: int = 300,
    lr: float = 0.5,
    samples_per_step: int = 1,
    baseline: bool = True,
    generator: torch.Generator | None = None,
) -> list[float]:
    """Learn the scores of one query over ``values`` (n, d) so that what it reads matches
    ``target`` (d,), starting from uniform weights. Returns the expected loss
    E_alpha[||v_j - target||^2] after each step.

    mode "soft": gradient descent on the loss of the weighted average ||sum_j alpha_j v_j -
    target||^2, exact gradients. mode "hard": gradient descent on E_alpha[L] with the REINFORCE
    estimate from ``samples_per_step`` sampled locations; with ``baseline``, b is a running
    average of the losses seen so far (Xu et al. 2015 use such a moving average).
    """
    if mode not in ("soft", "hard"):
        raise ValueError(f"mode must be 'soft' or 'hard', not {mode!r}")
    losses = ((values - target) ** 2).sum(dim=-1)  # (n,) the loss of reading each location
    scores = torch.zeros(values.size(0), requires_grad=True)
    running, history = None, []
    for _ in range(steps):
        if mode == "soft":
            alpha = torch.softmax(scores, dim=-1)
            loss = (((alpha[:, None] * values).sum(dim=0) - target) ** 2).sum()
            (grad,) = torch.autograd.grad(loss, scores)
        else:
            with torch.no_grad():
                alpha = torch.softmax(scores, dim=-1)
                picks = torch.multinomial(alpha, samples_per_step, True, generator=generator)
                b = running if (baseline and running is not None) else 0.0
                grad = reinforce_gradient(scores, losses, picks, baseline=b)
                seen = losses[picks].mean().item()
                running = seen if running is None else 0.9 * running + 0.1 * seen
        with torch.no_grad():
            scores -= lr * grad
            history.append((torch.softmax(scores, dim=-1) * losses).sum().item())
    return history
