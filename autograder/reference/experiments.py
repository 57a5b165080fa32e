"""The translation experiments of chapters 01 and 02 with the reference models: the
numbers behind the book's figures and ``benchmarks/figure2.py``.

Bahdanau et al. (2015), Figure 2, at small scale: exact match against source length for an
RNN encoder-decoder without attention (also fed the source reversed, Sutskever et al.
2014) and with additive attention (:class:`~attention_course.translation.ExperimentSettings`).

What the models share and what they do not: the same data, embedding size E and hidden size
H, batch size, learning-rate schedule (decayed linearly to 0 at each model's last step) and
seeds. They differ in parameters, since the attention model adds the alignment model and
a GRU cell and an output layer that also read the context (about 1.44 times as many at the
chapters' sizes, see :func:`parameter_counts`), and in steps: 1500 without attention,
600 with it (a step with attention costs about twice as much, and the attention model has
converged by then). The control ``"no attention, matched parameters"`` is the model
without attention at the hidden size whose parameter count is closest to the attention
model's (:func:`matched_hidden`, within :data:`PARAMETER_TOLERANCE`), trained for the
same 1500 steps as the model without attention, the more generous of the two budgets.
"""

from collections.abc import Iterable
from dataclasses import dataclass, replace

import torch

from attention_course.convs2s_experiment import gru_with_attention  # noqa: F401
from attention_course.runtime import set_seed
from attention_course.training import History
from attention_course.translation import (
    AccuracyByLength,
    ExperimentSettings,
    TranslationData,
    date_translation_data,
    exact_match_by_length,
    number_translation_data,
    train_translation,
)
from autograder.reference.bahdanau import AttentionDecoder, Seq2SeqAttention
from autograder.reference.seq2seq import Decoder, Encoder, Seq2Seq, greedy_decode, sequence_loss

MATCHED = "no attention, matched parameters"
MODELS = ("no attention", "no attention, reversed source", "attention", MATCHED)
# How far the matched model's parameter count may be from the attention model's (relative).
PARAMETER_TOLERANCE = 0.03


@dataclass
class Trained:
    """One trained model with its training history and its accuracy by source length."""

    name: str
    seed: int
    model: torch.nn.Module
    data: TranslationData
    history: History
    result: AccuracyByLength
    reverse_source: bool = False
    planned_steps: int | None = None  # training stops earlier only at its time limit

    def row(self) -> dict:
        """The numbers, as a flat dict (for JSON and tables)."""
        row = dict(
            model=self.name,
            seed=self.seed,
            params=count_parameters(self.model),
            d_hidden=self.model.encoder.rnn.hidden_size,
            planned_steps=self.planned_steps,
            steps=len(self.history.steps),
            train_s=round(self.history.seconds, 1),
            final_loss=round(self.history.losses[-1], 4),
            overall=round(self.result.overall, 3),
            buckets=self.result.labels,
            accuracy=[round(a, 3) for a in self.result.accuracy],
        )
        return row


def count_parameters(model: torch.nn.Module) -> int:
    """The number of trainable parameters of ``model``."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def parameter_count(name: str, data: TranslationData, cfg: ExperimentSettings) -> int:
    """The parameters of model ``name`` (as in :data:`MODELS`) on ``data``'s vocabularies,
    counted on a model built on the meta device: nothing is allocated, and the random
    number generator is left as it was."""
    with torch.device("meta"):
        return count_parameters(build(name, data, cfg))


def parameter_counts(
    data: TranslationData, cfg: ExperimentSettings, models: Iterable[str] = MODELS
) -> dict[str, int]:
    """Each model's number of parameters, ``{name: count}``."""
    return {name: parameter_count(name, data, cfg) for name in models}


def matched_hidden(
    data: TranslationData, cfg: ExperimentSettings, tolerance: float = PARAMETER_TOLERANCE
) -> int:
    """The hidden size H of the model without attention whose parameter count is closest to
    the attention model's (the smaller H on a tie), all other sizes as in ``cfg``.

    The count grows with H, so a bisection finds the first H whose count reaches the
    attention model's; the answer is that H or the one below it. Raises ValueError if the
    closest is more than ``tolerance`` (relative) away.
    """
    target = parameter_count("attention", data, cfg)

    def count(H: int) -> int:
        return parameter_count("no attention", data, replace(cfg, d_hidden=H))

    high = 1
    while count(high) < target:
        high *= 2
    low = 0  # count(low) < target <= count(high), with count(0) taken as below any target
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if count(middle) < target else (low, middle)
    best = high if low == 0 or count(high) - target < target - count(low) else low
    found = count(best)
    if abs(found - target) > tolerance * target:
        raise ValueError(
            f"no hidden size gives {target} parameters within {tolerance:.0%}: "
            f"H = {best} gives {found}"
        )
    return best


def build(name: str, data: TranslationData, cfg: ExperimentSettings) -> torch.nn.Module:
    """A reference model of the chapters' size: "attention" or one without attention; the
    one named :data:`MATCHED` gets the hidden size :func:`matched_hidden`."""
    if name == MATCHED:
        cfg = replace(cfg, d_hidden=matched_hidden(data, cfg))
    V_src, V_tgt = len(data.src_vocab), len(data.tgt_vocab)
    encoder = Encoder(V_src, cfg.d_emb, cfg.d_hidden)
    if name.startswith("attention"):
        # "attention, input feeding": Luong's input feeding (chapter 02), s_i also reads c_{i-1}
        feeding = "input feeding" in name
        decoder = AttentionDecoder(
            V_tgt, cfg.d_emb, cfg.d_hidden, d_attn=cfg.d_attn, input_feeding=feeding
        )
        return Seq2SeqAttention(encoder, decoder)
    return Seq2Seq(encoder, Decoder(V_tgt, cfg.d_emb, cfg.d_hidden))


def train_reference(
    name: str, data: TranslationData, cfg: ExperimentSettings, seed: int = 0, steps=None
) -> Trained:
    """Build, train and measure one reference model (``name`` as in :data:`MODELS`).

    ``steps`` defaults to ``cfg.max_steps_attention`` for the attention models and to
    ``cfg.max_steps`` for the others (the matched-parameter model included)."""
    reverse = "reversed" in name
    if steps is None:
        steps = cfg.max_steps_attention if name.startswith("attention") else cfg.max_steps
    set_seed(seed)
    model = build(name, data, cfg)
    history = train_translation(
        model,
        data,
        sequence_loss,
        seconds=cfg.seconds,
        max_steps=steps,
        batch_size=cfg.batch_size,
        lr=cfg.lr,
        reverse_source=reverse,
        seed=seed,
        progress=False,
    )
    result = exact_match_by_length(
        model, data.test, data, decode_fn=greedy_decode, reverse_source=reverse
    )
    return Trained(name, seed, model, data, history, result, reverse, steps)


def number_data(cfg: ExperimentSettings, seed: int = 0) -> TranslationData:
    return number_translation_data(cfg.tgt_lang, cfg.num_train, cfg.test_per_bucket, seed=seed)


def run(
    cfg: ExperimentSettings, seeds: Iterable[int] = (0,), models=MODELS, verbose: bool = True
) -> list[Trained]:
    """Train and measure every model in ``models`` for every seed, on the number words."""
    out = []
    for seed in seeds:
        data = number_data(cfg, seed)
        for name in models:
            trained = train_reference(name, data, cfg, seed)
            out.append(trained)
            if verbose:
                row = trained.row()
                print(
                    f"{name:32s} seed {seed}  {row['steps']:5d} steps {row['train_s']:5.1f} s  "
                    f"loss {row['final_loss']:.3f}  {trained.result}",
                    flush=True,
                )
    return out


def train_dates(cfg: ExperimentSettings, seed: int = 0) -> Trained:
    """The attention model on dates to ISO 8601 (chapter 02's heatmaps): the same sizes,
    ``cfg.date_steps`` steps."""
    data = date_translation_data(num_train=cfg.num_train, num_test=500, seed=seed)
    return train_reference("attention, dates", data, cfg, seed, steps=cfg.date_steps)


def check_targets(rows: list[dict]) -> list[str]:
    """Bahdanau's finding at small scale: attention keeps its accuracy on long sources
    (>= 95 % overall, within 10 points from shortest to longest bucket); without attention,
    at the chapters' hidden size and with as many parameters as the attention model
    (:data:`MATCHED`), the longest bucket is >= 30 points below the shortest. Returns what
    was missed."""
    missed = []
    for row in rows:
        acc, where = row["accuracy"], f"{row['model']}, seed {row['seed']}"
        if row["model"] == "attention":
            if row["overall"] < 0.95:
                missed.append(f"{where}: overall {row['overall']:.3f} < 0.95")
            if max(acc) - min(acc) > 0.10:
                missed.append(f"{where}: spread {max(acc) - min(acc):.2f} > 0.10")
        elif row["model"] in ("no attention", MATCHED) and acc[0] - acc[-1] < 0.30:
            missed.append(f"{where}: drop {acc[0] - acc[-1]:.2f} < 0.30")
    return missed
