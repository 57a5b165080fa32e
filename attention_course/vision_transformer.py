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
    d_ff: int = 96  # the MLP's hidden width: 124,042 parameters in all, as many as chapter 07's CNNs
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


class SelfAttention(nn.Module):
    r"""Multi-head self-attention (chapter 05): head i is softmax(Q_i K_i^T / sqrt(d_k)) V_i
    with Q_i = x W_i^Q, K_i = x W_i^K, V_i = x W_i^V; the heads concatenated then W^O.

    forward(x (B, T, d_model)) returns the output (B, T, d_model) and the weights (B, h, T, T).
    """

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        self.num_heads, self.d_k = num_heads, d_model // num_heads
        self.W_qkv = nn.Linear(d_model, 3 * d_model)  # W^Q, W^K and W^V side by side
        self.W_o = nn.Linear(d_model, d_model)

    def forward(self, x):
        B, T, d = x.shape
        qkv = self.W_qkv(x).view(B, T, 3, self.num_heads, self.d_k)
        Q, K, V = qkv.permute(2, 0, 3, 1, 4)  # each (B, h, T, d_k)
        scores = Q @ K.transpose(-2, -1) / math.sqrt(self.d_k)  # (B, h, T, T)
        weights = scores.softmax(dim=-1)
        heads = weights @ V  # (B, h, T, d_k)
        return self.W_o(heads.transpose(1, 2).reshape(B, T, d)), weights


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
    vit: nn.Module, cfg: SpatialSettings, *, num_train: int, seed: int = 0, progress=None
) -> ClassifierRun:
    """Train ``vit`` (its forward returns logits and weights) as chapter 07 trains its
    classifiers, on ``num_train`` distorted training digits of ``seed``; the run's ``model``
    is ``vit`` itself."""
    run = train_classifier(
        Logits(vit), replace(cfg, num_train=num_train), seed=seed, progress=progress
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
