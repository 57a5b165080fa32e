r"""Multi-query associative recall (Arora et al. 2023, Zoology's MQAR), generated.

A sequence lists ``num_pairs`` key-value pairs and then asks for ``num_queries`` of the
keys again; the target at each asked key is its value::

    k_3 v_7  k_1 v_2  k_9 v_7  ...  |  k_1 -> v_2   k_9 -> v_7   ...

Keys and values have tokens of their own (keys ``0 .. num_keys - 1``, values after them),
the keys of one sequence are distinct, and nothing but the pairs in the same sequence says
which value a key has: a model must hold the pairs until they are asked for. Softmax
attention keeps every pair in its cache; a recurrent state of fixed size must compress
them, and past some number of pairs it cannot (chapter 01's bottleneck again).
"""

from __future__ import annotations

import torch

IGNORE = -100  # the target at positions that ask nothing (F.cross_entropy's ignore_index)


def recall_vocab_size(num_keys: int = 64, num_values: int = 64) -> int:
    return num_keys + num_values


def associative_recall(
    batch: int,
    num_pairs: int,
    num_queries: int,
    generator: torch.Generator,
    num_keys: int = 64,
    num_values: int = 64,
):
    """Inputs (B, 2 num_pairs + num_queries) and targets of the same shape: the value at
    each query position, ``IGNORE`` elsewhere. The queries ask distinct keys of the
    sequence, in random order."""
    if not 1 <= num_pairs <= num_keys:
        raise ValueError(f"num_pairs must be between 1 and num_keys = {num_keys}, got {num_pairs}")
    if not 1 <= num_queries <= num_pairs:
        raise ValueError(f"num_queries must be between 1 and num_pairs = {num_pairs}")
    keys = torch.rand(batch, num_keys, generator=generator).argsort(-1)[:, :num_pairs]  # (B, N)
    values = num_keys + torch.randint(0, num_values, (batch, num_pairs), generator=generator)
    asked = torch.rand(batch, num_pairs, generator=generator).argsort(-1)[:, :num_queries]  # (B, Q)
    pairs = torch.stack([keys, values], dim=-1).flatten(1)  # (B, 2N): k v k v ...
    inputs = torch.cat([pairs, keys.gather(1, asked)], dim=1)  # (B, 2N + Q)
    targets = torch.full_like(inputs, IGNORE)
    targets[:, 2 * num_pairs :] = values.gather(1, asked)
    return inputs, targets
