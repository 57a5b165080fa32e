"""Interactive explorers (ipywidgets). Each also draws once when run without a browser,
so notebooks stay executable under nbval and the autograder."""

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch
from IPython.display import display

from attention_course.plots import COLOURS


def explore_attention(weights, query_labels=None, key_labels=None, title: str = "attention"):
    """A slider over query positions: the whole ``(T_q, T_k)`` map with the chosen row
    outlined, and that query's distribution over the keys as bars."""
    w = torch.as_tensor(weights).detach().float().cpu()
    if w.dim() != 2:
        raise ValueError(
            f"explore_attention needs a (queries, keys) matrix, got shape {tuple(w.shape)}"
        )
    T_q, T_k = w.shape
    query_labels = list(query_labels) if query_labels is not None else [str(i) for i in range(T_q)]
    key_labels = list(key_labels) if key_labels is not None else [str(j) for j in range(T_k)]

    def draw(query: int):
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
        left.imshow(w.numpy(), cmap="viridis", vmin=0, vmax=1, aspect="auto")
        left.add_patch(
            plt.Rectangle((-0.5, query - 0.5), T_k, 1, fill=False, ec=COLOURS[3], lw=2.5)
        )
        left.set_xticks(range(T_k), key_labels, rotation=60, ha="right")
        left.set_yticks(range(T_q), query_labels)
        left.set_xlabel("keys")
        left.set_ylabel("queries")
        left.set_title(title)
        right.bar(range(T_k), w[query].numpy(), color=COLOURS[0])
        right.set_xticks(range(T_k), key_labels, rotation=60, ha="right")
        right.set_ylim(0, 1)
        right.set_ylabel("weight")
        right.set_title(f"query {query} ({query_labels[query]}) attends to")
        fig.tight_layout()
        plt.show()

    slider = widgets.IntSlider(value=0, min=0, max=T_q - 1, description="query")
    display(widgets.interactive(draw, query=slider))
