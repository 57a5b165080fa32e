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
from dataclasses import dataclass, field, replace

import matplotlib.pyplot as plt
import torch

from attention_course.data.dates import date_pairs, dates_of
from attention_course.data.numbers import number_pairs, numbers_of
from attention_course.data.vocab import Batch, Vocab, make_batch
from attention_course.plots import COLOURS
from attention_course.runtime import grading_mode
from attention_course.training import History, train

Pair = tuple[list[str], list[str]]

# Source lengths in tokens: 0-4, 5-9, ..., 20-24. The number data sets hold no test source
# shorter than 3 tokens, so their first bucket is 3-4 (see number_translation_data).
BUCKETS: tuple[tuple[int, int], ...] = ((0, 4), (5, 9), (10, 14), (15, 19), (20, 24))


@dataclass(frozen=True)
class ExperimentSettings:
    """Data, model sizes and training budgets of chapters 01 and 02 (Bahdanau et al. 2015,
    Figure 2).

    The models without and with attention share the data, ``d_emb``, ``d_hidden``, the
    batch, the learning-rate schedule and the seeds. They differ in parameters (at these
    sizes the attention model has about 1.44 times as many) and in steps (``max_steps``
    without attention, ``max_steps_attention`` with it). The control with as many
    parameters as the attention model is ``"no attention, matched parameters"`` in
    :mod:`autograder.reference.experiments`.
    """

    tgt_lang: str = "de"  # English to German number words
    num_train: int = 10000
    test_per_bucket: int = 100
    d_emb: int = 64
    d_hidden: int = 128
    d_attn: int = 64
    batch_size: int = 32
    lr: float = 3e-3  # decayed linearly to 0 at the last step
    seconds: float = 60.0  # wall-clock cap per model
    # Steps per model: training stops on steps, so that the numbers repeat run after run.
    # A step without attention costs about half as much; that model gets 2.5x the steps of
    # the attention model (which has converged by then) and at least as much time.
    max_steps: int = 1500
    max_steps_attention: int = 600
    date_steps: int = 400  # the date-normalisation model of chapter 02


FULL_SETTINGS = ExperimentSettings()
# Grading mode only has to run the experiment, in a few seconds, not reproduce the finding
# (at 300 and 200 steps, chapters 01 and 02 spent 10 s a model, their wall-clock cap on
# a busy machine, in the kit's run of every notebook: tests/test_kit.py).
GRADING_SETTINGS = replace(
    FULL_SETTINGS,
    num_train=3000,
    test_per_bucket=20,
    max_steps=80,
    max_steps_attention=50,
    date_steps=50,
    seconds=10.0,
)


def experiment_settings() -> ExperimentSettings:
    """The full settings, or the small ones while the autograder runs the notebook."""
    return GRADING_SETTINGS if grading_mode() else FULL_SETTINGS


@dataclass
class TranslationData:
    """Training and test pairs with their vocabularies.

    ``test`` is disjoint from ``train`` (no source appears in both); the vocabularies are
    built from the training pairs.
    """

    train: list[Pair]
    test: list[Pair]
    src_vocab: Vocab
    tgt_vocab: Vocab
    buckets: tuple[tuple[int, int], ...] = BUCKETS
    name: str = ""

    def __repr__(self) -> str:
        return (
            f"TranslationData({self.name!r}: {len(self.train)} training pairs, {len(self.test)} test "
            f"pairs, source vocabulary {len(self.src_vocab)}, target vocabulary {len(self.tgt_vocab)})"
        )


def bucket_label(bucket: tuple[int, int]) -> str:
    return f"{bucket[0]}-{bucket[1]}"


def bucket_index(length: int, buckets: Sequence[tuple[int, int]] = BUCKETS) -> int | None:
    """The index of the bucket ``(low, high)`` (both included) holding ``length``, or None."""
    for i, (low, high) in enumerate(buckets):
        if low <= length <= high:
            return i
    return None


def number_translation_data(
    tgt_lang: str = "fr",
    num_train: int = 10000,
    test_per_bucket: int = 100,
    max_digits: int = 12,
    buckets: tuple[tuple[int, int], ...] = BUCKETS,
    seed: int = 0,
    min_test_len: int = 3,
) -> TranslationData:
    """English number words to French (``"fr"``) or German (``"de"``) number words.

    The test set has ``test_per_bucket`` pairs in every source-length bucket, so that long
    sentences, where a model without attention fails, are measured as well as short ones.
    It is drawn first, and the training set (``num_train`` pairs, digit counts uniform in
    1..``max_digits``) leaves its numbers out. Test sources have at least
    ``min_test_len`` tokens: there are only about a hundred numbers of one or two words
    ("seven", "forty two"), and the training set needs them.
    """
    # A bucket is labelled with the lengths it holds: the first one, 0-4, holds 3 and 4.
    buckets = tuple((max(low, min_test_len), high) for low, high in buckets)
    test: list[Pair] = []
    for k, (low, high) in enumerate(buckets):
        test += number_pairs(
            test_per_bucket,
            tgt_lang,
            max_digits,
            seed=1000 * seed + 1 + k,
            min_src_len=low,
            max_src_len=high,
            exclude=numbers_of(test),
        )
    train_pairs = number_pairs(
        num_train, tgt_lang, max_digits, seed=1000 * seed, exclude=numbers_of(test)
    )
    return TranslationData(
        train=train_pairs,
        test=test,
        src_vocab=Vocab.build(src for src, _ in train_pairs),
        tgt_vocab=Vocab.build(tgt for _, tgt in train_pairs),
        buckets=buckets,
        name=f"English to {'French' if tgt_lang == 'fr' else 'German'} number words",
    )


def date_translation_data(
    num_train: int = 10000, num_test: int = 500, seed: int = 0
) -> TranslationData:
    """Dates in several languages and formats to ISO 8601 (see :mod:`attention_course.data.dates`)."""
    test = date_pairs(num_test, seed=1000 * seed + 1)
    train_pairs = date_pairs(num_train, seed=1000 * seed, exclude=dates_of(test))
    return TranslationData(
        train=train_pairs,
        test=test,
        src_vocab=Vocab.build(src for src, _ in train_pairs),
        tgt_vocab=Vocab.build(tgt for _, tgt in train_pairs),
        buckets=((1, 3), (4, 5), (6, 7), (8, 12)),
        name="dates to ISO 8601",
    )


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
