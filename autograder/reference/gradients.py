"""Why long dependencies are hard: how much the last state of a recurrent network still
depends on an input seen k steps earlier (the figure of chapter 01).

A recurrent network applies the same step h_t = f(x_t, h_{t-1}) at every position, so by
the chain rule the derivative of its last state h_T with respect to the input x_t is a
product of T - t step Jacobians (Bengio et al. 1994; Pascanu et al. 2013):

    dh_T/dx_t = (prod_{k=t+1}^{T} dh_k/dh_{k-1}) dh_t/dx_t

For the tanh RNN h_k = tanh(W_ih x_k + W_hh h_{k-1} + b), each factor is

    dh_k/dh_{k-1} = diag(1 - h_k^2) W_hh

and since |tanh'| <= 1, ||dh_T/dx_t|| <= ||dh_t/dx_t|| sigma_max(W_hh)^(T-t): if the largest
singular value of W_hh is below 1 the dependence on distant inputs vanishes exponentially
(Pascanu et al. 2013, section 2.1). A gradient descending from a loss at step T is this
Jacobian, transposed, times dL/dh_T, so it vanishes with it.

A GRU (Cho et al. 2014) mixes the old state into the new one with its update gate z_k.
In PyTorch's convention h_k = (1 - z_k) * n_k + z_k * h_{k-1}, so

    dh_k/dh_{k-1} = diag(z_k) + (terms through n_k, z_k and the reset gate r_k)

and a unit whose gate stays near 1 copies its state, and the gradient, unchanged.

Shapes: N sequences, T steps, D input size, H hidden size.
"""

import math

import torch
from torch import nn

KINDS = ("rnn", "gru")


def make_recurrent(
    kind: str,
    d_input: int,
    d_hidden: int,
    recurrent_scale: float | None = None,
    update_bias: float = 0.0,
) -> nn.Module:
    """A one-layer ``nn.RNN`` (tanh) or ``nn.GRU``, batch-first.

    ``recurrent_scale``: if given, every recurrent weight matrix (W_hh; for the GRU its three
    blocks) is redrawn from N(0, recurrent_scale^2 / H), so that its spectral radius is
    close to ``recurrent_scale``; None keeps PyTorch's default initialisation,
    U(-1/sqrt(H), 1/sqrt(H)), whose spectral radius is about 1/sqrt(3) = 0.58.
    ``update_bias`` (GRU only) is added to the update gate's bias: a large positive value
    makes z ~ 1, a GRU that keeps its state, as training can teach it to.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown recurrent network {kind!r}; choose one of {KINDS}")
    if kind == "rnn" and update_bias:
        raise ValueError("update_bias is for the GRU; a tanh RNN has no update gate")
    rnn_class = nn.RNN if kind == "rnn" else nn.GRU
    rnn = rnn_class(d_input, d_hidden, batch_first=True)
    with torch.no_grad():
        if recurrent_scale is not None:
            # W_hh ~ N(0, scale^2 / H): spectral radius ~ scale (circular law)
            rnn.weight_hh_l0.normal_(0.0, recurrent_scale / math.sqrt(d_hidden))
        if update_bias:
            # PyTorch stacks the GRU's gates as (r, z, n): rows H..2H are the update gate z
            rnn.bias_hh_l0[d_hidden : 2 * d_hidden] += update_bias
    return rnn


def jacobian_norms(rnn: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """||dh_T/dx_t||_F for every sequence and every step, by automatic differentiation.

    rnn: a batch-first ``nn.RNN`` or ``nn.GRU`` with hidden size H; x: (N, T, D).
    Returns (N, T): entry [n, t] is the Frobenius norm of the (H, D) Jacobian of sequence
    n's last state with respect to its input at step t.

    Row k of the Jacobian is the gradient of h_T[k]. Instead of H backward passes, the
    batch is repeated H times and copy k back-propagates h_T[k]: one backward pass.
    """
    N, T, D = x.shape
    H = rnn.hidden_size
    inputs = x.repeat(H, 1, 1).requires_grad_(True)  # copy k of sequence n at k*N + n  (H*N, T, D)
    _, h_n = rnn(inputs)  # (1, H*N, H)
    h_T = h_n[-1].reshape(H, N, H)  # [k, n] = last state of copy k of sequence n  (H, N, H)
    picked = h_T.diagonal(dim1=0, dim2=2)  # [n, k] = h_T[k] of sequence n  (N, H)
    (grad,) = torch.autograd.grad(picked.sum(), inputs)  # row k of each Jacobian  (H*N, T, D)
    rows = grad.reshape(H, N, T, D)  # [k, n, t] = d h_T[k] / d x_t of sequence n  (H, N, T, D)
    return rows.pow(2).sum(dim=(0, 3)).sqrt()  # Frobenius norm over (k, D)  (N, T)


def gradient_norm_by_distance(
    kind: str,
    length: int = 60,
    d_input: int = 16,
    d_hidden: int = 64,
    num_sequences: int = 16,
    seeds=(0, 1, 2),
    recurrent_scale: float | None = None,
    update_bias: float = 0.0,
) -> list[float]:
    """The mean of ||dh_T/dx_t|| against the distance T - t, at initialisation.

    For each seed a fresh network (see :func:`make_recurrent`) reads ``num_sequences``
    random sequences x ~ N(0, 1) of ``length`` steps; the norms are averaged over every
    sequence of every seed. Returns ``length`` floats: item k is the mean norm at
    distance k (k = 0 is the last input, x_T).
    """
    if length < 1 or num_sequences < 1 or not seeds:
        raise ValueError("need length >= 1, num_sequences >= 1 and at least one seed")
    total = torch.zeros(length, dtype=torch.float64)  # (T,)
    for seed in seeds:
        torch.manual_seed(seed)
        rnn = make_recurrent(kind, d_input, d_hidden, recurrent_scale, update_bias)
        x = torch.randn(num_sequences, length, d_input)  # (N, T, D)
        norms = jacobian_norms(rnn, x)  # (N, T), by step t
        total += norms.double().mean(dim=0).flip(0)  # by distance T - t  (T,)
    return (total / len(seeds)).tolist()
