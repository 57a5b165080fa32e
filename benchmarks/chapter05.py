"""Chapter 05's measurements at a glance, with the reference code: Vaswani et al. (2017)
Table 1 as measured slopes and crossovers, the memory and time of plain, blocked and fused
attention against n, and the two-lookup accuracy of 1, 2 and 4 heads over several seeds.

    python -m benchmarks.chapter05                  # everything, printed (about 2 minutes)
    python -m benchmarks.chapter05 --write          # also writes chapter05.md and .json
    python -m benchmarks.chapter05 --skip-heads     # only the timings and the memory
    python -m benchmarks.chapter05 --seeds 0 --threads 2

Timings vary from machine to machine and from run to run: run it on a quiet machine.
Peak memory is read from /proc, so the memory table needs Linux.
"""

import argparse
import json
import math
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from attention_course.lookup import LookupTask, heads_separate, train_lookup
from autograder.reference import cost
from autograder.reference.multi_head import MultiHeadAttention
from benchmarks.tables import markdown_row, markdown_table

OUT = Path(__file__).resolve().parent / "chapter05.md"
OUT_JSON = OUT.with_suffix(".json")  # the two-lookup runs, read by the book page
TABLE1 = {
    "n": {"self-attention": 2, "recurrent": 1, "convolutional": 1},
    "d": {"self-attention": 1, "recurrent": 2, "convolutional": 2},
}


def table1_section(lengths, widths, crossover_widths, fit: int, repeats: int) -> list[str]:
    """Measured log-log slopes against n and d, and the attention/recurrent crossovers."""
    cost.cost_vs_length([16], d_model=64)  # warm-up
    by_length = cost.cost_vs_length(lengths, d_model=64, batch=8, repeats=repeats)
    by_width = cost.cost_vs_width(widths, length=128, batch=8, repeats=repeats)
    measured = {
        "n": {k: cost.loglog_slope(lengths, v, fit) for k, v in by_length.items()},
        "d": {k: cost.loglog_slope(widths, v, fit) for k, v in by_width.items()},
    }
    counted = {
        "n": cost.count_slopes(lengths, "n", fixed=64, last=fit),
        "d": cost.count_slopes(widths, "d", fixed=128, last=fit),
    }
    lines = [
        "## Table 1: slopes of time against n and d",
        "",
        f"Forward time of one layer, batch 8, median of {repeats} runs; n = {lengths[0]} .. "
        f"{lengths[-1]} at d = 64, d = {widths[0]} .. {widths[-1]} at n = 128. Slopes fitted "
        f"to the {fit} largest sizes; *counted* is the slope of the layer's multiply-add "
        "count over the same sizes (attention: 3 n d^2 + 2 n^2 d, its projections included).",
        "",
        markdown_table(
            ["layer", "n: Table 1", "n: counted", "n: measured"]
            + ["d: Table 1", "d: counted", "d: measured"],
            [
                [k, TABLE1["n"][k], f"{counted['n'][k]:.2f}", f"{measured['n'][k]:.2f}"]
                + [TABLE1["d"][k], f"{counted['d'][k]:.2f}", f"{measured['d'][k]:.2f}"]
                for k in cost.LAYERS
            ],
        ),
    ]
    lines += ["", "Milliseconds per forward pass against n (d = 64):", ""]
    lines += _times_table("n", lengths, by_length)
    lines += ["", "Milliseconds per forward pass against d (n = 128):", ""]
    lines += _times_table("d", widths, by_width)
    lines += [
        "",
        "## Where self-attention becomes slower than the recurrent layer",
        "",
        f"Lengths doubled from 16 until attention was slower twice in a row (median of "
        f"{max(repeats, 5)} runs), crossing interpolated on log-log axes. Table 1's count "
        "puts it at n = d.",
        "",
    ]
    crossovers = []
    for d in crossover_widths:
        c = cost.crossover(d, batch=8, max_length=4096, repeats=max(repeats, 5))
        if c["n"] is None:
            crossovers.append([d, f"above {c['lengths'][-1]}", ""])
        else:
            crossovers.append([d, f"{c['n']:.0f}", f"{c['n'] / d:.1f}"])
        print(markdown_row(crossovers[-1]), flush=True)
    lines.append(markdown_table(["d", "crossover n", "n / d"], crossovers))
    return lines


def _times_table(axis: str, sizes, times) -> list[str]:
    rows = [[size, *(f"{v[i]:.2f}" for v in times.values())] for i, size in enumerate(sizes)]
    return [markdown_table([axis, *times], rows)]


def memory_section(lengths, repeats: int) -> list[str]:
    """Peak extra memory and time of plain, blocked and fused attention against n."""
    memory, times = cost.attention_cost(lengths, d_k=64, block_size=128, repeats=repeats)
    names = list(memory)
    lines = [
        "## Memory and time of one head of attention",
        "",
        f"Batch 1, one head, d_k = d_v = 64, float32; blocked: blocks of 128 keys. Peak extra "
        f"resident memory of the process during one call (MiB) and time per call (ms), "
        f"medians of {repeats}. One n x n float32 matrix is n^2 * 4 bytes.",
        "",
    ]
    head = ["n", "n x n matrix MiB", *(f"{k} MiB" for k in names), *(f"{k} ms" for k in names)]
    rows = []
    for i, n in enumerate(lengths):
        cells = [f"{memory[k][i]:.1f}" for k in names] + [f"{times[k][i]:.1f}" for k in names]
        rows.append([n, f"{n * n * 4 / 2**20:.0f}", *cells])
    lines.append(markdown_table(head, rows))
    fit = min(3, len(lengths))
    slopes = ", ".join(
        f"{k} {cost.loglog_slope(lengths, memory[k], fit):.2f}"
        for k in names
        if min(memory[k][-fit:]) > 0  # a peak of 0 MiB (nothing new resident) has no log
    )
    lines += [
        "",
        f"Memory slopes over the {fit} largest n: {slopes} (predicted: 2 plain, 1 blocked).",
    ]
    errors = cost.blocked_error(n=1000, d_k=64)
    lines.append(
        f"Largest |blocked - plain| at n = 1000 over block sizes {list(errors)}: "
        f"{max(errors.values()):.1e}."
    )
    return lines


def heads_section(seeds, heads, steps: int) -> tuple[list[str], list[dict]]:
    """Two-lookup accuracy (y_i = (x_{i-1}, x_{i+2})) of the reference layer with h heads,
    and, for one head, how much its weights at the two offsets depend on the digits."""
    task = LookupTask()
    lines = [
        "## Two lookups at once: accuracy against the number of heads",
        "",
        f"d_model = 32, {steps} steps (no time limit), 2,000 held-out sequences of "
        f"{task.length} digits; settings of the book page. For one head, the weight a query "
        f"gives offsets -{task.a} and +{task.b} over 500 held-out sequences: its mean, and its "
        "standard deviation across sequences (0 if the weights depended on positions only).",
        "",
    ]
    head = ["heads", "seed", "x[i-1] right", "x[i+2] right", "digit accuracy", "both right"]
    head += [f"weight at -{task.a}: mean, std", f"weight at +{task.b}: mean, std", "train s"]
    rows, table = [], []
    for h in heads:
        for seed in seeds:
            run = train_lookup(
                lambda d, k: MultiHeadAttention(d, k),
                h,
                task=task,
                d_model=32,
                seconds=math.inf,  # the steps bound the run, whatever the machine's load
                max_steps=steps,
                seed=seed,
            )
            sides = cost.per_output_accuracy(run.model, task)
            by_digits = cost.weight_by_digits(run.model, task) if h == 1 else None
            rows.append(
                {
                    "heads": h,
                    "seed": seed,
                    "steps": len(run.history.steps),
                    "before_right": sides[f"x[i-{task.a}]"],
                    "after_right": sides[f"x[i+{task.b}]"],
                    "digit_accuracy": run.accuracy["digit accuracy"],
                    "both_right": run.accuracy["both digits right"],
                    "weight_by_digits": by_digits,
                    "seconds": run.history.seconds,
                }
            )
            weights = (
                [f"{v['mean']:.3f}, {v['std_over_sequences']:.3f}" for v in by_digits.values()]
                if by_digits
                else ["", ""]
            )
            table.append(
                [h, seed, f"{sides[f'x[i-{task.a}]']:.3f}", f"{sides[f'x[i+{task.b}]']:.3f}"]
                + [f"{run.accuracy['digit accuracy']:.3f}"]
                + [f"{run.accuracy['both digits right']:.3f}", *weights]
                + [f"{run.history.seconds:.1f}"]
            )
            print(markdown_row(table[-1]), flush=True)
    lines.append(markdown_table(head, table))
    lines += ["", "Share of positions with both digits right, over the seeds:", ""]
    for h in heads:
        both = [r["both_right"] for r in rows if r["heads"] == h]
        lines.append(
            f"- {h} head(s): median {statistics.median(both):.3f}, lowest {min(both):.3f}, "
            f"highest {max(both):.3f} over {len(both)} seed(s)"
        )
    return lines, rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--heads", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--steps", type=int, default=500, help="training steps per model")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per measurement")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--skip-heads", action="store_true", help="no training")
    parser.add_argument("--write", action="store_true", help=f"write the tables to {OUT.name}")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    argv_text = " ".join(sys.argv[1:] if argv is None else argv)
    start = time.perf_counter()
    lines = [
        "# Chapter 05: multi-head attention, cost per layer, memory",
        "",
        f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()} "
        f"({platform.processor() or 'unknown processor'}), {torch.get_num_threads()} "
        f"thread(s), torch {torch.__version__}, with "
        f"`python -m benchmarks.chapter05 {argv_text}`.",
        "",
    ]
    lines += table1_section(
        lengths=[16, 32, 64, 128, 256, 512, 1024],
        widths=[16, 32, 64, 128, 256, 512, 1024],
        crossover_widths=[32, 64, 128, 256],
        fit=3,
        repeats=args.repeats,
    )
    lines.append("")
    lines += memory_section([512, 1024, 2048, 4096, 8192], repeats=args.repeats)
    rows = None
    if not args.skip_heads:
        lines.append("")
        heads_lines, rows = heads_section(args.seeds, args.heads, args.steps)
        lines += heads_lines
    held = True
    if rows is not None and len({r["heads"] for r in rows}) > 1 and 1 in args.heads:
        held, one_best, many_worst = heads_separate(rows)
        lines += [
            "",
            f"Finding (one head's best run {one_best:.3f} < the worst run with more heads "
            f"{many_worst:.3f}): {'held' if held else 'missed'}.",
        ]
    lines += ["", f"Total time of the benchmark: {time.perf_counter() - start:.0f} s.", ""]
    text = "\n".join(lines)
    print(text)
    if args.write:
        OUT.write_text(text)
        if rows is not None:
            record = {
                "command": f"python -m benchmarks.chapter05 {argv_text}".strip(),
                "date": time.strftime("%Y-%m-%d"),
                "config": {"d_model": 32, "steps": args.steps, "task": "LookupTask()"},
                "lookup": rows,
            }
            OUT_JSON.write_text(json.dumps(record, indent=1) + "\n")
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main())
