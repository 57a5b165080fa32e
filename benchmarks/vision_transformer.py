"""Dosovitskiy et al. (2021) at small scale: chapter 09's findings, over several seeds.

    python -m benchmarks.vision_transformer --jobs 2 --write   # every finding, seeds 3-5 (~45 min)
    python -m benchmarks.vision_transformer --sizes 8000 --models ViT --seeds 10 11  # tuning

1. **Inductive bias against data** (the paper's Figures 3 and 4): chapter 07's CNN, its
   ST-CNN and a ViT of as many parameters (within 1.5 %), each trained on 500, 2,000, 8,000
   and 32,000 distorted training digits (drawn once from the 1,348 training digits of
   scikit-learn's set, each with its own rotation, scale and shift), tested on the same
   2,000 distorted held-out digits. Each point is a fair one: every model gets the same
   budget of steps at a size, growing with the size (``steps_for``: 1,500 up to 2,000
   images, 6,000 sqrt(n / 32,000) above), is evaluated every 250 steps, and reports its
   test error at the checkpoint of its best error on 1,000 validation digits (new poses of
   the training split's handwriting): early stopping, as the paper reports. With it, the
   training loss there (its fit) and the multiply-adds per image, so that the ViT can also
   be read at the CNN's compute (its best checkpoint within the steps that cost what the
   CNN's budget costs).
2. **Attention distance grows with depth** (Figure 7, right): the mean attention distance
   of every head of every layer of the ViT trained on the most data, on the test digits;
   beside it the distance of uniform attention (a head that looks everywhere).
3. **Position embeddings learn the grid** (Figure 7, centre): the mean cosine similarity of
   the learned position embeddings of patches in the same row, the same column, neither.
4. **What the class token reads**: the first seed's ViT and ST-CNN trained on the most data
   are kept in ``vision_transformer_models.pt`` (state dicts, the weights at the end); the
   page draws their rollout maps and rectified digits from them.

Every run is bounded by steps, so its numbers do not depend on the machine's load, and
runs on one thread; ``--jobs 2`` runs two at once on two cores. The page of chapter 09
reads ``vision_transformer.json``. Each finding is judged by the function of
``attention_course.findings`` that the page uses to say "held"; the exit status is 1 when
one of the chapter's targets (``TARGETS``) is missed on the seeds run.
"""

import argparse
import json
import math
import platform
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import torch

from attention_course import findings
from attention_course.data.digits import distorted_digits
from attention_course.spatial_experiment import (
    CNN,
    matched_width,
    parameter_count,
    test_set,
    train_classifier,
)
from attention_course.vision_transformer import (
    FULL_SETTINGS,
    ViTConfig,
    grid_structure,
    position_similarity,
    train_vit,
)
from autograder.reference.vision_transformer import (
    VisionTransformer,
    mean_attention_distance,
    patch_distances,
)
from benchmarks import spatial as spatial_benchmark
from benchmarks.tables import markdown_table

HERE = Path(__file__).resolve().parent
OUT_MD, OUT_JSON = HERE / "vision_transformer.md", HERE / "vision_transformer.json"
OUT_MODELS = HERE / "vision_transformer_models.pt"
MODELS = ("CNN", "ST-CNN", "ViT")
SEEDS = (3, 4, 5)
EVAL_EVERY = 250
NUM_VALIDATION = 1000
# Each model at the rate that suited it: chapter 07's 0.002 for the CNN and the ST-CNN (the
# localisation network at 0.3 times it); for the ViT, the best of 0.004, 0.002, 0.001 and
# 0.0005 on 8,000 images, 800 steps, seeds 10 and 11 (see TUNING).
LR = {"CNN": 2e-3, "ST-CNN": 2e-3, "ViT": 1e-3}
TUNING = (
    "The ViT's rate was chosen on seeds 10 and 11 (8,000 training images, 800 steps): test "
    "errors 0.713 / 0.752 at 0.004, 0.596 / 0.522 at 0.002, 0.523 / 0.425 at 0.001, "
    "0.525 / 0.453 at 0.0005. The sizes of the ViT (width 64, 4 heads, 4 layers, MLP 96, patches "
    "of 8 x 8) were fixed before any run, to match chapter 07's CNNs in parameters; 4 x 4 "
    "patches (100 tokens) took about six times as long a step and were dropped. The budgets "
    "and the early stopping were set after an earlier protocol's runs on seeds 0-2 (1,500 "
    "steps at every size, the test error at the end): there the ViT had not fitted 8,000 or "
    "32,000 images (training loss 0.49-0.73 against the CNN's 0.12-0.44), and at 32,000 "
    "images 6,000 steps took it from 0.26-0.31 to 0.09 (the CNN from 0.13-0.21 to 0.08); so "
    "this protocol is reported on seeds 3-5, which no earlier run used"
)


def steps_for(num_train: int) -> int:
    """The budget at a size, the same for every model: 1,500 steps up to 2,000 images, then
    growing as the square root of the size to 6,000 at 32,000 (12 passes over the images)."""
    return max(1500, round(6000 * math.sqrt(num_train / 32000)))


def validation_set():
    """1,000 digits of the training split's handwriting in new poses, the same for every
    run: the checkpoint with the lowest error on them is the one reported."""
    generator = torch.Generator().manual_seed(20_000)
    return distorted_digits(NUM_VALIDATION, "train", FULL_SETTINGS.spatial.distortion, generator)


def multiply_adds(model: torch.nn.Module) -> int:
    """Multiply-adds of classifying one image (PyTorch's FLOP counter, halved)."""
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.zeros(1, 1, 40, 40)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model.eval()(x)
    return counter.get_total_flops() // 2


NUM_ANALYSED = 500  # test digits over which attention distances are measured


def st_cnn() -> torch.nn.Module:
    """Chapter 07's ST-CNN on its 40 x 40 canvas, built as ``benchmarks/spatial.py`` builds it."""
    return spatial_benchmark.st_cnn(40)


def make_model(name: str) -> torch.nn.Module:
    """The ST-CNN of chapter 07, the CNN widened to its parameters, or the ViT."""
    if name == "ViT":
        return VisionTransformer(ViTConfig())
    if name == "CNN":
        with torch.random.fork_rng():  # counting must not move the seeded generator
            return CNN(40, hidden=matched_width(parameter_count(st_cnn())))
    return st_cnn()


@torch.no_grad()
def analyse_vit(vit: VisionTransformer) -> dict:
    """Mean attention distance per layer and head on the test digits, and the grid in the
    position embeddings."""
    x, _ = test_set(FULL_SETTINGS.spatial)
    vit.eval()
    _, weights = vit(x[:NUM_ANALYSED])
    P = vit.cfg.patch_size
    similarity = position_similarity(vit.position_embedding.detach())
    return {
        "distance": [mean_attention_distance(w, P).tolist() for w in weights],
        "grid": grid_structure(similarity),
    }


def best_checkpoint(validation: list[float], within: int | None = None) -> int:
    """The index of the evaluation with the lowest validation error (the first, on a tie),
    among the first ``within`` evaluations."""
    values = validation[:within] if within else validation
    return min(range(len(values)), key=lambda i: values[i])


def run(
    model_name: str,
    num_train: int,
    seed: int,
    keep: bool = False,
    steps: int | None = None,
    threads: int = 1,
) -> dict:
    torch.set_num_threads(threads)
    steps = steps or steps_for(num_train)
    cfg = replace(
        FULL_SETTINGS.spatial,
        max_steps=steps,
        lr=LR[model_name],
        seconds=36000.0,
        eval_every=EVAL_EVERY,
    )
    validation = validation_set()
    torch.manual_seed(seed)
    model = make_model(model_name)
    start = time.perf_counter()
    if model_name == "ViT":
        result = train_vit(
            model, cfg, num_train=num_train, seed=seed, progress=False, validation=validation
        )
    else:
        result = train_classifier(
            model,
            replace(cfg, num_train=num_train),
            seed=seed,
            progress=False,
            validation=validation,
        )
    h = result.history
    eval_steps, test_error = h.eval_steps, h.metrics["test error"]
    best = best_checkpoint(h.metrics["validation error"])
    losses = h.losses[max(0, eval_steps[best] - 100) : eval_steps[best]]
    row = {
        "model": model_name,
        "num_train": num_train,
        "seed": seed,
        "params": parameter_count(model),
        "multiply_adds": multiply_adds(model),
        "error": test_error[best],  # at the best validation checkpoint
        "best_step": eval_steps[best],
        "final_error": test_error[-1],
        "loss_at_best": statistics.mean(losses),
        "final_loss": statistics.mean(h.losses[-100:]),
        "steps": h.steps[-1],
        "seconds": round(time.perf_counter() - start, 1),
        "eval_steps": eval_steps,
        "eval_error": test_error,
        "eval_validation": h.metrics["validation error"],
    }
    if model_name == "ViT":
        row |= analyse_vit(model)
    if keep:
        row["state_dict"] = {k: v.clone() for k, v in model.state_dict().items()}
    return row


def uniform_distance(cfg: ViTConfig = ViTConfig()) -> float:  # noqa: B008 (frozen)
    """The mean attention distance of a head that attends to every patch alike."""
    return patch_distances(cfg.grid, cfg.patch_size).mean().item()


def summarise(rows: list[dict], sizes: list[int]) -> dict:
    def by_seed(model, size, key="error"):
        return {r["seed"]: r[key] for r in rows if r["model"] == model and r["num_train"] == size}

    models = [m for m in MODELS if any(r["model"] == m for r in rows)]
    curves = {model: {str(size): by_seed(model, size) for size in sizes} for model in models}
    out = {
        "curves": curves,
        "fit": {m: {str(n): by_seed(m, n, "loss_at_best") for n in sizes} for m in models},
        "multiply_adds": {
            m: next(r["multiply_adds"] for r in rows if r["model"] == m) for m in models
        },
        "steps": {str(n): steps_for(n) for n in sizes},
    }
    if "ViT" in curves and "CNN" in curves:
        # per size, the ViT's error over the CNN's, seed by seed
        out["vit_over_cnn"] = {
            str(size): [
                curves["ViT"][str(size)][s] / max(curves["CNN"][str(size)][s], 1e-9)
                for s in sorted(curves["ViT"][str(size)])
                if s in curves["CNN"][str(size)]
            ]
            for size in sizes
        }
        # at the CNN's compute: the ViT's best checkpoint among the steps that cost, at its
        # multiply-adds per image, what the CNN's whole budget costs
        share = out["multiply_adds"]["CNN"] / out["multiply_adds"]["ViT"]
        matched = {}
        for r in rows:
            if r["model"] == "ViT":
                within = sum(step <= share * r["steps"] for step in r["eval_steps"])
                best = best_checkpoint(r["eval_validation"], max(within, 1))
                matched.setdefault(str(r["num_train"]), {})[r["seed"]] = r["eval_error"][best]
        out["vit_at_cnn_compute"] = {"share_of_steps": share, "errors": matched}
    vits = [r for r in rows if r["model"] == "ViT" and r["num_train"] == max(sizes)]
    if vits:
        out["distance"] = {str(r["seed"]): r["distance"] for r in vits}
        out["grid"] = {str(r["seed"]): r["grid"] for r in vits}
        out["uniform_distance"] = uniform_distance()
    return out


def markdown(report: dict) -> str:
    s, cfg = report["summary"], report["settings"]
    sizes = cfg["sizes"]
    lines = [
        "# Chapter 09: the Vision Transformer against chapter 07's CNNs (Dosovitskiy et al. 2021, small)",
        "",
        f"Measured {report['date']} on {report['machine']}, one thread per run, with "
        f"`{report['command']}`.",
        "",
        "Settings: each model trained with Adam, batches of "
        f"{cfg['batch_size']}, rates warmed up over {cfg['warmup_steps']} steps, on "
        f"{', '.join(f'{n:,}' for n in sizes)} distorted training digits for "
        f"{', '.join(format(s['steps'][str(n)], ',') for n in sizes)} steps (the same for every "
        f"model at a size), evaluated every {EVAL_EVERY} steps; the test error reported is the "
        f"one at the checkpoint of lowest error on {NUM_VALIDATION:,} validation digits, on "
        f"{cfg['num_test']:,} distorted held-out digits (chapter 07's RTS, 40 x 40). Rates: "
        + ", ".join(f"{m} {lr}" for m, lr in LR.items())
        + f". Parameters: {', '.join(f'{m} {n:,}' for m, n in report['params'].items())}. "
        + "Multiply-adds per image: "
        + ", ".join(f"{m} {n:,}" for m, n in s["multiply_adds"].items())
        + ". "
        + report["tuning"],
        "",
        "## 1. Test error against the number of training images (early-stopped)",
        "",
    ]
    table = []
    for model, by_size in s["curves"].items():
        cells = [" / ".join(f"{e:.3f}" for _, e in sorted(by_size[str(n)].items())) for n in sizes]
        table.append([model, *cells])
    if "vit_over_cnn" in s:
        cells = [" / ".join(f"{r:.2f}" for r in s["vit_over_cnn"][str(n)]) for n in sizes]
        table.append(["ViT / CNN", *cells])
        matched = s["vit_at_cnn_compute"]["errors"]
        cells = [" / ".join(f"{e:.3f}" for _, e in sorted(matched[str(n)].items())) for n in sizes]
        table.append(["ViT at the CNN's compute", *cells])
    for model, by_size in s["fit"].items():
        cells = [" / ".join(f"{e:.3f}" for _, e in sorted(by_size[str(n)].items())) for n in sizes]
        table.append([f"{model}: training loss there", *cells])
    lines.append(markdown_table(["model", *(f"{n:,} images" for n in sizes)], table))
    lines += [
        "",
        f"By seed ({' / '.join(str(x) for x in report['seeds'])}). *ViT at the CNN's compute*: "
        "the ViT's best checkpoint among its first "
        f"{100 * s['vit_at_cnn_compute']['share_of_steps']:.0f} % of the steps, which cost "
        "what the CNN's budget costs.",
    ]
    if "distance" in s:
        lines += [
            "",
            "## 2. Mean attention distance of each head, in pixels (ViT, most data)",
            "",
            f"Uniform attention over the 5 x 5 patches: {s['uniform_distance']:.1f} pixels.",
            "",
            markdown_table(
                ["seed", "layer", "heads", "mean"],
                (
                    [seed, layer + 1, " / ".join(f"{d:.1f}" for d in heads)]
                    + [f"{statistics.mean(heads):.1f}"]
                    for seed, layers in s["distance"].items()
                    for layer, heads in enumerate(layers)
                ),
            ),
            "",
            "## 3. Cosine similarity of the learned position embeddings (ViT, most data)",
            "",
            markdown_table(
                ["seed", "same row", "same column", "neither"],
                (
                    [seed, *(f"{g[k]:.2f}" for k in ("same row", "same column", "neither"))]
                    for seed, g in s["grid"].items()
                ),
            ),
        ]
    lines += [
        "",
        "## Every run",
        "",
        markdown_table(
            ["model", "training images", "seed", "test error (best validation)", "at step"]
            + ["test error at the end", "final training loss", "steps", "seconds"],
            (
                [r["model"], f"{r['num_train']:,}", r["seed"], f"{r['error']:.3f}"]
                + [r["best_step"], f"{r['final_error']:.3f}", f"{r['final_loss']:.3f}"]
                + [r["steps"], r["seconds"]]
                for r in report["rows"]
            ),
        ),
        "",
    ]
    return "\n".join(lines)


def run_all(
    jobs: list[tuple],
    n_jobs: int,
    keep_at: int | None = None,
    keep_seed: int | None = None,
    threads: int = 1,
) -> list[dict]:
    """Run (model, num_train, seed) jobs, ``n_jobs`` at once with ``threads`` threads each;
    keep the state dicts of ``keep_seed``'s ViT and ST-CNN trained on ``keep_at`` images."""
    with ProcessPoolExecutor(n_jobs) as pool:
        futures = [
            pool.submit(
                run,
                m,
                n,
                s,
                keep=(s == keep_seed and n == keep_at and m != "CNN"),
                threads=threads,
            )
            for m, n, s in jobs
        ]
        rows = []
        for future in futures:
            rows.append(future.result())
            r = rows[-1]
            print(
                f"{r['model']} {r['num_train']} seed {r['seed']}: error {r['error']:.3f} "
                f"({r['steps']} steps, {r['seconds']} s)",
                flush=True,
            )
    rows.sort(key=lambda r: (MODELS.index(r["model"]), r["num_train"], r["seed"]))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument("--sizes", type=int, nargs="+", default=list(FULL_SETTINGS.sizes))
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--jobs", type=int, default=1, help="runs at once")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each run")
    parser.add_argument("--write", action="store_true", help="write the .md, .json and .pt")
    args = parser.parse_args(argv)
    command = "python -m benchmarks.vision_transformer " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    largest = max(args.sizes)
    # the slowest first, so that two workers finish together
    order = {"ST-CNN": 0, "CNN": 1, "ViT": 2}
    jobs = sorted(
        ((m, n, s) for m in args.models for n in args.sizes for s in args.seeds),
        key=lambda job: (order[job[0]], -job[1]),
    )
    keep_seed = args.seeds[0]
    rows = run_all(jobs, args.jobs, keep_at=largest, keep_seed=keep_seed, threads=args.threads)
    kept = {r["model"]: r.pop("state_dict") for r in rows if "state_dict" in r}
    spatial = FULL_SETTINGS.spatial
    report = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, Python {platform.python_version()}",
        "command": command,
        "seeds": args.seeds,
        "kept_seed": keep_seed,
        "settings": {
            "steps": {str(n): steps_for(n) for n in args.sizes},
            "eval_every": EVAL_EVERY,
            "num_validation": NUM_VALIDATION,
            "sizes": args.sizes,
            "batch_size": spatial.batch_size,
            "warmup_steps": spatial.warmup_steps,
            "num_test": spatial.num_test,
            "lr": LR,
        },
        "params": {m: next(r["params"] for r in rows if r["model"] == m) for m in args.models},
        "tuning": TUNING,
        "rows": rows,
        "summary": summarise(rows, args.sizes),
    }
    text = markdown(report)
    print(text)
    if args.write:
        OUT_MD.write_text(text, encoding="utf-8")
        OUT_JSON.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        if kept:
            torch.save({"num_train": largest, "seed": keep_seed, **kept}, OUT_MODELS)
    missed = []
    for name, verdict in verdicts(report["summary"], sorted(report["settings"]["sizes"])).items():
        print(verdict.line(name) + ("" if name in TARGETS else " [reported, not a target]"))
        if name in TARGETS and not verdict.held:
            missed.append(name)
    if missed:
        print(f"missed on seeds {args.seeds}: {', '.join(missed)}", file=sys.stderr)
        return 1
    return 0


# The findings this chapter reproduces at small scale: the exit status is 1 when one of them
# is missed. The others are measured and the page says whether they held, but at this scale
# they are not expected to (the page says why).
TARGETS = ("cnn_bias_with_little_data",)


def verdicts(summary: dict, sizes: list[int]) -> dict[str, findings.Verdict]:
    """Each finding, judged by the function of attention_course.findings that the page uses."""
    out = {}
    if {"CNN", "ViT"} <= set(summary["curves"]):
        out["cnn_bias_with_little_data"] = findings.cnn_bias_with_little_data(
            summary["curves"], sizes
        )
    if summary.get("distance"):
        out["distance_grows"] = findings.distance_grows(summary["distance"])
    if summary.get("grid"):
        out["position_grid"] = findings.position_grid(summary["grid"])
    return out


if __name__ == "__main__":
    raise SystemExit(main())
