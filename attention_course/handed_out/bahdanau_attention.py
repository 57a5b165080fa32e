"""Additive attention and an RNN decoder that attends to the source (chapter 02).

Bahdanau, Cho and Bengio (2015) let the decoder look back at every encoder state h_j at
every step i, instead of only at the final one (chapter 01's bottleneck):

    e_ij = a(s_{i-1}, h_j) = v_a^T tanh(W_a s_{i-1} + U_a h_j)    (alignment scores)
    alpha_ij = exp(e_ij) / sum_k exp(e_ik)                        (attention weights)
    c_i = sum_j alpha_ij h_j                                      (context vector)
    s_i = GRU([E y_{i-1}; c_i], s_{i-1})

Luong, Pham and Manning (2015) proposed cheaper scores: ``dot`` s^T h_j and ``general``
s^T W_a h_j. (Luong score the *current* decoder state h_t; here every score reads s_{i-1}
as Bahdanau's does, so the three are interchangeable in one decoder.) They also proposed
*local* attention; :func:`local_p_weights` and :class:`LocalPPosition` give its local-p
form (their eq. 9-10), which scores only a window of 2D+1 source positions per step:

    p_t = S_b sigmoid(v_p^T tanh(W_p s))                  (predicted position, S_b the
                                                           real length of sequence b)
    a_t(j) = align(s, h_j) exp(-(j - p_t)^2 / (2 sigma^2)),  sigma = D / 2,
             for |j - p_t| <= D, and 0 outside the window and at padding,

where align is the masked softmax of the scores over the real positions of the window.

Luong et al. also proposed *input feeding* (their section 3.3): the attentional vector
h~_{t-1} = tanh(W_c [c_{t-1}; h_{t-1}]) of the previous step joins the next step's input,
h_t = LSTM([E y_{t-1}; h~_{t-1}], h_{t-1}), so that the decoder knows where it attended
before. ``AttentionDecoder(..., input_feeding=True)`` gives the course's decoder its
closest form (see :class:`AttentionDecoder`): the previous step's context joins the GRU's
input, s_i = GRU([E y_{i-1}; c_i; c_{i-1}], s_{i-1}) with c_0 = 0.

Shapes: B batch, S source length, T target length, V vocabulary, H_dec decoder state
size, H_enc encoder state size, A attention size. Mask convention: ``src_mask[b, j]`` is
True where source position j of sequence b is a real token, False at padding. A fully
masked row gives all-zero weights and a zero context (as in chapter 04).

The model follows chapter 01's decoding interface (``encode`` / ``decode_step``), so
:func:`~attention_course.handed_out.rnn_bottleneck.greedy_decode` drives it unchanged, and
:func:`greedy_decode_with_attention` also returns the weights for alignment heatmaps.
"""

import torch
from torch import nn

from attention_course.handed_out.rnn_bottleneck import (  # noqa: F401  (the grader's names)
    Seq2SeqAttention,
    greedy_decode_with_attention,
)


class AdditiveScore(nn.Module):
    """Bahdanau's alignment model: e_j = v^T tanh(W s + U h_j).

    forward(s (B, H_dec), h (B, S, H_enc), keys=None) -> scores (B, S).

    ``U h_j`` does not depend on the decoder step, so a decoder can compute it once per
    source with :meth:`project_keys` and pass it as ``keys`` (B, S, A) (Bahdanau et al.
    2015, appendix A.1.2).
    """

    def __init__(self, d_query: int, d_key: int, d_attn: int):
        super().__init__()
        self.W = nn.Linear(d_query, d_attn, bias=False)
        self.U = nn.Linear(d_key, d_attn, bias=False)
        self.v = nn.Linear(d_attn, 1, bias=False)

    def project_keys(self, h: torch.Tensor) -> torch.Tensor:
        return self.U(h)  # (B, S, A)

    def forward(
        self, s: torch.Tensor, h: torch.Tensor, keys: torch.Tensor | None = None
    ) -> torch.Tensor:
        keys = self.U(h) if keys is None else keys  # U h_j  (B, S, A)
        query = self.W(s)[:, None, :]  # W s, broadcast over positions  (B, 1, A)
        # e_j = v^T tanh(W s + U h_j)
        return self.v(torch.tanh(query + keys)).squeeze(-1)  # (B, S)


def dot_score(s: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """Luong's dot score e_j = s^T h_j. s: (B, H), h: (B, S, H) -> (B, S)."""
    return (h @ s[:, :, None]).squeeze(-1)  # (B, S, H) @ (B, H, 1) -> (B, S)


def general_score(s: torch.Tensor, h: torch.Tensor, W_a: torch.Tensor) -> torch.Tensor:
    """Luong's general score e_j = s^T W_a h_j.

    s: (B, H_dec), h: (B, S, H_enc), W_a: (H_dec, H_enc) -> (B, S).
    """
    query = s @ W_a  # s^T W_a  (B, H_enc)
    return dot_score(query, h)  # (B, S)


class DotScore(nn.Module):
    """:func:`dot_score` as a module with the same call as :class:`AdditiveScore`."""

    def project_keys(self, h):
        return None

    def forward(self, s, h, keys=None):
        return dot_score(s, h)  # (B, S)


class GeneralScore(nn.Module):
    """:func:`general_score` with a learned W_a (H_dec, H_enc)."""

    def __init__(self, d_query: int, d_key: int):
        super().__init__()
        self.W_a = nn.Parameter(torch.randn(d_query, d_key) / d_key**0.5)

    def project_keys(self, h):
        return None

    def forward(self, s, h, keys=None):
        return general_score(s, h, self.W_a)  # (B, S)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """alpha_j = exp(e_j) / sum_{k real} exp(e_k) at real positions, exactly 0 at padding.

    scores: (B, S); mask: bool (B, S), True at real tokens. A row with no real token at
    all gives zeros (not NaN).
    """
    scores = scores.masked_fill(~mask, float("-inf"))  # padding can never win
    return torch.softmax(scores, dim=-1).nan_to_num(0.0)  # (B, S); all -inf rows: 0/0 -> 0


def local_p_weights(
    scores: torch.Tensor,
    mask: torch.Tensor,
    p: torch.Tensor,
    D: int,
    positions: torch.Tensor | None = None,
) -> torch.Tensor:
    """Luong's local-p weights: a_j = align_j exp(-(j - p)^2 / (2 sigma^2)), sigma = D / 2.

    scores: (B, S); mask: bool (B, S), True at real tokens; p: (B,) the predicted
    positions p_t (float, differentiable); D: the half-width of the window, an int >= 1;
    positions: (B, S) the source position of each column of ``scores`` when they are only
    a window gathered from a longer source (default: 0, 1, ..., S - 1) -> weights (B, S).

    align is the masked softmax of the scores over the real positions j inside the window
    |j - p| <= D (Luong et al. 2015, eq. 10: a_t has 2D + 1 entries); it is then multiplied
    by a Gaussian centred on p, so the weights no longer sum to one. Positions outside the
    window and padding get exactly 0; a row with no real position in its window gives
    zeros. With D >= S every position is in the window and the weights are the global ones
    (:func:`masked_softmax`) times the Gaussian.
    """
    if positions is None:
        positions = torch.arange(scores.size(-1), device=scores.device)[None, :]  # (1, S)
    distance = positions - p[:, None]  # j - p_t  (B, S)
    window = distance.abs() <= D  # the 2D + 1 positions (at most) around p_t
    align = masked_softmax(scores, mask & window)  # softmax over the real window positions
    sigma = D / 2
    return align * torch.exp(-(distance**2) / (2 * sigma**2))  # (B, S)


class LocalPPosition(nn.Module):
    """Luong's predictive alignment: p_t = S_b sigmoid(v_p^T tanh(W_p s)) (eq. 9).

    forward(s (B, H_dec), lengths (B,)) -> p (B,), a float in (0, S_b): S_b is the real
    length of sequence b (its number of real tokens), not the padded length, so that a
    short sequence in a padded batch can still point at its own last token.
    """

    def __init__(self, d_query: int, d_attn: int):
        super().__init__()
        self.W_p = nn.Linear(d_query, d_attn, bias=False)
        self.v_p = nn.Linear(d_attn, 1, bias=False)

    def forward(self, s: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        fraction = torch.sigmoid(self.v_p(torch.tanh(self.W_p(s)))).squeeze(-1)  # (B,)
        return lengths.to(fraction.dtype) * fraction  # p_t  (B,)


def gather_window(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x (B, S, ...) at the positions index (B, W) of each sequence -> (B, W, ...)."""
    shape = (*index.shape, *x.shape[2:])
    return x.gather(1, index.reshape(*index.shape, *[1] * (x.dim() - 2)).expand(shape))


def context(weights: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
    """c = sum_j alpha_j h_j. weights: (B, S), states: (B, S, H) -> (B, H)."""
    return (weights[:, :, None] * states).sum(dim=1)  # (B, S, 1) * (B, S, H) -> (B, H)


def make_score(kind: str, d_query: int, d_key: int, d_attn: int) -> nn.Module:
    """An alignment model by name: "additive" (Bahdanau), "dot" or "general" (Luong)."""
    if kind == "additive":
        return AdditiveScore(d_query, d_key, d_attn)
    if kind == "general":
        return GeneralScore(d_query, d_key)
    if kind == "dot":
        if d_query != d_key:
            raise ValueError(f"the dot score needs d_query == d_key, got {d_query} and {d_key}")
        return DotScore()
    raise ValueError(f"unknown score {kind!r}; choose 'additive', 'dot' or 'general'")


class AttentionDecoder(nn.Module):
    """One step of Bahdanau's decoder.

    step(prev_token (B,), hidden s_{i-1} (B, H_dec), enc_states (B, S, H_enc),
    src_mask (B, S), keys=None) -> logits (B, V), hidden s_i (B, H_dec), weights (B, S)
    (with ``input_feeding``, hidden is the pair (s, c) (B, H_dec), (B, H_enc): see below).

    The previous state s_{i-1} scores every source position; the context c_i enters the
    GRU with the previous token, and the output layer reads [s_i; c_i] (a simplification
    of the paper's maxout output layer).

    ``attention="local-p"`` replaces global attention with Luong's local-p attention of
    half-width ``window`` = D: s_{i-1} predicts a position p (:class:`LocalPPosition`), and
    only the 2D + 1 source positions around it are scored (all S when S <= 2D + 1), with
    :func:`local_p_weights`. The weights returned are still (B, S), zero outside the window.

    ``input_feeding=True`` adds Luong's input feeding, in the form this decoder allows:

        s_i = GRU([E y_{i-1}; c_i; c_{i-1}], s_{i-1}),   c_0 = 0.

    Luong feeds the previous attentional vector h~_{t-1} = tanh(W_c [c_{t-1}; h_{t-1}]),
    the vector its output layer reads. Here step i - 1's output layer reads
    [s_{i-1}; c_{i-1}] itself (W_c and the tanh folded into one linear layer), and of the
    two the GRU already has s_{i-1} as its state, so c_{i-1} is fed: H_enc more input columns,
    3 H_dec H_enc more parameters in the GRU, nothing else. The decoder state is then the
    pair (s_i, c_i): ``step`` takes ``hidden`` = (s_{i-1}, c_{i-1}), or a bare s_0 at the
    first step (then c_0 = 0, so greedy decoding and teacher forcing start from the
    encoder's final state unchanged), and returns (s_i, c_i). Note that Bahdanau's decoder
    already feeds c_i into s_i, which scores step i + 1; input feeding adds a direct copy
    of c_{i-1} one step later. It works with either ``attention``.
    """

    def __init__(
        self,
        vocab_size: int,
        d_emb: int,
        d_hidden: int,
        d_enc: int | None = None,
        d_attn: int | None = None,
        score: str = "additive",
        attention: str = "global",
        window: int = 4,
        input_feeding: bool = False,
    ):
        super().__init__()
        if attention not in ("global", "local-p"):
            raise ValueError(f"unknown attention {attention!r}; choose 'global' or 'local-p'")
        if attention == "local-p" and window < 1:
            raise ValueError(f"the window's half-width D must be >= 1, got {window}")
        d_enc = d_hidden if d_enc is None else d_enc
        d_attn = d_hidden if d_attn is None else d_attn
        self.attention, self.window = attention, window
        self.input_feeding = input_feeding
        self.embedding = nn.Embedding(vocab_size, d_emb, padding_idx=0)
        self.score = make_score(score, d_hidden, d_enc, d_attn)
        if attention == "local-p":
            self.position = LocalPPosition(d_hidden, d_attn)
        d_fed = d_enc if input_feeding else 0  # the columns that c_{i-1} adds
        self.cell = nn.GRUCell(d_emb + d_enc + d_fed, d_hidden)
        self.out = nn.Linear(d_hidden + d_enc, vocab_size)

    def attend_local_p(self, hidden, enc_states, src_mask, keys=None):
        """Local-p weights (B, S) and context (B, H_enc), scoring only the window."""
        B, S = src_mask.shape
        D = self.window
        p = self.position(hidden, src_mask.sum(dim=-1))  # p_t  (B,)
        if 2 * D + 1 >= S:  # the window is as long as the source: score every position
            alpha = local_p_weights(self.score(hidden, enc_states, keys), src_mask, p, D)
            return alpha, context(alpha, enc_states)
        # the 2D + 1 positions around round(p_t), shifted to stay inside the source; they
        # hold every position j with |j - p_t| <= D
        start = (p.detach().round().long() - D).clamp(0, S - 2 * D - 1)  # (B,)
        index = start[:, None] + torch.arange(2 * D + 1, device=p.device)  # (B, 2D+1)
        states = gather_window(enc_states, index)  # (B, 2D+1, H_enc)
        window_keys = None if keys is None else gather_window(keys, index)  # (B, 2D+1, A)
        e = self.score(hidden, states, window_keys)  # 2D + 1 scores per sequence
        a = local_p_weights(e, gather_window(src_mask, index), p, D, positions=index)
        alpha = torch.zeros_like(src_mask, dtype=a.dtype).scatter(1, index, a)  # (B, S)
        return alpha, context(a, states)

    def step(self, prev_token, hidden, enc_states, src_mask, keys=None):
        if self.input_feeding:
            # the state (s_{i-1}, c_{i-1}); a bare s_0 starts with c_0 = 0
            if isinstance(hidden, tuple):
                hidden, c_prev = hidden  # (B, H_dec), (B, H_enc)
            else:
                c_prev = enc_states.new_zeros(enc_states.size(0), enc_states.size(-1))
        if self.attention == "local-p":
            alpha, c = self.attend_local_p(hidden, enc_states, src_mask, keys)
        else:
            e = self.score(hidden, enc_states, keys)  # e_ij = a(s_{i-1}, h_j)  (B, S)
            alpha = masked_softmax(e, src_mask)  # alpha_ij  (B, S)
            c = context(alpha, enc_states)  # c_i = sum_j alpha_ij h_j  (B, H_enc)
        y = self.embedding(prev_token)  # (B, E)
        if self.input_feeding:
            # s_i = GRU([E y_{i-1}; c_i; c_{i-1}], s_{i-1})
            x = torch.cat([y, c, c_prev], dim=-1)  # (B, E + 2 H_enc)
        else:
            # s_i = GRU([E y_{i-1}; c_i], s_{i-1})
            x = torch.cat([y, c], dim=-1)  # (B, E + H_enc)
        hidden = self.cell(x, hidden)  # (B, H_dec)
        logits = self.out(torch.cat([hidden, c], dim=-1))  # (B, V)
        if self.input_feeding:
            return logits, (hidden, c), alpha  # c_i is fed to step i + 1
        return logits, hidden, alpha
