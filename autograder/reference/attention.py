"""Scaled dot-product attention, masks and a self-attention layer (chapter 04).

Mask convention, used everywhere in the course: a boolean ``mask`` broadcastable to
``(..., T_q, T_k)`` with ``mask[..., i, j]`` True where query i may attend to key j.
A query whose every key is masked attends to nothing: its weights and output are zero
(a plain ``torch.softmax`` over a row of -inf gives NaN; we choose zeros, as PyTorch's
``F.scaled_dot_product_attention`` does on the CPU in torch 2.13, so padding queries stay
finite).
"""

import math

import torch
from torch import nn


def scaled_dot_product_attention(
    Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Attention(Q, K, V) = softmax(Q K^T / \sqrt{d_k}) V  (Vaswani et al. 2017, eq. 1).

    Q: (..., T_q, d_k), K: (..., T_k, d_k), V: (..., T_k, d_v), any leading batch dims;
    mask: bool, broadcastable to (..., T_q, T_k), True where attending is allowed.
    Returns output (..., T_q, d_v) and weights (..., T_q, T_k).
    """
    d_k = Q.size(-1)
    # scores = Q K^T / sqrt(d_k)
    scores = Q @ K.transpose(-2, -1) / math.sqrt(d_k)  # (..., T_q, T_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # (..., T_q, T_k)
    weights = weights.nan_to_num(0.0)  # fully masked rows: 0/0 -> 0
    return weights @ V, weights  # (..., T_q, d_v), (..., T_q, T_k)


def padding_mask(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """Key-padding mask from sequence lengths.

    lengths: (B,) integers. Returns bool (B, 1, max_len), True where key j of sequence b
    is a real token (j < lengths[b]); the middle axis broadcasts over queries.
    """
    max_len = int(lengths.max()) if max_len is None else max_len
    positions = torch.arange(max_len, device=lengths.device)  # (T,)
    return (positions[None, :] < lengths[:, None])[:, None, :]  # (B, 1, T)


def causal_mask(size: int, device=None) -> torch.Tensor:
    """Causal (look-ahead) mask: bool (T, T), True where key j <= query i."""
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()


class SelfAttention(nn.Module):
    """One head of self-attention: Q = X W_q, K = X W_k, V = X W_v, then attention.

    x: (B, T, d_model); mask broadcastable to (B, T, T).
    Returns output (B, T, d_v) and weights (B, T, T).
    """

    def __init__(self, d_model: int, d_k: int, d_v: int | None = None):
        super().__init__()
        d_v = d_k if d_v is None else d_v
        self.W_q = nn.Linear(d_model, d_k, bias=False)
        self.W_k = nn.Linear(d_model, d_k, bias=False)
        self.W_v = nn.Linear(d_model, d_v, bias=False)

    def forward(self, x, mask=None):
        Q, K, V = self.W_q(x), self.W_k(x), self.W_v(x)  # (B, T, d_k), (B, T, d_k), (B, T, d_v)
        return scaled_dot_product_attention(Q, K, V, mask)


class CrossAttention(SelfAttention):
    """Queries from one sequence, keys and values from another (encoder-decoder attention).

    x: (B, T_q, d_model), memory: (B, T_k, d_model); mask broadcastable to (B, T_q, T_k).
    """

    def forward(self, x, memory, mask=None):
        Q, K, V = self.W_q(x), self.W_k(memory), self.W_v(memory)
        return scaled_dot_product_attention(Q, K, V, mask)


def counted_multiply_adds(d_model: int, d_k: int, d_v: int | None, lengths: list[int]) -> dict:
    """What :class:`SelfAttention` (d_model, d_k, d_v) computes on one sequence of n
    positions, for each n of ``lengths``: the multiply-adds of its three projections and
    those of the two products inside attention (Q K^T and the weights times V), as two lists
    in the order of ``lengths``. Counted by PyTorch's FlopCounterMode (two FLOPs per multiply-add) on the meta
    device, which computes shapes and no numbers."""
    from torch.utils.flop_counter import FlopCounterMode

    layer = SelfAttention(d_model, d_k, d_v).to("meta")
    counts = {"projections": [], "attention": []}
    for n in lengths:
        x = torch.empty(1, n, d_model, device="meta")  # (1, n, d_model)
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            layer(x)
        by_module = counter.get_flop_counts()
        total = counter.get_total_flops() // 2
        projections = sum(
            sum(by_module.get(f"SelfAttention.{w}", {}).values()) // 2
            for w in ("W_q", "W_k", "W_v")
        )
        counts["projections"].append(projections)
        counts["attention"].append(total - projections)
    return counts
