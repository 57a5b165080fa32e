"""Chapter 10's associative-recall data and model (attention_course/data/recall.py,
attention_course/recall_model.py), with the reference parts."""

import pytest
import torch

from attention_course.data.recall import IGNORE, associative_recall
from attention_course.recall_model import (
    MIXERS,
    MixerParts,
    RecallConfig,
    RecallModel,
    recall_loss,
)
from autograder.reference.language_model import attention
from autograder.reference.since_2023 import delta_rule, linear_attention, state_numbers

PARTS = MixerParts(attention, linear_attention, delta_rule)


def test_recall_asks_keys_of_its_own_pairs_and_wants_their_values():
    x, y = associative_recall(5, 6, 4, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (5, 16)
    assert (y[:, :12] == IGNORE).all() and (y[:, 12:] >= 64).all()
    for b in range(5):
        pairs = dict(zip(x[b, 0:12:2].tolist(), x[b, 1:12:2].tolist(), strict=True))
        assert len(pairs) == 6  # the keys of a sequence are distinct
        asked = x[b, 12:].tolist()
        assert len(set(asked)) == 4 and [pairs[k] for k in asked] == y[b, 12:].tolist()


@pytest.mark.parametrize("pairs, queries", [(0, 1), (65, 1), (4, 5), (4, 0)])
def test_recall_refuses_impossible_sizes(pairs, queries):
    with pytest.raises(ValueError):
        associative_recall(2, pairs, queries, torch.Generator().manual_seed(0))


@pytest.mark.parametrize("mixer", MIXERS)
def test_every_mixer_is_causal_and_trains(mixer):
    torch.manual_seed(0)
    model = RecallModel(RecallConfig(mixer=mixer, d_model=16, num_heads=2, d_ff=32), PARTS)
    x, y = associative_recall(3, 5, 3, torch.Generator().manual_seed(1))
    logits = model(x)
    assert logits.shape == (3, 13, 128)
    changed = x.clone()
    changed[:, -1] = 0  # the last token changes nothing before it
    torch.testing.assert_close(model(changed)[:, :-1], logits[:, :-1])
    recall_loss(model, (x, y)).backward()
    assert all(p.grad is not None for p in model.parameters())


def test_state_numbers_grow_with_the_context_for_softmax_only():
    soft, delta = RecallConfig("softmax", d_model=64), RecallConfig("delta", d_model=64)
    assert state_numbers(soft, 200) == 2 * state_numbers(soft, 100) == 2 * 2 * 2 * 64 * 100
    assert state_numbers(delta, 100) == state_numbers(delta, 10_000) == 2 * 64 * 64
    with pytest.raises(ValueError):
        RecallModel(RecallConfig("gru"), PARTS)


@pytest.mark.parametrize(
    "shape, cache",
    [
        ({}, 2 * 4 * 4),
        ({"num_kv_heads": 2}, 2 * 2 * 4),
        ({"num_kv_heads": 1}, 2 * 4),
        ({"d_latent": 6}, 6),
    ],  # fmt: skip
)
def test_softmax_attention_caches_what_its_keys_and_values_are_made_from(shape, cache):
    """Shared key/value heads (GQA, MQA) and a latent (MLA): the cache is what the keys and
    values of a token are computed from, and the model stays causal."""
    cfg = RecallConfig(d_model=16, num_heads=4, d_ff=32, **shape)
    assert cfg.cache_numbers() == cache
    torch.manual_seed(0)
    model = RecallModel(cfg, PARTS)
    mixer = model.mixers[0]
    x, _ = associative_recall(2, 5, 3, torch.Generator().manual_seed(1))
    kept = []
    source = mixer.W_dkv if "d_latent" in shape else mixer.W_k
    handle = source.register_forward_hook(lambda module, args, out: kept.append(out))
    logits = model(x)
    handle.remove()
    per_token = kept[0].shape[-1] * (2 if "d_latent" not in shape else 1)  # keys and values
    assert per_token == cache
    changed = x.clone()
    changed[:, -1] = 0
    torch.testing.assert_close(model(changed)[:, :-1], logits[:, :-1])


def test_only_softmax_attention_shares_heads_or_reads_a_latent():
    with pytest.raises(ValueError, match="softmax"):
        RecallModel(RecallConfig("linear", d_model=16, num_heads=4, num_kv_heads=2), PARTS)
    with pytest.raises(ValueError, match="multiple"):
        RecallModel(RecallConfig(d_model=16, num_heads=4, num_kv_heads=3), PARTS)
