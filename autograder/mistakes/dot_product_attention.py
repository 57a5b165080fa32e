"""Chapter 04, scaled dot-product attention: its known mistakes (the format: ``autograder/mistakes/__init__.py``)."""

from autograder.mistakes import mistake

MISTAKES = [
    mistake(
        "no-scaling",
        "scaled_dot_product_attention",
        "the scores are not divided by sqrt(d_k)",
        "Q @ K.transpose(-2, -1) / math.sqrt(d_k)",
        "Q @ K.transpose(-2, -1)",
        "test_attention_masked",
        "test_attention_unmasked",
    ),
    mistake(
        "softmax-over-queries",
        "scaled_dot_product_attention",
        "the softmax runs over the queries (dim=-2) instead of the keys (dim=-1)",
        "torch.softmax(scores, dim=-1)",
        "torch.softmax(scores, dim=-2)",
        "test_attention_masked",
        "test_attention_unmasked",
    ),
    mistake(
        "keys-not-transposed",
        "scaled_dot_product_attention",
        "K is not transposed: Q @ K instead of Q @ K^T",
        "Q @ K.transpose(-2, -1)",
        "Q @ K",
        "test_attention_masked",
        "test_attention_unmasked",
    ),
    mistake(
        "weights-times-values-elementwise",
        "scaled_dot_product_attention",
        "the weights multiply V elementwise (weights * V) instead of by a matrix product (weights @ V)",
        "output = weights @ V",
        "output = weights * V",
        "test_attention_masked",
        "test_attention_unmasked",
    ),
    mistake(
        "inverted-mask",
        "scaled_dot_product_attention",
        "the mask is inverted: the scores are blanked where the mask is True (the allowed keys)",
        "scores.masked_fill(~mask,",
        "scores.masked_fill(mask,",
        "test_attention_masked",
    ),
    mistake(
        "mask-after-softmax",
        "scaled_dot_product_attention",
        "the mask is applied to the weights after the softmax, so the rows no longer sum to one",
        (
            "    if mask is not None:\n"
            '        scores = scores.masked_fill(~mask, float("-inf"))\n'
            "    weights = torch.softmax(scores, dim=-1)  # (..., T_q, T_k)"
        ),
        (
            "    weights = torch.softmax(scores, dim=-1)\n"
            "    if mask is not None:\n"
            "        weights = weights.masked_fill(~mask, 0.0)"
        ),
        "test_attention_masked",
    ),
    mistake(
        "nan-for-fully-masked-row",
        "scaled_dot_product_attention",
        "a query with no allowed key gets NaN weights instead of zeros",
        "weights = torch.nan_to_num(weights, nan=0.0)",
        "weights = weights",
        "test_attention_masked",
    ),
    mistake(
        "masked-with-minus-1e9",
        "scaled_dot_product_attention",
        "the scores are masked with -1e9 instead of -inf, so a query with no allowed key gets "
        "uniform weights instead of zeros",
        'scores.masked_fill(~mask, float("-inf"))',
        "scores.masked_fill(~mask, -1e9)",
        "test_attention_masked",
    ),
    mistake(
        "padding-off-by-one",
        "padding_mask",
        "the mask is also True at position length: <= instead of <",
        "positions[None, :] < lengths[:, None]",
        "positions[None, :] <= lengths[:, None]",
        "test_padding_mask",
    ),
    mistake(
        "causal-future-leak",
        "causal_mask",
        "the causal mask is upper triangular, so each query sees the future instead of the past",
        "torch.tril(",
        "torch.triu(",
        "test_causal_mask",
    ),
    mistake(
        "values-from-keys",
        "self_attention",
        "V is projected with W_k instead of W_v",
        "self.W_v(x)  #",
        "self.W_k(x)  #",
        "test_self_attention",
    ),
    mistake(
        "self-attention-drops-mask",
        "self_attention",
        "the mask is not passed on to scaled_dot_product_attention",
        "scaled_dot_product_attention(Q, K, V, mask)",
        "scaled_dot_product_attention(Q, K, V)",
        "test_self_attention",
    ),
    mistake(
        "cross-attention-keys-from-x",
        "cross_attention",
        "the keys and values come from x instead of memory, so this is self-attention on x",
        "K, V = self.W_k(memory), self.W_v(memory)",
        "K, V = self.W_k(x), self.W_v(x)",
        "test_cross_attention",
    ),
    mistake(
        "cross-attention-queries-from-memory",
        "cross_attention",
        "the roles are swapped: the queries come from memory and the keys and values from x",
        (
            "        Q = self.W_q(x)  # (B, T_q, d_k)\n"
            "        K, V = self.W_k(memory), self.W_v(memory)"
        ),
        "        Q = self.W_q(memory)\n        K, V = self.W_k(x), self.W_v(x)",
        "test_cross_attention",
    ),
    mistake(
        "cross-attention-drops-mask",
        "cross_attention",
        "the mask is not passed on to scaled_dot_product_attention",
        "scaled_dot_product_attention(Q, K, V, mask)",
        "scaled_dot_product_attention(Q, K, V)",
        "test_cross_attention",
    ),
    mistake(
        "variance-sqrt-dk",
        "dot_product_variance",
        "the variance of q.k is sqrt(d_k), which is its standard deviation",
        "variance = d_k * var_q * var_k",
        "variance = math.sqrt(d_k) * var_q * var_k",
        "test_dot_product_variance",
    ),
    mistake(
        "variance-ignores-entry-variances",
        "dot_product_variance",
        "the variance of q.k is d_k whatever the variances of the entries of q and k",
        "variance = d_k * var_q * var_k",
        "variance = d_k",
        "test_dot_product_variance",
    ),
    mistake(
        "scale-divides-by-variance",
        "dot_product_variance",
        "the scale divides the scores by their variance: check what multiplying a random "
        "variable by c does to its variance",
        "scale = 1 / math.sqrt(dot_product_variance(d_k, var_q, var_k))",
        "scale = 1 / dot_product_variance(d_k, var_q, var_k)",
        "test_dot_product_variance",
    ),
    mistake(
        "scale-ignores-entry-variances",
        "dot_product_variance",
        "the scale is 1 / sqrt(d_k) whatever the variances of the entries, which holds only "
        "when var_q * var_k = 1",
        "scale = 1 / math.sqrt(dot_product_variance(d_k, var_q, var_k))",
        "scale = 1 / math.sqrt(d_k)",
        "test_dot_product_variance",
    ),
    mistake(
        "outgrows-counting-scores-only",
        "attention_outgrows_projections",
        "attention's cost counts Q K^T only, not the product of the weights with V",
        "n = d_model * (2 * d_k + d_v) // (d_k + d_v) + 1",
        "n = d_model * (2 * d_k + d_v) // d_k + 1",
        "test_attention_outgrows_projections",
    ),
    mistake(
        "outgrows-projections-three-dk",
        "attention_outgrows_projections",
        "the projections are counted as three of width d_k: W_v maps to d_v, not d_k",
        "n = d_model * (2 * d_k + d_v) // (d_k + d_v) + 1",
        "n = 3 * d_model * d_k // (d_k + d_v) + 1",
        "test_attention_outgrows_projections",
    ),
    mistake(
        "outgrows-at-equal-cost",
        "attention_outgrows_projections",
        "the length where the two costs are equal is returned instead of the first where "
        "attention's cost more",
        "n = d_model * (2 * d_k + d_v) // (d_k + d_v) + 1",
        "n = -(-d_model * (2 * d_k + d_v) // (d_k + d_v))",
        "test_attention_outgrows_projections",
    ),
]
