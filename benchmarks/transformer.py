"""Table 3 of Vaswani et al. (2017) at small scale, with the reference Transformer on
chapter 06's task (English number words up to 999,999 into German ones): the base model
against one change at a time, over several seeds, every run bounded by steps.

    python -m benchmarks.transformer               # every variant, seeds 0 1 2 (~25 min)
    python -m benchmarks.transformer --write       # also writes transformer.md and .json
    python -m benchmarks.transformer --variants base --seeds 0
    python -m benchmarks.transformer --threads 2   # one thread by default
    python -m benchmarks.transformer --render      # transformer.md again from the .json

The deep models with the base's warm-up run on seed 0 only, unless ``--all-seeds``.

The book page of chapter 06 reads ``benchmarks/transformer.json``: run with ``--write``
after changing the reference, the experiment's settings or this file. Each seed sets the
data split, the initial weights and the order of the batches. The exit status is 1 when
the base model misses the target (98 % greedy exact match on every seed).
"""

import argparse
import json
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
import torch.nn.functional as F

from attention_course.data.vocab import make_batch
from attention_course.transformer_experiment import (
    FULL_SETTINGS,
    TransformerSettings,
    bleu,
    number_data,
    train_transformer,
)
from attention_course.translation import exact_match_by_length
from autograder.reference.transformer import (
    PAD_ID,
    Transformer,
    TransformerConfig,
    greedy_decode,
    label_smoothed_cross_entropy,
    warmup_schedule,
)

HERE = Path(__file__).resolve().parent
OUT_MD, OUT_JSON = HERE / "transformer.md", HERE / "transformer.json"
TARGET = 0.98  # greedy exact match of the base model on every seed
# Steps bound every run, so its numbers do not depend on the machine's load; the time cap
# of the experiment's settings (90 s, a safety net for a student's laptop) is lifted here.
SAFETY_S = 3600.0
# Exact match is also measured during training, every EVAL_EVERY steps: at the end every
# variant of the base model is near 100 %, and how fast it gets there tells them apart.
EVAL_EVERY = 250

# The deep models: 6 + 6 layers, 600 steps (a step costs about three times the base's).
# With the base's warm-up of 400 steps both post-norm and pre-norm train; with a warm-up
# of 100 steps the schedule peaks at twice the rate, sooner, and post-norm breaks down.
# Chosen on seed 0 (see the note written into the table).
DEEP = replace(FULL_SETTINGS, num_layers=6, max_steps=600)
DEEP_SHORT = replace(DEEP, warmup=100)


@dataclass(frozen=True)
class Variant:
    """One row of the table: the experiment's settings and the model's options."""

    name: str
    paper: str = ""  # the matching row of the paper's Table 3, if any
    settings: TransformerSettings = FULL_SETTINGS
    model: dict = field(default_factory=dict)  # TransformerConfig fields beyond the settings
    seeds: tuple[int, ...] | None = None  # by default, only these of --seeds (None: all)


PRE_NORM = {"norm_first": True}
VARIANTS = [
    Variant("base", "base"),
    Variant("1 head", "(A) 1 head", replace(FULL_SETTINGS, num_heads=1)),
    Variant("learned positions", "(E) positional embedding", model={"positions": "learned"}),
    Variant("no label smoothing", "(D) eps_ls = 0", replace(FULL_SETTINGS, smoothing=0.0)),
    Variant("6+6 post-norm, warm-up 100", settings=DEEP_SHORT),
    Variant("6+6 pre-norm, warm-up 100", settings=DEEP_SHORT, model=PRE_NORM),
    Variant("6+6 post-norm, warm-up 400", settings=DEEP, seeds=(0,)),
    Variant("6+6 pre-norm, warm-up 400", settings=DEEP, model=PRE_NORM, seeds=(0,)),
]
# The paper's Table 3 (newstest2013 dev set): perplexity per word-piece, BLEU.
PAPER = {
    "base": (4.92, 25.8),
    "(A) 1 head": (5.29, 24.9),
    "(D) eps_ls = 0": (4.67, 25.3),
    "(E) positional embedding": (4.92, 25.7),
}


def model_config(cfg: TransformerSettings, **options) -> TransformerConfig:
    """The reference model's configuration for the experiment's settings."""
    return TransformerConfig(
        d_model=cfg.d_model,
        num_heads=cfg.num_heads,
        num_layers=cfg.num_layers,
        d_ff=cfg.d_ff,
        **options,
    )


@torch.no_grad()
def test_perplexity(model: Transformer, data) -> float:
    """exp of the mean cross-entropy (no smoothing) per target token of the test set, with
    teacher forcing: the counterpart of the perplexity column of the paper's Table 3."""
    batch = make_batch(data.test, data.src_vocab, data.tgt_vocab)
    logits = model.eval()(batch.src, batch.src_lengths, batch.tgt_in)  # (B, T, V)
    nll = F.cross_entropy(logits.transpose(1, 2), batch.tgt_out, ignore_index=PAD_ID)
    return nll.exp().item()


def loss_curve(losses: list[float], window: int = 25) -> list[float]:
    """The training loss averaged over consecutive windows of ``window`` steps."""
    return [
        sum(losses[i : i + window]) / len(losses[i : i + window])
        for i in range(0, len(losses), window)
    ]


def run(variant: Variant, seed: int) -> dict:
    """Train one variant on one seed; exact match (greedy) and BLEU on the test set."""
    cfg = replace(variant.settings, seconds=SAFETY_S)
    data = number_data(cfg, seed=seed)
    torch.manual_seed(seed)
    model = Transformer(
        len(data.src_vocab), len(data.tgt_vocab), model_config(cfg, **variant.model)
    )
    eval_seconds = []

    def evaluate(m) -> dict[str, float]:
        """Greedy exact match on the test set; its time is not training time."""
        start = time.perf_counter()
        em = exact_match_by_length(m, data.test, data, decode_fn=greedy_decode).overall
        eval_seconds.append(time.perf_counter() - start)
        return {"exact_match": em}

    history = train_transformer(
        model,
        data,
        cfg,
        schedule=warmup_schedule,
        loss_fn=label_smoothed_cross_entropy,
        seed=seed,
        evaluate=evaluate,
        eval_every=EVAL_EVERY,
    )
    result = exact_match_by_length(model, data.test, data, decode_fn=greedy_decode)
    if len(history.steps) < cfg.max_steps:
        raise RuntimeError(f"{variant.name}, seed {seed}: stopped after {len(history.steps)} steps")
    tail = history.losses[-50:]  # one batch's loss is noisy: the mean of the last 50
    return {
        "variant": variant.name,
        "seed": seed,
        "exact_match": result.overall,
        "by_length": result.as_dict(),
        "bleu": bleu(model, data.test, data, decode_fn=greedy_decode),
        "test_ppl": test_perplexity(model, data),
        "final_loss": sum(tail) / len(tail),
        "loss_curve": loss_curve(history.losses),
        "eval_steps": history.eval_steps,
        "eval_exact_match": history.metrics["exact_match"],
        "steps": len(history.steps),
        "train_s": history.seconds - sum(eval_seconds),
        "parameters": sum(p.numel() for p in model.parameters()),
    }


def summary(rows: list[dict]) -> dict[str, dict]:
    """Means (and the smallest exact match) of every variant over its seeds."""
    out = {}
    for name in dict.fromkeys(r["variant"] for r in rows):
        mine = [r for r in rows if r["variant"] == name]
        out[name] = {
            "seeds": [r["seed"] for r in mine],
            "exact_match": statistics.mean(r["exact_match"] for r in mine),
            "min_exact_match": min(r["exact_match"] for r in mine),
            "bleu": statistics.mean(r["bleu"] for r in mine),
            "test_ppl": statistics.mean(r["test_ppl"] for r in mine),
            "eval_steps": mine[0]["eval_steps"],
            "eval_exact_match": [
                statistics.mean(values)
                for values in zip(*(r["eval_exact_match"] for r in mine), strict=True)
            ],
            "final_loss": statistics.mean(r["final_loss"] for r in mine),
            "steps": mine[0]["steps"],
            "train_s": statistics.mean(r["train_s"] for r in mine),
        }
    return out


def base_verdict(rows: list[dict]) -> tuple[bool, str]:
    base = [r for r in rows if r["variant"] == "base"]
    if not base:
        return True, "the base model was not run"
    values = ", ".join(f"seed {r['seed']}: {r['exact_match']:.3f}" for r in base)
    met = all(r["exact_match"] >= TARGET for r in base)
    return met, f"{values}; target {TARGET:.0%} on every seed: {'met' if met else 'MISSED'}"


def settings_note(variant: Variant) -> str:
    """How a variant's settings differ from the base's."""
    changed = {
        k: v
        for k, v in asdict(variant.settings).items()
        if v != getattr(FULL_SETTINGS, k) and k != "seconds"
    }
    return ", ".join(f"{k}={v}" for k, v in {**changed, **variant.model}.items()) or "-"


def markdown(report: dict) -> str:
    variants = {v.name: v for v in VARIANTS}
    buckets = report["buckets"]
    lines = [
        "# Vaswani et al. (2017) Table 3 at small scale",
        "",
        f"Measured {report['date']} on {report['machine']}, {report['threads']} thread(s), "
        f"torch {report['torch']}, with `{report['command']}`.",
        "",
        "Task: English number words up to 999,999 into German number words (chapter 06); "
        f"{FULL_SETTINGS.num_train:,} training pairs and {3 * FULL_SETTINGS.test_per_bucket} "
        "held-out test pairs, drawn anew for each seed (the seed also sets the initial "
        "weights and the order of the batches). Every run stops after its number of steps. "
        "*Exact match* and *BLEU* (sacrebleu, corpus level, on the word tokens) are measured "
        "on the test set with greedy decoding; *test ppl* is the per-token perplexity of the "
        "test targets with teacher forcing and no smoothing (the counterpart of the paper's "
        "dev perplexity); *final loss* is the mean training loss over the last 50 steps "
        "(label-smoothed where smoothing is on, so it cannot be compared across that change). "
        "Exact match *at step 500* is measured during training, on the same test set: at the "
        "end every variant of the base is near 100 %, and the speed at which it gets there "
        "tells them apart better.",
        "",
        f"Base settings: `{FULL_SETTINGS}`, post-norm, 2 + 2 layers, with the time cap "
        f"lifted to {SAFETY_S:.0f} s so that steps alone bound every run. Post-norm is the "
        "paper's LayerNorm(x + Sublayer(x)), pre-norm x + Sublayer(LayerNorm(x)).",
        "",
        "## Means over seeds",
        "",
        "| variant | changed | seeds | exact match | per seed | at step 500 | BLEU | test ppl "
        "| final loss | steps | train s | paper: ppl | paper: BLEU |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in report["summary"].items():
        ppl, paper_bleu = PAPER.get(variants[name].paper, ("", ""))
        per_seed = " / ".join(
            f"{r['exact_match']:.3f}" for r in report["rows"] if r["variant"] == name
        )
        at_500 = dict(zip(s["eval_steps"], s["eval_exact_match"], strict=True)).get(500)
        at_500 = "" if at_500 is None else f"{at_500:.3f}"
        lines.append(
            f"| {name} | {report['changed'][name]} | {len(s['seeds'])} "
            f"| {s['exact_match']:.3f} | {per_seed} | {at_500} | {s['bleu']:.1f} "
            f"| {s['test_ppl']:.3f} "
            f"| {s['final_loss']:.3f} | {s['steps']} | {s['train_s']:.0f} | {ppl} "
            f"| {paper_bleu} |"
        )
    lines += [
        "",
        "The paper's columns are its Table 3 (newstest2013 dev set, perplexity per "
        "word-piece; base model: 6 + 6 layers, d_model 512, 8 heads, 100k steps). Its "
        "1-head row keeps d_model, as ours does.",
        "",
        "The deep models: the warm-up of 100 steps (lr_scale 1.5, as for the base) peaks at "
        "twice the base's learning rate. It was chosen on seed 0 as the setting where "
        "post-norm and pre-norm part ways, among three tried: warm-up 400 with lr_scale 1.5 "
        "(both train, the rows above), warm-up 100 with lr_scale 1.5 (post-norm fails), and "
        "warm-up 100 with lr_scale 0.75, the base's peak rate reached sooner (both trained, "
        "poorly: exact match 0.267 post-norm, 0.353 pre-norm, in 600 steps on seed 0, "
        "measured once and not part of this run).",
        "",
        "## Every run",
        "",
        "| variant | seed | exact match | "
        + " | ".join(buckets)
        + " | during training | BLEU | test ppl | final loss | steps | train s |",
        "|---|---|---|" + "---|" * len(buckets) + "---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        acc = [f"{r['by_length'][b]:.3f}" for b in buckets]
        lines.append(
            f"| {r['variant']} | {r['seed']} | {r['exact_match']:.3f} | "
            + " | ".join(acc)
            + " | "
            + " / ".join(f"{v:.2f}" for v in r["eval_exact_match"])
            + f" | {r['bleu']:.1f} | {r['test_ppl']:.3f} | {r['final_loss']:.3f} "
            f"| {r['steps']} | {r['train_s']:.1f} |"
        )
    lines += [
        "",
        f"Exact match by source length in tokens ({', '.join(buckets)}), and during training "
        f"every {EVAL_EVERY} steps (the last value is the final one). *train s* leaves the "
        "evaluations out.",
        "",
        f"Base model, greedy exact match against the target: {report['base_verdict']}.",
        "",
        f"Total time of the benchmark: {report['total_s']:.0f} s.",
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    names = [v.name for v in VARIANTS]
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", default=names, choices=names, metavar="NAME")
    parser.add_argument(
        "--all-seeds", action="store_true", help="run every variant on every seed of --seeds"
    )
    # One thread, as on the book page: the seed-0 base run then repeats the page's model
    # exactly, and on a shared machine one thread is far faster than two contending ones.
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument(
        "--write", action="store_true", help=f"write {OUT_MD.name} and {OUT_JSON.name}"
    )
    parser.add_argument(
        "--render", action="store_true", help=f"only rewrite {OUT_MD.name} from {OUT_JSON.name}"
    )
    args = parser.parse_args(argv)
    if args.render:
        OUT_MD.write_text(markdown(json.loads(OUT_JSON.read_text())))
        return 0
    torch.set_num_threads(args.threads)
    argv_text = " ".join(sys.argv[1:] if argv is None else argv)
    start = time.perf_counter()
    rows, chosen = [], [v for v in VARIANTS if v.name in args.variants]
    for variant in chosen:
        for seed in args.seeds:
            if variant.seeds is not None and seed not in variant.seeds and not args.all_seeds:
                continue
            row = run(variant, seed)
            rows.append(row)
            print(
                f"{row['variant']:28s} seed {seed}  exact match {row['exact_match']:.3f}  "
                f"BLEU {row['bleu']:.1f}  ppl {row['test_ppl']:.3f}  "
                f"loss {row['final_loss']:.3f}  {row['steps']} steps  {row['train_s']:.0f} s",
                flush=True,
            )
    if not rows:
        parser.error("no run matches --variants and --seeds")
    met, verdict = base_verdict(rows)
    report = {
        "command": f"python -m benchmarks.transformer {argv_text}".strip(),
        "date": time.strftime("%Y-%m-%d"),
        "machine": platform.machine(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "settings": {v.name: {**asdict(v.settings), **v.model} for v in chosen},
        "changed": {v.name: settings_note(v) for v in chosen},
        "paper_rows": {v.name: v.paper for v in chosen if v.paper},
        "paper": PAPER,
        "buckets": [b for b in rows[0]["by_length"] if b != "overall"],
        "rows": rows,
        "summary": summary(rows),
        "target": TARGET,
        "base_verdict": verdict,
        "total_s": time.perf_counter() - start,
    }
    text = markdown(report)
    print(text)
    if args.write:
        OUT_MD.write_text(text)
        OUT_JSON.write_text(json.dumps(report, indent=1) + "\n")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
