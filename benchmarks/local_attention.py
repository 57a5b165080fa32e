"""Chapter 02: Luong's local-p attention and input feeding against global attention, with
the reference models, on the chapter's task (English number words to German, chapter 01's
data, model size and training budget): accuracy by source length, parameters, and the cost
of one decoder step as the source grows.

    python -m benchmarks.local_attention                   # seed 0, D = 3, 600 steps each
    python -m benchmarks.local_attention --windows 2 5     # other half-widths D
    python -m benchmarks.local_attention --no-input-feeding  # global and local-p only
    python -m benchmarks.local_attention --write           # benchmarks/local_attention.md, .json

Every model is chapter 02's GRU encoder-decoder with the additive score. The local one is
``AttentionDecoder(attention="local-p", window=D)``, which predicts a position p_t and
scores only the 2D + 1 source positions around it (Luong et al. 2015, eq. 9-10); the one
with input feeding is ``AttentionDecoder(input_feeding=True)``, global attention whose GRU
also reads the previous step's context, s_i = GRU([E y_{i-1}; c_i; c_{i-1}], s_{i-1})
(Luong et al. 2015, section 3.3, in the course's decoder). They train for the same number
of steps with the same seed and data; training stops on steps, and the wall-clock cap
``--seconds`` per model is only a guard: a run that reaches it first is reported as short
and the command exits with status 1. The cost of a step is counted (scores per sequence: S
for global, min(S, 2D + 1) for local-p) and timed (one ``decoder.step`` on a batch of 32
random encoder states of length S, no gradient, median of repeats, every model timed in
turn within each repeat so that a change of load on the machine hits all of them alike;
the ratios to global attention are the figures to compare across machines).
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from attention_course.runtime import set_seed
from attention_course.training import parameter_count
from attention_course.translation import (
    FULL_SETTINGS,
    exact_match_by_length,
    number_translation_data,
    train_translation,
)
from autograder.reference.bahdanau import AttentionDecoder, Seq2SeqAttention
from autograder.reference.seq2seq import Encoder, greedy_decode, sequence_loss
from benchmarks.tables import markdown_table

OUT = Path(__file__).resolve().parent / "local_attention.md"
OUT_JSON = OUT.with_suffix(".json")  # what chapter 02's page reads


GLOBAL, FEEDING = "global", "global, input feeding"


def variants(windows, input_feeding: bool = True) -> list[tuple[str, dict]]:
    """(name, AttentionDecoder keyword arguments) of every model, global first."""
    out = [(GLOBAL, dict(attention="global"))]
    if input_feeding:
        out.append((FEEDING, dict(attention="global", input_feeding=True)))
    out += [(f"local-p, D={D}", dict(attention="local-p", window=D)) for D in windows]
    return out


def build(data, cfg, **decoder_kwargs) -> Seq2SeqAttention:
    encoder = Encoder(len(data.src_vocab), cfg.d_emb, cfg.d_hidden)
    decoder = AttentionDecoder(
        len(data.tgt_vocab), cfg.d_emb, cfg.d_hidden, d_attn=cfg.d_attn, **decoder_kwargs
    )
    return Seq2SeqAttention(encoder, decoder)


def load() -> str:
    """The machine's load averages over 1, 5 and 15 minutes, and its number of cores."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f} on {os.cpu_count()} cores"


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


def train(name, decoder_kwargs, data, cfg, steps, seed, seconds) -> dict:
    set_seed(seed)
    model = build(data, cfg, **decoder_kwargs)
    history = train_translation(
        model,
        data,
        sequence_loss,
        seconds=seconds,
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
        params=parameter_count(model),
        planned_steps=steps,
        steps=len(history.steps),
        train_s=history.seconds,
        labels=result.labels,
        exact=result.accuracy,
        overall=result.overall,
        tokens=token_accuracy(result),
    )
    short = "" if row["steps"] == steps else f"  SHORT of {steps} steps (time cap)"
    print(
        f"{name:21s} seed {seed}  {row['steps']} steps {row['train_s']:5.1f} s  {result}{short}",
        flush=True,
    )
    return row


def step_times(cfg, models, S, batch=32, repeats=60) -> tuple[dict, dict]:
    """Median seconds of one decoder step on a source of length S (no gradient), for each
    (name, AttentionDecoder keyword arguments) in ``models`` (the first is the baseline),
    timed in turn; and the median, over the repeats, of each model's time divided by the
    baseline's in the same repeat (paired, so a burst of load on the machine mostly
    cancels)."""
    torch.manual_seed(0)
    states = torch.randn(batch, S, cfg.d_hidden)
    mask = torch.ones(batch, S, dtype=torch.bool)
    s, prev = torch.randn(batch, cfg.d_hidden), torch.randint(3, 40, (batch,))
    c = torch.randn(batch, cfg.d_hidden)  # the previous context, for input feeding
    calls = {}
    for name, kwargs in models:
        decoder = AttentionDecoder(40, cfg.d_emb, cfg.d_hidden, d_attn=cfg.d_attn, **kwargs)
        keys = decoder.score.project_keys(states)  # once per source, as in the model
        hidden = (s, c) if decoder.input_feeding else s  # a step after the first
        calls[name] = (decoder.eval(), hidden, keys)
    times = {name: [] for name in calls}
    with torch.no_grad():
        for _ in range(3):
            for decoder, hidden, keys in calls.values():
                decoder.step(prev, hidden, states, mask, keys)
        for _ in range(repeats):
            for name, (decoder, hidden, keys) in calls.items():
                start = time.perf_counter()
                decoder.step(prev, hidden, states, mask, keys)
                times[name].append(time.perf_counter() - start)
    base = times[models[0][0]]
    medians = {name: statistics.median(t) for name, t in times.items()}
    ratios = {
        name: statistics.median(a / b for a, b in zip(t, base, strict=True))
        for name, t in times.items()
    }
    return medians, ratios


def markdown(cfg, rows, costs, models, windows, loads, argv, seconds) -> str:
    labels = rows[0]["labels"]
    names = [name for name, _ in models]
    short = [r for r in rows if r["steps"] != r["planned_steps"]]
    planned = rows[0]["planned_steps"]
    if short:
        reached = "**Runs short of their planned steps (stopped at the time cap):** " + ", ".join(
            f"{r['model']} seed {r['seed']} ({r['steps']} of {r['planned_steps']})" for r in short
        )
    else:
        reached = (
            f"Every run reached its {planned} planned steps (time cap {seconds:.0f} s per model)."
        )
    feeding = (
        " Input feeding (Luong et al. 2015, section 3.3) is global attention whose GRU also "
        "reads the previous step's context, s_i = GRU([E y_{i-1}; c_i; c_{i-1}], s_{i-1}) "
        "with c_0 = 0 (`AttentionDecoder(input_feeding=True)`; the course's form of feeding "
        "the previous attentional vector)."
        if FEEDING in names
        else ""
    )
    lines = [
        "# Local-p attention and input feeding against global attention (chapter 02)",
        "",
        f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()}, "
        f"{torch.get_num_threads()} thread(s), with "
        f"`python -m benchmarks.local_attention {' '.join(argv)}`. The chapter's task "
        "(English number words to German) and model (GRU encoder-decoder, additive score, "
        f"d_hidden {cfg.d_hidden}, d_attn {cfg.d_attn}); every model trains for the same "
        "steps with the same seed and data. Local-p is Luong et al.'s (2015) predictive "
        f"alignment with a window of half-width D.{feeding} {reached} Training times are "
        "wall-clock seconds and vary from run to run on a machine that runs other jobs. "
        f"Load average (1 / 5 / 15 min) at the start: {loads['start']}; before the timings: "
        f"{loads['timing']}; at the end: {loads['end']}.",
        "",
        "Exact match (token accuracy) on the test set, by source length in tokens:",
        "",
    ]
    table = []
    for r in rows:
        cells = [f"{e:.2f} ({t:.2f})" for e, t in zip(r["exact"], r["tokens"], strict=True)]
        table.append(
            [r["model"], r["seed"], *cells]
            + [f"{r['overall']:.3f}", r["steps"], f"{r['train_s']:.1f}"]
        )
    lines.append(markdown_table(["model", "seed", *labels, "overall", "steps", "train s"], table))
    lines += [
        "",
        "Over the seeds: parameters, and exact match overall (mean, lowest, highest):",
        "",
    ]
    table = []
    for name in names:
        mine = [r for r in rows if r["model"] == name]
        overall = [r["overall"] for r in mine]
        table.append(
            [name, f"{mine[0]['params']:,}", f"{statistics.mean(overall):.3f}"]
            + [f"{min(overall):.3f}", f"{max(overall):.3f}"]
            + [f"{statistics.mean(r['train_s'] for r in mine):.1f}"]
        )
    head = ["model", "parameters", "mean", "lowest", "highest", "mean train s"]
    lines.append(markdown_table(head, table))
    head = ["S", "global: scores", "global: ms"]
    if FEEDING in names:
        head += ["global + input feeding: ms", "input feeding / global"]
    for D in windows:
        head += [f"local-p D={D}: scores", f"local-p D={D}: ms", f"local-p D={D} / global"]
    lines += [
        "",
        "Cost of one decoder step (batch 32, no gradient) as the source grows: scores "
        "computed per sequence, the median time of `decoder.step` in milliseconds (the GRU "
        "cell and the output layer included), and its ratio to global attention's: every "
        "model is timed in turn within each of 60 repeats, and the ratio is the median of "
        "the 60 paired ratios, steadier than the times themselves on a loaded machine:",
        "",
    ]
    table = []
    for c in costs:
        g = c[GLOBAL]
        cells = [str(c["S"]), str(c["S"]), f"{1000 * g:.2f}"]
        if FEEDING in names:
            cells += [f"{1000 * c[FEEDING]:.2f}", f"{c['ratio'][FEEDING]:.2f}"]
        for D in windows:
            name = f"local-p, D={D}"
            cells += [str(min(c["S"], 2 * D + 1)), f"{1000 * c[name]:.2f}"]
            cells.append(f"{c['ratio'][name]:.2f}")
        table.append(cells)
    lines += [markdown_table(head, table), ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--windows", type=int, nargs="+", default=[3], help="half-widths D")
    parser.add_argument("--steps", type=int, default=FULL_SETTINGS.max_steps_attention)
    parser.add_argument(
        "--seconds",
        type=float,
        default=10 * FULL_SETTINGS.seconds,
        help="wall-clock cap per model, a guard only: training stops on --steps",
    )
    parser.add_argument(
        "--input-feeding",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also train global attention with input feeding",
    )
    parser.add_argument("--lengths", type=int, nargs="+", default=[25, 100, 400, 1600])
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--write", action="store_true", help=f"write the tables to {OUT.name}")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = replace(FULL_SETTINGS)
    models = variants(args.windows, args.input_feeding)
    loads = {"start": load()}
    print(
        f"{cfg}  steps={args.steps}  seconds={args.seconds}  threads={torch.get_num_threads()}"
        f"  load {loads['start']}",
        flush=True,
    )
    rows = []
    for seed in args.seeds:
        data = number_translation_data(cfg.tgt_lang, cfg.num_train, cfg.test_per_bucket, seed=seed)
        for name, kwargs in models:
            rows.append(train(name, kwargs, data, cfg, args.steps, seed, args.seconds))
    loads["timing"] = load()
    print(f"timing, load {loads['timing']}", flush=True)
    costs = []
    for S in args.lengths:
        medians, ratios = step_times(cfg, models, S)
        cost = {"S": S, **medians, "ratio": ratios}
        costs.append(cost)
        print(
            f"S={S:5d}  "
            + "  ".join(
                f"{name} {1000 * cost[name]:.2f} ms ({ratios[name]:.2f}x)" for name, _ in models
            ),
            flush=True,
        )
    loads["end"] = load()
    short = [r for r in rows if r["steps"] != r["planned_steps"]]
    for r in short:
        print(f"SHORT: {r['model']} seed {r['seed']}: {r['steps']} of {r['planned_steps']} steps")
    if args.write:
        argv = sys.argv[1:] if argv is None else argv
        OUT.write_text(markdown(cfg, rows, costs, models, args.windows, loads, argv, args.seconds))
        report = {
            "date": time.strftime("%Y-%m-%d"),
            "machine": f"{platform.machine()}, Python {platform.python_version()}",
            "command": "python -m benchmarks.local_attention " + " ".join(argv),
            "windows": args.windows,
            "steps": args.steps,
            "loads": loads,
            "rows": rows,
            "costs": costs,
        }
        OUT_JSON.write_text(json.dumps(report, indent=1) + "\n")
    return 1 if short else 0


if __name__ == "__main__":
    sys.exit(main())
