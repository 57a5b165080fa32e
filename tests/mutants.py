"""The submissions that prove the grader: every catalogued mistake (``autograder/mistakes/``)
and, per chapter, at least one wrong answer that is *not* in the catalogue.

A mistake must lose points on the test cells it names and only there, and its feedback must
name it; a wrong answer outside the catalogue must lose points and be named as nothing.
"""

from autograder.mistakes import Mistake, all_mistakes, mistake

MUTANTS: dict[str, list[Mistake]] = all_mistakes()

# Right answers written another way, each a convention the exercise's text leaves open (or
# that public code uses): every test cell, visible and hidden, must pass. ``breaks`` is empty.
ALTERNATIVES: dict[str, list[Mistake]] = {
    "06_transformer": [
        mistake(
            "sinusoid-through-exp-log",
            "positional_encoding",
            "the frequencies as exp(-ln(10000) 2i / d_model), as the Annotated Transformer and "
            "d2l write them",
            "    angle = pos / 10000 ** (two_i / d_model)  # (T, d_model / 2)",
            "    angle = pos * torch.exp(two_i * (-math.log(10000.0) / d_model))",
        )
    ],
    "09_vision_transformer": [
        mistake(
            "rollout-in-float64",
            "attention_rollout",
            "the rollout is computed, and returned, in float64 (as NumPy-based code does)",
            "A = w.mean(dim=1)  # (B, T, T), the heads averaged",
            "A = w.double().mean(dim=1)",
        ),
        mistake(
            "distance-in-float64",
            "mean_attention_distance",
            "the distances are computed, and returned, in float64",
            "w = weights[:, :, 1:, 1:]  # (B, h, N, N), the patches only",
            "w = weights[:, :, 1:, 1:].double()",
        ),
        mistake(
            "blocks-called-with-forward",
            "vision_transformer",
            "each block is run as block.forward(z), not block(z)",
            "z, w = block(z)",
            "z, w = block.forward(z)",
        ),
        mistake(
            "patchify-with-einops",
            "patchify",
            "the patches are cut with einops.rearrange in the notation the text gives",
            (
                "    x = images.reshape(B, C, H // P, P, W // P, P)  # (B, C, rows, p1, cols, p2)\n"
                "    x = x.permute(0, 2, 4, 3, 5, 1)  # (B, rows, cols, p1, p2, C)\n"
                "    patches = x.reshape(B, (H // P) * (W // P), P * P * C)  # (B, N, P*P*C)"
            ),
            (
                "    from einops import rearrange\n\n"
                '    patches = rearrange(images, "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=P, p2=P)'
            ),
        ),
    ],
}

# Wrong answers no catalogue entry describes: a diagnosis here would be a false one.
UNCATALOGUED: dict[str, list[Mistake]] = {
    "01_rnn_bottleneck": [
        mistake(
            "loss-summed",
            "sequence_loss",
            "the loss is summed over the tokens instead of averaged",
            "ignore_index=pad_id)",
            'ignore_index=pad_id, reduction="sum")',
            "test_sequence_loss",
        )
    ],
    "02_bahdanau_attention": [
        mistake(
            "softmax-with-temperature",
            "masked_softmax",
            "the scores are doubled before the softmax",
            "torch.softmax(scores, dim=-1)",
            "torch.softmax(2 * scores, dim=-1)",
            "test_masked_softmax",
        ),
        # its weights are right: only the check that the scores are left alone finds it
        mistake(
            "masked-softmax-writes-into-scores",
            "masked_softmax",
            "the padding is masked in the caller's own scores, which masked_softmax changes",
            'scores = scores.masked_fill(~mask, float("-inf"))',
            'scores.masked_fill_(~mask, float("-inf"))',
            "test_masked_softmax",
        ),
    ],
    "03_convs2s": [
        mistake(
            "gate-with-tanh",
            "glu",
            "the gate is tanh(b) instead of sigmoid(b)",
            "a * torch.sigmoid(b)",
            "a * torch.tanh(b)",
            "test_glu",
        )
    ],
    "04_dot_product_attention": [
        mistake(
            "scaled-by-d_k",
            "scaled_dot_product_attention",
            "the scores are divided by d_k instead of sqrt(d_k)",
            "/ math.sqrt(d_k)",
            "/ d_k",
            "test_attention_unmasked",
            "test_attention_masked",
        )
    ],
    "05_multi_head_attention": [
        mistake(
            "cost-counted-twice",
            "multi_head_cost",
            "the heads' cost is counted twice",
            "projections + num_heads * per_head",
            "projections + 2 * num_heads * per_head",
            "test_multi_head_cost",
        )
    ],
    "06_transformer": [
        mistake(
            "warmup-exponent-wrong",
            "warmup_schedule",
            "the warm-up branch uses warmup**-1 instead of warmup**-1.5",
            "step * warmup**-1.5",
            "step * warmup**-1.0",
            "test_warmup_schedule",
        )
    ],
    "07_spatial_transformer": [
        mistake(
            "grid-without-translation",
            "affine_grid",
            "the grid's points get a 0 instead of a 1 as third coordinate, so theta's translation is lost",
            "torch.ones_like(xs)",
            "torch.zeros_like(xs)",
            "test_affine_grid",
        )
    ],
    "08_language_models": [
        mistake(
            "window-one-too-narrow",
            "sliding_window_mask",
            "each query sees window - 1 keys: i - j < window - 1",
            "(i - j < window)",
            "(i - j < window - 1)",
            "test_sliding_window_mask",
        )
    ],
    "09_vision_transformer": [
        mistake(
            "rollout-identity-doubled",
            "attention_rollout",
            "the residual connection is counted twice: W + 2I instead of W + I",
            "A = A + torch.eye(A.shape[-1], dtype=A.dtype)",
            "A = A + 2 * torch.eye(A.shape[-1], dtype=A.dtype)",
            "test_attention_rollout",
        )
    ],
    "10_attention_since_2023": [
        mistake(
            "delta-beta-ignored",
            "delta_rule",
            "the error is written at full strength, beta_t left out",
            "S = S + beta[..., t, None, None] * error[..., :, None] * k[..., None, :]",
            "S = S + error[..., :, None] * k[..., None, :]",
            "test_delta_rule",
        ),
        # the absorbed form's right values computed the explicit way: only the test of the
        # form (the shapes of what a decode step builds) sees it, and no diagnosis can
        mistake(
            "absorbed-values-up-projected-first",
            "absorbed_attention",
            "the cached latents are up-projected into values before the weighted sum",
            "heads = (weights @ c[:, None]) @ W_uv.transpose(-2, -1)",
            "heads = weights @ (c[:, None] @ W_uv.transpose(-2, -1))",
            "test_absorbed_attention",
        ),
        mistake(
            "absorbed-keys-up-projected",
            "absorbed_attention",
            "the cached latents are up-projected into keys, as in the explicit form",
            "scores = q_latent @ c[:, None].transpose(-2, -1) + ",
            "scores = q_c @ (c[:, None] @ W_uk.transpose(-2, -1)).transpose(-2, -1) + ",
            "test_absorbed_attention",
        ),
    ],
}


def packs(mistakes: list[Mistake]) -> list[list[Mistake]]:
    """The mistakes grouped so that no two in a group edit the same exercise or break the
    same test cell: one submission makes all of a group's mistakes, and each still loses
    points on its own cells only (``test_mistakes.py`` proves it of each one alone).
    Grading a chapter's catalogue takes as many submissions as its most-catalogued exercise
    has mistakes, not one per mistake."""
    groups: list[list[Mistake]] = []
    for m in mistakes:
        for group in groups:
            if all(o.cell != m.cell and not (o.breaks & m.breaks) for o in group):
                group.append(m)
                break
        else:
            groups.append([m])
    return groups
