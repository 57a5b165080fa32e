r"""The Transformer of Vaswani et al. 2017, trained, decoded and taken apart (chapter 06).

Built from chapter 05's :class:`~autograder.reference.multi_head.MultiHeadAttention`.
Read top to bottom: positional encoding, the feed-forward block, the encoder and decoder
layers (post-norm as in the paper, or pre-norm), the encoder-decoder model, the warm-up
learning-rate schedule, label-smoothed cross-entropy, greedy and beam-search decoding.

Mask convention as in chapters 04 and 05: ``mask[..., i, j]`` is True where query i may
attend to key j. Token id 0 is padding, 1 ``<bos>``, 2 ``<eos>`` (the course's ``Vocab``).
"""

import math
from dataclasses import dataclass

import torch
from torch import nn

from autograder.reference.attention import causal_mask, padding_mask
from autograder.reference.multi_head import MultiHeadAttention

PAD_ID, BOS_ID, EOS_ID = 0, 1, 2


def positional_encoding(max_len: int, d_model: int) -> torch.Tensor:
    r"""Sinusoidal positions (section 3.5), (max_len, d_model):

    PE[pos, 2i] = sin(pos / 10000^{2i / d_model}),  PE[pos, 2i+1] = cos(pos / 10000^{2i / d_model}).
    """
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]  # (T, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float32)  # (d_model / 2,)
    angle = pos / 10000 ** (two_i / d_model)  # (T, d_model / 2)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe  # (T, d_model)


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, applied to every position alone (eq. 2)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        self.W_1 = nn.Linear(d_model, d_ff)
        self.W_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.W_2(self.dropout(torch.relu(self.W_1(x))))  # (B, T, d_model)


class EncoderLayer(nn.Module):
    """Self-attention then a feed-forward block, each wrapped in a residual connection and
    layer normalisation.

    post-norm (the paper):  x = LayerNorm(x + Sublayer(x))
    pre-norm (norm_first):  x = x + Sublayer(LayerNorm(x))

    forward(x (B, S, d_model), mask broadcastable to (B, S, S)) returns the new x and the
    self-attention weights (B, h, S, S).
    """

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            a, weights = self.self_attn(h, h, h, mask)
            x = x + self.dropout(a)
            x = x + self.dropout(self.ff(self.norm2(x)))
        else:
            a, weights = self.self_attn(x, x, x, mask)
            x = self.norm1(x + self.dropout(a))
            x = self.norm2(x + self.dropout(self.ff(x)))
        return x, weights


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention to the encoder's output (the memory), then a
    feed-forward block; each with a residual connection and layer normalisation.

    forward(y (B, T, d_model), memory (B, S, d_model), self_mask (T, T) or (B, T, T),
    memory_mask (B, 1, S)) returns the new y, the self-attention weights (B, h, T, T) and
    the cross-attention weights (B, h, T, S).
    """

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.cross_attn = MultiHeadAttention(d_model, num_heads)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, y, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            h = self.norm1(y)
            a, self_weights = self.self_attn(h, h, h, self_mask)
            y = y + self.dropout(a)
            c, cross_weights = self.cross_attn(self.norm2(y), memory, memory, memory_mask)
            y = y + self.dropout(c)
            y = y + self.dropout(self.ff(self.norm3(y)))
        else:
            a, self_weights = self.self_attn(y, y, y, self_mask)
            y = self.norm1(y + self.dropout(a))
            c, cross_weights = self.cross_attn(y, memory, memory, memory_mask)
            y = self.norm2(y + self.dropout(c))
            y = self.norm3(y + self.dropout(self.ff(y)))
        return y, self_weights, cross_weights


@torch.no_grad()
def init_embedding(table: nn.Embedding) -> nn.Embedding:
    """Entries N(0, 1 / d_model), the padding row zero, as tensor2tensor and fairseq do.

    A logit of the shared output layer is then a sum of d_model products of order
    1 / sqrt(d_model) each, of order one; and times sqrt(d_model), an input embedding has
    entries of order one, the scale of the positional encoding.
    """
    nn.init.normal_(table.weight, std=table.embedding_dim**-0.5)
    if table.padding_idx is not None:
        table.weight[table.padding_idx].zero_()
    return table


@dataclass(frozen=True)
class TransformerConfig:
    d_model: int = 64
    num_heads: int = 4
    num_layers: int = 2  # in the encoder and in the decoder
    d_ff: int = 256
    dropout: float = 0.0  # the task has more data than the model can memorise in 90 s
    max_len: int = 64
    positions: str = "sinusoidal"  # or "learned"
    norm_first: bool = False  # post-norm, as in the paper


class Transformer(nn.Module):
    """Encoder-decoder Transformer.

    The target embedding is shared with the output layer (section 3.4), and embeddings
    (initialised N(0, 1 / d_model), :func:`init_embedding`) are multiplied by sqrt(d_model)
    before the positions are added. ``forward(src, src_lengths,
    tgt_in)`` returns logits (B, T, V_tgt); after a call, ``self.attention`` holds the
    weights of every layer: {"encoder": [...], "decoder": [...], "cross": [...]}, each a
    list of (B, h, T_q, T_k) tensors, one per layer.
    """

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, cfg=TransformerConfig()):
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.src_embed = init_embedding(nn.Embedding(src_vocab_size, d, padding_idx=PAD_ID))
        self.tgt_embed = init_embedding(nn.Embedding(tgt_vocab_size, d, padding_idx=PAD_ID))
        if cfg.positions == "sinusoidal":
            self.register_buffer("pe", positional_encoding(cfg.max_len, d), persistent=False)
        elif cfg.positions == "learned":
            # at the sinusoids' scale: each of their rows has norm sqrt(d / 2), an entry
            # 1 / sqrt(2) on average (root mean square); so do these, in expectation
            self.pe = nn.Parameter(torch.randn(cfg.max_len, d) * 2**-0.5)
        else:
            raise ValueError(f"positions must be 'sinusoidal' or 'learned', got {cfg.positions!r}")
        layer_args = (d, cfg.num_heads, cfg.d_ff, cfg.dropout, cfg.norm_first)
        self.encoder = nn.ModuleList(EncoderLayer(*layer_args) for _ in range(cfg.num_layers))
        self.decoder = nn.ModuleList(DecoderLayer(*layer_args) for _ in range(cfg.num_layers))
        # pre-norm leaves the last layer's output unnormalised: one more norm per stack
        self.encoder_norm = nn.LayerNorm(d) if cfg.norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d) if cfg.norm_first else nn.Identity()
        self.dropout = nn.Dropout(cfg.dropout)
        self.attention = {}

    def embed(self, ids, table):
        """(B, T) ids -> (B, T, d_model): sqrt(d_model) E[ids] + PE[:T]."""
        return self.dropout(table(ids) * math.sqrt(self.cfg.d_model) + self.pe[: ids.size(1)])

    def encode(self, src, src_lengths):
        """Returns the memory (B, S, d_model) and its padding mask (B, 1, S)."""
        src_mask = padding_mask(src_lengths, src.size(1))  # (B, 1, S)
        x = self.embed(src, self.src_embed)
        self.attention["encoder"] = []
        for layer in self.encoder:
            x, w = layer(x, src_mask)
            self.attention["encoder"].append(w)
        return self.encoder_norm(x), src_mask

    def decode(self, tgt_in, memory, src_mask):
        """tgt_in (B, T): <bos> y_1 .. y_{T-1}. Returns logits (B, T, V_tgt)."""
        T = tgt_in.size(1)
        self_mask = causal_mask(T, device=tgt_in.device) & (tgt_in != PAD_ID)[:, None, :]
        y = self.embed(tgt_in, self.tgt_embed)
        self.attention["decoder"], self.attention["cross"] = [], []
        for layer in self.decoder:
            y, w_self, w_cross = layer(y, memory, self_mask, src_mask)
            self.attention["decoder"].append(w_self)
            self.attention["cross"].append(w_cross)
        return self.decoder_norm(y) @ self.tgt_embed.weight.T  # shared weights: (B, T, V)

    def forward(self, src, src_lengths, tgt_in):
        memory, src_mask = self.encode(src, src_lengths)
        return self.decode(tgt_in, memory, src_mask)


def warmup_schedule(step: int, d_model: int, warmup: int = 4000) -> float:
    """lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)  (section 5.3), step >= 1:
    a linear rise for ``warmup`` steps, then decay as 1 / sqrt(step)."""
    step = max(step, 1)
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def label_smoothed_cross_entropy(logits, target, smoothing: float = 0.1, pad_id=PAD_ID):
    r"""Cross-entropy against the smoothed target q = (1 - eps) onehot(y) + eps u, where u
    is uniform over the classes a token can be (every class but ``pad_id``), averaged over
    the positions whose target is not ``pad_id``. With ``pad_id=None`` every class and
    every position counts, as in ``F.cross_entropy(..., label_smoothing=eps)``.

    logits (N, ..., V) or (N, V), target (N, ...) of ids.
    """
    V = logits.size(-1)
    log_p = logits.log_softmax(-1).reshape(-1, V)  # (N', V)
    target = target.reshape(-1)  # (N',)
    allowed = torch.ones(V, dtype=torch.bool, device=logits.device)
    if pad_id is not None:
        allowed[pad_id] = False
    nll = -log_p.gather(-1, target[:, None])[:, 0]  # (N',)
    uniform = -(log_p * allowed).sum(-1) / allowed.sum()  # (N',): -sum_c u_c log p_c
    loss = (1 - smoothing) * nll + smoothing * uniform
    keep = target != pad_id if pad_id is not None else torch.ones_like(target, dtype=torch.bool)
    return loss[keep].mean()


@torch.no_grad()
def greedy_decode(model: Transformer, src, src_lengths, max_len: int, return_weights=False):
    """The most likely token at every step; each sequence stops at its own <eos> (kept),
    positions after it are padding; the loop ends when all have stopped or at max_len.

    Returns ids (B, L), L <= max_len; with ``return_weights`` also the cross-attention
    weights of the last decoder layer, averaged over heads, (B, L, S).
    """
    memory, src_mask = model.encode(src, src_lengths)
    ys = torch.full((src.size(0), 1), BOS_ID, dtype=torch.long, device=src.device)  # (B, 1)
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        logits = model.decode(ys, memory, src_mask)[:, -1]  # (B, V): the newest position
        next_token = logits.argmax(-1).masked_fill(done, PAD_ID)  # (B,)
        ys = torch.cat([ys, next_token[:, None]], dim=1)
        done |= next_token == EOS_ID
        if done.all():
            break
    ids = ys[:, 1:]  # (B, L) without <bos>
    if return_weights:
        return ids, model.attention["cross"][-1].mean(1)  # (B, L, S)
    return ids


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al. 2016); scores are log p / lp."""
    return ((5 + length) / 6) ** alpha


@torch.no_grad()
def beam_search(model: Transformer, src, src_lengths, max_len: int, beam_size=4, alpha=0.6):
    """Beam search with length normalisation, one source at a time.

    Every step extends each live prefix by every token and ranks the extensions by total
    log-probability. As in fairseq, the best ``2 * beam_size`` are looked at: an <eos>
    among the first ``beam_size`` finishes its hypothesis, scored log p / lp(length), and
    the best ``beam_size`` extensions without <eos> stay live, so the beam keeps
    ``beam_size`` live prefixes at every step (at most ``beam_size`` of the candidates end
    in <eos>, one per prefix). Stops when the best finished score beats every live
    prefix's best possible one (an upper bound, since log-probabilities only fall) or at
    max_len. Returns ids (B, L) like greedy_decode, padded after <eos>.
    """
    results = []
    for b in range(src.size(0)):
        memory, src_mask = model.encode(src[b : b + 1], src_lengths[b : b + 1])
        beams = [([BOS_ID], 0.0)]  # live prefixes: (tokens, log-probability)
        finished = []  # (normalised score, tokens)
        for _ in range(max_len):
            ys = torch.tensor([t for t, _ in beams], device=src.device)  # (k, L)
            k = ys.size(0)
            log_p = model.decode(ys, memory.expand(k, -1, -1), src_mask.expand(k, -1, -1))
            log_p = log_p[:, -1].log_softmax(-1)  # (k, V)
            V = log_p.size(1)
            totals = torch.tensor([s for _, s in beams], device=src.device)[:, None] + log_p
            top, idx = totals.flatten().topk(min(2 * beam_size, totals.numel()))  # (2 beam,)
            beams = []
            for rank, (score, flat) in enumerate(zip(top.tolist(), idx.tolist(), strict=True)):
                tokens = [*ys[flat // V].tolist(), flat % V]
                if tokens[-1] == EOS_ID:
                    if rank < beam_size:  # an <eos> ranked below the beam is dropped
                        finished.append((score / length_penalty(len(tokens) - 1, alpha), tokens))
                elif len(beams) < beam_size:
                    beams.append((tokens, score))
            best_done = max((s for s, _ in finished), default=-math.inf)
            # a live prefix's score can only fall; its best normalised score is at max_len
            best_live = max(
                (s / length_penalty(max_len, alpha) for _, s in beams), default=-math.inf
            )
            if not beams or best_done >= best_live:
                break
        if not finished:
            finished = [(s / length_penalty(len(t) - 1, alpha), t) for t, s in beams]
        results.append(max(finished)[1][1:])  # without <bos>
    width = max(len(r) for r in results)
    out = torch.full((len(results), width), PAD_ID, dtype=torch.long, device=src.device)
    for b, r in enumerate(results):
        out[b, : len(r)] = torch.tensor(r)
    return out


@torch.no_grad()
def _copy_attention(mine: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    theirs.in_proj_weight.copy_(torch.cat([mine.W_q.weight, mine.W_k.weight, mine.W_v.weight]))
    theirs.out_proj.weight.copy_(mine.W_o.weight)
    if theirs.in_proj_bias is not None:  # the course's projections have no bias
        theirs.in_proj_bias.zero_()
        theirs.out_proj.bias.zero_()


@torch.no_grad()
def _copy_feed_forward_and_norms(mine, theirs, norms) -> None:
    theirs.linear1.load_state_dict(mine.ff.W_1.state_dict())
    theirs.linear2.load_state_dict(mine.ff.W_2.state_dict())
    for name in norms:
        getattr(theirs, name).load_state_dict(getattr(mine, name).state_dict())


def copy_into_torch_encoder_layer(mine, theirs: nn.TransformerEncoderLayer) -> None:
    """Give PyTorch's layer the weights of ours (its attention biases set to zero), so the
    two compute the same function (ReLU, dropout 0, the same ``norm_first``)."""
    _copy_attention(mine.self_attn, theirs.self_attn)
    _copy_feed_forward_and_norms(mine, theirs, ("norm1", "norm2"))


def copy_into_torch_decoder_layer(mine, theirs: nn.TransformerDecoderLayer) -> None:
    """As :func:`copy_into_torch_encoder_layer`, for a decoder layer."""
    _copy_attention(mine.self_attn, theirs.self_attn)
    _copy_attention(mine.cross_attn, theirs.multihead_attn)
    _copy_feed_forward_and_norms(mine, theirs, ("norm1", "norm2", "norm3"))
