"""Chapter 09's reference implementations against PyTorch's own operators and against their
defining properties, and the given parts of ``attention_course.vision_transformer``."""

import math

import matplotlib
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attention_course.spatial_experiment import SpatialSettings, parameter_count
from attention_course.vision_transformer import (
    DataSizeSettings,
    ViTConfig,
    data_size_settings,
    grid_structure,
    plot_attention_distance,
    position_similarity,
    show_attention_maps,
    show_position_similarity,
    show_rollout,
    train_vit,
)
from autograder.reference.vision_transformer import (
    PatchEmbedding,
    VisionTransformer,
    attention_rollout,
    attention_weight_count,
    mean_attention_distance,
    measured_attention_weights,
    patch_distances,
    patch_embedding_as_conv,
    patch_embedding_multiply_adds,
    patch_embedding_parameters,
    patchify,
    smallest_patch_within,
    token_count,
    unpatchify,
)

matplotlib.use("Agg")
pytestmark = pytest.mark.usefixtures("one_thread")

SHAPES = [((2, 3, 8, 12), 4), ((1, 1, 40, 40), 8), ((3, 2, 6, 6), 1), ((2, 4, 14, 7), 7)]


# ---------------------------------------------------------------- patches


@pytest.mark.parametrize(("shape", "P"), SHAPES)
def test_patchify_cuts_squares_row_major_each_flattened_p1_p2_c(shape, P):
    """Patch n is the square at row n // (W/P), column n % (W/P), read as an H x W x C image."""
    images = torch.randn(shape)
    B, C, H, W = shape
    expected = torch.stack(
        [
            images[:, :, r * P : (r + 1) * P, s * P : (s + 1) * P]
            .permute(0, 2, 3, 1)
            .reshape(B, -1)
            for r in range(H // P)
            for s in range(W // P)
        ],
        dim=1,
    )  # (B, N, P*P*C)
    torch.testing.assert_close(patchify(images, P), expected)


@pytest.mark.parametrize(("shape", "P"), SHAPES)
def test_patchify_is_unfold_with_the_channels_moved_last(shape, P):
    """F.unfold gives (B, C*P*P, N), the blocks row-major, each flattened (c p1 p2)."""
    images = torch.randn(shape)
    B, C, H, W = shape
    N = (H // P) * (W // P)
    unfolded = F.unfold(images, kernel_size=P, stride=P)  # (B, C*P*P, N)
    reordered = unfolded.transpose(1, 2).reshape(B, N, C, P, P).permute(0, 1, 3, 4, 2)
    torch.testing.assert_close(patchify(images, P), reordered.reshape(B, N, P * P * C))


@pytest.mark.parametrize(("shape", "P"), SHAPES)
def test_unpatchify_is_the_inverse(shape, P):
    images = torch.randn(shape)
    B, C, H, W = shape
    torch.testing.assert_close(unpatchify(patchify(images, P), P, C, H, W), images)
    patches = torch.randn(B, (H // P) * (W // P), P * P * C)
    torch.testing.assert_close(patchify(unpatchify(patches, P, C, H, W), P), patches)


def test_patchify_rejects_a_patch_size_that_does_not_divide_the_image():
    with pytest.raises(ValueError, match="must divide"):
        patchify(torch.zeros(1, 1, 10, 12), 4)


@pytest.mark.parametrize(
    ("P", "C", "D", "H", "W"), [(4, 3, 16, 8, 12), (8, 1, 64, 40, 40), (2, 5, 7, 6, 4)]
)
def test_the_patch_embedding_is_a_convolution_with_stride_p(P, C, D, H, W):
    torch.manual_seed(P + C)
    embedding = PatchEmbedding(P, C, D)
    conv = patch_embedding_as_conv(embedding)
    assert isinstance(conv, nn.Conv2d) and conv.kernel_size == (P, P) and conv.stride == (P, P)
    images = torch.randn(2, C, H, W)
    out = embedding(images)
    assert out.shape == (2, (H // P) * (W // P), D)
    torch.testing.assert_close(conv(images).flatten(2).transpose(1, 2), out, atol=1e-5, rtol=1e-4)
    # the same numbers as F.conv2d with the kernel written out from the linear map by hand
    kernel = torch.empty(D, C, P, P)
    for c in range(C):
        for p1 in range(P):
            for p2 in range(P):
                kernel[:, c, p1, p2] = embedding.proj.weight[:, (p1 * P + p2) * C + c]
    torch.testing.assert_close(conv.weight, kernel)
    torch.testing.assert_close(
        F.conv2d(images, kernel, embedding.proj.bias, stride=P), conv(images).detach()
    )


@pytest.mark.parametrize("image_size, P, C, D", [(40, 8, 1, 64), (12, 4, 3, 10), (224, 16, 3, 768)])
def test_patch_embedding_multiply_adds_are_what_pytorch_counts(image_size, P, C, D):
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as flops, torch.no_grad():
        nn.Conv2d(C, D, P, stride=P)(torch.zeros(1, C, image_size, image_size))
    assert patch_embedding_multiply_adds(image_size, P, C, D) == flops.get_total_flops() // 2


def test_patch_embedding_parameters_are_those_of_the_module_and_the_convolution():
    for P, C, D in [(8, 1, 64), (16, 3, 768), (4, 3, 10), (1, 2, 3)]:
        counted = parameter_count(PatchEmbedding(P, C, D))
        assert patch_embedding_parameters(P, C, D) == counted
        assert parameter_count(nn.Conv2d(C, D, P, stride=P)) == counted
    assert parameter_count(nn.Conv2d(1, 8, 5, padding=2)) == 208  # chapter 07's first layer


# ---------------------------------------------------------------- the model


SMALL = ViTConfig(
    image_size=12,
    patch_size=4,
    channels=3,
    num_classes=5,
    d_model=16,
    num_heads=2,
    num_layers=3,
    d_ff=24,
)


def test_the_chapters_vit_has_as_many_parameters_as_chapter_07s_cnns():
    assert parameter_count(VisionTransformer()) == 124_042
    assert VisionTransformer().cfg == ViTConfig()


def test_vit_returns_logits_and_every_layers_weights():
    torch.manual_seed(0)
    vit = VisionTransformer(SMALL)
    logits, weights = vit(torch.randn(2, 3, 12, 12))
    assert logits.shape == (2, 5)
    assert len(weights) == 3
    for w in weights:
        assert w.shape == (2, 2, 10, 10)
        torch.testing.assert_close(w.sum(-1), torch.ones(2, 2, 10))


def _randomised(vit):
    with torch.no_grad():
        for p in vit.parameters():
            p.normal_(0, 0.5)
    return vit


def test_without_position_embeddings_the_vit_ignores_the_order_of_the_patches():
    torch.manual_seed(1)
    vit = _randomised(VisionTransformer(SMALL))
    with torch.no_grad():
        vit.position_embedding.zero_()
    images = torch.randn(2, 3, 12, 12)
    perm = torch.randperm(9)
    shuffled = unpatchify(patchify(images, 4)[:, perm], 4, 3, 12, 12)
    logits, weights = vit(images)
    logits_shuffled, weights_shuffled = vit(shuffled)
    torch.testing.assert_close(logits_shuffled, logits, atol=1e-5, rtol=1e-4)
    # the class token's attention is shuffled with the patches
    order = torch.cat([torch.zeros(1, dtype=torch.long), 1 + perm])
    torch.testing.assert_close(weights_shuffled[0][:, :, 0], weights[0][:, :, 0, order])


def test_with_position_embeddings_the_order_of_the_patches_matters():
    torch.manual_seed(2)
    vit = _randomised(VisionTransformer(SMALL))
    images = torch.randn(2, 3, 12, 12)
    shuffled = unpatchify(patchify(images, 4)[:, torch.randperm(9)], 4, 3, 12, 12)
    assert (vit(shuffled)[0] - vit(images)[0]).abs().max() > 1e-3


def test_the_logits_are_the_head_on_the_normalised_class_token():
    torch.manual_seed(3)
    vit = _randomised(VisionTransformer(SMALL))
    images = torch.randn(2, 3, 12, 12)
    z = torch.cat([vit.class_token.expand(2, -1, -1), vit.patch_embed(images)], 1)
    z = z + vit.position_embedding
    for block in vit.blocks:
        z, _ = block(z)
    torch.testing.assert_close(
        vit(images)[0], vit.head(F.layer_norm(z[:, 0], (16,), vit.norm.weight, vit.norm.bias))
    )


def test_the_vit_takes_another_patch_embedding_with_the_same_weights():
    """The notebook's test of forward builds the student's model with the reference's
    PatchEmbedding: the state dict's names must be the same whichever class is passed."""

    class Other(PatchEmbedding):
        pass

    a, b = VisionTransformer(SMALL), VisionTransformer(SMALL, patch_embedding=Other)
    b.load_state_dict(a.state_dict())
    assert isinstance(b.patch_embed, Other)
    images = torch.randn(1, 3, 12, 12)
    torch.testing.assert_close(a(images)[0], b(images)[0])


@pytest.mark.parametrize(
    ("image_size", "P", "heads", "layers"), [(40, 8, 4, 4), (32, 4, 2, 3), (224, 16, 12, 2)]
)
def test_token_and_weight_counts_are_what_a_vit_returns(image_size, P, heads, layers):
    cfg = ViTConfig(
        image_size=image_size,
        patch_size=P,
        d_model=4 * heads,
        num_heads=heads,
        num_layers=layers,
        d_ff=8,
    )
    with torch.no_grad():
        _, weights = VisionTransformer(cfg)(torch.zeros(1, 1, image_size, image_size))
    assert token_count(image_size, P) == weights[0].shape[-1] == cfg.num_patches + 1
    assert attention_weight_count(image_size, P, heads, layers) == sum(w.numel() for w in weights)
    assert attention_weight_count(224, 16, 12, 12) == 12 * 12 * 197**2
    # the meta-device count that chapter 09's hidden tests measure with
    assert measured_attention_weights(image_size, P, heads, layers) == sum(
        w.numel() for w in weights
    )


@pytest.mark.parametrize(
    ("image_size", "budget", "heads", "layers", "expected"),
    [
        (30, 5_000, 4, 2, 10),  # patches of 6 make 26 tokens: 8 x 676 weights
        (24, 8_214, 2, 3, 4),  # exactly the weights of patches of 4: 6 x 37^2
        (384, 50_000_000, 12, 12, 16),  # ViT-B/16 at 384: 47,941,776; patches of 12 cost more
        (37, 8, 2, 1, 37),  # a prime side: one patch and the class token
    ],
)
def test_the_smallest_patch_within_a_budget_is_measured_so(
    image_size, budget, heads, layers, expected
):
    assert smallest_patch_within(image_size, budget, heads, layers) == expected
    assert measured_attention_weights(image_size, expected, heads, layers) <= budget
    finer = [p for p in range(1, expected) if image_size % p == 0]
    assert all(measured_attention_weights(image_size, p, heads, layers) > budget for p in finer)


def test_no_patch_fits_a_budget_below_one_patch():
    with pytest.raises(ValueError, match="no patch size"):
        smallest_patch_within(12, 3, 1, 1)


# ---------------------------------------------------------------- rollout


def test_rollout_rows_sum_to_one():
    torch.manual_seed(4)
    weights = [torch.softmax(torch.randn(3, 4, 7, 7), -1) for _ in range(5)]
    R = attention_rollout(weights)
    assert R.shape == (3, 7, 7)
    assert (R >= 0).all()
    torch.testing.assert_close(R.sum(-1), torch.ones(3, 7))


def test_rollout_of_attention_on_oneself_is_the_identity():
    weights = [torch.eye(6).expand(2, 3, 6, 6) for _ in range(4)]
    torch.testing.assert_close(attention_rollout(weights), torch.eye(6).expand(2, 6, 6))


def test_rollout_of_two_layers_by_hand():
    """A_l = (mean_h W_l + I) / 2 (the rows of W sum to 1), R = A_2 A_1."""
    torch.manual_seed(5)
    W1, W2 = torch.softmax(torch.randn(2, 2, 4, 4), -1), torch.softmax(torch.randn(2, 2, 4, 4), -1)
    A1, A2 = (W1.mean(1) + torch.eye(4)) / 2, (W2.mean(1) + torch.eye(4)) / 2
    torch.testing.assert_close(attention_rollout([W1, W2]), torch.einsum("bij,bjk->bik", A2, A1))
    # the worked example of the notebook
    w1 = torch.tensor([[1.0, 0.0], [1.0, 0.0]])[None, None]
    w2 = torch.tensor([[0.0, 1.0], [0.0, 1.0]])[None, None]
    torch.testing.assert_close(
        attention_rollout([w1, w2]), torch.tensor([[[0.75, 0.25], [0.5, 0.5]]])
    )


def test_rollout_of_one_layer_is_that_layers_map():
    torch.manual_seed(6)
    W = torch.softmax(torch.randn(1, 3, 5, 5), -1)
    A = W.mean(1) + torch.eye(5)
    torch.testing.assert_close(attention_rollout([W]), A / A.sum(-1, keepdim=True))


# ---------------------------------------------------------------- attention distance


def test_patch_distances_are_euclidean_between_centres_in_pixels():
    d = patch_distances(3, 4)
    assert d.shape == (9, 9)
    torch.testing.assert_close(d, d.T)
    assert d[0, 1] == 4 and d[0, 3] == 4  # one patch across, one down
    torch.testing.assert_close(d[0, 4], torch.tensor(4 * math.sqrt(2)))
    torch.testing.assert_close(d[0, 8], torch.tensor(8 * math.sqrt(2)))
    torch.testing.assert_close(d.diagonal(), torch.zeros(9))


def _one_hot(grid, targets, to_class=0.0):
    T = grid * grid + 1
    w = torch.zeros(1, 1, T, T)
    w[0, 0, 0, 0] = 1.0
    for i, j in enumerate(targets):
        w[0, 0, 1 + i, 0] = to_class
        w[0, 0, 1 + i, 1 + j] = 1.0 - to_class
    return w


def test_one_hot_attention_has_the_distance_it_points_at():
    g, P = 4, 8
    across = [n + 1 if n % g < g - 1 else n - 1 for n in range(g * g)]
    torch.testing.assert_close(mean_attention_distance(_one_hot(g, across), P), torch.tensor([8.0]))
    corner = [g * g - 1] * (g * g)  # every patch looks at the bottom-right one
    expected = patch_distances(g, P)[:, -1].mean()
    torch.testing.assert_close(mean_attention_distance(_one_hot(g, corner), P), expected[None])
    # what a query gives the class token is shared out among the patches in proportion
    torch.testing.assert_close(
        mean_attention_distance(_one_hot(g, across, to_class=0.75), P), torch.tensor([8.0])
    )


def test_uniform_attention_has_the_mean_of_all_patch_distances():
    for g, P in [(5, 8), (2, 1), (7, 3)]:
        T = g * g + 1
        uniform = torch.full((2, 3, T, T), 1.0 / T)
        expected = patch_distances(g, P).mean().expand(3)
        torch.testing.assert_close(mean_attention_distance(uniform, P), expected)


def test_mean_attention_distance_averages_over_batch_and_queries_per_head():
    torch.manual_seed(7)
    g, P = 3, 2
    w = torch.softmax(torch.randn(4, 2, 10, 10), -1)
    per_image = torch.stack([mean_attention_distance(w[b : b + 1], P) for b in range(4)])
    torch.testing.assert_close(mean_attention_distance(w, P), per_image.mean(0))
    patches = w[:, :, 1:, 1:] / w[:, :, 1:, 1:].sum(-1, keepdim=True)
    by_loop = torch.zeros(2)
    d = patch_distances(g, P)
    for h in range(2):
        by_loop[h] = sum((patches[b, h, i] * d[i]).sum() for b in range(4) for i in range(9)) / 36
    torch.testing.assert_close(mean_attention_distance(w, P), by_loop)


def test_mean_attention_distance_needs_a_square_grid():
    with pytest.raises(ValueError, match="square"):
        mean_attention_distance(torch.full((1, 1, 7, 7), 1 / 7), 4)


# ---------------------------------------------------------------- the given analyses


def _grid_embedding(g):
    """Position embeddings (1, 1 + g*g, 2g): patch (r, s) is e_r + e_{g + s}; the class
    token's row is noise."""
    rows = [torch.zeros(2 * g)]
    rows[0][0] = 5.0
    for n in range(g * g):
        e = torch.zeros(2 * g)
        e[n // g] = 1.0
        e[g + n % g] = 1.0
        rows.append(e)
    return torch.stack(rows)[None]


def test_position_similarity_is_the_cosine_of_the_patches_embeddings():
    g = 4
    embedding = _grid_embedding(g)
    s = position_similarity(embedding)
    assert s.shape == (16, 16)
    torch.testing.assert_close(s, position_similarity(embedding[0]))  # (1 + n, d) as well
    torch.testing.assert_close(s.diagonal(), torch.ones(16))
    assert s[0, 1] == pytest.approx(0.5) and s[0, 4] == pytest.approx(0.5)  # a row, a column
    assert s[0, 5] == pytest.approx(0.0)
    torch.testing.assert_close(
        s, F.cosine_similarity(embedding[0, 1:, None], embedding[0, None, 1:], dim=-1)
    )


def test_grid_structure_reads_rows_and_columns():
    structure = grid_structure(position_similarity(_grid_embedding(5)))
    assert structure == pytest.approx({"same row": 0.5, "same column": 0.5, "neither": 0.0})
    rows_only = _grid_embedding(5)
    rows_only[..., 5:] = 0  # only the row is encoded
    structure = grid_structure(position_similarity(rows_only))
    assert structure == pytest.approx({"same row": 1.0, "same column": 0.0, "neither": 0.0})
    with pytest.raises(ValueError, match="square"):
        grid_structure(torch.eye(6))


def test_data_size_settings_follow_grading_mode(monkeypatch):
    monkeypatch.delenv("ATTENTION_COURSE_GRADING", raising=False)
    full = data_size_settings()
    monkeypatch.setenv("ATTENTION_COURSE_GRADING", "1")
    short = data_size_settings()
    assert isinstance(full, DataSizeSettings) and isinstance(short, DataSizeSettings)
    assert short.spatial.max_steps < full.spatial.max_steps
    assert short.spatial.num_test < full.spatial.num_test


def test_train_vit_trains_the_model_it_is_given():
    torch.manual_seed(0)
    vit = VisionTransformer()
    before = vit.head.weight.detach().clone()
    cfg = SpatialSettings(num_train=64, num_test=20, max_steps=3, eval_every=3, warmup_steps=1)
    run = train_vit(vit, cfg, num_train=64, seed=0, progress=False)
    assert run.model is vit
    assert run.history.steps[-1] == 3
    assert 0.0 <= run.error <= 1.0
    assert not torch.equal(vit.head.weight, before)


def test_the_plots_return_figures():
    import matplotlib.pyplot as plt

    torch.manual_seed(8)
    images = torch.rand(3, 1, 40, 40)
    figures = [
        show_attention_maps(images[0], torch.rand(4, 4, 5, 5), title="maps"),
        show_rollout(images, torch.rand(3, 5, 5), labels=["1", "2", "3"]),
        plot_attention_distance(torch.rand(4, 4) * 20, uniform=20.4),
        show_position_similarity(position_similarity(torch.randn(26, 8))),
    ]
    for fig in figures:
        assert isinstance(fig, matplotlib.figure.Figure)
        plt.close(fig)
    with pytest.raises(ValueError, match="square"):
        show_position_similarity(torch.eye(6))
