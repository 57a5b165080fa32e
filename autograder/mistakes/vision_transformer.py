"""Chapter 09, the Vision Transformer: its known mistakes (the format: ``autograder/mistakes/__init__.py``)."""

from autograder.mistakes import mistake

MISTAKES = [
    mistake(
        "patches-column-major",
        "patchify",
        "the patches are taken down the columns first (column-major) instead of along the rows",
        "x = x.permute(0, 2, 4, 3, 5, 1)",
        "x = x.permute(0, 4, 2, 3, 5, 1)",
        "test_patchify",
    ),
    mistake(
        "patch-channels-first",
        "patchify",
        "each patch is flattened channels first, (c p1 p2), instead of (p1 p2 c) with the "
        "channels of a pixel side by side",
        "x = x.permute(0, 2, 4, 3, 5, 1)",
        "x = x.permute(0, 2, 4, 1, 3, 5)",
        "test_patchify",
    ),
    mistake(
        "patch-flattened-by-columns",
        "patchify",
        "each patch is flattened column by column, (p2 p1 c), instead of row by row",
        "x = x.permute(0, 2, 4, 3, 5, 1)",
        "x = x.permute(0, 2, 4, 5, 3, 1)",
        "test_patchify",
    ),
    mistake(
        "patches-by-reshape-alone",
        "patchify",
        "the image is reshaped to (B, N, P*P*C) without moving any axis, so a 'patch' is a run "
        "of consecutive pixels of the rows, not a square",
        "x = x.permute(0, 2, 4, 3, 5, 1)",
        "x = x",
        "test_patchify",
    ),
    mistake(
        "conv-kernel-without-permute",
        "patch_embedding",
        "the linear map's weight is reshaped straight to a (D, C, P, P) kernel, but its inputs "
        "are in the order (p1 p2 c): the channel axis must be moved first",
        "embedding.proj.weight.reshape(D, P, P, C).permute(0, 3, 1, 2)",
        "embedding.proj.weight.reshape(D, C, P, P)",
        "test_patch_embedding",
    ),
    mistake(
        "conv-kernel-transposed",
        "patch_embedding",
        "the kernel's two pixel axes are swapped, (c, p2, p1), so each kernel is the patch's "
        "weights transposed",
        ".permute(0, 3, 1, 2)",
        ".permute(0, 3, 2, 1)",
        "test_patch_embedding",
    ),
    mistake(
        "conv-bias-not-copied",
        "patch_embedding",
        "the linear map's bias is not copied, so the convolution keeps the random bias it was "
        "built with",
        "conv.bias.copy_(embedding.proj.bias)",
        "pass",
        "test_patch_embedding",
    ),
    mistake(
        "class-token-without-position",
        "vision_transformer",
        "the position embeddings are added to the patches only; the class token has one of its "
        "own, row 0 of E_pos",
        "z = torch.cat([cls, x], dim=1) + self.position_embedding",
        "z = torch.cat([cls, x + self.position_embedding[:, 1:]], dim=1)",
        "test_vision_transformer",
    ),
    mistake(
        "class-token-read-last",
        "vision_transformer",
        "the logits are read from the last token, a patch, instead of the class token at index 0",
        "self.head(self.norm(z[:, 0]))",
        "self.head(self.norm(z[:, -1]))",
        "test_vision_transformer",
    ),
    mistake(
        "tokens-averaged",
        "vision_transformer",
        "the logits are read from the mean of all the tokens (global average pooling) instead "
        "of the class token",
        "self.head(self.norm(z[:, 0]))",
        "self.head(self.norm(z.mean(dim=1)))",
        "test_vision_transformer",
    ),
    mistake(
        "no-final-layernorm",
        "vision_transformer",
        "the class token's final state goes to the head without the final LayerNorm",
        "self.head(self.norm(z[:, 0]))",
        "self.head(z[:, 0])",
        "test_vision_transformer",
    ),
    mistake(
        "rollout-without-identity",
        "attention_rollout",
        "the identity (the residual connection) is not added to the averaged weights",
        "A = A + torch.eye(A.shape[-1], dtype=A.dtype)",
        "A = A",
        "test_attention_rollout",
    ),
    mistake(
        "rollout-not-renormalised",
        "attention_rollout",
        "the rows of W + I are not divided by their sums, so they sum to 2 and the rollout grows "
        "by 2 a layer",
        "A = A / A.sum(dim=-1, keepdim=True)",
        "A = A",
        "test_attention_rollout",
    ),
    mistake(
        "rollout-in-the-wrong-order",
        "attention_rollout",
        "the layers are multiplied first on the left, A_1 A_2 ... A_L, instead of A_L ... A_2 A_1",
        "A @ rollout",
        "rollout @ A",
        "test_attention_rollout",
    ),
    mistake(
        "rollout-heads-max",
        "attention_rollout",
        "the heads are fused by their maximum instead of their mean",
        "A = w.mean(dim=1)",
        "A = w.max(dim=1).values",
        "test_attention_rollout",
    ),
    mistake(
        "distance-in-patches",
        "mean_attention_distance",
        "the distances are counted in patches, not in pixels: the grid's coordinates are not "
        "multiplied by the patch size",
        ".float() * patch_size",
        ".float()",
        "test_mean_attention_distance",
    ),
    mistake(
        "distance-not-renormalised",
        "mean_attention_distance",
        "the weights over the patches are not renormalised after the class token is dropped, "
        "so the weight a query gave the class token counts as distance 0",
        "w = w / w.sum(dim=-1, keepdim=True)",
        "w = w",
        "test_mean_attention_distance",
    ),
    mistake(
        "distance-manhattan",
        "mean_attention_distance",
        "the distance between patches is |dr| + |ds| (Manhattan), not the Euclidean distance",
        "torch.cdist(centres, centres)",
        "torch.cdist(centres, centres, p=1)",
        "test_mean_attention_distance",
    ),
    mistake(
        "tokens-without-class-token",
        "token_counts",
        "the class token is not counted: the encoder reads N + 1 tokens",
        "(image_size // patch_size) ** 2 + 1",
        "(image_size // patch_size) ** 2",
        "test_token_counts",
    ),
    mistake(
        "weights-one-head-a-layer",
        "token_counts",
        "the weights are counted for one head a layer; every head has its own T x T matrix",
        "num_layers * num_heads * token_count",
        "num_layers * token_count",
        "test_token_counts",
    ),
    mistake(
        "embedding-parameters-without-bias",
        "patch_embedding_parameters",
        "the bias of the patch embedding is not counted",
        "* d_model + d_model",
        "* d_model",
        "test_patch_embedding_parameters",
    ),
    mistake(
        "embedding-parameters-one-channel",
        "patch_embedding_parameters",
        "the channels are not counted: a patch has P * P * C inputs",
        "patch_size * patch_size * channels * d_model",
        "patch_size * patch_size * d_model",
        "test_patch_embedding_parameters",
    ),
]
