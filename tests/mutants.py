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

MUTANTS = {
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
}
