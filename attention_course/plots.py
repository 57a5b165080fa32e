"""Plots used by the notebooks and the book: attention heatmaps and learning curves.

Colour maps are colour-blind safe (viridis for weights, Okabe-Ito for lines).
Every function returns the matplotlib ``Figure`` so a caller can save or close it.
"""

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch

# Okabe-Ito palette: distinguishable with the common colour-vision deficiencies.
COLOURS = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442"]


def attention_heatmap(
    weights,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    title: str = "",
    ax=None,
    xlabel: str = "keys (source)",
    ylabel: str = "queries (target)",
):
    """Draw a ``(T_q, T_k)`` matrix of attention weights; row i is query i's distribution.

    Labels are the tokens (or positions) of the queries (rows) and keys (columns).
    """
    w = torch.as_tensor(weights).detach().float().cpu()
    if w.dim() != 2:
        raise ValueError(
            f"attention_heatmap needs a 2-D (queries, keys) matrix, got shape {tuple(w.shape)}"
        )
    for name, labels, size in (
        ("query", query_labels, w.shape[0]),
        ("key", key_labels, w.shape[1]),
    ):
        if labels is not None and len(labels) != size:
            raise ValueError(f"{len(labels)} {name} labels for {size} {name} positions")
    if ax is None:
        fig, ax = plt.subplots(figsize=(0.45 * w.shape[1] + 2.5, 0.4 * w.shape[0] + 1.5))
    else:
        fig = ax.figure
    image = ax.imshow(
        w.numpy(), cmap="viridis", vmin=0.0, vmax=max(1e-9, float(w.max())), aspect="auto"
    )
    ax.set_xticks(range(w.shape[1]))
    ax.set_yticks(range(w.shape[0]))
    ax.set_xticklabels(
        key_labels if key_labels is not None else range(w.shape[1]), rotation=60, ha="right"
    )
    ax.set_yticklabels(query_labels if query_labels is not None else range(w.shape[0]))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="attention weight")
    fig.tight_layout()
    return fig


def plot_history(history, metrics: Sequence[str] = (), title: str = ""):
    """Learning curves: the training loss, and any logged metrics on a second panel."""
    metrics = list(metrics) or sorted(history.metrics)
    ncols = 2 if metrics else 1
    fig, axes = plt.subplots(1, ncols, figsize=(5 * ncols, 3.2), squeeze=False)
    ax = axes[0, 0]
    ax.plot(history.steps, history.losses, color=COLOURS[0], lw=1)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_yscale("log")
    if metrics:
        ax2 = axes[0, 1]
        for i, name in enumerate(metrics):
            ax2.plot(
                history.eval_steps, history.metrics[name], "o-", color=COLOURS[i % 7], label=name
            )
        ax2.set_xlabel("step")
        ax2.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_curves(
    x,
    curves: dict[str, Sequence[float]],
    xlabel: str,
    ylabel: str,
    title: str = "",
    logx: bool = False,
    logy: bool = False,
    ax=None,
):
    """Several named curves over the same x values, one colour each."""
    if ax is None:
        fig, ax = plt.subplots(figsize=(5.5, 3.5))
    else:
        fig = ax.figure
    for i, (name, ys) in enumerate(curves.items()):
        ax.plot(x, ys, "o-", color=COLOURS[i % 7], label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    if title:
        ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
