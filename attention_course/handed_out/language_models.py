"""Chapter 08's cache, as the course hands it to the chapters after it: the latent cache of
chapter 10's multi-head latent attention, whose ``update`` writes new positions into
preallocated buffers as chapter 08's graded ``update_cache`` does. In a kit only from the
kit after chapter 08's (``attention_course/handed_out/__init__.py``)."""

from __future__ import annotations

import torch


class LatentCache:
    r"""Preallocated buffers for the latents and the shared rotary keys of one layer.

    ``update(c_new, k_rope_new)``, with (B, T_new, d_latent) and (B, T_new, d_rope), writes
    the new positions after those held and returns all of them: (B, length, d_latent) and
    (B, length, d_rope), ``length`` counting the new ones.
    """

    def __init__(self, batch: int, max_len: int, d_latent: int, d_rope: int, dtype=torch.float32):
        self.c = torch.zeros(batch, max_len, d_latent, dtype=dtype)
        self.k_rope = torch.zeros(batch, max_len, d_rope, dtype=dtype)
        self.length, self.max_len = 0, max_len

    def update(self, c_new: torch.Tensor, k_rope_new: torch.Tensor):
        start, stop = self.length, self.length + c_new.size(1)
        if stop > self.max_len:
            raise ValueError(
                f"the cache has room for {self.max_len} positions; {start} are held and "
                f"{c_new.size(1)} more were given"
            )
        if k_rope_new.size(1) != c_new.size(1):
            raise ValueError(
                f"{c_new.size(1)} latents but {k_rope_new.size(1)} rotary keys: give one of "
                "each per new position"
            )
        self.c[:, start:stop] = c_new
        self.k_rope[:, start:stop] = k_rope_new
        self.length = stop
        return self.c[:, :stop], self.k_rope[:, :stop]
