r"""Chapters 04 and 05's layers, as the course hands them to the chapters that build on them.

Chapter 06's Transformer is made of multi-head attention and masks; a student who reaches it
has written both, and gets the course's versions here, so that the new chapter does not
depend on how the old exercises went. Later chapters' notebooks import them from here::

    from attention_course.layers import MultiHeadAttention, causal_mask, padding_mask

Masks are bool, True where a query may attend to a key.
"""

import math

import torch
from torch import nn


def padding_mask(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """(B,) lengths -> bool (B, 1, max_len): key j of sequence b is real when j < lengths[b]
    (the middle axis broadcasts over the queries)."""
    width = int(lengths.max()) if max_len is None else max_len
    return torch.arange(width, device=lengths.device).expand(len(lengths), 1, width) < lengths.view(
        -1, 1, 1
    )


def causal_mask(size: int, device=None) -> torch.Tensor:
    """bool (T, T): query i may attend to keys 0 .. i."""
    rows = torch.arange(size, device=device)
    return rows.view(-1, 1) >= rows.view(1, -1)


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
        B, T, _ = x.shape
        return x.unflatten(-1, (self.num_heads, self.d_k)).permute(0, 2, 1, 3)  # (B, h, T, d_k)

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
