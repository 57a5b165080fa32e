"""Chapter 10, attention since 2023: its known mistakes (the format: ``autograder/mistakes/__init__.py``)."""

from autograder.mistakes import mistake

MISTAKES = [
    mistake(
        "mla-rotary-on-latent",
        "latent_attention",
        "the latent c_t is rotated too, so positions reach the up-projected keys and values; "
        "rotary positions belong to the decoupled part only",
        "c = self.W_dkv(x)  # (B, T, d_latent)",
        "c = rotate(self.W_dkv(x), positions)  # (B, T, d_latent)",
        "test_latent_attention",
    ),
    mistake(
        "mla-rotary-key-not-rotated",
        "latent_attention",
        "the shared rotary key k^R_t is cached and scored without its rotation, instead of "
        "rotate(W_kr x_t, positions)",
        "k_rope = rotate(self.W_kr(x), positions)  # (B, T, d_rope)",
        "k_rope = self.W_kr(x)  # (B, T, d_rope)",
        "test_latent_attention",
    ),
    mistake(
        "mla-rotary-scores-dropped",
        "latent_attention",
        "the queries and keys leave out their rotary parts q^R and k^R, so the layer sees no "
        "position",
        "q, k = torch.cat([q_c, q_r], dim=-1), torch.cat([k_c, k_r], dim=-1)",
        "q, k = q_c, k_c",
        "test_latent_attention",
    ),
    mistake(
        "mla-values-from-key-matrix",
        "latent_attention",
        "the values are up-projected with W_uk, the keys' matrix, instead of W_uv",
        "heads, weights = attention(q, k, c[:, None] @ W_uv.transpose(-2, -1), mask)",
        "heads, weights = attention(q, k, c[:, None] @ W_uk.transpose(-2, -1), mask)",
        "test_latent_attention",
    ),
    mistake(
        "absorbed-scale-without-rope",
        "absorbed_attention",
        "the scores are divided by sqrt(d_head) instead of sqrt(d_head + d_rope), the width of "
        "the whole query",
        "scores = scores / math.sqrt(q_c.size(-1) + q_r.size(-1))",
        "scores = scores / math.sqrt(q_c.size(-1))",
        "test_absorbed_attention",
    ),
    mistake(
        "absorbed-scale-of-the-latent",
        "absorbed_attention",
        "the scores are divided by the square root of the latent's width, that of the folded "
        "query, instead of sqrt(d_head + d_rope)",
        "scores = scores / math.sqrt(q_c.size(-1) + q_r.size(-1))",
        "scores = scores / math.sqrt(c.size(-1) + q_r.size(-1))",
        "test_absorbed_attention",
    ),
    mistake(
        "absorbed-values-without-up-projection",
        "absorbed_attention",
        "the heads' outputs are the weighted sums of the latents, without W_uv^i after them",
        "heads = (weights @ c[:, None]) @ W_uv.transpose(-2, -1)  # (B, h, T, d_head)",
        "heads = (weights @ c[:, None])[..., : q_c.size(-1)]  # (B, h, T, d_head)",
        "test_absorbed_attention",
    ),
    mistake(
        "sinks-evicted",
        "sinks",
        "the cache keeps the last window positions only, and the first tokens, the attention "
        "sinks, are evicted",
        "kept = sorted(set(sinks) | set(recent))",
        "kept = sorted(set(recent))",
        "test_sinks",
    ),
    mistake(
        "window-counts-the-sinks",
        "sinks",
        "the window is shortened by the number of sinks, so the cache holds num_sinks + window "
        "- num_sinks positions instead of the first num_sinks and the last window",
        "recent = range(max(0, length - window), length)",
        "recent = range(max(0, length - window + num_sinks), length)",
        "test_sinks",
    ),
    mistake(
        "streaming-positions-in-the-text",
        "sinks",
        "the cached keys are rotated by their positions in the text and the query by the "
        "text's length, instead of by their places in the cache",
        "keys = rotate(K[kept], torch.arange(n))  # (n, d): rotated by their places in the cache\n"
        "    query = rotate(q, torch.tensor(n))",
        "keys = rotate(K[kept], torch.tensor(kept))  # (n, d): rotated by their places in the cache\n"
        "    query = rotate(q, torch.tensor(K.size(0)))",
        "test_sinks",
    ),
    mistake(
        "streaming-query-at-the-newest-key",
        "sinks",
        "the query is rotated by n - 1, the newest key's place, instead of n, the place after it",
        "query = rotate(q, torch.tensor(n))",
        "query = rotate(q, torch.tensor(n - 1))",
        "test_sinks",
    ),
    mistake(
        "sink-logit-ignored",
        "sinks",
        "the weights are a plain softmax over the keys, which sums to one: the sink's logit is "
        "missing from the denominator",
        "weights = torch.softmax(torch.cat([sink, scores], dim=-1), dim=-1)[..., 1:]",
        "weights = torch.softmax(scores, dim=-1)",
        "test_sinks",
    ),
    mistake(
        "linear-not-causal",
        "linear_attention",
        "the parallel form sums over every position j, future ones included, instead of j <= i",
        "similarity = similarity.tril()  # causal: j <= i",
        "similarity = similarity  # causal: j <= i",
        "test_linear_attention",
    ),
    mistake(
        "linear-without-normaliser",
        "linear_attention",
        "the parallel form is not divided by the sum of the similarities, so the weights of a "
        "row do not sum to one",
        "output = (similarity @ V) / similarity.sum(-1, keepdim=True)",
        "output = similarity @ V",
        "test_linear_attention",
    ),
    mistake(
        "linear-with-softmax",
        "linear_attention",
        "the parallel form normalises the similarities with a softmax over j <= i instead of "
        "dividing them by their sum",
        "output = (similarity @ V) / similarity.sum(-1, keepdim=True)",
        "output = torch.softmax(similarity.masked_fill(similarity == 0, float('-inf')), -1) @ V",
        "test_linear_attention",
    ),
    mistake(
        "recurrent-without-feature-map",
        "linear_attention",
        "the recurrent form uses the queries and keys as they are, without phi(x) = elu(x) + 1",
        "phi_q, phi_k = feature_map(Q), feature_map(K)",
        "phi_q, phi_k = Q, K",
        "test_linear_attention",
    ),
    mistake(
        "delta-sign",
        "delta_rule",
        "the error is subtracted from the state, S - beta (v - S k) k^T, which moves the value "
        "read for k away from v",
        "S = S + beta[..., t, None, None] * error[..., :, None] * k[..., None, :]",
        "S = S - beta[..., t, None, None] * error[..., :, None] * k[..., None, :]",
        "test_delta_rule",
    ),
    mistake(
        "delta-adds-the-value",
        "delta_rule",
        "the state adds beta v_t k_t^T, linear attention's rule, instead of the error "
        "v_t - S_{t-1} k_t",
        "error = v - (S @ k[..., None]).squeeze(-1)  # (..., d_v): v_t - S_{t-1} k_t",
        "error = v  # (..., d_v): v_t - S_{t-1} k_t",
        "test_delta_rule",
    ),
    mistake(
        "delta-normalises-keys",
        "delta_rule",
        "the keys are L2-normalised inside the delta rule, instead of used as they arrive",
        "k, v, q = K[..., t, :], V[..., t, :], Q[..., t, :]",
        "k, v, q = F.normalize(K[..., t, :], dim=-1), V[..., t, :], Q[..., t, :]",
        "test_delta_rule",
    ),
    mistake(
        "chunked-state-not-carried",
        "delta_rule_chunked",
        "each chunk's writes ignore the state carried from the chunks before (v_t - S k_t "
        "without S k_t), as if every chunk started from zero",
        "target = b * (v - k @ S.transpose(-2, -1))",
        "target = b * v",
        "test_delta_rule_chunked",
    ),
    mistake(
        "chunked-outputs-without-state",
        "delta_rule_chunked",
        "the outputs read the chunk's own writes only, without S q_t, what the state carried "
        "into the chunk gives",
        "outputs.append(q @ S.transpose(-2, -1) + (q @ k.transpose(-2, -1)).tril() @ writes)",
        "outputs.append((q @ k.transpose(-2, -1)).tril() @ writes)",
        "test_delta_rule_chunked",
    ),
    mistake(
        "chunked-reads-before-its-write",
        "delta_rule_chunked",
        "a query reads the writes of the earlier positions of its chunk only, not its own "
        "position's, instead of s <= t",
        "(q @ k.transpose(-2, -1)).tril() @ writes)",
        "(q @ k.transpose(-2, -1)).tril(-1) @ writes)",
        "test_delta_rule_chunked",
    ),
    mistake(
        "interpolation-multiplies",
        "stretching",
        "the frequencies are multiplied by the scale, which stretches the angles further, "
        "instead of divided",
        "stretched = theta / scale",
        "stretched = theta * scale",
        "test_stretching",
    ),
    mistake(
        "yarn-ramp-reversed",
        "stretching",
        "YaRN interpolates the fast pairs and keeps the slow ones: the ramp's two ends are swapped",
        "stretched = (1 - ramp) * theta / scale + ramp * theta",
        "stretched = ramp * theta / scale + (1 - ramp) * theta",
        "test_stretching",
    ),
    mistake(
        "yarn-turns-without-2pi",
        "stretching",
        "the turns are counted as L theta_i, without dividing by 2 pi, instead of L / lambda_i",
        "turns = train_length * theta / (2 * math.pi)  # r_i = L / lambda_i",
        "turns = train_length * theta  # r_i = L / lambda_i",
        "test_stretching",
    ),
    mistake(
        "yarn-ramp-not-clipped",
        "stretching",
        "the ramp gamma is not clipped to [0, 1], so fast pairs get frequencies above theta and "
        "slow ones below theta / scale",
        "ramp = ((turns - alpha) / (beta - alpha)).clamp(0.0, 1.0)  # gamma_i",
        "ramp = (turns - alpha) / (beta - alpha)  # gamma_i",
        "test_stretching",
    ),
    mistake(
        "yarn-length-of-the-next-pair",
        "yarn_shortest_length",
        "the length is that of pair num_kept, the first pair not asked for, instead of pair "
        "num_kept - 1, the slowest of the first num_kept",
        "theta = base ** (-2 * (num_kept - 1) / d)",
        "theta = base ** (-2 * num_kept / d)",
        "test_yarn_shortest_length",
    ),
    mistake(
        "yarn-length-without-2pi",
        "yarn_shortest_length",
        "the turns are counted as L theta, without dividing by 2 pi, instead of L / lambda",
        "length = math.ceil(2 * math.pi * beta / theta)",
        "length = math.ceil(beta / theta)",
        "test_yarn_shortest_length",
    ),
    mistake(
        "yarn-length-rounded-down",
        "yarn_shortest_length",
        "the length is rounded down, one position short of the turns beta, instead of up",
        "length = math.ceil(2 * math.pi * beta / theta)",
        "length = math.floor(2 * math.pi * beta / theta)",
        "test_yarn_shortest_length",
    ),
    mistake(
        "yarn-length-exponent-without-2",
        "yarn_shortest_length",
        "pair i's frequency is taken as base^(-i/d) instead of base^(-2i/d)",
        "theta = base ** (-2 * (num_kept - 1) / d)",
        "theta = base ** (-(num_kept - 1) / d)",
        "test_yarn_shortest_length",
    ),
    mistake(
        "cheaper-one-position-short",
        "absorbed_cheaper_from",
        "the answer is the last cache at which the absorbed step is not cheaper, one position "
        "short of the first at which it is",
        "length = max(num_new, num_new * d_head * d_latent // saved + 1)",
        "length = max(num_new, num_new * d_head * d_latent // saved)",
        "test_absorbed_cheaper_from",
    ),
    mistake(
        "cheaper-below-the-new-tokens",
        "absorbed_cheaper_from",
        "the answer may be a cache shorter than the step's own new tokens, instead of at least "
        "num_new",
        "length = max(num_new, num_new * d_head * d_latent // saved + 1)",
        "length = num_new * d_head * d_latent // saved + 1",
        "test_absorbed_cheaper_from",
    ),
    mistake(
        "cheaper-never-none",
        "absorbed_cheaper_from",
        "the answer is a length even when the absorbed step is never cheaper, instead of None",
        "    if saved <= 0:\n        return None\n",
        "",
        "test_absorbed_cheaper_from",
    ),
]
