"""Chapter 06, the Transformer: its known mistakes (the format: ``autograder/mistakes/__init__.py``)."""

from autograder.mistakes import mistake

MISTAKES = [
    mistake(
        "sin-and-cos-swapped",
        "positional_encoding",
        "cosines sit on the even features and sines on the odd ones",
        ("pe[:, 0::2] = torch.sin(angle)\n    pe[:, 1::2] = torch.cos(angle)"),
        ("pe[:, 0::2] = torch.cos(angle)\n    pe[:, 1::2] = torch.sin(angle)"),
        "test_positional_encoding",
    ),
    mistake(
        "exponent-i-instead-of-2i",
        "positional_encoding",
        "the exponent is i / d_model instead of 2i / d_model",
        "10000 ** (two_i / d_model)",
        "10000 ** (two_i / 2 / d_model)",
        "test_positional_encoding",
    ),
    mistake(
        "post-norm-written-as-pre-norm",
        "encoder_layer",
        "the post-norm layer normalises before each sublayer (that is pre-norm)",
        (
            "            a, weights = self.self_attn(x, x, x, mask)  # (B, S, d_model), (B, h, S, S)\n"
            "            x = self.norm1(x + self.dropout(a))\n"
            "            x = self.norm2(x + self.dropout(self.ff(x)))"
        ),
        (
            "            h = self.norm1(x)\n"
            "            a, weights = self.self_attn(h, h, h, mask)\n"
            "            x = x + self.dropout(a)\n"
            "            x = x + self.dropout(self.ff(self.norm2(x)))"
        ),
        "test_encoder_layer",
    ),
    mistake(
        "cross-attention-keys-from-decoder",
        "decoder_layer",
        "cross-attention takes its keys and values from the decoder instead of the encoder's memory",
        "self.cross_attn(y, memory, memory, memory_mask)  # (B, h, T, S)",
        "self.cross_attn(y, y, y, memory_mask)  # (B, h, T, S)",
        "test_decoder_layer",
    ),
    mistake(
        "no-causal-mask-in-decoder",
        "transformer",
        "the decoder's self-attention has no causal mask, so each position sees the future",
        "self_mask = causal_mask(T) & (tgt_in != PAD_ID)[:, None, :]",
        "self_mask = (tgt_in != PAD_ID)[:, None, :]",
        "test_transformer",
    ),
    mistake(
        "schedule-branches-swapped",
        "warmup_schedule",
        "the schedule takes the max of its two branches instead of the min",
        "min(step**-0.5, step * warmup**-1.5)",
        "max(step**-0.5, step * warmup**-1.5)",
        "test_warmup_schedule",
    ),
    mistake(
        "smoothing-spread-over-padding",
        "label_smoothing",
        "the smoothed probability mass is spread over the padding token too",
        "allowed[pad_id] = False",
        "allowed[pad_id] = True",
        "test_label_smoothing",
    ),
    mistake(
        "greedy-does-not-stop-at-eos",
        "greedy_decode",
        "a sequence that emitted <eos> is never marked finished",
        "done = done | (next_token == EOS_ID)",
        "done = done",
        "test_greedy_decode",
    ),
    mistake(
        "parameters-without-layernorm",
        "encoder_layer_parameters",
        "the count leaves out the gains and biases of the two LayerNorms",
        "norms = 2 * 2 * d_model",
        "norms = 0",
        "test_encoder_layer_parameters",
    ),
    mistake(
        "attention-parameters-per-head",
        "encoder_layer_parameters",
        "every head is counted with its own d_model x d_model projections, so the count grows "
        "with the number of heads",
        "attention = 4 * d_model * d_model",
        "attention = 4 * num_heads * d_model * d_model",
        "test_encoder_layer_parameters",
    ),
    mistake(
        "shift-rotates-by-minus-k",
        "relative_shift",
        "each pair of features turns the wrong way, so PE[pos] @ M lands k positions before "
        "pos: check whether M acts on a row vector or a column vector",
        "shift[even + 1, even] = sin\n    shift[even, even + 1] = -sin",
        "shift[even + 1, even] = -sin\n    shift[even, even + 1] = sin",
        "test_relative_shift",
    ),
    mistake(
        "shift-frequency-i-instead-of-2i",
        "relative_shift",
        "pair i turns by k / 10000^(i / d_model) instead of k / 10000^(2i / d_model)",
        "10000 ** (even / d_model)",
        "10000 ** (even / 2 / d_model)",
        "test_relative_shift",
    ),
]
