r"""Chapter 08's decoder-only language model, its data, training and decoding.

The model is built from *parts* the chapter's exercises write (the attention layer, ALiBi's
slopes and bias, the sliding-window mask, the KV cache), passed in as an :class:`LMParts`,
so that the notebook trains the student's parts and the book the reference ones::

    parts = LMParts(GroupedQueryAttention, alibi_slopes, alibi_bias, sliding_window_mask, KVCache)
    model = DecoderLM(LMConfig(vocab_size=len(COUNTING_VOCAB), position="rotary"), parts)
    history = train_lm(model, counting_sampler(64), max_steps=600)
    tokens, logits = greedy_decode(model, prompts, num_new=20, use_cache=True)

Blocks are pre-norm (LayerNorm before each sub-layer, as GPT-2 and most models since), the
output layer is the token embedding transposed ("tied"). Positions are one of ``rotary``
(queries and keys rotated in every layer), ``alibi`` (a bias on the scores), ``sinusoidal``
(added to the embeddings once, scaled by sqrt(d_model) as in chapter 06) or ``learned``
(added once, at the embeddings' scale), or ``none`` (only the causal mask tells the
model where it is).

Data is generated: English number words counting up from a random number ("... , three
hundred and twelve , three hundred and thirteen , ...", a stream as long as an experiment
needs) and sequences of random tokens that repeat with a random period of 8 to 24 tokens,
each sequence its own (induction: :func:`periodic_tokens`).
Training is bounded by steps, so its numbers repeat whatever the machine's load.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import torch
import torch.nn.functional as F
from torch import nn

from attention_course.training import train_on_samples

POSITIONS = ("rotary", "alibi", "sinusoidal", "learned", "none")


@dataclass(frozen=True)
class LMParts:
    """The chapter's exercises, as the model calls them.

    attention(d_model, num_heads, num_kv_heads) -> module; module(x, mask, positions, cache)
    returns (output, weights). alibi_slopes(h) -> (h,); alibi_bias(slopes, T_q, T_k) ->
    (h, T_q, T_k); sliding_window_mask(T, window) -> (T, T) bool; kv_cache(B, h_kv, max_len,
    d_k) -> an object with ``update(K_new, V_new)`` and ``length``.
    """

    attention: Callable
    alibi_slopes: Callable | None = None
    alibi_bias: Callable | None = None
    sliding_window_mask: Callable | None = None
    kv_cache: Callable | None = None


@dataclass(frozen=True)
class LMConfig:
    vocab_size: int
    d_model: int = 64
    num_heads: int = 4
    num_kv_heads: int = 4
    num_layers: int = 2
    d_ff: int = 256  # 0: an attention-only model (Olsson et al.'s toy models)
    position: str = "rotary"
    window: int | None = None  # sliding-window attention: each query sees `window` keys
    norm: bool = True  # LayerNorm before each sub-layer and at the end
    max_len: int = 4096  # length of the sinusoidal or learned position table


class ConcatCache:
    """The plainest KV cache: the keys and values so far, grown by concatenation at every
    step (chapter 08's test of the attention layer decodes with it; the exercise after that
    writes the cache that models use, buffers of ``max_len`` positions filled in place).

    ``update(K_new, V_new)`` with (B, h_kv, T_new, d_k) each returns every key and value so
    far, (B, h_kv, length + T_new, d_k) each; ``length`` counts the positions held.
    """

    def __init__(self, batch: int, num_kv_heads: int, max_len: int, d_k: int):
        self.K = self.V = None
        self.length, self.max_len = 0, max_len

    def update(self, K_new: torch.Tensor, V_new: torch.Tensor):
        if self.length + K_new.size(-2) > self.max_len:
            raise ValueError(f"the cache holds {self.max_len} positions")
        self.K = K_new if self.K is None else torch.cat([self.K, K_new], dim=-2)
        self.V = V_new if self.V is None else torch.cat([self.V, V_new], dim=-2)
        self.length = self.K.size(-2)
        return self.K, self.V


class Block(nn.Module):
    """x + Attention(LN(x)), then x + FFN(LN(x)) (the FFN only when d_ff > 0)."""

    def __init__(self, cfg: LMConfig, parts: LMParts):
        super().__init__()
        d = cfg.d_model
        self.attention = parts.attention(d, cfg.num_heads, cfg.num_kv_heads)
        self.norm1 = nn.LayerNorm(d) if cfg.norm else nn.Identity()
        self.ffn = None
        if cfg.d_ff:
            self.norm2 = nn.LayerNorm(d) if cfg.norm else nn.Identity()
            self.ffn = nn.Sequential(nn.Linear(d, cfg.d_ff), nn.GELU(), nn.Linear(cfg.d_ff, d))

    def forward(self, x, mask, positions, cache):
        out, weights = self.attention(self.norm1(x), mask, positions, cache)
        x = x + out  # (B, T, d_model)
        if self.ffn is not None:
            x = x + self.ffn(self.norm2(x))
        return x, weights


class DecoderLM(nn.Module):
    """Token embedding (+ positions) -> num_layers blocks -> LN -> logits with the tied embedding.

    ``forward(tokens, valid=None, caches=None)``: tokens (B, T); valid (B, T_k) bool, False
    at padding (prompts are padded on the left), covering the cached positions and the new
    ones; caches, one per layer, or None. Returns logits (B, T, vocab) and each layer's
    weights (B, h, T, T_k).
    """

    def __init__(self, cfg: LMConfig, parts: LMParts):
        super().__init__()
        if cfg.position not in POSITIONS:
            raise ValueError(f"position {cfg.position!r}; choose one of {POSITIONS}")
        self.cfg, self.parts = cfg, parts
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        nn.init.normal_(self.embed.weight, std=cfg.d_model**-0.5)
        if cfg.position == "learned":
            self.position = nn.Embedding(cfg.max_len, cfg.d_model)
            nn.init.normal_(self.position.weight, std=cfg.d_model**-0.5)
        if cfg.position == "sinusoidal":  # chapter 06's answer: handed out after it
            from attention_course.handed_out.transformer import sinusoids

            self.register_buffer("pe", sinusoids(cfg.max_len, cfg.d_model), persistent=False)
        if cfg.position == "alibi":
            self.register_buffer("slopes", parts.alibi_slopes(cfg.num_heads), persistent=False)
        self.blocks = nn.ModuleList(Block(cfg, parts) for _ in range(cfg.num_layers))
        self.norm = nn.LayerNorm(cfg.d_model) if cfg.norm else nn.Identity()

    def new_caches(self, batch: int, max_len: int) -> list:
        d_k = self.cfg.d_model // self.cfg.num_heads
        return [
            self.parts.kv_cache(batch, self.cfg.num_kv_heads, max_len, d_k)
            for _ in range(self.cfg.num_layers)
        ]

    def mask(self, T: int, past: int, valid):
        """The mask of T new queries after `past` cached positions: (B or 1, h or 1, T, T_k)."""
        T_k = past + T
        i = torch.arange(past, T_k)[:, None]
        allowed = torch.arange(T_k)[None, :] <= i  # (T, T_k) causal
        if self.cfg.window is not None:
            allowed = allowed & self.parts.sliding_window_mask(T_k, self.cfg.window)[past:]
        allowed = allowed[None, None]  # (1, 1, T, T_k)
        if valid is not None:
            allowed = allowed & valid[:, None, None, :]  # (B, 1, T, T_k)
        if self.cfg.position != "alibi":
            return allowed
        bias = self.parts.alibi_bias(self.slopes, T, T_k)  # (h, T, T_k)
        return bias.masked_fill(~allowed, float("-inf"))  # (B or 1, h, T, T_k)

    def forward(self, tokens, valid=None, caches=None):
        B, T = tokens.shape
        past = caches[0].length if caches else 0
        if valid is None:
            positions = torch.arange(past, past + T)  # (T,)
        else:  # left padding: a sequence's first real token is position 0
            positions = (valid.long().cumsum(-1) - 1).clamp_min(0)[:, past:]  # (B, T)
        x = self.embed(tokens)  # (B, T, d_model), each row of norm about 1
        if self.cfg.position == "learned":
            x = x + self.position(positions)
        elif self.cfg.position == "sinusoidal":
            # Vaswani et al.'s ratio, as chapter 06: sqrt(d_model) E[ids] + PE (norm
            # sqrt(d_model / 2)), unscaled position swamping content; here divided through by
            # sqrt(d_model), so that the residual stream starts at the size of the other
            # kinds' (the tokens' norm about 1): E[ids] + PE / sqrt(d_model)
            x = x + self.pe[positions] / math.sqrt(self.cfg.d_model)
        rotary = None
        if self.cfg.position == "rotary":
            rotary = positions if valid is None else positions[:, None, :]  # (T,) or (B, 1, T)
        mask = self.mask(T, past, valid)
        all_weights = []
        for layer, block in enumerate(self.blocks):
            x, weights = block(x, mask, rotary, caches[layer] if caches else None)
            all_weights.append(weights)
        logits = self.norm(x) @ self.embed.weight.T  # (B, T, vocab): the tied output layer
        return logits, all_weights


def lm_loss(model: DecoderLM, batch) -> torch.Tensor:
    """Cross-entropy of every next token: batch = (inputs (B, T), targets (B, T))."""
    inputs, targets = batch
    logits, _ = model(inputs)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def train_lm(model: DecoderLM, sample: Callable[[int, torch.Generator], tuple], **options):
    """Adam on the next-token loss for ``max_steps`` batches drawn by ``sample(batch_size,
    generator)`` (seeded with ``seed``); ``options`` as :func:`train_on_samples`
    (``max_steps``, ``batch_size``, ``lr``, ``seed``, ``evaluate``, ``eval_every``,
    ``seconds``, only a safety cap)."""
    return train_on_samples(model, sample, lm_loss, **options)


# ------------------------------------------------------------------ decoding


@torch.no_grad()
def greedy_decode(model: DecoderLM, prompts: list[list[int]], num_new: int, use_cache: bool):
    """Greedy continuation of prompts of different lengths (padded on the left with 0).

    With ``use_cache`` the prompts run once (prefill) and then one token a step with every
    layer's keys and values cached; without, every step runs the whole prefix again.
    Returns the new tokens (B, num_new) and the logits of each step (B, num_new, vocab).
    """
    B, longest = len(prompts), max(len(p) for p in prompts)
    tokens = torch.zeros(B, longest, dtype=torch.long)
    valid = torch.zeros(B, longest, dtype=torch.bool)
    for b, p in enumerate(prompts):
        tokens[b, longest - len(p) :] = torch.tensor(p)
        valid[b, longest - len(p) :] = True
    caches = model.new_caches(B, longest + num_new) if use_cache else None
    new_tokens, step_logits = [], []
    step_input = tokens
    for _ in range(num_new):
        logits, _ = model(step_input if use_cache else tokens, valid, caches)
        last = logits[:, -1]  # (B, vocab)
        step_logits.append(last)
        nxt = last.argmax(-1, keepdim=True)  # (B, 1)
        new_tokens.append(nxt)
        tokens = torch.cat([tokens, nxt], dim=1)
        valid = torch.cat([valid, torch.ones(B, 1, dtype=torch.bool)], dim=1)
        step_input = nxt
    return torch.cat(new_tokens, 1), torch.stack(step_logits, 1)


def decode_step_flops(model: DecoderLM, context: int, use_cache: bool) -> int:
    """Multiply-adds (FLOPs / 2, PyTorch's counter) of generating one token after `context`
    tokens: one position with `context` cached keys, or the whole prefix again."""
    from torch.utils.flop_counter import FlopCounterMode

    tokens = torch.zeros(1, context + 1, dtype=torch.long)
    with torch.no_grad():
        caches = None
        if use_cache:
            caches = model.new_caches(1, context + 1)
            model(tokens[:, :context], None, caches)
        with FlopCounterMode(display=False) as counter:
            if use_cache:
                model(tokens[:, context:], None, caches)
            else:
                model(tokens)
    return counter.get_total_flops() // 2


# ------------------------------------------------------------------ data


COUNTING_NUMBERS = 20000  # the stream counts through numbers below this


@cache
def _counting_table():
    """The vocabulary and each number's token ids (a comma ends every number)."""
    from attention_course.data.numbers import number_words

    words = [number_words(n, "en") + [","] for n in range(COUNTING_NUMBERS)]
    vocab = sorted({w for ws in words for w in ws})
    index = {w: i for i, w in enumerate(vocab)}
    return vocab, [torch.tensor([index[w] for w in ws]) for ws in words]


def counting_vocab() -> list[str]:
    """The tokens of the counting stream: number words and ','."""
    return _counting_table()[0]


def counting_text(batch: int, length: int, generator: torch.Generator):
    """Windows of the stream 'n , n+1 , n+2 , ...' in English words, each from a random n
    and a random offset into its first number: inputs and next tokens, (B, length) each."""
    _, table = _counting_table()
    rows = []
    for _ in range(batch):
        n = int(torch.randint(0, COUNTING_NUMBERS - length - 1, (1,), generator=generator))
        offset = int(torch.randint(0, len(table[n]), (1,), generator=generator))
        pieces, total = [], 0
        while total < offset + length + 1:
            pieces.append(table[n])
            total += len(table[n])
            n += 1
        rows.append(torch.cat(pieces)[offset : offset + length + 1])
    text = torch.stack(rows)  # (B, length + 1)
    return text[:, :-1], text[:, 1:]


def counting_sampler(length: int):
    """``sample(batch, generator)`` for :func:`train_lm`: counting windows of ``length``."""
    return lambda batch, g: counting_text(batch, length, g)


@torch.no_grad()
def next_token_accuracy(model: DecoderLM, inputs, targets, skip: int = 0) -> float:
    """The fraction of next tokens the model's argmax gets right, positions >= skip."""
    logits, _ = model(inputs)
    right = logits.argmax(-1)[:, skip:] == targets[:, skip:]
    return right.float().mean().item()


@torch.no_grad()
def accuracy_by_position(model: DecoderLM, inputs, targets) -> torch.Tensor:
    """(T,): at each position, the fraction of windows whose next token the argmax gets
    right (the early positions, with little context, are the hardest)."""
    logits, _ = model(inputs)
    return (logits.argmax(-1) == targets).float().mean(0)


def periodic_tokens(
    batch: int,
    length: int,
    vocab_size: int,
    generator: torch.Generator,
    min_period: int = 8,
    max_period: int = 24,
):
    """Random tokens that repeat with a random period p per sequence: x[t] = x[t mod p].

    Returns inputs and next tokens (B, length) each, and the periods (B,). Every token of the
    first period is uniform and new; every later one is predictable only in context, by
    finding the previous occurrence of the current token and copying what followed it (the
    period varies, so no fixed offset does it).
    """
    periods = torch.randint(min_period, max_period + 1, (batch,), generator=generator)
    first = torch.randint(0, vocab_size, (batch, max_period), generator=generator)
    t = torch.arange(length + 1)
    text = first.gather(1, t[None, :] % periods[:, None])  # (B, length + 1)
    return text[:, :-1], text[:, 1:], periods


def periodic_sampler(length: int, vocab_size: int):
    """``sample(batch, generator)`` for :func:`train_lm`: periodic random tokens."""
    return lambda batch, g: periodic_tokens(batch, length, vocab_size, g)[:2]


@torch.no_grad()
def in_context_losses(model: DecoderLM, inputs, targets, periods) -> tuple[float, float]:
    """Mean loss on the targets of the first period (unpredictable) and on those after it
    (positions t >= p, which copying can predict)."""
    logits, _ = model(inputs)
    loss = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (B, T)
    t = torch.arange(inputs.size(1))[None, :]
    first = t < periods[:, None] - 1
    return loss[first].mean().item(), loss[t >= periods[:, None]].mean().item()


def log_log_slope(x, y) -> float:
    """The least-squares slope of log y against log x."""
    lx, ly = (
        torch.log(torch.tensor(x, dtype=torch.float64)),
        torch.log(torch.tensor(y, dtype=torch.float64)),
    )
    lx, ly = lx - lx.mean(), ly - ly.mean()
    return float((lx * ly).sum() / (lx * lx).sum())


def perplexity(loss: float) -> float:
    return math.exp(loss)


# ------------------------------------------------------------------ other attention layers


class PositionsFirst(nn.Module):
    """An attention layer whose forward takes ``(x, positions, mask, cache)`` (chapter 10's
    latent attention) as :class:`DecoderLM`'s blocks call it, ``(x, mask, positions,
    cache)``. Without rotary positions (``positions`` None) it numbers the new tokens from 0,
    which is right without a cache."""

    def __init__(self, layer: nn.Module):
        super().__init__()
        self.layer = layer

    def forward(self, x, mask=None, positions=None, cache=None):
        numbered = torch.arange(x.size(1), device=x.device) if positions is None else positions
        return self.layer(x, numbered, mask, cache)


def latent_attention_part(latent_class: Callable, d_latent: int, d_rope: int, d_head=None):
    """``LMParts.attention`` for a model with multi-head latent attention:
    ``latent_class(d_model, num_heads, d_head, d_latent, d_rope)`` in every block (d_head
    d_model / num_heads unless given; the model's num_kv_heads is not read)."""

    def build(d_model: int, num_heads: int, num_kv_heads: int) -> nn.Module:
        return PositionsFirst(
            latent_class(d_model, num_heads, d_head or d_model // num_heads, d_latent, d_rope)
        )

    return build
