"""Pairs of fact lists: is list B a reordering of the facts of list A? (chapter 05).

A *fact* is two words, a colour and an object ("red ball"). Sentence A lists 3 to 6 facts,
no colour and no object twice; sentence B is either A's facts in another order (label 1)
or A's facts in another order with one fact altered (label 0)::

    >>> for a, b, label in fact_pairs(2, seed=6):
    ...     print(" ".join(a), "|", " ".join(b), "|", label)
    pink ball black cup red shoe | red shoe black cup pink ball | 1
    black book pink lamp yellow box | yellow box pink lamp black shoe | 0

Two ways to alter a fact (``negatives``):

- ``"replace"``: one word of one fact becomes a word of the same kind that A does not use
  ("red ball" -> "green ball"). B then holds a word with no match in A.
- ``"swap"``: two facts exchange their colours ("red ball, blue box" -> "blue ball, red
  box"). B holds exactly A's words, only paired differently: a model that sees a sentence
  as a bag of words cannot tell this B from a reordering.

Half of the pairs are reorderings, half altered, and the altered ones are shared evenly
between the kinds asked for. Every B is shuffled, so a B that is a reordering may, by
chance, list the facts in A's order.
"""

import random
from collections import Counter

import torch

from attention_course.data.vocab import Vocab

COLOURS = ("red", "blue", "green", "yellow", "black", "white", "grey", "pink", "brown", "orange")
OBJECTS = ("ball", "box", "cup", "hat", "pen", "key", "book", "shoe", "lamp", "bag")
NEGATIVES = ("replace", "swap")


def facts_of(tokens: list[str]) -> list[tuple[str, str]]:
    """The facts of a sentence: its tokens read two at a time, (colour, object)."""
    if len(tokens) % 2:
        raise ValueError(f"a sentence of facts has an even number of tokens, got {len(tokens)}")
    return [(tokens[k], tokens[k + 1]) for k in range(0, len(tokens), 2)]


def is_reordering(a: list[str], b: list[str]) -> bool:
    """True when B lists exactly the facts of A (as a multiset), in any order."""
    return Counter(facts_of(a)) == Counter(facts_of(b))


def _alter(facts: list[tuple[str, str]], kind: str, rng: random.Random) -> list[tuple[str, str]]:
    facts = list(facts)
    if kind == "swap":  # two facts exchange their colours
        i, j = rng.sample(range(len(facts)), 2)
        (ci, oi), (cj, oj) = facts[i], facts[j]
        facts[i], facts[j] = (cj, oi), (ci, oj)
    else:  # one word of one fact becomes a word of its kind that A does not use
        i = rng.randrange(len(facts))
        colour, obj = facts[i]
        if rng.random() < 0.5:
            used = {c for c, _ in facts}
            facts[i] = (rng.choice([c for c in COLOURS if c not in used]), obj)
        else:
            used = {o for _, o in facts}
            facts[i] = (colour, rng.choice([o for o in OBJECTS if o not in used]))
    return facts


def fact_pairs(
    num_pairs: int,
    seed: int = 0,
    min_facts: int = 3,
    max_facts: int = 6,
    negatives: tuple[str, ...] = ("replace",),
) -> list[tuple[list[str], list[str], int]]:
    """``num_pairs`` triples (A tokens, B tokens, label): label 1 when B is a reordering of
    A's facts, 0 when one fact was altered (``negatives``: ``"replace"``, ``"swap"`` or
    both). Labels alternate 1, 0, 1, 0, ... so the set is balanced; the number of facts in
    A is uniform in ``[min_facts, max_facts]``."""
    unknown = set(negatives) - set(NEGATIVES)
    if unknown or not negatives:
        raise ValueError(f"negatives must be a non-empty subset of {NEGATIVES}, got {negatives}")
    if not 2 <= min_facts <= max_facts < min(len(COLOURS), len(OBJECTS)):
        raise ValueError(
            f"need 2 <= min_facts <= max_facts < {min(len(COLOURS), len(OBJECTS))}, "
            f"got {min_facts} and {max_facts}"
        )
    rng = random.Random(seed)
    pairs = []
    for k in range(num_pairs):
        n = rng.randint(min_facts, max_facts)
        facts = list(zip(rng.sample(COLOURS, n), rng.sample(OBJECTS, n), strict=True))
        label = 1 - k % 2
        b_facts = facts if label else _alter(facts, negatives[(k // 2) % len(negatives)], rng)
        b_facts = rng.sample(b_facts, len(b_facts))  # another order
        pairs.append(([w for f in facts for w in f], [w for f in b_facts for w in f], label))
    return pairs


def fact_vocab() -> Vocab:
    """The vocabulary of every colour and object (ids do not depend on the pairs drawn)."""
    return Vocab.build([COLOURS + OBJECTS])


def fact_batch(
    pairs: list[tuple[list[str], list[str], int]], vocab: Vocab
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Encode and right-pad the pairs: A ids ``(N, l_a)``, B ids ``(N, l_b)`` (``<pad>`` is
    id ``vocab.pad_id``) and labels ``(N,)``."""
    if not pairs:
        raise ValueError("fact_batch needs at least one pair")
    ids = {tok: vocab.stoi.get(tok, vocab.unk_id) for tok in vocab.itos}

    def pad(side: int) -> torch.Tensor:  # one tensor from lists: far faster than row by row
        width = max(len(p[side]) for p in pairs)
        rows = [[ids[t] for t in p[side]] + [vocab.pad_id] * (width - len(p[side])) for p in pairs]
        return torch.tensor(rows)  # (N, width)

    return pad(0), pad(1), torch.tensor([p[2] for p in pairs])
