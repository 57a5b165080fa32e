r"""Handwritten digits, rotated, scaled and shifted on a larger canvas (chapter 07).

scikit-learn ships 1,797 handwritten digits of 8 x 8 pixels (``load_digits``; nothing is
downloaded). Jaderberg et al. 2015 test spatial transformers on MNIST distorted in several
ways; the one this course reproduces is **RTS**: each digit rotated, scaled and placed at
a random position on a larger canvas. The cluttered variant adds fragments cut from other
digits, which a classifier must learn to ignore.

A distortion is an affine map. In normalised coordinates, where the canvas spans
``[-1, 1]`` in x (left to right) and y (top to bottom), a digit of scale ``k`` rotated by
angle ``a`` and centred at ``t`` covers the points

    p = t + k R(a) q,   q in [-1, 1]^2 the digit's own normalised coordinates,

so a digit of scale 1 at the centre fills ``digit_size`` pixels of the canvas. Rendering
runs that map backwards, q = R(-a) (p - t) / k, and samples the 8 x 8 image bilinearly
at q (zero outside it): the same grid-and-sampler a spatial transformer uses.

The train and test digits are disjoint sets of the 1,797 (fixed by a seed); the
distortions are drawn afresh for every example.
"""

from dataclasses import dataclass, replace
from functools import lru_cache

import torch
import torch.nn.functional as F

SPLITS = ("train", "test")


@lru_cache(maxsize=4)
def _digit_split(seed: int, test_fraction: float):
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32) / 16.0  # (1797, 8, 8) in [0, 1]
    labels = torch.tensor(digits.target, dtype=torch.long)  # (1797,)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    num_test = round(test_fraction * len(labels))
    test, train = order[:num_test], order[num_test:]
    return {"train": (images[train], labels[train]), "test": (images[test], labels[test])}


def digit_split(split: str, seed: int = 0, test_fraction: float = 0.25):
    """The 8 x 8 digits of one split: images ``(N, 8, 8)`` in ``[0, 1]`` and labels ``(N,)``.

    ``"train"`` and ``"test"`` are disjoint (1,348 and 449 digits by default), fixed by
    ``seed``.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {SPLITS}")
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction}")
    images, labels = _digit_split(seed, test_fraction)[split]
    return images.clone(), labels.clone()


def place(images: torch.Tensor, theta: torch.Tensor, canvas: int) -> torch.Tensor:
    """Render ``images`` (N, h, w) on a ``canvas`` x ``canvas`` image through ``theta``
    (N, 2, 3), the map from canvas coordinates to the image's: returns (N, 1, canvas, canvas)."""
    grid = F.affine_grid(theta, (len(images), 1, canvas, canvas), align_corners=False)
    return F.grid_sample(images[:, None], grid, mode="bilinear", align_corners=False)


def canvas_to_digit(degrees: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor):
    """The map that renders a digit at the pose p = t + k R(a) q: from the canvas's
    coordinates p back to the digit's own, q = R(-a) (p - t) / k, as a (N, 2, 3) matrix
    [R(-a) / k | -R(-a) t / k] for ``place``. ``degrees`` and ``scale`` are (N,), ``shift``
    (N, 2)."""
    a = torch.deg2rad(degrees)
    cos, sin = torch.cos(a) / scale, torch.sin(a) / scale  # R(-a) / k = [[cos, sin], [-sin, cos]]
    A = torch.stack([torch.stack([cos, sin], dim=-1), torch.stack([-sin, cos], dim=-1)], dim=1)
    return torch.cat([A, -A @ shift[:, :, None]], dim=2)  # (N, 2, 3)


@dataclass(frozen=True)
class Distortion:
    """How digits are placed on the canvas.

    Rotation uniform in ``[-max_degrees, max_degrees]``, scale uniform in
    ``[min_scale, max_scale]``, and a shift uniform in each axis over ``shift`` times the
    room the scaled digit leaves (0: centred; 1: anywhere its box fits). ``clutter``
    fragments, each a 3 x 3 piece of another digit, are pasted at random places.
    """

    canvas: int = 40
    digit_size: int = 18  # pixels covered by a digit of scale 1 (its 8 pixels upsampled)
    max_degrees: float = 45.0
    min_scale: float = 0.7
    max_scale: float = 1.2
    shift: float = 1.0
    clutter: int = 0

    def __post_init__(self):
        if self.canvas < 8 or not 0 < self.digit_size <= self.canvas:
            raise ValueError(f"need 8 <= canvas and 0 < digit_size <= canvas, got {self}")
        if not 0 < self.min_scale <= self.max_scale:
            raise ValueError(f"need 0 < min_scale <= max_scale, got {self}")
        if self.max_scale * self.digit_size > self.canvas:
            raise ValueError(f"a digit of scale {self.max_scale} does not fit the canvas")
        if not 0 <= self.shift <= 1 or self.clutter < 0:
            raise ValueError(f"need 0 <= shift <= 1 and clutter >= 0, got {self}")

    def poses(self, num: int, generator: torch.Generator | None = None):
        """Random rotations (degrees), scales and shifts: (N,), (N,), (N, 2)."""
        u = torch.rand(num, 4, generator=generator)  # (N, 4) in [0, 1)
        degrees = (2 * u[:, 0] - 1) * self.max_degrees
        scale = self.min_scale + (self.max_scale - self.min_scale) * u[:, 1]
        half = scale * self.digit_size / self.canvas  # half the digit's width, normalised
        room = (1 - half)[:, None] * self.shift  # (N, 1)
        shift = (2 * u[:, 2:] - 1) * room  # (N, 2)
        return degrees, scale, shift

    def render(self, images, degrees, scale, shift) -> torch.Tensor:
        """The digits ``images`` (N, 8, 8) at the given poses: (N, 1, canvas, canvas)."""
        k = scale * self.digit_size / self.canvas
        return place(images, canvas_to_digit(degrees, k, shift), self.canvas)

    def _clutter(self, num, others, generator) -> torch.Tensor:
        """(N, 1, canvas, canvas) of ``clutter`` fragments per image, cut from ``others``."""
        out = torch.zeros(num, 1, self.canvas, self.canvas)
        size = 3  # a fragment is a 3 x 3 piece of an 8 x 8 digit
        for _ in range(self.clutter):
            pick = torch.randint(len(others), (num,), generator=generator)
            corner = torch.randint(0, 8 - size + 1, (num, 2), generator=generator)
            rows = corner[:, 0, None] + torch.arange(size)  # (N, size)
            cols = corner[:, 1, None] + torch.arange(size)
            frags = others[
                pick[:, None, None], rows[:, :, None], cols[:, None, :]
            ]  # (N, size, size)
            degrees, scale, shift = self.poses(num, generator)
            k = scale * self.digit_size * size / 8 / self.canvas
            out = torch.maximum(out, place(frags, canvas_to_digit(degrees, k, shift), self.canvas))
        return out

    def apply(self, images: torch.Tensor, generator: torch.Generator | None = None):
        """Distort ``images`` (N, 8, 8): returns the canvases (N, 1, canvas, canvas) and the
        poses (degrees, scale, shift) that placed each digit."""
        if images.dim() != 3 or images.shape[1:] != (8, 8):
            raise ValueError(f"need images of shape (N, 8, 8), got {tuple(images.shape)}")
        degrees, scale, shift = self.poses(len(images), generator)
        x = self.render(images, degrees, scale, shift)
        if self.clutter:
            x = torch.maximum(x, self._clutter(len(images), images.roll(1, 0), generator))
        return x.clamp(0, 1), (degrees, scale, shift)


RTS = Distortion()
CLUTTERED = replace(RTS, clutter=4)
CENTRED = replace(RTS, max_degrees=0.0, min_scale=1.0, max_scale=1.0, shift=0.0)


def distorted_digits(
    num: int,
    split: str = "train",
    distortion: Distortion = RTS,
    generator: torch.Generator | None = None,
    seed: int = 0,
    poses: bool = False,
):
    """``num`` digits drawn from ``split`` (with replacement) and distorted: images
    (N, 1, canvas, canvas) in ``[0, 1]`` and labels (N,), and with ``poses=True`` also the
    poses (degrees, scale, shift) that placed them. ``seed`` fixes the split."""
    if num < 1:
        raise ValueError(f"need num >= 1, got {num}")
    images, labels = digit_split(split, seed)
    pick = torch.randint(len(labels), (num,), generator=generator)
    x, placed = distortion.apply(images[pick], generator)
    return (x, labels[pick], placed) if poses else (x, labels[pick])


__all__ = [
    "CENTRED",
    "CLUTTERED",
    "RTS",
    "Distortion",
    "canvas_to_digit",
    "digit_split",
    "distorted_digits",
    "place",
]
