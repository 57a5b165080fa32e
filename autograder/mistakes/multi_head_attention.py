"""Chapter 05, multi-head attention: its known mistakes (the format: ``autograder/mistakes/__init__.py``)."""

from autograder.mistakes import mistake

MISTAKES = [
    mistake(
        "heads-split-without-transpose",
        "split_heads",
        "the features are reshaped straight to (B, h, T, d_k), which mixes positions into heads, instead of view(B, T, h, d_k) then a transpose",
        ("x = x.view(B, T, num_heads, d_k)  # (B, T, h, d_k)\n    x = x.transpose(1, 2)"),
        "x = x.reshape(B, num_heads, T, d_k)",
        "test_split_heads",
    ),
    mistake(
        "heads-merged-in-wrong-order",
        "merge_heads",
        "the heads are merged with d_k before h, so the features of different heads interleave",
        "x = x.transpose(1, 2)  # (B, T, h, d_k)",
        "x = x.permute(0, 2, 3, 1)  # (B, T, d_k, h)",
        "test_merge_heads",
    ),
    mistake(
        "no-output-projection",
        "multi_head_attention",
        "the concatenated heads are returned without the output projection W_o",
        "output = self.W_o(merge_heads(heads))",
        "output = merge_heads(heads)",
        "test_multi_head_attention",
        "test_multi_head_masks",
    ),
    mistake(
        "scale-uses-d-model",
        "multi_head_attention",
        "the scores are divided by sqrt(d_model) instead of sqrt(d_k)",
        "scaled_dot_product_attention(Q, K, V, mask)",
        "scaled_dot_product_attention(Q, K, V, mask, scale=1 / math.sqrt(self.d_model))",
        "test_multi_head_attention",
        "test_multi_head_masks",
    ),
    mistake(
        "mask-not-broadcast-over-heads",
        "multi_head_attention",
        "the mask gets no head axis, so it lines up with the wrong dimension of the scores",
        "mask = mask.unsqueeze(-3)",
        "mask = mask",
        "test_multi_head_masks",
    ),
    mistake(
        "online-softmax-sum-not-rescaled",
        "blocked_attention",
        "the running sum of exponentials is not rescaled when the running maximum changes",
        "l = l * rescale + p.sum(-1, keepdim=True)",
        "l = l + p.sum(-1, keepdim=True)",
        "test_blocked_attention",
        "test_blocked_attention_masked",
    ),
    mistake(
        "last-partial-block-dropped",
        "blocked_attention",
        "the last, partial block of keys is skipped",
        "range(0, K.size(-2), block_size)",
        "range(0, K.size(-2) - block_size + 1, block_size)",
        "test_blocked_attention",
        "test_blocked_attention_masked",
    ),
    mistake(
        "cost-of-one-head-only",
        "multi_head_cost",
        "the attention cost is counted for one head instead of num_heads",
        "multiply_adds = projections + num_heads * per_head",
        "multiply_adds = projections + per_head",
        "test_multi_head_cost",
    ),
]
