r"""The Vision Transformer (Dosovitskiy et al. 2021) and two ways to read it: chapter 09.

An image x of H x W pixels and C channels is cut into N = HW / P^2 patches of P x P pixels,
each flattened to P^2 C numbers, x_p in R^{N x (P^2 C)}, and mapped to the model's width D
by one linear map E. A learned class token x_class is prepended and learned position
embeddings E_pos added (eq. 1):

    z_0 = [x_class; x_p^1 E; ...; x_p^N E] + E_pos,    E in R^{(P^2 C) x D}, E_pos in R^{(N+1) x D}.

Then L pre-norm encoder layers (eq. 2-3, ``attention_course.vision_transformer.EncoderBlock``),
and the class token's final state, normalised, into a linear head (eq. 4):

    y = head(LN(z_L^0)).

Conventions: patches in row-major order (left to right, then top to bottom); a patch is
flattened row by row, the channels of a pixel side by side, ``(p1 p2 c)`` in einops terms,
as the paper's reshape of an H x W x C image does. The class token is token 0.

Two analyses of a trained model's attention:

- **attention rollout** (Abnar and Zuidema 2020): with the residual connection as an
  identity, layer l passes on A_l = norm(mean_h W_l + I) (rows renormalised to sum to 1),
  and the input reaches the output through A_L ... A_2 A_1; row 0 of that product says how
  much each patch reaches the class token;
- **mean attention distance** (the paper's Figure 7, right): for each head, the distance in
  pixels between a query patch and the key patches it attends to, weighted by attention.
"""

import torch
from torch import nn

from attention_course.vision_transformer import EncoderBlock, ViTConfig


def patchify(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    """Cut images (B, C, H, W) into patches (B, N, P*P*C), N = (H/P)(W/P), in row-major order;
    patch n = (row r, column s) holds pixels [rP:(r+1)P, sP:(s+1)P], flattened as (p1 p2 c)."""
    B, C, H, W = images.shape
    P = patch_size
    if H % P or W % P:
        raise ValueError(f"patch size {P} must divide the image's height {H} and width {W}")
    x = images.reshape(B, C, H // P, P, W // P, P)  # (B, C, rows, p1, cols, p2)
    x = x.permute(0, 2, 4, 3, 5, 1)  # (B, rows, cols, p1, p2, C)
    return x.reshape(B, (H // P) * (W // P), P * P * C)


def unpatchify(patches: torch.Tensor, patch_size: int, channels: int, height: int, width: int):
    """The inverse of ``patchify``: patches (B, N, P*P*C) back to images (B, C, H, W)."""
    B = patches.shape[0]
    P = patch_size
    x = patches.reshape(B, height // P, width // P, P, P, channels)  # (B, rows, cols, p1, p2, C)
    x = x.permute(0, 5, 1, 3, 2, 4)  # (B, C, rows, p1, cols, p2)
    return x.reshape(B, channels, height, width)


class PatchEmbedding(nn.Module):
    """x_p E + b: each flattened patch mapped by one linear map to width d_model.

    forward(images (B, C, H, W)) returns (B, N, d_model).
    """

    def __init__(self, patch_size: int, channels: int, d_model: int):
        super().__init__()
        self.patch_size, self.channels = patch_size, channels
        self.proj = nn.Linear(patch_size * patch_size * channels, d_model)

    def forward(self, images):
        return self.proj(patchify(images, self.patch_size))  # (B, N, d_model)


def patch_embedding_as_conv(embedding: PatchEmbedding) -> nn.Conv2d:
    """The same map as a convolution: a D x C x P x P kernel moved with stride P. Returns an
    ``nn.Conv2d`` with ``embedding``'s weights, whose output (B, D, H/P, W/P), flattened
    over the grid and transposed, equals ``embedding(images)``."""
    P, C = embedding.patch_size, embedding.channels
    D = embedding.proj.out_features
    conv = nn.Conv2d(C, D, kernel_size=P, stride=P)
    with torch.no_grad():
        # the linear map's inputs are (p1 p2 c); a kernel's axes are (c, p1, p2)
        conv.weight.copy_(embedding.proj.weight.view(D, P, P, C).permute(0, 3, 1, 2))
        conv.bias.copy_(embedding.proj.bias)
    return conv


class VisionTransformer(nn.Module):
    """z_0 = [x_class; x_p E] + E_pos, L encoder blocks, y = head(LN(z_L^0)).

    forward(images (B, C, H, W)) returns the logits (B, num_classes) and every layer's
    attention weights, a list of L tensors (B, h, N + 1, N + 1), the class token first.
    """

    def __init__(self, cfg: ViTConfig | None = None, patch_embedding=PatchEmbedding):
        super().__init__()
        self.cfg = cfg = cfg or ViTConfig()  # the chapter's sizes by default
        D = cfg.d_model
        self.patch_embed = patch_embedding(cfg.patch_size, cfg.channels, D)
        self.class_token = nn.Parameter(torch.zeros(1, 1, D))
        self.position_embedding = nn.Parameter(torch.randn(1, cfg.num_patches + 1, D) * 0.02)
        self.blocks = nn.ModuleList(
            EncoderBlock(D, cfg.num_heads, cfg.d_ff, cfg.dropout) for _ in range(cfg.num_layers)
        )
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, cfg.num_classes)

    def forward(self, images):
        x = self.patch_embed(images)  # (B, N, D)
        cls = self.class_token.expand(x.shape[0], -1, -1)  # (B, 1, D)
        z = torch.cat([cls, x], dim=1) + self.position_embedding  # (B, N + 1, D)
        weights = []
        for block in self.blocks:
            z, w = block(z)
            weights.append(w)  # (B, h, N + 1, N + 1)
        return self.head(self.norm(z[:, 0])), weights  # (B, num_classes)


def attention_rollout(weights) -> torch.Tensor:
    """Abnar and Zuidema's rollout: weights, a list of L tensors (B, h, T, T) from the first
    layer to the last, to R = A_L ... A_2 A_1 (B, T, T), with A_l = mean_h W_l + I, each row
    divided by its sum. R[b, i, j] is how much token j of the input reaches token i of the
    output; row 0 is the class token's."""
    rollout = None
    for w in weights:
        A = w.mean(dim=1)  # (B, T, T), the heads averaged
        A = A + torch.eye(A.shape[-1], dtype=A.dtype)  # the residual connection
        A = A / A.sum(dim=-1, keepdim=True)
        rollout = A if rollout is None else A @ rollout  # (B, T, T)
    return rollout


def patch_distances(grid: int, patch_size: int) -> torch.Tensor:
    """The Euclidean distance in pixels between the centres of every two patches of a
    ``grid`` x ``grid`` image of patches of ``patch_size`` pixels: (N, N), N = grid^2."""
    n = torch.arange(grid * grid)
    centres = torch.stack([n // grid, n % grid], dim=-1).float() * patch_size  # (N, 2)
    return torch.cdist(centres, centres)  # (N, N)


def mean_attention_distance(weights: torch.Tensor, patch_size: int) -> torch.Tensor:
    """The mean attention distance of each head of one layer, in pixels: weights (B, h, T, T)
    with the class token first and T - 1 patches on a square grid; returns (h,).

    The class token is left out as a query and as a key; each query patch's weights over
    the key patches are renormalised to sum to 1; the weighted distance between query and
    key is averaged over the query patches and the batch:

        distance_h = mean_{b, i} sum_j w'_{hij} ||c_i - c_j||,   w'_{hij} = w_{hij} / sum_k w_{hik},

    with c_i the centre of patch i in pixels.
    """
    w = weights[:, :, 1:, 1:]  # (B, h, N, N), patches only
    w = w / w.sum(dim=-1, keepdim=True)
    grid = int(round(w.shape[-1] ** 0.5))
    if grid * grid != w.shape[-1]:
        raise ValueError(f"need a square grid of patches, got {w.shape[-1]}")
    distance = patch_distances(grid, patch_size)  # (N, N)
    return (w * distance).sum(-1).mean(dim=(0, 2))  # (h,)


def token_count(image_size: int, patch_size: int) -> int:
    """Tokens a ViT reads from an image_size x image_size image: the patches and the class token."""
    return (image_size // patch_size) ** 2 + 1


def attention_weight_count(image_size: int, patch_size: int, num_heads: int, num_layers: int):
    """Attention weights the forward pass computes for one image: T^2 per head and layer."""
    return num_layers * num_heads * token_count(image_size, patch_size) ** 2


def smallest_patch_within(image_size: int, budget: int, num_heads: int, num_layers: int) -> int:
    """The smallest patch size P dividing image_size whose attention weights for one image,
    num_layers * num_heads * ((image_size / P)^2 + 1)^2 (:func:`attention_weight_count`), are
    at most ``budget``: the weights fall as the patch grows, so the first that fits."""
    for patch_size in range(1, image_size + 1):
        if image_size % patch_size:
            continue  # the patches must tile the image
        if attention_weight_count(image_size, patch_size, num_heads, num_layers) <= budget:
            return patch_size
    raise ValueError(f"no patch size of a {image_size} x {image_size} image fits {budget} weights")


def measured_attention_weights(
    image_size: int, patch_size: int, num_heads: int, num_layers: int
) -> int:
    """The attention weights the course's ViT of that shape returns for one image, counted
    (the entries of its L tensors (1, h, T, T)): the measurement that chapter 09's test
    compares smallest_patch_within with. The model runs on PyTorch's meta device, which
    computes shapes and no numbers, so that ViT-B's sizes cost neither memory nor time."""
    config = ViTConfig(
        image_size=image_size,
        patch_size=patch_size,
        d_model=num_heads,  # one number a head: the shapes of the weights are all we count
        num_heads=num_heads,
        num_layers=num_layers,
        d_ff=1,
    )
    with torch.device("meta"), torch.no_grad():
        _, weights = VisionTransformer(config)(torch.zeros(1, 1, image_size, image_size))
    return sum(w.numel() for w in weights)


def patch_embedding_multiply_adds(
    image_size: int, patch_size: int, channels: int, d_model: int
) -> int:
    """Multiply-adds of the patch embedding on one square image, the bias left out:
    (image_size / P)^2 patches, each P^2 C inputs times d_model outputs, that is
    image_size^2 C d_model whatever the patch size."""
    return (image_size // patch_size) ** 2 * patch_size**2 * channels * d_model


def patch_embedding_parameters(patch_size: int, channels: int, d_model: int) -> int:
    """Parameters of the patch embedding: a (P^2 C) x D matrix and a bias of D."""
    return patch_size * patch_size * channels * d_model + d_model
