"""Chapter 08, attention in language models: its known mistakes (the format: ``autograder/mistakes/__init__.py``)."""

from autograder.mistakes import mistake

MISTAKES = [
    mistake(
        "rotary-pairs-halves",
        "apply_rotary",
        "the features are paired as the two halves (x_i, x_{i + d/2}), the GPT-NeoX convention, "
        "instead of neighbours (x_{2i}, x_{2i+1}) as the exercise states",
        "x1, x2 = x[..., 0::2], x[..., 1::2]",
        "x1, x2 = x[..., : d // 2], x[..., d // 2 :]",
        "test_apply_rotary",
    ),
    mistake(
        "rotary-frequencies-without-2i",
        "apply_rotary",
        "the angles use theta_i = base^(-i/d) for pair i instead of base^(-2i/d)",
        "angle = positions[..., None].to(torch.float32) * theta",
        "angle = positions[..., None].to(torch.float32) * theta.sqrt()",
        "test_apply_rotary",
    ),
    mistake(
        "rotary-by-the-opposite-angle",
        "apply_rotary",
        "each pair is turned by -m theta_i (clockwise), the convention of nanochat's code, "
        "instead of +m theta_i as the exercise states",
        "[x1 * cos - x2 * sin, x1 * sin + x2 * cos]",
        "[x1 * cos + x2 * sin, -x1 * sin + x2 * cos]",
        "test_apply_rotary",
    ),
    mistake(
        "alibi-slopes-ratio-one-half",
        "alibi",
        "the slopes are 1/2, 1/4, ... 1/2^n whatever the number of heads, instead of 2^(-8k/n)",
        "slopes = 2.0 ** (-8.0 * k / num_heads)",
        "slopes = 2.0 ** (-k)",
        "test_alibi",
    ),
    mistake(
        "alibi-bias-positive",
        "alibi",
        "the bias is +m (i - j), which favours distant keys, instead of -m (i - j)",
        "bias = -slopes[:, None, None] * (i - j).to(slopes.dtype)",
        "bias = slopes[:, None, None] * (i - j).to(slopes.dtype)",
        "test_alibi",
    ),
    mistake(
        "alibi-without-causal-mask",
        "alibi",
        "the future keys j > i get the bias -m (i - j) > 0 instead of -inf: ALiBi's bias "
        "replaces the position embedding, not the causal mask",
        'bias = bias.masked_fill(j > i, float("-inf"))',
        "bias = bias",
        "test_alibi",
    ),
    mistake(
        "alibi-queries-at-the-start",
        "alibi",
        "the queries are taken as positions 0..T_q - 1, not the last T_q of the T_k positions, "
        "which is wrong as soon as a cache holds earlier keys",
        "i = torch.arange(T_k - T_q, T_k)[:, None]",
        "i = torch.arange(T_q)[:, None]",
        "test_alibi",
    ),
    mistake(
        "window-one-too-wide",
        "sliding_window_mask",
        "each query sees window + 1 keys: i - j <= window instead of i - j < window",
        "(i - j < window)",
        "(i - j <= window)",
        "test_sliding_window_mask",
    ),
    mistake(
        "window-not-causal",
        "sliding_window_mask",
        "the band is symmetric, |i - j| < window, so queries see future keys",
        "mask = (i - j >= 0) & (i - j < window)",
        "mask = (i - j).abs() < window",
        "test_sliding_window_mask",
    ),
    mistake(
        "alibi-slopes-interpolated",
        "alibi",
        "for a head count that is not a power of two, the slopes follow the ALiBi authors' "
        "interpolation between two powers of two, not the formula the exercise gives for every n",
        (
            "    k = torch.arange(1, num_heads + 1, dtype=torch.float32)\n"
            "    slopes = 2.0 ** (-8.0 * k / num_heads)  # (h,)"
        ),
        (
            "    def powers(n):\n"
            "        return [2.0 ** (-8.0 * k / n) for k in range(1, n + 1)]\n"
            "\n"
            "    if math.log2(num_heads).is_integer():\n"
            "        slopes = torch.tensor(powers(num_heads))\n"
            "    else:\n"
            "        closest = 2 ** math.floor(math.log2(num_heads))\n"
            "        extra = powers(2 * closest)[0::2][: num_heads - closest]\n"
            "        slopes = torch.tensor(powers(closest) + extra)"
        ),
        "test_alibi",
    ),
    mistake(
        "gqa-groups-interleaved",
        "grouped_query_attention",
        "the key/value heads are tiled with repeat, so query head i reads key/value head "
        "i % h_kv instead of i // (h / h_kv)",
        "K = K.repeat_interleave(group, dim=1)",
        "K = K.repeat(1, group, 1, 1)",
        "test_grouped_query_attention",
    ),
    mistake(
        "gqa-values-rotated",
        "grouped_query_attention",
        "the values are rotated too; rotary positions turn only queries and keys",
        "Q, K = apply_rotary(Q, positions), apply_rotary(K, positions)",
        "Q, K, V = apply_rotary(Q, positions), apply_rotary(K, positions), apply_rotary(V, positions)",
        "test_grouped_query_attention",
    ),
    mistake(
        "gqa-output-not-projected",
        "grouped_query_attention",
        "the merged heads are returned without the output projection W_o",
        "output = self.W_o(merge_heads(heads))",
        "output = merge_heads(heads)",
        "test_grouped_query_attention",
    ),
    mistake(
        "gqa-cache-ignored",
        "grouped_query_attention",
        "the layer hands its keys and values to the cache but attends only to the new ones, "
        "not to what the cache returns",
        "K, V = cache.update(K, V)",
        "cache.update(K, V)",
        "test_grouped_query_attention",
    ),
    mistake(
        "gqa-keys-rotated-after-caching",
        "grouped_query_attention",
        "the keys are rotated after the cache, so the cache keeps keys without their "
        "positions and every cached key is turned by the newest position",
        (
            "            Q, K = apply_rotary(Q, positions), apply_rotary(K, positions)\n"
            "        if cache is not None:\n"
            "            K, V = cache.update(K, V)  # (B, h_kv, T_k, d_k): the past and the new"
        ),
        (
            "            Q = apply_rotary(Q, positions)\n"
            "        if cache is not None:\n"
            "            K, V = cache.update(K, V)\n"
            "        if positions is not None:\n"
            "            K = apply_rotary(K, positions)"
        ),
        "test_grouped_query_attention",
    ),
    mistake(
        "cache-forgets-the-new-keys",
        "update_cache",
        "the keys and values returned stop before the new positions, so a new token cannot "
        "attend to itself",
        "K, V = K_cache[:, :, :stop], V_cache[:, :, :stop]",
        "K, V = K_cache[:, :, :start], V_cache[:, :, :start]",
        "test_update_cache",
    ),
    mistake(
        "cache-returns-only-the-new",
        "update_cache",
        "only the new keys and values are returned, so a new token sees none of the past",
        "K, V = K_cache[:, :, :stop], V_cache[:, :, :stop]",
        "K, V = K_new, V_new",
        "test_update_cache",
    ),
    mistake(
        "cache-written-at-the-start",
        "update_cache",
        "the new keys and values are written at position 0 every time, over the past",
        "K_cache[:, :, start:stop] = K_new\n    V_cache[:, :, start:stop] = V_new",
        "K_cache[:, :, : stop - start] = K_new\n    V_cache[:, :, : stop - start] = V_new",
        "test_update_cache",
    ),
    mistake(
        "reach-rounded-down",
        "window_layers_to_reach",
        "the number of layers is rounded down: the last layer that reaches only part of the way "
        "is left out",
        "layers = math.ceil((context - 1) / (window - 1))",
        "layers = (context - 1) // (window - 1)",
        "test_window_layers_to_reach",
    ),
    mistake(
        "reach-window-times-layers",
        "window_layers_to_reach",
        "each layer is counted as reaching window positions further back, but the window "
        "includes the position itself",
        "layers = math.ceil((context - 1) / (window - 1))",
        "layers = math.ceil((context - 1) / window)",
        "test_window_layers_to_reach",
    ),
    mistake(
        "reach-counts-the-last-token",
        "window_layers_to_reach",
        "the layers are counted as reaching context positions back from the last token, which "
        "sees itself without any layer",
        "layers = math.ceil((context - 1) / (window - 1))",
        "layers = math.ceil(context / (window - 1))",
        "test_window_layers_to_reach",
    ),
    mistake(
        "max-len-keys-only",
        "kv_cache_max_len",
        "only the keys are counted; a layer caches its values too",
        "per_position = 2 * num_layers",
        "per_position = num_layers",
        "test_kv_cache_max_len",
    ),
    mistake(
        "max-len-assume-float32",
        "kv_cache_max_len",
        "every number takes 4 bytes, whatever the dtype",
        "d_k * dtype.itemsize",
        "d_k * 4",
        "test_kv_cache_max_len",
    ),
    mistake(
        "max-len-one-sequence",
        "kv_cache_max_len",
        "the cache is counted for one sequence: every sequence of the batch has its own",
        "num_layers * batch * num_kv_heads",
        "num_layers * num_kv_heads",
        "test_kv_cache_max_len",
    ),
    mistake(
        "max-len-rounded-up",
        "kv_cache_max_len",
        "the context is rounded up, so its caches take more than the budget",
        "max_len = budget // per_position",
        "max_len = -(-budget // per_position)",
        "test_kv_cache_max_len",
    ),
    mistake(
        "prefix-score-on-the-occurrence",
        "prefix_matching_score",
        "the score counts the weight on the earlier occurrence of the current token itself, "
        "not on the token that followed it",
        "target[:, :, 1:] = same[:, :, :-1]",
        "target[:, :, :-1] = same[:, :, :-1]",
        "test_prefix_matching_score",
    ),
    mistake(
        "prefix-score-averaged-over-all-queries",
        "prefix_matching_score",
        "the score is averaged over every query, those without a target included",
        "/ has.sum().clamp_min(1)",
        "/ has.numel()",
        "test_prefix_matching_score",
    ),
    mistake(
        "prefix-score-averaged-per-sequence",
        "prefix_matching_score",
        "the score is averaged within each sequence first, so that a query counts more in a "
        "sequence with fewer queries that have a target",
        "score = (score * has[:, None]).sum((0, 2)) / has.sum().clamp_min(1)",
        "score = ((score * has[:, None]).sum(2) / has.sum(-1)[:, None].clamp_min(1)).mean(0)",
        "test_prefix_matching_score",
    ),
    mistake(
        "prefix-score-sees-the-future",
        "prefix_matching_score",
        "a query whose token comes again only later is counted as having a target: a target "
        "j is never after the query (j <= i)",
        "target = target & causal",
        "target = target",
        "test_prefix_matching_score",
    ),
    mistake(
        "prefix-score-nan-without-targets",
        "prefix_matching_score",
        "with no query that has a target, the mean over an empty set gives NaN where the text "
        "asks for 0",
        "has.sum().clamp_min(1)",
        "has.sum()",
        "test_prefix_matching_score",
    ),
]
