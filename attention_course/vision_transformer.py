r"""Chapter 09's Vision Transformer: its given encoder block, its experiment and its analyses.

The model's parts are the chapter's exercises (``patchify``, ``PatchEmbedding``, the
``VisionTransformer`` itself, ``attention_rollout``, ``mean_attention_distance``); the
notebook builds them from the student's code and the book from the reference
(``autograder/reference/vision_transformer.py``). What is given lives here:

- :class:`EncoderBlock`, chapter 06's encoder layer in its pre-norm form, with the GELU of
  Dosovitskiy et al. 2021 (eq. 2-3)::

      z' = z + MSA(LN(z)),    z_out = z' + MLP(LN(z'));

- :class:`ViTConfig`, the sizes of the chapter's model;
- :func:`train_vit` and :func:`data_size_settings`: training on chapter 07's distorted
  digits (``attention_course.data.digits``), with chapter 07's loop, so that the CNN, the
  spatial transformer and the ViT see the same images in the same order;
- :func:`position_similarity`, the cosine similarity of the learned position embeddings
  (the paper's Figure 7, centre).

Training is bounded by steps, so the numbers repeat whatever the machine's load.
"""

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from attention_course.handed_out.multi_head_attention import SelfAttention
from attention_course.runtime import grading_mode
from attention_course.spatial_experiment import (
    ClassifierRun,
    SpatialSettings,
    train_classifier,
)


@dataclass(frozen=True)
class ViTConfig:
    """The sizes of a Vision Transformer: a ``image_size`` x ``image_size`` image of
    ``channels`` channels cut into patches of ``patch_size`` x ``patch_size`` pixels."""

    image_size: int = 40
    patch_size: int = 8
    channels: int = 1
    num_classes: int = 10
    d_model: int = 64
    num_heads: int = 4
    num_layers: int = 4
    # the MLP's hidden width: 124,042 parameters in all, as many as chapter 07's CNNs
    d_ff: int = 96
    dropout: float = 0.0

    def __post_init__(self):
        if self.image_size % self.patch_size:
            raise ValueError(
                f"patch_size {self.patch_size} must divide image_size {self.image_size}"
            )
        if self.d_model % self.num_heads:
            raise ValueError(f"num_heads {self.num_heads} must divide d_model {self.d_model}")

    @property
    def grid(self) -> int:
        """Patches along one side of the image."""
        return self.image_size // self.patch_size

    @property
    def num_patches(self) -> int:
        return self.grid**2


class EncoderBlock(nn.Module):
    """Chapter 06's encoder layer, pre-norm, with a GELU MLP as in ViT (eq. 2-3):

        z' = z + MSA(LN(z)),    z_out = z' + MLP(LN(z')).

    forward(z (B, T, d_model)) returns z_out (B, T, d_model) and the weights (B, h, T, T).
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attention = SelfAttention(d_model, num_heads)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.GELU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model)
        )
        self.dropout = nn.Dropout(dropout)

    def forward(self, z):
        a, weights = self.attention(self.norm1(z))
        z = z + self.dropout(a)
        z = z + self.dropout(self.mlp(self.norm2(z)))
        return z, weights


class Logits(nn.Module):
    """A model whose forward returns (logits, weights), seen as one that returns the logits:
    chapter 07's training loop and error rate call ``model(x)`` for logits."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)[0]


@dataclass(frozen=True)
class DataSizeSettings:
    """The data-size experiment: every model trained for the same ``spatial.max_steps``
    steps on each of ``sizes`` distorted training images (the rest as chapter 07)."""

    spatial: SpatialSettings
    sizes: tuple[int, ...] = (500, 2000, 8000, 32000)


FULL_SETTINGS = DataSizeSettings(SpatialSettings(max_steps=800, num_test=2000))
GRADING_SETTINGS = DataSizeSettings(
    SpatialSettings(max_steps=40, num_test=300, seconds=10.0, warmup_steps=10), sizes=(2000,)
)


def data_size_settings() -> DataSizeSettings:
    """The settings for this run: full, or short in grading mode."""
    return GRADING_SETTINGS if grading_mode() else FULL_SETTINGS


def train_vit(
    vit: nn.Module,
    cfg: SpatialSettings,
    *,
    num_train: int,
    seed: int = 0,
    progress=None,
    validation=None,
) -> ClassifierRun:
    """Train ``vit`` (its forward returns logits and weights) as chapter 07 trains its
    classifiers, on ``num_train`` distorted training digits of ``seed``; the run's ``model``
    is ``vit`` itself (``validation``: as :func:`train_classifier`)."""
    run = train_classifier(
        Logits(vit),
        replace(cfg, num_train=num_train),
        seed=seed,
        progress=progress,
        validation=validation,
    )
    run.model = vit
    return run


def position_similarity(position_embedding: torch.Tensor) -> torch.Tensor:
    """The cosine similarity of every patch's position embedding with every other's:
    ``position_embedding`` (1 + n, d) or (1, 1 + n, d), the class token's first (left out);
    returns (n, n)."""
    p = position_embedding.reshape(-1, position_embedding.shape[-1])[1:]  # (n, d)
    p = F.normalize(p, dim=-1)
    return p @ p.T  # (n, n)


def grid_structure(similarity: torch.Tensor) -> dict[str, float]:
    """How much a patch's position embedding resembles those of its own row and column:
    the mean cosine similarity of pairs of distinct patches in the same row, in the same
    column, and in neither. ``similarity`` (n, n) over a square grid."""
    n = similarity.shape[0]
    g = math.isqrt(n)
    if g * g != n:
        raise ValueError(f"need a square grid of patches, got {n}")
    row = torch.arange(n) // g
    col = torch.arange(n) % g
    same_row = (row[:, None] == row[None, :]) & ~torch.eye(n, dtype=torch.bool)
    same_col = (col[:, None] == col[None, :]) & ~torch.eye(n, dtype=torch.bool)
    neither = (row[:, None] != row[None, :]) & (col[:, None] != col[None, :])
    return {
        "same row": similarity[same_row].mean().item(),
        "same column": similarity[same_col].mean().item(),
        "neither": similarity[neither].mean().item(),
    }


# ---------------------------------------------------------------- plots of the experiment


def _overlay(ax, image: torch.Tensor, attention_map: torch.Tensor | None, vmax=None):
    """The digit in grey and, over it, a (grid, grid) map of weights, one square a patch."""
    image = image.detach().float().reshape(-1, *image.shape[-2:])[0]  # (H, W), channel 0
    H, W = image.shape
    ax.imshow(image.numpy(), cmap="gray_r", extent=(0, W, H, 0))
    if attention_map is not None:
        m = attention_map.detach().float()
        ax.imshow(
            m.numpy(),
            cmap="viridis",
            alpha=0.65,
            extent=(0, W, H, 0),
            interpolation="nearest",
            vmin=0.0,
            vmax=float(m.max()) if vmax is None else vmax,
        )
    ax.set_xticks([])
    ax.set_yticks([])


def show_attention_maps(image: torch.Tensor, maps: torch.Tensor, title: str = ""):
    """One digit and, for each layer (rows) and head (columns), a (grid, grid) map over it:
    ``image`` (H, W) or (1, H, W), ``maps`` (L, h, grid, grid). Returns the figure."""
    import matplotlib.pyplot as plt

    L, h = maps.shape[:2]
    fig, axes = plt.subplots(L, h + 1, figsize=(1.7 * (h + 1), 1.7 * L), squeeze=False)
    for layer in range(L):
        _overlay(axes[layer, 0], image, None)
        axes[layer, 0].set_ylabel(f"layer {layer + 1}")
        for head in range(h):
            _overlay(axes[layer, head + 1], image, maps[layer, head])
            if layer == 0:
                axes[0, head + 1].set_title(f"head {head + 1}", fontsize=9)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def show_rollout(images: torch.Tensor, maps: torch.Tensor, labels=None, title: str = ""):
    """Digits on the top row, a (grid, grid) map over each below: ``images`` (n, 1, H, W)
    or (n, H, W), ``maps`` (n, grid, grid). Returns the figure."""
    import matplotlib.pyplot as plt

    n = images.shape[0]
    fig, axes = plt.subplots(2, n, figsize=(1.6 * n, 3.4), squeeze=False)
    for i in range(n):
        _overlay(axes[0, i], images[i], None)
        _overlay(axes[1, i], images[i], maps[i])
        if labels is not None:
            axes[0, i].set_title(str(labels[i]), fontsize=9)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_attention_distance(distances: torch.Tensor, uniform: float | None = None, title: str = ""):
    """The mean attention distance of every head (dots) of every layer: ``distances``
    (L, h) in pixels; ``uniform``, the distance of a head that attends to every patch
    alike, as a line. Returns the figure."""
    import matplotlib.pyplot as plt

    from attention_course.plots import COLOURS

    d = torch.as_tensor(distances).detach().float()
    L, h = d.shape
    fig, ax = plt.subplots(figsize=(5.0, 3.4))
    for head in range(h):
        ax.plot(
            range(1, L + 1),
            d[:, head].numpy(),
            "o",
            color=COLOURS[head % len(COLOURS)],
            label=f"head {head + 1}",
        )
    if uniform is not None:
        ax.axhline(uniform, color="grey", lw=0.8, ls="--", label="uniform attention")
    ax.set(
        xlabel="layer",
        ylabel="mean attention distance (pixels)",
        xticks=range(1, L + 1),
        title=title or "how far each head looks",
    )
    ax.set_ylim(0, 1.1 * max(float(d.max()), uniform or 0.0))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def show_position_similarity(similarity: torch.Tensor, title: str = ""):
    """The paper's Figure 7 (centre): for each patch (a small panel at its place in the
    grid), the cosine similarity of its position embedding with every patch's.
    ``similarity`` (N, N) over a square grid. Returns the figure."""
    import matplotlib.pyplot as plt

    n = similarity.shape[0]
    g = math.isqrt(n)
    if g * g != n:
        raise ValueError(f"need a square grid of patches, got {n}")
    s = similarity.detach().float()
    fig, axes = plt.subplots(g, g, figsize=(1.1 * g + 1.2, 1.1 * g), squeeze=False)
    for i in range(n):
        ax = axes[i // g, i % g]
        image = ax.imshow(s[i].reshape(g, g).numpy(), cmap="viridis", vmin=-1.0, vmax=1.0)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(image, ax=axes.ravel().tolist(), fraction=0.046, label="cosine similarity")
    fig.suptitle(title or "position embeddings: each patch's similarity with every patch")
    return fig
