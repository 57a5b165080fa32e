"""Chapter 04's masks, as the course hands them to the chapters after it (chapter 06's
Transformer). Bool, True where a query may attend to a key."""

import torch


def padding_mask(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """(B,) lengths -> bool (B, 1, max_len): key j of sequence b is real when j < lengths[b]
    (the middle axis broadcasts over the queries)."""
    width = int(lengths.max()) if max_len is None else max_len
    return torch.arange(width, device=lengths.device).expand(len(lengths), 1, width) < lengths.view(
        -1, 1, 1
    )


def causal_mask(size: int, device=None) -> torch.Tensor:
    """bool (T, T): query i may attend to keys 0 .. i."""
    rows = torch.arange(size, device=device)
    return rows.view(-1, 1) >= rows.view(1, -1)
