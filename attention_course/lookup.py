r"""The two-lookup task of chapter 05: what several heads can do that one cannot.

Each position i of a cyclic sequence of digits must output two digits at once, the one
``a`` places before it and the one ``b`` places after it:

    y[i] = (x[i - a], x[i + b])   (indices modulo the length).

The model is as small as the question allows: token plus learned position embeddings,
one multi-head attention layer, and two linear read-outs (one per output digit). There is
no feed-forward layer, so everything an output knows comes through the attention layer's
output, a weighted average of values. One head averages the two tokens it needs into one
vector, and a linear read-out cannot tell which token came from which side; two heads can
each fetch one token into their own block of the output.

The attention layer is passed in (``make_attention(d_model, num_heads)``), so the notebook
trains the student's ``MultiHeadAttention`` and the book page the reference one.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attention_course.runtime import set_seed
from attention_course.training import History, train


@dataclass(frozen=True)
class LookupTask:
    """Sequences of ``length`` digits in ``[0, vocab_size)``; targets x[i - a], x[i + b]."""

    length: int = 12
    vocab_size: int = 10
    a: int = 1
    b: int = 2

    def sample(self, num_examples: int, generator: torch.Generator | None = None):
        """Inputs x (N, length) and targets y (N, length, 2) = (x[i - a], x[i + b])."""
        if num_examples < 1:
            raise ValueError(f"need num_examples >= 1, got {num_examples}")
        x = torch.randint(0, self.vocab_size, (num_examples, self.length), generator=generator)
        before = x.roll(self.a, dims=1)  # before[:, i] = x[:, i - a]
        after = x.roll(-self.b, dims=1)  # after[:, i] = x[:, i + b]
        return x, torch.stack([before, after], dim=-1)  # (N, T), (N, T, 2)


class LookupModel(nn.Module):
    """Embeddings -> one multi-head attention layer -> two linear read-outs.

    ``attention`` is a module called as ``attention(query, key, value)`` that returns
    ``(output (B, T, d_model), weights (B, h, T, T))``.
    """

    def __init__(self, attention: nn.Module, task: LookupTask, d_model: int):
        super().__init__()
        self.task = task
        self.embed = nn.Embedding(task.vocab_size, d_model)
        self.position = nn.Embedding(task.length, d_model)
        self.attention = attention
        self.readout = nn.Linear(d_model, 2 * task.vocab_size)  # both digits at once

    def forward(self, x):
        """x (B, T). Returns logits (B, T, 2, vocab) and weights (B, h, T, T)."""
        positions = torch.arange(x.size(1), device=x.device)
        h = self.embed(x) + self.position(positions)  # (B, T, d_model)
        out, weights = self.attention(h, h, h)  # (B, T, d_model), (B, h, T, T)
        logits = self.readout(out).unflatten(-1, (2, self.task.vocab_size))  # (B, T, 2, V)
        return logits, weights


def lookup_loss(model: LookupModel, batch) -> torch.Tensor:
    x, y = batch
    logits, _ = model(x)
    return F.cross_entropy(logits.flatten(0, 2), y.flatten())  # over (B*T*2, V)


@torch.no_grad()
def lookup_accuracy(model: LookupModel, x, y) -> dict[str, float]:
    """Digit accuracy (each of the two outputs) and the share of positions with both right."""
    correct = model(x)[0].argmax(-1) == y  # (N, T, 2)
    return {
        "digit accuracy": correct.float().mean().item(),
        "both digits right": correct.all(-1).float().mean().item(),
    }


@dataclass
class LookupRun:
    num_heads: int
    model: LookupModel
    history: History
    accuracy: dict[str, float]


def train_lookup(
    make_attention: Callable[[int, int], nn.Module],
    num_heads: int,
    *,
    task: LookupTask = LookupTask(),
    d_model: int = 32,
    seconds: float = 8.0,
    max_steps: int = 1000,
    seed: int = 0,
    batch_size: int = 128,
    lr: float = 1e-2,
    progress: bool | None = None,
) -> LookupRun:
    """Train a LookupModel whose attention is ``make_attention(d_model, num_heads)`` and
    measure it on 2,000 held-out sequences (the same for every call)."""
    test_x, test_y = task.sample(2000, generator=torch.Generator().manual_seed(10_000))
    set_seed(seed)
    model = LookupModel(make_attention(d_model, num_heads), task, d_model)
    history = train(
        model,
        next_batch=lambda step: task.sample(batch_size),
        loss_fn=lookup_loss,
        seconds=seconds,
        max_steps=max_steps,
        lr=lr,
        evaluate=lambda m: lookup_accuracy(m, test_x, test_y),
        eval_every=100,
        progress=progress,
    )
    return LookupRun(num_heads, model, history, lookup_accuracy(model, test_x, test_y))


def heads_separate(rows: list[dict]) -> tuple[bool, float, float]:
    """The chapter's finding over runs of several seeds (``rows``: dicts with ``heads`` and
    ``both_right``, as ``benchmarks/chapter05.json`` holds them): whether one head's best
    run got both lookups right at fewer positions than the worst run of any model with more
    heads; and those two fractions. The book page and the benchmark both judge by it."""
    one = [r["both_right"] for r in rows if r["heads"] == 1]
    many = [r["both_right"] for r in rows if r["heads"] > 1]
    if not one or not many:
        raise ValueError("need runs of one head and of more heads")
    return max(one) < min(many), max(one), min(many)
