"""`linear_layout`: a copy of a tensor mapped linearly over the IPU tiles
(popxl_addons.ops.linear_layout).

On the IPU the copy gives the tensor a tile layout in blocks of `bs` elements; the NumPy
runtime has no tiles, so it is a copy of the values (`ops.identity`, whose gradient passes
through; upstream's op has none).
"""

from __future__ import annotations

import popxl
import popxl.ops as ops

__all__ = ["linear_layout"]


def linear_layout(t: popxl.Tensor, bs: int = 1) -> popxl.Tensor:
    """A copy of `t` (on the IPU: laid out linearly over the tiles in multiples of `bs`
    elements).

    Args:
        t: the tensor to copy.
        bs: the grain of the tile mapping, a positive int.
    """
    what = "addons.ops.linear_layout"
    if not isinstance(t, popxl.Tensor):
        raise TypeError(f"{what}: t must be a popxl Tensor, got {type(t).__name__}")
    if not isinstance(bs, int) or isinstance(bs, bool) or bs < 1:
        raise ValueError(f"{what}: bs must be a positive int, got {bs!r}")
    return ops.identity(t)
