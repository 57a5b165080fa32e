"""Chapter 02, Bahdanau and Luong attention: its known mistakes (the format: ``autograder/mistakes/__init__.py``)."""

from autograder.mistakes import mistake

MISTAKES = [
    mistake(
        "additive-score-without-tanh",
        "additive_score",
        "the score has no tanh: v^T (W s + U h_j) instead of v^T tanh(W s + U h_j)",
        "self.v(torch.tanh(query + keys))",
        "self.v(query + keys)",
        "test_additive_score",
    ),
    mistake(
        "additive-score-ignores-given-keys",
        "additive_score",
        "the keys passed in are ignored and U h is computed again",
        "keys = self.U(h) if keys is None else keys",
        "keys = self.U(h)",
        "test_additive_score",
    ),
    mistake(
        "softmax-over-batch-axis",
        "masked_softmax",
        "the softmax runs over the batch axis (dim=0) instead of the source positions",
        "torch.softmax(scores, dim=-1)",
        "torch.softmax(scores, dim=0)",
        "test_masked_softmax",
    ),
    mistake(
        "padding-left-unmasked",
        "masked_softmax",
        "padding positions are not masked out before the softmax",
        'scores = scores.masked_fill(~mask, float("-inf"))',
        "scores = scores",
        "test_masked_softmax",
    ),
    mistake(
        "context-summed-over-features",
        "context",
        "the context sums over the feature axis instead of over the source positions",
        ".sum(dim=1)",
        ".sum(dim=-1)",
        "test_context",
    ),
    mistake(
        "context-from-decoder-state",
        "attention_decoder",
        "the context vector is the decoder state instead of the weighted sum of the encoder states",
        "c = context(weights, enc_states)",
        "c = hidden",
        "test_attention_step",
    ),
    mistake(
        "general-score-transposed",
        "luong_scores",
        "the general score multiplies by W_a transposed",
        "query = s @ W_a",
        "query = (W_a @ s.T).T",
        "test_luong_scores",
    ),
]
