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


def counted_score_multiply_adds(
    kind: str, T: int, S: int, d_query: int, d_key: int, d_attn: int
) -> int:
    """The multiply-adds of the matrix products that the alignment model ``kind`` computes
    while the course's decoder translates one sentence of T target steps from a source of
    S positions: the keys projected once per source (``project_keys``, as
    :class:`Seq2SeqAttention` does), then one score call per step, counted by PyTorch's
    FlopCounterMode (two FLOPs per multiply-add)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    score = make_score(kind, d_query, d_key, d_attn)
    h, states = torch.randn(1, S, d_key), torch.randn(T, 1, d_query)  # (1, S, H_enc), s_i
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        keys = score.project_keys(h)  # once per source  (1, S, A) or None
        for s in states:
            score(s, h, keys)  # one step: (1, S)
    return counter.get_total_flops() // 2
