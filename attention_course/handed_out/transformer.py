"""Chapter 06's positional encoding, as the course hands it to the chapters after it
(chapter 08's language models with sinusoidal positions): in a kit only from the kit after
chapter 06's (``attention_course/handed_out/__init__.py``)."""

import torch


def sinusoids(max_len: int, d_model: int) -> torch.Tensor:
    """Vaswani et al.'s positions (max_len, d_model): sin and cos of pos / 10000^{2i/d}."""
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]  # (T, 1)
    angle = pos / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2], pe[:, 1::2] = angle.sin(), angle.cos()
    return pe  # (T, d_model)
