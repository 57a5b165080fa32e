r"""Attention in today's decoder-only language models (chapter 08).

Read top to bottom: rotary positions (Su et al. 2021), ALiBi's linear biases (Press et al.
2022), the sliding-window mask, grouped-query attention (Ainslie et al. 2023) with an
optional KV cache, the cache itself, and three questions: the receptive field of a stack
of sliding windows, the bytes of a cache, and the prefix-matching score of an induction
head (Olsson et al. 2022).

Mask convention as in chapters 04 and 05: a boolean ``mask[..., i, j]`` is True where
query i may attend to key j. A float mask is *added* to the scores (ALiBi's bias, with
-inf where attending is not allowed). A query with no allowed key gets zero weights.

The model that assembles these parts, its data and its training live in
:mod:`attention_course.language_model`, so that the notebook trains the student's parts
and the book the reference ones.
"""

import math

import torch
from torch import nn

from attention_course.language_model import LMParts
from autograder.reference.multi_head import merge_heads, split_heads


def attention(Q, K, V, mask=None):
    r"""softmax(Q K^T / sqrt(d_k) + bias) V with a bool or float ``mask``.

    Q (..., T_q, d_k), K (..., T_k, d_k), V (..., T_k, d_v); mask broadcastable to
    (..., T_q, T_k): bool (True where allowed) or float (added to the scores).
    Returns output (..., T_q, d_v) and weights (..., T_q, T_k).
    """
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.size(-1))  # (..., T_q, T_k)
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))
    elif mask is not None:
        scores = scores + mask
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # (..., T_q, T_k)
    return weights @ V, weights


# ------------------------------------------------------------------ positions


def apply_rotary(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    r"""Rotate each interleaved pair (x_{2i}, x_{2i+1}) by the angle m theta_i (RoFormer eq. 34):

        x'_{2i}   = x_{2i} cos(m theta_i) - x_{2i+1} sin(m theta_i)
        x'_{2i+1} = x_{2i} sin(m theta_i) + x_{2i+1} cos(m theta_i),  theta_i = base^{-2i/d}.

    x (..., T, d) with d even; positions m, integers broadcastable to x.shape[:-1].
    Returns (..., T, d).
    """
    d = x.size(-1)
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)  # (d/2,) theta_i
    angle = positions[..., None].to(torch.float32) * theta  # (..., T, d/2)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., T, d/2) each: the pairs
    rotated = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)  # (..., T, d/2, 2)
    return rotated.flatten(-2)  # (..., T, d)


def apply_rotary_halves(
    x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0
) -> torch.Tensor:
    r"""GPT-NeoX's convention (and Hugging Face's Llama): feature i is paired with feature
    i + d/2, not with its neighbour, and turned by the same angle m theta_i. Same shapes as
    :func:`apply_rotary`; the same properties, a different function."""
    d = x.size(-1)
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)  # (d/2,)
    angle = positions[..., None].to(torch.float32) * theta  # (..., T, d/2)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]  # (..., T, d/2) each
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)  # (..., T, d)


def pairs_to_halves(d: int) -> torch.Tensor:
    """The permutation of features (d,) that moves neighbour pairs (2i, 2i+1) to (i, i + d/2):
    applied to the rows of W_q and W_k of every head, it turns weights trained with
    :func:`apply_rotary` into weights that give the same scores under
    :func:`apply_rotary_halves` (what Hugging Face's conversion of Meta's Llama does)."""
    return torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])


def alibi_slopes(num_heads: int) -> torch.Tensor:
    r"""ALiBi's head-specific slopes, the geometric sequence m_k = 2^{-8k/n}, k = 1..n (n heads).

    Returns (num_heads,), float32: for 8 heads 1/2, 1/4, ..., 1/256.
    """
    k = torch.arange(1, num_heads + 1, dtype=torch.float32)
    return 2.0 ** (-8.0 * k / num_heads)  # (h,)


def alibi_bias(slopes: torch.Tensor, T_q: int, T_k: int) -> torch.Tensor:
    r"""The bias added to causal scores: bias[k, i, j] = -m_k (i' - j) for j <= i', -inf after,

    where query i sits at position i' = i + T_k - T_q (the queries are the last T_q of the
    T_k positions, as in decoding with a cache). slopes (h,). Returns (h, T_q, T_k).
    """
    i = torch.arange(T_k - T_q, T_k)[:, None]  # (T_q, 1) positions of the queries
    j = torch.arange(T_k)[None, :]  # (1, T_k)
    distance = (i - j).to(slopes.dtype)  # (T_q, T_k)
    bias = -slopes[:, None, None] * distance  # (h, T_q, T_k)
    return bias.masked_fill(j > i, float("-inf"))


def sliding_window_mask(T: int, window: int) -> torch.Tensor:
    """Banded causal mask (T, T): True where 0 <= i - j < window (query i sees itself and
    the window - 1 keys before it)."""
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    return (j <= i) & (i - j < window)


# ------------------------------------------------------------------ attention and cache


class KVCache:
    """Keys and values of one layer for up to ``max_len`` positions, filled left to right.

    ``K`` and ``V`` are buffers (B, h_kv, max_len, d_k); ``length`` positions hold values.
    """

    def __init__(self, batch, num_kv_heads, max_len, d_k, dtype=torch.float32):
        self.K = torch.zeros(batch, num_kv_heads, max_len, d_k, dtype=dtype)
        self.V = torch.zeros(batch, num_kv_heads, max_len, d_k, dtype=dtype)
        self.length = 0

    def update(self, K_new: torch.Tensor, V_new: torch.Tensor):
        """Append K_new, V_new (B, h_kv, T_new, d_k) at positions length .. length + T_new - 1;
        return every key and value so far, (B, h_kv, length + T_new, d_k) each."""
        start, stop = self.length, self.length + K_new.size(-2)
        if stop > self.K.size(-2):
            raise ValueError(f"the cache holds {self.K.size(-2)} positions; {stop} asked")
        self.K[:, :, start:stop] = K_new
        self.V[:, :, start:stop] = V_new
        self.length = stop
        return self.K[:, :, :stop], self.V[:, :, :stop]


class GroupedQueryAttention(nn.Module):
    r"""h query heads share h_kv key/value heads: query head i reads key/value head
    i // (h / h_kv) (groups of consecutive heads). h_kv = h is multi-head attention, h_kv = 1
    multi-query attention.

    W_q: d_model -> d_model, W_k and W_v: d_model -> h_kv d_k, W_o: d_model -> d_model, no
    biases; d_k = d_model / h.
    """

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int):
        super().__init__()
        if d_model % num_heads or num_heads % num_kv_heads:
            raise ValueError(
                f"need h | d_model and h_kv | h, got {d_model}, {num_heads}, {num_kv_heads}"
            )
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        self.d_k = d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=False)
        self.W_k = nn.Linear(d_model, num_kv_heads * self.d_k, bias=False)
        self.W_v = nn.Linear(d_model, num_kv_heads * self.d_k, bias=False)
        self.W_o = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x, mask=None, positions=None, cache=None):
        """x (B, T, d_model); mask broadcastable to (B, h, T, T_k), bool or float; positions
        broadcastable to (B, h, T) to rotate queries and keys (None: no rotation); cache a
        KVCache or None. Returns output (B, T, d_model) and weights (B, h, T, T_k)."""
        Q = split_heads(self.W_q(x), self.num_heads)  # (B, h, T, d_k)
        K = split_heads(self.W_k(x), self.num_kv_heads)  # (B, h_kv, T, d_k)
        V = split_heads(self.W_v(x), self.num_kv_heads)  # (B, h_kv, T, d_k)
        if positions is not None:
            Q, K = apply_rotary(Q, positions), apply_rotary(K, positions)
        if cache is not None:
            K, V = cache.update(K, V)  # (B, h_kv, T_k, d_k)
        group = self.num_heads // self.num_kv_heads
        K = K.repeat_interleave(group, dim=1)  # (B, h, T_k, d_k)
        V = V.repeat_interleave(group, dim=1)  # (B, h, T_k, d_k)
        heads, weights = attention(Q, K, V, mask)  # (B, h, T, d_k), (B, h, T, T_k)
        return self.W_o(merge_heads(heads)), weights


# ------------------------------------------------------------------ questions


def window_receptive_field(num_layers: int, window: int) -> int:
    """How many input positions the last output of a stack of ``num_layers`` sliding-window
    layers depends on, in a sequence long enough: each layer reaches window - 1 further back."""
    return num_layers * (window - 1) + 1


def window_layers_to_reach(context: int, window: int) -> int:
    """The fewest stacked sliding-window layers after which the last of ``context`` tokens
    depends on the first: the stack must reach context - 1 positions back, window - 1 a layer."""
    return math.ceil((context - 1) / (window - 1))


def measured_window_field(num_layers: int, window: int, T: int, seed: int) -> int:
    """How many of T input positions the gradient of the last output of ``num_layers``
    stacked sliding-window layers (residual, float64, random weights) reaches: the measurement
    that chapter 08's test compares window_layers_to_reach with."""
    torch.manual_seed(seed)
    layers = [GroupedQueryAttention(8, 2, 2).double() for _ in range(num_layers)]
    mask = sliding_window_mask(T, window)
    x = torch.randn(1, T, 8, dtype=torch.float64, requires_grad=True)
    h = x
    for layer in layers:
        h = h + layer(h, mask)[0]
    h[0, -1].sum().backward()
    return int((x.grad[0].abs().sum(-1) > 0).sum())


def kv_cache_bytes(num_layers, batch, num_kv_heads, d_k, max_len, dtype=torch.float32) -> int:
    """Bytes of the keys and values a model caches: 2 tensors (B, h_kv, max_len, d_k) a layer."""
    return 2 * num_layers * batch * num_kv_heads * max_len * d_k * dtype.itemsize


def kv_cache_max_len(budget, num_layers, batch, num_kv_heads, d_k, dtype=torch.float32) -> int:
    """The longest context whose caches take at most ``budget`` bytes: whole positions of
    :func:`kv_cache_bytes`'s cost per position."""
    return budget // kv_cache_bytes(num_layers, batch, num_kv_heads, d_k, 1, dtype)


def prefix_matching_score(weights: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    r"""Each head's attention on the tokens that followed earlier occurrences of the current one.

    For query i the targets are the keys j with 1 <= j <= i and tokens[j - 1] == tokens[i];
    score(head) = mean over the queries that have a target (all sequences) of the weight the
    head puts on its targets. weights (B, h, T, T), tokens (B, T). Returns (h,).
    """
    T = tokens.size(-1)
    same = tokens[:, :, None] == tokens[:, None, :]  # (B, T, T): tokens[i] == tokens[j]
    target = torch.zeros_like(same)
    target[:, :, 1:] = same[:, :, :-1]  # target[b, i, j] = tokens[j - 1] == tokens[i]
    target &= torch.ones(T, T, dtype=torch.bool).tril()  # j <= i
    has = target.any(-1)  # (B, T)
    score = (weights * target[:, None]).sum(-1)  # (B, h, T)
    return (score * has[:, None]).sum((0, 2)) / has.sum().clamp_min(1)


PARTS = LMParts(GroupedQueryAttention, alibi_slopes, alibi_bias, sliding_window_mask, KVCache)
