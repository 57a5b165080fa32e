"""Toy sequence tasks: copy, reverse and sort lists of digits.

Small enough to train in seconds, structured enough that attention maps are readable:
copying attends along the diagonal, reversing along the anti-diagonal.
"""

import torch

TASKS = ("copy", "reverse", "sort")


def toy_task(
    task: str,
    num_examples: int,
    length: int = 8,
    vocab_size: int = 10,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random inputs ``x`` of shape ``(N, length)`` with ids in ``[0, vocab_size)`` and the
    targets ``y`` of the same shape: ``x`` itself, ``x`` reversed, or ``x`` sorted."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose one of {TASKS}")
    if num_examples < 1 or length < 1 or vocab_size < 2:
        raise ValueError(
            f"need num_examples >= 1, length >= 1, vocab_size >= 2; "
            f"got {num_examples}, {length}, {vocab_size}"
        )
    x = torch.randint(0, vocab_size, (num_examples, length), generator=generator)
    if task == "copy":
        y = x.clone()
    elif task == "reverse":
        y = x.flip(-1)
    else:
        y = x.sort(dim=-1).values
    return x, y
