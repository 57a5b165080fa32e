r"""Spatial transformer networks (Jaderberg et al. 2015): chapter 07.

A spatial transformer has three parts:

1. a **localisation network** that looks at the input U and outputs the parameters theta
   of a transform (here affine: a 2 x 3 matrix);
2. a **grid generator** that maps every pixel centre (x_t, y_t) of the output V, in
   normalised coordinates in [-1, 1], to the point of the input it reads (eq. 1):

       (x_s, y_s)^T = theta (x_t, y_t, 1)^T;

3. a **sampler** that reads U at those points with bilinear interpolation (eq. 5):

       V_i = sum_{n=0}^{H-1} sum_{m=0}^{W-1} U_nm max(0, 1 - |x_i - m|) max(0, 1 - |y_i - n|),

   with (x_i, y_i) the sample point in pixel coordinates; a point outside U reads zeros.

The sampler is differentiable in U and, almost everywhere, in (x_i, y_i), so the loss of
the classifier behind the transformer trains the localisation network.

Conventions are those of ``F.affine_grid`` and ``F.grid_sample`` with
``align_corners=False``: x runs left to right over the width, y top to bottom over the
height; -1 and 1 are the outer edges of the border pixels, so pixel j of W has its centre
at x = (2 j + 1) / W - 1, and x maps back to the pixel coordinate ((x + 1) W - 1) / 2.
"""

import torch
from torch import nn

IDENTITY = (1.0, 0.0, 0.0, 0.0, 1.0, 0.0)  # theta of the identity transform, row by row
LEAK = 0.1  # the slope of the localisation network's leaky ReLUs below zero


def affine_grid(theta: torch.Tensor, size) -> torch.Tensor:
    """The sampling grid of eq. 1: (N, H, W, 2), grid[n, i, j] = theta[n] (x_j, y_i, 1).

    ``theta`` (N, 2, 3); ``size`` the output's (N, C, H, W). Pixel centres:
    x_j = (2 j + 1) / W - 1, y_i = (2 i + 1) / H - 1. The last axis holds (x, y).
    """
    N, _, H, W = size
    x = (2 * torch.arange(W, dtype=theta.dtype, device=theta.device) + 1) / W - 1  # (W,)
    y = (2 * torch.arange(H, dtype=theta.dtype, device=theta.device) + 1) / H - 1  # (H,)
    ys, xs = torch.meshgrid(y, x, indexing="ij")  # (H, W) each
    target = torch.stack([xs, ys, torch.ones_like(xs)], dim=-1)  # (H, W, 3)
    # (x_s, y_s) = theta (x_t, y_t, 1)
    grid = target.view(1, H * W, 3) @ theta.transpose(1, 2)  # (N, H*W, 2)
    return grid.view(N, H, W, 2)


def bilinear_sample(U: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    """Bilinear sampling of eq. 5: V (N, C, H_out, W_out) from U (N, C, H, W) at ``grid``
    (N, H_out, W_out, 2) in normalised coordinates; points outside U read zeros.

    Equal to ``F.grid_sample(U, grid, mode="bilinear", padding_mode="zeros",
    align_corners=False)``, in values and in gradients.
    """
    N, C, H, W = U.shape
    H_out, W_out = grid.shape[1:3]
    x = ((grid[..., 0] + 1) * W - 1) / 2  # (N, H_out, W_out), pixel coordinates
    y = ((grid[..., 1] + 1) * H - 1) / 2
    x0, y0 = torch.floor(x), torch.floor(y)
    flat = U.flatten(2)  # (N, C, H*W)
    V = torch.zeros(N, C, H_out, W_out, dtype=U.dtype, device=U.device)
    for m in (x0, x0 + 1):  # the neighbours' columns
        for n in (y0, y0 + 1):  # and rows
            # U_nm max(0, 1 - |x - m|) max(0, 1 - |y - n|), zero outside the image
            weight = (1 - (x - m).abs()) * (1 - (y - n).abs())  # (N, H_out, W_out)
            inside = (m >= 0) & (m <= W - 1) & (n >= 0) & (n <= H - 1)
            index = (n.clamp(0, H - 1) * W + m.clamp(0, W - 1)).long()  # (N, H_out, W_out)
            values = flat.gather(2, index.view(N, 1, -1).expand(N, C, -1))  # (N, C, H_out*W_out)
            V = V + values.view(N, C, H_out, W_out) * (weight * inside)[:, None]
    return V  # (N, C, H_out, W_out)


class LocalisationNet(nn.Module):
    """theta = f_loc(U): a small CNN whose last layer starts at the identity transform.

    ``in_size`` is the input's height and width (square). The last layer's weights start
    at zero and its bias at the identity, so an untrained transformer passes its input
    through unchanged (Jaderberg et al. 2015, section 4). Its units are leaky ReLUs, which
    cannot die: while the last layer's weights are near zero, the layers before it get
    gradients near zero, which Adam scales up to full-size steps in random directions, and
    plain ReLUs pushed that way can end up silent on every input (theta then stays one
    constant and the transformer learns nothing).
    """

    def __init__(self, in_size: int = 40, channels: int = 1, hidden: int = 32):
        super().__init__()
        self.features = nn.Sequential(
            nn.MaxPool2d(2),  # the transformer decides where to look from a coarse view
            nn.Conv2d(channels, 8, 5, padding=2),
            nn.LeakyReLU(LEAK),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 5, padding=2),
            nn.LeakyReLU(LEAK),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(16 * (in_size // 8) ** 2, hidden),
            nn.LeakyReLU(LEAK),
        )
        self.fc_theta = nn.Linear(hidden, 6)
        nn.init.zeros_(self.fc_theta.weight)
        with torch.no_grad():
            self.fc_theta.bias.copy_(torch.tensor(IDENTITY))

    def forward(self, U: torch.Tensor) -> torch.Tensor:
        """U (N, C, H, W) -> theta (N, 2, 3)."""
        return self.fc_theta(self.features(U)).view(-1, 2, 3)  # (N, 2, 3)


class SpatialTransformer(nn.Module):
    """V = sampler(U, grid(theta = f_loc(U))), an output of ``out_size`` x ``out_size``.

    ``forward(U)`` returns V (N, C, out_size, out_size) and theta (N, 2, 3).
    """

    def __init__(self, localisation: nn.Module, out_size: int):
        super().__init__()
        self.localisation = localisation
        self.out_size = out_size

    def forward(self, U: torch.Tensor):
        theta = self.localisation(U)  # (N, 2, 3)
        N, C = U.shape[:2]
        grid = affine_grid(theta, (N, C, self.out_size, self.out_size))  # (N, H', W', 2)
        return bilinear_sample(U, grid), theta


def undo_distortion(degrees: float, scale: float, shift) -> torch.Tensor:
    r"""The theta (2, 3) whose output shows a distorted digit upright, centred, at scale 1.

    The data set placed the digit's own coordinates q on the canvas at p = t + k R(a) q
    (``attention_course.data.digits``); the undistorted digit, at the centre with scale
    1, sits at p_o = q. The transformer's theta maps the output's coordinates to the
    input's, p = theta (p_o, 1), so it is the distortion itself: [k R(a) | t].
    """
    pose = torch.tensor([float(degrees)]), torch.tensor([float(scale)]), torch.tensor([shift])
    return pose_matrix(*pose)[0]  # (2, 3)


def pose_matrix(degrees: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """The poses p = t + k R(a) q as (N, 2, 3) matrices [k R(a) | t], from a digit's own
    coordinates q to the canvas's p: :func:`undo_distortion` of a batch. ``degrees`` and
    ``scale`` are (N,), ``shift`` (N, 2). (The kit's data renders with the inverse map,
    ``attention_course.data.digits.canvas_to_digit``, written on its own.)"""
    a = torch.deg2rad(degrees)
    cos, sin = torch.cos(a) * scale, torch.sin(a) * scale
    rows = [
        torch.stack([cos, -sin, shift[:, 0]], dim=-1),
        torch.stack([sin, cos, shift[:, 1]], dim=-1),
    ]
    return torch.stack(rows, dim=1)  # (N, 2, 3)
