"""Chapter 05's multi-head attention, as the course hands it to the chapters after it
(chapter 06's Transformer is made of it; chapter 09's ViT of the self-attention below;
chapter 10's recall model splits and merges its heads with the functions below)."""

import math

import torch
from torch import nn


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, T, d_model) -> (B, h, T, d_k): the last axis cut into h blocks of d_k = d_model / h,
    block i going to head i."""
    return x.unflatten(-1, (num_heads, x.size(-1) // num_heads)).transpose(-3, -2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, h, T, d_k) -> (B, T, h * d_k): the heads side by side along the features."""
    return x.transpose(-3, -2).flatten(-2)


class MultiHeadAttention(nn.Module):
    r"""MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O with
    head_i = softmax(Q W_i^Q (K W_i^K)^T / \sqrt{d_k}) V W_i^V (Vaswani et al. 2017).

    ``MultiHeadAttention(d_model, num_heads)(query, key, value, mask=None)``: query
    (B, T_q, d_model), key and value (B, T_k, d_model), mask bool broadcastable to
    (B, T_q, T_k). Returns the output (B, T_q, d_model) and every head's weights
    (B, h, T_q, T_k); a query with no key to attend to gets zero weights. W_q, W_k, W_v and
    W_o are d_model x d_model without a bias (4 d_model^2 parameters).
    """

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"num_heads={num_heads} must divide d_model={d_model}")
        self.num_heads, self.d_k = num_heads, d_model // num_heads
        for name in ("W_q", "W_k", "W_v", "W_o"):
            setattr(self, name, nn.Linear(d_model, d_model, bias=False))

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return split_heads(x, self.num_heads)  # (B, h, T, d_k)

    def forward(self, query, key, value, mask=None):
        Q, K, V = (
            self._heads(self.W_q(query)),
            self._heads(self.W_k(key)),
            self._heads(self.W_v(value)),
        )
        scores = torch.einsum("bhqd,bhkd->bhqk", Q, K) / math.sqrt(self.d_k)  # (B, h, T_q, T_k)
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-3), -math.inf)  # every head alike
        weights = scores.softmax(-1).nan_to_num(0.0)  # (B, h, T_q, T_k)
        heads = torch.einsum("bhqk,bhkd->bqhd", weights, V).flatten(-2)  # (B, T_q, d_model)
        return self.W_o(heads), weights


class SelfAttention(nn.Module):
    r"""Multi-head self-attention with W^Q, W^K and W^V in one matrix, as ViT implementations
    write it (chapter 09's encoder blocks): head i is softmax(Q_i K_i^T / sqrt(d_k)) V_i
    with Q_i = x W_i^Q, K_i = x W_i^K, V_i = x W_i^V; the heads concatenated then W^O.

    forward(x (B, T, d_model)) returns the output (B, T, d_model) and the weights (B, h, T, T).
    """

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        self.num_heads, self.d_k = num_heads, d_model // num_heads
        self.W_qkv = nn.Linear(d_model, 3 * d_model)  # W^Q, W^K and W^V side by side
        self.W_o = nn.Linear(d_model, d_model)

    def forward(self, x):
        B, T, d = x.shape
        qkv = self.W_qkv(x).view(B, T, 3, self.num_heads, self.d_k)
        Q, K, V = qkv.permute(2, 0, 3, 1, 4)  # each (B, h, T, d_k)
        scores = Q @ K.transpose(-2, -1) / math.sqrt(self.d_k)  # (B, h, T, T)
        weights = scores.softmax(dim=-1)
        heads = weights @ V  # (B, h, T, d_k)
        return self.W_o(heads.transpose(1, 2).reshape(B, T, d)), weights
