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
]
