"""Values handed out of the student's kernel, for a check the student's code never touches.

A hidden test calls ``hand_out(value, name)`` on a value it has just checked, computed from
inputs the test made itself (seeded generators, never the global random state)::

    out, w = scaled_dot_product_attention(Q, K, V)
    check_close(out, ...)            # the check in the kernel: the student can rebind it
    hand_out(out, "output")          # the value, for the check outside the kernel

In grading mode, ``hand_out`` publishes a *sketch* of the value as display data of type
:data:`MIME_TYPE` in the test cell's outputs; otherwise it does nothing. The grader
(``autograder/outside.py``) runs the solution notebook once in a kernel of its own (the
*key*), and compares, in its own process, each test cell's sketches with the key's: a cell
whose sketches are missing, extra or different loses its points, whatever the checks in
the kernel said. Rebinding ``torch.allclose``, the course's checks or the exception hooks
then earns nothing: the verdict is not taken in the student's process.

The sketch of a tensor x with n entries is its shape, dtype, NaN count, and for each of
:data:`PROJECTIONS` fixed random vectors w_j (uniform in [-1, 1], from a generator seeded
with :data:`SEED`, so the grader can make them again)::

    s_j = sum_i w_ji x_i        a_j = sum_i |w_ji| |x_i|        (NaN taken as 0)

If every entry of x is within ``atol + rtol |k_i|`` of the key's k_i (``check_close``'s
rule), then ``|s_j(x) - s_j(k)| <= atol sum_i |w_ji| + rtol a_j(k)``: a right answer always
passes, and a wrong one moves some s_j with probability one.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from attention_course.runtime import grading_mode

if TYPE_CHECKING:
    import torch

MIME_TYPE = "application/vnd.attention-course.handout+json"
PROJECTIONS = 4
SEED = 20240613
MAX_ENTRIES = 1 << 22  # a value with more entries is sketched on its first MAX_ENTRIES


def projections(n: int) -> torch.Tensor:
    """The (PROJECTIONS, n) float64 matrix of the sketch of a value with n entries."""
    import torch  # here, not above: the grader's processes import this module without torch

    g = torch.Generator().manual_seed(SEED)
    return torch.rand(PROJECTIONS, n, generator=g, dtype=torch.float64) * 2 - 1


def sketch(value, name: str = "value") -> dict:
    """A JSON-able sketch of a tensor, a number, a bool, or a tuple/list of them."""
    import torch

    if isinstance(value, list | tuple):
        return {"name": name, "kind": "sequence", "items": [sketch(v, name) for v in value]}
    if isinstance(value, bool):
        return {"name": name, "kind": "bool", "value": value}
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            return {"name": name, "kind": "number", "value": repr(value)}
        return {"name": name, "kind": "number", "value": value}
    if not isinstance(value, torch.Tensor):
        return {"name": name, "kind": "other", "type": type(value).__name__}
    x = value.detach().to("cpu").flatten()[:MAX_ENTRIES]
    x = x.double() if x.dtype != torch.bool else x.to(torch.float64)
    nan = torch.isnan(x)
    x = torch.where(nan, torch.zeros_like(x), x)
    inf = torch.isinf(x)
    x = torch.where(inf, torch.sign(x) * 1e300, x)
    w = projections(x.numel())
    return {
        "name": name,
        "kind": "tensor",
        "shape": list(value.shape),
        "dtype": str(value.dtype).removeprefix("torch."),
        "nan": int(nan.sum()),
        "inf": int(inf.sum()),
        "s": (w @ x).tolist(),
        "a": (w.abs() @ x.abs()).tolist(),
        # sum_i |w_ji|: the grader takes it from the key's sketch, never a submission's,
        # and so needs no PyTorch of its own
        "w": w.abs().sum(1).tolist(),
    }


def hand_out(value, name: str = "value", atol: float = 1e-5, rtol: float = 1e-4) -> None:
    """In grading mode, publish a sketch of ``value`` for the check outside the kernel,
    which accepts entries within ``atol + rtol |key|`` of the key's (the tolerances the
    key's own run hands out count, not a submission's)."""
    if not grading_mode():
        return
    from IPython.display import publish_display_data

    data = {**sketch(value, name), "atol": atol, "rtol": rtol}
    publish_display_data({MIME_TYPE: data, "text/plain": ""})
