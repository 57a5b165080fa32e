r"""Chapter 10's recall model: the same small network with three token mixers, softmax
attention, linear attention and the delta rule, trained on associative recall.

As chapter 08's language model, it is built from *parts* that the chapter's exercises
write, passed in as :class:`MixerParts`, so that the notebook trains the student's parts
and the book and the benchmark the reference ones::

    parts = MixerParts(attention, linear_attention, delta_rule)
    model = RecallModel(RecallConfig(mixer="delta"), parts)
    history = train_recall(model, num_pairs=16, max_steps=800)

A layer is x + Mixer(LN(x)), then x + MLP(LN(x)). The mixer first runs a short causal
convolution over each feature (kernel 2, as the short convolutions of H3, Based and
DeltaNet), so that the position of a value also carries its key, then mixes the tokens:

- ``softmax``: causal softmax attention, every key and value kept (a cache that grows);
- ``linear``: causal linear attention, phi(x) = elu(x) + 1 (a d_k x d_v state per head);
- ``delta``: the delta rule on L2-normalised keys and queries (as Yang et al. 2024 train
  DeltaNet), with a learned write strength beta_t = sigmoid(w^T x_t) per head (almost the
  same size of state: linear attention also carries its normaliser z).

Softmax attention's cache can be made smaller, as chapter 10's latent-cache finding asks:
``num_kv_heads`` key/value heads shared by the query heads (GQA, MQA), or a latent of
``d_latent`` numbers a token, RMS-normalised, from which every head's key and value are
read (DeepSeek-V2's MLA without its rotary part: this model has no positions).

The three have the same parameters but the delta rule's w (one number per feature and
head). No positions are added: the convolution and the causal order are all the mixers
need to pair each key with the value after it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attention_course.data.recall import IGNORE, associative_recall, recall_vocab_size
from attention_course.training import train_on_samples

MIXERS = ("softmax", "linear", "delta")


@dataclass(frozen=True)
class MixerParts:
    """The chapter's exercises, as the mixers call them. attention(Q, K, V, mask) ->
    (output, weights), chapter 04's; linear_attention(Q, K, V) -> output, causal;
    delta_rule(Q, K, V, beta) -> (output, state). Q, K (B, h, T, d_k), V (B, h, T, d_v),
    beta (B, h, T)."""

    attention: Callable | None = None
    linear_attention: Callable | None = None
    delta_rule: Callable | None = None


@dataclass(frozen=True)
class RecallConfig:
    mixer: str = "softmax"
    d_model: int = 64
    num_heads: int = 1
    num_layers: int = 2
    d_ff: int = 128
    conv: int = 2  # the short causal convolution's kernel
    num_keys: int = 64
    num_values: int = 64
    # softmax attention's cache (chapter 10's latent-cache finding): key/value heads shared
    # by num_heads / num_kv_heads query heads each (None: one per query head, MHA), or a
    # latent of d_latent numbers a token from which every head's key and value are read (MLA)
    num_kv_heads: int | None = None
    d_latent: int | None = None

    def cache_numbers(self) -> int:
        """The numbers softmax attention caches per token and layer: 2 h_kv d_k, or d_c."""
        if self.d_latent is not None:
            return self.d_latent
        return 2 * (self.num_kv_heads or self.num_heads) * (self.d_model // self.num_heads)


class Mixer(nn.Module):
    def __init__(self, cfg: RecallConfig, parts: MixerParts):
        super().__init__()
        if cfg.mixer not in MIXERS:
            raise ValueError(f"mixer {cfg.mixer!r}; choose one of {MIXERS}")
        d, h = cfg.d_model, cfg.num_heads
        if d % h:
            raise ValueError(f"d_model = {d} is not a multiple of num_heads = {h}")
        self.cfg, self.parts, self.h = cfg, parts, h
        self.conv = nn.Conv1d(d, d, cfg.conv, groups=d, padding=cfg.conv - 1)
        self.W_q = nn.Linear(d, d, bias=False)
        self.h_kv = cfg.num_kv_heads or h
        if cfg.mixer != "softmax" and (cfg.num_kv_heads or cfg.d_latent):
            raise ValueError("shared key/value heads and latents are softmax attention's")
        if h % self.h_kv:
            raise ValueError(f"num_heads = {h} is not a multiple of num_kv_heads = {self.h_kv}")
        if cfg.d_latent is None:
            d_kv = self.h_kv * (d // h)
            self.W_k, self.W_v = nn.Linear(d, d_kv, bias=False), nn.Linear(d, d_kv, bias=False)
            self.W_dkv = self.latent_norm = None
        else:  # DeepSeek-V2's c = RMSNorm(W^DKV x), k = W^UK c, v = W^UV c; no rotary part
            self.W_dkv = nn.Linear(d, cfg.d_latent, bias=False)
            self.latent_norm = nn.RMSNorm(cfg.d_latent)
            self.W_k = nn.Linear(cfg.d_latent, d, bias=False)  # W^UK
            self.W_v = nn.Linear(cfg.d_latent, d, bias=False)  # W^UV
        self.W_o = nn.Linear(d, d, bias=False)  # created after W_q, W_k, W_v, as before
        self.W_beta = nn.Linear(d, h) if cfg.mixer == "delta" else None

    def forward(self, x):
        # chapter 05's answers, handed out from the kit after chapter 05's
        from attention_course.handed_out.multi_head_attention import merge_heads, split_heads

        B, T, d = x.shape
        x = self.conv(x.transpose(1, 2))[..., :T].transpose(1, 2)  # causal: (B, T, d)
        Q = split_heads(self.W_q(x), self.h)  # (B, h, T, d_k)
        kv = x if self.W_dkv is None else self.latent_norm(self.W_dkv(x))  # (B, T, d or d_c)
        K, V = (split_heads(W(kv), self.h_kv) for W in (self.W_k, self.W_v))
        if self.h_kv != self.h:  # each key/value head serves h / h_kv query heads
            K, V = (t.repeat_interleave(self.h // self.h_kv, dim=1) for t in (K, V))
        kind = self.cfg.mixer
        if kind == "softmax":
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            out, _ = self.parts.attention(Q, K, V, mask)
        elif kind == "linear":
            out = self.parts.linear_attention(Q, K, V)
        else:
            Q, K = F.normalize(F.silu(Q), dim=-1), F.normalize(F.silu(K), dim=-1)
            beta = torch.sigmoid(self.W_beta(x)).transpose(1, 2)  # (B, h, T)
            out, _ = self.parts.delta_rule(Q, K, V, beta)
        return self.W_o(merge_heads(out))  # (B, T, d)


class RecallModel(nn.Module):
    """Embedding -> num_layers of (mixer, MLP), pre-norm -> LN -> logits over the vocabulary."""

    def __init__(self, cfg: RecallConfig, parts: MixerParts):
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.embed = nn.Embedding(recall_vocab_size(cfg.num_keys, cfg.num_values), d)
        self.mixers = nn.ModuleList(Mixer(cfg, parts) for _ in range(cfg.num_layers))
        self.mlps = nn.ModuleList(
            nn.Sequential(nn.Linear(d, cfg.d_ff), nn.GELU(), nn.Linear(cfg.d_ff, d))
            for _ in range(cfg.num_layers)
        )
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(2 * cfg.num_layers + 1))
        self.out = nn.Linear(d, self.embed.num_embeddings)

    def forward(self, tokens):  # (B, T) -> (B, T, vocab)
        x = self.embed(tokens)
        for i, (mixer, mlp) in enumerate(zip(self.mixers, self.mlps, strict=True)):
            x = x + mixer(self.norms[2 * i](x))
            x = x + mlp(self.norms[2 * i + 1](x))
        return self.out(self.norms[-1](x))


def recall_loss(model: RecallModel, batch) -> torch.Tensor:
    inputs, targets = batch
    logits = model(inputs)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)


@torch.no_grad()
def recall_accuracy(model: RecallModel, inputs, targets) -> float:
    """The share of asked keys whose value the model's argmax gives."""
    asked = targets != IGNORE
    right = model(inputs).argmax(-1)[asked] == targets[asked]
    return right.float().mean().item()


def train_recall(model: RecallModel, num_pairs: int, *, num_queries: int | None = None, **options):
    """Adam on the recall loss for ``max_steps`` batches of fresh sequences of ``num_pairs``
    pairs and ``num_queries`` questions (all the keys by default); ``options`` as
    :func:`~attention_course.training.train_on_samples` (``max_steps``, ``batch_size``,
    ``lr``, ``seed``, ...)."""
    cfg, q = model.cfg, num_queries or num_pairs

    def sample(batch, generator):
        return associative_recall(batch, num_pairs, q, generator, cfg.num_keys, cfg.num_values)

    return train_on_samples(model, sample, recall_loss, **{"batch_size": 64, **options})


# A run whose training loss ends above this share of the loss of guessing (ln num_values)
# has not learned the task (benchmarks/since_2023.py trains it again; the page says so).
STUCK = 0.25


def stuck_loss(cfg: RecallConfig) -> float:
    """The training loss above which a run has not learned the task: STUCK ln(num_values)."""
    return STUCK * math.log(cfg.num_values)
