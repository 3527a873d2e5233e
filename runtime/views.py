"""What a view kernel's output is: the one definition of a view.

`rt-views` checks chains of views with `view_array` (on stride-only stand-ins) and both
plans bind view outputs with it. Which kernels can be views is the `ViewLike` trait of
their op class; `popxl.transpose` permutes axes, the others keep the C order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from xl.dialects.popxl import TransposeOp
from xl.runtime.registry import KernelClass, is_view_like


def view_array(
    cls: KernelClass | None, x: np.ndarray, shape: tuple[int, ...], perm: Sequence[int] | None
) -> np.ndarray | None:
    """The NumPy view of `x` that the output of a kernel of op class `cls` is bound to,
    or None when `cls` is not view-like or NumPy cannot express the view without copying
    (e.g. flattening a transposed view)."""
    if not is_view_like(cls):
        return None
    if cls is TransposeOp:
        order = tuple(int(a) for a in perm) if perm is not None else tuple(range(x.ndim))[::-1]
        if sorted(order) != list(range(x.ndim)):
            return None
        v = x.transpose(order)
    else:
        try:
            v = np.reshape(x, shape, copy=False)
        except ValueError:
            return None
    return v if v.shape == tuple(shape) else None
