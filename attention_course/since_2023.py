r"""Chapter 10's given parts: the cache of multi-head latent attention.

DeepSeek-V2's layer keeps, for every position t, the latent c_t (d_latent numbers) and the
rotary key k^R_t (d_rope numbers) that its heads share, and nothing else: the heads' keys
and values are up-projected from c_t when they are needed (or never, in the absorbed form).

``LatentCache`` writes new positions into preallocated buffers as chapter 08's graded
``update_cache`` does, so it lives with chapter 08's handed-out code
(``attention_course/handed_out/language_models.py``), which a kit holds only once chapter
08 is handed in; it is found here by its chapter 10 name.

``shapes_made`` lists the shapes of the tensors a call builds: the absorbed form's test looks
among them for a key or a value of every cached position.
"""

from __future__ import annotations


def __getattr__(name: str):
    if name == "LatentCache":
        try:
            from attention_course.handed_out.language_models import LatentCache
        except ImportError as error:
            raise ImportError(
                "LatentCache comes with chapter 08's handed-out code, which this kit does not "
                "hold yet: install the kit of chapter 09 or later (your instructor hands it "
                "out when chapter 10 opens)"
            ) from error
        return LatentCache
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def shapes_made(fn, *args, **kwargs):
    """Run ``fn(*args, **kwargs)`` and return its result and the shape of every tensor that
    an operation on the way gave back (views included), in order, as PyTorch's dispatcher
    sees them: what a decode step builds, whatever the Python code that built it."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class Watch(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.shapes: list[tuple[int, ...]] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            self.shapes += [tuple(t.shape) for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
            return out

    with Watch() as watch:
        result = fn(*args, **kwargs)
    return result, watch.shapes
