"""The translation experiments of chapters 01 and 02 with the reference models: the
numbers behind the book's figures and ``benchmarks/figure2.py``.

Bahdanau et al. (2015), Figure 2, at small scale: exact match against source length for an
RNN encoder-decoder without attention (also fed the source reversed, Sutskever et al.
2014) and with additive attention, on the same data, model size and training budget
(:class:`~attention_course.translation.ExperimentSettings`).
"""

from collections.abc import Iterable
from dataclasses import dataclass

import torch

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

MODELS = ("no attention", "no attention, reversed source", "attention")


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

    def row(self) -> dict:
        """The numbers, as a flat dict (for JSON and tables)."""
        row = dict(
            model=self.name,
            seed=self.seed,
            steps=len(self.history.steps),
            train_s=round(self.history.seconds, 1),
            final_loss=round(self.history.losses[-1], 4),
            overall=round(self.result.overall, 3),
            buckets=self.result.labels,
            accuracy=[round(a, 3) for a in self.result.accuracy],
        )
        return row


def build(name: str, data: TranslationData, cfg: ExperimentSettings) -> torch.nn.Module:
    """A reference model of the chapters' size: "attention" or one without attention."""
    V_src, V_tgt = len(data.src_vocab), len(data.tgt_vocab)
    encoder = Encoder(V_src, cfg.d_emb, cfg.d_hidden)
    if name.startswith("attention"):
        decoder = AttentionDecoder(V_tgt, cfg.d_emb, cfg.d_hidden, d_attn=cfg.d_attn)
        return Seq2SeqAttention(encoder, decoder)
    return Seq2Seq(encoder, Decoder(V_tgt, cfg.d_emb, cfg.d_hidden))


def train_reference(
    name: str, data: TranslationData, cfg: ExperimentSettings, seed: int = 0, steps=None
) -> Trained:
    """Build, train and measure one reference model (``name`` as in :data:`MODELS`)."""
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
    return Trained(name, seed, model, data, history, result, reverse)


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
                    f"{name:31s} seed {seed}  {row['steps']:5d} steps {row['train_s']:5.1f} s  "
                    f"loss {row['final_loss']:.3f}  {trained.result}",
                    flush=True,
                )
    return out


def train_dates(cfg: ExperimentSettings, seed: int = 0) -> Trained:
    """The attention model on dates to ISO 8601 (chapter 02's heatmaps), same sizes."""
    data = date_translation_data(num_train=cfg.num_train, num_test=500, seed=seed)
    return train_reference("attention, dates", data, cfg, seed, steps=cfg.date_steps)


def check_targets(rows: list[dict]) -> list[str]:
    """Bahdanau's finding at small scale: attention keeps its accuracy on long sources
    (>= 95 % overall, within 10 points from shortest to longest bucket); without attention
    the longest bucket is >= 30 points below the shortest. Returns what was missed."""
    missed = []
    for row in rows:
        acc, where = row["accuracy"], f"{row['model']}, seed {row['seed']}"
        if row["model"] == "attention":
            if row["overall"] < 0.95:
                missed.append(f"{where}: overall {row['overall']:.3f} < 0.95")
            if max(acc) - min(acc) > 0.10:
                missed.append(f"{where}: spread {max(acc) - min(acc):.2f} > 0.10")
        elif row["model"] == "no attention" and acc[0] - acc[-1] < 0.30:
            missed.append(f"{where}: drop {acc[0] - acc[-1]:.2f} < 0.30")
    return missed
