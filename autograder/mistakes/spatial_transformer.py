"""Chapter 07, spatial transformer networks: its known mistakes (the format: ``autograder/mistakes/__init__.py``)."""

from autograder.mistakes import mistake

MISTAKES = [
    mistake(
        "grid-x-and-y-swapped",
        "affine_grid",
        "the grid's points are (y, x) instead of (x, y)",
        "torch.stack([xs, ys, torch.ones_like(xs)], dim=-1)",
        "torch.stack([ys, xs, torch.ones_like(xs)], dim=-1)",
        "test_affine_grid",
    ),
    mistake(
        "grid-on-pixel-corners",
        "affine_grid",
        "the grid runs from -1 to 1 through the outer pixels' centres (align_corners=True) instead of the pixel centres (2i + 1) / W - 1",
        (
            "    x = (2 * torch.arange(W, dtype=theta.dtype) + 1) / W - 1  # (W,) pixel centres\n"
            "    y = (2 * torch.arange(H, dtype=theta.dtype) + 1) / H - 1  # (H,)"
        ),
        (
            "    x = torch.linspace(-1, 1, W, dtype=theta.dtype)\n"
            "    y = torch.linspace(-1, 1, H, dtype=theta.dtype)"
        ),
        "test_affine_grid",
    ),
    mistake(
        "sampler-neighbour-weights-swapped",
        "bilinear_sample",
        "each of the two neighbours gets the other one's weight",
        "for m, wx in ((x0, wx0), (x0 + 1, wx1)):",
        "for m, wx in ((x0, wx1), (x0 + 1, wx0)):",
        "test_bilinear_sample",
    ),
    mistake(
        "sampler-clamps-outside-points",
        "bilinear_sample",
        "points outside the image read the border pixels instead of zeros",
        "V = V + values * (wx * wy * inside)[:, None]",
        "V = V + values * (wx * wy)[:, None]",
        "test_bilinear_sample",
    ),
    mistake(
        "sampler-align-corners-true",
        "bilinear_sample",
        "grid coordinates become pixels with align_corners=True, (x + 1) / 2 (W - 1), instead of ((x + 1) W - 1) / 2",
        (
            "    x = ((grid[..., 0] + 1) * W - 1) / 2  # (N, H_out, W_out), pixel coordinates\n"
            "    y = ((grid[..., 1] + 1) * H - 1) / 2"
        ),
        ("    x = (grid[..., 0] + 1) / 2 * (W - 1)\n    y = (grid[..., 1] + 1) / 2 * (H - 1)"),
        "test_bilinear_sample",
    ),
    mistake(
        "localisation-not-started-at-identity",
        "localisation_net",
        "the last layer does not start at the identity transform (zero weights, bias [1, 0, 0, 0, 1, 0])",
        (
            "        nn.init.zeros_(self.fc_theta.weight)\n"
            "        with torch.no_grad():\n"
            "            self.fc_theta.bias.copy_(torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 0.0]))\n"
        ),
        "",
        "test_localisation_net",
    ),
    mistake(
        "theta-reshaped-as-3-by-2",
        "localisation_net",
        "theta is laid out as 3 x 2 and transposed instead of 2 x 3, row by row",
        ".view(-1, 2, 3)  # (N, 2, 3)",
        ".view(-1, 3, 2).transpose(1, 2)",
        "test_localisation_net",
    ),
    mistake(
        "grid-of-the-input-size",
        "spatial_transformer",
        "the grid has the input's size instead of out_size",
        "affine_grid(theta, (N, C, self.out_size, self.out_size))",
        "affine_grid(theta, U.shape)",
        "test_spatial_transformer",
    ),
    mistake(
        "theta-detached",
        "spatial_transformer",
        "theta is detached, so no gradient reaches the localisation network",
        "affine_grid(theta, (N, C, self.out_size, self.out_size))",
        "affine_grid(theta.detach(), (N, C, self.out_size, self.out_size))",
        "test_spatial_transformer",
    ),
    mistake(
        "undo-with-the-inverse-pose",
        "undo_distortion",
        "theta is the distortion's inverse, so it maps the wrong way",
        "[[scale * c, -scale * s, t_x], [scale * s, scale * c, t_y]]",
        "[[c / scale, s / scale, -t_x], [-s / scale, c / scale, -t_y]]",
        "test_undo_distortion",
    ),
]
