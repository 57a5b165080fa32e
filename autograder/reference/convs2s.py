r"""Convolutional sequence to sequence learning (Gehring et al. 2017), at small scale
(chapter 03).

Read top to bottom: the gated linear unit, the causal convolution of the decoder, the
residual convolution block, the input representation e = w + p, multi-step attention, the
encoder-decoder, two numbers about convolution stacks (the receptive field and the layers
it takes to connect two tokens), and the measurement that checks such numbers: which inputs
one output's gradient reaches, in a plain stack or in a dilated one (dilations 1, 2, 4, ...).

Shapes: B batch, S source length, T target length, d the model width (the embeddings, the
convolutions' channels and the attention all use one width here; the paper maps between
an embedding size and a convolution size with linear layers), k the kernel width, V a
vocabulary. Tensors between blocks are batch-first ``(B, T, d)``; ``nn.Conv1d`` wants
channels first, ``(B, d, T)``, so a block transposes around its convolution.

Differences from the paper, all for a small model on a CPU: one width d throughout; Adam
instead of Nesterov's accelerated gradient; no weight normalisation; the attention's
context is added to the decoder state without the paper's extra projections and scaling.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from attention_course import convs2s_experiment as experiment
from attention_course.convs2s_experiment import greedy_decode  # noqa: F401

PAD_ID, BOS_ID, EOS_ID = 0, 1, 2


def glu(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    r"""The gated linear unit (Dauphin et al. 2017): v([A B]) = A \otimes \sigma(B).

    x: (..., 2n, ...) split in two halves A, B of size n along ``dim``; returns (..., n, ...).
    The first half is the value, the second half the gate, as in ``F.glu``. An odd size
    along ``dim`` raises ValueError.
    """
    if x.size(dim) % 2:
        raise ValueError(f"glu splits dim {dim} in two halves; its size {x.size(dim)} is odd")
    a, b = x.chunk(2, dim=dim)  # A: the values, B: the gates
    return a * torch.sigmoid(b)


class CausalConv1d(nn.Module):
    r"""A convolution whose output i sees inputs i-k+1, ..., i only (the decoder's).

    y_i = b + \sum_{t=0}^{k-1} W_t x_{i-k+1+t}, with x_j = 0 for j < 0: the input is padded
    on the left by k - 1 zeros and not at all on the right, so y keeps x's length.

    With ``dilation`` delta (1 in ConvS2S; WaveNet's and ByteNet's stacks dilate), output i
    reads the k inputs i - delta (k - 1), ..., i - delta, i, delta apart, and the padding on
    the left is delta (k - 1).

    forward: x (B, C_in, T) -> (B, C_out, T), channels first like ``nn.Conv1d``.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1):
        super().__init__()
        self.kernel_size, self.dilation = kernel_size, dilation
        # no padding of its own
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        left = self.dilation * (self.kernel_size - 1)  # k - 1 when delta = 1
        x = F.pad(x, (left, 0))  # zeros on the left only  (B, C_in, T + left)
        return self.conv(x)  # (B, C_out, T)


class ConvBlock(nn.Module):
    r"""One residual convolution block (section 3.2):

    h_i^l = \sqrt{0.5} \cdot \left( v(W^l [h_{i-k/2}^{l-1}, ..., h_{i+k/2}^{l-1}] + b_w^l)
            + h_i^{l-1} \right),

    with W^l \in R^{2d x kd} (``nn.Conv1d(d, 2d, k)``), v the GLU, and the sum scaled by
    \sqrt{0.5} so that its variance stays that of the input (section 3.4). With
    ``causal=True`` the window is h_{i-k+1}, ..., h_i (the decoder). k must be odd.
    ``dilation`` delta spaces the window's k positions delta apart (1 in ConvS2S; see
    ``dilated_stack``).

    forward: x (B, T, d) -> (B, T, d).
    """

    def __init__(
        self,
        d: int,
        kernel_size: int,
        causal: bool = False,
        dropout: float = 0.0,
        *,
        dilation: int = 1,
    ):
        super().__init__()
        if kernel_size % 2 != 1:
            raise ValueError(f"kernel_size must be odd to centre the window, got {kernel_size}")
        if causal:
            self.conv = CausalConv1d(d, 2 * d, kernel_size, dilation=dilation)
        else:
            padding = dilation * (kernel_size // 2)  # as many positions on either side
            self.conv = nn.Conv1d(d, 2 * d, kernel_size, padding=padding, dilation=dilation)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(self.dropout(x).transpose(1, 2)).transpose(1, 2)  # (B, T, 2d)
        return (glu(h, dim=-1) + x) * math.sqrt(0.5)  # (B, T, d)


class ConvEmbedding(nn.Module):
    r"""The input representation e_j = w_j + p_j (section 3.1): a token embedding plus a
    learned embedding of the absolute position j = 0, 1, ...

    forward: ids (B, T) -> (B, T, d). Raises ValueError when T > max_len.
    """

    def __init__(self, vocab_size: int, d: int, max_len: int = 64, dropout: float = 0.0):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, d, padding_idx=PAD_ID)  # w
        self.positions = nn.Embedding(max_len, d)  # p
        self.dropout = nn.Dropout(dropout)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        T, max_len = ids.size(1), self.positions.num_embeddings
        if T > max_len:
            raise ValueError(f"a sequence of {T} tokens is longer than max_len={max_len}")
        positions = torch.arange(T, device=ids.device)  # (T,)
        return self.dropout(self.tokens(ids) + self.positions(positions))  # (B, T, d)


class MultiStepAttention(nn.Module):
    r"""The attention of one decoder layer l (section 3.3):

    d_i = W_d h_i + b_d + g_i                    (decoder state summary, g_i: target embedding)
    a_ij = exp(d_i \cdot z_j) / \sum_t exp(d_i \cdot z_t)   over the real source positions
    c_i = \sum_j a_ij (z_j + e_j)                 (values: encoder output plus input embedding)

    and the output is h_i + c_i. z_j is the encoder's last output, e_j the source's input
    representation. A row with no real source token gives zero weights and c_i = 0.

    forward(h (B, T, d), g (B, T, d), z (B, S, d), e (B, S, d), src_mask bool (B, S)) ->
    (h + c (B, T, d), a (B, T, S)).
    """

    def __init__(self, d: int):
        super().__init__()
        self.W_d = nn.Linear(d, d)

    def forward(self, h, g, z, e, src_mask):
        query = self.W_d(h) + g  # d_i = W_d h_i + b_d + g_i  (B, T, d)
        scores = query @ z.transpose(1, 2)  # d_i . z_j  (B, T, S)
        scores = scores.masked_fill(~src_mask[:, None, :], float("-inf"))
        a = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # over j  (B, T, S)
        c = a @ (z + e)  # c_i = sum_j a_ij (z_j + e_j)  (B, T, d)
        return h + c, a


class ConvS2S(experiment.ConvS2S):
    """The course's ConvS2S (:class:`attention_course.convs2s_experiment.ConvS2S`, whose
    parts the notebook passes), with this module's parts unless others are given."""

    def __init__(self, *args, embedding=None, block=None, attention=None, **kwargs):
        super().__init__(
            *args,
            embedding=embedding or ConvEmbedding,
            block=block or ConvBlock,
            attention=attention or MultiStepAttention,
            **kwargs,
        )


def receptive_field(num_layers: int, kernel_size: int) -> int:
    """How many input positions one output of ``num_layers`` stacked convolutions of width
    ``kernel_size`` depends on: each layer widens the window by k - 1, so L (k - 1) + 1
    (centred or causal alike)."""
    return num_layers * (kernel_size - 1) + 1


def layers_to_connect(n: int, kernel_size: int) -> int:
    """The fewest stacked convolutions of width k after which the first and the n-th token
    of a sentence meet in one output: the least L with L (k - 1) + 1 >= n, i.e.
    ceil((n - 1) / (k - 1)); O(n / k), against n - 1 steps of a recurrence."""
    return math.ceil((n - 1) / (kernel_size - 1))


def dilated_stack(num_layers: int, kernel_size: int, causal: bool = False, d: int = 4):
    """``num_layers`` residual blocks of width ``kernel_size`` whose dilations double from
    layer to layer, 1, 2, 4, ..., 2^(L-1), as in WaveNet and ByteNet: the stack that
    chapter 03's two graded questions ask about. At initialisation, seeded: a list of
    ``ConvBlock``, for ``measured_receptive_field``."""
    torch.manual_seed(0)
    return [
        ConvBlock(d, kernel_size, causal=causal, dilation=2**layer) for layer in range(num_layers)
    ]


def measured_receptive_field(blocks, length: int, position: int | None = None, d=None) -> set[int]:
    """The input positions that output ``position`` of ``blocks`` (applied in turn to a
    (1, length, d) input) depends on, measured by the gradient: {j : d out_i / d x_j != 0}.

    ``blocks`` is a sequence of modules mapping (1, T, d) to (1, T, d); ``position``
    defaults to the middle.
    """
    blocks = list(blocks)
    if d is None:
        d = next(p for p in blocks[0].parameters() if p.dim() == 3).size(1)
    position = length // 2 if position is None else position
    x = torch.randn(1, length, d, requires_grad=True)
    h = x
    for block in blocks:
        h = block(h)
    h[0, position].sum().backward()
    return set(torch.nonzero(x.grad[0].abs().sum(-1) > 0).flatten().tolist())
