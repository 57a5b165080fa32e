"""Chapter 02: Luong's local-p attention against global attention, with the reference
models, on the chapter's task (English number words to German, chapter 01's data, model
size and training budget): accuracy by source length, and the cost of one decoder step as
the source grows.

    python -m benchmarks.local_attention                   # seed 0, D = 3, 600 steps each
    python -m benchmarks.local_attention --windows 2 5     # other half-widths D
    python -m benchmarks.local_attention --write           # benchmarks/local_attention.md

Both models are chapter 02's GRU encoder-decoder with the additive score; the local one is
``AttentionDecoder(attention="local-p", window=D)``, which predicts a position p_t and
scores only the 2D + 1 source positions around it (Luong et al. 2015, eq. 9-10). They train
for the same number of steps with the same seed. The cost of a step is counted (scores per
sequence: S for global, min(S, 2D + 1) for local-p) and timed (one ``decoder.step`` on a
batch of 32 random encoder states of length S, no gradient, median of repeats).
"""

import argparse
import platform
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from attention_course.runtime import set_seed
from attention_course.translation import (
    FULL_SETTINGS,
    exact_match_by_length,
    number_translation_data,
    train_translation,
)
from autograder.reference.bahdanau import AttentionDecoder, Seq2SeqAttention
from autograder.reference.seq2seq import Encoder, greedy_decode, sequence_loss

OUT = Path(__file__).resolve().parent / "local_attention.md"


def build(data, cfg, attention: str, window: int) -> Seq2SeqAttention:
    encoder = Encoder(len(data.src_vocab), cfg.d_emb, cfg.d_hidden)
    decoder = AttentionDecoder(
        len(data.tgt_vocab),
        cfg.d_emb,
        cfg.d_hidden,
        d_attn=cfg.d_attn,
        attention=attention,
        window=window,
    )
    return Seq2SeqAttention(encoder, decoder)


def token_accuracy(result) -> list[float]:
    """Per bucket: the fraction of reference tokens that the output has at the same place."""
    right = [0] * len(result.labels)
    total = [0] * len(result.labels)
    lows = [int(label.split("-")[0]) for label in result.labels]
    for src, tgt, hyp in result.examples:
        b = max(i for i, low in enumerate(lows) if len(src) >= low)
        right[b] += sum(h == t for h, t in zip(hyp, tgt, strict=False))
        total[b] += len(tgt)
    return [r / t if t else float("nan") for r, t in zip(right, total, strict=True)]


def train(name, attention, window, data, cfg, steps, seed) -> dict:
    set_seed(seed)
    model = build(data, cfg, attention, window)
    history = train_translation(
        model,
        data,
        sequence_loss,
        seconds=10 * cfg.seconds,
        max_steps=steps,
        batch_size=cfg.batch_size,
        lr=cfg.lr,
        seed=seed,
        progress=False,
    )
    result = exact_match_by_length(model, data.test, data, decode_fn=greedy_decode)
    row = dict(
        model=name,
        seed=seed,
        steps=len(history.steps),
        train_s=history.seconds,
        labels=result.labels,
        exact=result.accuracy,
        overall=result.overall,
        tokens=token_accuracy(result),
    )
    print(
        f"{name:18s} seed {seed}  {row['steps']} steps {row['train_s']:5.1f} s  {result}",
        flush=True,
    )
    return row


def step_time(cfg, attention, window, S, batch=32, repeats=30) -> float:
    """Median seconds of one decoder step on a source of length S (no gradient)."""
    torch.manual_seed(0)
    decoder = AttentionDecoder(
        40, cfg.d_emb, cfg.d_hidden, d_attn=cfg.d_attn, attention=attention, window=window
    ).eval()
    states = torch.randn(batch, S, cfg.d_hidden)
    mask = torch.ones(batch, S, dtype=torch.bool)
    hidden, prev = torch.randn(batch, cfg.d_hidden), torch.randint(3, 40, (batch,))
    with torch.no_grad():
        keys = decoder.score.project_keys(states)  # once per source, as in the model
        for _ in range(3):
            decoder.step(prev, hidden, states, mask, keys)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            decoder.step(prev, hidden, states, mask, keys)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def markdown(cfg, rows, costs, windows, argv) -> str:
    labels = rows[0]["labels"]
    lines = [
        "# Local-p against global attention (chapter 02)",
        "",
        f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()}, "
        f"{torch.get_num_threads()} thread(s), with "
        f"`python -m benchmarks.local_attention {' '.join(argv)}`. The chapter's task "
        "(English number words to German) and model (GRU encoder-decoder, additive score, "
        f"d_hidden {cfg.d_hidden}, d_attn {cfg.d_attn}); both models train for the same "
        "steps with the same seed. Local-p is Luong et al.'s (2015) predictive alignment "
        "with a window of half-width D. Training times are wall-clock seconds and vary "
        "from run to run on a machine that runs other jobs.",
        "",
        "Exact match (token accuracy) on the test set, by source length in tokens:",
        "",
        "| model | seed | " + " | ".join(labels) + " | overall | steps | train s |",
        "|" + "---|" * (len(labels) + 5),
    ]
    for r in rows:
        cells = [f"{e:.2f} ({t:.2f})" for e, t in zip(r["exact"], r["tokens"], strict=True)]
        lines.append(
            f"| {r['model']} | {r['seed']} | "
            + " | ".join(cells)
            + f" | {r['overall']:.3f} | {r['steps']} | {r['train_s']:.1f} |"
        )
    head = ["S", "global: scores", "global: ms"]
    for D in windows:
        head += [f"local-p D={D}: scores", f"local-p D={D}: ms"]
    lines += [
        "",
        "Cost of one decoder step (batch 32, no gradient) as the source grows: scores "
        "computed per sequence, and the median time of `decoder.step` in milliseconds "
        "(the GRU cell and the output layer, the same in both, included):",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for c in costs:
        cells = [str(c["S"]), str(c["S"]), f"{1000 * c['global']:.2f}"]
        for D in windows:
            cells += [str(min(c["S"], 2 * D + 1)), f"{1000 * c[D]:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--windows", type=int, nargs="+", default=[3], help="half-widths D")
    parser.add_argument("--steps", type=int, default=FULL_SETTINGS.max_steps_attention)
    parser.add_argument("--lengths", type=int, nargs="+", default=[25, 100, 400, 1600])
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--write", action="store_true", help=f"write the tables to {OUT.name}")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = replace(FULL_SETTINGS)
    print(f"{cfg}  steps={args.steps}  threads={torch.get_num_threads()}", flush=True)
    rows = []
    for seed in args.seeds:
        data = number_translation_data(cfg.tgt_lang, cfg.num_train, cfg.test_per_bucket, seed=seed)
        rows.append(train("global", "global", 1, data, cfg, args.steps, seed))
        for D in args.windows:
            rows.append(train(f"local-p, D={D}", "local-p", D, data, cfg, args.steps, seed))
    costs = []
    for S in args.lengths:
        cost = {"S": S, "global": step_time(cfg, "global", 1, S)}
        for D in args.windows:
            cost[D] = step_time(cfg, "local-p", D, S)
        costs.append(cost)
        print(
            f"S={S:5d}  global {1000 * cost['global']:.2f} ms  "
            + "  ".join(f"local-p D={D} {1000 * cost[D]:.2f} ms" for D in args.windows),
            flush=True,
        )
    if args.write:
        OUT.write_text(
            markdown(cfg, rows, costs, args.windows, sys.argv[1:] if argv is None else argv)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
