"""Measurements behind the figures of the dot-product attention page (chapter 04)."""

import math
import time
from collections.abc import Callable

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


def median_seconds(fn, repeats: int = 5) -> float:
    """Median wall-clock time of ``repeats`` calls of ``fn()``, in seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def table1_layers(d_model: int, kernel_size: int = 3) -> dict[str, Callable]:
    """The three layers of Vaswani et al. (2017) Table 1, each mapping a batch of n vectors
    of width d to n vectors of width d, (B, n, d) -> (B, n, d), with random weights and no
    bias.

    self-attention:  softmax(Q K^T / sqrt(d)) V with Q, K, V = x W_q, x W_k, x W_v;
                     3 n d^2 + 2 n^2 d multiply-adds, all positions at once.
    recurrent:       h_t = tanh(W_ih x_t + W_hh h_{t-1}), stepped one position at a time,
                     as a recurrent layer must: n sequential steps of 2 d^2 multiply-adds.
    convolutional:   a kernel of width k over the positions, zero-padded to keep length n;
                     k n d^2 multiply-adds, all positions at once.
    """
    W_q, W_k, W_v = (nn.Linear(d_model, d_model, bias=False) for _ in range(3))
    W_ih, W_hh = (torch.randn(d_model, d_model) / math.sqrt(d_model) for _ in range(2))
    conv = nn.Conv1d(d_model, d_model, kernel_size, padding=kernel_size // 2, bias=False)

    def attention(x):
        return scaled_dot_product_attention(W_q(x), W_k(x), W_v(x))[0]  # (B, n, d)

    def recurrent(x):
        h = x.new_zeros(x.size(0), d_model)  # (B, d)
        states = []
        for t in range(x.size(1)):
            h = torch.tanh(x[:, t] @ W_ih.T + h @ W_hh.T)  # (B, d)
            states.append(h)
        return torch.stack(states, dim=1)  # (B, n, d)

    def convolutional(x):
        return conv(x.transpose(1, 2)).transpose(1, 2)  # (B, d, n) inside, (B, n, d) out

    return {"self-attention": attention, "recurrent": recurrent, "convolutional": convolutional}


@torch.no_grad()
def layer_cost(lengths, d_model: int = 64, batch: int = 8, seed: int = 0):
    """Measured forward time (ms) of one self-attention layer (O(n^2 d)) and one recurrent
    layer (O(n d^2), n sequential steps) on sequences of each length n (Vaswani et al.
    Table 1); the layers are those of :func:`table1_layers`."""
    torch.manual_seed(seed)
    layers = table1_layers(d_model)
    out = {"self-attention": [], "recurrent": []}
    for n in lengths:
        x = torch.randn(batch, n, d_model)
        for name in out:
            out[name].append(median_seconds(lambda x=x, f=layers[name]: f(x)) * 1e3)
    return out
