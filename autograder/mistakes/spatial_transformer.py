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
    mistake(
        "compose-in-the-order-applied",
        "compose_theta",
        "theta_2 times theta_1, in the order the transforms act on the image, though theta maps "
        "the output's points to the input's",
        "theta = theta_1 @ torch.cat([theta_2, bottom], dim=1)",
        "theta = theta_2 @ torch.cat([theta_1, bottom], dim=1)",
        "test_compose_theta",
    ),
    mistake(
        "compose-shifts-added",
        "compose_theta",
        "the 2 x 2 parts are multiplied and the shifts added, so theta_1 does not act on theta_2's "
        "shift",
        "theta = theta_1 @ torch.cat([theta_2, bottom], dim=1)",
        "theta = torch.cat([theta_1[..., :2] @ theta_2[..., :2], theta_1[..., 2:] + theta_2[..., 2:]], dim=-1)",
        "test_compose_theta",
    ),
    mistake(
        "compose-bottom-row-zero",
        "compose_theta",
        "theta_2 is completed with a bottom row of zeros instead of (0, 0, 1), so theta_1's shift "
        "is lost",
        "torch.tensor([0.0, 0.0, 1.0]",
        "torch.tensor([0.0, 0.0, 0.0]",
        "test_compose_theta",
    ),
    mistake(
        "reinforce-error-not-divided-by-k",
        "reinforce_mse",
        "the error is that of one sample whatever K: the effect of averaging K independent "
        "estimates is left out",
        ".item() / num_samples",
        ".item()",
        "test_reinforce_mse",
    ),
    mistake(
        "reinforce-error-divided-by-k-squared",
        "reinforce_mse",
        "the error falls too fast with K: check what averaging K independent estimates does "
        "to their standard deviation",
        ".item() / num_samples",
        ".item() / num_samples**2",
        "test_reinforce_mse",
    ),
    mistake(
        "reinforce-error-around-zero",
        "reinforce_mse",
        "the mean of ||g||^2 instead of ||g - grad||^2: the squared length of the exact gradient "
        "is not subtracted",
        "((g - exact) ** 2)",
        "(g**2)",
        "test_reinforce_mse",
    ),
    mistake(
        "reinforce-error-without-baseline",
        "reinforce_mse",
        "the baseline is left out: the estimate is L_j (e_j - alpha) whatever b is",
        "(losses - baseline)[:, None]",
        "losses[:, None]",
        "test_reinforce_mse",
    ),
]
