r"""Multi-head attention and exact attention in O(n) memory (chapter 05).

Multi-head attention (Vaswani et al. 2017, section 3.2.2)::

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V),

with d_k = d_v = d_model / h. All h projections W_i^Q of width d_k are the column blocks of
one d_model x d_model matrix W_q, so the heads are computed together: project once, split
the last axis into h blocks, attend per head, concatenate, project with W^O.

Blocked attention (Milakov and Gimelshein 2018; Rabe and Staats 2021) computes the same
output one block of keys at a time with an online softmax, so it never holds the full
T_q x T_k matrix of scores.

Mask convention as in chapter 04: ``mask[..., i, j]`` is True where query i may attend
to key j; a query with no allowed key gets zero weights and a zero output.
"""

import math

import torch
from torch import nn

from autograder.reference.attention import scaled_dot_product_attention


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, T, d_model) -> (B, h, T, d_k): the last axis cut into h blocks of d_k = d_model / h,
    block i going to head i."""
    B, T, d_model = x.shape
    d_k = d_model // num_heads
    return x.view(B, T, num_heads, d_k).transpose(1, 2)  # (B, h, T, d_k)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, h, T, d_k) -> (B, T, h * d_k): Concat(head_1, ..., head_h) along the features."""
    B, h, T, d_k = x.shape
    return x.transpose(1, 2).reshape(B, T, h * d_k)  # (B, T, h * d_k)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with h heads of width d_k = d_model / h.

    ``forward(query, key, value, mask)``: query (B, T_q, d_model), key and value
    (B, T_k, d_model); mask bool, broadcastable to (B, T_q, T_k) (it is broadcast over the
    heads). Self-attention passes the same tensor three times. Returns the output
    (B, T_q, d_model) and the weights of every head (B, h, T_q, T_k).

    Projections have no bias, as in the paper, so the layer has 4 d_model^2 parameters
    whatever h is.
    """

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.d_k = d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=False)  # the h blocks W_i^Q side by side
        self.W_k = nn.Linear(d_model, d_model, bias=False)
        self.W_v = nn.Linear(d_model, d_model, bias=False)
        self.W_o = nn.Linear(d_model, d_model, bias=False)

    def forward(self, query, key, value, mask=None):
        Q = split_heads(self.W_q(query), self.num_heads)  # (B, h, T_q, d_k)
        K = split_heads(self.W_k(key), self.num_heads)  # (B, h, T_k, d_k)
        V = split_heads(self.W_v(value), self.num_heads)  # (B, h, T_k, d_k)
        if mask is not None:
            mask = mask.unsqueeze(-3)  # (B, 1, T_q, T_k): the same mask for every head
        heads, weights = scaled_dot_product_attention(Q, K, V, mask)  # (B, h, T_q, d_k)
        return self.W_o(merge_heads(heads)), weights  # (B, T_q, d_model), (B, h, T_q, T_k)


def blocked_attention(Q, K, V, mask=None, block_size: int = 64) -> torch.Tensor:
    r"""Exact softmax(Q K^T / sqrt(d_k)) V, one block of at most ``block_size`` keys at a time.

    Online softmax: for each query keep the running maximum m of its scores, the running
    sum l = sum_j exp(s_j - m) and the running output o = sum_j exp(s_j - m) v_j. When a
    block raises the maximum to m', the old sums are rescaled by exp(m - m') before the
    block's terms are added. At the end, output = o / l (zero where no key was allowed).

    Q (..., T_q, d_k), K (..., T_k, d_k), V (..., T_k, d_v); mask broadcastable to
    (..., T_q, T_k) with its last axis of length T_k. Returns (..., T_q, d_v).
    Memory: O(T_q * block_size) for the scores instead of O(T_q * T_k).
    """
    scale = 1 / math.sqrt(Q.size(-1))
    m = Q.new_full((*Q.shape[:-1], 1), float("-inf"))  # (..., T_q, 1) running maximum
    l = Q.new_zeros((*Q.shape[:-1], 1))  # (..., T_q, 1) running sum of exp(s - m)
    o = Q.new_zeros((*Q.shape[:-1], V.size(-1)))  # (..., T_q, d_v) running output
    for start in range(0, K.size(-2), block_size):
        stop = start + block_size
        s = Q @ K[..., start:stop, :].transpose(-2, -1) * scale  # (..., T_q, b)
        if mask is not None:
            s = s.masked_fill(~mask[..., start:stop], float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))  # (..., T_q, 1)
        shift = m_new.masked_fill(m_new == float("-inf"), 0.0)  # rows with no key yet
        p = torch.exp(s - shift)  # (..., T_q, b)
        rescale = torch.exp(m - shift)  # exp(m - m'): 0 while m = -inf
        l = l * rescale + p.sum(-1, keepdim=True)
        o = o * rescale + p @ V[..., start:stop, :]  # (..., T_q, d_v)
        m = m_new
    return torch.where(l > 0, o / l.clamp_min(torch.finfo(l.dtype).tiny), 0.0)


def multi_head_cost(T_q: int, T_k: int, d_model: int, num_heads: int) -> dict[str, int]:
    """What one multi-head attention layer costs for one sequence (no bias, as above).

    parameters:     W_q, W_k, W_v, W_o, each d_model x d_model: 4 d_model^2 (no h).
    multiply_adds:  the four projections, (2 T_q + 2 T_k) d_model, times d_model; the
                    scores Q K^T, h T_q T_k d_k = T_q T_k d_model; the weighted sum of the
                    values, the same again. No h: the heads split d_model between them.
    score_entries:  h T_q T_k numbers in the attention weights: the one term that grows
                    with h.
    """
    projections = (2 * T_q + 2 * T_k) * d_model * d_model
    attention = 2 * T_q * T_k * d_model
    return {
        "parameters": 4 * d_model * d_model,
        "multiply_adds": projections + attention,
        "score_entries": num_heads * T_q * T_k,
    }


def attention_weights_bytes(
    batch: int,
    num_heads: int,
    T_q: int,
    T_k: int,
    num_layers: int = 1,
    dtype: torch.dtype = torch.float32,
) -> int:
    """The bytes that training keeps for the backward pass in tensors of T_q x T_k entries per
    head, for ``num_layers`` :class:`MultiHeadAttention` layers on ``batch`` sequences, no mask.

    The attention of each head runs Q K^T (keeps Q and K), a scale (keeps a number), the
    softmax (keeps its output), nan_to_num (keeps its input: the softmax's output again) and
    the product with V (keeps V and nan_to_num's output, a second tensor): two T_q x T_k
    tensors per head, per sequence, per layer. The scores are kept by nothing.
    """
    return 2 * num_layers * batch * num_heads * T_q * T_k * dtype.itemsize
