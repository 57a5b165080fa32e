"""An RNN encoder-decoder without attention (chapter 01).

The encoder reads the source x_1 .. x_S into states h_1 .. h_S and hands the decoder one
fixed-length vector, its last state h_S (Cho et al. 2014; Sutskever et al. 2014). The decoder
is a GRU started from that vector that emits one target token per step. Everything the
decoder knows about the source has to squeeze through ``final``: the bottleneck that
attention (chapter 02) removes.

Shapes (batch-first everywhere): B batch, S source length, T target length, V vocabulary,
E embedding size, H hidden size. Token id 0 is ``<pad>``, 1 ``<bos>``, 2 ``<eos>``.

The decoding interface, shared with chapter 02's attention model
------------------------------------------------------------------

A model that :func:`greedy_decode` (and teacher forcing) can drive has two methods:

- ``memory = model.encode(src, src_lengths)``: an :class:`EncoderOutput` holding what the
  decoder may read of the source: every state ``(B, S, H)``, the final state ``(B, H)``
  (the decoder's first hidden state) and the padding mask ``(B, S)``;
- ``model.decode_step(prev_token, hidden, memory)`` -> ``(logits, hidden)``, or
  ``(logits, hidden, weights)`` for a model with attention, where ``weights`` ``(B, S)``
  is the step's distribution over source positions.

A model without attention simply ignores ``memory.states``.
"""

from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


def lengths_to_mask(src_lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """Source padding mask: bool ``(B, max_len)``, True where position j < src_lengths[b]."""
    positions = torch.arange(max_len, device=src_lengths.device)  # (S,)
    return positions[None, :] < src_lengths[:, None]  # (B, S)


class EncoderOutput(NamedTuple):
    """What the decoder may read of the source.

    - ``states``: ``(B, S, H)`` encoder state at every position, exactly zero at padding
    - ``final``: ``(B, H)`` state at each sequence's last real token (the fixed-length vector)
    - ``mask``: bool ``(B, S)``, True at real tokens, False at padding
    - ``keys``: anything a decoder wants to precompute once per source (chapter 02 stores
      U h_j there); None without attention
    """

    states: torch.Tensor
    final: torch.Tensor
    mask: torch.Tensor
    keys: torch.Tensor | None = None


class Encoder(nn.Module):
    """Embedding then a one-layer GRU over a right-padded batch.

    forward(src (B, S), src_lengths (B,)) -> states (B, S, H), final (B, H).

    Padding is skipped, not read: the GRU runs on a packed sequence, so ``final[b]`` is the
    state after token ``src_lengths[b] - 1`` (not after the trailing pads), and
    ``states[b, j]`` is exactly zero for ``j >= src_lengths[b]``.
    """

    def __init__(self, vocab_size: int, d_emb: int, d_hidden: int):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_emb, padding_idx=0)
        self.rnn = nn.GRU(d_emb, d_hidden, batch_first=True)

    def forward(
        self, src: torch.Tensor, src_lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.embedding(src)  # (B, S, E)
        packed = pack_padded_sequence(x, src_lengths.cpu(), batch_first=True, enforce_sorted=False)
        packed_states, h_n = self.rnn(packed)  # h_n: (1, B, H), in the original batch order
        # back to (B, S, H), zeros after each sequence's end
        states, _ = pad_packed_sequence(packed_states, batch_first=True, total_length=src.size(1))
        return states, h_n[-1]  # (B, S, H), (B, H)


class Decoder(nn.Module):
    """One step of a GRU decoder: s_t = GRU(E y_{t-1}, s_{t-1}), p(y_t | ...) = softmax(W_o s_t).

    step(prev_token (B,), hidden (B, H)) -> logits (B, V), hidden (B, H).
    """

    def __init__(self, vocab_size: int, d_emb: int, d_hidden: int):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_emb, padding_idx=0)
        self.cell = nn.GRUCell(d_emb, d_hidden)
        self.out = nn.Linear(d_hidden, vocab_size)

    def step(
        self, prev_token: torch.Tensor, hidden: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.embedding(prev_token)  # (B, E)
        # s_t = GRU(E y_{t-1}, s_{t-1})
        hidden = self.cell(y, hidden)  # (B, H)
        return self.out(hidden), hidden  # (B, V), (B, H)


class Seq2Seq(nn.Module):
    """Encoder-decoder whose decoder starts from the encoder's final state and never sees
    the source again (the fixed-length bottleneck).

    forward(src (B, S), src_lengths (B,), tgt_in (B, T)) -> logits (B, T, V), by teacher
    forcing: the decoder reads the true previous token ``tgt_in[:, t]`` at every step t.
    """

    def __init__(self, encoder: Encoder, decoder: Decoder):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder

    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor) -> EncoderOutput:
        states, final = self.encoder(src, src_lengths)  # (B, S, H), (B, H)
        return EncoderOutput(states, final, lengths_to_mask(src_lengths, src.size(1)))

    def decode_step(self, prev_token, hidden, memory: EncoderOutput):
        """One decoder step; ``memory`` is not read: the source reached the decoder only
        through its initial hidden state ``memory.final``."""
        return self.decoder.step(prev_token, hidden)  # (B, V), (B, H)

    def forward(
        self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor
    ) -> torch.Tensor:
        memory = self.encode(src, src_lengths)
        hidden = memory.final  # s_0 = h_S, the fixed-length summary of the source  (B, H)
        logits = []
        for t in range(tgt_in.size(1)):
            step_logits, hidden = self.decode_step(tgt_in[:, t], hidden, memory)  # (B, V), (B, H)
            logits.append(step_logits)
        return torch.stack(logits, dim=1)  # (B, T, V)


def sequence_loss(logits: torch.Tensor, tgt_out: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """Mean cross-entropy -log p(y_t | y_<t, x) over the real (non-pad) target tokens.

    logits: (B, T, V); tgt_out: (B, T) ids with ``pad_id`` after each sequence's ``<eos>``.
    A padded position contributes nothing, so a batch's loss does not depend on how much
    padding it has.
    """
    V = logits.size(-1)
    flat_logits, flat_targets = logits.reshape(-1, V), tgt_out.reshape(-1)  # (B*T, V), (B*T,)
    return F.cross_entropy(flat_logits, flat_targets, ignore_index=pad_id)


@torch.no_grad()
def greedy_decode(
    model: nn.Module,
    src: torch.Tensor,
    src_lengths: torch.Tensor,
    max_len: int,
    bos_id: int = 1,
    eos_id: int = 2,
    pad_id: int = 0,
    return_weights: bool = False,
):
    """Translate a batch by picking the most likely token at every step.

    ``model`` follows the decoding interface of this module (``encode`` and
    ``decode_step``). Each sequence stops at its own ``<eos>`` (kept in the output);
    every position after it is ``pad_id``. The loop ends when all sequences have
    finished or after ``max_len`` steps.

    Returns ids ``(B, L)`` with L <= max_len; with ``return_weights`` (a model with
    attention), also the attention weights ``(B, L, S)`` of every step.
    """
    memory = model.encode(src, src_lengths)
    hidden = memory.final  # (B, H)
    prev = torch.full((src.size(0),), bos_id, dtype=torch.long, device=src.device)  # (B,)
    done = torch.zeros_like(prev, dtype=torch.bool)  # (B,)
    tokens, weights = [], []
    for _ in range(max_len):
        # extra is [] without attention, [weights (B, S)] with it
        logits, hidden, *extra = model.decode_step(prev, hidden, memory)  # (B, V), (B, H)
        prev = logits.argmax(dim=-1).masked_fill(done, pad_id)  # (B,)
        tokens.append(prev)
        weights.extend(extra)
        done = done | (prev == eos_id)
        if done.all():
            break
    ids = torch.stack(tokens, dim=1)  # (B, L)
    if not return_weights:
        return ids
    if not weights:
        raise ValueError(
            "return_weights=True needs a model whose decode_step returns attention weights"
        )
    return ids, torch.stack(weights, dim=1)  # (B, L), (B, L, S)


# ---------------------------------------------------------------------------------------
# Chapter 02's model around the student's attention decoder (not an exercise: chapter 02's
# notebook wraps its AttentionDecoder in it). It is chapter 01's teacher forcing and
# decoding loop, so it comes with chapter 01's code, in the kits from chapter 02 on.


class Seq2SeqAttention(Seq2Seq):
    """Chapter 01's encoder with an attention decoder (RNNsearch, at small scale).

    forward(src (B, S), src_lengths (B,), tgt_in (B, T)) -> logits (B, T, V) and the
    attention weights (B, T, S) of every target step, under teacher forcing.
    """

    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor) -> EncoderOutput:
        memory = super().encode(src, src_lengths)
        keys = self.decoder.score.project_keys(memory.states)  # U h_j, once per source (B, S, A)
        return memory._replace(keys=keys)

    def decode_step(self, prev_token, hidden, memory: EncoderOutput):
        return self.decoder.step(prev_token, hidden, memory.states, memory.mask, memory.keys)

    def forward(self, src, src_lengths, tgt_in) -> tuple[torch.Tensor, torch.Tensor]:
        memory = self.encode(src, src_lengths)
        # s_0 = the encoder's final state (the paper uses tanh(W_s h_1) of a backward RNN)
        hidden = memory.final  # (B, H)
        logits, weights = [], []
        for t in range(tgt_in.size(1)):
            # (B, V), (B, H), (B, S)
            step_logits, hidden, alpha = self.decode_step(tgt_in[:, t], hidden, memory)
            logits.append(step_logits)
            weights.append(alpha)
        return torch.stack(logits, dim=1), torch.stack(weights, dim=1)  # (B, T, V), (B, T, S)


def greedy_decode_with_attention(model, src, src_lengths, max_len, bos_id=1, eos_id=2, pad_id=0):
    """Chapter 01's greedy loop, also returning where each output token looked:
    ids (B, L) and weights (B, L, S)."""
    return greedy_decode(
        model, src, src_lengths, max_len, bos_id, eos_id, pad_id, return_weights=True
    )
