"""Common mistakes, one per mutant, for every chapter: each must lose points on the test
cells it names and only there.

A mutant replaces ``old`` (which must occur exactly once) by ``new`` in one solution cell.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    name: str
    cell: str  # grade id of the solution cell to edit
    old: str
    new: str
    breaks: frozenset  # grade ids of the test cells that must lose points


def mutant(name, cell, old, new, *breaks):
    return Mutant(name, cell, old, new, frozenset(breaks))


SDPA = "scaled_dot_product_attention"
SDPA_TESTS = ("test_attention_unmasked", "test_attention_masked")
MHA_TESTS = ("test_multi_head_attention", "test_multi_head_masks")
BLOCKED_TESTS = ("test_blocked_attention", "test_blocked_attention_masked")

MUTANTS = {
    "03_convs2s": [
        mutant(
            "gate-on-wrong-half",
            "glu",
            "out = a * torch.sigmoid(b)",
            "out = b * torch.sigmoid(a)",
            "test_glu",
        ),
        mutant(
            "decoder-pads-both-sides",
            "causal_conv",
            "F.pad(x, (self.kernel_size - 1, 0))",
            "F.pad(x, (self.kernel_size // 2, self.kernel_size // 2))",
            "test_causal_conv",
        ),
        mutant(
            "decoder-pads-k-not-k-minus-1",
            "causal_conv",
            "x = F.pad(x, (self.kernel_size - 1, 0))  # (B, C_in, k - 1 + T): zeros on the left\n"
            "        y = self.conv(x)  # (B, C_out, T)",
            "x = F.pad(x, (self.kernel_size, 0))\n        y = self.conv(x)[:, :, :-1]",
            "test_causal_conv",
        ),
        mutant(
            "no-residual",
            "conv_block",
            "(glu(h, dim=-1) + x) * math.sqrt(0.5)",
            "glu(h, dim=-1) * math.sqrt(0.5)",
            "test_conv_block",
        ),
        mutant(
            "residual-without-scale",
            "conv_block",
            "(glu(h, dim=-1) + x) * math.sqrt(0.5)",
            "glu(h, dim=-1) + x",
            "test_conv_block",
        ),
        mutant(
            "no-position-embedding",
            "conv_embedding",
            "self.tokens(ids) + self.positions(positions)",
            "self.tokens(ids)",
            "test_conv_embedding",
        ),
        mutant(
            "values-without-input-embedding",
            "multi_step_attention",
            "c = a @ (z + e)",
            "c = a @ z",
            "test_multi_step_attention",
        ),
        mutant(
            "attention-over-targets",
            "multi_step_attention",
            "torch.softmax(scores, dim=-1)",
            "torch.softmax(scores, dim=-2)",
            "test_multi_step_attention",
        ),
        mutant(
            "receptive-field-off-by-one",
            "receptive_field",
            "num_layers * (kernel_size - 1) + 1",
            "num_layers * (kernel_size - 1)",
            "test_receptive_field",
        ),
        mutant(
            "layers-rounded-down",
            "layers_to_connect",
            "math.ceil((n - 1) / (kernel_size - 1))",
            "(n - 1) // (kernel_size - 1)",
            "test_layers_to_connect",
        ),
    ],
    "04_dot_product_attention": [
        mutant(
            "no-scaling",
            SDPA,
            "Q @ K.transpose(-2, -1) / math.sqrt(d_k)",
            "Q @ K.transpose(-2, -1)",
            *SDPA_TESTS,
        ),
        mutant(
            "softmax-over-queries",
            SDPA,
            "torch.softmax(scores, dim=-1)",
            "torch.softmax(scores, dim=-2)",
            *SDPA_TESTS,
        ),
        mutant("keys-not-transposed", SDPA, "Q @ K.transpose(-2, -1)", "Q @ K", *SDPA_TESTS),
        mutant(
            "inverted-mask",
            SDPA,
            "scores.masked_fill(~mask,",
            "scores.masked_fill(mask,",
            "test_attention_masked",
        ),
        mutant(
            "mask-after-softmax",
            SDPA,
            '    if mask is not None:\n        scores = scores.masked_fill(~mask, float("-inf"))\n'
            "    weights = torch.softmax(scores, dim=-1)  # (..., T_q, T_k)",
            "    weights = torch.softmax(scores, dim=-1)\n"
            "    if mask is not None:\n        weights = weights.masked_fill(~mask, 0.0)",
            "test_attention_masked",
        ),
        mutant(
            "nan-for-fully-masked-row",
            SDPA,
            "weights = torch.nan_to_num(weights, nan=0.0)",
            "weights = weights",
            "test_attention_masked",
        ),
        mutant(
            "padding-off-by-one",
            "padding_mask",
            "positions[None, :] < lengths[:, None]",
            "positions[None, :] <= lengths[:, None]",
            "test_padding_mask",
        ),
        mutant(
            "causal-future-leak", "causal_mask", "torch.tril(", "torch.triu(", "test_causal_mask"
        ),
        mutant(
            "values-from-keys",
            "self_attention",
            "self.W_v(x)  #",
            "self.W_k(x)  #",
            "test_self_attention",
        ),
        mutant(
            "self-attention-drops-mask",
            "self_attention",
            "scaled_dot_product_attention(Q, K, V, mask)",
            "scaled_dot_product_attention(Q, K, V)",
            "test_self_attention",
        ),
    ],
    "01_rnn_bottleneck": [
        mutant(
            "encoder-reads-padding",
            "encoder",
            "        packed = pack_padded_sequence(x, src_lengths.cpu(), batch_first=True, enforce_sorted=False)\n"
            "        packed_states, h_n = self.rnn(packed)  # h_n: (1, B, H), in the batch's own order\n"
            "        states, _ = pad_packed_sequence(packed_states, batch_first=True, total_length=src.size(1))",
            "        states, h_n = self.rnn(x)  # the GRU runs over the padding too",
            "test_encoder",
        ),
        mutant(
            "encoder-final-from-last-column",
            "encoder",
            "final = h_n[-1]",
            "final = states[:, -1]",
            "test_encoder",
        ),
        mutant(
            "logits-from-previous-state",
            "decoder",
            "        hidden = self.cell(y, hidden)  # s_t  (B, H)\n        logits = self.out(hidden)",
            "        logits = self.out(hidden)\n        hidden = self.cell(y, hidden)",
            "test_decoder_step",
        ),
        mutant(
            "teacher-forcing-shifted-by-one",
            "seq2seq",
            "self.decode_step(tgt_in[:, t], hidden, memory)",
            "self.decode_step(tgt_in[:, t - 1], hidden, memory)",
            "test_teacher_forcing",
        ),
        mutant(
            "decoder-ignores-the-source",
            "seq2seq",
            "hidden = memory.final  # s_0",
            "hidden = torch.zeros_like(memory.final)  # s_0",
            "test_teacher_forcing",
        ),
        mutant(
            "loss-counts-padding",
            "sequence_loss",
            "tgt_out.reshape(-1), ignore_index=pad_id)",
            "tgt_out.reshape(-1))",
            "test_sequence_loss",
        ),
        mutant(
            "greedy-does-not-stop-per-sequence",
            "greedy_decode",
            "logits.argmax(dim=-1).masked_fill(done, pad_id)",
            "logits.argmax(dim=-1)",
            "test_greedy_decode",
        ),
        mutant(
            "greedy-stops-at-first-eos",
            "greedy_decode",
            "if done.all():",
            "if done.any():",
            "test_greedy_decode",
        ),
    ],
    "02_bahdanau_attention": [
        mutant(
            "additive-score-without-tanh",
            "additive_score",
            "self.v(torch.tanh(query + keys))",
            "self.v(query + keys)",
            "test_additive_score",
        ),
        mutant(
            "additive-score-ignores-given-keys",
            "additive_score",
            "keys = self.U(h) if keys is None else keys",
            "keys = self.U(h)",
            "test_additive_score",
        ),
        mutant(
            "softmax-over-batch-axis",
            "masked_softmax",
            "torch.softmax(scores, dim=-1)",
            "torch.softmax(scores, dim=0)",
            "test_masked_softmax",
        ),
        mutant(
            "padding-left-unmasked",
            "masked_softmax",
            'scores = scores.masked_fill(~mask, float("-inf"))',
            "scores = scores",
            "test_masked_softmax",
        ),
        mutant(
            "context-summed-over-features",
            "context",
            ".sum(dim=1)",
            ".sum(dim=-1)",
            "test_context",
        ),
        mutant(
            "context-from-decoder-state",
            "attention_decoder",
            "c = context(weights, enc_states)",
            "c = hidden",
            "test_attention_step",
        ),
        mutant(
            "general-score-transposed",
            "luong_scores",
            "query = s @ W_a",
            "query = (W_a @ s.T).T",
            "test_luong_scores",
        ),
    ],
    "05_multi_head_attention": [
        mutant(
            "heads-split-without-transpose",
            "split_heads",
            "x = x.view(B, T, num_heads, d_k)  # (B, T, h, d_k)\n    x = x.transpose(1, 2)",
            "x = x.reshape(B, num_heads, T, d_k)",
            "test_split_heads",
        ),
        mutant(
            "heads-merged-in-wrong-order",
            "merge_heads",
            "x = x.transpose(1, 2)  # (B, T, h, d_k)",
            "x = x.permute(0, 2, 3, 1)  # (B, T, d_k, h)",
            "test_merge_heads",
        ),
        mutant(
            "no-output-projection",
            "multi_head_attention",
            "output = self.W_o(merge_heads(heads))",
            "output = merge_heads(heads)",
            *MHA_TESTS,
        ),
        mutant(
            "scale-uses-d_model",
            "multi_head_attention",
            "scaled_dot_product_attention(Q, K, V, mask)",
            "scaled_dot_product_attention(Q, K, V, mask, scale=1 / math.sqrt(self.d_model))",
            *MHA_TESTS,
        ),
        mutant(
            "mask-not-broadcast-over-heads",
            "multi_head_attention",
            "mask = mask.unsqueeze(-3)",
            "mask = mask",
            "test_multi_head_masks",
        ),
        mutant(
            "online-softmax-sum-not-rescaled",
            "blocked_attention",
            "l = l * rescale + p.sum(-1, keepdim=True)",
            "l = l + p.sum(-1, keepdim=True)",
            *BLOCKED_TESTS,
        ),
        mutant(
            "last-partial-block-dropped",
            "blocked_attention",
            "range(0, K.size(-2), block_size)",
            "range(0, K.size(-2) - block_size + 1, block_size)",
            *BLOCKED_TESTS,
        ),
        mutant(
            "cost-of-one-head-only",
            "multi_head_cost",
            "multiply_adds = projections + num_heads * per_head",
            "multiply_adds = projections + per_head",
            "test_multi_head_cost",
        ),
    ],
    "06_transformer": [
        mutant(
            "sin-and-cos-swapped",
            "positional_encoding",
            "pe[:, 0::2] = torch.sin(angle)\n    pe[:, 1::2] = torch.cos(angle)",
            "pe[:, 0::2] = torch.cos(angle)\n    pe[:, 1::2] = torch.sin(angle)",
            "test_positional_encoding",
        ),
        mutant(
            "exponent-i-instead-of-2i",
            "positional_encoding",
            "10000 ** (two_i / d_model)",
            "10000 ** (two_i / 2 / d_model)",
            "test_positional_encoding",
        ),
        mutant(
            "post-norm-written-as-pre-norm",
            "encoder_layer",
            "            a, weights = self.self_attn(x, x, x, mask)  # (B, S, d_model), (B, h, S, S)\n"
            "            x = self.norm1(x + self.dropout(a))\n"
            "            x = self.norm2(x + self.dropout(self.ff(x)))",
            "            h = self.norm1(x)\n"
            "            a, weights = self.self_attn(h, h, h, mask)\n"
            "            x = x + self.dropout(a)\n"
            "            x = x + self.dropout(self.ff(self.norm2(x)))",
            "test_encoder_layer",
        ),
        mutant(
            "cross-attention-keys-from-decoder",
            "decoder_layer",
            "self.cross_attn(y, memory, memory, memory_mask)  # (B, h, T, S)",
            "self.cross_attn(y, y, y, memory_mask)  # (B, h, T, S)",
            "test_decoder_layer",
        ),
        mutant(
            "no-causal-mask-in-decoder",
            "transformer",
            "self_mask = causal_mask(T) & (tgt_in != PAD_ID)[:, None, :]",
            "self_mask = (tgt_in != PAD_ID)[:, None, :]",
            "test_transformer",
        ),
        mutant(
            "schedule-branches-swapped",
            "warmup_schedule",
            "min(step**-0.5, step * warmup**-1.5)",
            "max(step**-0.5, step * warmup**-1.5)",
            "test_warmup_schedule",
        ),
        mutant(
            "smoothing-spread-over-padding",
            "label_smoothing",
            "allowed[pad_id] = False",
            "allowed[pad_id] = True",
            "test_label_smoothing",
        ),
        mutant(
            "greedy-does-not-stop-at-eos",
            "greedy_decode",
            "done = done | (next_token == EOS_ID)",
            "done = done",
            "test_greedy_decode",
        ),
    ],
    "07_spatial_transformer": [
        mutant(
            "grid-x-and-y-swapped",
            "affine_grid",
            "torch.stack([xs, ys, torch.ones_like(xs)], dim=-1)",
            "torch.stack([ys, xs, torch.ones_like(xs)], dim=-1)",
            "test_affine_grid",
        ),
        mutant(
            "grid-on-pixel-corners",
            "affine_grid",
            "    x = (2 * torch.arange(W, dtype=theta.dtype) + 1) / W - 1  # (W,) pixel centres\n"
            "    y = (2 * torch.arange(H, dtype=theta.dtype) + 1) / H - 1  # (H,)",
            "    x = torch.linspace(-1, 1, W, dtype=theta.dtype)\n"
            "    y = torch.linspace(-1, 1, H, dtype=theta.dtype)",
            "test_affine_grid",
        ),
        mutant(
            "sampler-neighbour-weights-swapped",
            "bilinear_sample",
            "for m, wx in ((x0, wx0), (x0 + 1, wx1)):",
            "for m, wx in ((x0, wx1), (x0 + 1, wx0)):",
            "test_bilinear_sample",
        ),
        mutant(
            "sampler-clamps-outside-points",
            "bilinear_sample",
            "V = V + values * (wx * wy * inside)[:, None]",
            "V = V + values * (wx * wy)[:, None]",
            "test_bilinear_sample",
        ),
        mutant(
            "sampler-align-corners-true",
            "bilinear_sample",
            "    x = ((grid[..., 0] + 1) * W - 1) / 2  # (N, H_out, W_out), pixel coordinates\n"
            "    y = ((grid[..., 1] + 1) * H - 1) / 2",
            "    x = (grid[..., 0] + 1) / 2 * (W - 1)\n    y = (grid[..., 1] + 1) / 2 * (H - 1)",
            "test_bilinear_sample",
        ),
        mutant(
            "localisation-not-started-at-identity",
            "localisation_net",
            "        nn.init.zeros_(self.fc_theta.weight)\n"
            "        with torch.no_grad():\n"
            "            self.fc_theta.bias.copy_(torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 0.0]))\n",
            "",
            "test_localisation_net",
        ),
        mutant(
            "theta-reshaped-as-3-by-2",
            "localisation_net",
            ".view(-1, 2, 3)  # (N, 2, 3)",
            ".view(-1, 3, 2).transpose(1, 2)",
            "test_localisation_net",
        ),
        mutant(
            "grid-of-the-input-size",
            "spatial_transformer",
            "affine_grid(theta, (N, C, self.out_size, self.out_size))",
            "affine_grid(theta, U.shape)",
            "test_spatial_transformer",
        ),
        mutant(
            "theta-detached",
            "spatial_transformer",
            "affine_grid(theta, (N, C, self.out_size, self.out_size))",
            "affine_grid(theta.detach(), (N, C, self.out_size, self.out_size))",
            "test_spatial_transformer",
        ),
        mutant(
            "undo-with-the-inverse-pose",
            "undo_distortion",
            "[[scale * c, -scale * s, t_x], [scale * s, scale * c, t_y]]",
            "[[c / scale, s / scale, -t_x], [-s / scale, c / scale, -t_y]]",
            "test_undo_distortion",
        ),
    ],
}
