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
        "mla-scale-without-rope",
        "latent_attention",
        "the scores are divided by sqrt(d_head) instead of sqrt(d_head + d_rope), the width of "
        "the whole query",
        "            self.d_head + self.d_rope\n        )",
        "            self.d_head\n        )",
        "test_latent_attention",
    ),
    mistake(
        "mla-rotary-scores-dropped",
        "latent_attention",
        "the scores leave out the rotary part q^R . k^R, so the layer sees no position",
        "scores = (content + q_r @ k_rope[:, None].transpose(-2, -1)) / math.sqrt(",
        "scores = content / math.sqrt(",
        "test_latent_attention",
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
        "equivalent-heads-keys-only",
        "equivalent_kv_heads",
        "a key/value head is counted as d_head numbers a position, its keys only, not its keys "
        "and its values",
        "heads = (d_latent + d_rope) / (2 * d_head)",
        "heads = (d_latent + d_rope) / d_head",
        "test_equivalent_kv_heads",
    ),
    mistake(
        "equivalent-heads-without-rope",
        "equivalent_kv_heads",
        "the latent cache is counted as d_latent numbers a position, without the shared rotary "
        "key it also holds",
        "heads = (d_latent + d_rope) / (2 * d_head)",
        "heads = d_latent / (2 * d_head)",
        "test_equivalent_kv_heads",
    ),
    mistake(
        "state-without-normaliser",
        "state_smaller_from",
        "the state is counted as S alone, without the normaliser z that the recurrent form also "
        "carries",
        "state = num_heads * (d_k * d_v + d_k)",
        "state = num_heads * d_k * d_v",
        "test_state_smaller_from",
    ),
    mistake(
        "state-cache-as-large",
        "state_smaller_from",
        "the answer is the longest context whose cache is not larger than the state, one "
        "position short of the first whose cache is larger",
        "context = state // per_position + 1",
        "context = state // per_position",
        "test_state_smaller_from",
    ),
    mistake(
        "state-cache-with-query-heads",
        "state_smaller_from",
        "the KV cache is counted with num_heads key/value heads instead of num_kv_heads",
        "per_position = num_kv_heads * (d_k + d_v)",
        "per_position = num_heads * (d_k + d_v)",
        "test_state_smaller_from",
    ),
]
