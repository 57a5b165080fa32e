"""Chapter 02's reference, and the measurement its question on scores is checked against.

Chapter 02's reference: the course hands it to chapter 03's race, so it lives with the
student kit (:mod:`attention_course.handed_out.bahdanau_attention`); this module keeps the
grader's name for it."""

from attention_course.handed_out.bahdanau_attention import (  # noqa: F401
    AdditiveScore,
    AttentionDecoder,
    DotScore,
    GeneralScore,
    LocalPPosition,
    Seq2SeqAttention,
    context,
    dot_score,
    gather_window,
    general_score,
    greedy_decode_with_attention,
    local_p_weights,
    make_score,
    masked_softmax,
)


def counted_scores(S: int, D: int, attention: str) -> int:
    """How many source positions per sequence one step of the course's decoder asks its
    score module about, with ``attention`` "global" or "local-p" of half-width D, for a
    source of S positions (the score module's forward, counted)."""
    import torch

    torch.manual_seed(0)
    decoder = AttentionDecoder(9, 4, 6, d_attn=5, attention=attention, window=D)
    seen = []
    score = decoder.score.forward
    decoder.score.forward = lambda s, h, keys=None: seen.append(h.size(1)) or score(s, h, keys)
    mask = torch.ones(2, S, dtype=torch.bool)
    decoder.step(torch.tensor([1, 2]), torch.randn(2, 6), torch.randn(2, S, 6), mask)
    return sum(seen)
