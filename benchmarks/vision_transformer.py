"""Dosovitskiy et al. (2021) at small scale: chapter 09's findings, over several seeds.

    python -m benchmarks.vision_transformer --jobs 2 --write   # every finding, seeds 0-2 (~22 min)
    python -m benchmarks.vision_transformer --long --jobs 2 --write  # then 1b: four times the steps (~15 min)
    python -m benchmarks.vision_transformer --sizes 8000 --models ViT --seeds 10 11  # tuning

1. **Inductive bias against data** (the paper's Figures 3 and 4): chapter 07's CNN, its
   ST-CNN and a ViT of as many parameters (within 1.5 %), each trained for the same number
   of steps on 500, 2,000, 8,000 and 32,000 distorted training digits (drawn once from the
   1,348 training digits of scikit-learn's set, each with its own rotation, scale and
   shift), tested on the same 2,000 distorted held-out digits.
   1b. **With the steps to use the data** (``--long``): at the largest size, the same steps
   pass over the images three times only, so the CNN and the ViT are trained again there
   for four times the steps; the rows are added to the report written by the first run.
2. **Attention distance grows with depth** (Figure 7, right): the mean attention distance
   of every head of every layer of the ViT trained on the most data, on the test digits;
   beside it the distance of uniform attention (a head that looks everywhere).
3. **Position embeddings learn the grid** (Figure 7, centre): the mean cosine similarity of
   the learned position embeddings of patches in the same row, the same column, neither.
4. **What the class token reads**: seed 0's ViT and ST-CNN trained on the most data are
   kept in ``vision_transformer_models.pt`` (state dicts); the page draws their rollout maps
   and rectified digits from them.

Every run is bounded by steps, so its numbers do not depend on the machine's load, and
runs on one thread; ``--jobs 2`` runs two at once on two cores. The page of chapter 09
reads ``vision_transformer.json``. Each finding is judged by the function of
``attention_course.findings`` that the page uses to say "held"; the exit status is 1 when
one of the chapter's targets (``TARGETS``) is missed on the seeds run.
"""

import argparse
import json
import platform
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import torch

from attention_course import findings
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
SEEDS = (0, 1, 2)
STEPS = 1500
LONG_STEPS = 6000  # finding 1b: the largest size, four times the steps, CNN and ViT
LONG_MODELS = ("CNN", "ViT")
# Each model at the rate that suited it: chapter 07's 0.002 for the CNN and the ST-CNN (the
# localisation network at 0.3 times it); for the ViT, the best of 0.004, 0.002, 0.001 and
# 0.0005 on 8,000 images, 800 steps, seeds 10 and 11 (see TUNING).
LR = {"CNN": 2e-3, "ST-CNN": 2e-3, "ViT": 1e-3}
TUNING = (
    "The ViT's rate was chosen on seeds 10 and 11 (8,000 training images, 800 steps): test "
    "errors 0.713 / 0.752 at 0.004, 0.596 / 0.522 at 0.002, 0.523 / 0.425 at 0.001, "
    "0.525 / 0.453 at 0.0005. The sizes of the ViT (width 64, 4 heads, 4 layers, MLP 96, patches "
    "of 8 x 8) were fixed before any run, to match chapter 07's CNNs in parameters; 4 x 4 "
    "patches (100 tokens) took about six times as long a step and were dropped."
)
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


def run(
    model_name: str,
    num_train: int,
    seed: int,
    keep: bool = False,
    steps: int = STEPS,
    threads: int = 1,
) -> dict:
    torch.set_num_threads(threads)
    cfg = replace(FULL_SETTINGS.spatial, max_steps=steps, lr=LR[model_name], seconds=3600.0)
    torch.manual_seed(seed)
    model = make_model(model_name)
    start = time.perf_counter()
    if model_name == "ViT":
        result = train_vit(model, cfg, num_train=num_train, seed=seed, progress=False)
    else:
        result = train_classifier(
            model, replace(cfg, num_train=num_train), seed=seed, progress=False
        )
    row = {
        "model": model_name,
        "num_train": num_train,
        "seed": seed,
        "params": parameter_count(model),
        "error": result.error,
        "steps": result.history.steps[-1],
        "seconds": round(time.perf_counter() - start, 1),
        "eval_steps": result.history.eval_steps,
        "eval_error": result.history.metrics["test error"],
        "final_loss": statistics.mean(result.history.losses[-100:]),
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
    def errors(model, size):
        return {
            r["seed"]: r["error"] for r in rows if r["model"] == model and r["num_train"] == size
        }

    curves = {
        model: {str(size): errors(model, size) for size in sizes}
        for model in MODELS
        if any(r["model"] == model for r in rows)
    }
    out = {"curves": curves}
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
        f"Settings: each model trained for {cfg['steps']} steps of Adam, batches of "
        f"{cfg['batch_size']}, rates warmed up over {cfg['warmup_steps']} steps, on "
        f"{', '.join(f'{n:,}' for n in sizes)} distorted training digits, tested on "
        f"{cfg['num_test']:,} distorted held-out digits (chapter 07's RTS, 40 x 40). Rates: "
        + ", ".join(f"{m} {lr}" for m, lr in LR.items())
        + f". Parameters: {', '.join(f'{m} {n:,}' for m, n in report['params'].items())}. "
        + report["tuning"],
        "",
        "## 1. Test error against the number of training images",
        "",
    ]
    table = []
    for model, by_size in s["curves"].items():
        cells = [" / ".join(f"{e:.3f}" for _, e in sorted(by_size[str(n)].items())) for n in sizes]
        table.append([model, *cells])
    if "vit_over_cnn" in s:
        cells = [" / ".join(f"{r:.2f}" for r in s["vit_over_cnn"][str(n)]) for n in sizes]
        table.append(["ViT / CNN", *cells])
    lines.append(markdown_table(["model", *(f"{n:,} images" for n in sizes)], table))
    lines += ["", "Errors by seed (0 / 1 / 2 ...)."]
    if "long" in s:
        long = s["long"]

        def by_seed(values: dict) -> str:
            return " / ".join(f"{v:.3f}" for _, v in sorted(values.items()))

        head = ["model", f"error at {cfg['steps']} steps", f"error at {long['steps']} steps"]
        head += ["final training loss"]
        lines += [
            "",
            f"### 1b. {long['num_train']:,} images, {long['steps']} steps instead of "
            f"{cfg['steps']} (`{report['long']['command']}`, {report['long']['date']})",
            "",
            markdown_table(
                head,
                (
                    [m, by_seed(long["short_errors"][m]), by_seed(long["errors"][m])]
                    + [by_seed(long["final_loss"][m])]
                    for m in long["errors"]
                ),
            ),
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
            ["model", "training images", "seed", "test error", "final training loss"]
            + ["steps", "seconds"],
            (
                [r["model"], f"{r['num_train']:,}", r["seed"], f"{r['error']:.3f}"]
                + [f"{r['final_loss']:.3f}", r["steps"], r["seconds"]]
                for r in report["rows"] + report.get("long", {}).get("rows", [])
            ),
        ),
        "",
    ]
    return "\n".join(lines)


def run_all(
    jobs: list[tuple], n_jobs: int, keep_at: int | None = None, threads: int = 1
) -> list[dict]:
    """Run (model, num_train, seed, steps) jobs, ``n_jobs`` at once with ``threads`` threads
    each; keep the state dicts of seed 0's ViT and ST-CNN trained on ``keep_at`` images."""
    with ProcessPoolExecutor(n_jobs) as pool:
        futures = [
            pool.submit(
                run,
                m,
                n,
                s,
                keep=(s == 0 and n == keep_at and m != "CNN"),
                steps=k,
                threads=threads,
            )
            for m, n, s, k in jobs
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


def long_summary(rows: list[dict], short: list[dict]) -> dict:
    """Finding 1b: each model's errors by seed at LONG_STEPS, beside the same seeds'
    errors at STEPS on the same images."""
    size = rows[0]["num_train"]
    return {
        "num_train": size,
        "steps": LONG_STEPS,
        "errors": {
            m: {r["seed"]: r["error"] for r in rows if r["model"] == m} for m in LONG_MODELS
        },
        "short_errors": {
            m: {r["seed"]: r["error"] for r in short if r["model"] == m and r["num_train"] == size}
            for m in LONG_MODELS
        },
        "final_loss": {
            m: {r["seed"]: r["final_loss"] for r in rows if r["model"] == m} for m in LONG_MODELS
        },
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument("--sizes", type=int, nargs="+", default=list(FULL_SETTINGS.sizes))
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument(
        "--long",
        action="store_true",
        help=f"finding 1b only: {', '.join(LONG_MODELS)} on the largest size for "
        f"{LONG_STEPS} steps, added to the existing vision_transformer.json",
    )
    parser.add_argument("--jobs", type=int, default=1, help="runs at once")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each run")
    parser.add_argument("--write", action="store_true", help="write the .md, .json and .pt")
    args = parser.parse_args(argv)
    command = "python -m benchmarks.vision_transformer " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    largest = max(args.sizes)
    if args.long:
        if not OUT_JSON.is_file():
            raise SystemExit(f"{OUT_JSON} is missing: run the benchmark without --long first")
        report = json.loads(OUT_JSON.read_text(encoding="utf-8"))
        jobs = [(m, largest, s, LONG_STEPS) for m in LONG_MODELS for s in args.seeds]
        rows = run_all(jobs, args.jobs, threads=args.threads)
        report["long"] = {"command": command, "date": time.strftime("%Y-%m-%d"), "rows": rows}
        report["summary"]["long"] = long_summary(rows, report["rows"])
        kept = {}
    else:
        # the slowest first, so that two workers finish together
        order = {"ST-CNN": 0, "CNN": 1, "ViT": 2}
        jobs = sorted(
            ((m, n, s, STEPS) for m in args.models for n in args.sizes for s in args.seeds),
            key=lambda job: (order[job[0]], -job[1]),
        )
        rows = run_all(jobs, args.jobs, keep_at=largest, threads=args.threads)
        kept = {r["model"]: r.pop("state_dict") for r in rows if "state_dict" in r}
        spatial = FULL_SETTINGS.spatial
        report = {
            "date": time.strftime("%Y-%m-%d"),
            "machine": f"{platform.machine()}, Python {platform.python_version()}",
            "command": command,
            "settings": {
                "steps": STEPS,
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
            torch.save({"num_train": largest, "seed": 0, **kept}, OUT_MODELS)
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
