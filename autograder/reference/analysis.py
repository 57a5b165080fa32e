"""Measurements behind the figures of the dot-product attention page (chapter 04)."""

import math
import time

import torch
from torch import nn

from autograder.reference.attention import scaled_dot_product_attention


def dot_product_variance(d_ks, num_samples: int = 20000, seed: int = 0) -> dict[str, list[float]]:
    """Variance of q.k, unscaled and scaled by 1/sqrt(d_k), for q, k with independent
    N(0, 1) components (Vaswani et al. 2017, footnote 4: Var(q.k) = d_k)."""
    g = torch.Generator().manual_seed(seed)
    raw, scaled = [], []
    for d_k in d_ks:
        q = torch.randn(num_samples, d_k, generator=g)
        k = torch.randn(num_samples, d_k, generator=g)
        dots = (q * k).sum(-1)
        raw.append(dots.var().item())
        scaled.append((dots / math.sqrt(d_k)).var().item())
    return {"q.k": raw, "q.k / sqrt(d_k)": scaled}


def softmax_saturation(d_ks, num_keys: int = 16, num_queries: int = 2000, seed: int = 0):
    """Mean of the largest attention weight per query, and the mean gradient norm of the
    softmax input, with and without the 1/sqrt(d_k) scale.

    Without the scale the largest weight tends to 1 as d_k grows (a one-hot softmax) and
    the gradient through the softmax vanishes.
    """
    g = torch.Generator().manual_seed(seed)
    out = {
        "max weight, unscaled": [],
        "max weight, scaled": [],
        "grad norm, unscaled": [],
        "grad norm, scaled": [],
    }
    for d_k in d_ks:
        q = torch.randn(num_queries, 1, d_k, generator=g)
        k = torch.randn(num_queries, num_keys, d_k, generator=g)
        for label, scale in (("unscaled", 1.0), ("scaled", 1 / math.sqrt(d_k))):
            scores = ((q @ k.transpose(-2, -1)) * scale).requires_grad_(True)  # (N, 1, n)
            weights = scores.softmax(-1)
            # gradient of a random linear read-out of the weights w.r.t. the scores
            target = torch.randn(weights.shape, generator=g)
            (weights * target).sum().backward()
            out[f"max weight, {label}"].append(weights.max(-1).values.mean().item())
            out[f"grad norm, {label}"].append(scores.grad.norm(dim=-1).mean().item())
    return out


def _median_seconds(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


@torch.no_grad()
def layer_cost(lengths, d_model: int = 64, batch: int = 8, seed: int = 0):
    """Measured forward time of one self-attention layer (O(n^2 d)) and one recurrent layer
    (O(n d^2), n sequential steps) on sequences of each length n (Vaswani et al. Table 1)."""
    torch.manual_seed(seed)
    rnn = nn.RNN(d_model, d_model, batch_first=True)
    W_q, W_k, W_v = (nn.Linear(d_model, d_model, bias=False) for _ in range(3))

    def attention(x):
        return scaled_dot_product_attention(W_q(x), W_k(x), W_v(x))[0]

    def recurrent(x):
        # step by step, as a recurrent layer must: n sequential operations
        h = torch.zeros(x.size(0), d_model)
        for t in range(x.size(1)):
            h = torch.tanh(rnn.weight_ih_l0 @ x[:, t].T + rnn.weight_hh_l0 @ h.T).T
        return h

    out = {"self-attention": [], "recurrent": []}
    for n in lengths:
        x = torch.randn(batch, n, d_model)
        out["self-attention"].append(_median_seconds(lambda x=x: attention(x)) * 1e3)
        out["recurrent"].append(_median_seconds(lambda x=x: recurrent(x)) * 1e3)
    return out
