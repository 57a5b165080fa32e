r"""Decomposable attention for sentence pairs (Parikh et al. 2016), and an LSTM baseline
(chapter 05).

Parikh, Täckström, Das and Uszkoreit (2016) classify a pair of sentences
a = (a_1, ..., a_{l_a}) and b = (b_1, ..., b_{l_b}) (word embeddings) with no recurrence
and no positions, in three steps (their eq. 1-5, without intra-sentence attention):

    Attend     e_ij = F(a_i)^T F(b_j)
               beta_i  = sum_j softmax_j(e_ij) b_j     (the part of b aligned to a_i)
               alpha_j = sum_i softmax_i(e_ij) a_i     (the part of a aligned to b_j)
    Compare    v_{1,i} = G([a_i; beta_i]),   v_{2,j} = G([b_j; alpha_j])
    Aggregate  v_1 = sum_i v_{1,i},   v_2 = sum_j v_{2,j},   y_hat = H([v_1; v_2])

F, G and H are small feed-forward networks (two ReLU layers each in the paper; H ends with
a linear layer to the class scores). Every step works on one token, or one pair of tokens,
at a time, so the model is cheap and parallel; and since nothing in it knows a token's
position, its output does not change when the tokens of a or of b are permuted.

Shapes: B batch, l_a and l_b the padded lengths, V vocabulary, d the width. Padding is
id ``pad_id`` (0, the course's convention): a padding token is never attended to, and its
compared vector is left out of the sums, so padding never changes the output.

The baseline, :class:`LSTMPairClassifier`, encodes a and b with one shared LSTM and
classifies from [h_a; h_b; |h_a - h_b|; h_a * h_b], the features of the sentence-encoder
baselines of the time (Mou et al. 2016; Conneau et al. 2017).
"""

import time
from dataclasses import dataclass

import torch
from torch import nn

from autograder.reference.bahdanau import masked_softmax


def feed_forward(d_in: int, d_hidden: int, d_out: int | None = None) -> nn.Sequential:
    """Two ReLU layers, d_in -> d_hidden -> d_hidden (the paper's F, G and H), optionally
    followed by a linear layer to ``d_out`` (H's class scores)."""
    layers = [nn.Linear(d_in, d_hidden), nn.ReLU(), nn.Linear(d_hidden, d_hidden), nn.ReLU()]
    if d_out is not None:
        layers.append(nn.Linear(d_hidden, d_out))
    return nn.Sequential(*layers)


def attend(
    a: torch.Tensor,
    b: torch.Tensor,
    Fa: torch.Tensor,
    Fb: torch.Tensor,
    mask_a: torch.Tensor,
    mask_b: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Soft alignment both ways (Parikh et al. 2016, eq. 1-2).

    a: (B, l_a, d), b: (B, l_b, d) the embeddings; Fa: (B, l_a, d_F), Fb: (B, l_b, d_F)
    their images under F; mask_a: bool (B, l_a), mask_b: bool (B, l_b), True at real
    tokens. Returns beta (B, l_a, d), alpha (B, l_b, d), and the weights
    w_ab (B, l_a, l_b) (row i: softmax_j of e_ij over the real b_j) and
    w_ba (B, l_b, l_a) (row j: softmax_i of e_ij over the real a_i). Each row sums to one,
    rows of padding tokens included; a sentence with no real token gives zero weights.
    """
    # e_ij = F(a_i)^T F(b_j)
    e = Fa @ Fb.transpose(1, 2)  # (B, l_a, l_b)
    w_ab = masked_softmax(e, mask_b[:, None, :])  # softmax over j  (B, l_a, l_b)
    w_ba = masked_softmax(e.transpose(1, 2), mask_a[:, None, :])  # softmax over i  (B, l_b, l_a)
    beta = w_ab @ b  # beta_i = sum_j w_ij b_j  (B, l_a, d)
    alpha = w_ba @ a  # alpha_j = sum_i w_ji a_i  (B, l_b, d)
    return beta, alpha, w_ab, w_ba


@dataclass
class DecomposableConfig:
    vocab_size: int
    d_embed: int = 32  # the paper: 300-d GloVe vectors projected to 200
    d_hidden: int = 32  # the paper: 200
    num_classes: int = 2  # the paper: 3 (entailment, neutral, contradiction)
    pad_id: int = 0


class DecomposableAttention(nn.Module):
    """Attend, compare, aggregate (Parikh et al. 2016), without intra-sentence attention.

    forward(a (B, l_a), b (B, l_b) token ids) -> class scores (B, num_classes). After a
    call, ``self.weights`` holds the attention weights ``(w_ab, w_ba)`` of :func:`attend`.
    """

    def __init__(self, config: DecomposableConfig):
        super().__init__()
        c = config
        self.pad_id = c.pad_id
        self.embed = nn.Embedding(c.vocab_size, c.d_embed, padding_idx=c.pad_id)
        self.F = feed_forward(c.d_embed, c.d_hidden)
        self.G = feed_forward(2 * c.d_embed, c.d_hidden)
        self.H = feed_forward(2 * c.d_hidden, c.d_hidden, c.num_classes)
        self.weights = None

    def forward(self, a_ids: torch.Tensor, b_ids: torch.Tensor) -> torch.Tensor:
        mask_a, mask_b = a_ids != self.pad_id, b_ids != self.pad_id  # (B, l_a), (B, l_b)
        a, b = self.embed(a_ids), self.embed(b_ids)  # (B, l_a, d), (B, l_b, d)
        # Attend
        beta, alpha, w_ab, w_ba = attend(a, b, self.F(a), self.F(b), mask_a, mask_b)
        self.weights = (w_ab, w_ba)
        # Compare: v_1i = G([a_i; beta_i]), v_2j = G([b_j; alpha_j])
        v1 = self.G(torch.cat([a, beta], dim=-1))  # (B, l_a, d_hidden)
        v2 = self.G(torch.cat([b, alpha], dim=-1))  # (B, l_b, d_hidden)
        # Aggregate: sums over the real tokens, then y_hat = H([v_1; v_2])
        v1 = (v1 * mask_a[..., None]).sum(dim=1)  # (B, d_hidden)
        v2 = (v2 * mask_b[..., None]).sum(dim=1)  # (B, d_hidden)
        return self.H(torch.cat([v1, v2], dim=-1))  # (B, num_classes)


class LSTMPairClassifier(nn.Module):
    """The recurrent baseline: h_a = LSTM(a), h_b = LSTM(b) (one shared LSTM, last real
    state), y_hat = MLP([h_a; h_b; |h_a - h_b|; h_a * h_b]).

    forward(a (B, l_a), b (B, l_b) token ids) -> class scores (B, num_classes). Padding is
    skipped with packed sequences, so it never changes the output.
    """

    def __init__(self, config: DecomposableConfig):
        super().__init__()
        c = config
        self.pad_id = c.pad_id
        self.embed = nn.Embedding(c.vocab_size, c.d_embed, padding_idx=c.pad_id)
        self.lstm = nn.LSTM(c.d_embed, c.d_hidden, batch_first=True)
        self.classify = nn.Sequential(
            nn.Linear(4 * c.d_hidden, c.d_hidden), nn.ReLU(), nn.Linear(c.d_hidden, c.num_classes)
        )

    def encode(self, ids: torch.Tensor) -> torch.Tensor:
        """The LSTM's state after the last real token: ids (B, l) -> (B, d_hidden)."""
        lengths = (ids != self.pad_id).sum(dim=1).clamp(min=1).cpu()  # (B,)
        packed = nn.utils.rnn.pack_padded_sequence(
            self.embed(ids), lengths, batch_first=True, enforce_sorted=False
        )
        _, (h, _) = self.lstm(packed)  # h: (1, B, d_hidden)
        return h[0]  # (B, d_hidden)

    def forward(self, a_ids: torch.Tensor, b_ids: torch.Tensor) -> torch.Tensor:
        h_a, h_b = self.encode(a_ids), self.encode(b_ids)  # (B, d_hidden) each
        features = torch.cat([h_a, h_b, (h_a - h_b).abs(), h_a * h_b], dim=-1)  # (B, 4 d_hidden)
        return self.classify(features)  # (B, num_classes)


def parameter_counts(config: DecomposableConfig) -> dict[str, int]:
    """The number of parameters of each model for ``config``, counted from the formulas
    (a linear layer d_in -> d_out has d_in d_out + d_out; an LSTM layer 4 (d_in d + d d + 2 d),
    PyTorch keeping two bias vectors)."""
    V, e, d, k = config.vocab_size, config.d_embed, config.d_hidden, config.num_classes

    def linear(d_in, d_out):
        return d_in * d_out + d_out

    def two_layers(d_in):
        return linear(d_in, d) + linear(d, d)

    decomposable = V * e + two_layers(e) + two_layers(2 * e) + two_layers(2 * d) + linear(d, k)
    lstm = V * e + 4 * (e * d + d * d + 2 * d) + linear(4 * d, d) + linear(d, k)
    return {"decomposable attention": decomposable, "LSTM": lstm}


@dataclass
class PairHistory:
    """Held-out accuracy at the steps it was measured, and the training time in seconds."""

    steps: list[int]
    accuracy: list[float]
    seconds: float = 0.0


def accuracy(model: nn.Module, a: torch.Tensor, b: torch.Tensor, labels: torch.Tensor) -> float:
    """The share of pairs whose highest class score is the label."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        correct = (model(a, b).argmax(dim=-1) == labels).float().mean().item()
    model.train(was_training)
    return correct


def train_pair_classifier(
    model: nn.Module,
    train: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    test: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    steps: int = 400,
    batch_size: int = 64,
    lr: float = 3e-3,
    eval_every: int = 50,
    seed: int = 0,
) -> PairHistory:
    """Adam on the cross-entropy, ``steps`` minibatches drawn from ``train`` (a, b, labels);
    the accuracy on ``test`` is measured before training and every ``eval_every`` steps."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    history = PairHistory([0], [accuracy(model, *test)])
    start = time.perf_counter()
    model.train()
    for step in range(1, steps + 1):
        rows = torch.randint(0, len(train[2]), (batch_size,), generator=generator)
        a, b, y = (t[rows] for t in train)
        loss = nn.functional.cross_entropy(model(a, b), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % eval_every == 0 or step == steps:
            history.seconds += time.perf_counter() - start
            history.steps.append(step)
            history.accuracy.append(accuracy(model, *test))
            start = time.perf_counter()
    return history
