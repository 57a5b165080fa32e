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


def draw_sampling_grid(ax, image, grid, every: int = 4, title: str = ""):
    """``image`` (H, W) with the points that ``grid`` (H', W', 2), in normalised
    coordinates, samples from it: every ``every``-th row and column of the grid, drawn as
    lines in pixel coordinates (align_corners=False)."""
    image = torch.as_tensor(image).detach().float().cpu()
    grid = torch.as_tensor(grid).detach().float().cpu()
    if image.dim() != 2 or grid.dim() != 3 or grid.size(-1) != 2:
        raise ValueError(
            f"need an image (H, W) and a grid (H', W', 2), got {tuple(image.shape)} "
            f"and {tuple(grid.shape)}"
        )
    H, W = image.shape
    g = grid[::every, ::every]
    x = ((g[..., 0] + 1) * W - 1) / 2  # pixel coordinates
    y = ((g[..., 1] + 1) * H - 1) / 2
    ax.imshow(image.numpy(), cmap="gray", vmin=0, vmax=1)
    ax.plot(x.numpy(), y.numpy(), color=COLOURS[1], lw=0.8)
    ax.plot(x.T.numpy(), y.T.numpy(), color=COLOURS[1], lw=0.8)
    ax.plot(x[0, 0].item(), y[0, 0].item(), "o", color=COLOURS[3], ms=5)  # the output's top left
    ax.set_xlim(-0.5, W - 0.5)
    ax.set_ylim(H - 0.5, -0.5)
    ax.set_xticks([])
    ax.set_yticks([])
    if title:
        ax.set_title(title)
    return ax.figure


def show_rectified(inputs, outputs, labels: Sequence[str] | None = None, title: str = ""):
    """Inputs (N, 1, H, W) on the top row and what a spatial transformer made of them
    (N, 1, H', W') below, one column per example."""
    inputs = torch.as_tensor(inputs).detach().float().cpu()
    outputs = torch.as_tensor(outputs).detach().float().cpu()
    if inputs.dim() != 4 or outputs.dim() != 4 or len(inputs) != len(outputs):
        raise ValueError(
            f"need inputs and outputs of shape (N, 1, H, W) with the same N, got "
            f"{tuple(inputs.shape)} and {tuple(outputs.shape)}"
        )
    n = len(inputs)
    fig, axes = plt.subplots(2, n, figsize=(1.3 * n, 2.9), squeeze=False)
    for i in range(n):
        for row, images in enumerate((inputs, outputs)):
            ax = axes[row, i]
            ax.imshow(images[i, 0].numpy(), cmap="gray", vmin=0, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
        if labels is not None:
            axes[0, i].set_title(str(labels[i]), fontsize=9)
    axes[0, 0].set_ylabel("input")
    axes[1, 0].set_ylabel("rectified")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
