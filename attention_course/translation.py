"""The translation experiment of chapters 01 and 02: data splits, batches, training and
exact-match accuracy by source length.

::

    cfg = experiment_settings()  # the chapters' sizes and budgets (smaller when grading)
    data = number_translation_data(cfg.tgt_lang, cfg.num_train, cfg.test_per_bucket, seed=0)
    model = Seq2Seq(Encoder(len(data.src_vocab), cfg.d_emb, cfg.d_hidden),
                    Decoder(len(data.tgt_vocab), cfg.d_emb, cfg.d_hidden))
    history = train_translation(model, data, sequence_loss, seconds=cfg.seconds,
                                max_steps=cfg.max_steps, lr=cfg.lr, batch_size=cfg.batch_size)
    result = exact_match_by_length(model, data.test, data, decode_fn=greedy_decode)
    plot_accuracy_by_length({"no attention": result})

(The settings are measured in ``benchmarks/figure2.py``: about 30 s of training on two
CPU cores without attention; the attention model converges in 600 steps, about 20 s.)

The helpers only rely on the models' public interface: ``model(src, src_lengths, tgt_in)``
returns logits ``(B, T, V)`` (or a tuple whose first item is the logits, as the attention
model's does), and ``decode_fn(model, src, src_lengths, max_len)`` returns token ids
``(B, L)``. So they work the same with the reference models and with a student's own.
"""

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import torch

from attention_course.data.translation import (  # noqa: F401 (the chapters import them here)
    BUCKETS,
    FULL_SETTINGS,
    GRADING_SETTINGS,
    ExperimentSettings,
    Pair,
    TranslationData,
    bucket_index,
    bucket_label,
    date_translation_data,
    experiment_settings,
    number_translation_data,
)
from attention_course.data.vocab import Batch, Vocab, make_batch
from attention_course.plots import COLOURS
from attention_course.training import History, train


def batch_sampler(
    pairs: Sequence[Pair],
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    batch_size: int = 32,
    seed: int = 0,
    reverse_source: bool = False,
    pool: int = 16,
) -> Callable[[int], Batch]:
    """``next_batch(step)`` for :func:`attention_course.training.train`: shuffled epochs of
    ``pairs`` cut into batches of ``batch_size``, the same batches on every run for one seed.

    Pairs of similar length go together: each run of ``pool`` batches is sorted by target
    length before it is cut, and its batches are then shuffled. A batch is as long as its
    longest pair, so this wastes fewer steps on padding (``pool=1`` turns it off).
    """
    if not pairs:
        raise ValueError("batch_sampler needs at least one pair")
    batch_size = min(batch_size, len(pairs))
    rng = random.Random(seed)
    queue: list[list[int]] = []

    def refill() -> None:
        order = rng.sample(range(len(pairs)), len(pairs))
        for start in range(0, len(order) - batch_size + 1, batch_size * pool):
            chunk = sorted(order[start : start + batch_size * pool], key=lambda i: len(pairs[i][1]))
            batches = [
                chunk[k : k + batch_size] for k in range(0, len(chunk) - batch_size + 1, batch_size)
            ]
            rng.shuffle(batches)
            queue.extend(batches)
        queue.reverse()  # pop() from the end takes them in order

    def next_batch(step: int) -> Batch:
        if not queue:
            refill()
        chosen = [pairs[i] for i in queue.pop()]
        return make_batch(chosen, src_vocab, tgt_vocab, reverse_source=reverse_source)

    return next_batch


def logits_of(output) -> torch.Tensor:
    """The logits from a model's output: the output itself, or the first item of a tuple
    (an attention model also returns its weights)."""
    return output[0] if isinstance(output, tuple | list) else output


def train_translation(
    model: torch.nn.Module,
    data: TranslationData,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    *,
    seconds: float,
    max_steps: int,
    batch_size: int = 32,
    lr: float = 3e-3,
    lr_decay: bool = True,
    lr_schedule: Callable[[int], float] | None = None,
    reverse_source: bool = False,
    seed: int = 0,
    evaluate: Callable[[torch.nn.Module], dict[str, float]] | None = None,
    eval_every: int = 200,
    pool: int = 16,
    progress: bool | None = None,
) -> History:
    """Train ``model`` on ``data.train`` with teacher forcing and Adam.

    ``loss_fn(logits (B, T, V), tgt_out (B, T))`` is the sequence loss (chapter 01's
    ``sequence_loss``). Training stops after ``max_steps`` or ``seconds``, whichever comes
    first; ``reverse_source`` feeds every source backwards (Sutskever et al. 2014).
    With ``lr_decay`` the learning rate falls linearly from ``lr`` to 0 at ``max_steps``:
    without it, a late loss spike sometimes costs a few points of accuracy at the end.
    ``lr_schedule(step)`` (steps counted from 1), if given, is the learning rate itself at
    each step instead, for example the Transformer's warm-up schedule (chapter 06).
    """
    next_batch = batch_sampler(
        data.train, data.src_vocab, data.tgt_vocab, batch_size, seed, reverse_source, pool
    )

    def batch_loss(model, batch: Batch) -> torch.Tensor:
        logits = logits_of(model(batch.src, batch.src_lengths, batch.tgt_in))  # (B, T, V)
        return loss_fn(logits, batch.tgt_out)

    if lr_schedule is not None:
        # Adam as in Vaswani et al. 2017 (section 5.3); the schedule sets the rate each step
        optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_schedule(step + 1))
        optimizer.register_step_post_hook(lambda *_: schedule.step())
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    if lr_decay and lr_schedule is None:
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: max(0.0, 1.0 - step / max_steps)
        )
        optimizer.register_step_post_hook(lambda *_: schedule.step())
    return train(
        model,
        next_batch,
        batch_loss,
        seconds=seconds,
        max_steps=max_steps,
        optimizer=optimizer,
        evaluate=evaluate,
        eval_every=eval_every,
        progress=progress,
    )


@dataclass
class AccuracyByLength:
    """Exact-match accuracy per source-length bucket, and over every pair."""

    labels: list[str]
    accuracy: list[float]
    counts: list[int]
    overall: float
    examples: list[tuple[list[str], list[str], list[str]]] = field(default_factory=list, repr=False)

    def __str__(self) -> str:
        cells = "  ".join(
            f"{lab}: {acc:.2f}"
            for lab, acc, n in zip(self.labels, self.accuracy, self.counts, strict=True)
            if n
        )
        return f"{cells}  | overall {self.overall:.3f}"

    def as_dict(self) -> dict[str, float]:
        return {**dict(zip(self.labels, self.accuracy, strict=True)), "overall": self.overall}


def _decoder(model_or_decode_fn, decode_fn):
    """A function (src, src_lengths, max_len) -> ids, from a model and a decode function
    or from a decode function alone."""
    if isinstance(model_or_decode_fn, torch.nn.Module):
        if decode_fn is None:
            raise TypeError(
                "pass decode_fn=greedy_decode (your decoding function) along with the model"
            )
        model = model_or_decode_fn
        model.eval()
        return lambda src, lengths, max_len: decode_fn(model, src, lengths, max_len)
    if not callable(model_or_decode_fn):
        raise TypeError(
            f"expected a model or a decode function, got {type(model_or_decode_fn).__name__}"
        )
    return model_or_decode_fn


def translate(
    model_or_decode_fn,
    sources: Sequence[Sequence[str]],
    data: TranslationData,
    *,
    decode_fn=None,
    reverse_source: bool = False,
    max_len: int = 40,
    batch_size: int = 512,
) -> list[list[str]]:
    """Decode token lists ``sources`` into target token lists (stopped at ``<eos>``)."""
    decode = _decoder(model_or_decode_fn, decode_fn)
    out = []
    with torch.no_grad():
        for start in range(0, len(sources), batch_size):
            chunk = [(list(src), []) for src in sources[start : start + batch_size]]
            batch = make_batch(chunk, data.src_vocab, data.tgt_vocab, reverse_source=reverse_source)
            ids = decode(batch.src, batch.src_lengths, max_len)  # (b, L)
            if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.size(0) != len(chunk):
                shape = tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__
                raise ValueError(
                    f"decoding returned {shape}, expected ids of shape ({len(chunk)}, length)"
                )
            out += [data.tgt_vocab.decode(row.tolist()) for row in ids]
    return out


def translate_with_attention(
    model, source: Sequence[str], data: TranslationData, *, decode_fn, max_len: int = 40
) -> tuple[list[str], torch.Tensor]:
    """Translate one token list and say where each output token looked, for
    :func:`attention_course.plots.attention_heatmap`.

    ``decode_fn(model, src, src_lengths, max_len)`` returns ids ``(1, L)`` and weights
    ``(1, L, S)`` (e.g. ``greedy_decode_with_attention``). Returns the output tokens up to
    and including ``<eos>`` and their weights ``(L, S)``.
    """
    batch = make_batch([(list(source), [])], data.src_vocab, data.tgt_vocab)
    model.eval()
    with torch.no_grad():
        ids, weights = decode_fn(model, batch.src, batch.src_lengths, max_len)  # (1, L), (1, L, S)
    tokens = data.tgt_vocab.decode(ids[0].tolist(), strip=False)
    end = tokens.index("<eos>") + 1 if "<eos>" in tokens else len(tokens)
    return tokens[:end], weights[0, :end]  # L tokens, (L, S)


def exact_match_by_length(
    model_or_decode_fn,
    pairs: Sequence[Pair],
    data: TranslationData,
    *,
    decode_fn=None,
    buckets: Sequence[tuple[int, int]] | None = None,
    reverse_source: bool = False,
    max_len: int | None = None,
) -> AccuracyByLength:
    """The fraction of ``pairs`` translated exactly right, per source-length bucket.

    Pass a model and ``decode_fn`` (called as ``decode_fn(model, src, src_lengths, max_len)``,
    e.g. ``greedy_decode``), or a decode function ``(src, src_lengths, max_len) -> ids``
    alone. ``max_len`` defaults to the longest target plus 2.
    """
    buckets = data.buckets if buckets is None else buckets
    max_len = max(len(tgt) for _, tgt in pairs) + 2 if max_len is None else max_len
    hypotheses = translate(
        model_or_decode_fn,
        [src for src, _ in pairs],
        data,
        decode_fn=decode_fn,
        reverse_source=reverse_source,
        max_len=max_len,
    )
    right, total = [0] * len(buckets), [0] * len(buckets)
    examples = []
    for (src, tgt), hyp in zip(pairs, hypotheses, strict=True):
        k = bucket_index(len(src), buckets)
        if k is None:
            continue
        total[k] += 1
        right[k] += hyp == list(tgt)
        examples.append((list(src), list(tgt), hyp))
    return AccuracyByLength(
        labels=[bucket_label(b) for b in buckets],
        accuracy=[r / t if t else float("nan") for r, t in zip(right, total, strict=True)],
        counts=total,
        overall=sum(right) / max(1, sum(total)),
        examples=examples,
    )


def plot_accuracy_by_length(
    results: dict[str, AccuracyByLength | Sequence[float]],
    buckets: Sequence[tuple[int, int]] = BUCKETS,
    title: str = "",
    ax=None,
):
    """Exact match against source length, one line per model (cf. Bahdanau et al. 2015, Fig. 2).

    ``results`` maps a model's name to an :class:`AccuracyByLength` or to one accuracy per bucket.
    """
    labels = [bucket_label(b) for b in buckets]
    measured = [r for r in results.values() if isinstance(r, AccuracyByLength)]
    if measured:  # the data's own buckets (the first holds 3 and 4 tokens, not 0 to 4)
        labels = list(measured[0].labels)
    if ax is None:
        fig, ax = plt.subplots(figsize=(5.5, 3.5))
    else:
        fig = ax.figure
    markers = "osD^v<>"
    for i, (name, res) in enumerate(results.items()):
        acc = list(res.accuracy if isinstance(res, AccuracyByLength) else res)
        if len(acc) != len(labels):
            raise ValueError(f"{name!r} has {len(acc)} accuracies for {len(labels)} buckets")
        ax.plot(
            range(len(labels)),
            acc,
            marker=markers[i % len(markers)],
            color=COLOURS[i % len(COLOURS)],
            label=name,
        )
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels)
    ax.set_xlabel("source length (tokens)")
    ax.set_ylabel("exact match")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend()
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return fig
