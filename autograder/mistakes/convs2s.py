"""Chapter 03, ConvS2S: its known mistakes (the format: ``autograder/mistakes/__init__.py``)."""

from autograder.mistakes import mistake

MISTAKES = [
    mistake(
        "gate-on-wrong-half",
        "glu",
        "the gate comes from the wrong half: b * sigmoid(a) instead of a * sigmoid(b)",
        "out = a * torch.sigmoid(b)",
        "out = b * torch.sigmoid(a)",
        "test_glu",
    ),
    mistake(
        "decoder-pads-both-sides",
        "causal_conv",
        "the convolution pads both sides, so output i also sees inputs after i",
        "F.pad(x, (self.kernel_size - 1, 0))",
        "F.pad(x, (self.kernel_size // 2, self.kernel_size // 2))",
        "test_causal_conv",
    ),
    mistake(
        "decoder-pads-k-not-k-minus-1",
        "causal_conv",
        "the input is padded by k instead of k - 1 zeros, so output i sees inputs i - k .. i - 1 and not input i",
        (
            "x = F.pad(x, (self.kernel_size - 1, 0))  # (B, C_in, k - 1 + T): zeros on the left\n"
            "        y = self.conv(x)  # (B, C_out, T)"
        ),
        ("x = F.pad(x, (self.kernel_size, 0))\n        y = self.conv(x)[:, :, :-1]"),
        "test_causal_conv",
    ),
    mistake(
        "no-residual",
        "conv_block",
        "the block returns the gated output without adding the residual x",
        "(glu(h, dim=-1) + x) * math.sqrt(0.5)",
        "glu(h, dim=-1) * math.sqrt(0.5)",
        "test_conv_block",
    ),
    mistake(
        "residual-without-scale",
        "conv_block",
        "the residual sum is not multiplied by sqrt(0.5)",
        "(glu(h, dim=-1) + x) * math.sqrt(0.5)",
        "glu(h, dim=-1) + x",
        "test_conv_block",
    ),
    mistake(
        "no-position-embedding",
        "conv_embedding",
        "the embedding leaves out the position vectors p_j",
        "self.tokens(ids) + self.positions(positions)",
        "self.tokens(ids)",
        "test_conv_embedding",
    ),
    mistake(
        "values-without-input-embedding",
        "multi_step_attention",
        "the values are z_j alone instead of z_j + e_j",
        "c = a @ (z + e)",
        "c = a @ z",
        "test_multi_step_attention",
    ),
    mistake(
        "attention-over-targets",
        "multi_step_attention",
        "the softmax runs over the decoder positions (dim=-2) instead of the source positions",
        "torch.softmax(scores, dim=-1)",
        "torch.softmax(scores, dim=-2)",
        "test_multi_step_attention",
    ),
    mistake(
        "field-not-dilated",
        "dilated_receptive_field",
        "the field is counted as if every block had dilation 1",
        "(kernel_size - 1) * (2**num_layers - 1) + 1",
        "num_layers * (kernel_size - 1) + 1",
        "test_dilated_receptive_field",
    ),
    mistake(
        "field-without-the-output",
        "dilated_receptive_field",
        "the field leaves out the output's own position",
        "(2**num_layers - 1) + 1",
        "(2**num_layers - 1)",
        "test_dilated_receptive_field",
    ),
    mistake(
        "dilations-summed-one-too-large",
        "dilated_receptive_field",
        "the sum of the dilations 1, 2, ..., 2^(L-1) is counted one too large",
        "(2**num_layers - 1)",
        "2**num_layers",
        "test_dilated_receptive_field",
    ),
    mistake(
        "layers-not-dilated",
        "dilated_layers_to_connect",
        "the layers are counted as if every block had dilation 1",
        "math.ceil(math.log2((n - 1) / (kernel_size - 1) + 1))",
        "math.ceil((n - 1) / (kernel_size - 1))",
        "test_dilated_layers_to_connect",
    ),
    mistake(
        "layers-rounded-down",
        "dilated_layers_to_connect",
        "the number of layers is rounded down instead of up",
        "math.ceil(",
        "math.floor(",
        "test_dilated_layers_to_connect",
    ),
    mistake(
        "layers-field-without-the-output",
        "dilated_layers_to_connect",
        "the field that must cover the n tokens leaves out the output's own position (one "
        "layer too many when a stack's field is exactly n tokens)",
        "(n - 1) / (kernel_size - 1)",
        "n / (kernel_size - 1)",
        "test_dilated_layers_to_connect",
    ),
]
